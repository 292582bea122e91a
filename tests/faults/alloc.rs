//! slurm-alloc against the real cluster: up, exec (with --sync: the inner loop in one ssh
//! execution), down; a second up reusing the allocation, a pending one's walltime lowered, the
//! allocation surviving the laptop's master, every step killed, images it cannot import, hostile
//! package names.

use super::*;

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

fn alloc_killed_at(args: &[&str], doc: &serde_json::Value, step: &str, signal: &str) {
    let out = kill_cmd_at(alloc_cmd(args), doc, step, signal);
    assert_ne!(out.status.code(), Some(0), "{step} {signal}: it was killed");
    assert!(out.stdout.is_empty(), "{step} {signal}: no half document");
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
    assert_eq!(e1.synced().created, Some(true), "{}", e1.doc);
    assert_eq!(e1.synced().temp_ref_deleted, Some(Some(true)));
    assert!(e1.typed().sync_untracked.unwrap().files >= 2);
    assert_eq!(e1.allocation().last_exec.unwrap().exit_code, 0);
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
    assert_eq!(e2.synced().temp_ref_deleted, Some(Some(true)));
    assert!(
        !fx.origin_refs().contains(&format!("_{}_", fx.name)),
        "{}",
        fx.origin_refs()
    );
    assert!(e2.untracked().incremental);
    assert_eq!(e2.untracked().files, 1, "only the new file");
    assert_eq!(e2.untracked().deleted, ["untracked.txt"]);
    assert_ne!(e2.synced().commit, e1.synced().commit);
    assert_eq!(e2.allocation().last_exec.unwrap().exit_code, 7);
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
    assert_eq!(oe.allocation().last_exec.unwrap().exit_code, 3);

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
    let tree = e3.allocation().last_exec.unwrap().tree.unwrap();
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
    assert!(!e4.error().message.is_empty(), "{}", e4.doc);

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
    assert!(e5.synced().submodules[0].snapshot, "{:?}", e5.synced());

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
    let a = up.allocation();
    let job = a.job_id.clone().unwrap();
    assert_eq!(a.state.map(|s| s.to_string()).as_deref(), Some("RUNNING"));
    assert_eq!(a.reused, Some(false));
    assert_eq!(
        a.time_limit_requested.as_deref(),
        Some("04:00:00"),
        "the partition's maximum"
    );
    assert_eq!(a.container_name, Some(format!("slurm-tools-{job}")));
    // The registry image came through the image cache: each node's container was created from
    // the cache's file (imported once per digest on the login node, as for slurm-submit).
    let used = a.container_use.clone().unwrap();
    assert!(
        ["hit", "pulled", "waited"].contains(&used.cache.as_str()),
        "{a:?}"
    );
    assert!(used.file.as_deref().unwrap().ends_with(".sqsh"), "{a:?}");
    assert!(
        used.digest.as_deref().unwrap().starts_with("sha256:"),
        "{a:?}"
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
    assert_eq!(e2.allocation().last_exec.unwrap().exit_code, 5);
    assert_schema(&e2.doc);

    // A second up finds the same allocation: nothing is set up twice.
    let again = alloc(&["up"], &d);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.allocation().job_id.as_deref(), Some(job.as_str()));
    assert_eq!(again.allocation().reused, Some(true));
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
    let tree = e3.allocation().last_exec.unwrap().tree.unwrap();
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
    assert_eq!(
        down.allocation().state.map(|s| s.to_string()).as_deref(),
        Some("RELEASED")
    );
    let released = down.allocation().released.unwrap_or_default().join("\n");
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
    let first = up.allocation().job_id.as_deref().unwrap().to_string();
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
    let second = again.allocation().job_id.unwrap();
    assert_ne!(
        second, first,
        "the finished allocation was taken for the new one"
    );
    assert_eq!(
        again.allocation().state.map(|s| s.to_string()).as_deref(),
        Some("RUNNING")
    );
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
    assert_eq!(
        released
            .allocation()
            .state
            .map(|s| s.to_string())
            .as_deref(),
        Some("RELEASED")
    );
    assert!(released.typed().error.is_none(), "{}", released.doc);
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
    let job = up.allocation().job_id.unwrap_or_default();
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
    let n = up.allocation().negotiation.unwrap();
    assert_eq!(n.reduced_from, "04:00:00");
    assert_eq!(n.reduced_to, "02:00:00");
    assert_schema(&up.doc);
    let hint = up.error().hint;
    let hint = hint.as_str();
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
    let job = up.allocation().job_id.as_deref().unwrap().to_string();
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
        assert_eq!(up.allocation().job_id.as_deref(), Some(held[0].as_str()));
        assert_eq!(up.allocation().reused, Some(true));
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
    let e = up.error();
    assert!(
        e.message.contains("installing `packages` in the container"),
        "{e:?}"
    );
    let said = up.stderr.clone() + &format!("{e:?}");
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
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "packages");
    // The failed `up` left the allocation held, as its hint says; `down` on the input releases it.
    assert_eq!(held_allocations(&name).len(), 1);
    assert!(e.hint.contains("slurm-alloc down"), "{e:?}");
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
    let e = up.error();
    assert_eq!(e.field.as_deref(), Some("container_image"), "{e:?}");
    let msg = e.message.as_str();
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
    let e = up.error();
    assert_eq!(e.field.as_deref(), Some("packages"), "{e:?}");
    assert!(e.message.contains("has no python3"), "{e:?}");
    assert_eq!(
        up.allocation().reused,
        Some(true),
        "the held allocation, reused"
    );

    // packages without any image: refused before anything starts.
    let mut bare = alloc_doc("direct_host", &name);
    bare.as_object_mut().unwrap().remove("container_image");
    bare["packages"] = json!(["numpy"]);
    let r = alloc(&["up"], &bare);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "packages");

    let down = alloc(&["down"], &nopython);
    assert_eq!(down.code, 0, "{}", down.stderr);
    std::thread::sleep(Duration::from_secs(1));
    assert!(held_allocations(&name).is_empty());
}
