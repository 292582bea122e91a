//! The snapshot commit: HEAD plus the working-tree content of every tracked file, built in a
//! temporary index so that HEAD, the branches, the real index, the working tree and the stash
//! are never touched (docs/migrating.md, step 4c's deviation; docs/reliability.md 1).
//!
//! It is the CLI recipe of research/ecosystem.md §5: copy the index, `git add -u` into the copy,
//! `git write-tree`, `git commit-tree -p HEAD`. The real git is used (not libgit2) so clean and
//! smudge filters such as git-lfs apply exactly as in a normal commit, and the copied index keeps
//! git's stat cache, so the cost is that of `git status`. `git stash create` is not used: it
//! prints nothing on a clean tree, rewrites `.git/index`, and fails on intent-to-add entries.

use crate::contract::error::{Result, ToolError};
use crate::repo::git::{run_git, LocalRepo};

#[derive(Debug, Clone)]
pub struct Snapshot {
    pub commit: String,
    pub tree: String,
    /// HEAD, the snapshot's parent.
    pub base: String,
}

/// A private temporary directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Result<TempDir> {
        crate::state::tempdir::create("slurm-tools-snapshot")
            .map(TempDir)
            .map_err(|e| ToolError::remote(format!("cannot create a temporary directory: {e}")))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn create(repo: &LocalRepo, base: &str, message: &str) -> Result<Snapshot> {
    create_with(repo, base, message, &[], false)
}

/// The snapshot of a submodule: its gitlinks to nested submodules set to their own snapshots
/// (`gitlinks`: path in this repository, commit); when that changes nothing, the submodule's
/// HEAD itself (a clean submodule travels as the commit it is at).
pub fn of_submodule(
    repo: &LocalRepo,
    base: &str,
    message: &str,
    gitlinks: &[(String, String)],
) -> Result<Snapshot> {
    create_with(repo, base, message, gitlinks, true)
}

/// The snapshot, with `gitlinks` set in its tree; `reuse_base`: HEAD itself when the tree is
/// HEAD's.
pub fn create_with(
    repo: &LocalRepo,
    base: &str,
    message: &str,
    gitlinks: &[(String, String)],
    reuse_base: bool,
) -> Result<Snapshot> {
    let hint = "the local repository could not be snapshotted; nothing was changed in it";
    let tree = match crate::repo::worktree_tree::tree(repo, gitlinks) {
        Some(tree) => tree,
        None => tree_by_git_add(repo, base, gitlinks, hint)?,
    };
    finish(repo, base, message, tree, reuse_base, hint)
}

/// A copy of the index with the index's own mtime: git's racy-clean rule (an entry whose file
/// changed in the second the index was written is checked by content, not by its stat data)
/// needs it, or a same-size change made in that second would be missed.
fn copy_index(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    let modified = std::fs::metadata(from)?.modified()?;
    std::fs::copy(from, to)?;
    std::fs::File::options()
        .write(true)
        .open(to)?
        .set_modified(modified)
}

/// The tree through git itself: `git add -u` into a private copy of the index (git's filters,
/// such as git-lfs's, apply), then the tree of that index.
fn tree_by_git_add(
    repo: &LocalRepo,
    base: &str,
    gitlinks: &[(String, String)],
    hint: &str,
) -> Result<String> {
    let tmp = TempDir::new()?;
    let index = tmp.0.join("index");
    let real_index = repo.git_dir.join("index");
    let index_env = index.display().to_string();
    if real_index.exists() {
        copy_index(&real_index, &index)
            .map_err(|e| ToolError::remote(format!("cannot copy {}: {e}", real_index.display())))?;
    } else {
        run_git(
            repo.git()
                .env("GIT_INDEX_FILE", &index_env)
                .args(["read-tree", base]),
            "reading HEAD into the temporary index",
            "check that the repository is not corrupted (`git fsck`)",
        )?;
    }
    run_git(
        repo.git()
            .env("GIT_INDEX_FILE", &index_env)
            .env("LC_ALL", "C")
            .args(["add", "--update", "--", "."]),
        "adding the working-tree content of tracked files to the temporary index",
        hint,
    )
    .map_err(unreadable_tracked_file)?;
    match tree_in_process(repo, &index, gitlinks) {
        Some(tree) => Ok(tree),
        None => tree_by_cli(repo, &index_env, gitlinks, hint),
    }
}

/// The commit of `tree` (HEAD itself when `reuse_base` and nothing changed).
fn finish(
    repo: &LocalRepo,
    base: &str,
    message: &str,
    tree: String,
    reuse_base: bool,
    hint: &str,
) -> Result<Snapshot> {
    if reuse_base {
        let base_tree = git2::Oid::from_str(base)
            .ok()
            .and_then(|oid| repo.repo.find_commit(oid).ok())
            .map(|c| c.tree_id().to_string());
        if base_tree.as_deref() == Some(tree.as_str()) {
            return Ok(Snapshot {
                commit: base.to_string(),
                tree,
                base: base.to_string(),
            });
        }
    }
    // The same HEAD and tree as a snapshot made before: that commit again (an unchanged
    // re-sync then has nothing new to push; a dirty submodule keeps its snapshot's id).
    if let Some(commit) =
        crate::sync::last_sync::snapshot_made(&repo.repo, &repo.git_dir, base, &tree)
    {
        return Ok(Snapshot {
            commit,
            tree,
            base: base.to_string(),
        });
    }
    let commit = commit_in_process(repo, &tree, base, message).ok_or_else(|| {
        ToolError::remote("cannot write the snapshot commit into the local repository")
            .with_hint(hint)
    })?;
    crate::sync::last_sync::record_snapshot(&repo.git_dir, base, &tree, &commit);
    Ok(Snapshot {
        commit,
        tree,
        base: base.to_string(),
    })
}

/// Index files up to this size (about 40,000 entries) are turned into a tree in this process;
/// above it libgit2's reading of the index costs more than a `git write-tree` start.
const IN_PROCESS_INDEX_BYTES: u64 = 4 << 20;

/// The tree of the temporary index, with `gitlinks` set, written by libgit2 (no process start);
/// `None` when the index is large or libgit2 cannot read it (then git does it).
fn tree_in_process(
    repo: &LocalRepo,
    index: &std::path::Path,
    gitlinks: &[(String, String)],
) -> Option<String> {
    if std::fs::metadata(index).ok()?.len() > IN_PROCESS_INDEX_BYTES {
        return None;
    }
    // Every object the index names exists (git add just wrote or checked them): looking each
    // up again, as libgit2 does by default, costs a file lookup per entry.
    git2::opts::strict_object_creation(false);
    let mut idx = git2::Index::open(index).ok()?;
    for (path, commit) in gitlinks {
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: 0o160000,
            uid: 0,
            gid: 0,
            file_size: 0,
            id: git2::Oid::from_str(commit).ok()?,
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        };
        idx.add(&entry).ok()?;
    }
    idx.write_tree_to(&repo.repo)
        .ok()
        .map(|oid| oid.to_string())
}

/// [`tree_in_process`] by git: `update-index --cacheinfo` for the gitlinks, then `write-tree`.
fn tree_by_cli(
    repo: &LocalRepo,
    index_env: &str,
    gitlinks: &[(String, String)],
    hint: &str,
) -> Result<String> {
    if !gitlinks.is_empty() {
        let mut cmd = repo
            .git()
            .env("GIT_INDEX_FILE", index_env)
            .args(["update-index", "--add"]);
        for (path, commit) in gitlinks {
            cmd = cmd
                .arg("--cacheinfo")
                .arg(format!("160000,{commit},{path}"));
        }
        run_git(
            cmd,
            "recording the submodules' snapshots in the temporary index",
            hint,
        )?;
    }
    Ok(run_git(
        repo.git()
            .env("GIT_INDEX_FILE", index_env)
            .arg("write-tree"),
        "writing the snapshot tree",
        hint,
    )?
    .stdout_text()
    .trim()
    .to_string())
}

/// The snapshot commit, written by libgit2: the person's identity when git's configuration has
/// one, a neutral one otherwise (the commit is temporary). Never signed: nothing to prompt for.
fn commit_in_process(repo: &LocalRepo, tree: &str, base: &str, message: &str) -> Option<String> {
    let tree = repo.repo.find_tree(git2::Oid::from_str(tree).ok()?).ok()?;
    let parent = repo
        .repo
        .find_commit(git2::Oid::from_str(base).ok()?)
        .ok()?;
    let sig = repo
        .repo
        .signature()
        .or_else(|_| git2::Signature::now("slurm-tools", "slurm-tools@localhost"))
        .ok()?;
    repo.repo
        .commit(None, &sig, &sig, message, &tree, &[&parent])
        .ok()
        .map(|oid| oid.to_string())
}

/// git's `error: open("f"): Permission denied` while adding: say which tracked file, and what to
/// do, instead of only that git failed.
fn unreadable_tracked_file(e: ToolError) -> ToolError {
    let Some(line) = e.command.as_ref().and_then(|c| {
        c.stderr_tail
            .lines()
            .find_map(|l| l.strip_prefix("error: open(").map(str::to_string))
    }) else {
        return e;
    };
    let Some((file, why)) = line.rsplit_once("): ") else {
        return e;
    };
    let file = file.trim_matches('"').to_string();
    let mut out = ToolError::remote(format!(
        "cannot read the changed tracked file {file} ({why}): the snapshot needs its content"
    ))
    .with_hint(format!(
        "make it readable (`chmod u+r -- {file}`), or commit or restore it; nothing was changed in the repository"
    ));
    out.command = e.command;
    out
}

#[cfg(test)]
mod tests {
    use crate::repo::git::LocalRepo;
    use crate::testutil::git;
    use std::time::{Duration, UNIX_EPOCH};

    /// The racy-clean case through git (the path every repository with filters takes): a file
    /// put back with the same size and mtime (`cp -p`, `tar -x`, `rsync -t`) in the second its
    /// index was written is checked by content, as git does with the real index, because the
    /// private copy keeps the index's mtime.
    #[test]
    fn a_same_size_same_mtime_change_in_the_index_own_second_is_in_the_tree_git_makes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        // ctime is not compared: only mtime, size and the racy rule decide.
        git(d, &["config", "core.trustctime", "false"]);
        let file = d.join("a.txt");
        let set_mtime = |f: &std::path::Path, at| {
            std::fs::File::options()
                .write(true)
                .open(f)
                .unwrap()
                .set_modified(at)
                .unwrap()
        };
        // Written ten seconds ago, so git records it clean (not racy) when it adds it.
        std::fs::write(&file, "1111\n").unwrap();
        set_mtime(
            &file,
            std::time::SystemTime::now() - Duration::from_secs(10),
        );
        git(d, &["add", "a.txt"]);
        git(d, &["commit", "-q", "-m", "x"]);
        let repo = git2::Repository::open(d).unwrap();
        let head = repo.head().unwrap().target().unwrap().to_string();
        let entry = repo
            .index()
            .unwrap()
            .get_path(std::path::Path::new("a.txt"), 0)
            .unwrap();
        let recorded =
            UNIX_EPOCH + Duration::new(entry.mtime.seconds() as u64, entry.mtime.nanoseconds());
        // Put back with another content of the same size and the same mtime, in the second the
        // index was (last) written.
        std::fs::write(&file, "2222\n").unwrap();
        set_mtime(&file, recorded);
        set_mtime(&d.join(".git/index"), recorded);
        let local = LocalRepo {
            root: d.to_path_buf(),
            git_dir: repo.path().to_path_buf(),
            repo,
        };
        let tree = super::tree_by_git_add(&local, &head, &[], "hint").unwrap();
        let blob = git(d, &["cat-file", "-p", &format!("{tree}:a.txt")]);
        assert_eq!(blob.trim(), "2222");
    }
}
