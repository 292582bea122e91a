//! Slurm facts shared by the tools: time limits, the enroot image form, the build architecture,
//! what Slurm's submission errors mean, and parsers for squeue/sacct/scontrol output
//! (Slurm 22.05 wording; research/ecosystem.md §2).

pub mod container;
pub mod pending;
pub mod pyxis;
mod settings;
pub mod sweep;
pub mod usage;
pub use pyxis::enroot_image;
pub use settings::{mounts, Settings, SettingsInput, SiteOptions, DISTRIBUTED_ENV};

use crate::contract::doc::field_error;
use crate::contract::error::{ErrorKind, Result, ToolError};

/// Parse a walltime `[D-]HH:MM:SS` into seconds (minutes and seconds below 60).
pub fn parse_time_limit(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    if parts.len() != 3
        || parts.iter().any(|p| {
            p.is_empty() || p.len() > 2 && parts[0] != *p || !p.bytes().all(|b| b.is_ascii_digit())
        })
    {
        return None;
    }
    let h: u64 = parts[0].parse().ok()?;
    let m: u64 = parts[1].parse().ok()?;
    let sec: u64 = parts[2].parse().ok()?;
    if parts[1].len() != 2
        || parts[2].len() != 2
        || m >= 60
        || sec >= 60
        || (s.contains('-') && h >= 24)
    {
        return None;
    }
    seconds_of(days, h, m, sec)
}

/// Slurm keeps a time limit as minutes in 32 bits; nothing longer can be a real limit, and keeping
/// under it leaves every later sum (a margin, a rounding up to the hour) far from overflowing.
pub const MAX_DURATION_SECS: u64 = u32::MAX as u64 * 60;

/// `days, h, m, s` as seconds, with checked arithmetic: an absurd value is `None` (refused as bad
/// input by the caller), never a panic or a wrapped number.
fn seconds_of(days: u64, h: u64, m: u64, s: u64) -> Option<u64> {
    let total = days
        .checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m.checked_mul(60)?)?
        .checked_add(s)?;
    (total <= MAX_DURATION_SECS).then_some(total)
}

/// Check `time_limit`, returning it unchanged.
pub fn check_time_limit(s: &str) -> Result<&str> {
    match parse_time_limit(s) {
        Some(secs) if secs > 0 => Ok(s),
        _ => Err(field_error(
            "time_limit",
            &format!("is {s:?}, which is not a walltime of the form [D-]HH:MM:SS"),
        )
        .with_hint("write it like \"01:30:00\" (90 minutes) or \"1-00:00:00\" (one day)")),
    }
}

/// Seconds as `[D-]HH:MM:SS`.
pub fn format_duration(secs: u64) -> String {
    let (d, rest) = (secs / 86_400, secs % 86_400);
    let hms = format!("{:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60);
    if d > 0 {
        format!("{d}-{hms}")
    } else {
        hms
    }
}

/// Parse Slurm's duration forms: `[D-][HH:]MM:SS`, `M:SS`, plus `UNLIMITED`/`INVALID`/`N/A` (None).
pub fn parse_slurm_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let nums: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match nums.as_slice() {
        [m, s] => seconds_of(days, 0, *m, *s),
        [h, m, s] => seconds_of(days, *h, *m, *s),
        _ => None,
    }
}

/// Shell text: `ov` is `--overlap` where srun has it (Slurm 20.11 and later), so steps run beside
/// each other in a job or allocation; empty on older srun.
pub const OVERLAP: &str =
    "ov=; if srun --help 2>&1 | grep -q -- '--overlap'; then ov=--overlap; fi\n";

/// Shell function `nap SECONDS`: sleep a fraction of a second where sleep takes fractions (GNU),
/// else a whole second, so a wait loop never spins on a sleep that refuses "0.1" (busybox, BSD,
/// old coreutils).
pub const NAP: &str = "nap() { sleep \"$1\" 2>/dev/null || sleep 1; }\n";

/// The CUDA architecture for the build (docs/migrating.md, step 5).
pub fn cuda_arch(device_type: Option<&str>) -> &'static str {
    match device_type.map(str::to_ascii_uppercase).as_deref() {
        Some("B200" | "GB200" | "GB300" | "B300") => "100-real",
        Some("H100" | "H200") => "90-real",
        Some("L40S") => "89-real",
        Some("A100") => "80-real",
        _ => "100-real",
    }
}

/// A value that goes into a Slurm option: no newline or control characters (squeue and sacct
/// print line-based output, and Slurm itself rejects them), not empty.
/// A Slurm job id: digits, or `<array id>_<task>` (both parts digits). Checked before an id from a
/// document or a remote answer goes anywhere.
pub fn is_job_id(id: &str) -> bool {
    let mut parts = id.splitn(2, '_');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let first = parts.next();
    match parts.next() {
        None => digits(first),
        Some(task) => digits(first) && digits(Some(task)),
    }
}

/// A job id from a document, checked: an error naming `field` when it is not one.
pub fn check_job_id(field: &str, id: &str) -> Result<()> {
    if is_job_id(id) {
        return Ok(());
    }
    Err(field_error(
        field,
        &format!("has job_id {id:?}, which is not a Slurm job id"),
    )
    .with_hint(format!(
        "`{field}` is written by a slurm-tools tool: rerun it rather than editing the id"
    )))
}

pub fn check_slurm_value(field: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.chars().any(|c| c.is_control()) {
        return Err(field_error(
            field,
            &format!(
                "is {}, which Slurm cannot take (empty, or a newline/control character)",
                crate::remote::quote::preview(v)
            ),
        )
        .with_hint(format!("give `{field}` as one line of plain text")));
    }
    Ok(())
}

/// The option a Slurm command called unrecognized (`srun: unrecognized option '--requeue'`).
fn unrecognized_option(stderr: &str) -> Option<String> {
    let at = stderr.find("unrecognized option")?;
    let rest = &stderr[at..];
    let start = rest.find(['\'', '`', '"'])? + 1;
    let end = rest[start..].find(['\'', '"'])?;
    let opt = &rest[start..start + end];
    Some(opt.split('=').next().unwrap_or(opt).to_string())
}

/// What a rejected submission means, from Slurm's stderr: (field at fault, message, hint).
pub fn submission_error(stderr: &str) -> ToolError {
    let lower = stderr.to_ascii_lowercase();
    let last = stderr
        .lines()
        .rev()
        .find(|l| l.contains("error"))
        .unwrap_or_else(|| stderr.lines().last().unwrap_or(""))
        .trim()
        .to_string();
    let pick = |field: &str, hint: &str| {
        ToolError::field(
            ErrorKind::BadInput,
            field,
            format!("Slurm refused the job: {last}"),
        )
        .with_hint(hint.to_string())
    };
    if lower.contains("unable to contact slurm controller")
        || lower.contains("slurm_persist_conn_open")
        || lower.contains("socket timed out")
        || lower.contains("connection refused")
    {
        return ToolError::remote(format!("the Slurm controller did not answer: {last}"))
            .with_hint("no job was accepted; check the controller on the cluster (`scontrol ping`), then rerun slurm-submit on the same document");
    }
    if lower.contains("invalid account") || lower.contains("account/partition combination") {
        pick("account", "set `account` to an account you may use (`sacctmgr show assoc user=$USER format=account,partition`)")
    } else if lower.contains("invalid partition") || lower.contains("no partition specified") {
        pick(
            "partition",
            "set `partition` to one of the cluster's partitions (`sinfo -s`)",
        )
    } else if lower.contains("time limit") {
        pick(
            "time_limit",
            "lower `time_limit` to the partition's limit (`sinfo -o '%P %l'`)",
        )
    } else if lower.contains("node count")
        || lower.contains("node configuration is not available")
        || lower.contains("more processors requested")
    {
        pick(
            "node_count",
            "ask for fewer nodes, tasks per node or GPUs (`sinfo -o '%P %D %G'` shows what exists)",
        )
    } else if let Some(opt) = unrecognized_option(stderr) {
        if opt.starts_with("--container") {
            pick("container_image", "this cluster's srun does not take container flags (no pyxis): run slurm-ssh-preflight before slurm-submit (it picks Apptainer where the cluster has it), set `container_runtime` to \"apptainer\", or remove `container_image`")
        } else {
            ToolError::field(
                ErrorKind::BadInput,
                "slurm_options",
                format!("Slurm refused the job: this command does not take the option {opt}: {last}"),
            )
            .with_hint(format!("remove {opt} from `slurm_options` (sbatch, srun and salloc each take every entry; some options exist for one of them only)"))
        }
    } else if lower.contains("container") {
        pick("container_image", "this cluster's srun does not take container flags (no pyxis): run slurm-ssh-preflight before slurm-submit (it picks Apptainer where the cluster has it), set `container_runtime` to \"apptainer\", or remove `container_image`")
    } else if lower.contains("invalid qos") || lower.contains("qos") {
        pick("qos", "set `qos` to a QoS your association may use (`sacctmgr show assoc user=$USER format=account,qos`)")
    } else if lower.contains("memory specification") || lower.contains("mem-per") {
        pick(
            "mem",
            "lower `mem` (or `mem_per_gpu`) to what the nodes have (`sinfo -o '%P %m'`)",
        )
    } else if lower.contains("reservation") {
        pick("reservation", "check `reservation` (`scontrol show reservation`): its name, and that you may use it now")
    } else if lower.contains("gres") || lower.contains("generic resource") {
        pick(
            "gres",
            "check `gres` against what the nodes offer (`sinfo -o '%P %G'`), e.g. \"gpu:a100:2\"",
        )
    } else {
        ToolError::remote(format!("Slurm refused the job: {last}"))
            .with_hint("see Slurm's message below")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absurd_durations_are_refused_not_wrapped() {
        for v in [
            "5124095576030432:00:00",
            "213503982334602-00:00:00",
            "18446744073709551615:00:00",
            "99999999999-00:00:00",
        ] {
            assert_eq!(parse_time_limit(v), None, "{v}");
            assert!(check_time_limit(v).is_err(), "{v}");
            assert_eq!(parse_slurm_duration(v), None, "{v}");
        }
        assert_eq!(parse_time_limit("365-00:00:00"), Some(365 * 86_400));
        assert_eq!(parse_slurm_duration("1-02:03:04"), Some(93_784));
    }

    #[test]
    fn job_ids() {
        for ok in ["1", "123456", "12_3"] {
            assert!(is_job_id(ok), "{ok}");
        }
        for bad in ["", "_", "1_", "_1", "1_2_3", "12a", "1;rm", "-1", " 1"] {
            assert!(!is_job_id(bad), "{bad}");
        }
        assert_eq!(
            check_job_id("job", "x").unwrap_err().field.as_deref(),
            Some("job")
        );
    }

    #[test]
    fn time_limits() {
        assert_eq!(parse_time_limit("00:05:00"), Some(300));
        assert_eq!(parse_time_limit("1-02:00:00"), Some(93_600));
        assert_eq!(parse_time_limit("100:00:00"), Some(360_000));
        for bad in [
            "5",
            "5:00",
            "00:60:00",
            "00:00:60",
            "1-24:00:00",
            "a:b:c",
            "-1:00:00",
            "00:5:00",
            "",
            "01:00:00 ",
        ] {
            assert_eq!(parse_time_limit(bad), None, "{bad}");
        }
    }

    #[test]
    fn slurm_durations() {
        assert_eq!(parse_slurm_duration("5:03"), Some(303));
        assert_eq!(parse_slurm_duration("1:02:03"), Some(3723));
        assert_eq!(parse_slurm_duration("2-00:00:01"), Some(172_801));
        assert_eq!(parse_slurm_duration("UNLIMITED"), None);
        assert_eq!(format_duration(93_600), "1-02:00:00");
    }

    #[test]
    fn archs() {
        assert_eq!(cuda_arch(Some("h100")), "90-real");
        assert_eq!(cuda_arch(Some("GB200")), "100-real");
        assert_eq!(cuda_arch(None), "100-real");
    }

    #[test]
    fn an_unreachable_controller_is_not_a_refusal() {
        let e = submission_error("sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n");
        assert_eq!(e.kind, ErrorKind::Remote);
        assert!(
            e.message.contains("controller did not answer"),
            "{}",
            e.message
        );
        assert!(e.field.is_none());
    }

    #[test]
    fn submission_errors_name_the_field() {
        let e = submission_error("srun: error: Unable to allocate resources: Invalid account or account/partition combination specified\n");
        assert_eq!(e.field.as_deref(), Some("account"));
        let e = submission_error("sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n");
        assert_eq!(e.field.as_deref(), Some("partition"));
        let e = submission_error(
            "srun: unrecognized option '--requeue'\nTry \"srun --help\" for more information\n",
        );
        assert_eq!(e.field.as_deref(), Some("slurm_options"));
        assert!(e.message.contains("--requeue"), "{}", e.message);
        let e = submission_error("srun: unrecognized option '--container-image=x'\n");
        assert_eq!(e.field.as_deref(), Some("container_image"));
        let e = submission_error(
            "sbatch: error: Batch job submission failed: Invalid qos specification\n",
        );
        assert_eq!(e.field.as_deref(), Some("qos"));
        let e = submission_error("srun: error: Memory specification can not be satisfied\n");
        assert_eq!(e.field.as_deref(), Some("mem"));
        let e = submission_error(
            "sbatch: error: Batch job submission failed: Requested reservation is invalid\n",
        );
        assert_eq!(e.field.as_deref(), Some("reservation"));
        let e = submission_error("sbatch: error: Invalid generic resource (gres) specification\n");
        assert_eq!(e.field.as_deref(), Some("gres"));
    }
}

/// One `squeue -h -o '%T|%r|%S|%M|%l|%L'` line (run with `SLURM_TIME_FORMAT=%s`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    pub state: String,
    pub reason: String,
    /// Start time (actual, or the scheduler's estimate while pending), epoch seconds.
    pub start: Option<u64>,
    pub used: Option<u64>,
    pub limit: Option<u64>,
    pub left: Option<u64>,
}

pub const SQUEUE_FORMAT: &str = "%T|%r|%S|%M|%l|%L";

pub fn parse_squeue(line: &str) -> Option<QueueEntry> {
    let f: Vec<&str> = line.trim().split('|').collect();
    if f.len() < 6 || f[0].is_empty() {
        return None;
    }
    Some(QueueEntry {
        state: f[0].to_string(),
        reason: f[1].to_string(),
        start: f[2].parse().ok().filter(|s| *s > 0),
        used: parse_slurm_duration(f[3]),
        limit: parse_slurm_duration(f[4]),
        left: parse_slurm_duration(f[5]),
    })
}

/// The job's line of `sacct -X -n -P --format=State,ExitCode,Elapsed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountingEntry {
    /// The base state (`CANCELLED by 1001` gives `CANCELLED`).
    pub state: String,
    /// The uid after `CANCELLED by`, when Slurm recorded it.
    pub cancelled_by_uid: Option<u32>,
    /// `exit:signal`.
    pub exit_code: String,
    pub elapsed: String,
}

pub const SACCT_FORMAT: &str = "State,ExitCode,Elapsed";

pub fn parse_sacct(line: &str) -> Option<AccountingEntry> {
    let f: Vec<&str> = line.trim().split('|').collect();
    if f.len() < 3 || f[0].is_empty() {
        return None;
    }
    let mut words = f[0].split_whitespace();
    let state = words.next()?.trim_end_matches('+').to_string();
    let cancelled_by_uid = match (words.next(), words.next()) {
        (Some("by"), Some(uid)) => uid.parse().ok(),
        _ => None,
    };
    Some(AccountingEntry {
        state,
        cancelled_by_uid,
        exit_code: f[1].to_string(),
        elapsed: f[2].to_string(),
    })
}

/// `scontrol show job -o` key=value pairs (the fallback when accounting is disabled).
pub fn parse_scontrol(line: &str) -> std::collections::BTreeMap<String, String> {
    let mut m = std::collections::BTreeMap::new();
    for word in line.split_whitespace() {
        if let Some((k, v)) = word.split_once('=') {
            m.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    m
}

/// States after which a job will not run again on its own.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "TIMEOUT"
            | "CANCELLED"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "PREEMPTED"
            | "REVOKED"
            | "SPECIAL_EXIT"
    )
}

/// Lines slurmstepd writes when the kernel OOM killer hit the job (22.05 and later wordings).
pub fn is_oom_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    (l.contains("oom-kill")
        || l.contains("oom_kill")
        || l.contains("out-of-memory")
        || l.contains("exceeded job memory limit"))
        && (l.contains("slurmstepd") || l.contains("detected"))
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn squeue_lines() {
        let e = parse_squeue("PENDING|Resources|1796220000|0:00|4:00:00|4:00:00").unwrap();
        assert_eq!(e.state, "PENDING");
        assert_eq!(e.start, Some(1_796_220_000));
        assert_eq!(e.limit, Some(14_400));
        assert_eq!(
            parse_squeue("RUNNING|None|N/A|5:03|UNLIMITED|UNLIMITED")
                .unwrap()
                .used,
            Some(303)
        );
        assert_eq!(parse_squeue(""), None);
    }

    #[test]
    fn sacct_lines() {
        let e = parse_sacct("CANCELLED by 1001|0:15|00:00:07").unwrap();
        assert_eq!(
            (e.state.as_str(), e.cancelled_by_uid),
            ("CANCELLED", Some(1001))
        );
        let e = parse_sacct("FAILED|3:0|00:00:01").unwrap();
        assert_eq!(e.exit_code, "3:0");
        assert!(is_final("TIMEOUT") && !is_final("RUNNING"));
        assert!(is_oom_line(
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5.batch."
        ));
    }
}
