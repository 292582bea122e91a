//! A canary password given to every tool never shows up anywhere: not in any process's argv or
//! environment on either side while the tools run (sampled from /proc; the cluster side is this
//! machine too), not in stdout, stderr, logs, remote files, job scripts, `scontrol show job`, or
//! sacct's submit line (docs/reliability.md promise 5).

use crate::fixture::*;
use crate::harness::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Scan every process's cmdline and environ for `needle` until stopped; returns the hits.
fn proc_sampler(needle: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let hits = Mutex::new(Vec::new());
        while !stop.load(Ordering::Relaxed) {
            if let Ok(dir) = std::fs::read_dir("/proc") {
                for e in dir.flatten() {
                    let name = e.file_name();
                    if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                        continue;
                    }
                    for f in ["cmdline", "environ"] {
                        if let Ok(b) = std::fs::read(e.path().join(f)) {
                            if b.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                                let cmd =
                                    std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                                let mut h = hits.lock().unwrap();
                                h.push(format!(
                                    "{f} of pid {}: {}",
                                    name.to_string_lossy(),
                                    String::from_utf8_lossy(&cmd).replace('\0', " ")
                                ));
                                h.dedup();
                            }
                        }
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        hits.into_inner().unwrap()
    })
}

fn grep_tree(root: &std::path::Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if m.is_file() && m.len() < 50_000_000 {
            if let Ok(b) = std::fs::read(&p) {
                if b.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(p.display().to_string());
                }
            }
        }
    }
    found
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_canary_password_given_to_every_tool_never_appears_anywhere() {
    crate::needs_cluster!();
    let canary = format!("CanaryPw-{}-7f3a", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = proc_sampler(canary.clone(), stop.clone());

    let (fx, mut d) = synced("secrets");
    d["recipe"] = json!("single");
    d["command"] = json!("echo job ran; env | sort");
    d["build_command"] = json!("echo build ran; env | sort");
    d["work_dir"] = json!("logs");
    let mut outputs = String::new();
    // Each tool gets the password in its input (the first one drops it from its output).
    let steps: &[(&str, &[&str])] = &[
        ("slurm-ssh-preflight", &[]),
        ("slurm-sync-tracked", &[]),
        ("slurm-sync-untracked", &[]),
        ("slurm-submit", &["--build"]),
        ("slurm-watch", &["--interval", "1"]),
        ("slurm-submit", &[]),
        ("slurm-watch", &["--interval", "1"]),
        ("slurm-report", &[]),
    ];
    for (tool_name, args) in steps {
        d["slurm_password"] = json!(canary);
        // A user field that only looks secret passes every tool unchanged.
        d["extra"] = json!({"api_token": "user-field", "nested": [{"db_secret": 1}]});
        let r = run(tool_name, args, &d);
        assert!(r.code == 0, "{tool_name}: {}", r.stderr);
        outputs.push_str(&r.stdout);
        outputs.push_str(&r.stderr);
        d = r.doc;
    }
    stop.store(true, Ordering::Relaxed);
    let hits = sampler.join().unwrap();
    // The test's own process holds the canary in memory, not in its argv or environment.
    assert!(
        hits.is_empty(),
        "the canary was in a process's argv or environment: {hits:#?}"
    );
    assert!(
        !outputs.contains(&canary),
        "the canary reached stdout or stderr"
    );
    assert_eq!(report_of(&d).status.name(), "PASSED");
    assert_eq!(
        d["extra"],
        json!({"api_token": "user-field", "nested": [{"db_secret": 1}]})
    );

    // Remote files (the checkout, its work dir and logs, the build scripts), local copies.
    let remote_root = std::path::PathBuf::from(testbed().remote_root());
    let found = grep_tree(&std::path::PathBuf::from(&fx.remote_repo), &canary);
    assert!(found.is_empty(), "in remote files: {found:?}");
    let found = grep_tree(&remote_root.join("slurm-tools-build"), &canary);
    assert!(found.is_empty(), "in the build scripts or logs: {found:?}");
    let found = grep_tree(&fx.local, &canary);
    assert!(found.is_empty(), "in local files (log copy): {found:?}");
    // Slurm's records of the jobs.
    let build: shared::contract::schema::Build = section_of(&d, "build");
    for job in [build.job.job_id.unwrap(), job_of(&d).job_id.unwrap()] {
        let job = job.as_str();
        let sc = std::process::Command::new("scontrol")
            .args(["show", "job", job])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&sc.stdout).contains(&canary),
            "in scontrol show job {job}"
        );
        let sa = std::process::Command::new("sacct")
            .args([
                "-j",
                job,
                "-n",
                "-P",
                "--format=SubmitLine,JobName,Comment,WorkDir",
            ])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&sa.stdout).contains(&canary),
            "in sacct for {job}"
        );
    }
}

#[test]
fn the_proc_sampler_does_see_a_value_in_argv_and_environment() {
    // The check above can fail: a value in a child's argv or environment is found.
    let needle = format!("ProbeValue-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = proc_sampler(needle.clone(), stop.clone());
    let a = std::process::Command::new("sh")
        .args(["-c", "sleep 0.5", &needle])
        .spawn();
    let mut b = std::process::Command::new("sleep")
        .arg("0.5")
        .env("SOME_VAR", &needle)
        .spawn()
        .unwrap();
    let _ = a.unwrap().wait();
    let _ = b.wait();
    stop.store(true, Ordering::Relaxed);
    let hits = sampler.join().unwrap();
    assert!(hits.iter().any(|h| h.starts_with("cmdline")), "{hits:?}");
    assert!(hits.iter().any(|h| h.starts_with("environ")), "{hits:?}");
}
