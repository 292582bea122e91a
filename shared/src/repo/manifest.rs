//! What the last untracked sync put into the remote checkout, so a re-sync sends only what
//! changed, deletes what was deleted locally, and the remote side can tell our files from
//! cluster-side ones (issue: the edit-sync-run loop).
//!
//! slurm-sync-untracked keeps three files in the remote clone's `.git/slurm-tools/`, written as
//! the last entries of its tar stream (so a broken stream leaves the previous, still true, set):
//! - `untracked.manifest`: a header line, then one line per file or symlink sent:
//!   `<kind><mode> <size> <mtime s>.<ns>\t<path>`, the path quoted the way git quotes it with
//!   `core.quotePath=false` (so the remote side compares it with `git status` output as text);
//! - `untracked.exclude`: the same paths as anchored, escaped gitignore patterns (the tracked
//!   sync adds them to `.git/info/exclude` only while it stashes cluster-side changes, so our own
//!   files are never stashed);
//! - `untracked.paths0`: the raw paths, NUL-separated (for `tar --null -T`, e.g. to copy them
//!   into a job's own tree).
//!
//! The local stat (size, mtime to the nanosecond, executable bit, kind) decides "unchanged";
//! what the remote side did to a file since is not looked at (a person who edits our copy on
//! the cluster gets it overwritten on the next change of the local file).

use std::collections::BTreeMap;

/// The remote directory (inside the clone's `.git`) that holds the files above.
pub const DIR: &str = ".git/slurm-tools";
pub const MANIFEST: &str = ".git/slurm-tools/untracked.manifest";
/// A tag written with each new manifest (before it, in the same stream): a machine that kept a
/// copy of the manifest it wrote knows the copy is the cluster's while the tags agree, and can
/// skip asking for it (`slurm-alloc exec --sync`).
pub const MANIFEST_ID: &str = ".git/slurm-tools/untracked.id";
pub const EXCLUDE: &str = ".git/slurm-tools/untracked.exclude";
pub const PATHS0: &str = ".git/slurm-tools/untracked.paths0";
pub const UNEXCLUDABLE: &str = ".git/slurm-tools/untracked.unexcludable";

const HEADER: &str = "# slurm-tools untracked manifest v1";

/// One file or symlink as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `f` (file) or `l` (symlink).
    pub kind: char,
    /// 644 or 755 for files (what the archive sends), 777 for symlinks.
    pub mode: u32,
    pub size: u64,
    pub mtime_s: i64,
    pub mtime_ns: u32,
}

/// The manifest: raw path bytes to what was sent, and the snapshot the sync belonged to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Which checkout wrote it ([`checkout_source`]): its stat says nothing about another
    /// checkout's files (two checkouts syncing into one clone).
    pub source: Option<String>,
    pub snapshot: Option<String>,
    pub entries: BTreeMap<Vec<u8>, Entry>,
}

impl Entry {
    /// The entry for a local file or symlink, as the archive would send it; `None` for anything
    /// else (those are skipped, never recorded).
    pub fn of(meta: &std::fs::Metadata) -> Option<Entry> {
        use std::os::unix::fs::MetadataExt;
        let ft = meta.file_type();
        let (kind, mode) = if ft.is_symlink() {
            ('l', 0o777)
        } else if ft.is_file() {
            (
                'f',
                if meta.mode() & 0o111 != 0 {
                    0o755
                } else {
                    0o644
                },
            )
        } else {
            return None;
        };
        Some(Entry {
            kind,
            mode,
            size: meta.len(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec().clamp(0, 999_999_999) as u32,
        })
    }
}

impl Manifest {
    /// The manifest's bytes (paths with bytes that are not UTF-8 stay as they are, as git prints
    /// them).
    pub fn render(&self) -> Vec<u8> {
        let mut s = HEADER.as_bytes().to_vec();
        // The snapshot last: the cluster side reads it as everything after `snapshot=`.
        if let Some(source) = &self.source {
            s.extend_from_slice(b" source=");
            s.extend_from_slice(source.as_bytes());
        }
        if let Some(snap) = &self.snapshot {
            s.extend_from_slice(b" snapshot=");
            s.extend_from_slice(snap.as_bytes());
        }
        s.push(b'\n');
        for (path, e) in &self.entries {
            s.extend_from_slice(
                format!(
                    "{}{:o} {} {}.{:09}\t",
                    e.kind, e.mode, e.size, e.mtime_s, e.mtime_ns
                )
                .as_bytes(),
            );
            s.extend_from_slice(&git_quote(path));
            s.push(b'\n');
        }
        s
    }

    /// Parse a manifest; `None` when the bytes are not one (then everything is sent again).
    pub fn parse(text: &[u8]) -> Option<Manifest> {
        let mut lines = text.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        let header = std::str::from_utf8(lines.next()?).ok()?;
        let rest = header.strip_prefix(HEADER)?;
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let mut m = Manifest {
            source: field("source="),
            snapshot: field("snapshot="),
            entries: BTreeMap::new(),
        };
        for line in lines {
            let tab = line.iter().position(|b| *b == b'\t')?;
            let (meta, quoted) = (std::str::from_utf8(&line[..tab]).ok()?, &line[tab + 1..]);
            let mut f = meta.split(' ');
            let km = f.next()?;
            let kind = km.chars().next().filter(|k| matches!(k, 'f' | 'l'))?;
            let mode = u32::from_str_radix(&km[1..], 8).ok()?;
            let size = f.next()?.parse().ok()?;
            let (s, ns) = f.next()?.split_once('.')?;
            let entry = Entry {
                kind,
                mode,
                size,
                mtime_s: s.parse().ok()?,
                mtime_ns: ns.parse().ok()?,
            };
            m.entries.insert(git_unquote(quoted)?, entry);
        }
        Some(m)
    }

    /// Anchored gitignore patterns matching exactly these paths (names with a newline cannot be
    /// written as a pattern and are left out: such a file may still be stashed).
    pub fn exclude_patterns(&self) -> Vec<u8> {
        let mut out = b"# slurm-tools: files the untracked sync put here\n".to_vec();
        for path in self.entries.keys() {
            if path.contains(&b'\n') {
                continue;
            }
            out.push(b'/');
            for &b in path.iter() {
                if matches!(b, b'\\' | b'*' | b'?' | b'[' | b'!' | b'#' | b' ') {
                    out.push(b'\\');
                }
                out.push(b);
            }
            out.push(b'\n');
        }
        out
    }

    /// A shell fragment (`set -- 'name' ...`, every name quoted once) naming our files that no
    /// gitignore pattern can name (a newline in the name): the tracked sync moves those aside
    /// while it stashes cluster-side changes, so they are not stashed either.
    pub fn unexcludable(&self) -> crate::Result<Vec<u8>> {
        let mut s = b"set --".to_vec();
        for path in self.entries.keys().filter(|p| p.contains(&b'\n')) {
            let Ok(name) = std::str::from_utf8(path) else {
                continue;
            };
            s.push(b' ');
            s.extend_from_slice(crate::remote::quote::quote(name)?.as_bytes());
        }
        s.push(b'\n');
        Ok(s)
    }

    /// The paths, each followed by NUL.
    pub fn paths0(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for path in self.entries.keys() {
            out.extend_from_slice(path);
            out.push(0);
        }
        out
    }
}

/// What a re-sync must do, from the manifest of the last sync and the local files now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// New or changed: sent.
    pub send: Vec<Vec<u8>>,
    /// Unchanged: not sent.
    pub unchanged: Vec<Vec<u8>>,
    /// In the manifest, gone locally: deleted remotely.
    pub delete: Vec<Vec<u8>>,
}

/// `source` is this checkout's ([`checkout_source`]): a file counts as unchanged only when the
/// previous manifest is this checkout's own and records the same stat (another checkout's file
/// of the same size and mtime can hold other bytes).
pub fn delta(previous: Option<&Manifest>, now: &BTreeMap<Vec<u8>, Entry>, source: &str) -> Delta {
    let mut d = Delta::default();
    let own = previous.filter(|p| p.source.as_deref() == Some(source));
    for (path, e) in now {
        match own.and_then(|p| p.entries.get(path)) {
            Some(old) if old == e => d.unchanged.push(path.clone()),
            _ => d.send.push(path.clone()),
        }
    }
    if let Some(p) = previous {
        d.delete = p
            .entries
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
    }
    d
}

/// Which checkout a manifest comes from: this machine (a random id kept once in the state
/// directory) and the checkout's path, hashed. Two clones or worktrees, here or on another
/// machine, have different sources.
pub fn checkout_source(root: &std::path::Path) -> String {
    let machine = crate::state::journal::state_dir()
        .map(|d| d.join("machine-id"))
        .and_then(|f| {
            if let Ok(id) = std::fs::read_to_string(&f) {
                return Some(id.trim().to_string());
            }
            std::fs::create_dir_all(f.parent()?).ok()?;
            let id = crate::state::journal::unique_tag("machine");
            // First writer wins; a process that lost the race reads the winner's id.
            let new = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&f)
                .and_then(|mut w| std::io::Write::write_all(&mut w, id.as_bytes()));
            match new {
                Ok(()) => Some(id),
                Err(_) => std::fs::read_to_string(&f)
                    .ok()
                    .map(|t| t.trim().to_string()),
            }
        })
        .unwrap_or_default();
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let key = format!("{machine}\0{}", root.display());
    git2::Oid::hash_object(git2::ObjectType::Blob, key.as_bytes())
        .map(|o| o.to_string()[..16].to_string())
        .unwrap_or_default()
}

/// A path as `git status --porcelain` prints it with `core.quotePath=false`: as is (bytes that
/// are not UTF-8 included), unless it has a `"`, a `\`, a control byte or a space; then in
/// double quotes with C escapes (the space itself stays).
pub fn git_quote(path: &[u8]) -> Vec<u8> {
    let needs = path
        .iter()
        .any(|&b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f || b == b' ');
    if !needs {
        return path.to_vec();
    }
    let mut out = Vec::with_capacity(path.len() + 2);
    out.push(b'"');
    for &b in path {
        match b {
            b'\x07' => out.extend_from_slice(b"\\a"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0b' => out.extend_from_slice(b"\\v"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
    out
}

/// The inverse of [`git_quote`].
pub fn git_unquote(text: &[u8]) -> Option<Vec<u8>> {
    let Some(inner) = text.strip_prefix(b"\"") else {
        return Some(text.to_vec());
    };
    let inner = inner.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let e = *inner.get(i + 1)?;
        i += 2;
        out.push(match e {
            b'a' => 7,
            b'b' => 8,
            b't' => b'\t',
            b'n' => b'\n',
            b'v' => 11,
            b'f' => 12,
            b'r' => b'\r',
            b'"' => b'"',
            b'\\' => b'\\',
            b'0'..=b'7' => {
                let digits = std::str::from_utf8(inner.get(i - 1..i + 2)?).ok()?;
                i += 2;
                u8::from_str_radix(digits, 8).ok()?
            }
            _ => return None,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: u64, s: i64) -> Entry {
        Entry {
            kind: 'f',
            mode: 0o644,
            size,
            mtime_s: s,
            mtime_ns: 5,
        }
    }

    #[test]
    fn quoting_matches_git_and_round_trips() {
        for (raw, quoted) in [
            (&b"plain/name.txt"[..], "plain/name.txt"),
            (b"sp ace", "\"sp ace\""),
            ("ünï".as_bytes(), "ünï"),
            (b"new\nline", "\"new\\nline\""),
            (b"tab\there", "\"tab\\there\""),
            (b"q\"uote", "\"q\\\"uote\""),
            (b"back\\slash", "\"back\\\\slash\""),
            (b"bell\x07\x01", "\"bell\\a\\001\""),
        ] {
            assert_eq!(git_quote(raw), quoted.as_bytes());
            assert_eq!(git_unquote(quoted.as_bytes()).unwrap(), raw);
        }
        // Bytes that are not UTF-8 stay raw, as git prints them with core.quotePath=false.
        assert_eq!(git_quote(b"raw-\xff\xfe"), b"raw-\xff\xfe");
        assert_eq!(git_unquote(b"raw-\xff").unwrap(), b"raw-\xff");
        assert_eq!(git_unquote(b"\"open"), None);
    }

    #[test]
    fn a_manifest_round_trips_and_a_foreign_file_is_not_one() {
        let mut m = Manifest {
            source: Some("0123abcd".into()),
            snapshot: Some("abc".into()),
            ..Default::default()
        };
        m.entries.insert(b"a b\nc".to_vec(), entry(3, 7));
        m.entries.insert(b"not-utf8-\xff".to_vec(), entry(9, 9));
        m.entries.insert(
            b"link".to_vec(),
            Entry {
                kind: 'l',
                mode: 0o777,
                size: 4,
                mtime_s: -1,
                mtime_ns: 0,
            },
        );
        let text = m.render();
        assert_eq!(Manifest::parse(&text), Some(m));
        assert_eq!(Manifest::parse(b"hello\n"), None);
        assert_eq!(Manifest::parse(b""), None);
    }

    #[test]
    fn the_delta_sends_new_and_changed_and_deletes_what_went() {
        let mut old = Manifest::default();
        old.entries.insert(b"same".to_vec(), entry(1, 1));
        old.entries.insert(b"changed".to_vec(), entry(1, 1));
        old.entries.insert(b"gone".to_vec(), entry(1, 1));
        let mut now = BTreeMap::new();
        now.insert(b"same".to_vec(), entry(1, 1));
        now.insert(b"changed".to_vec(), entry(1, 2));
        now.insert(b"new".to_vec(), entry(1, 1));
        old.source = Some("ours".into());
        let d = delta(Some(&old), &now, "ours");
        assert_eq!(d.send, [b"changed".to_vec(), b"new".to_vec()]);
        assert_eq!(d.unchanged, [b"same".to_vec()]);
        assert_eq!(d.delete, [b"gone".to_vec()]);
        let first = delta(None, &now, "ours");
        assert_eq!(first.send.len(), 3);
        assert!(first.delete.is_empty());
        // Another checkout's manifest (or one that names none): its stat proves nothing about
        // our files, so all are sent; what it has and we do not is still deleted.
        for other in [Some("theirs".to_string()), None] {
            old.source = other;
            let d = delta(Some(&old), &now, "ours");
            assert_eq!(d.send.len(), 3, "{:?}", old.source);
            assert!(d.unchanged.is_empty());
            assert_eq!(d.delete, [b"gone".to_vec()]);
        }
    }

    #[test]
    fn the_snapshot_stays_last_in_the_header_for_the_cluster_side() {
        let m = Manifest {
            source: Some("0123abcd".into()),
            snapshot: Some("f00d".into()),
            ..Default::default()
        };
        let text = String::from_utf8(m.render()).unwrap();
        let first = text.lines().next().unwrap();
        // The cluster side reads `sed -n '1s/.*snapshot=//p'`.
        assert_eq!(first.rsplit_once("snapshot=").unwrap().1, "f00d");
        // A header an older version wrote (no source) still parses.
        let old = Manifest::parse(format!("{HEADER} snapshot=f00d\n").as_bytes()).unwrap();
        assert_eq!((old.source, old.snapshot.as_deref()), (None, Some("f00d")));
    }

    #[test]
    fn each_checkout_has_its_own_source_and_keeps_it() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assert_eq!(checkout_source(a.path()), checkout_source(a.path()));
        assert_ne!(checkout_source(a.path()), checkout_source(b.path()));
        assert_eq!(checkout_source(a.path()).len(), 16);
    }

    #[test]
    fn exclude_patterns_are_anchored_and_escaped() {
        let mut m = Manifest::default();
        for p in [&b"a*b"[..], b"#x", b"dir/f [1].txt", b"nl\nname", b"!bang"] {
            m.entries.insert(p.to_vec(), entry(1, 1));
        }
        let text = String::from_utf8(m.exclude_patterns()).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines, ["/\\!bang", "/\\#x", "/a\\*b", "/dir/f\\ \\[1].txt"]);
    }
}
