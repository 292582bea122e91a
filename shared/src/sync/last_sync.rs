//! What this machine last made and synced, so an unchanged re-sync rebuilds nothing and pushes
//! nothing (issue 41): the snapshot commits made before, by (HEAD, tree), reused when the working
//! tree is what it was (a dirty submodule keeps its snapshot's commit id, and with it its
//! parent's tree); and the snapshot the cluster's clone was last made equal to, per cluster,
//! clone and checkout, so the next sync of that same snapshot only confirms the clone is as it
//! was. Both live in the state directory (never in the repository); both are hints: each is
//! checked before it is used (the commit must exist with that parent and tree; the clone is
//! asked), and anything unreadable counts as "nothing recorded".

use std::path::{Path, PathBuf};

/// How many snapshots one repository keeps on record.
const KEEP: usize = 64;

fn key(parts: &[&str]) -> String {
    git2::Oid::hash_object(git2::ObjectType::Blob, parts.join("\0").as_bytes())
        .map(|o| o.to_string()[..20].to_string())
        .unwrap_or_default()
}

fn file(dir: &str, parts: &[&str]) -> Option<PathBuf> {
    let k = key(parts);
    (!k.is_empty()).then(|| crate::state::journal::state_dir().map(|d| d.join(dir).join(k)))?
}

fn canonical(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// A snapshot commit made before in the repository at `git_dir` with parent `base` and `tree`,
/// if one is on record and still in the repository as such.
pub fn snapshot_made(
    repo: &git2::Repository,
    git_dir: &Path,
    base: &str,
    tree: &str,
) -> Option<String> {
    let f = file("snapshots", &[&canonical(git_dir)])?;
    let text = std::fs::read_to_string(f).ok()?;
    let commit = text.lines().rev().find_map(|l| {
        let mut w = l.split(' ');
        (w.next()? == base && w.next()? == tree).then(|| w.next().map(str::to_string))?
    })?;
    let c = repo.find_commit(git2::Oid::from_str(&commit).ok()?).ok()?;
    let parent_ok = c.parent_ids().map(|p| p.to_string()).eq([base.to_string()]);
    (parent_ok && c.tree_id().to_string() == tree).then_some(commit)
}

/// Record that `commit` is the snapshot of (`base`, `tree`) in the repository at `git_dir`.
pub fn record_snapshot(git_dir: &Path, base: &str, tree: &str, commit: &str) {
    let Some(f) = file("snapshots", &[&canonical(git_dir)]) else {
        return;
    };
    let mut lines: Vec<String> = std::fs::read_to_string(&f)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    lines.push(format!("{base} {tree} {commit}"));
    let from = lines.len().saturating_sub(KEEP);
    write(&f, &(lines[from..].join("\n") + "\n"));
}

/// The snapshot last synced into the clone `repo_path` on `host` from the checkout `source`.
pub fn synced(host: &str, repo_path: &str, source: &str) -> Option<String> {
    let f = file("synced", &[host, repo_path, source])?;
    let text = std::fs::read_to_string(f).ok()?;
    let c = text.trim();
    (c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit())).then(|| c.to_string())
}

/// Record that the clone `repo_path` on `host` is now at `commit`, synced from `source`.
pub fn record_synced(host: &str, repo_path: &str, source: &str, commit: &str) {
    if let Some(f) = file("synced", &[host, repo_path, source]) {
        write(&f, &format!("{commit}\n"));
    }
}

/// Written aside and renamed; a failure only costs the next sync its shortcut.
fn write(f: &Path, text: &str) {
    if let Some(dir) = f.parent() {
        if crate::state::private_files::own_dir(dir).is_err() {
            return;
        }
    }
    let _ = crate::state::private_files::write_atomic(f, text.as_bytes(), 0o600);
}
