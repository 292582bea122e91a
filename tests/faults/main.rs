//! Tests that take the whole cluster, in their own test binary: faults injected for real (they
//! stop and restart the cluster's sshd and slurmctld) and slurm-alloc (it fills the node to make
//! an allocation pend). They run after the main suite (cargo runs test binaries one at a time)
//! and one at a time among themselves.

// A scenario reads top to bottom: the workspace limit on function length is for the code.
#![allow(clippy::too_many_lines)]

#[path = "../integration/fixture.rs"]
mod fixture;
#[path = "../integration/harness.rs"]
#[allow(dead_code)]
mod harness;

mod attach;
mod compat;
mod forward;
mod modern;
mod nodes;

use fixture::{synced, wait_done};
use harness::*;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The cluster to this test alone: the lock, and no job left by a test before it (one that
/// failed half-way may leave a job or an allocation, which would hold the nodes and fail every
/// test after it). What it cancels is named on stderr, so a leak still shows.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let user = testbed().s("cluster_user");
    let left = Command::new("squeue")
        .args(["-h", "-u", &user, "-o", "%i %j %T"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if !left.is_empty() {
        eprintln!("cancelling jobs a test before this one left:\n{left}");
        let _ = Command::new("scancel").args(["-u", &user]).status();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let q = Command::new("squeue")
                .args(["-h", "-u", &user])
                .output()
                .map(|o| o.stdout.is_empty())
                .unwrap_or(true);
            if q {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    guard
}

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

/// Stop the key-based sshd the way a login node going down does: its open connections (the
/// per-connection sshd processes, children of the listener) first, then the listener.
fn stop_direct_sshd() {
    let pid = pid_of(&format!("{}/sshd_direct.pid", testbed().s("state_dir")));
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    // Then every process holding a connection to its port (a connection accepted just before
    // the listener went lives on in an orphaned child, so the process tree is not enough).
    let port = testbed().info["direct_port"].to_string();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        let out = Command::new("ss")
            .args(["-Htnp", &format!("( sport = :{port} )")])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let pids: Vec<&str> = text
            .split("pid=")
            .skip(1)
            .filter_map(|p| p.split(|c: char| !c.is_ascii_digit()).next())
            .collect();
        if !pids.is_empty() {
            let _ = Command::new("kill").arg("-KILL").args(&pids).status();
        }
    }
}

/// Run a tool that pauses at `step` for `pause` seconds; run `fault` while it is paused, then
/// let it go on to its end.
fn fault_at(
    tool_name: &str,
    doc: &serde_json::Value,
    step: &str,
    pause: u64,
    fault: impl FnOnce(),
) -> Run {
    use std::io::Read;
    let (mut child, lines, mut stderr) = spawn_paused(tool(tool_name), doc, step, pause);
    let mut stdout = child.stdout.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).unwrap();
        s
    });
    fault();
    for line in lines {
        stderr.push_str(&line.unwrap());
        stderr.push('\n');
    }
    let status = child.wait().unwrap();
    let stdout = out_reader.join().unwrap();
    Run {
        code: status.code().unwrap_or(-1),
        doc: serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null),
        stdout,
        stderr,
    }
}

/// How many jobs Slurm knows (any state) by this name.
fn jobs_named(name: &str) -> usize {
    job_ids_named(name).len()
}

/// Job ids Slurm knows (any state) by this name.
fn job_ids_named(name: &str) -> Vec<String> {
    job_ids_in(name, "all")
}

/// Allocations by this name that are still held (pending or running).
fn held_allocations(name: &str) -> Vec<String> {
    job_ids_in(name, "PENDING,RUNNING")
}

fn job_ids_in(name: &str, states: &str) -> Vec<String> {
    let sq = Command::new("squeue")
        .args(["-h", &format!("--states={states}"), "-o", "%i %j"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&sq.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, n)| *n == name)
        .map(|(id, _)| id.to_string())
        .collect()
}

/// Start a tool (`cmd`, its arguments given) that pauses at `step` for `pause` seconds; return
/// once it says it paused, with the rest of its stderr still to read and what it said so far.
fn spawn_paused(
    mut cmd: Command,
    doc: &serde_json::Value,
    step: &str,
    pause: u64,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
    String,
) {
    use std::io::{BufRead, Write};
    let mut child = cmd
        .env("SLURM_TOOLS_PAUSE_AT", step)
        .env("SLURM_TOOLS_PAUSE_SECONDS", pause.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(&format!("paused at {step}")) {
            break;
        }
    }
    assert!(seen.contains("paused at"), "never reached {step}:\n{seen}");
    (child, lines, seen)
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
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_survives_sshd_stopping_and_restarting_and_the_job_is_untouched() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let (_fx, mut d) = synced("f-sshd");
    d["recipe"] = json!("single");
    d["command"] = json!("echo before; sleep 14; echo after");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
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
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_waits_out_a_stopped_slurmctld_without_a_verdict() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
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

fn alloc_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_slurm-alloc"));
    cmd.args(args).env("XDG_CONFIG_HOME", "/nonexistent").env(
        "SLURM_TOOLS_STATE_DIR",
        test_home().join("state/slurm-tools"),
    );
    cmd
}

fn alloc(args: &[&str], doc: &serde_json::Value) -> Run {
    run_raw(alloc_cmd(args), doc.to_string().as_bytes())
}

fn alloc_doc(host_key: &str, name: &str) -> serde_json::Value {
    let mut d = doc_for(host_key);
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["job_name"] = json!(name);
    // The testbed's image as a .sqsh file (no registry import: a few seconds per node).
    d["container_image"] = json!(testbed().s("container_image_file"));
    // A list, as slurm-submit takes it (shared::slurm::Settings reads both).
    d["mounts"] = json!(["/tmp:/tmp", format!("{}:/mnt/images:ro", images_dir())]);
    d
}

fn images_dir() -> String {
    std::path::Path::new(&testbed().s("container_image_file"))
        .parent()
        .unwrap()
        .display()
        .to_string()
}

/// The enroot containers of the cluster user on every node (pyxis names them
/// pyxis_<jobid>_<name>): enroot's data path is node-local, under each node's directory.
fn enroot_containers() -> String {
    let uid = Command::new("id")
        .args(["-u", &testbed().s("cluster_user")])
        .output()
        .unwrap();
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    let mut dirs = vec![format!(
        "/var/lib/slurm-tools-testbed/enroot/user-{uid}/data"
    )];
    for n in testbed().info["nodes"].as_array().unwrap() {
        dirs.push(format!(
            "{}/{}/enroot/user-{uid}/data",
            testbed().s("node_local_dir"),
            n.as_str().unwrap()
        ));
    }
    let mut names = Vec::new();
    for d in dirs {
        if let Ok(rd) = std::fs::read_dir(&d) {
            names.extend(rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()));
        }
    }
    names.join("\n")
}

/// `slurm-alloc exec --sync`, with the trace of its ssh executions.
fn exec_sync(args: &[&str], doc: &serde_json::Value) -> (Run, usize) {
    let trace = tempdir();
    let file = trace.path().join("t.jsonl");
    let mut all = vec!["exec", "--sync"];
    all.extend_from_slice(args);
    let mut cmd = alloc_cmd(&all);
    cmd.env("SLURM_TOOLS_TRACE", &file);
    let r = run_raw(cmd, doc.to_string().as_bytes());
    let n = connecting_ssh(&trace_lines(&file)).len();
    (r, n)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_exec_sync_syncs_and_runs_the_inner_loop_in_one_ssh_execution() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let mut d = alloc_doc(
        "direct_host",
        &format!("st-alloc-sync-{}", std::process::id()),
    );
    d.as_object_mut().unwrap().remove("container_image");
    let up = alloc(&["up"], &d);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let fx = fixture::Fixture::new("f-alloc-sync");
    fx.make_messy();
    let mut doc = fx.doc();
    for k in ["job_name", "account", "partition"] {
        doc[k] = d[k].clone();
    }
    doc["allocation"] = up.doc["allocation"].clone();

    // 1. The first time (no clone on the cluster yet): cloned, every untracked file sent, the
    // command run on that code; one ssh execution; the local repository untouched.
    let before = fixture::local_state(&fx.local);
    let (e1, ssh) = exec_sync(&["--", "cat README.md untracked.txt; ls data/nested"], &doc);
    assert_eq!(e1.code, 0, "{}", e1.stderr);
    assert_eq!(ssh, 1, "one ssh execution: {}", e1.stderr);
    for want in ["readme, edited but not staged", "untracked\n", "u.bin"] {
        assert!(e1.stdout.contains(want), "{want}: {}", e1.stderr);
    }
    assert_eq!(fixture::local_state(&fx.local), before);
    assert_eq!(
        fixture::actual_remote(&fx.remote_repo),
        fixture::expected_remote(&fx.local)
    );
    assert_eq!(e1.doc["sync_tracked"]["created"], true, "{}", e1.doc);
    assert_eq!(e1.doc["sync_tracked"]["temp_ref_deleted"], true);
    assert!(e1.doc["sync_untracked"]["files"].as_u64().unwrap() >= 2);
    assert_eq!(e1.doc["allocation"]["last_exec"]["exit_code"], 0);
    assert_schema(&e1.doc);
    assert!(
        !fx.origin_refs().contains(&format!("_{}_", fx.name)),
        "no temporary branch is left on origin: {}",
        fx.origin_refs()
    );

    // 2. The inner loop: one tracked edit, one untracked file new and one deleted; again one
    // execution, and the command sees exactly the new tree; the exit code is the command's.
    write(&fx.local.join("README.md"), "readme, second edit\n");
    write(&fx.local.join("fresh.txt"), "fresh untracked\n");
    std::fs::remove_file(fx.local.join("untracked.txt")).unwrap();
    let (e2, ssh) = exec_sync(
        &[
            "--",
            "cat README.md fresh.txt; test ! -e untracked.txt && echo gone; exit 7",
        ],
        &e1.doc,
    );
    assert_eq!(e2.code, 7, "{}", e2.stderr);
    assert_eq!(ssh, 1, "{}", e2.stderr);
    // The command's stdout is exactly exec's stdout (no document, no note of ours).
    assert_eq!(
        e2.stdout, "readme, second edit\nfresh untracked\ngone\n",
        "{}",
        e2.stderr
    );
    assert_eq!(
        fixture::actual_remote(&fx.remote_repo),
        fixture::expected_remote(&fx.local)
    );
    // The temporary branch is deleted while the command runs, and recorded once it ended
    // (here with a failing exit code).
    assert_eq!(e2.doc["sync_tracked"]["temp_ref_deleted"], true);
    assert!(
        !fx.origin_refs().contains(&format!("_{}_", fx.name)),
        "{}",
        fx.origin_refs()
    );
    assert_eq!(e2.doc["sync_untracked"]["incremental"], true);
    assert_eq!(e2.doc["sync_untracked"]["files"], 1, "only the new file");
    assert_eq!(
        e2.doc["sync_untracked"]["deleted"],
        json!(["untracked.txt"])
    );
    assert_ne!(
        e2.doc["sync_tracked"]["commit"],
        e1.doc["sync_tracked"]["commit"]
    );
    assert_eq!(e2.doc["allocation"]["last_exec"]["exit_code"], 7);
    assert!(
        !e2.stderr.contains("asking for it"),
        "the manifest kept from the first run is the cluster's: {}",
        e2.stderr
    );
    // Without --sync too, as ssh gives them: the command's stdout is exec's stdout, its stderr
    // exec's stderr (beside exec's own prefixed lines and srun's report of the task's exit, as
    // srun itself prints it), its exit code exec's.
    let oe = alloc(
        &["exec", "--", "sh -c 'echo out; echo err >&2; exit 3'"],
        &e2.doc,
    );
    assert_eq!(oe.code, 3, "{}", oe.stderr);
    assert_eq!(oe.stdout, "out\n", "{}", oe.stderr);
    let theirs: Vec<&str> = oe
        .stderr
        .lines()
        .filter(|l| !l.starts_with("slurm-alloc:") && !l.starts_with("srun: "))
        .collect();
    assert_eq!(theirs, ["err"], "{}", oe.stderr);
    assert_eq!(oe.doc["allocation"]["last_exec"]["exit_code"], 3);

    // 2b. Another machine syncs the untracked files in between (its own state directory): the
    // copy kept here is stale, the cluster says so before anything runs, and its manifest is
    // asked for in a second execution; the result is the same.
    write(
        &fx.local.join("from-elsewhere.txt"),
        "synced by another machine\n",
    );
    let elsewhere = tempdir();
    let mut other = tool("slurm-sync-untracked");
    other.env("SLURM_TOOLS_STATE_DIR", elsewhere.path());
    let o = run_raw(other, e2.doc.to_string().as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    std::fs::remove_file(fx.local.join("from-elsewhere.txt")).unwrap();
    write(&fx.local.join("fresh.txt"), "fresh untracked, edited\n");
    let (e2b, ssh) = exec_sync(
        &[
            "--",
            "cat fresh.txt; ls from-elsewhere.txt || echo no-elsewhere",
        ],
        &e2.doc,
    );
    assert_eq!(e2b.code, 0, "{}", e2b.stderr);
    assert!(e2b.stderr.contains("asking for it"), "{}", e2b.stderr);
    assert_eq!(ssh, 2, "{}", e2b.stderr);
    assert!(
        e2b.stdout.contains("fresh untracked, edited"),
        "{}",
        e2b.stderr
    );
    assert!(e2b.stdout.contains("no-elsewhere"), "{}", e2b.stderr);
    assert_eq!(
        fixture::actual_remote(&fx.remote_repo),
        fixture::expected_remote(&fx.local)
    );

    // 3. With --own-tree the command runs in a tree of the new snapshot.
    write(&fx.local.join("README.md"), "readme, third edit\n");
    let (e3, _) = exec_sync(
        &["--own-tree", "--", "pwd; cat README.md fresh.txt"],
        &e2.doc,
    );
    assert_eq!(e3.code, 0, "{}", e3.stderr);
    let tree = e3.doc["allocation"]["last_exec"]["tree"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(e3.stdout.contains(&tree), "{}", e3.stderr);
    assert!(e3.stdout.contains("readme, third edit"), "{}", e3.stderr);
    assert!(e3.stdout.contains("fresh untracked"), "{}", e3.stderr);

    // 4. A sync the cluster refuses (another sync holds the clone's lock): the command does not
    // run, the error is the tracked sync's own, and nothing is lost.
    let lock = format!("{}.slurm-tools-sync.lock", fx.remote_repo);
    std::fs::create_dir_all(&lock).unwrap();
    std::fs::write(format!("{lock}/owner"), "someone-else\n").unwrap();
    let marker = format!("/tmp/st-alloc-sync-ran-{}", std::process::id());
    let _ = std::fs::remove_file(&marker);
    write(&fx.local.join("README.md"), "readme, fourth edit\n");
    let (e4, ssh) = exec_sync(
        &["--lock-wait", "2", "--", &format!("touch {marker}")],
        &e3.doc,
    );
    std::fs::remove_dir_all(&lock).unwrap();
    assert_ne!(e4.code, 0, "{}", e4.stderr);
    assert_eq!(ssh, 1, "{}", e4.stderr);
    assert!(e4.stderr.contains("someone-else"), "{}", e4.stderr);
    assert!(!Path::new(&marker).exists(), "the command did not run");
    assert!(e4.doc["error"].is_object(), "{}", e4.doc);

    // 5. Submodules need executions of their own: synced first (said so), the same result.
    let subs = fixture::with_nested_submodules("f-alloc-sync-subs");
    let mut sdoc = subs.doc();
    for k in ["job_name", "account", "partition"] {
        sdoc[k] = d[k].clone();
    }
    sdoc["allocation"] = up.doc["allocation"].clone();
    write(
        &subs.local.join("third_party/lib/lib.txt"),
        "lib, edited locally\n",
    );
    let (e5, ssh) = exec_sync(
        &[
            "--",
            "cat third_party/lib/lib.txt third_party/lib/inner/inner.txt",
        ],
        &sdoc,
    );
    assert_eq!(e5.code, 0, "{}", e5.stderr);
    assert!(
        e5.stderr.contains("executions of their own"),
        "{}",
        e5.stderr
    );
    assert!(ssh > 1, "{}", e5.stderr);
    assert!(e5.stdout.contains("lib, edited locally"), "{}", e5.stderr);
    assert!(e5.stdout.contains("inner v1"), "{}", e5.stderr);
    assert_eq!(
        e5.doc["sync_tracked"]["submodules"][0]["snapshot"], true,
        "{}",
        e5.doc["sync_tracked"]
    );

    let down = alloc(&["down"], &e3.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_up_exec_down_share_one_allocation_and_a_second_up_reuses_it() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let mut d = alloc_doc("direct_host", &format!("st-alloc-{}", std::process::id()));
    // The registry image, written as a person writes it, and a package from a local wheel.
    d["container_image"] = json!(testbed().s("container_image"));
    d["packages"] = json!([testbed().s("probe_wheel")]);
    // Two nodes where the cluster has them: the container is imported on each.
    let nodes = node_count().min(2);
    d["node_count"] = json!(nodes);
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
    assert_eq!(a["container_name"], format!("slurm-tools-{job}"));
    // The registry image came through the image cache: each node's container was created from
    // the cache's file (imported once per digest on the login node, as for slurm-submit).
    let used = &a["container_use"];
    assert!(
        ["hit", "pulled", "waited"].contains(&used["cache"].as_str().unwrap_or("")),
        "{a}"
    );
    assert!(used["file"].as_str().unwrap().ends_with(".sqsh"), "{a}");
    assert!(
        used["digest"].as_str().unwrap().starts_with("sha256:"),
        "{a}"
    );
    assert_schema(&up.doc);
    // The allocation is in the run ledger, as a submission is.
    let ledger = std::fs::read_to_string(test_home().join("state/slurm-tools/runs.jsonl")).unwrap();
    assert!(
        ledger.lines().any(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap_or_default();
            e["job_id"] == job.as_str() && e["event"] == "submitted" && e["kind"] == "allocation"
        }),
        "{ledger}"
    );
    assert!(up.stderr.contains("imported"), "{}", up.stderr);
    assert!(
        up.stderr.contains(&format!(
            "importing the container image {}",
            testbed().s("registry")
        )),
        "the import is announced: {}",
        up.stderr
    );
    assert!(up.stderr.contains("packages installed"), "{}", up.stderr);
    let named = format!("pyxis_{job}_slurm-tools-{job}");
    assert!(
        enroot_containers().lines().any(|l| l == named),
        "pyxis keeps the named container as {named}: {}",
        enroot_containers()
    );

    // Several execs share the allocation's state and its container: the package pip installed
    // is there, the mounts (a list) are, the command starts in the working directory.
    let e1 = alloc(&["exec", "--", "echo $SLURM_JOB_ID > /tmp/st-alloc-state-$SLURM_JOB_ID; cat /etc/slurm-tools-image; python3 -c 'import slurm_tools_probe as p; print(p.MESSAGE)'; ls /mnt/images; echo pwd=$(pwd)"], &up.doc);
    assert_eq!(e1.code, 0, "{}", e1.stderr);
    for want in [
        "slurm-tools testbed image devbox",
        "slurm_tools_probe imported",
        "devbox.sqsh",
    ] {
        assert!(e1.stdout.contains(want), "{want}: {}", e1.stderr);
    }
    assert!(
        e1.stdout
            .contains(&format!("pwd={}", d["remote_cwd"].as_str().unwrap())),
        "--container-workdir: {}",
        e1.stderr
    );
    // Per node and across nodes: the named container is on every node of the allocation.
    let per_node = alloc(
        &[
            "exec",
            "--mode",
            "per-node",
            "--",
            "echo host=$(hostname) $(cat /etc/slurm-tools-image)",
        ],
        &e1.doc,
    );
    assert_eq!(per_node.code, 0, "{}", per_node.stderr);
    let hosts: std::collections::BTreeSet<&str> = per_node
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("host="))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(hosts.len() as u64, nodes, "{}", per_node.stderr);
    assert_eq!(
        per_node
            .stdout
            .matches("slurm-tools testbed image devbox")
            .count() as u64,
        nodes,
        "{}",
        per_node.stderr
    );
    let across = alloc(
        &[
            "exec",
            "--mode",
            "distributed",
            "--",
            "echo rank=$RANK world=$WORLD_SIZE host=$(hostname)",
        ],
        &per_node.doc,
    );
    assert_eq!(across.code, 0, "{}", across.stderr);
    for r in 0..nodes {
        assert!(
            across.stdout.contains(&format!("rank={r} world={nodes} ")),
            "{}",
            across.stderr
        );
    }
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
    assert!(e2.stdout.contains(&job), "{}", e2.stderr);
    assert_eq!(e2.doc["allocation"]["last_exec"]["exit_code"], 5);
    assert_schema(&e2.doc);

    // A second up finds the same allocation: nothing is set up twice.
    let again = alloc(&["up"], &d);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.doc["allocation"]["job_id"], job.as_str());
    assert_eq!(again.doc["allocation"]["reused"], true);
    assert!(
        !again.stderr.contains("imported"),
        "the container is not imported twice: {}",
        again.stderr
    );

    // --own-tree: the command runs in a code tree of its own (the synced snapshot), not in the
    // clone, as a submitted job does.
    let fx = fixture::Fixture::new("f-alloc-tree");
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    let mut in_tree = t.doc.clone();
    in_tree["job_name"] = d["job_name"].clone();
    in_tree["allocation"] = e2.doc["allocation"].clone();
    write(&fx.local.join("README.md"), "edited after the sync\n");
    let e3 = alloc(
        &["exec", "--own-tree", "--", "pwd; cat README.md"],
        &in_tree,
    );
    assert_eq!(e3.code, 0, "{}", e3.stderr);
    let tree = e3.doc["allocation"]["last_exec"]["tree"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(tree.contains("/.trees/exec-"), "{tree}");
    assert!(
        e3.stdout.contains(&tree) && e3.stdout.contains("readme"),
        "{}",
        e3.stderr
    );
    assert!(
        !e3.stdout.contains("edited after the sync"),
        "the synced snapshot, not later edits"
    );

    let down = alloc(&["down"], &e2.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert_eq!(down.doc["allocation"]["state"], "RELEASED");
    let released = down.doc["allocation"]["released"].to_string();
    assert!(
        released.contains(&format!("CONTAINER_REMOVED {named}")),
        "down removes the container under pyxis's name for it: {released}"
    );
    assert!(
        !enroot_containers().lines().any(|l| l == named),
        "{}",
        enroot_containers()
    );
    assert_eq!(wait_done(&job, 60).0, "COMPLETED");
    let twice = alloc(&["down"], &down.doc);
    assert_eq!(twice.code, 0, "down is idempotent");
    assert!(
        twice.stderr.contains("nothing was left"),
        "{}",
        twice.stderr
    );
}

fn node_count() -> u64 {
    testbed().info["node_count"].as_u64().unwrap_or(1)
}

/// The node(s) a job runs on, as Slurm lists them (a hostlist expression).
fn job_nodes(id: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-j", id, "-o", "%N"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new("scontrol")
        .args(["show", "hostnames", &list])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A job of the cluster user that takes every CPU of every node for up to 40 minutes, running once
/// this returns: whatever is submitted next waits in the queue (cancel it to let them run).
fn fill_node() -> String {
    let filler = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "sbatch",
            "--parsable",
            "-A",
            "testacct",
            // Every CPU of every node.
            "-N",
            &node_count().to_string(),
            "--ntasks-per-node=8",
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
        if std::time::Instant::now() >= deadline {
            // Not left pending behind the test: it would hold the nodes for every test after.
            let _ = Command::new("scancel").arg(&filler).status();
            panic!("the filler job did not start: is something else holding the node?");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    filler
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_queued_job_runs_the_code_it_was_submitted_with_not_a_later_syncs() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let fx = fixture::Fixture::new("f-own-tree");
    let mut d = fx.doc();
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["time_limit"] = json!("00:05:00");
    d["job_name"] = json!("st-own-tree");
    d["recipe"] = json!("batch");
    d["command"] = json!("cat README.md untracked-data.txt");
    let submit_version = |v: &str| {
        // A tracked edit and an untracked file, both uncommitted: the snapshot carries them.
        write(&fx.local.join("README.md"), &format!("tracked {v}\n"));
        write(
            &fx.local.join("untracked-data.txt"),
            &format!("untracked {v}\n"),
        );
        let t = run("slurm-sync-tracked", &[], &d);
        assert_eq!(t.code, 0, "{}", t.stderr);
        let u = run("slurm-sync-untracked", &[], &t.doc);
        assert_eq!(u.code, 0, "{}", u.stderr);
        let s = run("slurm-submit", &[], &u.doc);
        assert_eq!(s.code, 0, "{}", s.stderr);
        s.doc["job"].clone()
    };
    let filler = fill_node();
    let a = submit_version("v1");
    let a_id = a["job_id"].as_str().unwrap().to_string();
    let sq = Command::new("squeue")
        .args(["-h", "-j", &a_id, "-o", "%T"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&sq.stdout).trim(),
        "PENDING",
        "A waits behind the filler"
    );
    // The person edits, syncs and submits again while A still waits.
    let b = submit_version("v2");
    assert_ne!(a["tree"], b["tree"], "each job has its own tree");
    let _ = Command::new("scancel").arg(&filler).status();
    let b_id = b["job_id"].as_str().unwrap().to_string();
    assert_eq!(wait_done(&a_id, 120).0, "COMPLETED");
    assert_eq!(wait_done(&b_id, 120).0, "COMPLETED");
    let out = |job: &serde_json::Value| fixture::read(job["stdout_path"].as_str().unwrap());
    assert_eq!(
        out(&a),
        "tracked v1\nuntracked v1\n",
        "A ran the code it was submitted with"
    );
    assert_eq!(out(&b), "tracked v2\nuntracked v2\n");
    // The clone itself has the latest sync, as before.
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "tracked v2\n"
    );
}

/// The cluster user's tmux session names.
fn tmux_sessions() -> Vec<String> {
    let out = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "tmux",
            "ls",
            "-F",
            "#{session_name}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_up_again_after_down_takes_the_new_allocation_and_never_another_ones_session() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let name = format!("st-again-{}", std::process::id());
    let mut d = alloc_doc("direct_host", &name);
    d.as_object_mut().unwrap().remove("container_image");
    // Another allocation's session whose name starts with this one's: never touched.
    let bystander = format!("slurm-tools-{name}-other");
    let made = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "tmux",
            "new-session",
            "-d",
            "-s",
            &bystander,
            "sleep 600",
        ])
        .status()
        .unwrap();
    assert!(made.success());

    let up = alloc(&["up"], &d);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let first = up.doc["allocation"]["job_id"].as_str().unwrap().to_string();
    let down = alloc(&["down"], &up.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(
        tmux_sessions().contains(&bystander),
        "down killed another allocation's session"
    );

    // Within MinJobAge squeue still lists the finished allocation under the same name: a new
    // `up` must create and take its own, not the finished one.
    let again = alloc(&["up"], &d);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let second = again.doc["allocation"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(
        second, first,
        "the finished allocation was taken for the new one"
    );
    assert_eq!(again.doc["allocation"]["state"], "RUNNING");
    assert!(
        tmux_sessions().contains(&bystander),
        "up killed another allocation's session"
    );

    // `down` of a document that carries an error still releases the allocation it names.
    let mut with_error = again.doc.clone();
    with_error["error"] = json!({"tool": "slurm-alloc", "kind": "needs_person", "message": "allocation pending",
                                "hint": "slurm-alloc down releases it", "exit_code": 3});
    let released = alloc(&["down"], &with_error);
    assert_eq!(released.code, 0, "{}", released.stderr);
    assert_eq!(released.doc["allocation"]["state"], "RELEASED");
    assert!(released.doc.get("error").is_none(), "{}", released.doc);
    assert_eq!(wait_done(&second, 60).0, "COMPLETED");
    assert!(!tmux_sessions().contains(&format!("slurm-tools-{name}")));
    let _ = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "tmux",
            "kill-session",
            "-t",
            &bystander,
        ])
        .status();
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_pending_far_away_lowers_the_walltime_and_says_so() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    // Fill the node so the allocation pends with a start far away.
    let filler = fill_node();
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
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_allocation_survives_the_laptops_master_dying_and_exec_works_after_a_new_preflight() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
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
    assert!(
        e.stdout.contains(&format!("again in {job}")),
        "{}",
        e.stderr
    );
    let down = alloc(&["down"], &e.doc);
    mfa_logout(&cp);
    assert_eq!(down.code, 0, "{}", down.stderr);
}

/// Run a tool with the pause hook at `step`, kill it with `signal` once it pauses.
fn kill_at(
    tool_name: &str,
    doc: &serde_json::Value,
    step: &str,
    signal: &str,
) -> std::process::Output {
    kill_cmd_at(tool(tool_name), doc, step, signal)
}

fn kill_cmd_at(
    cmd: Command,
    doc: &serde_json::Value,
    step: &str,
    signal: &str,
) -> std::process::Output {
    let (child, rest, seen) = spawn_paused(cmd, doc, step, 60);
    assert!(Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let mut out = child.wait_with_output().unwrap();
    // Everything it said on stderr: up to the pause, and after (until it died).
    let mut said = seen;
    for line in rest.map_while(std::result::Result::ok) {
        said.push_str(&line);
        said.push('\n');
    }
    out.stderr = said.into_bytes();
    out
}

/// A messy repository's document, ready for `tool_name` (slurm-sync-untracked needs the tracked
/// sync done first).
fn messy_doc_for(fx: &fixture::Fixture, tool_name: &str) -> serde_json::Value {
    fx.make_messy();
    let doc = fx.doc();
    if tool_name != "slurm-sync-untracked" {
        return doc;
    }
    let t = run("slurm-sync-tracked", &[], &doc);
    assert_eq!(t.code, 0, "{}", t.stderr);
    t.doc
}

/// After an interrupted sync: both syncs rerun cleanly, only main is left on origin, and the
/// local repository is still `before`. Returns the tracked rerun's stderr.
fn rerun_both_syncs(
    fx: &fixture::Fixture,
    before: &std::collections::BTreeMap<String, Vec<u8>>,
    label: &str,
) -> String {
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{label}: rerun: {}", t.stderr);
    let u = run("slurm-sync-untracked", &[], &t.doc);
    assert_eq!(u.code, 0, "{label}: rerun: {}", u.stderr);
    let refs = fx.origin_refs();
    assert_eq!(
        refs.lines().count(),
        1,
        "{label}: only main on origin, no temporary branch left: {refs}"
    );
    assert_eq!(&fixture::local_state(&fx.local), before, "{label}");
    t.stderr
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
fn an_index_lock_in_the_remote_clone_is_a_clear_error_and_nothing_is_lost() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let fx = fixture::Fixture::new("remote-lock");
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    fx.make_messy();
    let lock = std::path::Path::new(&fx.remote_repo).join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let before = fixture::local_state(&fx.local);
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 4, "{}", t.stderr);
    assert!(
        t.doc["error"]["command"]["stderr"]
            .as_str()
            .unwrap()
            .contains("index.lock"),
        "{}",
        t.doc["error"]
    );
    assert_eq!(fixture::local_state(&fx.local), before);
    assert_eq!(
        fx.origin_refs().lines().count(),
        1,
        "the temp branch was deleted"
    );
    std::fs::remove_file(&lock).unwrap();
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_full_remote_disk_during_extraction_is_reported_and_a_rerun_after_cleanup_works() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let fx = fixture::Fixture::new("diskfull");
    // The remote checkout lives on a 2 MB filesystem.
    std::fs::create_dir_all(&fx.remote_repo).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=2m,mode=0777",
            "tmpfs",
            &fx.remote_repo,
        ])
        .status()
        .unwrap();
    assert!(ok.success(), "mounting a small tmpfs failed");
    let unmount = || {
        let _ = Command::new("umount").arg(&fx.remote_repo).status();
    };
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    if t.code != 0 {
        unmount();
        panic!("{}", t.stderr);
    }
    std::fs::write(fx.local.join("big.bin"), vec![7u8; 3 * 1024 * 1024]).unwrap();
    let before = fixture::local_state(&fx.local);
    let u = run("slurm-sync-untracked", &[], &t.doc);
    let after = fixture::local_state(&fx.local);
    let msg = u.error_message();
    let stderr = u.doc["error"]["command"]["stderr"]
        .as_str()
        .unwrap_or("")
        .to_string();
    std::fs::remove_file(fx.local.join("big.bin")).unwrap();
    let u2 = run("slurm-sync-untracked", &[], &t.doc);
    unmount();
    assert_eq!(u.code, 4, "{}", u.stderr);
    assert!(msg.contains("extracting the untracked files"), "{msg}");
    assert!(
        stderr.contains("No space left on device") || stderr.contains("Wrote only"),
        "{stderr}"
    );
    assert_eq!(after, before, "nothing lost locally");
    assert_eq!(u2.code, 0, "after cleanup: {}", u2.stderr);
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
    assert!(p.doc["error"]["hint"].as_str().unwrap().contains("-fNM"));
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
    assert_eq!(w.doc["report"]["status"], "FAILED", "{}", w.doc["report"]);
    // The exit code is accounting's. Measured on Slurm 22.05: a job that ends while slurmdbd is
    // down is recorded FAILED with ExitCode 0:0 (its own `exit 6` does not reach the database),
    // so the report can only repeat what sacct says, and must not invent the 6.
    let job = w.doc["report"]["job_id"].as_str().unwrap();
    assert_eq!(w.doc["report"]["exit_code"], wait_done(job, 30).1.as_str());
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
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
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
    let r = &w.doc["report"];
    assert_eq!(r["slurm_state"], state.as_str(), "{r}");
    assert_eq!(r["exit_code"], code.as_str(), "{r}");
    let expected = match state.as_str() {
        "COMPLETED" => "PASSED",
        "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" => "ERROR",
        other => panic!("unexpected final state {other}"),
    };
    assert_eq!(r["status"], expected, "{r}");
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
    let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
    let watcher = watch_in_background(&s.doc);
    std::thread::sleep(Duration::from_secs(3));
    assert!(Command::new("scontrol")
        .args(["requeue", &id])
        .status()
        .unwrap()
        .success());
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 0, "{}", w.stderr);
    let r = &w.doc["report"];
    assert_eq!(r["status"], "PASSED", "{r}");
    assert!(
        r["excerpt"].to_string().contains("end 1"),
        "the second run's log: {r}"
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
        let e = &r.doc["error"];
        assert_eq!(e["exit_code"], 4, "{step}: {e}");
        assert_eq!(e["kind"], "remote", "{step}: {e}");
        let message = e["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&testbed().s("direct_host")),
            "{step}: the message names the host it failed on: {e}"
        );
        assert!(
            e["hint"].as_str().is_some_and(|h| !h.is_empty()),
            "{step}: a hint: {e}"
        );
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
    assert!(r.doc["job"]["job_id"].is_null(), "{}", r.doc);
    let e = &r.doc["error"];
    let text = format!("{} {}", e["message"], e["hint"]).to_lowercase();
    assert!(
        text.contains("controller") || text.contains("slurmctld") || text.contains("sbatch"),
        "the error names the controller or sbatch: {e}"
    );
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    assert_eq!(jobs_named(&format!("st-{name}")), 1, "exactly one job");
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
        let id = s.doc["job"]["job_id"].as_str().unwrap().to_string();
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
        assert_eq!(w.doc["report"]["status"], "PASSED");
        assert_eq!(w.doc["report"]["excerpt"], json!(["start", "end"]));
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
        assert_eq!(again.doc["report"]["status"], "PASSED");
        assert_eq!(again.doc["report"]["local_log_complete"], true);
        let local = again.doc["report"]["local_log"].as_str().unwrap();
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
        assert_eq!(p.doc["preflight"]["ssh_path"], "direct");
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
            assert_eq!(s.doc["job"]["job_id"], first[0].as_str(), "{label}");
            assert_eq!(
                job_ids_named(&format!("st-{name}")),
                first,
                "{label}: no second job"
            );
            let w = run("slurm-watch", &["--interval", "1"], &s.doc);
            assert_eq!(w.code, 0, "{label}: {}", w.stderr);
            assert_eq!(w.doc["report"]["status"], "PASSED", "{label}");

            // Once a run told its result, the same input is a new submission.
            let again = run("slurm-submit", &[], &d);
            assert_eq!(again.code, 0, "{label}: {}", again.stderr);
            assert_ne!(
                again.doc["job"]["job_id"], s.doc["job"]["job_id"],
                "{label}"
            );
            assert_eq!(job_ids_named(&format!("st-{name}")).len(), 2, "{label}");
            assert!(
                !again.stderr.contains("not submitting again"),
                "{label}: {}",
                again.stderr
            );
        }
    }
}

/// Rerun a submit that was killed after Slurm accepted its job. The killed run said where it
/// saved its input (for a pipeline, which has no saved input): the srun recipes rerun on that
/// file, the batch one on the same stdin. The rerun's result, and the saved file's path.
fn rerun_killed_submit(
    killed: &std::process::Output,
    recipe: &str,
    doc: &serde_json::Value,
) -> (Run, String) {
    let stderr = String::from_utf8_lossy(&killed.stderr).into_owned();
    let saved = stderr
        .split("`slurm-submit ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("{recipe}: where the input was saved: {stderr}"))
        .to_string();
    let again = if recipe == "batch" {
        run("slurm-submit", &[], doc)
    } else {
        let mut cmd = tool("slurm-submit");
        cmd.arg(&saved);
        run_raw(cmd, b"")
    };
    (again, saved)
}

fn alloc_killed_at(args: &[&str], doc: &serde_json::Value, step: &str, signal: &str) {
    let out = kill_cmd_at(alloc_cmd(args), doc, step, signal);
    assert_ne!(out.status.code(), Some(0), "{step} {signal}: it was killed");
    assert!(out.stdout.is_empty(), "{step} {signal}: no half document");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_killed_at_every_step_holds_one_allocation_and_a_rerun_finishes_the_work() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    for signal in ["-KILL", "-INT"] {
        let name = format!("st-alloc-kill{signal}-{}", std::process::id());
        let d = alloc_doc("direct_host", &name);
        // up killed before it asked for anything: nothing is held.
        alloc_killed_at(&["up"], &d, "alloc:before", signal);
        assert!(held_allocations(&name).is_empty(), "{signal}");
        // Each rerun picks up what the killed one left and is itself killed a step further.
        alloc_killed_at(&["up"], &d, "alloc:created", signal);
        let held = held_allocations(&name);
        assert_eq!(held.len(), 1, "{signal}: salloc holds it: {held:?}");
        alloc_killed_at(&["up"], &d, "alloc:running", signal);
        assert_eq!(
            held_allocations(&name),
            held,
            "{signal}: reused, not doubled"
        );
        // The last `up` was killed before the container import: the rerun does it.
        let up = alloc(&["up"], &d);
        assert_eq!(up.code, 0, "{signal}: {}", up.stderr);
        assert_eq!(up.doc["allocation"]["job_id"], held[0].as_str());
        assert_eq!(up.doc["allocation"]["reused"], true);
        assert!(
            up.stderr.contains("skips the import"),
            "{signal}: the container step ran on the reused allocation: {}",
            up.stderr
        );
        assert_eq!(held_allocations(&name), held, "{signal}");

        // exec killed before it ran its command: the allocation is untouched, a rerun runs it.
        alloc_killed_at(&["exec", "--", "true"], &up.doc, "alloc:exec", signal);
        assert_eq!(held_allocations(&name), held, "{signal}");
        let e = alloc(&["exec", "--", "echo ran-$SLURM_JOB_ID"], &up.doc);
        assert_eq!(e.code, 0, "{signal}: {}", e.stderr);
        assert!(
            e.stdout.contains(&format!("ran-{}", held[0])),
            "{}",
            e.stderr
        );

        // down killed before it released anything: still held; the rerun releases it.
        alloc_killed_at(&["down"], &e.doc, "alloc:down", signal);
        assert_eq!(held_allocations(&name), held, "{signal}");
        let down = alloc(&["down"], &e.doc);
        assert_eq!(down.code, 0, "{signal}: {}", down.stderr);
        assert_eq!(wait_done(&held[0], 60).0, "COMPLETED", "{signal}");
        assert!(held_allocations(&name).is_empty(), "{signal}");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_packages_reach_pip_in_the_container_literally_and_no_canary_fires() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let canary = canary_dir("packages");
    let c = canary.display();
    let name = format!("st-alloc-pkgs-{}", std::process::id());
    let mut d = alloc_doc("direct_host", &name);
    let packages = [
        format!("x$(touch {c}/dollar-paren)"),
        format!("y; touch {c}/semicolon"),
        format!("z`touch {c}/backtick`"),
        format!("w && touch {c}/and"),
    ];
    d["packages"] = json!(packages);
    let up = alloc(&["up"], &d);
    // pip in the container refuses each as an invalid requirement.
    assert_eq!(up.code, 4, "{}", up.stderr);
    let e = &up.doc["error"];
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("installing `packages` in the container"),
        "{e}"
    );
    let said = up.stderr.clone() + &e.to_string();
    assert!(
        said.contains("Invalid requirement") || said.contains("Invalid marker"),
        "pip got the values and refused them: {said}"
    );
    assert_no_canary(&canary);
    // A value starting with '-' would be an option to pip: refused before anything runs.
    let mut opt = alloc_doc("direct_host", &name);
    opt["packages"] = json!(["--index-url=http://evil.example/"]);
    let r = alloc(&["up"], &opt);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.doc["error"]["field"], "packages");
    // The failed `up` left the allocation held, as its hint says; `down` on the input releases it.
    assert_eq!(held_allocations(&name).len(), 1);
    assert!(
        e["hint"].as_str().unwrap().contains("slurm-alloc down"),
        "{e}"
    );
    let down = alloc(&["down"], &d);
    assert_eq!(down.code, 0, "{}", down.stderr);
    std::thread::sleep(Duration::from_secs(1));
    assert!(held_allocations(&name).is_empty());
}

/// slurm-alloc names what failed in the container step: an image the registry does not have
/// (field container_image, enroot's 404), and `packages` asked of an image without python3
/// (field packages); the allocation stays held for the fixed rerun, and `down` releases it.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_names_the_image_it_cannot_import_and_the_image_without_python() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let name = format!("st-alloc-img-{}", std::process::id());
    let mut d = alloc_doc("direct_host", &name);
    let registry = testbed().s("registry");
    d["container_image"] = json!(format!("{registry}/testbed/nonexistent:1"));
    let up = alloc(&["up"], &d);
    assert_eq!(up.code, 4, "{}", up.stderr);
    let e = &up.doc["error"];
    assert_eq!(e["field"], "container_image", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "the container image {registry}#testbed/nonexistent:1 could not be imported"
        )) && msg.contains("404")
            && msg.contains("stays held"),
        "{msg}"
    );
    assert_eq!(held_allocations(&name).len(), 1);

    let mut nopython = alloc_doc("direct_host", &name);
    nopython["container_image"] = json!(testbed().s("container_image_without_python"));
    nopython["packages"] = json!([testbed().s("probe_wheel")]);
    let up = alloc(&["up"], &nopython);
    assert_eq!(up.code, 4, "{}", up.stderr);
    let e = &up.doc["error"];
    assert_eq!(e["field"], "packages", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("has no python3"),
        "{e}"
    );
    assert_eq!(
        up.doc["allocation"]["reused"], true,
        "the held allocation, reused"
    );

    // packages without any image: refused before anything starts.
    let mut bare = alloc_doc("direct_host", &name);
    bare.as_object_mut().unwrap().remove("container_image");
    bare["packages"] = json!(["numpy"]);
    let r = alloc(&["up"], &bare);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.doc["error"]["field"], "packages");

    let down = alloc(&["down"], &nopython);
    assert_eq!(down.code, 0, "{}", down.stderr);
    std::thread::sleep(Duration::from_secs(1));
    assert!(held_allocations(&name).is_empty());
}

fn askpass_dirs() -> Vec<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("slurm-tools-askpass-"))
        .collect()
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
        assert_eq!(r.doc["preflight"]["master"], "managed");
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
