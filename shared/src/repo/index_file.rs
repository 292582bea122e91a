//! git's index file, read directly (versions 2-4, SHA-1; git's
//! Documentation/gitformat-index.txt): the entries with their cached stat data, and the root of
//! the cache tree. A few milliseconds for 100,000 entries, where libgit2's reading costs more
//! than `git status` itself. Read-only.

/// One index entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: Vec<u8>,
    pub mode: u32,
    pub oid: [u8; 20],
    pub ctime: (u32, u32),
    pub mtime: (u32, u32),
    pub dev: u32,
    pub ino: u32,
    pub uid: u32,
    pub gid: u32,
    /// The file size, truncated to 32 bits as git stores it.
    pub size: u32,
    /// The merge stage (0 unless the entry is a conflict).
    pub stage: u16,
    pub intent_to_add: bool,
    pub skip_worktree: bool,
}

/// The parsed index.
#[derive(Debug, Default)]
pub struct Index {
    pub entries: Vec<Entry>,
    /// The tree the whole index makes, when the cache tree says it is still valid.
    pub root_tree: Option<[u8; 20]>,
    /// Extensions that change what the entries mean (a split index's `link`, a sparse index's
    /// `sdir`): an index with one of these is not the whole story.
    pub incomplete: bool,
}

const INTENT_TO_ADD: u16 = 1 << 13;
const SKIP_WORKTREE: u16 = 1 << 14;
const EXTENDED: u16 = 0x4000;
pub const GITLINK: u32 = 0o160000;

/// Parse an index file; `None` for a format this does not know.
pub fn parse(b: &[u8]) -> Option<Index> {
    let be16 = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
    };
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    if b.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut index = Index {
        entries: Vec::with_capacity(count),
        ..Index::default()
    };
    let mut at = 12;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        let flags = be16(at + 60)?;
        let mut ext = 0u16;
        at += 62;
        if version >= 3 && flags & EXTENDED != 0 {
            ext = be16(at)?;
            at += 2;
        }
        let path: Vec<u8> = if version == 4 {
            // A varint of bytes to drop from the previous path, then a NUL-terminated suffix.
            let mut strip: usize = 0;
            loop {
                let byte = *b.get(at)?;
                at += 1;
                strip = (strip << 7) | usize::from(byte & 0x7f);
                if byte & 0x80 == 0 {
                    break;
                }
                strip += 1;
            }
            let end = at + b.get(at..)?.iter().position(|c| *c == 0)?;
            let mut p = prev.get(..prev.len().checked_sub(strip)?)?.to_vec();
            p.extend_from_slice(&b[at..end]);
            at = end + 1;
            p
        } else {
            let end = at + b.get(at..)?.iter().position(|c| *c == 0)?;
            let p = b[at..end].to_vec();
            // Entries are NUL-padded to a multiple of 8 bytes.
            let len = end - start;
            at = start + (len + 8) / 8 * 8;
            p
        };
        index.entries.push(Entry {
            ctime: (be32(start)?, be32(start + 4)?),
            mtime: (be32(start + 8)?, be32(start + 12)?),
            dev: be32(start + 16)?,
            ino: be32(start + 20)?,
            mode: be32(start + 24)?,
            uid: be32(start + 28)?,
            gid: be32(start + 32)?,
            size: be32(start + 36)?,
            oid: b.get(start + 40..start + 60)?.try_into().ok()?,
            stage: (flags >> 12) & 3,
            intent_to_add: ext & INTENT_TO_ADD != 0,
            skip_worktree: ext & SKIP_WORKTREE != 0,
            path: path.clone(),
        });
        prev = path;
    }
    // Extensions, up to the trailing 20-byte checksum.
    let end = b.len().checked_sub(20)?;
    while at + 8 <= end {
        let sig = b.get(at..at + 4)?;
        let size = be32(at + 4)? as usize;
        let data = b.get(at + 8..at + 8 + size)?;
        match sig {
            b"TREE" => index.root_tree = cache_tree_root(data),
            b"link" | b"sdir" => index.incomplete = true,
            _ => {}
        }
        at += 8 + size;
    }
    Some(index)
}

/// The root record of a TREE extension: `"" NUL <entries> SP <subtrees> LF <oid>`, the oid only
/// when the entry count is not -1 (invalid).
fn cache_tree_root(d: &[u8]) -> Option<[u8; 20]> {
    let nul = d.iter().position(|c| *c == 0)?;
    if nul != 0 {
        return None;
    }
    let lf = d.iter().position(|c| *c == b'\n')?;
    let counts = std::str::from_utf8(d.get(1..lf)?).ok()?;
    let entries: i64 = counts.split(' ').next()?.parse().ok()?;
    if entries < 0 {
        return None;
    }
    d.get(lf + 1..lf + 21)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::git;
    use std::process::Command;

    #[test]
    fn entries_stat_data_and_the_cache_tree_root_match_gits() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q"]);
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("a.txt"), "a\n").unwrap();
        std::fs::write(d.join("sub/b.txt"), "bb\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "-m", "x"]);
        for version in ["2", "3", "4"] {
            git(d, &["update-index", "--index-version", version]);
            git(d, &["write-tree"]);
            let idx = parse(&std::fs::read(d.join(".git/index")).unwrap()).unwrap();
            let names: Vec<&[u8]> = idx.entries.iter().map(|e| e.path.as_slice()).collect();
            assert_eq!(names, [b"a.txt".as_slice(), b"sub/b.txt"], "v{version}");
            let meta = std::fs::metadata(d.join("sub/b.txt")).unwrap();
            use std::os::unix::fs::MetadataExt;
            let e = &idx.entries[1];
            assert_eq!(e.size as u64, meta.size());
            assert_eq!(e.mtime.0 as i64, meta.mtime());
            assert_eq!(e.ino as u64, meta.ino() & 0xffff_ffff);
            assert_eq!(e.mode, 0o100644);
            let tree = Command::new("git")
                .arg("-C")
                .arg(d)
                .args(["rev-parse", "HEAD^{tree}"])
                .output()
                .unwrap();
            let hex: String = idx
                .root_tree
                .expect("a valid cache tree after write-tree")
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect();
            assert_eq!(hex, String::from_utf8_lossy(&tree.stdout).trim());
        }
        // Staging a change invalidates the root.
        std::fs::write(d.join("a.txt"), "changed\n").unwrap();
        git(d, &["add", "a.txt"]);
        let idx = parse(&std::fs::read(d.join(".git/index")).unwrap()).unwrap();
        assert!(idx.root_tree.is_none());
        assert!(!idx.incomplete);
    }
}
