//! Faults injected for real, in their own test binary: they stop and restart the cluster's
//! sshd and slurmctld, so they run after the main suite (cargo runs test binaries one at a
//! time) and one at a time among themselves.

#[path = "../integration/fixture.rs"]
mod fixture;
#[path = "../integration/harness.rs"]
#[allow(dead_code)]
mod harness;

use fixture::{synced, wait_done};
use harness::*;
use serde_json::json;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn pid_of(file: &str) -> String {
    std::fs::read_to_string(file).unwrap().trim().to_string()
}

fn cluster_up() {
    let out = Command::new(repo_root().join("scripts/local-cluster"))
        .arg("up")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Start slurm-watch in the background on a submitted document.
fn watch_in_background(doc: &serde_json::Value) -> std::thread::JoinHandle<Run> {
    let input = doc.to_string();
    std::thread::spawn(move || {
        let mut cmd = tool("slurm-watch");
        cmd.args(["--interval", "1"]);
        run_raw(cmd, input.as_bytes())
    })
}

#[test]
fn the_watch_survives_sshd_stopping_and_restarting_and_the_job_is_untouched() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_fx, mut d) = synced("f-sshd");
    d["recipe"] = json!("single");
    d["command"] = json!("echo before; sleep 14; echo after");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    let pidfile = format!("{}/sshd_direct.pid", testbed().s("state_dir"));
    let pid = pid_of(&pidfile);
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    // While sshd is down, new connections are refused; the watch must keep trying.
    std::thread::sleep(Duration::from_secs(8));
    let sq = Command::new("squeue")
        .args(["-h", "-j", &id, "-o", "%T"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sq.stdout).trim(),
        "RUNNING",
        "the job is untouched by the outage"
    );
    cluster_up();
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert_eq!(w.doc["report"]["status"], "PASSED");
    assert_eq!(w.doc["report"]["excerpt"], json!(["before", "after"]));
    assert!(
        w.stderr.contains("poll failed"),
        "the outage was seen: {}",
        w.stderr
    );
    assert_eq!(wait_done(&id, 30), ("COMPLETED".into(), "0:0".into()));
}

#[test]
fn the_watch_waits_out_a_stopped_slurmctld_without_a_verdict() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_fx, mut d) = synced("f-ctld");
    d["recipe"] = json!("batch");
    d["command"] = json!("echo before; sleep 20; echo after; exit 4");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    let pid = pid_of("/run/slurm-tools/slurmctld.pid");
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    std::thread::sleep(Duration::from_secs(30));
    assert!(
        !watcher.is_finished(),
        "no verdict while the controller is away"
    );
    cluster_up();
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = &w.doc["report"];
    assert_eq!(r["status"], "FAILED", "{r}");
    assert_eq!(r["exit_code"], "4:0", "the real verdict, after the outage");
    assert!(
        w.stderr.contains("controller may be down") || w.stderr.contains("poll failed"),
        "{}",
        w.stderr
    );
    assert_eq!(wait_done(&id, 30).0, "FAILED");
}

#[test]
fn a_dead_mfa_master_stops_the_watch_with_exit_3_and_a_rerun_resumes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cp = control_path("fault-mfa");
    mfa_login(&cp);
    let (_fx, mut d) = synced("f-mfa");
    d["ssh_host"] = json!(testbed().s("mfa_host"));
    d["control_path"] = json!(cp.clone());
    d["mfa_style"] = json!(true);
    let p = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(p.code, 0, "{}", p.stderr);
    let mut d = p.doc.clone();
    d["recipe"] = json!("single");
    d["command"] = json!("echo start; sleep 12; echo end");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    mfa_logout(&cp);
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 3, "{}", w.stderr);
    assert!(
        w.doc["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("rerun slurm-watch"),
        "{}",
        w.doc["error"]
    );
    let sq = Command::new("squeue")
        .args(["-h", "-j", &id, "-o", "%T"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sq.stdout).trim(),
        "RUNNING",
        "the job was not touched"
    );
    // The person logs in again; the same document resumes the watch.
    mfa_login(&cp);
    let w = run("slurm-watch", &["--interval", "1"], &s.doc);
    mfa_logout(&cp);
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert_eq!(w.doc["report"]["status"], "PASSED");
    assert_eq!(w.doc["report"]["excerpt"], json!(["start", "end"]));
}
