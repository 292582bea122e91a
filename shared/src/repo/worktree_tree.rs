//! The snapshot's tree without starting git: what `git add -u` into a copy of the index followed
//! by `git write-tree` gives, computed in this process when that is provably the same.
//!
//! The index is read directly ([`crate::repo::index_file`]), every tracked file is `lstat`ed against
//! its cached stat data (in parallel for large trees, as git's preload does), files whose stat
//! differs (or that are racily clean) are hashed, changed ones written as blobs, and the tree is
//! the index's own tree (the cache tree's root) with only the changed paths updated
//! (libgit2's `git_tree_create_updated`: only the subtrees on those paths are written).
//!
//! It declines (`None`, and git does the work) whenever git's answer could differ: a content
//! filter or end-of-line conversion may apply (any attribute beyond a safe list, core.autocrlf),
//! core.filemode or core.symlinks is off, the index has conflicts, is split or sparse, or has no
//! valid cache tree, or a file cannot be read.

use crate::repo::git::LocalRepo;
use crate::repo::index_file::{self, Entry, GITLINK};
use git2::{FileMode, ObjectType, Oid};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What a file's check found; blobs are written afterwards, on the calling thread (a libgit2
/// repository is not shared between threads).
enum Update {
    Changed(Vec<u8>, Oid, Vec<u8>, FileMode),
    Remove(Vec<u8>),
}

/// The tree, or `None` when git must do it (see the module's words).
pub fn tree(repo: &LocalRepo, gitlinks: &[(String, String)]) -> Option<String> {
    let index_path = repo.git_dir.join("index");
    let meta = std::fs::metadata(&index_path).ok()?;
    let index = index_file::parse(&std::fs::read(&index_path).ok()?)?;
    if index.incomplete || index.entries.iter().any(|e| e.stage != 0) {
        return None;
    }
    let baseline = repo
        .repo
        .find_tree(Oid::from_bytes(&index.root_tree?).ok()?)
        .ok()?;
    if !config_is_plain(repo) || !attributes_are_plain(repo, &index.entries) {
        return None;
    }
    // Git's racy-clean rule: an entry whose file changed in the same second as the index was
    // written cannot be trusted by its stat data.
    let index_mtime = (meta.mtime() as u32, meta.mtime_nsec() as u32);
    let updates = scan(&repo.root, &index.entries, index_mtime)?;
    // The baseline's entries exist (they are the index's tree): libgit2 would otherwise look
    // each up again for every tree it writes.
    git2::opts::strict_object_creation(false);
    let mut builder = git2::build::TreeUpdateBuilder::new();
    let odb = repo.repo.odb().ok()?;
    for u in updates {
        match u {
            Update::Changed(path, oid, content, mode) => {
                // Written only when new (an earlier snapshot may have stored the same content).
                if !odb.exists(oid) {
                    repo.repo.blob(&content).ok()?;
                }
                builder.upsert(path, oid, mode)
            }
            Update::Remove(path) => builder.remove(path),
        };
    }
    for (path, commit) in gitlinks {
        builder.upsert(path.as_str(), Oid::from_str(commit).ok()?, FileMode::Commit);
    }
    builder
        .create_updated(&repo.repo, &baseline)
        .ok()
        .map(|oid| oid.to_string())
}

/// Every entry against its file; `None` when a file cannot be read (git says why).
fn scan(root: &Path, entries: &[Entry], index_mtime: (u32, u32)) -> Option<Vec<Update>> {
    let work: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.mode != GITLINK && !e.skip_worktree)
        .collect();
    let threads = if work.len() < 4096 {
        1
    } else {
        std::thread::available_parallelism().map_or(2, |n| n.get().min(8))
    };
    let chunk = work.len().div_ceil(threads).max(1);
    let results: Vec<Option<Vec<Update>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = work
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for e in part {
                        if let Some(u) = check(root, e, index_mtime)? {
                            out.push(u);
                        }
                    }
                    Some(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    Some(all)
}

/// One entry: `Ok(None)` unchanged, an update when changed; `None` (outer) when unreadable.
fn check(root: &Path, e: &Entry, index_mtime: (u32, u32)) -> Option<Option<Update>> {
    let path = root.join(std::ffi::OsStr::from_bytes(&e.path));
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(err)
            if matches!(err.kind(), std::io::ErrorKind::NotFound)
                || err.raw_os_error() == Some(20) =>
        {
            return Some(Some(Update::Remove(e.path.clone())));
        }
        Err(_) => return None,
    };
    let ft = meta.file_type();
    let mode = if ft.is_symlink() {
        0o120000
    } else if ft.is_file() {
        if meta.mode() & 0o100 != 0 {
            0o100755
        } else {
            0o100644
        }
    } else {
        // A directory (or anything else) where a tracked file was: git add -u removes it.
        return Some(Some(Update::Remove(e.path.clone())));
    };
    let stat_same = mode == e.mode
        && (meta.mtime() as u32, meta.mtime_nsec() as u32) == e.mtime
        && (meta.ctime() as u32, meta.ctime_nsec() as u32) == e.ctime
        && meta.ino() as u32 == e.ino
        && meta.uid() == e.uid
        && meta.gid() == e.gid
        && meta.size() as u32 == e.size
        && !e.intent_to_add;
    let racy = e.mtime >= index_mtime;
    if stat_same && !racy {
        return Some(None);
    }
    let content = if ft.is_symlink() {
        std::fs::read_link(&path)
            .ok()?
            .as_os_str()
            .as_bytes()
            .to_vec()
    } else {
        std::fs::read(&path).ok()?
    };
    let oid = Oid::hash_object(ObjectType::Blob, &content).ok()?;
    if oid.as_bytes() == e.oid && mode == e.mode && !e.intent_to_add {
        return Some(None);
    }
    let file_mode = match mode {
        0o120000 => FileMode::Link,
        0o100755 => FileMode::BlobExecutable,
        _ => FileMode::Blob,
    };
    Some(Some(Update::Changed(
        e.path.clone(),
        oid,
        content,
        file_mode,
    )))
}

/// No end-of-line conversion, and git sees modes and symlinks as they are.
fn config_is_plain(repo: &LocalRepo) -> bool {
    let Ok(cfg) = repo.repo.config() else {
        return false;
    };
    let autocrlf = cfg.get_string("core.autocrlf").unwrap_or_default();
    let autocrlf_off = autocrlf.is_empty() || autocrlf.eq_ignore_ascii_case("false");
    // The index is read as SHA-1's (20-byte ids); a SHA-256 repository is git's to do.
    let sha1 = cfg
        .get_string("extensions.objectformat")
        .map_or(true, |f| f.eq_ignore_ascii_case("sha1"));
    autocrlf_off
        && sha1
        && cfg.get_bool("core.filemode").unwrap_or(true)
        && cfg.get_bool("core.symlinks").unwrap_or(true)
        && cfg.get_string("core.attributesfile").is_err()
}

/// Every attributes file (the repository's `info/attributes`, the person's global one, each
/// tracked `.gitattributes`) sets only attributes that cannot change what `git add` stores.
fn attributes_are_plain(repo: &LocalRepo, entries: &[Entry]) -> bool {
    let mut files = vec![repo.repo.commondir().join("info/attributes")];
    if let Some(cfg) = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
    {
        files.push(cfg.join("git/attributes"));
    }
    for e in entries {
        if e.path == b".gitattributes" || e.path.ends_with(b"/.gitattributes") {
            files.push(repo.root.join(std::ffi::OsStr::from_bytes(&e.path)));
        }
    }
    files.iter().all(|f| match std::fs::read(f) {
        Ok(text) => plain_attributes(&String::from_utf8_lossy(&text)),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    })
}

/// Attributes that only concern diffs, merges, archives and linguists: `git add` stores the
/// file's bytes whatever they say.
fn plain_attributes(text: &str) -> bool {
    text.lines().all(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return true;
        }
        if line.starts_with("[attr]") {
            return false;
        }
        line.split_whitespace().skip(1).all(|attr| {
            let name = attr
                .trim_start_matches(['-', '!'])
                .split('=')
                .next()
                .unwrap_or("");
            name.starts_with("linguist-")
                || matches!(
                    name,
                    "diff"
                        | "merge"
                        | "binary"
                        | "export-ignore"
                        | "export-subst"
                        | "whitespace"
                        | "delta"
                        | "conflict-marker-size"
                        | "lockable"
                )
                || attr == "-text"
        })
    })
}

#[cfg(test)]
mod tests {
    use super::plain_attributes;
    use crate::repo::git::LocalRepo;
    use crate::testutil::git;
    use std::path::Path;
    use std::process::Command;

    /// git's own answer: `add -u` into a copy of the index, then `write-tree`.
    fn gits_tree(d: &Path) -> String {
        let idx = d.join(".git/index-copy");
        std::fs::copy(d.join(".git/index"), &idx).unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("git")
                .arg("-C")
                .arg(d)
                .args(args)
                .env("GIT_INDEX_FILE", &idx)
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        run(&["add", "-u"]);
        let t = run(&["write-tree"]);
        std::fs::remove_file(&idx).unwrap();
        t
    }

    fn open(d: &Path) -> LocalRepo {
        let repo = git2::Repository::open(d).unwrap();
        LocalRepo {
            root: d.to_path_buf(),
            git_dir: repo.path().to_path_buf(),
            repo,
        }
    }

    #[test]
    fn the_tree_is_gits_for_every_kind_of_change_or_git_is_asked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        for (f, text) in [
            ("a.txt", "a"),
            ("sub/b.txt", "b"),
            ("sub/deep/c.txt", "c"),
            ("run.sh", "r"),
            ("gone.txt", "g"),
            ("dir-later", "x"),
        ] {
            std::fs::create_dir_all(d.join(f).parent().unwrap()).unwrap();
            std::fs::write(d.join(f), text).unwrap();
        }
        std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "x"]);
        // Sleep past the index's second so nothing below is racily clean by accident.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let repo = open(d);
        assert_eq!(
            super::tree(&repo, &[]).as_deref(),
            Some(gits_tree(d).as_str()),
            "clean"
        );
        std::fs::write(d.join("sub/deep/c.txt"), "c changed").unwrap();
        std::fs::set_permissions(d.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_file(d.join("gone.txt")).unwrap();
        std::fs::remove_file(d.join("link")).unwrap();
        std::os::unix::fs::symlink("sub/b.txt", d.join("link")).unwrap();
        std::fs::remove_file(d.join("dir-later")).unwrap();
        std::fs::create_dir(d.join("dir-later")).unwrap();
        std::fs::write(d.join("dir-later/inside.txt"), "untracked").unwrap();
        std::fs::write(d.join("untracked.txt"), "never in the tree").unwrap();
        // Same size and an equal mtime: only the racy rule catches it.
        std::fs::write(d.join("a.txt"), "A").unwrap();
        let ours = super::tree(&repo, &[]);
        assert_eq!(ours.as_deref(), Some(gits_tree(d).as_str()), "changed");
        // A staged change leaves no valid cache tree: git is asked.
        git(d, &["add", "sub/b.txt"]);
        std::fs::write(d.join("sub/b.txt"), "b staged then changed").unwrap();
        git(d, &["add", "sub/b.txt"]);
        assert!(super::tree(&repo, &[]).is_none());
        // A filter may apply: git is asked.
        git(d, &["write-tree"]);
        std::fs::write(d.join(".gitattributes"), "*.txt text eol=crlf\n").unwrap();
        git(d, &["add", ".gitattributes"]);
        git(d, &["write-tree"]);
        assert!(super::tree(&open(d), &[]).is_none());
    }

    #[test]
    fn only_attributes_that_cannot_change_stored_bytes_are_plain() {
        assert!(plain_attributes(
            "# comment\n\n*.png binary\n*.ipynb linguist-generated -diff\n*.sh -text\ndocs/** export-ignore\n"
        ));
        for unsafe_line in [
            "*.bin filter=lfs diff=lfs merge=lfs -text",
            "* text=auto",
            "*.bat eol=crlf",
            "*.c ident",
            "*.txt working-tree-encoding=UTF-16",
            "[attr]mine filter=x",
            "*.c crlf",
        ] {
            assert!(!plain_attributes(unsafe_line), "{unsafe_line}");
        }
    }
}
