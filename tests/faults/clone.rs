//! The remote clone under stress: a queued job keeps the code it was submitted with while later
//! syncs change the clone, a git index lock left in the clone, a disk that fills during the
//! untracked files' extraction.

use super::*;

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
        s.job()
    };
    let filler = fill_node();
    let a = submit_version("v1");
    let a_id = a.job_id.clone().unwrap();
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
    assert_ne!(a.tree, b.tree, "each job has its own tree");
    let _ = Command::new("scancel").arg(&filler).status();
    let b_id = b.job_id.clone().unwrap();
    assert_eq!(wait_done(&a_id, 120).0, "COMPLETED");
    assert_eq!(wait_done(&b_id, 120).0, "COMPLETED");
    let out =
        |job: &shared::contract::schema::Job| fixture::read(job.stdout_path.as_deref().unwrap());
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
    let e = t.error();
    assert!(
        e.command.as_ref().unwrap().stderr.contains("index.lock"),
        "{e:?}"
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
    let stderr = u
        .typed()
        .error
        .and_then(|e| e.command)
        .map(|c| c.stderr)
        .unwrap_or_default();
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
