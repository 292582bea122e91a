//! slurm-sync-tracked and slurm-sync-untracked against the real sshd, the cluster user's real
//! clone and real git origins: the remote tree equals the local working tree, and the local
//! repository is byte-identical before and after every sync, failed ones included.

use crate::fixture::*;
use crate::harness::*;
use serde_json::{json, Value};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn pipeline(doc: Value, tracked_args: &[&str]) -> (Run, Run) {
    let t = run("slurm-sync-tracked", tracked_args, &doc);
    let u = run("slurm-sync-untracked", &[], &t.doc);
    (t, u)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_messy_working_tree_arrives_file_for_file_and_nothing_local_changes() {
    crate::needs_cluster!();
    let fx = Fixture::new("messy");
    fx.make_messy();
    let before = local_state(&fx.local);
    let (t, u) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(
        local_state(&fx.local),
        before,
        "the local repository changed"
    );
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    // The remote HEAD is the snapshot, whose parent is the local HEAD.
    let st = t.synced();
    let head = git(Path::new(&fx.remote_repo), &["rev-parse", "HEAD"]);
    assert_eq!(head.trim(), st.commit);
    let parent = git(Path::new(&fx.remote_repo), &["rev-parse", "HEAD^"]);
    assert_eq!(parent.trim(), st.base_commit);
    assert_eq!(st.temp_ref_deleted, Some(Some(true)));
    assert!(
        !fx.origin_refs().contains(&st.temp_branch),
        "no temp branch remains on origin"
    );
    assert_eq!(
        st.refreshed,
        Some(Vec::new()),
        "nothing is refreshed unless the document names it (no repository layout assumed)"
    );
    // A plain-path origin ignores the partial-clone filter: the clone's configuration says so.
    let promisor = std::process::Command::new("git")
        .args([
            "-C",
            &fx.remote_repo,
            "config",
            "--get",
            "remote.origin.promisor",
        ])
        .output()
        .unwrap();
    assert!(
        promisor.stdout.is_empty(),
        "remote.origin.promisor is set although no partial clone happened"
    );
    // Owned by the cluster user: it really went through ssh.
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(Path::new(&fx.remote_repo).join("untracked.txt"))
        .unwrap()
        .uid();
    assert_ne!(owner, 0);
    assert_eq!(u.untracked().symlinks, 1);
    assert_schema(&u.doc);
    assert!(
        !Path::new(&fx.remote_repo).join(".env").exists()
            && !Path::new(&fx.remote_repo).join("debug.log").exists()
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_clean_tree_still_syncs_as_a_commit_equal_to_head() {
    crate::needs_cluster!();
    let fx = Fixture::new("clean");
    let (t, u) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(u.code, 0, "{}", u.stderr);
    let st = t.synced();
    assert_ne!(st.commit, st.base_commit);
    assert_eq!(st.changed_paths, 0);
    let tree = |c: &str| git(&fx.local, &["rev-parse", &format!("{c}^{{tree}}")]);
    assert_eq!(tree(&st.commit), tree("HEAD"));
    assert_eq!(u.untracked().files, 0);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn via_direct_leaves_origin_untouched() {
    crate::needs_cluster!();
    let fx = Fixture::new("direct");
    fx.make_messy();
    let before = local_state(&fx.local);
    let refs_before = fx.origin_refs();
    let (t, u) = pipeline(fx.doc(), &["--via", "direct"]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(fx.origin_refs(), refs_before, "origin changed");
    assert_eq!(local_state(&fx.local), before);
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    assert_eq!(t.synced().via.to_string(), "direct");
    // A second direct sync into the existing clone works too.
    write(&fx.local.join("README.md"), "second edit\n");
    let (t2, u2) = pipeline(fx.doc(), &["--via", "direct"]);
    assert_eq!(t2.code, 0, "{}", t2.stderr);
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "second edit\n"
    );
    // The re-sync is incremental and our own untracked files are not stashed, as via origin.
    assert!(
        t2.synced().stash.flatten().is_none(),
        "{}",
        t2.doc["sync_tracked"]
    );
    assert!(u2.untracked().incremental);
    assert_eq!(u2.untracked().files, 0);
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    assert_eq!(fx.origin_refs(), refs_before, "origin still untouched");
}

fn assert_failed_sync_loses_nothing(fx: &Fixture, doc: Value, expect_in_message: &str) {
    fx.make_messy();
    let before = local_state(&fx.local);
    let refs_before = fx.origin_refs();
    let t = run("slurm-sync-tracked", &[], &doc);
    assert_eq!(t.code, 4, "{}", t.stderr);
    assert!(
        t.error_message().contains(expect_in_message),
        "{}",
        t.error_message()
    );
    assert_eq!(
        local_state(&fx.local),
        before,
        "a failed sync changed the local repository"
    );
    assert_eq!(
        fx.origin_refs(),
        refs_before,
        "a temp branch was left on origin"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_unreachable_origin_fails_cleanly() {
    crate::needs_cluster!();
    let fx = Fixture::new("no-origin-reach");
    // The local repository's origin is that URL too (else the sync refuses it as another
    // repository's before trying to push).
    git(
        &fx.local,
        &["remote", "set-url", "origin", "/nonexistent/origin.git"],
    );
    let mut d = fx.doc();
    d["repo_url"] = json!("/nonexistent/origin.git");
    // The error names the cause: origin could not be reached.
    assert_failed_sync_loses_nothing(&fx, d, "origin could not be reached");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_unreachable_remote_fails_cleanly_and_deletes_the_temp_branch() {
    crate::needs_cluster!();
    let fx = Fixture::new("no-remote");
    let mut d = fx.doc();
    d["ssh_options"] = json!(["-o", "Port=1"]);
    assert_failed_sync_loses_nothing(&fx, d, "cannot reach");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_rejected_push_fails_cleanly() {
    crate::needs_cluster!();
    let fx = Fixture::new("rejected");
    let hook = fx.origin.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'denied by policy' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = {
        // The error names the cause: origin's hook refused it (not credentials or network).
        assert_failed_sync_loses_nothing(
            &fx,
            fx.doc(),
            "origin's rules refused the temporary branch",
        );
        run("slurm-sync-tracked", &[], &fx.doc())
    };
    assert!(t
        .error()
        .command
        .unwrap()
        .stderr
        .contains("denied by policy"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sync_waits_for_another_runs_lock_and_says_so_or_names_the_holder() {
    crate::needs_cluster!();
    let fx = Fixture::new("locked");
    let (t, _) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    // Another run holds the lock (this test stands in for it by taking the lock itself) and
    // lets it go after 2 s: both syncs wait for it, say so, and go on.
    let lock = format!("{}.slurm-tools-sync.lock", fx.remote_repo);
    for tool_name in ["slurm-sync-tracked", "slurm-sync-untracked"] {
        std::fs::create_dir(&lock).unwrap();
        std::fs::write(format!("{lock}/owner"), "someone_else_20260101000000\n").unwrap();
        let held = lock.clone();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::fs::remove_dir_all(&held).unwrap();
        });
        let t = run(tool_name, &[], &fx.doc());
        releaser.join().unwrap();
        assert_eq!(t.code, 0, "{tool_name}: {}", t.stderr);
        assert!(
            t.stderr.contains("waited") && t.stderr.contains("someone_else"),
            "{tool_name}: {}",
            t.stderr
        );
    }
    // Held for longer than --lock-wait: exit 4 naming the holder and the wait.
    std::fs::create_dir(&lock).unwrap();
    std::fs::write(format!("{lock}/owner"), "someone_else_20260101000000\n").unwrap();
    let before = local_state(&fx.local);
    let u = run("slurm-sync-untracked", &["--lock-wait", "2"], &fx.doc());
    let t = run("slurm-sync-tracked", &["--lock-wait", "2"], &fx.doc());
    std::fs::remove_dir_all(&lock).unwrap();
    assert_eq!(u.code, 4, "{}", u.stderr);
    assert!(
        u.error_message().contains("someone_else"),
        "{}",
        u.error_message()
    );
    assert_eq!(t.code, 4, "{}", t.stderr);
    assert!(
        t.error_message().contains("another sync") && t.error_message().contains("waited"),
        "{}",
        t.error_message()
    );
    assert!(
        t.error_message().contains("someone_else"),
        "{}",
        t.error_message()
    );
    assert_eq!(t.error().exit_code, 4);
    assert_eq!(local_state(&fx.local), before);
    assert!(
        !fx.origin_refs().contains("locked"),
        "the temp branch was deleted"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn cluster_side_edits_are_stashed_and_reported() {
    crate::needs_cluster!();
    let fx = Fixture::new("stash");
    let (t, _) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    // An edit made on the cluster, as the cluster user.
    let mut s = shared::remote::quote::Script::new();
    s.raw("cd -- ")
        .arg(&fx.remote_repo)
        .unwrap()
        .raw(" && echo 'edited on the cluster' >> README.md\n");
    let ssh = crate::harness::ssh_of(&fx.doc());
    assert!(ssh
        .run_script(&s, None, std::time::Duration::from_secs(30))
        .unwrap()
        .success());
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_schema(&t.doc);
    let stash = t.synced().stash.flatten().unwrap();
    assert!(stash.commit.len() == 40, "{stash:?}");
    assert!(t.stderr.contains("stash"));
    let shown = git(
        Path::new(&fx.remote_repo),
        &["stash", "show", "-p", "stash@{0}"],
    );
    assert!(shown.contains("edited on the cluster"), "{shown}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "readme\n"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn refresh_paths_remove_stale_build_output_and_can_be_disabled() {
    crate::needs_cluster!();
    let fx = Fixture::new("refresh");
    let (t, _) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let stale = Path::new(&fx.remote_repo).join("cpp/stale.o");
    std::fs::write(&stale, "old build output").unwrap();
    let mut d = fx.doc();
    d["refresh_paths"] = json!([]);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(t.synced().refreshed, Some(Vec::new()));
    // stale.o was stashed as a cluster-side change, not deleted.
    assert!(t.synced().stash.flatten().is_some());
    std::fs::write(&stale, "old build output").unwrap();
    // Named, ignored build output inside cpp/ is wiped too.
    std::fs::write(Path::new(&fx.remote_repo).join("cpp/x.log"), "ignored").unwrap();
    let mut d = fx.doc();
    d["refresh_paths"] = json!(["cpp"]);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(!Path::new(&fx.remote_repo).join("cpp/x.log").exists());
    assert!(Path::new(&fx.remote_repo).join("cpp/main.cpp").exists());
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn detached_head_works_and_is_said() {
    crate::needs_cluster!();
    let fx = Fixture::new("detached");
    git(&fx.local, &["checkout", "-q", "--detach", "HEAD"]);
    write(&fx.local.join("README.md"), "detached edit\n");
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stderr.contains("detached"));
    assert_eq!(t.synced().branch, None);
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "detached edit\n"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_unborn_branch_is_a_clear_error() {
    crate::needs_cluster!();
    let dir = tempdir();
    git(dir.path(), &["init", "-q"]);
    let mut d = doc_for("direct_host");
    d["repo_root"] = json!(dir.path());
    d["repo_url"] = json!("/x/y.git");
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 2, "{}", t.stderr);
    assert!(
        t.error_message().contains("no commits yet"),
        "{}",
        t.error_message()
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn no_origin_and_no_repo_url_is_a_clear_error() {
    crate::needs_cluster!();
    let fx = Fixture::new("noorigin");
    git(&fx.local, &["remote", "remove", "origin"]);
    let mut d = fx.doc();
    d.as_object_mut().unwrap().remove("repo_url");
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 2, "{}", t.stderr);
    assert_eq!(t.error().field.as_deref().unwrap_or_default(), "repo_url");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn index_lock_intent_to_add_and_skip_worktree_are_handled_and_said() {
    crate::needs_cluster!();
    let fx = Fixture::new("flags");
    write(&fx.local.join("ita.txt"), "intent to add\n");
    git(&fx.local, &["add", "-N", "ita.txt"]);
    git(&fx.local, &["update-index", "--skip-worktree", "src/b.py"]);
    write(&fx.local.join("src/b.py"), "edited under skip-worktree\n");
    std::fs::write(fx.local.join(".git/index.lock"), "").unwrap();
    let before = local_state(&fx.local);
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(local_state(&fx.local), before);
    assert!(
        fx.local.join(".git/index.lock").exists(),
        "the lock is not ours to remove"
    );
    let warnings = t.synced().warnings.join("\n");
    assert!(warnings.contains("index.lock"), "{warnings}");
    assert!(warnings.contains("skip-worktree"), "{warnings}");
    assert!(t.stderr.contains("intent-to-add"));
    let remote = Path::new(&fx.remote_repo);
    assert_eq!(
        std::fs::read_to_string(remote.join("ita.txt")).unwrap(),
        "intent to add\n"
    );
    assert_eq!(
        std::fs::read_to_string(remote.join("src/b.py")).unwrap(),
        "print('b')\n",
        "skip-worktree files sync as committed"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn index_version_4_is_read_for_the_notes_too() {
    crate::needs_cluster!();
    let fx = Fixture::new("indexv4");
    git(&fx.local, &["update-index", "--index-version", "4"]);
    write(&fx.local.join("src/ita-v4.txt"), "ita\n");
    git(&fx.local, &["add", "-N", "src/ita-v4.txt"]);
    git(&fx.local, &["update-index", "--skip-worktree", "src/a.py"]);
    let t = run("slurm-sync-tracked", &["--dry-run"], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stderr.contains("1 intent-to-add"), "{}", t.stderr);
    let st = t.synced();
    assert!(st.warnings.iter().any(|w| w.contains("src/a.py")));
    assert_eq!(st.dry_run, Some(true));
    assert_schema(&t.doc);
    assert_eq!(st.changed_paths, 1);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_file_names_arrive_intact() {
    crate::needs_cluster!();
    let fx = Fixture::new("names");
    let names: Vec<Vec<u8>> = vec![
        b"-rf".to_vec(),
        b"--checkpoint-action=exec=sh x".to_vec(),
        b"new\nline".to_vec(),
        b"back\\slash".to_vec(),
        b"with space".to_vec(),
        b"quote'single".to_vec(),
        b"quote\"double".to_vec(),
        b"star*".to_vec(),
        b"{a,b}".to_vec(),
        b"~root".to_vec(),
        b"$HOME".to_vec(),
        b"$(touch canary)".to_vec(),
        b"semi;colon".to_vec(),
        b"non-utf8-\xff\xfe".to_vec(),
        "ünïcödé".as_bytes().to_vec(),
        b"dir with space/-n".to_vec(),
        b"-dir/--help".to_vec(),
    ];
    for n in &names {
        let p = fx.local.join(std::ffi::OsStr::from_bytes(n));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, n).unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", fx.local.join("passwd-link")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", fx.local.join("dangling")).unwrap();
    std::os::unix::fs::symlink("loop-b", fx.local.join("loop-a")).unwrap();
    std::os::unix::fs::symlink("loop-a", fx.local.join("loop-b")).unwrap();
    let (t, u) = pipeline(fx.doc(), &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    let link = Path::new(&fx.remote_repo).join("passwd-link");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(u.untracked().symlinks, 4);
    assert!(!Path::new(&fx.remote_repo).join("canary").exists());
    // A re-sync knows every one of them as its own (the manifest quotes names as git does):
    // nothing is sent again and nothing is stashed as a cluster-side change.
    let (t, u) = pipeline(fx.doc(), &[]);
    assert_eq!((t.code, u.code), (0, 0), "{}{}", t.stderr, u.stderr);
    assert!(
        t.synced().stash.flatten().is_none(),
        "{}",
        t.doc["sync_tracked"]
    );
    assert_eq!(u.untracked().files, 0, "{}", u.doc["sync_untracked"]);
    assert_eq!(u.untracked().symlinks, 0);
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_symlink_to_a_secret_uploads_the_link_not_the_secret() {
    crate::needs_cluster!();
    let dir = tempdir();
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-CANARY").unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("passwd")).unwrap();
    let items: Vec<shared::repo::archive::Item> = ["link", "passwd"]
        .iter()
        .map(|n| shared::repo::archive::Item::file(dir.path().join(n), *n))
        .collect();
    let mut stream = Vec::new();
    let stats = std::sync::Arc::new(std::sync::Mutex::new(
        shared::repo::archive::Stats::default(),
    ));
    shared::repo::archive::write_archive(&items, &mut stream, false, &stats, None).unwrap();
    let text = String::from_utf8_lossy(&stream);
    assert!(!text.contains("TOP-SECRET-CANARY"));
    assert!(!text.contains("root:x:0:0"));
    assert_eq!(stats.lock().unwrap().symlinks, 2);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_stale_remote_symlink_is_never_written_through() {
    crate::needs_cluster!();
    // With the manifest (the link is known as the last sync's, and deleted as such) and without
    // it (--full: the extraction itself removes the link where a directory now goes).
    for (args, removed_as) in [(&[][..], "deleted"), (&["--full"][..], "unlinked")] {
        let fx = Fixture::new(&format!("stale-link-{removed_as}"));
        let outside = tempdir();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        // First sync: `d` is a symlink pointing outside the checkout.
        std::os::unix::fs::symlink(outside.path(), fx.local.join("d")).unwrap();
        let (_, u) = pipeline(fx.doc(), &[]);
        assert_eq!(u.code, 0, "{}", u.stderr);
        // Now `d` is a real directory with a file in it. The remote's old link must not be
        // followed.
        std::fs::remove_file(fx.local.join("d")).unwrap();
        std::fs::create_dir(fx.local.join("d")).unwrap();
        write(&fx.local.join("d/f.txt"), "inside\n");
        let u = run("slurm-sync-untracked", args, &fx.doc());
        assert_eq!(u.code, 0, "{}", u.stderr);
        assert!(
            !outside.path().join("f.txt").exists(),
            "wrote through the stale symlink"
        );
        assert!(
            std::fs::symlink_metadata(Path::new(&fx.remote_repo).join("d"))
                .unwrap()
                .is_dir()
        );
        let sent = u.untracked();
        let removed = if removed_as == "deleted" {
            &sent.deleted
        } else {
            &sent.unlinked
        };
        assert_eq!(removed, &["d"], "{sent:?}");
        assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn gzip_stream_arrives_the_same() {
    crate::needs_cluster!();
    let fx = Fixture::new("gzip");
    fx.make_messy();
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    let u = run("slurm-sync-untracked", &["--gzip"], &t.doc);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert!(u.untracked().compressed);
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn one_ssh_execution_per_tool_with_the_push_on_the_side() {
    crate::needs_cluster!();
    let fx = Fixture::new("count");
    fx.make_messy();
    let trace = tempdir();
    let file = trace.path().join("t.jsonl");
    let mut cmd = tool("slurm-sync-tracked");
    cmd.env("SLURM_TOOLS_TRACE", &file);
    let t = run_raw(cmd, fx.doc().to_string().as_bytes());
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(connecting_ssh(&trace_lines(&file)).len(), 1);
    let pushes = trace_lines(&file)
        .iter()
        .filter(|l| l["argv"].to_string().contains("\"push\""))
        .count();
    assert_eq!(pushes, 2, "the push and the delete of the temp branch");
    let file2 = trace.path().join("u.jsonl");
    let mut cmd = tool("slurm-sync-untracked");
    cmd.env("SLURM_TOOLS_TRACE", &file2);
    let u = run_raw(cmd, t.doc.to_string().as_bytes());
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert_eq!(connecting_ssh(&trace_lines(&file2)).len(), 1);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn bad_refresh_paths_and_relative_remote_paths_are_refused_before_anything_runs() {
    crate::needs_cluster!();
    let fx = Fixture::new("badinput");
    for bad in [
        json!(["../x"]),
        json!(["/etc"]),
        json!(["-rf"]),
        json!("cpp"),
        json!([1]),
    ] {
        let mut d = fx.doc();
        d["refresh_paths"] = bad.clone();
        let t = run("slurm-sync-tracked", &[], &d);
        assert_eq!(t.code, 2, "{bad}: {}", t.stderr);
        assert_eq!(
            t.error().field.as_deref().unwrap_or_default(),
            "refresh_paths"
        );
    }
    let mut d = fx.doc();
    d["remote_repo_path"] = json!("relative/path");
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 2);
    assert_eq!(
        t.error().field.as_deref().unwrap_or_default(),
        "remote_repo_path"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_remote_clone_whose_origin_differs_from_repo_url_still_gets_the_snapshot() {
    crate::needs_cluster!();
    let fx = Fixture::new("moved-origin");
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    // The project moved: repo_url now names a copy; the remote clone still points at the old one.
    let moved = fx.origin.with_file_name(format!("{}-moved.git", fx.name));
    let _ = std::fs::remove_dir_all(&moved);
    clone_repo(&fx.origin, &moved, &["--bare"]);
    readable_by_all(&moved);
    write(&fx.local.join("README.md"), "after the move\n");
    // The person follows the move locally too (else the sync refuses repo_url as none of the
    // local repository's remotes).
    git(
        &fx.local,
        &["remote", "set-url", "origin", moved.to_str().unwrap()],
    );
    let mut d = fx.doc();
    d["repo_url"] = json!(moved);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let warnings = t.synced().warnings;
    assert!(
        warnings.iter().any(|w| w.contains("not repo_url")),
        "{warnings:?}"
    );
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "after the move\n"
    );
    let _ = std::fs::remove_dir_all(&moved);
}

/// A tool that cannot read what its file modes forbid, even when the tests run as root: root
/// without the two capabilities that override modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH),
/// dropped from its bounding set by util-linux `setpriv`. As another user it needs no help.
fn tool_bound_by_modes(name: &str) -> std::process::Command {
    let t = tool(name);
    let uid = std::process::Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return t;
    }
    let mut c = std::process::Command::new("setpriv");
    c.args(["--bounding-set=-dac_override,-dac_read_search", "--"])
        .arg(t.get_program())
        .args(t.get_args());
    for (k, v) in t.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn unreadable_files_and_directories_are_skipped_by_name_or_refused_and_nothing_is_lost() {
    crate::needs_cluster!();
    let fx = Fixture::new("unreadable");
    let l = &fx.local;
    write(&l.join("readable.txt"), "fine\n");
    write(&l.join("locked.txt"), "no one may read this\n");
    std::fs::create_dir_all(l.join("locked-dir")).unwrap();
    write(&l.join("locked-dir/inside.txt"), "inside\n");
    std::fs::set_permissions(l.join("locked.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(l.join("locked-dir"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let before = local_state(l);
    let t = run_raw(
        tool_bound_by_modes("slurm-sync-tracked"),
        fx.doc().to_string().as_bytes(),
    );
    assert_eq!(t.code, 0, "{}", t.stderr);
    let u = run_raw(
        tool_bound_by_modes("slurm-sync-untracked"),
        t.doc.to_string().as_bytes(),
    );
    assert_eq!(u.code, 0, "{}", u.stderr);
    // Each is named, with the reason, on stderr and in the document; the rest arrives.
    let skipped = u.untracked().skipped;
    let reason_of = |p: &str| {
        skipped
            .iter()
            .find(|s| s.path == p)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{p} is not in skipped: {skipped:?}"))
    };
    assert!(reason_of("locked.txt").contains("Permission denied"));
    assert!(reason_of("locked-dir").contains("Permission denied"));
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    for p in ["locked.txt", "locked-dir"] {
        assert!(
            u.stderr.contains(&format!("skipped \"{p}\"")),
            "{}",
            u.stderr
        );
    }
    let remote = Path::new(&fx.remote_repo);
    assert_eq!(
        read(remote.join("readable.txt").to_str().unwrap()),
        "fine\n"
    );
    assert!(!remote.join("locked.txt").exists());
    assert!(!remote.join("locked-dir").exists());
    assert_eq!(local_state(l), before, "the local repository changed");

    // A tracked file changed and then made unreadable cannot be snapshotted: refused by name,
    // nothing lost, nothing left on origin.
    std::fs::set_permissions(l.join("locked.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    git(l, &["add", "locked.txt"]);
    git(l, &["commit", "-q", "-m", "track locked.txt"]);
    write(&l.join("locked.txt"), "changed, then locked\n");
    std::fs::set_permissions(l.join("locked.txt"), std::fs::Permissions::from_mode(0o000)).unwrap();
    let before = local_state(l);
    let refs = fx.origin_refs();
    let t = run_raw(
        tool_bound_by_modes("slurm-sync-tracked"),
        fx.doc().to_string().as_bytes(),
    );
    assert_eq!(t.code, 4, "{}", t.stderr);
    assert_eq!(
        t.error_message(),
        "cannot read the changed tracked file locked.txt (Permission denied): the snapshot needs its content"
    );
    assert!(t.error().hint.contains("chmod u+r -- locked.txt"));
    assert!(
        t.stderr.contains("open(\"locked.txt\"): Permission denied"),
        "git's reason, naming the file: {}",
        t.stderr
    );
    assert_eq!(local_state(l), before, "the local repository changed");
    assert_eq!(fx.origin_refs(), refs, "origin untouched");
    for p in ["locked.txt", "locked-dir"] {
        std::fs::set_permissions(l.join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_remote_root_in_the_cluster_home_lands_there_or_is_refused_before_preflight() {
    crate::needs_cluster!();
    let fx = Fixture::new("tilde");
    let leaf = format!("st-tilde-{}", std::process::id());
    let mut d = fx.doc();
    d.as_object_mut().unwrap().remove("remote_repo_path");
    d["default_user_root_dir"] = json!(format!("~/{leaf}"));
    d["command"] = json!("true");
    let home = testbed().s("cluster_home");
    let landed = format!("{home}/{leaf}");
    let _ = std::fs::remove_dir_all(&landed);
    let origin_before = fx.origin_refs();

    // Without preflight the home is unknown: refused, naming the field, nothing pushed.
    let early = run("slurm-sync-tracked", &[], &d);
    assert_eq!(early.code, 2, "{}", early.stderr);
    assert_eq!(
        early.error().field.as_deref().unwrap_or_default(),
        "default_user_root_dir"
    );
    assert!(
        early.stderr.contains("slurm-ssh-preflight"),
        "{}",
        early.stderr
    );
    assert_eq!(fx.origin_refs(), origin_before, "nothing was pushed");
    assert!(!std::path::Path::new(&landed).exists());

    // After preflight, `~/` is the cluster user's home: the checkout lands there.
    let p = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert_eq!(p.preflight().remote.home.as_deref(), Some(home.as_str()));
    let t = run("slurm-sync-tracked", &[], &p.doc);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let repo = t.synced().remote_repo_path;
    let repo = repo.as_str();
    assert!(repo.starts_with(&format!("{landed}/")), "{repo}");
    assert_eq!(
        t.typed().remote_repo_path.as_deref(),
        Some(repo),
        "derived once, expanded"
    );
    assert!(
        std::path::Path::new(repo).join(".git").is_dir(),
        "the clone is in the home"
    );
    assert!(
        !std::path::Path::new(repo).to_string_lossy().contains('~'),
        "no literal ~ directory"
    );
    let submitted = run("slurm-submit", &["--dry-run"], &t.doc);
    assert_eq!(submitted.code, 0, "{}", submitted.stderr);
    assert!(submitted
        .job()
        .stdout_path
        .unwrap()
        .starts_with(&format!("{repo}/work_dirs/")));
    let _ = std::fs::remove_dir_all(&landed);
}

/// The remote clone's stash, one line per entry.
fn remote_stashes(fx: &Fixture) -> usize {
    git(Path::new(&fx.remote_repo), &["stash", "list"])
        .lines()
        .count()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn resyncs_send_only_what_changed_never_stash_our_own_files_and_delete_what_went() {
    crate::needs_cluster!();
    let fx = Fixture::new("resync");
    fx.make_messy();
    // A name no gitignore pattern can hold: it must not be stashed either.
    write(&fx.local.join("odd\nname.txt"), "newline in the name\n");
    let d = fx.doc();
    let (t, u) = pipeline(d.clone(), &[]);
    assert_eq!((t.code, u.code), (0, 0), "{}{}", t.stderr, u.stderr);
    let first = u.untracked();
    let sent = first.files;
    assert!(sent >= 2, "{first:?}");
    assert!(!first.incremental, "no manifest before the first sync");
    let stashes = remote_stashes(&fx);

    // Three syncs with no change: nothing sent, nothing stashed, nothing called cluster-side.
    for i in 0..3 {
        let (t, u) = pipeline(d.clone(), &[]);
        assert_eq!((t.code, u.code), (0, 0), "{}{}", t.stderr, u.stderr);
        assert!(
            t.synced().stash.flatten().is_none(),
            "sync {i}: {}",
            t.doc["sync_tracked"]
        );
        assert!(!t.stderr.contains("cluster-side"), "sync {i}: {}", t.stderr);
        let s = u.untracked();
        assert!(s.incremental, "{s:?}");
        assert_eq!(s.files, 0, "sync {i}: nothing new to send: {s:?}");
        assert_eq!(s.unchanged_files, sent + 1, "files and the symlink: {s:?}");
        assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    }
    assert_eq!(remote_stashes(&fx), stashes, "the stash list did not grow");

    // One untracked file changed, one deleted, one new: exactly those travel.
    write(&fx.local.join("untracked.txt"), "untracked, changed\n");
    std::fs::remove_file(fx.local.join("data/nested/u.bin")).unwrap();
    write(&fx.local.join("brand-new.txt"), "new\n");
    let (t, u) = pipeline(d.clone(), &[]);
    assert_eq!((t.code, u.code), (0, 0), "{}{}", t.stderr, u.stderr);
    let s = u.untracked();
    assert_eq!(s.files, 2, "the changed and the new file: {s:?}");
    assert_eq!(s.deleted, ["data/nested/u.bin"], "{s:?}");
    assert!(
        !Path::new(&fx.remote_repo).join("data/nested").exists(),
        "its emptied directories go too"
    );
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
    assert!(t.synced().stash.flatten().is_none());
    assert_eq!(remote_stashes(&fx), stashes);

    // Real cluster-side changes are still kept and reported: a tracked edit and an untracked
    // file no sync sent; our own files stay where they are.
    let remote = Path::new(&fx.remote_repo);
    let mut s = shared::remote::quote::Script::new();
    s.raw("cd -- ")
        .arg(&fx.remote_repo)
        .unwrap()
        .raw(" && echo 'edited on the cluster' >> README.md && echo mine > cluster-only.txt\n");
    let ssh = crate::harness::ssh_of(&d);
    assert!(ssh
        .run_script(&s, None, std::time::Duration::from_secs(30))
        .unwrap()
        .success());
    let (t, u) = pipeline(d.clone(), &[]);
    assert_eq!((t.code, u.code), (0, 0), "{}{}", t.stderr, u.stderr);
    assert!(
        t.synced().stash.flatten().is_some(),
        "{}",
        t.doc["sync_tracked"]
    );
    assert!(t.stderr.contains("cluster-side changes"), "{}", t.stderr);
    assert_eq!(remote_stashes(&fx), stashes + 1);
    let stashed = git(
        remote,
        &[
            "stash",
            "show",
            "--include-untracked",
            "--name-only",
            "stash@{0}",
        ],
    );
    assert!(
        stashed.contains("README.md") && stashed.contains("cluster-only.txt"),
        "{stashed}"
    );
    assert!(!stashed.contains("odd"), "ours are not stashed: {stashed}");
    assert!(
        !stashed.contains("untracked.txt") && !stashed.contains("brand-new.txt"),
        "ours are not stashed: {stashed}"
    );
    assert_eq!(
        u.untracked().files,
        0,
        "ours were left in place: {}",
        u.doc["sync_untracked"]
    );
    assert_eq!(actual_remote(&fx.remote_repo), expected_remote(&fx.local));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_local_dir_inside_the_repository_is_left_out_of_the_untracked_sync_and_said() {
    crate::needs_cluster!();
    let fx = Fixture::new("localdir");
    std::fs::create_dir_all(fx.local.join("results")).unwrap();
    write(&fx.local.join("results/job-1.out"), "a log copy\n");
    write(
        &fx.local.join("mine.txt"),
        "an untracked file of the person's\n",
    );
    let mut d = fx.doc();
    d["local_dir"] = json!(fx.local.join("results"));
    let (t, u) = pipeline(d, &[]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(u.code, 0, "{}", u.stderr);
    assert!(
        u.stderr.contains("left out of the untracked sync"),
        "{}",
        u.stderr
    );
    let remote = Path::new(&fx.remote_repo);
    assert!(remote.join("mine.txt").exists());
    assert!(
        !remote.join("results/job-1.out").exists(),
        "the tools' own copies went up"
    );
}

/// A person watching a sync sees git's own progress of the pushes (objects counted and written:
/// a first sync of a long history takes a while), the cluster's clone of origin (how much
/// arrived, in how long) and each submodule's history as it is sent; a pipeline or a log gets
/// none of it, and the document on stdout is the same either way.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sync_in_a_terminal_shows_the_push_and_clone_progress_and_a_piped_one_does_not() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("progress");
    fx.make_messy();
    let dir = tempdir();
    let input = dir.path().join("in.json");
    let output = dir.path().join("out.json");
    let done = dir.path().join("done");
    std::fs::write(&input, fx.doc().to_string()).unwrap();
    // stderr is the terminal; stdout a file.
    let pane = crate::totp::Pane::running(
        "sync-progress",
        &format!(
            "env -i USER=slurm-tools-test LANG=C.UTF-8 HOME={h} XDG_STATE_HOME={h}/state XDG_CONFIG_HOME={h}/config PATH=/usr/bin:/bin GIT_CONFIG_GLOBAL=/dev/null {bin} < {i} > {o}; echo $? > {d}; sleep 600",
            h = test_home().display(),
            bin = bin("slurm-sync-tracked"),
            i = input.display(),
            o = output.display(),
            d = done.display(),
        ),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !done.exists() {
        assert!(std::time::Instant::now() < deadline, "{}", pane.screen());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let screen = pane.screen();
    assert_eq!(
        std::fs::read_to_string(&done).unwrap().trim(),
        "0",
        "{screen}"
    );
    assert!(
        screen.contains("Writing objects") || screen.contains("Enumerating objects"),
        "git's progress on the terminal:\n{screen}"
    );
    // The cluster's clone of origin (this first sync makes it) says what it is doing and, at its
    // end, how much arrived in how long; the marker of those lines never shows.
    assert!(
        screen.contains(&format!(
            "slurm-sync-tracked: cloning origin into {} on the cluster",
            fx.remote_repo
        )),
        "the clone's progress on the terminal:\n{screen}"
    );
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("slurm-sync-tracked: cloned origin: ") && l.contains(" MB in ")),
        "{screen}"
    );
    assert!(!screen.contains("@@slurm-tools"), "{screen}");
    // Each submodule's history as it goes into the clone's execution.
    for sub in ["third_party/lib", "third_party/lib/inner"] {
        assert!(
            screen.contains(&format!(
                "slurm-sync-tracked: sending the submodule {sub} ("
            )),
            "{screen}"
        );
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&output).unwrap()).unwrap();
    let synced: shared::contract::schema::SyncTracked = section_of(&doc, "sync_tracked");
    assert!(!synced.commit.is_empty(), "{synced:?}");
    // Piped: not a line of it.
    let mut again = fx.doc();
    again["remote_repo_path"] = json!(format!("{}-piped", fx.remote_repo));
    let t = run("slurm-sync-tracked", &[], &again);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(!t.stderr.contains("objects"), "{}", t.stderr);
    assert!(!t.stderr.contains("cloning origin"), "{}", t.stderr);
    assert!(!t.stderr.contains("sending the submodule"), "{}", t.stderr);
    let _ = std::fs::remove_dir_all(format!("{}-piped", fx.remote_repo));
}
