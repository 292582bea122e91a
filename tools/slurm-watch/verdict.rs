//! The verdict: how a job ended, from what Slurm says (sacct or scontrol) and what the logs
//! showed. Pure, so every combination is table-tested here, without a cluster.

use super::scan::{Findings, Patterns};
use shared::contract::schema::{JobKind, Source, Status};
use shared::slurm::AccountingEntry;

/// What the watch found when it stopped: the verdict's own fields, before the bookkeeping every
/// report has ([`finish_report`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub status: Status,
    pub slurm_state: String,
    pub exit_code: Option<String>,
    pub elapsed: Option<String>,
    pub summary: String,
    pub source: Source,
    pub cancelled_by: Option<String>,
    pub success_patterns_missing: Option<Vec<String>>,
    pub hang_line: Option<String>,
    /// `pattern` or `stalled` for a hang.
    pub hang_reason: Option<String>,
    pub excerpt_lines: Option<u32>,
}

/// The verdict for a job that left the queue: Slurm's end (sacct or scontrol), refined by what
/// the logs showed. Pure: table-tested below.
pub fn final_verdict(
    kind: JobKind,
    f: &Findings,
    patterns: &Patterns,
    acct: &AccountingEntry,
    cancelled_by: Option<String>,
    source: Source,
) -> Verdict {
    let (mut status, mut summary) = match acct.state.as_str() {
        "COMPLETED" if acct.exit_code == "0:0" => (Status::Passed, "the job completed with exit code 0".to_string()),
        "COMPLETED" => (Status::Failed, format!("the job completed with exit code {}", acct.exit_code)),
        "FAILED" => (Status::Failed, format!("the job failed with exit code {} (exit:signal)", acct.exit_code)),
        "TIMEOUT" => (Status::Timeout, "the job reached its time limit".to_string()),
        "OUT_OF_MEMORY" => (Status::OutOfMemory, "the job ran out of memory".to_string()),
        "CANCELLED" => (
            Status::Cancelled,
            match &cancelled_by {
                Some(who) => format!("the job was cancelled by {who}"),
                None => "the job was cancelled".to_string(),
            },
        ),
        other => (Status::Error, format!("the job ended {other} (an infrastructure end: node failure, preemption or similar)")),
    };
    if let (Some(line), Status::Passed | Status::Failed | Status::Cancelled) = (&f.oom, status) {
        status = Status::OutOfMemory;
        summary = format!("the job was hit by the OOM killer: {line}");
    }
    let mut missing: Vec<String> = Vec::new();
    if status == Status::Passed {
        if !f.failures.is_empty() {
            status = Status::Failed;
            summary = format!(
                "exit code 0, but the log has failure pattern(s): {}",
                f.failures.join(", ")
            );
        } else {
            missing = patterns
                .success
                .iter()
                .filter(|p| !f.successes.contains(p))
                .cloned()
                .collect();
            if !missing.is_empty() {
                status = Status::Failed;
                summary = format!(
                    "exit code 0, but success pattern(s) not found: {}",
                    missing.join(", ")
                );
            }
        }
    }
    if matches!(status, Status::Failed | Status::Error) {
        if let Some(why) = shared::slurm::container::failure(&f.container_lines) {
            summary = format!("{why}; {summary}");
        }
    }
    if kind == JobKind::Build
        && matches!(
            status,
            Status::Failed | Status::Timeout | Status::OutOfMemory
        )
    {
        summary = format!("the build failed: {summary}");
        status = Status::BuildFailed;
    }
    Verdict {
        status,
        slurm_state: acct.state.clone(),
        exit_code: Some(acct.exit_code.clone()),
        elapsed: Some(acct.elapsed.clone()),
        summary,
        source,
        cancelled_by,
        success_patterns_missing: Some(missing),
        hang_line: None,
        hang_reason: None,
        excerpt_lines: None,
    }
}

/// The verdict for a job whose record Slurm no longer has (accounting disabled, ended more than
/// MinJobAge ago): what is known, and how. A time limit or a cancellation shows in slurmstepd's
/// own log line; otherwise the end marker's exit code (the command's, written when it ended);
/// with neither, the end is unknown and said so (ERROR, never a guess).
pub fn purged_verdict(
    kind: JobKind,
    f: &Findings,
    patterns: &Patterns,
    marker_text: Option<&str>,
) -> Verdict {
    const WHY: &str = "Slurm no longer has the job's record (accounting is disabled on this cluster and the job ended more than MinJobAge ago)";
    let code: Option<i64> = marker_text
        .and_then(|t| t.split_whitespace().next())
        .and_then(|w| w.parse().ok());
    let (state, exit, how) = match (&f.slurm_cancel, code) {
        (Some(line), _) if line.contains("DUE TO TIME LIMIT") => {
            ("TIMEOUT", None, format!("slurmstepd's log line: {line}"))
        }
        (Some(line), _) => ("CANCELLED", None, format!("slurmstepd's log line: {line}")),
        (None, Some(0)) => ("COMPLETED", Some("0:0".to_string()), "the job's end marker: exit code 0".to_string()),
        (None, Some(c)) => ("FAILED", Some(format!("{c}:0")), format!("the job's end marker: exit code {c}")),
        (None, None) => {
            return Verdict {
                status: Status::Error,
                slurm_state: "PURGED".into(),
                exit_code: None,
                elapsed: None,
                summary: format!("{WHY}, and the job left no end marker and no Slurm line in its logs: how it ended is unknown; see its logs"),
                source: Source::EndMarker,
                cancelled_by: None,
                success_patterns_missing: None,
                hang_line: None,
                hang_reason: None,
                excerpt_lines: None,
            }
        }
    };
    let acct = AccountingEntry {
        state: state.into(),
        cancelled_by_uid: None,
        exit_code: exit.clone().unwrap_or_default(),
        elapsed: String::new(),
    };
    let mut v = final_verdict(kind, f, patterns, &acct, None, Source::EndMarker);
    v.summary = format!("{}; known from {how}, because {WHY}", v.summary);
    v.slurm_state = "PURGED".into();
    v.exit_code = exit;
    v.elapsed = None;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct(state: &str, exit: &str) -> AccountingEntry {
        AccountingEntry {
            state: state.into(),
            cancelled_by_uid: None,
            exit_code: exit.into(),
            elapsed: "00:00:07".into(),
        }
    }

    fn findings(failures: &[&str], successes: &[&str], oom: Option<&str>) -> Findings {
        Findings {
            failures: failures.iter().map(|s| s.to_string()).collect(),
            successes: successes.iter().map(|s| s.to_string()).collect(),
            oom: oom.map(str::to_string),
            ..Findings::default()
        }
    }

    #[test]
    fn a_container_that_did_not_start_is_named_in_the_summary() {
        let patterns = Patterns {
            hang: "hang detected".into(),
            failure: vec![],
            success: vec![],
        };
        let f = Findings {
            container_lines: vec![
                "slurmstepd-vm: error: pyxis: --container-mounts: source path does not exist: /gone".into(),
            ],
            ..Findings::default()
        };
        let v = final_verdict(
            JobKind::Run,
            &f,
            &patterns,
            &acct("FAILED", "1:0"),
            None,
            Source::Sacct,
        );
        assert_eq!(v.status, Status::Failed);
        assert!(
            v.summary.starts_with(
                "the `mounts` source /gone does not exist on the node; the job failed"
            ),
            "{}",
            v.summary
        );
        // A passing job keeps its own summary.
        let v = final_verdict(
            JobKind::Run,
            &f,
            &patterns,
            &acct("COMPLETED", "0:0"),
            None,
            Source::Sacct,
        );
        assert_eq!(v.status, Status::Passed);
    }

    #[test]
    #[allow(clippy::too_many_lines)] // one table of every end, read top to bottom
    fn every_end_maps_to_one_status() {
        let patterns = Patterns {
            hang: "hang detected".into(),
            failure: vec!["nan loss".into()],
            success: vec!["done".into(), "saved".into()],
        };
        let ok = findings(&[], &["done", "saved"], None);
        let run = JobKind::Run;
        let build = JobKind::Build;
        // (kind, sacct state, exit code, findings, status, summary contains)
        let table: Vec<(JobKind, &str, &str, Findings, Status, &str)> = vec![
            (
                run,
                "COMPLETED",
                "0:0",
                findings(&[], &["done", "saved"], None),
                Status::Passed,
                "exit code 0",
            ),
            (
                run,
                "COMPLETED",
                "0:0",
                findings(&["nan loss"], &["done", "saved"], None),
                Status::Failed,
                "failure pattern(s): nan loss",
            ),
            (
                run,
                "COMPLETED",
                "0:0",
                findings(&[], &["done"], None),
                Status::Failed,
                "not found: saved",
            ),
            (
                run,
                "COMPLETED",
                "3:0",
                findings(&[], &["done", "saved"], None),
                Status::Failed,
                "exit code 3:0",
            ),
            (
                run,
                "FAILED",
                "1:0",
                findings(&[], &[], None),
                Status::Failed,
                "failed with exit code 1:0",
            ),
            (
                run,
                "FAILED",
                "0:9",
                findings(&[], &[], Some("Killed process 7")),
                Status::OutOfMemory,
                "OOM killer",
            ),
            (
                run,
                "TIMEOUT",
                "0:15",
                findings(&[], &[], None),
                Status::Timeout,
                "time limit",
            ),
            (
                run,
                "OUT_OF_MEMORY",
                "0:125",
                findings(&[], &[], None),
                Status::OutOfMemory,
                "out of memory",
            ),
            (
                run,
                "CANCELLED",
                "0:15",
                findings(&[], &[], None),
                Status::Cancelled,
                "cancelled",
            ),
            (
                run,
                "NODE_FAIL",
                "0:0",
                findings(&[], &[], None),
                Status::Error,
                "NODE_FAIL",
            ),
            (
                run,
                "PREEMPTED",
                "0:0",
                findings(&[], &[], None),
                Status::Error,
                "PREEMPTED",
            ),
            (
                build,
                "COMPLETED",
                "0:0",
                findings(&[], &[], None),
                Status::Passed,
                "exit code 0",
            ),
            (
                build,
                "FAILED",
                "2:0",
                findings(&[], &[], None),
                Status::BuildFailed,
                "the build failed",
            ),
            (
                build,
                "TIMEOUT",
                "0:15",
                findings(&[], &[], None),
                Status::BuildFailed,
                "time limit",
            ),
            (
                build,
                "CANCELLED",
                "0:15",
                findings(&[], &[], None),
                Status::Cancelled,
                "cancelled",
            ),
        ];
        for (kind, state, exit, f, status, summary) in table {
            // A build job is judged by its exit: slurm-watch gives it no workload patterns.
            let p = if kind == JobKind::Build {
                Patterns {
                    hang: patterns.hang.clone(),
                    failure: vec![],
                    success: vec![],
                }
            } else {
                Patterns {
                    hang: patterns.hang.clone(),
                    failure: patterns.failure.clone(),
                    success: patterns.success.clone(),
                }
            };
            let v = final_verdict(kind, &f, &p, &acct(state, exit), None, Source::Sacct);
            assert_eq!(v.status, status, "{kind} {state} {exit}: {}", v.summary);
            assert!(v.summary.contains(summary), "{kind} {state}: {}", v.summary);
            assert_eq!(v.slurm_state, state);
            assert_eq!(v.exit_code.as_deref(), Some(exit));
        }
        let _ = ok;
    }

    #[test]
    fn who_cancelled_is_said_and_the_source_is_kept() {
        let p = Patterns {
            hang: String::new(),
            failure: vec![],
            success: vec![],
        };
        let v = final_verdict(
            JobKind::Run,
            &Findings::default(),
            &p,
            &acct("CANCELLED", "0:15"),
            Some("alice".into()),
            Source::Scontrol,
        );
        assert_eq!(v.summary, "the job was cancelled by alice");
        assert_eq!(v.cancelled_by.as_deref(), Some("alice"));
        assert_eq!(v.source, Source::Scontrol);
        assert_eq!(v.success_patterns_missing, Some(vec![]));
    }

    #[test]
    fn a_purged_record_gives_what_the_marker_and_the_logs_know_and_says_how() {
        let p = Patterns {
            hang: String::new(),
            failure: vec!["traceback".into()],
            success: vec!["done".into()],
        };
        let cancel = |l: &str| Findings {
            slurm_cancel: Some(l.into()),
            successes: vec!["done".into()],
            ..Findings::default()
        };
        let done = findings(&[], &["done"], None);
        // (findings, marker, status, exit code)
        for (f, marker, status, exit) in [
            (done, Some("0 1700000000"), Status::Passed, Some("0:0")),
            (findings(&[], &["done"], None), Some("3"), Status::Failed, Some("3:0")),
            (findings(&["traceback"], &["done"], None), Some("0"), Status::Failed, Some("0:0")),
            (findings(&[], &[], None), Some("0"), Status::Failed, Some("0:0")),
            (cancel("slurmstepd: error: *** JOB 7 ON mn1 CANCELLED AT 2026-12-03T16:00:00 DUE TO TIME LIMIT ***"), Some("0"), Status::Timeout, None),
            (cancel("slurmstepd: error: *** STEP 7.0 ON mn1 CANCELLED AT 2026-12-03T16:00:00 ***"), None, Status::Cancelled, None),
            (findings(&[], &["done"], None), None, Status::Error, None),
            (findings(&[], &["done"], None), Some("garbage"), Status::Error, None),
        ] {
            let v = purged_verdict(JobKind::Run, &f, &p, marker);
            assert_eq!(v.status, status, "{marker:?} {f:?}: {}", v.summary);
            assert_eq!(v.exit_code.as_deref(), exit, "{marker:?}");
            assert_eq!(v.source, Source::EndMarker);
            assert_eq!(v.slurm_state, "PURGED");
            assert!(v.summary.contains("MinJobAge"), "{}", v.summary);
        }
        let v = purged_verdict(
            JobKind::Build,
            &findings(&[], &[], None),
            &Patterns {
                success: vec![],
                ..p
            },
            Some("2"),
        );
        assert_eq!(v.status, Status::BuildFailed, "{}", v.summary);
    }
}
