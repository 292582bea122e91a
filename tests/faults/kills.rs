//! The tools killed (SIGKILL and SIGINT) at every step that matters: nothing half-written, nothing
//! lost, and a rerun finishes the work without doing it twice.

use super::*;

fn askpass_dirs() -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("slurm-tools-askpass-"))
        .collect()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn sync_killed_at_every_step_loses_nothing_and_a_rerun_cleans_up() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for (tool_name, step) in [
        ("slurm-sync-tracked", "sync-tracked:snapshot"),
        ("slurm-sync-tracked", "sync-tracked:pushed"),
        ("slurm-sync-tracked", "sync-tracked:checked-out"),
        ("slurm-sync-untracked", "sync-untracked:streaming"),
    ] {
        for signal in ["-KILL", "-INT"] {
            let fx =
                fixture::Fixture::new(&format!("kill-{}-{}", step.replace(':', "-"), &signal[1..]));
            let doc = messy_doc_for(&fx, tool_name);
            let before = fixture::local_state(&fx.local);
            let out = kill_at(tool_name, &doc, step, signal);
            assert_ne!(out.status.code(), Some(0), "{step} {signal}: it was killed");
            assert_eq!(
                fixture::local_state(&fx.local),
                before,
                "{step} {signal}: the local repository changed"
            );
            let tracked_stderr = rerun_both_syncs(&fx, &before, &format!("{step} {signal}"));
            if step == "sync-tracked:pushed" || step == "sync-tracked:checked-out" {
                assert!(
                    tracked_stderr.contains("left on origin by an interrupted run"),
                    "{step} {signal}: {tracked_stderr}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_submit_killed_before_sending_submits_nothing_and_a_rerun_submits_once() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for signal in ["-KILL", "-INT"] {
        // Unique per run: squeue lists ended jobs for minutes (MinJobAge).
        let name = format!("f-kill-submit{signal}-{}", std::process::id());
        let (_fx, mut d) = synced(&name);
        d["recipe"] = json!("batch");
        d["command"] = json!("echo once");
        let out = kill_at("slurm-submit", &d, "submit:before", signal);
        assert_ne!(out.status.code(), Some(0));
        assert_eq!(
            jobs_named(&format!("st-{name}")),
            0,
            "{signal}: nothing sent"
        );
        let s = run("slurm-submit", &[], &d);
        assert_eq!(s.code, 0, "{signal}: {}", s.stderr);
        assert_eq!(
            jobs_named(&format!("st-{name}")),
            1,
            "{signal}: exactly one job"
        );
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_watch_killed_mid_poll_leaves_the_job_alone_and_a_rerun_resumes() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for signal in ["-KILL", "-INT"] {
        let (_fx, mut d) = synced(&format!("f-kill-watch{signal}"));
        d["recipe"] = json!("batch");
        d["command"] = json!("echo start; sleep 8; echo end");
        let s = run("slurm-submit", &[], &d);
        assert_eq!(s.code, 0, "{}", s.stderr);
        let id = s.job_id();
        let out = kill_at("slurm-watch", &s.doc, "watch:polled", signal);
        assert_ne!(out.status.code(), Some(0), "{signal}: it was killed");
        let sq = Command::new("squeue")
            .args(["-h", "-j", &id, "-o", "%T"])
            .output()
            .unwrap();
        let state = String::from_utf8_lossy(&sq.stdout).trim().to_string();
        assert!(
            state == "RUNNING" || state == "PENDING",
            "{signal}: the job is not touched by the watch dying: {state:?}"
        );
        let w = run("slurm-watch", &["--interval", "1"], &s.doc);
        assert_eq!(w.code, 0, "{signal}: the rerun resumes: {}", w.stderr);
        assert_eq!(w.report().status.name(), "PASSED");
        assert_eq!(w.report().excerpt, ["start", "end"]);
        // The killed watch's session does not linger on the cluster.
        std::thread::sleep(Duration::from_secs(1));
        let ps = Command::new("pgrep")
            .args(["-u", &testbed().s("cluster_user"), "-f", "read -r verb"])
            .output()
            .unwrap();
        assert!(
            ps.stdout.is_empty(),
            "{signal}: a poll loop is left on the cluster: {}",
            String::from_utf8_lossy(&ps.stdout)
        );

        // Killed after its verdict, before it wrote the report: a rerun says the same.
        let work = tempdir();
        let mut done = s.doc.clone();
        done["work_dir"] = json!(work.path());
        let out = kill_at("slurm-watch", &done, "watch:verdict", signal);
        assert_ne!(out.status.code(), Some(0), "{signal}: it was killed");
        assert!(out.stdout.is_empty(), "{signal}: no half document");
        let again = run("slurm-watch", &["--interval", "1"], &done);
        assert_eq!(again.code, 0, "{signal}: {}", again.stderr);
        assert_eq!(again.report().status.name(), "PASSED");
        assert!(again.report().local_log_complete);
        let local = again.report().local_log.unwrap();
        assert_eq!(std::fs::read_to_string(local).unwrap(), "start\nend\n");
        let names: Vec<_> = std::fs::read_dir(work.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "{signal}: only the log, no part file: {names:?}"
        );
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_preflight_killed_before_its_check_changes_nothing_and_a_rerun_passes() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for signal in ["-KILL", "-INT"] {
        let mut d = doc_for("direct_host");
        d["mfa_style"] = json!(false);
        let out = kill_at("slurm-ssh-preflight", &d, "preflight:before-check", signal);
        assert_ne!(out.status.code(), Some(0));
        assert!(
            out.stdout.is_empty(),
            "{signal}: no half document on stdout"
        );
        let p = run("slurm-ssh-preflight", &[], &d);
        assert_eq!(p.code, 0, "{signal}: {}", p.stderr);
        assert_eq!(p.preflight().ssh_path.to_string(), "direct");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_submit_killed_after_slurm_accepted_is_found_by_its_rerun_not_submitted_again() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for recipe in ["batch", "single"] {
        for signal in ["-KILL", "-INT"] {
            let name = format!("f-acc-{recipe}{signal}-{}", std::process::id());
            let label = format!("{recipe} {signal}");
            let (_fx, mut d) = synced(&name);
            d["recipe"] = json!(recipe);
            d["command"] = json!("echo once");
            let out = kill_at("slurm-submit", &d, "submit:accepted", signal);
            assert_ne!(out.status.code(), Some(0), "{label}: it was killed");
            assert!(out.stdout.is_empty(), "{label}: it never said the job id");
            let first = job_ids_named(&format!("st-{name}"));
            assert_eq!(first.len(), 1, "{label}: Slurm has the job: {first:?}");

            // The rerun on the same input finds that job instead of submitting a second one.
            let (s, saved) = rerun_killed_submit(&out, recipe, &d);
            assert!(
                !std::path::Path::new(&saved).exists(),
                "{label}: the record goes once the result is written"
            );
            assert_eq!(s.code, 0, "{label}: {}", s.stderr);
            assert!(
                s.stderr.contains("not submitting again"),
                "{label}: {}",
                s.stderr
            );
            assert_eq!(
                s.job().job_id.as_deref(),
                Some(first[0].as_str()),
                "{label}"
            );
            assert_eq!(
                job_ids_named(&format!("st-{name}")),
                first,
                "{label}: no second job"
            );
            let w = run("slurm-watch", &["--interval", "1"], &s.doc);
            assert_eq!(w.code, 0, "{label}: {}", w.stderr);
            assert_eq!(w.report().status.name(), "PASSED", "{label}");

            // Once a run told its result, the same input is a new submission.
            let again = run("slurm-submit", &[], &d);
            assert_eq!(again.code, 0, "{label}: {}", again.stderr);
            assert_ne!(again.job().job_id, s.job().job_id, "{label}");
            assert_eq!(job_ids_named(&format!("st-{name}")).len(), 2, "{label}");
            assert!(
                !again.stderr.contains("not submitting again"),
                "{label}: {}",
                again.stderr
            );
        }
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_preflight_killed_during_the_mfa_login_leaves_no_master_and_a_rerun_logs_in() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let password = std::fs::read_to_string(testbed().s("mfa_password_file"))
        .unwrap()
        .trim()
        .to_string();
    for signal in ["-KILL", "-INT"] {
        let cp = control_path(&format!("f-login{signal}"));
        mfa_logout(&cp);
        let mut d = doc_for("mfa_host");
        d["mfa_style"] = json!(true);
        d["control_path"] = json!(cp);
        d["slurm_password"] = json!(password);
        // Killed while ssh waits for the password it asked for (askpass).
        let mut cmd = tool("slurm-ssh-preflight");
        cmd.arg("--establish");
        let out = kill_cmd_at(cmd, &d, "preflight:askpass", signal);
        assert_ne!(out.status.code(), Some(0), "{signal}: it was killed");
        assert!(out.stdout.is_empty(), "{signal}: no half document");
        // kill_cmd_at read stderr to its end, which the ssh it started shared: that ssh is gone
        // too (its password request went unanswered), and left no master.
        let stem = cp.trim_end_matches("%p").to_string();
        let leftover: Vec<_> = std::fs::read_dir("/tmp")
            .unwrap()
            .map(|e| e.unwrap().path().display().to_string())
            .filter(|p| p.starts_with(&stem))
            .collect();
        assert!(
            leftover.is_empty(),
            "{signal}: no master socket: {leftover:?}"
        );
        let ps = Command::new("pgrep").args(["-f", &stem]).output().unwrap();
        assert!(
            ps.stdout.is_empty(),
            "{signal}: no ssh left: {}",
            String::from_utf8_lossy(&ps.stdout)
        );
        // A killed process runs no clean-up: its askpass directory (the socket path, never the
        // password) is still there. The rerun logs in and removes it.
        assert_eq!(askpass_dirs().len(), 1, "{signal}: {:?}", askpass_dirs());
        let mut again = tool("slurm-ssh-preflight");
        again.arg("--establish");
        let r = run_raw(again, d.to_string().as_bytes());
        mfa_logout(&cp);
        assert_eq!(r.code, 0, "{signal}: {}", r.stderr);
        assert_eq!(r.preflight().master.to_string(), "managed");
        assert!(
            askpass_dirs().is_empty(),
            "{signal}: askpass directories left: {:?}",
            askpass_dirs()
        );
        for text in [&out.stderr[..], r.stdout.as_bytes(), r.stderr.as_bytes()] {
            assert!(
                !String::from_utf8_lossy(text).contains(&password),
                "{signal}: the password leaked"
            );
        }
    }
}
