//! The submission journal: how a rerun of an interrupted slurm-submit finds the job it already
//! submitted instead of submitting a second one (docs/reliability.md 9, "Nothing is done twice").
//!
//! Before it sends anything, slurm-submit records the submit tag it is about to use under a key
//! derived from its input document. The record is removed once the output document is written.
//! A run that finds a record for its input is the rerun of one that never told anyone what it
//! did (killed, interrupted, its connection lost), so it takes the recorded tag; the remote
//! script is idempotent per tag (it looks for a job with that tag before submitting), so the
//! rerun reports the job Slurm already has. A run on the same input *after* a completed one finds
//! no record and submits anew, as a rerun of a finished step should.
//!
//! Records live in `$SLURM_TOOLS_STATE_DIR`, else `$XDG_STATE_HOME/slurm-tools`, else
//! `~/.local/state/slurm-tools`, under `submit/`, one small file each; records older than
//! [`MAX_AGE`] are removed when a new one is written.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Records this old are from runs nobody will rerun.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 86_400);

/// Where the tools keep local state.
pub fn state_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env("SLURM_TOOLS_STATE_DIR")
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("slurm-tools")))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/slurm-tools")))
}

/// One submission in flight.
#[derive(Debug)]
pub struct Entry {
    path: PathBuf,
    /// The tag to submit with: the recorded one when resumed, else the fresh one.
    pub tag: String,
    /// True when an earlier run on the same input left this record.
    pub resumed: bool,
}

/// The record's file name for this input: the SHA-1 of `key` (as a git blob), hex.
fn name_for(key: &[u8]) -> std::io::Result<String> {
    git2::Oid::hash_object(git2::ObjectType::Blob, key)
        .map(|o| o.to_string())
        .map_err(std::io::Error::other)
}

/// Find the record for the input `key`: the recorded tag (resumed) or `fresh()` (not yet
/// recorded: call [`Entry::record`] before sending anything). An error means the state directory
/// cannot be read; the caller decides how loud to be.
pub fn begin(dir: &Path, key: &[u8], fresh: impl FnOnce() -> String) -> std::io::Result<Entry> {
    let path = dir.join("submit").join(name_for(key)?);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if let Some(tag) = text.lines().next().map(str::trim).filter(|t| valid_tag(t)) {
                return Ok(Entry {
                    path,
                    tag: tag.to_string(),
                    resumed: true,
                });
            }
            // Not a tag of ours (a torn write, an edit): start over with a fresh one.
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(Entry {
        path,
        tag: fresh(),
        resumed: false,
    })
}

impl Entry {
    /// Write the record, and `input` beside it (the document to rerun on when the run that
    /// made the record was part of a pipeline and its input was never saved). A resumed entry
    /// has both already. Call before anything is sent.
    pub fn record(&self, input: &[u8]) -> std::io::Result<()> {
        if self.resumed {
            return Ok(());
        }
        let dir = self.path.parent().expect("a record is in submit/");
        if let Some(state) = dir.parent() {
            crate::state::private_files::own_dir(state)?;
        }
        crate::state::private_files::own_dir(dir)?;
        prune(dir);
        write_aside(&self.input_path(), input)?;
        write_aside(&self.path, format!("{}\n", self.tag).as_bytes())
    }

    /// The output is written: nobody needs to resume this submission.
    pub fn finish(self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.input_path());
    }

    /// The saved input document: rerunning on it resumes this submission.
    pub fn input_path(&self) -> PathBuf {
        self.path.with_extension("json")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Write then rename, so a reader never sees half a file (0600).
fn write_aside(path: &Path, data: &[u8]) -> std::io::Result<()> {
    crate::state::private_files::write_atomic(path, data, 0o600)
}

/// True the first time this machine's tools see `key` (a warning about a state that has not
/// changed is said once, not on every run), remembered as an empty file named after its hash in
/// `<state dir>/said/`. Without a state directory, always true.
pub fn first_time(key: &str) -> bool {
    let Some(dir) = state_dir().map(|d| d.join("said")) else {
        return true;
    };
    let Ok(name) = name_for(key.as_bytes()) else {
        return true;
    };
    let path = dir.join(name);
    if path.exists() {
        return false;
    }
    let _ = crate::state::private_files::own_dir(&dir)
        .and_then(|()| crate::state::private_files::write_atomic(&path, b"", 0o600));
    true
}

/// Tags are ours (`slurm-tools-<hex>`); anything else in a record is not trusted into a script.
fn valid_tag(t: &str) -> bool {
    t.strip_prefix("slurm-tools-").is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > MAX_AGE);
        if old {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// `<prefix>-<16 hex digits>` from the system's random source: a tag no other run has, for
/// Slurm's `--comment` (the job id is learned by it) and the names of a run's files.
pub fn unique_tag(prefix: &str) -> String {
    let mut bytes = [0u8; 8];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    if ok.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        bytes = (t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32).to_le_bytes();
    }
    format!(
        "{prefix}-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "journal-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn interrupted_run_is_resumed_with_its_tag_and_finished_run_is_not() {
        let d = tmp();
        let first = begin(&d, b"doc", || "slurm-tools-aa".into()).unwrap();
        assert!(!first.resumed);
        // Not recorded yet (nothing sent): a rerun starts afresh.
        assert!(
            !begin(&d, b"doc", || "slurm-tools-00".into())
                .unwrap()
                .resumed
        );
        first.record(b"{}").unwrap();
        assert!(first.input_path().exists());
        // Killed before finish: the record stays and the rerun gets the same tag.
        let again = begin(&d, b"doc", || "slurm-tools-bb".into()).unwrap();
        assert!(again.resumed);
        assert_eq!(again.tag, "slurm-tools-aa");
        // Another input is another submission.
        let other = begin(&d, b"other doc", || "slurm-tools-cc".into()).unwrap();
        assert!(!other.resumed);
        let input = again.input_path();
        again.finish();
        assert!(!input.exists());
        let after = begin(&d, b"doc", || "slurm-tools-dd".into()).unwrap();
        assert!(!after.resumed);
        assert_eq!(after.tag, "slurm-tools-dd");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_record_that_is_not_a_tag_is_not_trusted() {
        let d = tmp();
        let e = begin(&d, b"doc", || "slurm-tools-aa".into()).unwrap();
        e.record(b"{}").unwrap();
        std::fs::write(e.path(), "slurm-tools-$(touch x)\n").unwrap();
        let again = begin(&d, b"doc", || "slurm-tools-bb".into()).unwrap();
        assert!(!again.resumed);
        assert_eq!(again.tag, "slurm-tools-bb");
        let _ = std::fs::remove_dir_all(&d);
    }
}
