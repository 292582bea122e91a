//! Real repositories: the right repository or nothing, submodules (nested, dirty, commits that
//! exist only locally), linked worktrees, and `make all` from a fresh checkout of this project.

use crate::fixture::*;
use crate::harness::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a refused sync must leave alone in the remote clone: refs, HEAD, stashes and files.
fn remote_state(remote: &str) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    let r = Path::new(remote);
    m.insert(
        "refs".into(),
        git(r, &["for-each-ref", "--format=%(refname) %(objectname)"]).into_bytes(),
    );
    m.insert("HEAD".into(), git(r, &["rev-parse", "HEAD"]).into_bytes());
    m.insert(
        "status".into(),
        git(r, &["status", "--porcelain", "--untracked-files=all"]).into_bytes(),
    );
    walk(r, r, &mut m, &[".git"]);
    m
}

/// A second project with its own origin, sharing no commit with a [`Fixture`]'s (whose first
/// commits are identical when made in the same second: this one starts a history of its own).
fn other_project(name: &str) -> Fixture {
    let other = Fixture::new(name);
    let l = &other.local;
    write(&l.join("OTHER.md"), "another project\n");
    git(l, &["checkout", "-q", "--orphan", "fresh"]);
    git(l, &["add", "-A"]);
    git(
        l,
        &["commit", "-q", "-m", "another project's own first commit"],
    );
    git(l, &["branch", "-q", "-M", "fresh", "main"]);
    git(
        &other.origin,
        &["config", "receive.denyNonFastForwards", "false"],
    );
    git(l, &["push", "-q", "-f", "origin", "main"]);
    git(l, &["branch", "-q", "--set-upstream-to=origin/main"]);
    git(l, &["reflog", "expire", "--expire=now", "--all"]);
    git(l, &["gc", "-q", "--prune=now"]);
    git(&other.origin, &["gc", "-q", "--prune=now"]);
    other
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sync_from_another_repository_is_refused_before_anything_is_pushed() {
    crate::needs_cluster!();
    let fx = Fixture::new("unrelated");
    let t = run("slurm-sync-tracked", &[], &fx.doc());
    assert_eq!(t.code, 0, "{}", t.stderr);
    let remote_before = remote_state(&fx.remote_repo);
    let origin_before = fx.origin_refs();
    let other = other_project("unrelated-other");
    other.make_messy();

    // 1. The document names fx's origin, the directory is another repository with remotes.
    let mut d = fx.doc();
    d["repo_root"] = json!(other.local);
    for via in ["origin", "direct"] {
        let t = run("slurm-sync-tracked", &["--via", via], &d);
        assert_eq!(t.code, 2, "{}", t.stderr);
        assert_eq!(t.error().field.as_deref().unwrap_or_default(), "repo_url");
        let m = t.error_message();
        assert!(m.contains("none of the remotes"), "{m}");
        assert!(m.contains(other.origin.to_str().unwrap()), "{m}");
        assert!(m.contains("nothing was pushed"), "{m}");
        let e = t.error();
        assert!(e.hint.contains("--allow-unrelated"), "{e:?}");
    }

    // 2. The same repository without any remote: asked of repo_url itself.
    git(&other.local, &["remote", "remove", "origin"]);
    let other_before_no_remote = local_state(&other.local);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 2, "{}", t.stderr);
    assert!(
        t.error_message().contains("none of which"),
        "{}",
        t.error_message()
    );
    assert_eq!(local_state(&other.local), other_before_no_remote);
    git(
        &other.local,
        &["remote", "add", "origin", other.origin.to_str().unwrap()],
    );
    let other_before = local_state(&other.local);

    // 3. The document is right about the repository, but its remote clone is fx's.
    let other_origin_before = other.origin_refs();
    let mut d = other.doc();
    d["remote_repo_path"] = json!(fx.remote_repo);
    for via in ["origin", "direct"] {
        let t = run("slurm-sync-tracked", &["--via", via], &d);
        assert_eq!(t.code, 4, "{via}: {}", t.stderr);
        let m = t.error_message();
        assert!(m.contains("holds another repository"), "{m}");
        assert!(m.contains("shares no commit"), "{m}");
        assert_eq!(other.origin_refs(), other_origin_before, "{via}");
    }
    assert_eq!(
        remote_state(&fx.remote_repo),
        remote_before,
        "a refused sync changed the remote clone"
    );
    assert_eq!(fx.origin_refs(), origin_before);
    assert_eq!(local_state(&other.local), other_before);

    // 4. Deliberately: --allow-unrelated puts the other project there.
    let t = run(
        "slurm-sync-tracked",
        &["--via", "direct", "--allow-unrelated"],
        &d,
    );
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert_eq!(
        git(Path::new(&fx.remote_repo), &["rev-parse", "HEAD"]).trim(),
        t.synced().commit
    );
    assert_eq!(local_state(&other.local), other_before);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_new_remote_clone_of_another_repository_is_removed_again() {
    crate::needs_cluster!();
    // repo_url is one of the local repository's remotes (so the local check passes), but what
    // it holds shares no commit with the local history: the clone made for this sync holds
    // another project, the sync is refused, and the clone goes again.
    let fx = Fixture::new("unrelated-new");
    let other = other_project("unrelated-new-other");
    let mut d = other.doc();
    d["repo_url"] = json!(fx.origin);
    d["remote_repo_path"] = json!(format!("{}-fresh", fx.remote_repo));
    // repo_url must be one of the remotes: make it one, under another name.
    git(
        &other.local,
        &["remote", "add", "mirror", fx.origin.to_str().unwrap()],
    );
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 4, "{}", t.stderr);
    assert!(
        t.error_message().contains("holds another repository"),
        "{}",
        t.error_message()
    );
    assert!(
        !Path::new(&format!("{}-fresh", fx.remote_repo)).exists(),
        "the clone made for the refused sync is still there"
    );
    assert!(
        !fx.origin_refs().contains("unrelated"),
        "{}",
        fx.origin_refs()
    );
}

/// `make all` from a fresh checkout of this project (the README's "step by step with make",
/// with its default job): the sample repository the test cluster provides is synced, built, run
/// and watched to PASSED. The binaries are the suite's (the Makefile's TOOLS).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn make_all_from_a_fresh_checkout_ends_passed() {
    crate::needs_cluster!();
    let tmp = tempdir();
    let checkout = tmp.path().join("checkout");
    clone_repo(&repo_root(), &checkout, &[]);
    // The committed Makefile and scripts, with the uncommitted ones of a developer's tree.
    for f in ["Makefile", "scripts/local-cluster"] {
        std::fs::copy(repo_root().join(f), checkout.join(f)).unwrap();
    }
    let tools = PathBuf::from(bin("slurm-resolve"))
        .parent()
        .unwrap()
        .to_path_buf();
    let out = std::process::Command::new("make")
        .arg("-C")
        .arg(&checkout)
        .arg("all")
        .arg(format!("TOOLS={}", tools.display()))
        .arg("WATCH_FLAGS=--interval 2")
        .env("SLURM_TESTBED_STATE", testbed().s("state_dir"))
        .env("HOME", test_home())
        .env("XDG_STATE_HOME", test_home().join("state"))
        .env("XDG_CONFIG_HOME", test_home().join("config"))
        .env("XDG_CACHE_HOME", test_home().join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "make all failed:\n{stderr}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(checkout.join(".slurm-tools/report.json")).unwrap())
            .unwrap();
    assert_eq!(
        report_of(&report).status.name(),
        "PASSED",
        "{}",
        report["report"]
    );
    assert_eq!(
        report["repo_root"],
        json!(testbed().s("sample_repo")),
        "the default job syncs the test cluster's sample repository"
    );
    assert!(stderr.contains("PASSED"), "{stderr}");
}

/// git refuses `file://` submodule URLs by default since 2.38 (CVE-2022-39253); the test
/// origins are local paths, so the fixture allows them for its own commands.
/// Every file of a tree (tracked, untracked, inside submodules), without git's own files and
/// without what the ignore rules exclude: what the remote tree must equal.
fn files_recursive(root: &Path, ignored_too: bool) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    walk(root, root, &mut all, &[".git", "work_dirs"]);
    let mut keep = std::collections::BTreeSet::new();
    let mut repos = vec![String::new()];
    repos.extend(submodule_paths(root));
    for r in &repos {
        let dir = if r.is_empty() {
            root.to_path_buf()
        } else {
            root.join(r)
        };
        let mut args = vec!["ls-files", "-z", "--cached", "--others"];
        if !ignored_too {
            args.push("--exclude-standard");
        }
        for f in git(&dir, &args).split('\0').filter(|s| !s.is_empty()) {
            keep.insert(if r.is_empty() {
                f.to_string()
            } else {
                format!("{r}/{f}")
            });
        }
    }
    all.into_iter()
        .filter(|(k, _)| {
            let name = k[2..].rsplit_once(" x=").map_or(&k[2..], |(n, _)| n);
            !name.split('/').any(|c| c == ".git") && (ignored_too || keep.contains(name))
        })
        .collect()
}

fn sync_both(doc: &Value) -> (Run, Run) {
    let t = run("slurm-sync-tracked", &[], doc);
    assert_eq!(t.code, 0, "{}", t.stderr);
    let u = run("slurm-sync-untracked", &[], &t.doc);
    assert_eq!(u.code, 0, "{}", u.stderr);
    (t, u)
}

/// A document for one job (the single recipe) running `command` on the test cluster.
fn single_job(mut d: Value, name: &str, command: &str) -> Value {
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["time_limit"] = json!("00:05:00");
    d["job_name"] = json!(name);
    d["recipe"] = json!("single");
    d["command"] = json!(command);
    d
}

fn submodule_entry(t: &Run, path: &str) -> shared::contract::schema::SyncedSubmodule {
    let st = t.synced();
    st.submodules
        .iter()
        .find(|s| s.path == path)
        .cloned()
        .unwrap_or_else(|| panic!("no {path} in {st:?}"))
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn nested_submodules_arrive_clean_dirty_and_with_commits_that_exist_only_locally() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("subs");
    let lib = fx.local.join("third_party/lib");
    let inner = lib.join("inner");
    let remote = PathBuf::from(&fx.remote_repo);
    for via in ["origin", "direct"] {
        let _ = std::fs::remove_dir_all(&remote);
        // 1. Clean: each submodule at the commit its parent records.
        let before = local_state_recursive(&fx.local);
        let t = run("slurm-sync-tracked", &["--via", via], &fx.doc());
        assert_eq!(t.code, 0, "{via}: {}", t.stderr);
        let u = run("slurm-sync-untracked", &[], &t.doc);
        assert_eq!(u.code, 0, "{}", u.stderr);
        assert_eq!(local_state_recursive(&fx.local), before, "{via}: clean");
        assert_eq!(
            files_recursive(&remote, true),
            files_recursive(&fx.local, false)
        );
        for (path, dir) in [("third_party/lib", &lib), ("third_party/lib/inner", &inner)] {
            let e = submodule_entry(&t, path);
            let head = git(dir, &["rev-parse", "HEAD"]);
            assert_eq!(e.commit, head.trim(), "{path}");
            assert!(!e.snapshot, "{path}");
            assert!(e.initialised, "{path}");
            assert_eq!(
                git(&remote.join(path), &["rev-parse", "HEAD"]).trim(),
                head.trim(),
                "{via}: {path}"
            );
        }
    }

    // 2. Dirty: a tracked edit in the nested submodule, an untracked file in the middle one,
    // and a commit in the nested one that exists only locally (its origin never sees it).
    write(
        &inner.join("inner.txt"),
        "inner v2, committed locally only\n",
    );
    git(&inner, &["commit", "-q", "-am", "inner: local only"]);
    write(&inner.join("inner.txt"), "inner v3, uncommitted\n");
    write(&inner.join("new-in-inner.txt"), "staged new file\n");
    git(&inner, &["add", "new-in-inner.txt"]);
    write(&lib.join("untracked-in-lib.txt"), "untracked in lib\n");
    write(&lib.join("lib.txt"), "lib v1, edited\n");
    write(
        &fx.local.join("README.md"),
        "readme edited with the submodules\n",
    );
    let before = local_state_recursive(&fx.local);
    let (t, u) = sync_both(&fx.doc());
    assert_eq!(local_state_recursive(&fx.local), before, "dirty");
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false),
        "the remote tree is the local one"
    );
    let e_inner = submodule_entry(&t, "third_party/lib/inner");
    assert!(e_inner.snapshot);
    assert_eq!(
        e_inner.head.as_deref(),
        Some(git(&inner, &["rev-parse", "HEAD"]).trim()),
        "head is the local-only commit"
    );
    let e_lib = submodule_entry(&t, "third_party/lib");
    assert!(e_lib.snapshot);
    // The superproject's snapshot records lib's snapshot, which records inner's.
    let snap = t.synced().commit;
    let recorded = |dir: &Path, commit: &str, path: &str| {
        git(dir, &["rev-parse", &format!("{commit}:{path}")])
            .trim()
            .to_string()
    };
    assert_eq!(recorded(&remote, &snap, "third_party/lib"), e_lib.commit);
    assert_eq!(
        recorded(&remote.join("third_party/lib"), &e_lib.commit, "inner"),
        e_inner.commit
    );
    assert!(u.typed().sync_untracked.unwrap().files >= 1);
    // The local-only commit never reached inner's origin: it travelled over ssh.
    let inner_origin = git(&inner, &["config", "--get", "remote.origin.url"]);
    let on_origin = git(
        Path::new(inner_origin.trim()),
        &["for-each-ref", "--format=%(objectname)"],
    );
    assert!(!on_origin.contains(e_inner.head.as_deref().unwrap()));

    // 3. Cluster-side edits in a submodule are stashed there and reported; our own untracked
    // file is not; a re-sync brings the next edit.
    write(
        &remote.join("third_party/lib/lib.txt"),
        "edited on the cluster\n",
    );
    write(&inner.join("inner.txt"), "inner v4\n");
    let before = local_state_recursive(&fx.local);
    let (t, u) = sync_both(&fx.doc());
    assert_eq!(local_state_recursive(&fx.local), before, "re-sync");
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false)
    );
    let stash = submodule_entry(&t, "third_party/lib").stash.flatten();
    assert!(
        stash.is_some_and(|s| !s.commit.is_empty()),
        "{:?}",
        t.synced()
    );
    assert!(t.stderr.contains("cluster-side changes"), "{}", t.stderr);
    let stashed = git(&remote.join("third_party/lib"), &["stash", "show", "-p"]);
    assert!(stashed.contains("edited on the cluster"), "{stashed}");
    assert!(!stashed.contains("untracked in lib"), "{stashed}");
    assert_eq!(u.untracked().files, 0, "incremental: nothing new");
    // The superproject itself had no cluster-side change to stash.
    assert!(
        t.synced().stash.flatten().is_none(),
        "{}",
        t.doc["sync_tracked"]
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_uninitialised_submodule_stays_uninitialised_and_is_said() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("subs-uninit");
    git(
        &fx.local,
        &["submodule", "deinit", "-q", "--force", "--all"],
    );
    let before = local_state_recursive(&fx.local);
    let (t, _) = sync_both(&fx.doc());
    assert_eq!(local_state_recursive(&fx.local), before);
    let e = submodule_entry(&t, "third_party/lib");
    assert!(!e.initialised);
    assert!(e.head.is_none());
    assert!(t.stderr.contains("not checked out locally"), "{}", t.stderr);
    let remote = PathBuf::from(&fx.remote_repo).join("third_party/lib");
    assert!(
        std::fs::read_dir(&remote).map_or(true, |mut d| d.next().is_none()),
        "the remote submodule directory is empty"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_job_runs_with_its_submodules_as_they_were_at_submission() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("subs-job");
    let inner = fx.local.join("third_party/lib/inner");
    write(&inner.join("inner.txt"), "inner as submitted\n");
    write(&inner.join("untracked-inner.txt"), "untracked inner\n");
    let d = single_job(
        fx.doc(),
        "st-subs-job",
        "cat third_party/lib/inner/inner.txt third_party/lib/inner/untracked-inner.txt third_party/lib/lib.txt",
    );
    let (_, u) = sync_both(&d);
    let r = run("slurm-submit", &[], &u.doc);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A later sync changes the clone; the submitted job keeps its own tree.
    write(&inner.join("inner.txt"), "inner changed after submission\n");
    sync_both(&fx.doc());
    let id = r.job_id();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(out, "inner as submitted\nuntracked inner\nlib v1\n");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_linked_worktree_and_a_separate_git_dir_sync_like_the_main_checkout() {
    crate::needs_cluster!();
    let fx = Fixture::new("worktree");
    let tmp = tempdir();
    let wt = tmp.path().join("linked");
    git(
        &fx.local,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            wt.to_str().unwrap(),
        ],
    );
    write(&wt.join("README.md"), "edited in the linked worktree\n");
    write(
        &wt.join("only-here.txt"),
        "untracked in the linked worktree\n",
    );
    let main_before = local_state(&fx.local);
    let before = local_state(&wt);
    let mut d = fx.doc();
    d["repo_root"] = json!(wt);
    let (t, _) = sync_both(&d);
    assert_eq!(local_state(&wt), before);
    assert_eq!(local_state(&fx.local), main_before);
    assert_eq!(t.synced().branch.as_deref(), Some("feature"));
    let remote = PathBuf::from(&fx.remote_repo);
    assert_eq!(files_recursive(&remote, true), files_recursive(&wt, false));

    // A repository whose git directory lives elsewhere (`git init --separate-git-dir`).
    let sep = tmp.path().join("separate");
    let gd = tmp.path().join("separate.git");
    clone_repo(
        &fx.origin,
        &sep,
        &["--separate-git-dir", gd.to_str().unwrap()],
    );
    write(&sep.join("README.md"), "edited with a separate git dir\n");
    let before = local_state(&sep);
    let mut d = fx.doc();
    d["repo_root"] = json!(sep);
    let (t, _) = sync_both(&d);
    assert_eq!(local_state(&sep), before);
    assert_eq!(t.synced().branch.as_deref(), Some("main"));
    assert_eq!(files_recursive(&remote, true), files_recursive(&sep, false));
}

fn lfs_fixture(name: &str) -> Fixture {
    let fx = Fixture::new(name);
    let l = &fx.local;
    git(l, &["lfs", "install", "--local"]);
    git(l, &["lfs", "track", "*.bin"]);
    std::fs::create_dir_all(l.join("data")).unwrap();
    let blob: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(l.join("data/model.bin"), &blob).unwrap();
    git(l, &["add", "-A"]);
    git(l, &["commit", "-q", "-m", "a model in LFS"]);
    git(l, &["push", "-q", "origin", "main"]);
    fx
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn lfs_files_arrive_with_their_content_a_local_edit_too() {
    crate::needs_cluster!();
    let fx = lfs_fixture("lfs");
    let l = &fx.local;
    let mut edited = std::fs::read(l.join("data/model.bin")).unwrap();
    edited.extend_from_slice(b"local edit, not committed");
    std::fs::write(l.join("data/model.bin"), &edited).unwrap();
    let before = local_state(l);
    let (t, _) = sync_both(&fx.doc());
    assert_eq!(local_state(l), before);
    let remote = PathBuf::from(&fx.remote_repo);
    assert_eq!(
        std::fs::read(remote.join("data/model.bin")).unwrap(),
        edited,
        "the LFS file arrived with its content, the local edit included"
    );
    let lfs = t.synced().lfs.unwrap();
    assert_eq!(lfs.files, 1, "{lfs:?}");
    assert_eq!(lfs.objects_sent, 1);
    assert!(lfs.bytes_sent > 300_000);
    assert_eq!(files_recursive(&remote, true), files_recursive(l, false));
    // The clone knows the LFS filter: its status sees content, not a modified pointer, so the
    // next sync finds nothing cluster-side to stash.
    let status = git(&remote, &["status", "--porcelain"]);
    assert!(!status.contains("model.bin"), "{status}");
    let (t, _) = sync_both(&fx.doc());
    assert_eq!(t.synced().lfs.unwrap().objects_sent, 0);
    assert!(
        t.synced().stash.flatten().is_none(),
        "{}",
        t.doc["sync_tracked"]
    );
    assert_eq!(
        std::fs::read(remote.join("data/model.bin")).unwrap(),
        edited
    );
    // The job's own code tree has the content too.
    let d = single_job(t.doc.clone(), "st-lfs-job", "wc -c < data/model.bin");
    let r = run("slurm-submit", &[], &d);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.job_id();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(out.trim(), edited.len().to_string());

    // A login node without git-lfs: refused before anything is checked out, saying what to
    // install.
    let mut d = fx.doc();
    d["ssh_host"] = doc_for("old_host")["ssh_host"].clone();
    write(&l.join("README.md"), "edited before the old node\n");
    let head_before = git(&remote, &["rev-parse", "HEAD"]);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 4, "{}", t.stderr);
    let m = t.error_message();
    assert!(m.contains("git-lfs is not installed"), "{m}");
    assert!(m.contains("data/model.bin"), "the files are named: {m}");
    assert!(t.error().hint.contains("install git-lfs"));
    assert_eq!(git(&remote, &["rev-parse", "HEAD"]), head_before);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn lfs_content_that_is_nowhere_stops_the_sync_naming_the_file() {
    crate::needs_cluster!();
    let fx = lfs_fixture("lfs-nowhere");
    // Another clone that never fetched the content (pointer files only), with its own edit.
    let tmp = tempdir();
    let c = tmp.path().join("pointers-only");
    let out = std::process::Command::new("git")
        .args([
            "clone",
            "-q",
            fx.origin.to_str().unwrap(),
            c.to_str().unwrap(),
        ])
        .env("GIT_LFS_SKIP_SMUDGE", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    git(&c, &["lfs", "install", "--local"]);
    let _ = std::fs::remove_dir_all(c.join(".git/lfs"));
    write(&c.join("README.md"), "edited\n");
    let mut d = fx.doc();
    d["repo_root"] = json!(c);
    let before = local_state(&c);
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 4, "{}", t.stderr);
    let m = t.error_message();
    assert!(m.contains("data/model.bin"), "{m}");
    assert!(m.contains("neither in the local LFS store"), "{m}");
    assert!(t.error().hint.contains("git lfs pull"));
    assert_eq!(local_state(&c), before);
    // The lock was given back: a sync from the repository that has the content goes through.
    let (t, _) = sync_both(&fx.doc());
    assert_eq!(t.synced().lfs.unwrap().objects_sent, 1);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn in_a_jobs_tree_submodules_are_git_checkouts_and_update_init_needs_no_network() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("subs-git");
    // A commit that exists only locally in the nested submodule, and a dirty outer one.
    let inner = fx.local.join("third_party/lib/inner");
    write(&inner.join("inner.txt"), "inner, committed only here\n");
    git(&inner, &["commit", "-q", "-am", "local only"]);
    write(&fx.local.join("third_party/lib/lib.txt"), "lib, dirty\n");
    let d = single_job(
        fx.doc(),
        "st-subs-git",
        // No fetch may leave the node (file:// and every other transport refused).
        "set -e; git submodule status --recursive; \
         git -c protocol.allow=never submodule update --init --recursive; \
         echo AFTER; git submodule status --recursive; \
         echo LIB $(git -C third_party/lib rev-parse HEAD); \
         echo INNER $(git -C third_party/lib/inner rev-parse HEAD); \
         git -C third_party/lib/inner log -1 --format=%s; cat third_party/lib/lib.txt",
    );
    let (t, _) = sync_both(&d);
    let r = run("slurm-submit", &[], &t.doc);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = run("slurm-watch", &["--interval", "1"], &r.doc);
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(w.report().status.name(), "PASSED", "{out}\n{}", w.stderr);
    let lib = submodule_entry(&t, "third_party/lib").commit;
    let lib = lib.as_str();
    let nested = submodule_entry(&t, "third_party/lib/inner").commit;
    let nested = nested.as_str();
    let after = out.split("AFTER\n").nth(1).unwrap();
    for line in after.lines().take(2) {
        assert!(
            line.starts_with(' '),
            "initialised at the recorded commit: {line:?}\n{out}"
        );
    }
    assert!(out.contains(&format!("LIB {lib}")), "{out}");
    assert!(out.contains(&format!("INNER {nested}")), "{out}");
    assert!(
        out.contains("local only"),
        "the submodule's own history: {out}"
    );
    assert!(out.contains("lib, dirty"), "{out}");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_nested_uninitialised_submodules_hint_works_when_pasted_and_is_said_once() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("subs-hint");
    git(
        &fx.local.join("third_party/lib"),
        &["submodule", "deinit", "-q", "--force", "inner"],
    );
    let (t, _) = sync_both(&fx.doc());
    let said = t.stderr.clone();
    let warning = said
        .lines()
        .find(|l| l.contains("not checked out locally"))
        .unwrap_or_else(|| panic!("no warning: {said}"));
    let hint = warning.split('`').nth(1).unwrap();
    assert_eq!(
        hint,
        "git -C third_party/lib submodule update --init -- inner"
    );
    // Said once: the next sync of the same state records it but does not say it again.
    let (t2, _) = sync_both(&fx.doc());
    assert!(
        !t2.stderr.contains("not checked out locally"),
        "{}",
        t2.stderr
    );
    let recorded = t2.synced().warnings.join("\n");
    assert!(recorded.contains("not checked out locally"), "{recorded}");
    // Pasted as printed, in the repository, it works (the test origins are local paths, which
    // git refuses for submodules unless allowed: allowed through the environment, not the text).
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(hint)
        .current_dir(&fx.local)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "protocol.file.allow")
        .env("GIT_CONFIG_VALUE_0", "always")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fx.local.join("third_party/lib/inner/inner.txt").exists());
}

/// With a master (preflight ran): the unchanged look starts before the snapshot is made and its
/// answer is used (one execution, nothing pushed); after a change here, the snapshot goes
/// straight to the clone in the look's own execution (one in all, never said as a wait for
/// another sync's lock), also when a submodule changed (its push and checkout follow under the
/// lock the look took) or the clone was edited on the cluster (stashed); when the clone's HEAD
/// moved there, the snapshot goes through origin; the lock is given back every time.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn with_a_master_the_unchanged_look_overlaps_the_snapshot_and_a_change_still_syncs() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("early");
    let cp = control_path("early-%C");
    let mut d = fx.doc();
    d["ssh_multiplex"] = json!(true);
    d["control_path"] = json!(cp);
    let pf = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(pf.code, 0, "{}", pf.stderr);
    let settled = preflight_of(&pf.doc).control_path.expect("a master");
    let doc = pf.doc.clone();
    let (t1, _) = traced("slurm-sync-tracked", &doc);
    assert!(t1.synced().unchanged.is_none());

    let (t2, tr2) = traced("slurm-sync-tracked", &doc);
    assert_eq!(t2.synced().unchanged, Some(true), "{}", t2.stderr);
    assert_eq!(pushes(&tr2), 0, "{tr2:?}");
    assert_eq!(connecting_ssh(&tr2).len(), 1, "{tr2:?}");

    write(
        &fx.local.join("README.md"),
        "readme, edited with a master\n",
    );
    let (t3, tr3) = traced("slurm-sync-tracked", &doc);
    assert!(t3.synced().unchanged.is_none());
    assert!(
        t3.stderr.contains("straight to the remote clone"),
        "{}",
        t3.stderr
    );
    assert!(!t3.stderr.contains("waited"), "{}", t3.stderr);
    assert_eq!(pushes(&tr3), 0, "{tr3:?}");
    assert_eq!(
        connecting_ssh(&tr3).len(),
        1,
        "the look and the sync in one execution: {tr3:?}"
    );
    let remote = PathBuf::from(&fx.remote_repo);
    assert_eq!(
        std::fs::read_to_string(remote.join("README.md")).unwrap(),
        "readme, edited with a master\n"
    );
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false)
    );

    // A change inside a submodule: its new snapshot commit is not in the clone, so the look's
    // execution checks the superproject out and keeps the lock for the submodule's push and
    // checkout, which follow as usual.
    write(
        &fx.local.join("third_party/lib/lib.txt"),
        "lib, edited with a master\n",
    );
    let (t4, tr4) = traced("slurm-sync-tracked", &doc);
    assert!(
        t4.stderr.contains("straight to the remote clone"),
        "{}",
        t4.stderr
    );
    assert!(!t4.stderr.contains("waited"), "{}", t4.stderr);
    assert_eq!(
        pushes(&tr4),
        1,
        "the submodule's snapshot, into the clone: {tr4:?}"
    );
    let lib = submodule_entry(&t4, "third_party/lib");
    assert!(lib.snapshot, "{}", t4.doc);
    assert_eq!(
        std::fs::read_to_string(remote.join("third_party/lib/lib.txt")).unwrap(),
        "lib, edited with a master\n"
    );
    let head = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "-C"])
        .arg(remote.join("third_party/lib"))
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), lib.commit);
    assert!(
        !Path::new(&format!("{}.slurm-tools-sync.lock", fx.remote_repo)).exists(),
        "the lock is given back"
    );

    // An edit made on the cluster, then a change here: the re-sync, sent before the look's
    // answer, follows it in the same execution and, the look having found a change, looks for
    // itself and stashes the edit (never lost).
    write(&remote.join("README.md"), "edited on the cluster\n");
    write(&fx.local.join("README.md"), "readme, edited again\n");
    let (t5, tr5) = traced("slurm-sync-tracked", &doc);
    assert!(t5.synced().stash.flatten().is_some(), "{}", t5.doc);
    assert!(!t5.stderr.contains("waited"), "{}", t5.stderr);
    assert_eq!(
        connecting_ssh(&tr5).len(),
        1,
        "the look and the sync in one execution: {tr5:?}"
    );
    assert!(
        t5.stderr.contains("straight to the remote clone"),
        "{}",
        t5.stderr
    );
    assert_eq!(
        std::fs::read_to_string(remote.join("README.md")).unwrap(),
        "readme, edited again\n"
    );
    let (t6, tr6) = traced("slurm-sync-tracked", &doc);
    assert_eq!(t6.synced().unchanged, Some(true), "{}", t6.stderr);
    assert_eq!(connecting_ssh(&tr6).len(), 1, "{tr6:?}");

    // A tracked file edited inside a submodule on the cluster, nothing changed here: the look
    // (the clone's and each submodule's status at once) finds it, and the sync stashes it.
    write(
        &remote.join("third_party/lib/inner/inner.txt"),
        "inner, edited on the cluster\n",
    );
    let (t6b, _) = traced("slurm-sync-tracked", &doc);
    assert!(t6b.synced().unchanged.is_none(), "{}", t6b.stderr);
    assert!(
        t6b.stderr
            .contains("changed since (submodule third_party/lib/inner edited)"),
        "{}",
        t6b.stderr
    );
    let inner = submodule_entry(&t6b, "third_party/lib/inner");
    assert!(inner.stash.flatten().is_some(), "{}", t6b.doc);
    assert_eq!(
        std::fs::read_to_string(remote.join("third_party/lib/inner/inner.txt")).unwrap(),
        std::fs::read_to_string(fx.local.join("third_party/lib/inner/inner.txt")).unwrap()
    );

    // The clone's HEAD moved on the cluster, then a change here: the re-sync in the look's
    // execution refuses the pack (said), and the snapshot goes through origin.
    resync_after_head_moved(&fx, &doc);
    assert!(
        !Path::new(&format!("{}.slurm-tools-sync.lock", fx.remote_repo)).exists(),
        "the lock is given back"
    );
    master_exit("direct_host", &settled);
}

/// The clone's HEAD moved on the cluster, then a change here: the re-sync's pack is refused
/// there (said) and the snapshot goes through origin, pushed; the change arrives and the local
/// repository is untouched. The run, and the local repository's state it left alone.
fn resync_after_head_moved(fx: &Fixture, doc: &Value) -> (Run, BTreeMap<String, Vec<u8>>) {
    move_head_back_on_the_cluster(&fx.remote_repo);
    write(&fx.local.join("README.md"), "readme, edited a third time\n");
    let before = local_state_recursive(&fx.local);
    let (t, tr) = traced("slurm-sync-tracked", doc);
    assert!(t.stderr.contains("syncing through origin"), "{}", t.stderr);
    assert!(pushes(&tr) > 0, "{tr:?}");
    assert_eq!(
        std::fs::read_to_string(Path::new(&fx.remote_repo).join("README.md")).unwrap(),
        "readme, edited a third time\n"
    );
    assert_eq!(local_state_recursive(&fx.local), before, "untouched");
    (t, before)
}

/// The remote clone's HEAD moved one commit back, as the cluster user would on the cluster.
fn move_head_back_on_the_cluster(clone: &str) {
    let moved = std::process::Command::new("runuser")
        .args(["-u", &testbed().s("cluster_user"), "--", "git", "-C"])
        .args([clone, "checkout", "-q", "--detach", "HEAD~1"])
        .output()
        .unwrap();
    assert!(
        moved.status.success(),
        "{}",
        String::from_utf8_lossy(&moved.stderr)
    );
}

/// A tool run with its external commands traced: the run, and the trace.
fn traced(tool_name: &str, doc: &Value) -> (Run, Vec<Value>) {
    let dir = tempdir();
    let file = dir.path().join("trace.jsonl");
    let mut cmd = tool(tool_name);
    cmd.env("SLURM_TOOLS_TRACE", &file);
    let r = run_raw(cmd, doc.to_string().as_bytes());
    assert_eq!(r.code, 0, "{tool_name}: {}", r.stderr);
    (r, trace_lines(&file))
}

/// `git push` runs in a trace (to origin, or over ssh into the clone).
fn pushes(trace: &[Value]) -> usize {
    trace
        .iter()
        .filter(|l| l["argv"].to_string().contains("\"push\""))
        .count()
}

/// A first sync of a repository with submodules (issue 41): the submodules' commits travel
/// inside the clone's own execution (one pack each, made here), not as pushes over ssh of their
/// own followed by a second execution; the untracked sync into the clone just made sends its
/// files without waiting for a manifest there can be none of (and, given that document again,
/// finds the manifest there and syncs against it). A clone that has a submodule's
/// older commit (another checkout's sync, with no record from this one) gets what that commit
/// does not reach, and a submodule it has already gets nothing. Into a clone this machine never
/// synced, the packs go without waiting for the clone's answer, which drops those it has.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_first_sync_takes_the_submodules_commits_in_the_clones_one_execution() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("packs");
    let remote = PathBuf::from(&fx.remote_repo);
    write(&fx.local.join("README.md"), "readme, edited\n");
    write(&fx.local.join("notes.txt"), "untracked notes\n");
    let before = local_state_recursive(&fx.local);

    // 1. The first sync: one execution; nothing pushed into the clone over ssh (the snapshot to
    //    origin and its deletion are the only pushes).
    let (t1, tr1) = traced("slurm-sync-tracked", &fx.doc());
    assert_eq!(connecting_ssh(&tr1).len(), 1, "{tr1:?}");
    assert_eq!(pushes(&tr1), 2, "to origin, and the deletion: {tr1:?}");
    // A clone this machine never synced into: the packs went behind the clone's script,
    // without waiting for its answer.
    assert!(
        t1.stderr.contains(
            "sent 2 submodule snapshot(s) into the remote clone in the same execution, behind its script without waiting for its answer"
        ),
        "{}",
        t1.stderr
    );
    assert_eq!(t1.synced().created, Some(true), "{}", t1.doc);
    for path in ["third_party/lib", "third_party/lib/inner"] {
        let e = submodule_entry(&t1, path);
        assert_eq!(
            git(&remote.join(path), &["rev-parse", "HEAD"]).trim(),
            e.commit,
            "{path}"
        );
    }
    let (u1, tru1) = traced("slurm-sync-untracked", &t1.doc);
    assert_eq!(u1.untracked().files, 1, "{}", u1.doc);
    assert_eq!(connecting_ssh(&tru1).len(), 1, "{tru1:?}");
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false)
    );
    assert_eq!(local_state_recursive(&fx.local), before, "untouched");
    // The same document again (the clone says "created", but it has the manifest that sync
    // left): found there, and the sync reads it: nothing to send; a file deleted here since is
    // deleted there.
    let (u2, _) = traced("slurm-sync-untracked", &t1.doc);
    assert_eq!(u2.untracked().files, 0, "{}", u2.doc);
    assert!(u2.stderr.contains("syncing against them"), "{}", u2.stderr);
    std::fs::remove_file(fx.local.join("notes.txt")).unwrap();
    let (u3, _) = traced("slurm-sync-untracked", &t1.doc);
    assert_eq!(u3.untracked().deleted, ["notes.txt"], "{}", u3.doc);
    assert!(!remote.join("notes.txt").exists());

    // 2. Another checkout of the same repository (nothing on record from it), with a commit in
    //    lib that exists only there: lib gets what its commit in the clone (known here too) does
    //    not reach, inner nothing, still in one execution.
    let tmp = tempdir();
    let other = tmp.path().join("other");
    clone_repo(&fx.local, &other, &[]);
    git(
        &other,
        &["remote", "set-url", "origin", fx.origin.to_str().unwrap()],
    );
    git_sub(
        &other,
        &["submodule", "update", "-q", "--init", "--recursive"],
    );
    let other_lib = other.join("third_party/lib");
    write(
        &other_lib.join("lib.txt"),
        "lib, committed in the other checkout\n",
    );
    git(
        &other_lib,
        &["commit", "-q", "-am", "lib: only in the other checkout"],
    );
    let mut doc = fx.doc();
    doc["repo_root"] = json!(other);
    let (t3, tr3) = traced("slurm-sync-tracked", &doc);
    assert_eq!(connecting_ssh(&tr3).len(), 1, "{tr3:?}");
    assert!(
        t3.stderr
            .contains("sent 1 submodule snapshot(s) into the remote clone in the same execution")
            && t3.stderr.contains("it had the other 1 already"),
        "{}",
        t3.stderr
    );
    assert_eq!(
        git(&remote.join("third_party/lib"), &["rev-parse", "HEAD"]).trim(),
        git(&other_lib, &["rev-parse", "HEAD"]).trim()
    );
    assert_eq!(
        std::fs::read_to_string(remote.join("third_party/lib/lib.txt")).unwrap(),
        "lib, committed in the other checkout\n"
    );

    // 3. The same clone from a machine with no record of it (a state directory of its own), and
    //    one more commit in lib: both packs go without waiting for the answer; the clone drops
    //    inner's (it has that commit) and takes lib's.
    write(&other_lib.join("lib.txt"), "lib, committed again\n");
    git(&other_lib, &["commit", "-q", "-am", "lib: again"]);
    let state = tempdir();
    let mut cmd = tool("slurm-sync-tracked");
    cmd.env("SLURM_TOOLS_STATE_DIR", state.path());
    let t4 = run_raw(cmd, doc.to_string().as_bytes());
    assert_eq!(t4.code, 0, "{}", t4.stderr);
    assert!(
        t4.stderr
            .contains("behind its script without waiting for its answer")
            && t4
                .stderr
                .contains("it had 1 of them already and dropped those"),
        "{}",
        t4.stderr
    );
    for path in ["third_party/lib", "third_party/lib/inner"] {
        assert_eq!(
            git(&remote.join(path), &["rev-parse", "HEAD"]).trim(),
            git(&other.join(path), &["rev-parse", "HEAD"]).trim(),
            "{path}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(remote.join("third_party/lib/lib.txt")).unwrap(),
        "lib, committed again\n"
    );
}

/// A re-sync with nothing changed (issue 41): no new snapshot commit (a dirty submodule keeps
/// its snapshot's id), nothing pushed, one ssh execution that confirms the clone is as the last
/// sync left it; the untracked re-sync one execution sending nothing. A change on the cluster
/// since is found and synced as usual (stashed); a local change syncs in full; the person's
/// repository is untouched throughout.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_unchanged_resync_pushes_nothing_and_confirms_the_clone_in_one_execution() {
    crate::needs_cluster!();
    let fx = with_nested_submodules("resync");
    let inner = fx.local.join("third_party/lib/inner");
    let remote = PathBuf::from(&fx.remote_repo);
    write(&inner.join("inner.txt"), "inner, dirty\n");
    write(&fx.local.join("README.md"), "readme, edited\n");
    write(&fx.local.join("notes.txt"), "untracked notes\n");
    let before = local_state_recursive(&fx.local);

    // 1. The first sync: in full.
    let (t1, tr1) = traced("slurm-sync-tracked", &fx.doc());
    assert!(t1.synced().unchanged.is_none());
    assert!(pushes(&tr1) > 0);
    let (u1, _) = traced("slurm-sync-untracked", &t1.doc);
    assert_eq!(u1.untracked().files, 1, "{}", u1.doc);

    // 2. Again, nothing changed: the same commits, nothing pushed, one execution each.
    let (t2, tr2) = traced("slurm-sync-tracked", &fx.doc());
    let (s1, s2) = (t1.synced(), t2.synced());
    assert_eq!(s2.unchanged, Some(true), "{}", t2.stderr);
    assert_eq!(s2.commit, s1.commit);
    assert_eq!(s2.temp_ref_deleted.flatten(), None);
    assert_eq!(
        s2.submodules, s1.submodules,
        "a dirty submodule keeps its commit"
    );
    assert!(submodule_entry(&t2, "third_party/lib/inner").snapshot);
    assert_eq!(pushes(&tr2), 0, "nothing pushed: {tr2:?}");
    assert_eq!(connecting_ssh(&tr2).len(), 1, "one execution: {tr2:?}");
    assert!(t2.stderr.contains("nothing pushed"), "{}", t2.stderr);
    assert_schema(&t2.doc);
    let (u2, tru2) = traced("slurm-sync-untracked", &t2.doc);
    assert_eq!(u2.untracked().files, 0, "{}", u2.doc);
    assert_eq!(connecting_ssh(&tru2).len(), 1, "{tru2:?}");
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false)
    );

    // 3. A change made on the cluster since: said, stashed, synced as usual.
    write(&remote.join("README.md"), "edited on the cluster\n");
    let (t3, tr3) = traced("slurm-sync-tracked", &fx.doc());
    assert!(t3.synced().unchanged.is_none());
    assert!(t3.stderr.contains("changed since"), "{}", t3.stderr);
    assert!(t3.synced().stash.flatten().is_some(), "{}", t3.doc);
    assert!(connecting_ssh(&tr3).len() > 1, "confirm, then sync");
    assert_eq!(
        std::fs::read_to_string(remote.join("README.md")).unwrap(),
        "readme, edited\n"
    );
    assert_eq!(local_state_recursive(&fx.local), before, "untouched");

    // 4. One file changed here: a new snapshot, sent straight to the clone as one pack against
    //    the snapshot it is at (nothing pushed, to origin or into a submodule: the clone has the
    //    submodules' commits), in one execution (no master here: no early look).
    write(&fx.local.join("README.md"), "readme, edited again\n");
    let before = local_state_recursive(&fx.local);
    let (t4, tr4) = traced("slurm-sync-tracked", &fx.doc());
    assert_eq!(local_state_recursive(&fx.local), before, "untouched");
    assert_ne!(t4.synced().commit, s1.commit);
    assert!(t4.synced().unchanged.is_none());
    assert_eq!(pushes(&tr4), 0, "{tr4:?}");
    assert!(
        t4.stderr.contains("straight to the remote clone"),
        "{}",
        t4.stderr
    );
    assert_eq!(connecting_ssh(&tr4).len(), 1, "{tr4:?}");
    assert_eq!(
        std::fs::read_to_string(remote.join("README.md")).unwrap(),
        "readme, edited again\n"
    );
    assert_eq!(t4.synced().submodules, s1.submodules);
    let (t5, _) = traced("slurm-sync-tracked", &fx.doc());
    assert_eq!(t5.synced().unchanged, Some(true), "{}", t5.stderr);
    assert_eq!(t5.synced().commit, t4.synced().commit);

    // 5. The clone's HEAD moved on the cluster, then a change here: the pack is refused there
    //    (said) and the snapshot goes through origin, pushed.
    let (t6, before) = resync_after_head_moved(&fx, &fx.doc());
    let (u6, _) = traced("slurm-sync-untracked", &t6.doc);
    assert_eq!(u6.code, 0);
    assert_eq!(
        files_recursive(&remote, true),
        files_recursive(&fx.local, false)
    );

    assert_eq!(local_state_recursive(&fx.local), before, "untouched");
}
