//! A running job or held allocation to go into (slurm-attach) or reach (slurm-forward): which one
//! the document names, where its code is, its named container, and the remote check that it
//! runs, with what to say when it does not.

use crate::contract::error::{ErrorKind, Result, ToolError};
use crate::contract::schema::{Allocation, AllocationState, Job};
use crate::remote::exit::{self, Attach as Exit, ExitCodes};
use crate::remote::layout::Layout;
use crate::remote::quote::Script;
use crate::slurm;
use crate::support::process::Output;

/// What to go into: the job id, its named container, the directory its code is in.
#[derive(Debug, Clone)]
pub struct Target {
    pub job_id: String,
    /// pyxis: the named container.
    pub container: Option<String>,
    /// Apptainer: the launcher that runs a command in the job's container.
    pub launcher: Option<String>,
    /// The job's code tree, else the checkout, else remote_cwd; `~` when none is known.
    pub dir: String,
}

crate::document_input! {
    /// What names the job to reach: a held allocation or a submitted job, and where its code is.
    pub struct TargetInput {
        pub allocation: Option<Allocation> = section,
        pub job: Option<Job> = section,
        /// `remote_repo_path`, else `remote_cwd`, when the job names no tree.
        pub layout: crate::remote::layout::LayoutInput = part,
    }
}

/// The document's held allocation (`allocation`, not released) or, without one, its submitted
/// job (`job`).
pub fn target(input: &TargetInput) -> Result<Target> {
    let layout = Layout::of(&input.layout);
    let fallback_dir = || -> Result<String> {
        match (&input.layout.remote_repo_path, &input.layout.remote_cwd) {
            (Some(d), _) => layout.absolute("remote_repo_path", d),
            (None, Some(d)) => layout.absolute("remote_cwd", d),
            (None, None) => Ok("~".to_string()),
        }
    };
    if let Some(a) = input.allocation.clone() {
        if a.state != Some(AllocationState::Released) {
            if let Some(id) = a.job_id {
                slurm::check_job_id("allocation", &id)?;
                return Ok(Target {
                    job_id: id,
                    container: a.container_name,
                    launcher: a.container_launcher,
                    dir: fallback_dir()?,
                });
            }
        }
    }
    if let Some(j) = input.job.clone() {
        if let Some(id) = j.job_id {
            slurm::check_job_id("job", &id)?;
            let dir = match j.tree.or(j.remote_repo_path) {
                Some(d) => d,
                None => fallback_dir()?,
            };
            return Ok(Target {
                job_id: id,
                container: j.container_name,
                launcher: j.container_launcher,
                dir,
            });
        }
    }
    Err(crate::contract::doc::missing(
        "allocation",
        "nothing to reach: give a document with a held allocation (slurm-alloc up) or a submitted job (slurm-submit)",
    ))
}

/// Shell text that stops unless `$job` runs: exits with [`Exit`] codes and says the state on
/// stderr (`@@slurm-tools PENDING <start>`, `@@slurm-tools STATE <state>`: lines a passed-through
/// stderr leaves out, see `process::Cmd::output_through`). Sets `nodelist` to its nodes.
pub fn check_running(s: &mut Script, job: &str) -> Result<()> {
    exit::assign::<Exit>(s)?;
    s.assign("job", job)?;
    s.raw(crate::remote::JOB_RUNNING);
    s.raw("check_running\n");
    Ok(())
}

/// The error for a check that said the job does not run (`None`: it runs).
pub fn not_running_error(job: &str, out: &Output) -> Option<ToolError> {
    let said = |prefix: &str| {
        out.stderr_tail
            .lines()
            .find_map(|l| l.strip_prefix("@@slurm-tools ")?.strip_prefix(prefix))
            .map(str::trim)
            .map(str::to_string)
    };
    match Exit::from_status(out.code)? {
        Exit::Pending => {
            let eta = said("PENDING ")
                .filter(|e| !e.is_empty() && e != "N/A")
                .map(|e| format!(" (Slurm expects it to start at {e})"))
                .unwrap_or_default();
            Some(
                ToolError::new(
                    ErrorKind::NeedsPerson,
                    format!("job {job} is still pending{eta}: there is nothing to reach yet"),
                )
                .with_hint("wait until it runs (slurm-watch, or squeue), then try again"),
            )
        }
        Exit::Gone => Some(
            ToolError::remote(format!("job {job} is not in the queue any more: it has ended"))
                .with_hint("its verdict: slurm-watch on the same document; submit or `slurm-alloc up` again for a new one"),
        ),
        Exit::NotRunning => Some(
            ToolError::remote(format!(
                "job {job} is {}, not running: there is nothing to reach",
                said("STATE ").unwrap_or_else(|| "not running".into())
            ))
            .with_hint("wait for it to run again, or follow it to its end with slurm-watch"),
        ),
    }
}

/// Shell text after [`check_running`]: sets `node` to `want` when it is one of the job's nodes,
/// else to the job's first; a `want` that is not the job's prints `NOT_IN_JOB <its nodes>` and
/// ends the script (see [`run_on_job`]).
pub fn pick_node(s: &mut Script, want: Option<&str>) -> Result<()> {
    // Always one argument (empty: the job's first node), so every call passes what it reads.
    s.raw("pick_node");
    s.arg(want.unwrap_or(""))?;
    s.raw("\n");
    Ok(())
}

/// The `KEY value` lines a script on a running job printed.
pub struct Reply {
    pub out: Output,
    text: String,
}

impl Reply {
    /// The value of the line tagged `key` (e.g. `"NODE"`), trimmed.
    pub fn field(&self, key: &str) -> Option<String> {
        crate::remote::Tagged::of(&self.text)
            .first(key.trim_end())
            .map(|v| v.trim().to_string())
    }

    /// Whether a line is tagged `tag`.
    pub fn says(&self, tag: &str) -> bool {
        crate::remote::Tagged::of(&self.text).has(tag)
    }
}

/// The reply of a script built with [`check_running`] and [`pick_node`] for job `job_id` (an
/// operation's `reply` calls it first): a job that does not run or a `want` node that is not
/// the job's is an error here; the rest is the operation's.
pub fn on_job(job_id: &str, want: Option<&str>, out: &Output) -> Result<Reply> {
    if let Some(e) = not_running_error(job_id, out) {
        return Err(e);
    }
    let reply = Reply {
        text: out.stdout_text(),
        out: out.clone(),
    };
    if let Some(nodes) = reply.field("NOT_IN_JOB") {
        return Err(ToolError::bad_input(format!(
            "--node {} is not a node of job {job_id} (its nodes: {nodes})",
            want.unwrap_or_default(),
        )));
    }
    Ok(reply)
}

/// Whether a job still runs (job-running.sh's check alone): `None` when it does, else the error
/// that says what it is instead (pending, ended, another state).
pub struct StillRunning;

impl crate::remote::Operation for StillRunning {
    /// The job id.
    type Params = str;
    type Reply = Option<ToolError>;
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

    fn script(job: &str) -> Result<Script> {
        let mut s = Script::new();
        check_running(&mut s, job)?;
        Ok(s)
    }

    fn reply(job: &str, out: &Output) -> Result<Option<ToolError>> {
        Ok(not_running_error(job, out))
    }
}
