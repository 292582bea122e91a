//! Shared fixtures: a local repository with its own origin, synced to the cluster, and ways to
//! look at jobs and the local repository's state. No tests here, so the fault suite can include
//! this file too.
#![allow(dead_code)]

use crate::harness::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=Test",
            "-c",
            "user.email=t@localhost",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A bare origin the cluster user can read, seeded with a small project (with a `cpp/` dir).
pub struct Fixture {
    pub name: String,
    pub origin: PathBuf,
    pub local: PathBuf,
    pub remote_repo: String,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    pub fn new(name: &str) -> Fixture {
        let tb = testbed();
        let unique = format!("{name}-{}", std::process::id());
        let origin = PathBuf::from(tb.s("test_origins")).join(format!("{unique}.git"));
        let _ = std::fs::remove_dir_all(&origin);
        git(
            Path::new("/"),
            &[
                "init",
                "-q",
                "--bare",
                "--shared=all",
                "-b",
                "main",
                origin.to_str().unwrap(),
            ],
        );
        let tmp = tempdir();
        let local = tmp.path().join("work");
        git(
            Path::new("/"),
            &["init", "-q", "-b", "main", local.to_str().unwrap()],
        );
        std::fs::create_dir_all(local.join("cpp")).unwrap();
        std::fs::create_dir_all(local.join("src")).unwrap();
        write(&local.join("README.md"), "readme\n");
        write(&local.join("src/a.py"), "print('a')\n");
        write(&local.join("src/b.py"), "print('b')\n");
        write(&local.join("cpp/main.cpp"), "int main() {}\n");
        write(&local.join("old-name.txt"), "to be renamed\n");
        write(&local.join("delete-me.txt"), "bye\n");
        write(&local.join(".gitignore"), "*.log\n.env\nbuild/\n");
        std::fs::write(local.join("run.sh"), "#!/bin/sh\necho run\n").unwrap();
        std::fs::set_permissions(local.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        git(&local, &["add", "-A"]);
        git(&local, &["commit", "-q", "-m", "initial"]);
        git(
            &local,
            &["remote", "add", "origin", origin.to_str().unwrap()],
        );
        git(&local, &["push", "-q", "origin", "main"]);
        git(&local, &["branch", "-q", "--set-upstream-to=origin/main"]);
        readable_by_all(&origin);
        let remote_repo = format!("{}/sync-{unique}", tb.remote_root());
        let _ = std::fs::remove_dir_all(&remote_repo);
        Fixture {
            name: unique,
            origin,
            local,
            remote_repo,
            _tmp: tmp,
        }
    }

    /// Staged, unstaged, deleted, renamed, untracked and ignored changes.
    pub fn make_messy(&self) {
        let l = &self.local;
        write(&l.join("README.md"), "readme, edited but not staged\n");
        write(&l.join("src/a.py"), "print('a, staged')\n");
        git(l, &["add", "src/a.py"]);
        write(
            &l.join("src/a.py"),
            "print('a, staged then edited again')\n",
        );
        git(l, &["rm", "-q", "delete-me.txt"]);
        std::fs::remove_file(l.join("src/b.py")).unwrap();
        git(l, &["mv", "old-name.txt", "new-name.txt"]);
        write(&l.join("staged-new.txt"), "new and staged\n");
        git(l, &["add", "staged-new.txt"]);
        write(&l.join("untracked.txt"), "untracked\n");
        std::fs::create_dir_all(l.join("data/nested")).unwrap();
        write(&l.join("data/nested/u.bin"), "untracked in a new dir\n");
        write(&l.join("debug.log"), "ignored\n");
        write(&l.join(".env"), "SECRET=ignored\n");
        std::fs::create_dir_all(l.join("build")).unwrap();
        write(&l.join("build/out.o"), "ignored build output\n");
        std::os::unix::fs::symlink("README.md", l.join("link-to-readme")).unwrap();
        git(
            l,
            &[
                "stash",
                "push",
                "-q",
                "-m",
                "an older stash",
                "--",
                "README.md",
            ],
        );
        write(&l.join("README.md"), "readme, edited but not staged\n");
    }

    pub fn doc(&self) -> Value {
        let mut d = doc_for("direct_host");
        d["repo_root"] = json!(self.local);
        d["repo_url"] = json!(self.origin);
        d["remote_repo_path"] = json!(self.remote_repo);
        d["model_name"] = json!(self.name);
        d
    }

    pub fn origin_refs(&self) -> String {
        git(
            &self.origin,
            &["for-each-ref", "--format=%(refname) %(objectname)"],
        )
    }
}

/// Everything about the local repository that a sync must leave alone.
pub fn local_state(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut s = BTreeMap::new();
    // The git directory wherever it is (`.git` may be a file: a linked worktree, a submodule).
    let gd = PathBuf::from(git(root, &["rev-parse", "--absolute-git-dir"]).trim());
    for f in [
        "HEAD",
        "index",
        "packed-refs",
        "ORIG_HEAD",
        "FETCH_HEAD",
        "config",
    ] {
        if let Ok(b) = std::fs::read(gd.join(f)) {
            s.insert(format!(".git/{f}"), b);
        }
    }
    s.insert(
        "refs".into(),
        git(root, &["for-each-ref", "--format=%(refname) %(objectname)"]).into_bytes(),
    );
    s.insert(
        "stash list".into(),
        git(root, &["stash", "list"]).into_bytes(),
    );
    s.insert(
        "status".into(),
        git(
            root,
            &[
                // A plain status may refresh and rewrite the index: the probe must not change
                // what it measures.
                "--no-optional-locks",
                "status",
                "--porcelain=v2",
                "-z",
                "--ignored",
                "--untracked-files=all",
            ],
        )
        .into_bytes(),
    );
    walk(root, root, &mut s, &[".git"]);
    s
}

/// `chmod -R a+rX`: a test origin the cluster user (another account) can read.
pub fn readable_by_all(path: &Path) {
    let ok = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "chmod -R a+rX {}", path.display());
}

/// The paths of every checked-out submodule under `root`, nested ones too, parents first.
pub fn submodule_paths(root: &Path) -> Vec<String> {
    git(
        root,
        &[
            "submodule",
            "--quiet",
            "foreach",
            "--recursive",
            "echo \"$displaypath\"",
        ],
    )
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_string)
    .collect()
}

/// [`local_state`] of a superproject and of every submodule in it (nested ones too), each
/// submodule's keyed by its path.
pub fn local_state_recursive(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = local_state(root);
    for sub in submodule_paths(root) {
        for (k, v) in local_state(&root.join(&sub)) {
            all.insert(format!("[{sub}] {k}"), v);
        }
    }
    all
}

/// Files under `root` (content, mode, symlink targets), skipping the named top-level entries.
pub fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>, skip: &[&str]) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(root).unwrap();
        if rel.components().count() == 1 && skip.iter().any(|s| rel.as_os_str() == *s) {
            continue;
        }
        let key = String::from_utf8_lossy(rel.as_os_str().as_bytes()).into_owned();
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            out.insert(
                format!("L {key}"),
                std::fs::read_link(&p)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            );
        } else if m.is_dir() {
            walk(root, &p, out, skip);
        } else {
            let exec = m.permissions().mode() & 0o111 != 0;
            out.insert(format!("F {key} x={exec}"), std::fs::read(&p).unwrap());
        }
    }
}

/// A fixture synced to the cluster, ready for submission.
pub fn synced(name: &str) -> (Fixture, Value) {
    let (fx, doc, _) = synced_on("direct_host", name);
    (fx, doc)
}

/// A fixture synced through the login node `host_key` names in `info`; also what the sync said.
pub fn synced_on(host_key: &str, name: &str) -> (Fixture, Value, String) {
    let fx = Fixture::new(name);
    let mut d = fx.doc();
    d["ssh_host"] = doc_for(host_key)["ssh_host"].clone();
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["time_limit"] = json!("00:05:00");
    d["job_name"] = json!(format!("st-{name}"));
    // No GPUs unless a test asks: a job holding the node's 4 fake GPUs makes every other wait.
    let t = run("slurm-sync-tracked", &[], &d);
    assert_eq!(t.code, 0, "{}", t.stderr);
    (fx, t.doc, t.stderr)
}

/// scontrol's view of a job as key=value pairs.
pub fn scontrol(job: &str) -> std::collections::BTreeMap<String, String> {
    let out = std::process::Command::new("scontrol")
        .args(["show", "job", "-o", job])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut m = std::collections::BTreeMap::new();
    // Values may contain spaces only in a few keys; split on " Key=" boundaries.
    let mut key = String::new();
    for word in text.trim().split(' ') {
        match word.split_once('=') {
            Some((k, v))
                if k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == ':' || c == '/')
                    && !k.is_empty() =>
            {
                key = k.to_string();
                m.insert(key.clone(), v.to_string());
            }
            _ => {
                if let Some(v) = m.get_mut(&key) {
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    m
}

/// Wait until sacct has a final state for the job: (State, ExitCode).
pub fn wait_done(job: &str, secs: u64) -> (String, String) {
    finished_by(job, secs)
        .unwrap_or_else(|last| panic!("job {job} did not finish in {secs}s (sacct: {last})"))
}

/// The job's final (State, ExitCode) once sacct has it, if within `secs`; else what sacct said last.
pub fn finished_by(job: &str, secs: u64) -> Result<(String, String), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let out = std::process::Command::new("sacct")
            .args(["-X", "-n", "-P", "-j", job, "--format=State,ExitCode"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Some((state, code)) = text.lines().next().and_then(|l| l.split_once('|')) {
            if !["PENDING", "RUNNING", "REQUEUED", "COMPLETING", ""].contains(&state) {
                // `CANCELLED by <uid>` is a cancelled job.
                let base = state.split_whitespace().next().unwrap_or(state);
                return Ok((base.to_string(), code.to_string()));
            }
        }
        if Instant::now() >= deadline {
            return Err(text);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The local working tree as the remote should have it: tracked and untracked, no ignored files.
pub fn expected_remote(local: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    walk(local, local, &mut all, &[".git"]);
    let listed = git(
        local,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    );
    let keep: std::collections::BTreeSet<&str> =
        listed.split('\0').filter(|s| !s.is_empty()).collect();
    all.into_iter()
        .filter(|(k, _)| {
            let name = k[2..].rsplit_once(" x=").map_or(&k[2..], |(n, _)| n);
            keep.contains(name)
        })
        .collect()
}

pub fn actual_remote(remote: &str) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    walk(
        Path::new(remote),
        Path::new(remote),
        &mut m,
        &[".git", "work_dirs"],
    );
    m
}

/// `git clone -q [OPTIONS] FROM TO`.
pub fn clone_repo(from: &Path, to: &Path, options: &[&str]) {
    let (from, to) = (from.to_str().unwrap(), to.to_str().unwrap());
    let mut args = vec!["clone", "-q"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[from, to]);
    git(Path::new("/"), &args);
}

pub fn git_sub(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["-c", "protocol.file.allow=always"];
    all.extend_from_slice(args);
    git(dir, &all)
}

/// A bare origin seeded with one file.
pub fn small_origin(name: &str, file: &str, text: &str) -> PathBuf {
    let tb = testbed();
    let origin =
        PathBuf::from(tb.s("test_origins")).join(format!("{name}-{}.git", std::process::id()));
    let _ = std::fs::remove_dir_all(&origin);
    let tmp = tempdir();
    let w = tmp.path().join("w");
    git(
        Path::new("/"),
        &["init", "-q", "-b", "main", w.to_str().unwrap()],
    );
    write(&w.join(file), text);
    git(&w, &["add", "-A"]);
    git(&w, &["commit", "-q", "-m", &format!("{name}: first")]);
    clone_repo(&w, &origin, &["--bare"]);
    readable_by_all(&origin);
    origin
}

/// A superproject holding `third_party/lib` (its own origin), which holds `inner` (nested),
/// both checked out, committed and pushed.
pub fn with_nested_submodules(name: &str) -> Fixture {
    let fx = Fixture::new(name);
    let inner = small_origin(&format!("{name}-inner"), "inner.txt", "inner v1\n");
    let lib = small_origin(&format!("{name}-lib"), "lib.txt", "lib v1\n");
    // lib gets inner as a submodule, pushed to lib's origin.
    let tmp = tempdir();
    let lw = tmp.path().join("lib");
    git(
        Path::new("/"),
        &["clone", "-q", lib.to_str().unwrap(), lw.to_str().unwrap()],
    );
    git_sub(
        &lw,
        &["submodule", "add", "-q", inner.to_str().unwrap(), "inner"],
    );
    git(&lw, &["commit", "-q", "-m", "lib: add inner"]);
    git(&lw, &["push", "-q", "origin", "HEAD:main"]);
    git_sub(
        &fx.local,
        &[
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap(),
            "third_party/lib",
        ],
    );
    git_sub(
        &fx.local,
        &["submodule", "update", "-q", "--init", "--recursive"],
    );
    git(&fx.local, &["commit", "-q", "-m", "add third_party/lib"]);
    git(&fx.local, &["push", "-q", "origin", "main"]);
    fx
}
