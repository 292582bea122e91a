//! Tests that take the whole cluster, in their own test binary: faults injected for real (they
//! stop and restart the cluster's sshd and slurmctld) and slurm-alloc (it fills the node to make
//! an allocation pend). They run after the main suite (cargo runs test binaries one at a time)
//! and one at a time among themselves.

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

fn alloc(args: &[&str], doc: &serde_json::Value) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-alloc"));
    cmd.args(args).env("XDG_CONFIG_HOME", "/nonexistent");
    run_raw(cmd, doc.to_string().as_bytes())
}

fn alloc_doc(host_key: &str, name: &str) -> serde_json::Value {
    let mut d = doc_for(host_key);
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["job_name"] = json!(name);
    d["container_image"] = json!("nvcr.io/nvidia/pytorch:24.01-py3");
    d["mounts"] = json!("/data:/data");
    d
}

#[test]
fn alloc_up_exec_down_share_one_allocation_and_a_second_up_reuses_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = alloc_doc("direct_host", &format!("st-alloc-{}", std::process::id()));
    let up = alloc(&["up"], &d);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let a = &up.doc["allocation"];
    let job = a["job_id"].as_str().unwrap().to_string();
    assert_eq!(a["state"], "RUNNING");
    assert_eq!(a["reused"], false);
    assert_eq!(
        a["time_limit_requested"], "04:00:00",
        "the partition's maximum"
    );
    assert_eq!(a["container_name"], format!("trtllm-{job}"));
    assert!(up.stderr.contains("imported"), "{}", up.stderr);

    // Several execs share the allocation's state; the container flags reach srun.
    let e1 = alloc(&["exec", "--", "echo $SLURM_JOB_ID > /tmp/st-alloc-state-$SLURM_JOB_ID; echo name=$SLURM_STANDIN_CONTAINER_NAME image=${SLURM_STANDIN_CONTAINER_IMAGE:-none}"], &up.doc);
    assert_eq!(e1.code, 0, "{}", e1.stderr);
    assert!(
        e1.stderr.contains(&format!("name=trtllm-{job} image=none")),
        "--container-name without --container-image: {}",
        e1.stderr
    );
    let e2 = alloc(
        &[
            "exec",
            "--mode",
            "per-node",
            "--",
            "cat /tmp/st-alloc-state-$SLURM_JOB_ID; exit 5",
        ],
        &e1.doc,
    );
    assert_eq!(e2.code, 5, "exec exits with the command's code");
    assert!(e2.stderr.contains(&job), "{}", e2.stderr);
    assert_eq!(e2.doc["allocation"]["last_exec"]["exit_code"], 5);
    assert_schema(&e2.doc);

    // A second up finds the same allocation: nothing is set up twice.
    let again = alloc(&["up"], &d);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.doc["allocation"]["job_id"], job.as_str());
    assert_eq!(again.doc["allocation"]["reused"], true);
    assert!(
        !again.stderr.contains("imported"),
        "the container is not imported twice"
    );

    let down = alloc(&["down"], &e2.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert_eq!(down.doc["allocation"]["state"], "RELEASED");
    assert_eq!(wait_done(&job, 60).0, "COMPLETED");
    let twice = alloc(&["down"], &down.doc);
    assert_eq!(twice.code, 0, "down is idempotent");
    assert!(
        twice.stderr.contains("nothing was left"),
        "{}",
        twice.stderr
    );
}

#[test]
fn alloc_pending_far_away_lowers_the_walltime_and_says_so() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Fill the node so the allocation pends with a start far away.
    let filler = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "sbatch",
            "--parsable",
            "-A",
            "testacct",
            "-n",
            "8",
            "-t",
            "00:40:00",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ])
        .output()
        .unwrap();
    let filler = String::from_utf8_lossy(&filler.stdout).trim().to_string();
    assert!(!filler.is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let sq = Command::new("squeue")
            .args(["-h", "-j", &filler, "-o", "%T"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&sq.stdout).trim() == "RUNNING" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the filler job did not start: is something else holding the node?"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut d = alloc_doc(
        "direct_host",
        &format!("st-negotiate-{}", std::process::id()),
    );
    d.as_object_mut().unwrap().remove("container_image");
    d["purpose"] = json!("development");
    let up = alloc(&["up", "--recheck-after", "6"], &d);
    let _ = Command::new("scancel").arg(&filler).status();
    let job = up.doc["allocation"]["job_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    // The person gives up: `down` on the same input document finds the allocation by name.
    let down = alloc(&["down"], &d);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(down.stderr.contains("SESSION_KILLED"), "{}", down.stderr);
    assert_eq!(
        up.code, 3,
        "still far after the reduction: the person decides\n{}",
        up.stderr
    );
    assert!(
        up.stderr
            .contains("reduced walltime from 4h to 2h for faster scheduling"),
        "{}",
        up.stderr
    );
    let n = &up.doc["allocation"]["negotiation"];
    assert_eq!(n["reduced_from"], "04:00:00");
    assert_eq!(n["reduced_to"], "02:00:00");
    assert_schema(&up.doc);
    let hint = up.doc["error"]["hint"].as_str().unwrap();
    assert!(
        hint.contains("backfill")
            && hint.contains("fewer nodes")
            && hint.contains("another cluster"),
        "{hint}"
    );
    assert!(!job.is_empty());
    let sc = Command::new("sacct")
        .args(["-X", "-n", "-P", "-j", &job, "--format=Timelimit"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sc.stdout).trim(),
        "02:00:00",
        "scontrol update really changed it"
    );
}

#[test]
fn an_allocation_survives_the_laptops_master_dying_and_exec_works_after_a_new_preflight() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cp = control_path("alloc-mfa");
    mfa_login(&cp);
    let mut d = alloc_doc("mfa_host", &format!("st-alloc-mfa-{}", std::process::id()));
    d.as_object_mut().unwrap().remove("container_image");
    d["control_path"] = json!(cp.clone());
    d["mfa_style"] = json!(true);
    let p = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(p.code, 0, "{}", p.stderr);
    let up = alloc(&["up"], &p.doc);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let job = up.doc["allocation"]["job_id"].as_str().unwrap().to_string();
    mfa_logout(&cp);
    let e = alloc(&["exec", "--", "true"], &up.doc);
    assert_eq!(e.code, 3, "no master: the person must log in\n{}", e.stderr);
    let sq = Command::new("squeue")
        .args(["-h", "-j", &job, "-o", "%T"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sq.stdout).trim(),
        "RUNNING",
        "the allocation lives on (held in tmux)"
    );
    mfa_login(&cp);
    let p2 = run("slurm-ssh-preflight", &[], &up.doc);
    assert_eq!(p2.code, 0, "{}", p2.stderr);
    let e = alloc(&["exec", "--", "echo again in $SLURM_JOB_ID"], &p2.doc);
    assert_eq!(e.code, 0, "{}", e.stderr);
    assert!(e.stderr.contains(&format!("again in {job}")));
    let down = alloc(&["down"], &e.doc);
    mfa_logout(&cp);
    assert_eq!(down.code, 0, "{}", down.stderr);
}
