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
        assert_eq!(t.doc["error"]["field"], "repo_url");
        let m = t.error_message();
        assert!(m.contains("none of the remotes"), "{m}");
        assert!(m.contains(other.origin.to_str().unwrap()), "{m}");
        assert!(m.contains("nothing was pushed"), "{m}");
        assert!(
            t.doc["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("--allow-unrelated"),
            "{}",
            t.doc["error"]
        );
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
        t.doc["sync_tracked"]["commit"].as_str().unwrap()
    );
    assert_eq!(local_state(&other.local), other_before);
}

#[test]
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
fn make_all_from_a_fresh_checkout_ends_passed() {
    crate::needs_cluster!();
    let tmp = tempdir();
    let checkout = tmp.path().join("checkout");
    git(
        Path::new("/"),
        &[
            "clone",
            "-q",
            repo_root().to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
    );
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
    assert_eq!(report["report"]["status"], "PASSED", "{}", report["report"]);
    assert_eq!(
        report["repo_root"],
        json!(testbed().s("sample_repo")),
        "the default job syncs the test cluster's sample repository"
    );
    assert!(stderr.contains("PASSED"), "{stderr}");
}
