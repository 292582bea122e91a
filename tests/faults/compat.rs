//! Real login nodes: an old userland (the testbed's old login node: busybox /bin/sh, bsdtar or
//! busybox tar, and stand-ins of old git, tmux 1.8, a flock that fails and a sleep without
//! fractions) and site policies (real Slurm configuration, switched per test with
//! `scripts/local-cluster policy NAME`, and back to none at the end, whatever happens).

use crate::alloc;
use crate::fixture::{self, synced_on};
use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// A site policy in force until dropped (then none again, also when the test fails).
struct Policy;

impl Policy {
    fn set(name: &str) -> Policy {
        let out = Command::new(repo_root().join("scripts/local-cluster"))
            .args(["policy", name])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "policy {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Policy
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/local-cluster"))
            .args(["policy", "none"])
            .output();
    }
}

/// Run a shell command on the old login node (its own /tmp: its tmux sessions are its own).
fn on_old_node(cmd: &str) -> String {
    let out = Command::new("ssh")
        .args(["-F", &testbed().ssh_config(), &testbed().s("old_host"), cmd])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn set_old_tar(which: &str) {
    std::fs::write(
        format!("{}/tar-impl", testbed().s("old_userland_dir")),
        format!("{which}\n"),
    )
    .unwrap();
}

fn submit_and_watch(doc: &Value) -> (Run, Run) {
    let sub = run("slurm-submit", &[], doc);
    assert_eq!(sub.code, 0, "{}", sub.stderr);
    let w = run("slurm-watch", &[], &sub.doc);
    (sub, w)
}

fn job_output(w: &Run) -> String {
    let out = w
        .typed()
        .job
        .and_then(|j| j.stdout_path)
        .unwrap_or_default();
    std::fs::read_to_string(out).unwrap_or_default()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_old_login_node_runs_every_tool_with_old_git_tmux_18_no_flock_and_busybox() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    struct TarBack;
    impl Drop for TarBack {
        fn drop(&mut self) {
            set_old_tar("bsdtar");
        }
    }
    let _tar_back = TarBack;
    // What the old login node is: checked, so the test cannot pass against a modern one.
    let seen = on_old_node(
        "hostname; git --version; tmux -V; tar --version | head -n 1; sh --help 2>&1 | head -n 1; \
         flock -w 1 9 9>/dev/null; echo flock=$?; sleep 0.1; echo sleep=$?; \
         mkdir -p ~/.old-userland; rm -f ~/.old-userland/sleep.log",
    );
    for fact in [
        "login-old",
        "git version 2.6.6",
        "tmux 1.8",
        "bsdtar",
        "BusyBox",
        "flock=1",
        "sleep=1",
    ] {
        assert!(seen.contains(fact), "{fact}: {seen}");
    }

    let name = format!("old-{}", std::process::id());
    let (fx, tracked, said) = synced_on("old_host", &name);
    assert!(
        !said.contains("origin is"),
        "the clone's origin was misread (git remote get-url is git 2.7+): {said}"
    );
    // Untracked files through bsdtar, then a cluster-side edit that the next sync must stash
    // with the old git (no `git stash push`).
    write(&fx.local.join("notes.txt"), "untracked, sent by bsdtar\n");
    let u = run("slurm-sync-untracked", &[], &tracked);
    assert_eq!(u.code, 0, "{}", u.stderr);
    let remote = &fx.remote_repo;
    assert_eq!(
        fixture::read(&format!("{remote}/notes.txt")),
        "untracked, sent by bsdtar\n"
    );
    std::fs::write(format!("{remote}/README.md"), "edited on the cluster\n").unwrap();
    write(&fx.local.join("src/a.py"), "print('a, edited locally')\n");
    let again = run("slurm-sync-tracked", &[], &u.doc);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.synced().stash.flatten().is_some(),
        "{}",
        again.doc["sync_tracked"]
    );
    assert_eq!(
        fixture::read(&format!("{remote}/src/a.py")),
        "print('a, edited locally')\n"
    );
    // busybox tar takes the next untracked sync.
    set_old_tar("busybox");
    std::fs::create_dir_all(fx.local.join("data")).unwrap();
    write(&fx.local.join("data/more.txt"), "sent by busybox tar\n");
    let u2 = run("slurm-sync-untracked", &[], &again.doc);
    assert_eq!(u2.code, 0, "{}", u2.stderr);
    assert_eq!(
        fixture::read(&format!("{remote}/data/more.txt")),
        "sent by busybox tar\n"
    );
    set_old_tar("bsdtar");

    // Submissions: srun held in tmux 1.8, the lock without flock, the job-id wait with a sleep
    // that refuses fractions; torchrun with the spellings the oldest torchrun takes.
    for (recipe, cmd) in [
        ("single", "echo single-ran; cat notes.txt"),
        ("batch", "echo batch-ran"),
        ("launcher", "sh -c 'echo launcher-rank-$RANK'"),
    ] {
        let mut d = u2.doc.clone();
        d["recipe"] = json!(recipe);
        d["command"] = json!(cmd);
        d["job_name"] = json!(format!("st-{name}-{recipe}"));
        let (sub, w) = submit_and_watch(&d);
        assert_eq!(
            w.report().status.name(),
            "PASSED",
            "{recipe}: {}\n{}",
            sub.stderr,
            w.stderr
        );
        let out = job_output(&w);
        let want = match recipe {
            "single" => "single-ran\nuntracked, sent by bsdtar",
            "batch" => "batch-ran",
            _ => "launcher-rank-0",
        };
        assert!(out.contains(want), "{recipe}: {out}");
    }
    // A fraction refused is followed by a whole-second nap, never by a spin.
    let log = on_old_node("cat ~/.old-userland/sleep.log");
    let lines: Vec<&str> = log.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("refused") {
            assert_eq!(lines.get(i + 1), Some(&"slept 1"), "{log}");
        }
    }
    assert!(
        lines.iter().filter(|l| l.starts_with("refused")).count() < 40,
        "{log}"
    );

    // slurm-alloc with tmux 1.8: exact session names, another allocation's session untouched.
    let mut a = u2.doc.clone();
    a["job_name"] = json!(format!("st-{name}-alloc"));
    let session = format!("slurm-tools-st-{name}-alloc");
    on_old_node(&format!(
        "tmux new-session -d -s {session}-other 'sleep 300'"
    ));
    let up = alloc(&["up"], &a);
    assert_eq!(up.code, 0, "{}", up.stderr);
    assert_eq!(up.allocation().login_host.as_deref(), Some("login-old"));
    let ex = alloc(&["exec", "--", "echo exec-ran-on-$(hostname)"], &up.doc);
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    assert!(ex.stdout.contains("exec-ran-on-mn"), "{}", ex.stderr);
    let down = alloc(&["down"], &ex.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(down.stderr.contains("SESSION_KILLED"), "{}", down.stderr);
    let sessions = on_old_node("tmux ls -F '#{session_name}'");
    assert!(
        sessions.lines().any(|l| l == format!("{session}-other")),
        "{sessions}"
    );
    assert!(!sessions.lines().any(|l| l == session), "{sessions}");
    on_old_node(&format!("tmux kill-session -t {session}-other"));
}

/// scontrol no longer knows the job (accounting disabled: the record is purged after MinJobAge).
fn purged(job: &str) -> bool {
    let out = Command::new("scontrol")
        .args(["show", "job", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).contains("Invalid job id")
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn without_accounting_the_watch_gives_passed_failed_timeout_and_says_how_after_a_purge() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let _policy = Policy::set("no-accounting");
    let pf = run("slurm-ssh-preflight", &[], &doc_for("direct_host"));
    assert_eq!(pf.code, 0, "{}", pf.stderr);
    assert_eq!(
        pf.preflight()
            .remote
            .accounting
            .map(|a| a.to_string())
            .unwrap_or_default(),
        "disabled"
    );
    let (_fx, base) = fixture::synced(&format!("noacct-{}", std::process::id()));
    let job = |recipe: &str, cmd: &str, limit: &str| {
        let mut d = base.clone();
        d["recipe"] = json!(recipe);
        d["command"] = json!(cmd);
        d["time_limit"] = json!(limit);
        d["job_name"] = json!(format!("st-noacct-{recipe}-{}", cmd.len()));
        let s = run("slurm-submit", &[], &d);
        assert_eq!(s.code, 0, "{}", s.stderr);
        s.doc
    };
    // Watched while they run: scontrol's word, before MinJobAge (10 s) purges the record.
    let watched = [
        (job("single", "echo fine", "00:05:00"), "PASSED"),
        (job("single", "echo broken; exit 3", "00:05:00"), "FAILED"),
        (job("batch", "exit 4", "00:05:00"), "FAILED"),
        (job("single", "sleep 600", "00:01:00"), "TIMEOUT"),
    ];
    // Not watched until Slurm has forgotten them.
    let later = [
        (
            job("single", "echo done later", "00:05:00"),
            "PASSED",
            "0:0",
        ),
        (job("single", "exit 5", "00:05:00"), "FAILED", "5:0"),
        (
            job("batch", "echo batch later", "00:05:00"),
            "PASSED",
            "0:0",
        ),
    ];
    // A sweep not watched until Slurm has forgotten it: one task that ends by itself, one that
    // its time limit ends.
    let sweep = {
        let mut d = base.clone();
        d["recipe"] = json!("batch");
        d["command"] = json!("sleep {v}");
        d["time_limit"] = json!("00:01:00");
        d["job_name"] = json!(format!("st-noacct-sweep-{}", std::process::id()));
        d["sweep"] = json!({"sets": [{"v": "0"}, {"v": "600"}]});
        let s = run("slurm-submit", &[], &d);
        assert_eq!(s.code, 0, "{}", s.stderr);
        s.doc
    };
    let watchers: Vec<_> = watched
        .iter()
        .map(|(d, want)| {
            let d = d.clone();
            let want = want.to_string();
            std::thread::spawn(move || (run("slurm-watch", &[], &d), want))
        })
        .collect();
    for h in watchers {
        let (w, want) = h.join().unwrap();
        assert_eq!(w.report().status.name(), want.as_str(), "{}", w.stderr);
        assert_eq!(w.report().source.to_string(), "scontrol", "{}", w.stderr);
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    for d in later.iter().map(|(d, _, _)| d).chain([&sweep]) {
        let id = job_of(d).job_id.unwrap();
        while !purged(&id) {
            assert!(Instant::now() < deadline, "job {id} was never purged");
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    for (d, want, exit) in &later {
        let w = run("slurm-watch", &[], d);
        let r = w.report();
        assert_eq!(r.status.name(), *want, "{}", w.stderr);
        assert_eq!(r.source.to_string(), "end_marker");
        assert_eq!(r.slurm_state, "PURGED");
        assert_eq!(r.exit_code.as_deref().unwrap_or_default(), *exit);
        let summary = r.summary.as_str();
        assert!(
            summary.contains("MinJobAge") && summary.contains("end marker"),
            "{summary}"
        );
        assert_schema(&w.doc);
    }
    // The sweep's tasks have no end marker: each is judged at once from its log (slurmstepd's
    // time-limit line), or said unknown, never after waiting out the outage limit (30 minutes).
    let mut c = tool("slurm-watch");
    c.args(["--outage-limit", "600"]);
    let started = Instant::now();
    let w = run_raw(c, sweep.to_string().as_bytes());
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "judged at once: {}",
        w.stderr
    );
    let r = w.report();
    assert_eq!(r.source.to_string(), "end_marker", "{}", w.stderr);
    let tasks = r.tasks.unwrap();
    assert_eq!(
        tasks
            .iter()
            .map(|t| (t.slurm_state.as_str(), t.status.name()))
            .collect::<Vec<_>>(),
        [("PURGED", "ERROR"), ("PURGED", "TIMEOUT")],
        "{}",
        w.stderr
    );
    assert!(tasks[0].summary.contains("unknown"), "{}", tasks[0].summary);
    assert!(
        tasks[1].summary.contains("TIME LIMIT"),
        "{}",
        tasks[1].summary
    );
    assert_schema(&w.doc);
}

fn jobs_named(name: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "--states=all", "-n", name, "-o", "%i"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_job_submit_policy_that_clears_the_comment_still_finds_every_job_once() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let _policy = Policy::set("comment-cleared");
    let (_fx, base) = fixture::synced(&format!("nocomment-{}", std::process::id()));
    for recipe in ["single", "batch"] {
        let mut d = base.clone();
        d["recipe"] = json!(recipe);
        d["command"] = json!("echo kept");
        let name = format!("st-nocomment-{recipe}-{}", std::process::id());
        d["job_name"] = json!(name);
        let sub = run("slurm-submit", &[], &d);
        assert_eq!(sub.code, 0, "{recipe}: {}", sub.stderr);
        let id = sub.job_id();
        // The policy is real: Slurm kept no comment.
        let sc = fixture::scontrol(&id);
        assert!(
            sc.get("Comment")
                .is_none_or(|c| c == "(null)" || c.trim().is_empty()),
            "{sc:?}"
        );
        let w = run("slurm-watch", &[], &sub.doc);
        assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);

        // A submit killed once Slurm accepted the job, which pends (the nodes are full, so it
        // has not written its job id file): its rerun finds that job (by its work dir, the
        // comment being gone) instead of submitting a second one.
        let filler = crate::fill_node();
        struct Cancel(String);
        impl Drop for Cancel {
            fn drop(&mut self) {
                let _ = Command::new("scancel").arg(&self.0).status();
            }
        }
        let _filler = Cancel(filler);
        let killed_name = format!("{name}-k");
        d["job_name"] = json!(killed_name);
        let out = crate::kill_at("slurm-submit", &d, "submit:accepted", "-KILL");
        assert_ne!(out.status.code(), Some(0));
        let first = jobs_named(&killed_name);
        assert_eq!(first.len(), 1, "{first:?}");
        let (again, _) = crate::rerun_killed_submit(&out, recipe, &d);
        assert_eq!(again.code, 0, "{recipe}: {}", again.stderr);
        assert!(
            again.stderr.contains("not submitting again"),
            "{}",
            again.stderr
        );
        assert_eq!(again.job().job_id.as_deref(), Some(first[0].as_str()));
        assert_eq!(jobs_named(&killed_name), first, "no second job");
        assert_eq!(
            fixture::scontrol(&first[0])
                .get("JobState")
                .map(String::as_str),
            Some("PENDING")
        );
        drop(_filler);
        let w = run("slurm-watch", &[], &again.doc);
        assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    }
    // slurm-alloc finds its allocation by salloc's own line when the comment is gone.
    let mut a = base.clone();
    a["job_name"] = json!(format!("st-nocomment-alloc-{}", std::process::id()));
    let up = alloc(&["up"], &a);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let id = up.allocation().job_id.as_deref().unwrap().to_string();
    let down = alloc(&["down"], &up.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(
        down.stderr.contains(&format!("CANCELLED {id}")),
        "{}",
        down.stderr
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_alloc_works_where_salloc_would_start_an_interactive_step() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let _policy = Policy::set("interactive-step");
    let (_fx, base) = fixture::synced(&format!("istep-{}", std::process::id()));
    let mut a = base.clone();
    a["job_name"] = json!(format!("st-istep-{}", std::process::id()));
    a["node_count"] = json!(2);
    let up = alloc(&["up"], &a);
    assert_eq!(up.code, 0, "{}", up.stderr);
    // Two steps at once, on every node: none waits behind another or an interactive step.
    let started = Instant::now();
    let (x, y) = std::thread::scope(|s| {
        let x = s.spawn(|| {
            alloc(
                &[
                    "exec",
                    "--mode",
                    "per-node",
                    "--",
                    "sleep 3; echo x-$(hostname)",
                ],
                &up.doc,
            )
        });
        let y = s.spawn(|| alloc(&["exec", "--", "sleep 3; echo y-ran"], &up.doc));
        (x.join().unwrap(), y.join().unwrap())
    });
    assert_eq!(x.code, 0, "{}", x.stderr);
    assert_eq!(y.code, 0, "{}", y.stderr);
    assert_eq!(x.stdout.matches("x-mn").count(), 2, "{}", x.stderr);
    assert!(y.stdout.contains("y-ran"), "{}", y.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the steps waited on each other"
    );
    let down = alloc(&["down"], &up.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn without_pmix_the_mpi_recipe_is_refused_before_anything_is_submitted() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let _policy = Policy::set("no-pmix");
    let (_fx, base) = fixture::synced(&format!("nopmix-{}", std::process::id()));
    let pf = run("slurm-ssh-preflight", &[], &base);
    assert_eq!(pf.code, 0, "{}", pf.stderr);
    let plugins = pf.preflight().remote.mpi_plugins.unwrap_or_default();
    assert!(!plugins.iter().any(|p| p == "pmix"), "{plugins:?}");
    let mut d = pf.doc.clone();
    d["recipe"] = json!("mpi");
    d["command"] = json!(testbed().s("mpi_program"));
    let name = format!("st-nopmix-{}", std::process::id());
    d["job_name"] = json!(name);
    let sub = run("slurm-submit", &[], &d);
    assert_eq!(sub.code, 2, "{}", sub.stderr);
    assert_eq!(sub.error().field.as_deref().unwrap_or_default(), "recipe");
    let msg = sub.error_message();
    assert!(
        msg.contains("no mpi/pmix plugin") && msg.contains("srun --mpi=list"),
        "{msg}"
    );
    assert!(jobs_named(&name).is_empty(), "something was submitted");
    drop(_policy);
    // With the plugin back, the same document runs.
    let pf = run("slurm-ssh-preflight", &[], &d);
    let sub = run("slurm-submit", &[], &pf.doc);
    assert_eq!(sub.code, 0, "{}", sub.stderr);
    let w = run("slurm-watch", &[], &sub.doc);
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn behind_a_round_robin_login_alias_the_allocations_login_node_is_named() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    // `slurm-rr`: one name, two login nodes (this machine and login-old); which one a new
    // connection reaches is the port the config names at that moment.
    let dir = tempdir();
    let config = dir.path().join("ssh_config");
    let point_at = |port: &str| {
        let base = std::fs::read_to_string(testbed().ssh_config()).unwrap();
        let direct = testbed().s("direct_host");
        let entry: String = base
            .split("\nHost ")
            .find(|b| b.starts_with(&direct))
            .unwrap()
            .replacen(&direct, "slurm-rr", 1)
            .replace(
                &format!("Port {}", testbed().info["direct_port"]),
                &format!("Port {port}"),
            );
        std::fs::write(&config, format!("Host {entry}\n")).unwrap();
    };
    point_at(&testbed().info["direct_port"].to_string());
    let (_fx, base) = fixture::synced(&format!("rr-{}", std::process::id()));
    let mut d = base.clone();
    d["ssh_host"] = json!("slurm-rr");
    d["ssh_config_file"] = json!(config);
    d["job_name"] = json!(format!("st-rr-{}", std::process::id()));
    let pf = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(pf.code, 0, "{}", pf.stderr);
    let first = pf.preflight().remote.login_host.unwrap();
    let up = alloc(&["up"], &pf.doc);
    assert_eq!(up.code, 0, "{}", up.stderr);
    assert_eq!(up.allocation().login_host.as_deref(), Some(first.as_str()));
    // The alias now leads to the other login node.
    point_at(&testbed().info["old_port"].to_string());
    let pf2 = run("slurm-ssh-preflight", &[], &up.doc);
    assert_eq!(pf2.code, 0, "{}", pf2.stderr);
    assert_eq!(
        pf2.preflight().remote.login_host.as_deref(),
        Some("login-old")
    );
    let ex = alloc(&["exec", "--", "echo still-runs"], &pf2.doc);
    assert_eq!(ex.code, 0, "{}", ex.stderr);
    assert!(ex.stdout.contains("still-runs"), "{}", ex.stderr);
    for said in [
        format!("is on login node {first}"),
        "reached login-old".to_string(),
        format!("tmux attach -t slurm-tools-st-rr-{}", std::process::id()),
    ] {
        assert!(ex.stderr.contains(&said), "{said}: {}", ex.stderr);
    }
    let down = alloc(&["down"], &ex.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(down.stderr.contains("is on login node"), "{}", down.stderr);
    let id = up.allocation().job_id.unwrap();
    let id = id.as_str();
    assert!(
        down.stderr.contains(&format!("CANCELLED {id}")),
        "{}",
        down.stderr
    );
    // On the first login node, the session (and its salloc) ends with the allocation: salloc's
    // --kill-command ends the hold command, nothing lingers there.
    let session = format!("slurm-tools-st-rr-{}", std::process::id());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if !crate::tmux_sessions().contains(&session) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{session} outlived its allocation"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The cluster user's association given a cap on its running jobs' GPUs (GrpTRES) for one test,
/// and none again when dropped, whatever happens.
struct AssociationGpuCap;

impl AssociationGpuCap {
    fn set(gpus: i64) -> AssociationGpuCap {
        association_gpu_cap(gpus);
        AssociationGpuCap
    }
}

impl Drop for AssociationGpuCap {
    fn drop(&mut self) {
        association_gpu_cap(-1);
    }
}

fn association_gpu_cap(gpus: i64) {
    let out = Command::new("sacctmgr")
        .args(["-i", "modify", "user", "where"])
        .arg(format!("name={}", testbed().s("cluster_user")))
        .arg(format!("account={}", testbed().s("account")))
        .arg("set")
        .arg(format!("GrpTRES=gres/gpu={gpus}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sacctmgr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An association's cap on the GPUs its running jobs hold at once (GrpTRES), for real: with the
/// cap used up by a running job of the person's, placement says what blocks the first site (the
/// cap, the job, the ask) and a job that pends on it is explained with the same figures and what
/// fits (issue 36).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_association_gpu_cap_on_running_jobs_blocks_placement_and_explains_the_pending_job() {
    crate::needs_cluster!();
    let _one = crate::one_at_a_time();
    let _cap = AssociationGpuCap::set(4);
    let account = testbed().s("account");
    let filler = first_site_filler(&["--gpus-per-node=4"]);
    let _f = CancelJobs(vec![filler.clone()]);

    // Placement, with the first site alone in the catalog: blocked, and it says by what.
    let dir = tempdir();
    let mut catalog: Value =
        serde_json::from_str(&std::fs::read_to_string(testbed().s("catalog")).unwrap()).unwrap();
    catalog["clusters"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["cluster_name"] == "local");
    let catalog_file = dir.path().join("clusters.json");
    std::fs::write(&catalog_file, catalog.to_string()).unwrap();
    let doc = json!({
        "required_devices_per_node": 1,
        "account": account,
        "slurm_user": testbed().s("cluster_user"),
        "ssh_config_file": testbed().ssh_config(),
        "command": "true",
    });
    let mut c = tool("slurm-resolve");
    c.args(["--catalog", catalog_file.to_str().unwrap(), "--place"]);
    let r = run_raw(c, doc.to_string().as_bytes());
    assert_eq!(r.code, 2, "nothing can start it now: {}", r.stderr);
    let placement: shared::contract::schema::Placement = r.decoded("placement");
    let local = &placement.candidates[0];
    assert_eq!(local.state, "answered", "{local:?}");
    assert_eq!(
        local.blocked_by.as_deref(),
        Some(
            format!(
                "your association (account {account}) allows 4 GPUs at once (GrpTRES) and your running job {filler} uses 4; this request asks for 1"
            )
            .as_str()
        ),
        "{local:?}"
    );
    assert!(
        r.error().message.contains("allows 4 GPUs at once"),
        "{}",
        r.stderr
    );

    // A job that pends on the cap: the category, the figures, what fits.
    let state = tempdir();
    let (_fx, mut d) = fixture::synced("assoc-gpu-cap");
    d["recipe"] = json!("batch");
    d["command"] = json!("echo ran");
    d["gpus_per_node"] = json!(1);
    let (e, stderr, id) = explained(state.path(), &d, "your_limit");
    assert_eq!(e["reason"], "AssocGrpGRES", "{e}");
    assert_eq!(
        e["explanation"],
        format!("your association (account {account}) allows 4 GPUs at once (GrpTRES) and your running job {filler} uses 4; this job asks for 1"),
        "{e}"
    );
    assert_eq!(
        e["action"], "wait for it to end (or `scancel` it), or use another account (`account`)",
        "{e}"
    );
    assert!(
        stderr.contains(&format!("job {id} is pending (AssocGrpGRES, your_limit)")),
        "{stderr}"
    );
}
