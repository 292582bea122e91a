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

/// What the clone was last made equal to: the snapshot, and each checked-out submodule's path
/// and commit (none on record when an older version wrote the record).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Synced {
    pub commit: String,
    #[serde(default)]
    pub modules: Option<Vec<(String, String)>>,
}

fn is_commit_id(c: &str) -> bool {
    (c.len() == 40 || c.len() == 64) && c.bytes().all(|b| b.is_ascii_hexdigit())
}

/// What was last synced into the clone `repo_path` on `host` from the checkout `source`.
pub fn synced(host: &str, repo_path: &str, source: &str) -> Option<Synced> {
    let f = file("synced", &[host, repo_path, source])?;
    parse_synced(&std::fs::read_to_string(f).ok()?)
}

fn parse_synced(text: &str) -> Option<Synced> {
    let text = text.trim();
    // An older version's record: the commit alone.
    if is_commit_id(text) {
        return Some(Synced {
            commit: text.to_string(),
            modules: None,
        });
    }
    let record: Synced = serde_json::from_str(text).ok()?;
    is_commit_id(&record.commit).then_some(record)
}

/// Record that the clone `repo_path` on `host` is now at `synced`, from `source` (and that this
/// machine synced into that clone).
pub fn record_synced(host: &str, repo_path: &str, source: &str, synced: &Synced) {
    if let (Some(f), Ok(text)) = (
        file("synced", &[host, repo_path, source]),
        serde_json::to_string(synced),
    ) {
        write(&f, &format!("{text}\n"));
    }
    if let Some(f) = file("clones", &[host, repo_path]) {
        write(&f, &format!("{}\n", synced.commit));
    }
}

/// Whether any checkout on this machine synced into the clone `repo_path` on `host` (the
/// record is a hint: a clone can also be made from another machine, or removed since).
pub fn clone_synced_before(host: &str, repo_path: &str) -> bool {
    file("clones", &[host, repo_path]).is_some_and(|f| f.exists())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_an_older_versions_commit_alone_still_counts() {
        let c = "0123456789abcdef0123456789abcdef01234567";
        let rec = Synced {
            commit: c.into(),
            modules: Some(vec![("a b/c\nd".into(), c.into())]),
        };
        let text = serde_json::to_string(&rec).unwrap();
        assert_eq!(parse_synced(&format!("{text}\n")), Some(rec));
        let old = Synced {
            commit: c.into(),
            modules: None,
        };
        assert_eq!(parse_synced(&format!("{c}\n")), Some(old));
        for bad in ["", "not a record", "{\"commit\": \"xyz\"}", &c[1..]] {
            assert_eq!(parse_synced(bad), None, "{bad}");
        }
    }
}
