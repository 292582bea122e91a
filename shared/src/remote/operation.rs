//! One remote operation as types: what it is given (its values, each assigned and quoted once
//! by the script it makes) and what it answers (its reply lines, parsed once). A tool's body then
//! reads `let reply = remote::run::<JobNodes>(&ssh, &job)?;` followed by its decisions.
//!
//! Every single execution a tool makes goes through here; the operations a tool alone uses are
//! declared beside it (slurm-alloc's `AllocUp`, slurm-fetch's `FetchList`, ...), the ones several
//! share are here and in [`crate::remote::running`]. What holds its execution open and talks over
//! it (slurm-watch's polls, the fused submission, slurm-runs' query, an attached terminal) is a
//! conversation, not an operation: those keep their own typed replies (`poll::Reply`, ...).

use std::time::Duration;

use crate::remote::quote::Script;
use crate::remote::ssh::Ssh;
use crate::support::process::{Output, StreamWriter};
use crate::ToolError;

pub trait Operation {
    /// What the operation is given.
    type Params: ?Sized;
    /// What it answers.
    type Reply;
    /// How long one execution may take.
    const DEADLINE: Duration;
    /// The script: the values assigned, then the `.sh` files it runs.
    fn script(params: &Self::Params) -> crate::Result<Script>;
    /// The reply, from the execution's output (its stdout's tagged lines, its exit status); the
    /// params are there for what an error names.
    fn reply(params: &Self::Params, out: &Output) -> crate::Result<Self::Reply>;
    /// The deadline of this execution, when it depends on what it is given.
    fn deadline(_params: &Self::Params) -> Duration {
        Self::DEADLINE
    }
    /// Whether the script's progress lines (its stderr) are shown to the person as they come.
    fn shows_progress(_params: &Self::Params) -> bool {
        false
    }
}

/// Run `O` through `ssh` (one execution): its script, then its reply.
pub fn run<O: Operation>(ssh: &Ssh, params: &O::Params) -> crate::Result<O::Reply> {
    run_sending::<O>(ssh, params, None)
}

/// [`run`], with `payload` streamed to the script's stdin (an archive, a bundle).
pub fn run_sending<O: Operation>(
    ssh: &Ssh,
    params: &O::Params,
    payload: Option<StreamWriter>,
) -> crate::Result<O::Reply> {
    let out = execute::<O>(ssh, params, payload)?;
    O::reply(params, &out)
}

/// The first half of [`run_sending`] alone: the execution, its errors the connection's only
/// (lost, timed out, refused). For a caller whose next step depends on which half failed (a
/// submission is sent again after a lost connection, never after its script's own answer); it
/// then reads the output with `O::reply`.
pub fn execute<O: Operation>(
    ssh: &Ssh,
    params: &O::Params,
    payload: Option<StreamWriter>,
) -> crate::Result<Output> {
    let script = O::script(params)?;
    let deadline = O::deadline(params);
    if payload.is_none() && O::shows_progress(params) {
        return ssh.run_script_showing_progress(&script, deadline);
    }
    ssh.run_script(&script, payload, deadline)
}

/// The nodes a job ran on (job-nodes.sh): from accounting, else from scontrol; `None` when
/// neither knows.
pub struct JobNodes;

impl Operation for JobNodes {
    /// The job id.
    type Params = str;
    type Reply = Option<String>;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(job: &str) -> crate::Result<Script> {
        let mut s = Script::new();
        s.assign("job", job)?;
        s.raw(super::JOB_NODES);
        Ok(s)
    }

    fn reply(_: &str, out: &Output) -> crate::Result<Option<String>> {
        let text = out.stdout_text();
        let n = text.lines().next().unwrap_or("").trim().to_string();
        Ok((!n.is_empty() && n != "None assigned" && n != "(null)").then_some(n))
    }
}

/// The accounting of past jobs (usage-query.sh): one sacct for them all
/// ([`crate::slurm::usage::Answer`]).
pub struct UsageQuery;

impl Operation for UsageQuery {
    /// The job ids.
    type Params = [String];
    type Reply = crate::slurm::usage::Answer;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(ids: &[String]) -> crate::Result<Script> {
        crate::slurm::usage::query(ids)
    }

    /// A query cut short (its deadline, a signal) is `Failed`, said as such; otherwise sacct's
    /// own exit, in the reply's lines, decides.
    fn reply(_: &[String], out: &Output) -> crate::Result<Self::Reply> {
        if out.code.is_none() {
            return Ok(crate::slurm::usage::Answer::Failed(out.exit_text()));
        }
        Ok(crate::slurm::usage::Answer::parse(&out.stdout_text()))
    }
}

/// `scancel` of jobs or array tasks, one execution. A job that already ended is success
/// (docs/reliability.md 9): scancel says "already completed" or "Invalid job id" for it.
pub struct Scancel;

impl Operation for Scancel {
    /// The job (or task) ids.
    type Params = [String];
    type Reply = ();
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(ids: &[String]) -> crate::Result<Script> {
        let mut s = Script::new();
        s.raw("scancel");
        for id in ids {
            s.arg(id)?;
        }
        s.raw("\n");
        Ok(s)
    }

    fn reply(ids: &[String], out: &Output) -> crate::Result<()> {
        if out.success()
            || out.stderr_tail.contains("already completed")
            || out.stderr_tail.contains("Invalid job id")
        {
            return Ok(());
        }
        Err(
            ToolError::remote(format!("scancel {} failed", ids.join(" ")))
                .with_command(out.record()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(code: i32, stderr: &str) -> Output {
        Output::of(Some(code), "", stderr)
    }

    #[test]
    fn a_scancel_of_a_job_that_ended_is_success_and_any_other_failure_names_the_ids() {
        let ids = ["12".to_string(), "13_4".to_string()];
        assert!(Scancel::reply(&ids, &output(0, "")).is_ok());
        for ended in [
            "scancel: error: Kill job error on job id 12: Job/step already completed",
            "scancel: error: Invalid job id 12",
        ] {
            assert!(Scancel::reply(&ids, &output(1, ended)).is_ok(), "{ended}");
        }
        let e = Scancel::reply(&ids, &output(1, "scancel: error: Access/permission denied"))
            .unwrap_err();
        assert_eq!(e.message, "scancel 12 13_4 failed");
        let s = Scancel::script(&ids).unwrap();
        assert_eq!(s.as_str(), "scancel 12 13_4\n");
    }
}
