//! Faults on the modern site (Slurm 24.11 without accounting, scripts/testbed/modern-site.sh): a
//! node lost under a running job, for real (its slurmd killed), and `slurm-watch --retry`.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `squeue -h -j ID -o FORMAT` on the modern login node ("" once the job is gone from it).
fn squeue(id: &str, format: &str) -> String {
    local_cluster(&[
        "modern-exec",
        "modern-login",
        "squeue",
        "-h",
        "-j",
        id,
        "-o",
        format,
    ])
    .trim()
    .to_string()
}

/// A synced document for the modern site, with its own login (the test bed's stand-in for the
/// person typing the password and the code).
fn modern_synced(dir: &Path, state: &Path, name: &str, cp: &str) -> Value {
    let tb = testbed();
    let repo = dir.join("sample");
    let ok = Command::new("git")
        .args(["clone", "-q", &tb.s("origin_url")])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(ok.success());
    local_cluster(&["modern-login", cp]);
    let mut d = json!({
        "slurm_cluster": "modern",
        "slurm_user": tb.s("cluster_user"),
        "ssh_config_file": tb.ssh_config(),
        "control_path": cp,
        "repo_url": tb.s("origin_url"),
        "repo_root": repo.display().to_string(),
        "job_name": format!("st-{name}"),
        "time_limit": "00:05:00",
        "work_dir": format!("{name}-{}", std::process::id()),
    });
    for (tool_name, args) in [
        (
            "slurm-resolve",
            vec!["--catalog".to_string(), tb.s("catalog")],
        ),
        ("slurm-ssh-preflight", vec![]),
        ("slurm-sync-tracked", vec![]),
        ("slurm-sync-untracked", vec![]),
    ] {
        let mut c = tool(tool_name);
        c.env("SLURM_TOOLS_STATE_DIR", state).args(&args);
        let r = run_raw(c, d.to_string().as_bytes());
        assert_eq!(r.code, 0, "{tool_name}: {}", r.stderr);
        d = r.doc;
    }
    d
}

/// The modern site's node `node` loses its slurmd (killed, as a crash would), under a running
/// job: Slurm 24.11 ends the job NODE_FAIL, the watch (verdict from scontrol, no accounting)
/// says ERROR and `--retry` submits it again without that node; the second attempt passes.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_node_lost_on_the_modern_site_is_retried_on_the_other_node() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let dir = tempdir();
    let state = dir.path().join("state");
    let cp = control_path("modern-retry");
    let mut d = modern_synced(dir.path(), &state, "modern-retry", &cp);
    let mark = format!("modern-retry-mark-{}", std::process::id());
    d["recipe"] = json!("single");
    d["command"] = json!(format!(
        "if [ -e \"$HOME/{mark}\" ]; then echo second attempt; else touch \"$HOME/{mark}\"; echo first attempt; sleep 300; fi"
    ));
    let s = ToolRun::new("slurm-submit")
        .env("SLURM_TOOLS_STATE_DIR", &state)
        .doc(&d)
        .run();
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let submitted = s.doc.clone();
    let st = state.clone();
    let watcher = std::thread::spawn(move || {
        ToolRun::new("slurm-watch")
            .env("SLURM_TOOLS_STATE_DIR", &st)
            .args(&["--interval", "1", "--retry", "2"])
            .doc(&submitted)
            .run()
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let node = loop {
        let n = squeue(&id, "%N");
        if !n.is_empty() {
            break n;
        }
        assert!(Instant::now() < deadline, "job {id} did not start");
        std::thread::sleep(Duration::from_millis(500));
    };
    std::thread::sleep(Duration::from_secs(2));
    // The node's slurmd: its pid file in that host's own /run (no pid namespace: a host pid).
    let holder = std::fs::read_to_string(format!(
        "/var/lib/slurm-tools-testbed/modern/holder-{node}.pid"
    ))
    .unwrap();
    let pid =
        std::fs::read_to_string(format!("/proc/{}/root/run/slurmd.pid", holder.trim())).unwrap();
    assert!(Command::new("kill")
        .arg(pid.trim())
        .status()
        .unwrap()
        .success());
    let w = watcher.join().unwrap();
    // The node back (its slurmd started again, the node resumed), whatever the verdict.
    local_cluster(&["up"]);
    let _ = Command::new("ssh")
        .args(["-F", &testbed().ssh_config(), "-o"])
        .arg(format!("ControlPath={cp}"))
        .args(["-O", "exit", &testbed().s("modern_host")])
        .output();
    assert_eq!(w.code, 0, "{}", w.stderr);
    use shared::contract::schema::{Source, Status};
    let doc = w.typed();
    let report = w.report();
    assert_eq!(report.status, Status::Passed, "{}", w.stderr);
    assert_eq!(doc.attempt, Some(2), "{}", w.stderr);
    assert_eq!(doc.retry_of.as_deref(), Some(id.as_str()));
    let attempts = doc.attempts.clone().unwrap_or_default();
    assert_eq!(attempts[0].slurm_state, "NODE_FAIL", "{attempts:?}");
    assert_eq!(attempts[0].status, Status::Error);
    assert_eq!(doc.exclude_nodes, Some(vec![node.clone()]));
    assert!(report.excerpt.iter().any(|l| l.contains("second attempt")));
    assert_eq!(report.source, Source::Scontrol, "no accounting here");
}
