//! Hang forensics on the real cluster: a 2-node, 4-rank job (plain Python with sockets) where
//! rank 3 blocks; silent hangs decided by stall detection; the evidence (every rank's state and
//! Python stacks, per node, with real py-spy) collected before the cancel; the diagnosis names
//! the rank and node that stopped, and the classic multi-node mistakes.

use crate::fixture::{synced, wait_done};
use crate::harness::*;
use serde_json::{json, Value};
use shared::contract::schema::Forensics;

/// Ranks 0-3 (RANK, MASTER_ADDR from the distributed recipe). `barrier`: every step each rank
/// sends to rank 0 and waits for its answer (a collective); rank 3 blocks at step 3, so every
/// rank goes silent, waiting for it. `free`: no communication; rank 3 blocks, the others go on.
const PROGRAM: &str = r#"import os, socket, threading, time
rank = int(os.environ["RANK"])
mode = os.environ["HANG_MODE"]
port = 20000 + int(os.environ["SLURM_JOB_ID"]) % 20000
def say(m):
    print(f"{rank}: {m}", flush=True)
def block_forever():
    threading.Event().wait()
if mode == "free":
    for step in range(10**6):
        say(f"step {step}")
        if rank == 3 and step == 3:
            block_forever()
        time.sleep(1)
if rank == 0:
    srv = socket.create_server(("", port))
    peers = [srv.accept()[0] for _ in range(3)]
    for step in range(10**6):
        say(f"step {step}")
        for p in peers:
            p.recv(1)
        for p in peers:
            p.sendall(b"y")
        time.sleep(1)
while True:
    try:
        c = socket.create_connection((os.environ["MASTER_ADDR"], port))
        break
    except OSError:
        time.sleep(0.2)
for step in range(10**6):
    say(f"step {step}")
    if rank == 3 and step == 3:
        block_forever()
    c.sendall(b"x")
    c.recv(1)
    time.sleep(1)
"#;

/// The cluster user's py-spy: a test that needs its stacks holds [`py_spy_in_place`]; the test
/// that hides it holds the write side, so no stacks test runs while it is hidden.
static PY_SPY: std::sync::RwLock<()> = std::sync::RwLock::new(());

pub(crate) fn py_spy_in_place() -> std::sync::RwLockReadGuard<'static, ()> {
    PY_SPY.read().unwrap_or_else(|e| e.into_inner())
}

/// Hides the cluster user's py-spy while it lives (the nodes share the home directory).
struct HiddenPySpy(std::path::PathBuf);

impl Drop for HiddenPySpy {
    fn drop(&mut self) {
        let _ = std::fs::rename(self.0.with_extension("hidden"), &self.0);
    }
}

/// `d` made a two-node, four-rank distributed job running [`PROGRAM`] in `mode`; `setup` is
/// shell each rank runs first.
pub(crate) fn four_ranks(d: &mut Value, mode: &str, setup: &str) {
    d["recipe"] = json!("distributed");
    d["node_count"] = json!(2);
    d["required_devices_per_node"] = json!(2);
    d["gpus_per_node"] = json!(2);
    d["command"] = json!(format!(
        "cat > hang-$RANK.py <<'PY'\n{PROGRAM}PY\n{setup}HANG_MODE={mode} exec python3 hang-$RANK.py"
    ));
}

fn hung_job(base: &Value, mode: &str) -> Run {
    let mut d = base.clone();
    // Rank 2 is given another world size: a classic mistake the diagnosis names.
    four_ranks(
        &mut d,
        mode,
        "if [ \"$RANK\" = 2 ]; then export WORLD_SIZE=3; fi\n",
    );
    d["stall_seconds"] = json!(12);
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    run("slurm-watch", &["--interval", "1"], &s.doc)
}

/// The node each rank's processes were found on.
fn node_of(f: &Forensics, rank: u32) -> String {
    f.nodes
        .iter()
        .find(|n| n.processes.iter().any(|p| p.rank == Some(rank)))
        .map(|n| n.node.clone())
        .unwrap_or_else(|| panic!("rank {rank} not found: {f:?}"))
}

/// The run's `forensics` section.
fn forensics(w: &Run) -> Forensics {
    w.decoded("forensics")
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_silent_two_node_hang_is_decided_by_stall_and_the_stopped_rank_is_named_from_its_stacks() {
    crate::needs_cluster!();
    // It hides py-spy in its second part: no other stacks test meanwhile.
    let _alone = PY_SPY.write().unwrap_or_else(|e| e.into_inner());
    let (_fx, mut base) = synced("forensics");
    let local = tempdir();
    base["local_dir"] = json!(local.path());

    // A collective that never completes: nothing is printed, every rank waits for rank 3.
    let w = hung_job(&base, "barrier");
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status.name(), "HANG_DETECTED", "{r:?}");
    assert_eq!(r.hang_reason.as_deref(), Some("stalled"), "{r:?}");
    assert!(r.hang_line.is_none(), "{r:?}");
    let f = forensics(&w);
    assert_eq!(f.job_id, r.job_id);
    assert_eq!(f.reason, "stalled");
    assert!(!f.cut, "{f:?}");
    assert!(f.collected_seconds <= 20.0, "{f:?}");
    // Every rank's Python stack, from real py-spy, per node.
    for rank in 0..4u32 {
        let stack: Vec<String> = f
            .nodes
            .iter()
            .flat_map(|n| n.processes.iter())
            .filter(|p| p.rank == Some(rank) && !p.python_stack.is_empty())
            .flat_map(|p| p.python_stack.iter().cloned())
            .collect();
        assert!(
            stack.iter().any(|l| l.contains("hang-")),
            "rank {rank} has its stack: {stack:?}\n{f:?}"
        );
    }
    // Rank 3 (on the second node) is named; the others wait for it.
    assert_eq!(f.stalled_rank, Some(3), "{f:?}");
    let node3 = node_of(&f, 3);
    assert_eq!(f.stalled_node.as_deref(), Some(node3.as_str()));
    assert_ne!(node_of(&f, 0), node3, "two nodes");
    let id = r.job_id.as_str();
    let diagnosis = f.diagnosis.join("\n");
    assert!(
        diagnosis.contains(&format!("rank 3 on {node3} stopped first: it is in ")),
        "{diagnosis}"
    );
    assert!(
        diagnosis.contains("< block_forever (hang-3.py:")
            && diagnosis.contains("ranks 0, 1 and 2 wait in"),
        "the frames that called it, what the others wait in: {diagnosis}"
    );
    assert!(
        diagnosis.contains(
            "the ranks disagree on the world size: rank 2 has 3; ranks 0, 1 and 3 have 4"
        ),
        "{diagnosis}"
    );
    assert!(r.summary.contains("rank 3 on"), "{r:?}");
    // The whole collection, locally.
    let file = f.file.as_deref().unwrap();
    assert!(file.starts_with(local.path().to_str().unwrap()), "{file}");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(
        text.contains("@@stack") && text.contains("block_forever"),
        "{text}"
    );
    // Then cancelled.
    assert_eq!(wait_done(id, 120).0, "CANCELLED");
    assert_schema(&w.doc);

    // Rank 3 silent while the others go on; py-spy missing: the kernel's state still tells.
    let pyspy = std::path::PathBuf::from("/home")
        .join(testbed().s("cluster_user"))
        .join(".local/bin/py-spy");
    assert!(
        pyspy.exists(),
        "the test bed installs py-spy for the cluster user"
    );
    // Nor one an earlier install_py_spy left in the cache.
    let installed = pyspy
        .parent()
        .unwrap()
        .join("../../.cache/slurm-tools/py-spy");
    let _ = std::fs::remove_dir_all(&installed);
    std::fs::rename(&pyspy, pyspy.with_extension("hidden")).unwrap();
    let restore = HiddenPySpy(pyspy);
    let w = hung_job(&base, "free");
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.hang_reason.as_deref(), Some("stalled"), "{r:?}");
    assert!(
        r.summary
            .contains("rank 3 printed nothing for 12 s while the other ranks went on"),
        "{r:?}"
    );
    let f = forensics(&w);
    assert_eq!(f.silent_ranks.len(), 1, "{f:?}");
    assert_eq!(f.silent_ranks[0].rank, 3, "{f:?}");
    assert_eq!(f.stalled_rank, Some(3), "{f:?}");
    assert_eq!(f.stalled_node, Some(node_of(&f, 3)));
    // Each rank's last line: rank 3 stopped at its step 3, the others went on.
    let out = &f.rank_output;
    assert_eq!(out.len(), 4, "{f:?}");
    let three = out.iter().find(|o| o.rank == 3).unwrap();
    assert_eq!(three.last_line, "3: step 3", "{f:?}");
    assert!(three.seconds_ago >= 12, "{f:?}");
    assert!(
        out.iter()
            .filter(|o| o.rank != 3)
            .all(|o| o.seconds_ago < 12),
        "{f:?}"
    );
    assert!(
        f.missing.iter().any(|m| m.contains("py-spy")),
        "what is missing is said: {f:?}"
    );
    for n in &f.nodes {
        for p in &n.processes {
            assert!(p.python_stack.is_empty(), "{p:?}");
            assert!(!p.wchan.is_empty(), "{p:?}");
        }
    }
    let id = r.job_id.as_str();
    assert_eq!(wait_done(id, 120).0, "CANCELLED");

    // Where the document allows, the missing py-spy is installed first (pip --target into the
    // cluster user's cache, once for both nodes) and the stacks are there.
    let mut allowed = base.clone();
    allowed["install_py_spy"] = json!(true);
    let w = hung_job(&allowed, "barrier");
    assert_eq!(w.code, 1, "{}", w.stderr);
    let f = forensics(&w);
    assert!(
        f.installed.iter().any(|i| i.contains("py-spy into")),
        "{f:?}"
    );
    assert!(f.missing.is_empty(), "{f:?}");
    assert_eq!(f.stalled_rank, Some(3), "{f:?}");
    assert!(
        f.diagnosis[0].contains("< block_forever (hang-3.py:"),
        "{f:?}"
    );
    assert!(f.collected_seconds <= 28.0, "{f:?}");
    assert_eq!(wait_done(w.report().job_id.as_str(), 120).0, "CANCELLED");
    let _ = std::fs::remove_dir_all(&installed);
    drop(restore);

    // The same hang inside the job's pyxis container: the evidence is read from the node's side
    // of it (the processes, py-spy's stacks through their mount namespace).
    let mut inside = base.clone();
    inside["container_image"] = json!(testbed().s("container_image"));
    let w = hung_job(&inside, "barrier");
    assert_eq!(w.code, 1, "{}", w.stderr);
    let f = forensics(&w);
    assert_eq!(f.stalled_rank, Some(3), "{f:?}");
    assert!(
        f.diagnosis[0].contains("< block_forever (hang-3.py:"),
        "{f:?}"
    );
    assert_eq!(wait_done(w.report().job_id.as_str(), 120).0, "CANCELLED");
}

/// On request: `slurm-attach --stacks` collects a running job's evidence and leaves it running;
/// a job that has ended is said as such (exit 4).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_attach_stacks_reads_a_running_job_and_leaves_it_running() {
    crate::needs_cluster!();
    let _stacks = py_spy_in_place();
    let (_fx, base) = synced("stacks");
    let mut d = base.clone();
    four_ranks(&mut d, "free", "");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    // Until every rank runs its program (rank 3 blocks at its step 3).
    let out = s.job().stdout_path.as_deref().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !std::fs::read_to_string(&out).is_ok_and(|t| t.contains("3: step 3")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let a = run("slurm-attach", &["--stacks"], &s.doc);
    assert_eq!(a.code, 0, "{}", a.stderr);
    let f = forensics(&a);
    assert_eq!(f.reason, "requested", "{f:?}");
    assert_eq!(f.job_id, id);
    assert_eq!(f.nodes.len(), 2, "{f:?}");
    let ranks: std::collections::BTreeSet<u32> = f
        .nodes
        .iter()
        .flat_map(|n| n.processes.iter())
        .filter_map(|p| p.rank)
        .collect();
    assert_eq!(ranks, [0, 1, 2, 3].into(), "{f:?}");
    assert_eq!(f.stalled_rank, Some(3), "rank 3 is somewhere else: {f:?}");
    assert_eq!(
        crate::fixture::scontrol(&id)["JobState"],
        "RUNNING",
        "the job keeps running"
    );
    on_cluster_scancel(&id);
    assert_eq!(wait_done(&id, 120).0, "CANCELLED");
    let gone = run("slurm-attach", &["--stacks"], &s.doc);
    assert_eq!(gone.code, 4, "{}", gone.stderr);
}

fn on_cluster_scancel(id: &str) {
    let d = doc_for("direct_host");
    let ssh = crate::harness::ssh_of(&d);
    let mut s = shared::remote::quote::Script::new();
    s.raw("scancel ").glued(id).unwrap();
    s.raw("\n");
    ssh.run_script(&s, None, std::time::Duration::from_secs(30))
        .unwrap();
}
