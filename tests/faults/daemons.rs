//! The cluster's own parts failing under a run, for real: sshd, slurmctld and slurmdbd stopped and
//! restarted, the MFA master killed, a stale socket left behind, a node set down, a job requeued.

use super::*;

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_survives_sshd_stopping_and_restarting_and_the_job_is_untouched() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-sshd");
    d["recipe"] = json!("single");
    d["command"] = json!("echo before; sleep 14; echo after");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    stop_direct_sshd();
    // While sshd is down, its connections are gone and new ones are refused; the watch (whose
    // one session was cut) must keep trying.
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
    assert_eq!(w.report().status.name(), "PASSED");
    assert_eq!(w.report().excerpt, ["before", "after"]);
    assert!(
        w.stderr.contains("poll failed"),
        "the outage was seen: {}",
        w.stderr
    );
    assert_eq!(wait_done(&id, 30), ("COMPLETED".into(), "0:0".into()));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_waits_out_a_stopped_slurmctld_without_a_verdict() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-ctld");
    d["recipe"] = json!("batch");
    d["command"] = json!("echo before; sleep 20; echo after; exit 4");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
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
    let r = w.report();
    assert_eq!(r.status.name(), "FAILED", "{r:?}");
    assert_eq!(
        r.exit_code.as_deref().unwrap_or_default(),
        "4:0",
        "the real verdict, after the outage"
    );
    assert!(
        w.stderr.contains("controller may be down") || w.stderr.contains("poll failed"),
        "{}",
        w.stderr
    );
    assert_eq!(wait_done(&id, 30).0, "FAILED");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_dead_mfa_master_stops_the_watch_with_exit_3_and_a_rerun_resumes() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
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
    let id = s.job_id();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    mfa_logout(&cp);
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 3, "{}", w.stderr);
    let e = w.error();
    assert!(e.hint.contains("rerun slurm-watch"), "{e:?}");
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
    assert_eq!(w.report().status.name(), "PASSED");
    assert_eq!(w.report().excerpt, ["start", "end"]);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_stale_control_socket_left_by_a_killed_master_asks_for_login_then_works() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let cp = control_path("stale");
    mfa_login(&cp);
    let expanded = cp.replace("%p", &testbed().info["mfa_port"].to_string());
    // Kill the master hard: the socket file stays behind.
    let out = Command::new("ssh")
        .args([
            "-F",
            &testbed().ssh_config(),
            "-o",
            &format!("ControlPath={cp}"),
            "-O",
            "check",
            &testbed().s("mfa_host"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let pid: String = text
        .split("pid=")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        std::path::Path::new(&expanded).exists(),
        "the socket file is left behind"
    );
    let mut d = doc_for("mfa_host");
    d["control_path"] = json!(cp.clone());
    d["mfa_style"] = json!(true);
    let p = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(p.code, 3, "{}", p.stderr);
    assert!(p.error().hint.as_str().contains("-fNM"));
    mfa_login(&cp);
    let p = run("slurm-ssh-preflight", &[], &d);
    mfa_logout(&cp);
    assert_eq!(p.code, 0, "{}", p.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn accounting_down_when_the_job_ends_gives_no_verdict_until_it_is_back() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-dbd");
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 4; exit 6");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let pid = pid_of("/run/slurm-tools/slurmdbd.pid");
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(15));
    assert!(
        !watcher.is_finished(),
        "no verdict while accounting cannot answer"
    );
    cluster_up();
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "FAILED", "{}", w.doc["report"]);
    // The exit code is accounting's. Measured on Slurm 22.05: a job that ends while slurmdbd is
    // down is recorded FAILED with ExitCode 0:0 (its own `exit 6` does not reach the database),
    // so the report can only repeat what sacct says, and must not invent the 6.
    let job = w.report().job_id;
    let job = job.as_str();
    assert_eq!(
        w.report().exit_code.as_deref().unwrap_or_default(),
        wait_done(job, 30).1.as_str()
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_node_set_down_under_a_running_job_is_followed_to_slurms_final_word() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-node");
    d["recipe"] = json!("batch");
    d["command"] = json!("echo run ${SLURM_RESTART_COUNT:-0}; sleep 8");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    let node = job_nodes(&id).pop().unwrap_or_else(|| testbed().s("node"));
    let down = Command::new("scontrol")
        .args([
            "update",
            &format!("nodename={node}"),
            "state=down",
            "reason=slurm-tools-test",
        ])
        .status()
        .unwrap();
    let w = watcher.join().unwrap();
    // ReturnToService=2 brings the node back on its own; make sure it is.
    let _ = Command::new("scontrol")
        .args(["update", &format!("nodename={node}"), "state=resume"])
        .output();
    cluster_up();
    assert!(down.success());
    // Slurm requeues a batch job whose node failed; the watch follows it to its real end and its
    // verdict is what accounting says (no guess while the job was between runs).
    let (state, code) = wait_done(&id, 30);
    let r = w.report();
    assert_eq!(r.slurm_state, state.as_str(), "{r:?}");
    assert_eq!(
        r.exit_code.as_deref().unwrap_or_default(),
        code.as_str(),
        "{r:?}"
    );
    let expected = match state.as_str() {
        "COMPLETED" => "PASSED",
        "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" => "ERROR",
        other => panic!("unexpected final state {other}"),
    };
    assert_eq!(r.status.name(), expected, "{r:?}");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_requeued_job_is_followed_through_its_second_run() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-requeue");
    d["recipe"] = json!("batch");
    d["command"] =
        json!("echo run ${SLURM_RESTART_COUNT:-0}; sleep 6; echo end ${SLURM_RESTART_COUNT:-0}");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("scontrol")
        .args(["requeue", &id])
        .status()
        .unwrap()
        .success());
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 0, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status.name(), "PASSED", "{r:?}");
    assert!(
        r.excerpt.join("\n").contains("end 1"),
        "the second run's log: {r:?}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn sshd_stopped_mid_sync_is_a_clear_error_loses_nothing_and_a_rerun_after_restart_works() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for (tool_name, step) in [
        ("slurm-sync-tracked", "sync-tracked:pushed"),
        ("slurm-sync-untracked", "sync-untracked:streaming"),
    ] {
        let fx = fixture::Fixture::new(&format!("sshd-mid-{}", step.replace(':', "-")));
        let doc = messy_doc_for(&fx, tool_name);
        let before = fixture::local_state(&fx.local);
        let r = fault_at(tool_name, &doc, step, 2, stop_direct_sshd);
        cluster_up();
        assert_eq!(r.code, 4, "{step}: a remote failure: {}", r.stderr);
        let e = r.error();
        assert_eq!(e.exit_code, 4, "{step}: {e:?}");
        assert_eq!(e.kind, shared::ErrorKind::Remote, "{step}: {e:?}");
        let message = e.message.as_str();
        assert!(
            message.contains(&testbed().s("direct_host")),
            "{step}: the message names the host it failed on: {e:?}"
        );
        assert!(!e.hint.is_empty(), "{step}: a hint: {e:?}");
        assert_eq!(
            fixture::local_state(&fx.local),
            before,
            "{step}: the local repository changed"
        );
        rerun_both_syncs(&fx, &before, step);
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurmctld_stopped_mid_submit_is_a_clear_error_and_a_rerun_submits_once() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let name = format!("f-ctld-submit-{}", std::process::id());
    let (_fx, mut d) = synced(&name);
    d["recipe"] = json!("batch");
    d["command"] = json!("echo once");
    let r = fault_at("slurm-submit", &d, "submit:before", 2, || {
        let pid = pid_of("/run/slurm-tools/slurmctld.pid");
        assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    });
    cluster_up();
    assert_ne!(r.code, 0, "no job id without a controller: {}", r.stderr);
    assert!(r.typed().job.and_then(|j| j.job_id).is_none(), "{}", r.doc);
    let e = r.error();
    let text = format!("{} {}", e.message, e.hint).to_lowercase();
    assert!(
        text.contains("controller") || text.contains("slurmctld") || text.contains("sbatch"),
        "the error names the controller or sbatch: {e:?}"
    );
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert_eq!(jobs_named(&format!("st-{name}")), 1, "exactly one job");
}
