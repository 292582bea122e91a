//! Two nodes, faults injected for real: a node's slurmd killed under a running two-node job, a
//! node failure retried on another node (and a failed job not), one hanging rank cancelling the
//! whole job, ranks on two nodes interleaving their lines in one log.

use crate::fixture::{self, synced, wait_done};
use crate::harness::*;
use crate::{cluster_up, job_nodes, node_count, one_at_a_time, pid_of, watch_in_background};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

/// The cluster to this test alone, when it has two nodes (else a note and `None`: skipped).
fn two_nodes_to_ourselves() -> Option<std::sync::MutexGuard<'static, ()>> {
    if node_count() < 2 {
        eprintln!("skipped: the local cluster has one node");
        return None;
    }
    Some(one_at_a_time())
}

/// A two-node job (srun distributed recipe) whose `command` is `command`, submitted, with its
/// watch started in the background.
fn two_node_job_watched(
    name: &str,
    command: &str,
    extra: &[(&str, serde_json::Value)],
) -> (String, std::thread::JoinHandle<Run>) {
    let (_fx, mut d) = synced(name);
    d["recipe"] = json!("distributed");
    d["node_count"] = json!(2);
    d["required_devices_per_node"] = json!(2);
    d["command"] = json!(command);
    for (k, v) in extra {
        d[*k] = v.clone();
    }
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    (id, watch_in_background(&s.doc))
}

/// One node's slurmd dies under a running two-node job: the verdict is what Slurm decides
/// (NODE_FAIL, an ERROR), never PASSED, and the node comes back.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_two_node_job_that_loses_a_nodes_slurmd_is_never_passed() {
    crate::needs_cluster!();
    let Some(_one) = two_nodes_to_ourselves() else {
        return;
    };
    let (id, watcher) = two_node_job_watched(
        "f-lose-node",
        "echo rank $RANK up; sleep 120; echo rank $RANK done",
        &[],
    );
    // Running on two nodes first.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let nodes = loop {
        let n = job_nodes(&id);
        if n.len() == 2 {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} did not start on 2 nodes"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    std::thread::sleep(Duration::from_secs(2));
    let victim = &nodes[1];
    let pid = pid_of(&format!("/run/slurm-tools/slurmd-{victim}.pid"));
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    let w = watcher.join().unwrap();
    cluster_up();
    let (state, code) = wait_done(&id, 60);
    let r = w.report();
    assert_eq!(r.slurm_state, state.as_str(), "{r:?}");
    assert_eq!(
        r.exit_code.as_deref().unwrap_or_default(),
        code.as_str(),
        "{r:?}"
    );
    assert_ne!(r.status.name(), "PASSED", "{r:?}");
    if state == "NODE_FAIL" {
        assert_eq!(r.status.name(), "ERROR", "{r:?}");
    }
    assert_ne!(w.code, 0);
}

/// A NODE_FAIL made for real (the job's node's slurmd killed under it): `slurm-watch --retry`
/// submits it again with that node excluded, the second attempt runs elsewhere and passes, and
/// both attempts are in the document and linked in the ledger. A FAILED job is not retried.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_node_failure_is_retried_on_another_node_and_a_failed_job_is_not() {
    crate::needs_cluster!();
    let Some(_one) = two_nodes_to_ourselves() else {
        return;
    };
    let state = tempdir();
    let (_fx, mut d) = synced("f-retry");
    let mark = format!("retry-mark-{}", std::process::id());
    d["recipe"] = json!("single");
    d["command"] = json!(format!(
        "if [ -e \"$HOME/{mark}\" ]; then echo second attempt; else touch \"$HOME/{mark}\"; echo first attempt; sleep 300; fi"
    ));
    let mut c = tool("slurm-submit");
    c.env("SLURM_TOOLS_STATE_DIR", state.path());
    let s = run_raw(c, d.to_string().as_bytes());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let input = s.doc.to_string();
    let st = state.path().to_path_buf();
    let watcher = std::thread::spawn(move || {
        let mut cmd = tool("slurm-watch");
        cmd.env("SLURM_TOOLS_STATE_DIR", &st)
            .args(["--interval", "1", "--retry", "2"]);
        run_raw(cmd, input.as_bytes())
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let node = loop {
        if let Some(n) = job_nodes(&id).into_iter().next() {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} did not start"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    std::thread::sleep(Duration::from_secs(2));
    let pid = pid_of(&format!("/run/slurm-tools/slurmd-{node}.pid"));
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    let w = watcher.join().unwrap();
    cluster_up();
    let (state_1, _) = wait_done(&id, 60);
    assert_eq!(
        state_1, "NODE_FAIL",
        "Slurm's own verdict on the first attempt"
    );
    assert_eq!(w.code, 0, "{}", w.stderr);
    let doc = w.typed();
    let report = w.report();
    assert_eq!(report.status.name(), "PASSED", "{}", w.stderr);
    assert_eq!(doc.attempt, Some(2));
    assert_eq!(doc.retry_of.as_deref(), Some(id.as_str()));
    let attempts = doc.attempts.clone().unwrap_or_default();
    assert_eq!(attempts[0].job_id, id);
    assert_eq!(attempts[0].slurm_state, "NODE_FAIL");
    assert_eq!(attempts[0].status.name(), "ERROR");
    assert_eq!(attempts[0].nodes.as_deref(), Some(node.as_str()));
    assert_eq!(doc.exclude_nodes, Some(vec![node.clone()]));
    let second = w.job_id();
    assert_ne!(second, id);
    let out = Command::new("sacct")
        .args(["-X", "-n", "-P", "-o", "NodeList", "-j", &second])
        .output()
        .unwrap();
    let ran_on = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !ran_on.is_empty() && ran_on != node,
        "ran on {ran_on}, not {node}"
    );
    assert!(report.excerpt.join("\n").contains("second attempt"));
    // The ledger links the attempts.
    let ledger = std::fs::read_to_string(state.path().join("runs.jsonl")).unwrap();
    let entries: Vec<serde_json::Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        entries.iter().any(|e| e["job_id"] == second.as_str()
            && e["event"] == "submitted"
            && e["retry_of"] == id.as_str()
            && e["attempt"] == 2),
        "{ledger}"
    );
    assert!(entries.iter().any(|e| e["job_id"] == id.as_str()
        && e["event"] == "verdict"
        && e["slurm_state"] == "NODE_FAIL"));

    // The code's own failure is never retried.
    d["command"] = json!("exit 3");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "1", "--retry", "2"], &s.doc);
    assert_eq!(w.code, 1);
    assert_eq!(w.report().status.name(), "FAILED");
    assert!(w.doc.get("attempts").is_none());
    let _ = Command::new("runuser")
        .args(["-u", &testbed().s("cluster_user"), "--", "rm", "-f"])
        .arg(format!("{}/{mark}", testbed().s("cluster_home")))
        .status();
}

/// One rank of a two-node job prints the hang pattern in its own output: HANG_DETECTED and the
/// whole job (every node) is cancelled.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn one_hanging_rank_of_a_two_node_job_cancels_the_whole_job() {
    crate::needs_cluster!();
    let Some(_one) = two_nodes_to_ourselves() else {
        return;
    };
    let (id, watcher) = two_node_job_watched(
        "f-rank-hang",
        "echo rank $RANK on $(hostname); if [ \"$RANK\" = 3 ]; then sleep 2; echo \"rank 3: NCCL watchdog: hang detected\"; fi; sleep 120",
        &[],
    );
    let w = watcher.join().unwrap();
    let r = w.report();
    assert_eq!(r.status.name(), "HANG_DETECTED", "{r:?}");
    assert!(r.hang_line.as_deref().unwrap().contains("rank 3"), "{r:?}");
    let (state, _) = wait_done(&id, 60);
    assert_eq!(state, "CANCELLED", "the whole job is cancelled");
}

/// Four ranks on two nodes write their lines in pieces (a line split across writes, other
/// ranks writing in between): the scan still finds the patterns, in one log.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn output_of_ranks_on_two_nodes_interleaved_in_one_log_still_matches_patterns() {
    crate::needs_cluster!();
    let Some(_one) = two_nodes_to_ourselves() else {
        return;
    };
    let (_id, watcher) = two_node_job_watched(
        "f-interleave",
        "for i in 1 2 3 4 5; do printf 'rank %s step %s ' \"$RANK\" \"$i\"; sleep 0.2; printf 'checkpoint-'; sleep 0.1; printf 'saved\\n'; done; echo \"rank $RANK host $(hostname) finished\"",
        &[("success_patterns", json!(["checkpoint-saved", "rank 3 host"]))],
    );
    let w = watcher.join().unwrap();
    let r = w.report();
    assert_eq!(r.status.name(), "PASSED", "{r:?}");
    assert_eq!(
        r.success_patterns_missing.clone().unwrap_or_default(),
        Vec::<String>::new(),
        "{r:?}"
    );
    let log = fixture::read(&r.remote_log);
    assert_eq!(log.matches("checkpoint-saved").count(), 20, "{log}");
    let hosts: std::collections::BTreeSet<&str> = log
        .lines()
        .filter_map(|l| l.split(" host ").nth(1))
        .map(|h| h.split(' ').next().unwrap())
        .collect();
    assert_eq!(hosts.len(), 2, "{log}");
}

/// A sweep whose one task loses its node (its slurmd killed under it: NODE_FAIL, for real):
/// `slurm-watch --retry` submits that task alone again as an array of its index, with the node
/// excluded; the tasks that passed keep their verdicts (from the first array) and the sweep
/// passes.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sweep_task_that_loses_its_node_is_retried_alone() {
    crate::needs_cluster!();
    let Some(_one) = two_nodes_to_ourselves() else {
        return;
    };
    let (_fx, mut d) = synced("f-sweep-retry");
    let mark = format!("sweep-retry-mark-{}", std::process::id());
    d["recipe"] = json!("single");
    d["sweep"] = json!({"sets": [{"t": "quick"}, {"t": "slow"}, {"t": "quick"}]});
    // Slurm requeues a batch job (an array task too) on a node failure by itself where the site
    // has JobRequeue=1 (the default): the watch follows the task through it. Without it, the
    // NODE_FAIL is the end, and --retry's to handle.
    d["slurm_options"] = json!(["--no-requeue"]);
    d["command"] = json!(format!(
        "if [ {{t}} = slow ] && [ ! -e \"$HOME/{mark}\" ]; then touch \"$HOME/{mark}\"; echo first attempt; sleep 300; fi; echo done {{t}}"
    ));
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let input = s.doc.to_string();
    let watcher = std::thread::spawn(move || {
        let mut cmd = tool("slurm-watch");
        cmd.args(["--interval", "1", "--retry", "1"]);
        run_raw(cmd, input.as_bytes())
    });
    let slow = format!("{id}_1");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let node = loop {
        if let Some(n) = job_nodes(&slow).into_iter().next() {
            break n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "task {slow} did not start"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The quick tasks end in a moment; then the slow one's node goes.
    std::thread::sleep(Duration::from_secs(3));
    let pid = pid_of(&format!("/run/slurm-tools/slurmd-{node}.pid"));
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    let killed = std::time::Instant::now();
    let w = watcher.join().unwrap();
    eprintln!(
        "the watch ended {:.0} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    cluster_up();
    assert_eq!(w.code, 0, "{}", w.stderr);
    let report = w.report();
    let tasks = report.tasks.expect("a row per task");
    assert_eq!(
        tasks
            .iter()
            .map(|t| (t.index, t.status))
            .collect::<Vec<_>>(),
        (0..3)
            .map(|i| (i, shared::contract::schema::Status::Passed))
            .collect::<Vec<_>>(),
        "{}",
        w.stderr
    );
    assert_eq!(
        tasks[0].from_job.as_deref(),
        Some(id.as_str()),
        "kept from the first array"
    );
    assert_eq!(tasks[2].from_job.as_deref(), Some(id.as_str()));
    assert_eq!(tasks[1].from_job, None, "task 1 ran again");
    assert_eq!(tasks[1].excerpt, ["done slow"]);
    let doc = w.typed();
    let attempts = doc.attempts.unwrap_or_default();
    assert_eq!(attempts[0].job_id, id);
    assert_eq!(attempts[0].slurm_state, "NODE_FAIL");
    assert_eq!(doc.exclude_nodes, Some(vec![node.clone()]));
    assert_eq!(
        w.job().array.as_deref(),
        Some("1"),
        "only the failed task was submitted again"
    );
    let second = w.job_id();
    assert_ne!(second, id);
    let out = Command::new("sacct")
        .args([
            "-X",
            "-n",
            "-P",
            "-o",
            "NodeList",
            "-j",
            &format!("{second}_1"),
        ])
        .output()
        .unwrap();
    let ran_on = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !ran_on.is_empty() && ran_on != node,
        "ran on {ran_on}, not {node}"
    );
    assert!(
        w.stderr.contains("submitting only task 1 again"),
        "{}",
        w.stderr
    );
}
