//! Tests that take the whole cluster, in their own test binary: faults injected for real (they
//! stop and restart the cluster's sshd and slurmctld) and slurm-alloc (it fills the node to make
//! an allocation pend). They run after the main suite (cargo runs test binaries one at a time)
//! and one at a time among themselves.
//!
//! One file per subject: `daemons` (the cluster's sshd, slurmctld, slurmdbd, master and nodes
//! failing under a run), `kills` (the tools killed at every step), `clone` (the remote clone
//! under stress), `alloc` (slurm-alloc), `attach`, `forward`, `compat` (old login nodes and site
//! policies), `nodes` (multi-node faults), `modern` (the second site). This file holds what they
//! share: the cluster to one test at a time, the fault injectors and the helpers.

// A scenario reads top to bottom: the workspace limit on function length is for the code.
#![allow(clippy::too_many_lines)]

#[path = "../integration/fixture.rs"]
mod fixture;
#[path = "../integration/harness.rs"]
#[allow(dead_code)]
mod harness;

mod alloc;
mod attach;
mod clone;
mod compat;
mod daemons;
mod forward;
mod kills;
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
        output: std::process::Output {
            status,
            stdout: stdout.clone().into_bytes(),
            stderr: stderr.clone().into_bytes(),
        },
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
