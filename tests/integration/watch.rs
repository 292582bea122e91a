//! slurm-watch on the real cluster: every verdict, hang detection, patterns.

use crate::fixture::{git, synced, wait_done};
use crate::harness::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Submit `command` with `recipe` and watch it; returns the watch run.
pub fn submit_and_watch(
    base: &Value,
    recipe: &str,
    command: &str,
    extra: &[(&str, Value)],
    watch_args: &[&str],
) -> Run {
    let mut d = base.clone();
    d["recipe"] = json!(recipe);
    d["command"] = json!(command);
    for (k, v) in extra {
        d[*k] = v.clone();
    }
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let mut args = watch_args.to_vec();
    if !args.contains(&"--interval") {
        args.extend_from_slice(&["--interval", "2"]);
    }
    run("slurm-watch", &args, &s.doc)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_passing_job_is_passed_with_a_local_copy_of_its_log() {
    crate::needs_cluster!();
    let (fx, base) = synced("w-pass");
    let status_before = git(
        &fx.local,
        &["status", "--porcelain", "--untracked-files=all"],
    );
    let w = submit_and_watch(
        &base,
        "single",
        "echo one; sleep 2; echo two; echo a-warning >&2",
        &[("work_dir", json!("logs"))],
        &[],
    );
    assert_eq!(w.code, 0, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status.name(), "PASSED");
    assert_eq!(r.slurm_state, "COMPLETED");
    assert_eq!(r.exit_code.as_deref().unwrap_or_default(), "0:0");
    assert_eq!(shared::contract::doc::enum_name(&r.source), "sacct");
    assert_eq!(r.excerpt, ["one", "two"]);
    assert_eq!(
        r.excerpt_err,
        ["a-warning"],
        "a passed job's stderr is shown too"
    );
    let local = r.local_log.as_deref().unwrap();
    // A relative work_dir is the remote work directory's name: the local copy goes to the state
    // directory, never into the repository (where the next untracked sync would upload it).
    assert!(
        !local.starts_with(fx.local.to_str().unwrap()) && local.contains("/logs/logs/"),
        "{local}"
    );
    assert_eq!(
        git(
            &fx.local,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        status_before,
        "the person's repository is as it was"
    );
    assert_eq!(std::fs::read_to_string(local).unwrap(), "one\ntwo\n");
    assert!(r.local_log_complete);
    assert_eq!(
        r.bytes_scanned, 18,
        "each byte of both logs read once (8 + 10)"
    );
    assert_schema(&w.doc);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_failing_job_is_failed_with_its_exit_code_and_excerpts() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-fail");
    let w = submit_and_watch(
        &base,
        "batch",
        "for i in $(seq 1 150); do echo line $i; done; echo oops >&2; exit 3",
        &[],
        &[],
    );
    assert_eq!(w.code, 1);
    let r = w.report();
    assert_eq!(r.status.name(), "FAILED");
    assert_eq!(r.exit_code.as_deref().unwrap_or_default(), "3:0");
    let ex = &r.excerpt;
    assert_eq!(ex.len(), 100, "the last 100 lines of .out");
    assert_eq!(ex[99], "line 150");
    assert_eq!(r.excerpt_err, ["oops"]);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_walltime_ends_in_timeout() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-walltime");
    let w = submit_and_watch(
        &base,
        "batch",
        "echo started; sleep 300",
        &[("time_limit", json!("00:01:00"))],
        &[],
    );
    assert_eq!(w.code, 1);
    assert_eq!(w.report().status.name(), "TIMEOUT");
    assert_eq!(w.report().slurm_state, "TIMEOUT");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn monitor_timeout_cancels_the_job_unless_told_to_keep_it() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-montime");
    let w = submit_and_watch(
        &base,
        "single",
        "sleep 120",
        &[("monitor_timeout_seconds", json!(4))],
        &[],
    );
    assert_eq!(w.code, 1);
    let r = w.report();
    assert_eq!(r.status.name(), "TIMEOUT");
    assert!(r.summary.as_str().contains("cancelled"));
    let id = r.job_id.as_str();
    assert_eq!(wait_done(id, 240).0, "CANCELLED");

    let w = submit_and_watch(
        &base,
        "single",
        "sleep 20",
        &[("monitor_timeout_seconds", json!(3))],
        &["--keep-on-timeout"],
    );
    let id = w.report().job_id.as_str().to_string();
    assert_eq!(w.report().status.name(), "TIMEOUT");
    let sq = std::process::Command::new("squeue")
        .args(["-h", "-j", &id, "-o", "%T"])
        .output()
        .unwrap();
    assert!(
        ["RUNNING", "PENDING"].contains(&String::from_utf8_lossy(&sq.stdout).trim()),
        "kept"
    );
    let _ = std::process::Command::new("scancel").arg(&id).status();
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_job_cancelled_from_outside_is_cancelled_and_says_by_whom() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-cancel");
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 120");
    let s = run("slurm-submit", &[], &d);
    let id = s.job_id();
    let user = testbed().s("cluster_user");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        std::process::Command::new("runuser")
            .args(["-u", &user, "--", "scancel", &id])
            .status()
            .unwrap();
    });
    let w = run("slurm-watch", &["--interval", "2"], &s.doc);
    killer.join().unwrap();
    assert_eq!(w.code, 1);
    let r = w.report();
    assert_eq!(r.status.name(), "CANCELLED");
    assert_eq!(
        r.cancelled_by.clone().unwrap_or_default(),
        testbed().s("cluster_user"),
        "{r:?}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn watch_cancel_cancels_the_job_then_reports_it_cancelled_and_the_ledger_says_by_whom() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-cancel-flag");
    let state = tempdir();
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 120");
    let mut cmd = tool("slurm-submit");
    cmd.env("SLURM_TOOLS_STATE_DIR", state.path());
    let s = run_raw(cmd, d.to_string().as_bytes());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let mut cmd = tool("slurm-watch");
    cmd.env("SLURM_TOOLS_STATE_DIR", state.path())
        .env("SLURM_TOOLS_CANCELLED_BY", "the test")
        .args(["--cancel", "--interval", "2"]);
    let w = run_raw(cmd, s.doc.to_string().as_bytes());
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "CANCELLED", "{}", w.stderr);
    assert!(
        w.stderr.contains(&format!("cancelled job {id}")),
        "{}",
        w.stderr
    );
    let ledger = std::fs::read_to_string(state.path().join("runs.jsonl")).unwrap();
    assert!(
        ledger
            .lines()
            .any(|l| l.contains(&format!("\"job_id\":\"{id}\""))
                && l.contains("\"cancelled_by\":\"the test\"")),
        "{ledger}"
    );
    // --cancel with --retry is refused before anything is done.
    let again = tool("slurm-watch")
        .args(["--cancel", "--retry", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("cannot be used with"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_hang_is_detected_within_one_interval_and_the_job_is_cancelled() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-hang");
    let started = Instant::now();
    let w = submit_and_watch(
        &base,
        "single",
        "echo working; sleep 3; echo 'NCCL watchdog: Hang Detected on rank 0'; sleep 60",
        &[],
        &[],
    );
    assert_eq!(w.code, 1);
    let r = w.report();
    assert_eq!(r.status.name(), "HANG_DETECTED");
    assert!(r.hang_line.as_deref().unwrap().contains("Hang Detected"));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "found within a poll interval or so"
    );
    let id = r.job_id.as_str();
    assert_eq!(
        wait_done(id, 240).0,
        "CANCELLED",
        "sacct shows it cancelled"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_hang_pattern_in_err_only_and_split_across_polls_is_found() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-split");
    // The pattern arrives in two halves, seconds apart, on stderr only.
    let cmd = "printf 'custom stall he' >&2; sleep 4; printf 're now\\n' >&2; sleep 60";
    let w = submit_and_watch(
        &base,
        "single",
        cmd,
        &[("hang_pattern", json!("STALL HERE"))],
        &["--interval", "1"],
    );
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status.name(), "HANG_DETECTED");
    assert_eq!(
        r.hang_line.as_deref().unwrap_or_default(),
        "custom stall here now"
    );
    assert_schema(&w.doc);
    assert!(r.polls >= 2);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn failure_and_success_patterns_refine_a_passing_job() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-patterns");
    let w = submit_and_watch(
        &base,
        "single",
        "echo 'Traceback: boom'; exit 0",
        &[("failure_patterns", json!(["traceback"]))],
        &[],
    );
    assert_eq!(w.report().status.name(), "FAILED");
    assert_eq!(w.report().failure_patterns_found, ["traceback"]);
    let w = submit_and_watch(
        &base,
        "single",
        "echo all good",
        &[("success_patterns", json!(["ALL GOOD", "accuracy"]))],
        &[],
    );
    assert_eq!(w.report().status.name(), "FAILED");
    assert_eq!(
        w.report()
            .success_patterns_missing
            .clone()
            .unwrap_or_default(),
        ["accuracy"]
    );
    let w = submit_and_watch(
        &base,
        "single",
        "echo all good; echo accuracy 0.9",
        &[("success_patterns", json!(["ALL GOOD", "accuracy"]))],
        &[],
    );
    assert_eq!(w.report().status.name(), "PASSED");
    assert_eq!(w.code, 0);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_failed_build_is_build_failed_and_stops_the_flow() {
    crate::needs_cluster!();
    let (_fx, mut base) = synced("w-build");
    base["build_command"] =
        json!("echo '[ 10%] Building CXX object a.o'; echo 'a.cpp:1: error: nope' >&2; exit 2");
    let s = run("slurm-submit", &["--build"], &base);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "2"], &s.doc);
    assert_eq!(w.code, 1);
    assert_eq!(w.report().status.name(), "BUILD_FAILED");
    let mut next = w.doc.clone();
    next["command"] = json!("echo never");
    let s2 = run("slurm-submit", &[], &next);
    assert_eq!(s2.code, 1, "a failed build stops the run submission");
    assert_eq!(s2.doc, next);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_whole_flow_build_watch_submit_watch_passes() {
    crate::needs_cluster!();
    let (_fx, mut base) = synced("w-flow");
    base["build_command"] = json!("echo '[ 50%] Building' && echo '[100%] Built'");
    base["command"] = json!("echo run after build");
    base["recipe"] = json!("single");
    // The workload's patterns judge the run job, not the build.
    base["success_patterns"] = json!(["run after build"]);
    let s = run("slurm-submit", &["--build"], &base);
    let w = run("slurm-watch", &["--interval", "2"], &s.doc);
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let s2 = run("slurm-submit", &[], &w.doc);
    assert_eq!(s2.code, 0, "{}", s2.stderr);
    let kept = s2.typed();
    assert_eq!(
        kept.build.and_then(|b| b.report).map(|r| r.status.name()),
        Some("PASSED"),
        "the build's record is kept"
    );
    assert!(kept.report.is_none());
    let w2 = run("slurm-watch", &["--interval", "2"], &s2.doc);
    assert_eq!(w2.code, 0, "{}", w2.stderr);
    assert_eq!(w2.report().kind.name(), "run");
    assert_eq!(w2.report().excerpt, ["run after build"]);
    assert_schema(&w2.doc);
    // Watching the finished document again passes the verdict on without polling.
    let again = run("slurm-watch", &[], &w2.doc);
    assert_eq!(again.code, 0);
    assert_eq!(again.doc, w2.doc);
    assert!(again.stderr.contains("already has a verdict"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn one_ssh_execution_for_the_whole_watch_and_a_trace_event_per_poll() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-count");
    let mut d = base.clone();
    d["recipe"] = json!("single");
    d["command"] = json!("sleep 5; echo done");
    let s = run("slurm-submit", &[], &d);
    let trace = tempdir();
    let file = trace.path().join("t.jsonl");
    let mut cmd = tool("slurm-watch");
    cmd.args(["--interval", "1"])
        .env("SLURM_TOOLS_TRACE", &file);
    let w = run_raw(cmd, s.doc.to_string().as_bytes());
    assert_eq!(w.code, 0, "{}", w.stderr);
    let lines = trace_lines(&file);
    let ssh = connecting_ssh(&lines);
    assert_eq!(ssh.len(), 1, "one ssh session serves every poll: {ssh:?}");
    let polls = w.report().polls;
    assert!(polls >= 3, "a 5 s job polled at a 1 s interval: {polls}");
    let events = lines.iter().filter(|l| l["event"] == "poll").count() as u64;
    assert_eq!(events, polls, "one trace event per poll");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_patterns_and_work_dir_are_taken_literally_and_no_canary_fires() {
    crate::needs_cluster!();
    let (_fx, base) = synced("w-hostile");
    let canary = format!("/tmp/slurm-tools-watch-canary-{}", std::process::id());
    let _ = std::fs::remove_file(&canary);
    let sub = format!("$(touch {canary})");
    let tick = format!("`touch {canary}`");
    let dir = tempdir();
    let work_dir = dir.path().join(format!("logs; touch {canary} $(id)"));
    // The failure pattern is found literally; the success pattern with quotes is found too.
    let w = submit_and_watch(
        &base,
        "batch",
        // Single quotes: the job itself must not run the canary (its command is shell text).
        &format!("echo 'line {sub} here'; echo 'ok \"quoted\" {tick}'"),
        &[
            ("work_dir", json!(work_dir.display().to_string())),
            ("failure_patterns", json!([sub.clone()])),
            ("success_patterns", json!([format!("\"quoted\" {tick}")])),
        ],
        &["--interval", "1"],
    );
    let r = w.report();
    assert_eq!(r.status.name(), "FAILED", "{r:?}");
    assert_eq!(r.failure_patterns_found, [sub.to_lowercase()], "{r:?}");
    assert_eq!(
        r.success_patterns_missing.clone().unwrap_or_default(),
        Vec::<String>::new(),
        "{r:?}"
    );
    let local = r.local_log.as_deref().unwrap();
    assert!(
        local.starts_with(&work_dir.display().to_string()),
        "the log copy is in the literal folder: {local}"
    );
    assert!(std::fs::read_to_string(local).unwrap().contains(&sub));
    // A hang pattern full of shell syntax, matched literally.
    let hang = format!("stuck; {tick} | $(x)");
    let w = submit_and_watch(
        &base,
        "batch",
        &format!("echo 'STUCK; {tick} | $(x) now'; sleep 60"),
        &[("hang_pattern", json!(hang))],
        &["--interval", "1"],
    );
    let r = w.report();
    assert_eq!(r.status.name(), "HANG_DETECTED", "{r:?}");
    assert!(!std::path::Path::new(&canary).exists(), "a canary fired");
}

/// While pyxis imports the image the job is RUNNING and silent: the watch says it imports
/// (and the verdict is the job's); an image the registry does not have and a mount source the
/// node does not have are FAILED with a summary that names them. pyxis imports in the job when
/// the tools' image cache is off (`image_cache_keep: 0`) or cannot be used (no enroot on the
/// login node): that path, here; the cache's own is in submit.rs.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_says_when_the_image_is_imported_and_names_the_image_or_mount_that_failed() {
    crate::needs_cluster!();
    let (_fx, mut base) = synced("w-container");
    base["recipe"] = json!("single");
    base["command"] = json!("echo in the container; cat /etc/slurm-tools-image");
    base["container_image"] = json!(testbed().s("container_image"));
    base["image_cache_keep"] = json!(0);
    let s = run("slurm-submit", &[], &base);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "PASSED");
    assert!(
        w.stderr.contains(&format!(
            "pyxis is importing the container image {}",
            shared::slurm::enroot_image(&testbed().s("container_image"))
        )),
        "{}",
        w.stderr
    );
    assert!(
        w.stderr.contains("the container image is imported"),
        "{}",
        w.stderr
    );

    let registry = testbed().s("registry");
    let mut missing = base.clone();
    missing["container_image"] = json!(format!("{registry}/testbed/nonexistent:1"));
    let s = run("slurm-submit", &[], &missing);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status.name(), "FAILED");
    let summary = r.summary.as_str();
    assert!(
        summary.contains(&format!(
            "the container image {}#testbed/nonexistent:1 could not be imported",
            registry
        )) && summary.contains("404"),
        "{summary}"
    );

    let mut mount = base.clone();
    mount["container_image"] = json!(testbed().s("container_image_file"));
    mount["mounts"] = json!("/nonexistent-mount-source:/x");
    let s = run("slurm-submit", &[], &mount);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 1, "{}", w.stderr);
    let summary = w.report().summary.as_str().to_string();
    assert!(
        summary
            .contains("the `mounts` source /nonexistent-mount-source does not exist on the node"),
        "{summary}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_repository_without_a_build_runs_the_whole_flow_without_a_build_job() {
    crate::needs_cluster!();
    // Nothing about builds in the document, and no TensorRT-LLM build script in the repository.
    let (_fx, mut base) = synced("w-nobuild");
    base["command"] = json!("echo ran without a build");
    base["recipe"] = json!("single");
    let s = run("slurm-submit", &["--build"], &base);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert_eq!(s.job().skipped, Some(true));
    assert!(s.stderr.contains("no build job"), "{}", s.stderr);
    let w = run("slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let s2 = run("slurm-submit", &[], &w.doc);
    assert_eq!(s2.code, 0, "{}", s2.stderr);
    let w2 = run("slurm-watch", &["--interval", "1"], &s2.doc);
    assert_eq!(w2.report().status.name(), "PASSED", "{}", w2.stderr);
    // Asking for a build with nothing to build with is said, naming the field.
    let mut asked = base.clone();
    asked["build_project"] = json!(true);
    let r = run("slurm-submit", &["--build"], &asked);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.error().field.as_deref(), Some("build_project"));
}
