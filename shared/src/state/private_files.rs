//! Files the tools keep for the person (the ledger, saved documents, submission records, manifest
//! copies, ssh config blocks): created private, written whole, trusted only when they are the
//! person's own.
//!
//! - Directories the tools create are 0700 and files 0600, whatever the umask (RHEL's 002 would
//!   otherwise make a ledger group-writable, and a saved document names the ssh options run on
//!   every refresh: security review 2026-12-05, finding 8).
//! - A rewrite goes to a temporary file in the same directory and is renamed over the old one, so a
//!   crash or a full disk leaves the old file or the new one, never half of either; an existing
//!   file keeps its mode.
//! - [`check_own`] is what a reader asks before it trusts a file as configuration.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Create `dir` (and missing parents) 0700; an existing directory is left as it is.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Create the tools' own directory `dir` 0700, and make it 0700 if an older version (or the
/// umask) left it open to others. Only for directories that are the tools' alone.
pub fn own_dir(dir: &Path) -> std::io::Result<()> {
    create_dir(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Open `path` for appending, creating it 0600.
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Replace `path` with `data` atomically: a new temporary file (O_EXCL, 0600) in the same
/// directory, synced, given the old file's mode (or `new_mode` for a new file), then renamed over
/// `path`. On any error the old file is untouched and the temporary file is removed.
pub fn write_atomic(path: &Path, data: &[u8], new_mode: u32) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mode = match std::fs::metadata(path) {
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => new_mode,
        Err(e) => return Err(e),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".slurm-tools-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o600))
        .tempfile_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Why a file may not be trusted as configuration, or `None` when it is the person's own: owned by
/// this uid, a regular file (not a symlink), and not writable by group or others.
pub fn check_own(path: &Path) -> Option<String> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot be read ({e})")),
    };
    if !m.file_type().is_file() {
        return Some("is not a regular file".into());
    }
    let me = our_uid();
    if m.uid() != me {
        return Some(format!("belongs to uid {}, not to you (uid {me})", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Some(format!(
            "is writable by others (mode {:o})",
            m.mode() & 0o7777
        ));
    }
    None
}

/// This process's effective uid, without libc: the owner of `/proc/self` (Linux), else the owner
/// of a file it creates (macOS and the BSDs have no `/proc`).
pub fn our_uid() -> u32 {
    uid_from(
        std::fs::metadata("/proc/self").ok().map(|m| m.uid()),
        || {
            tempfile::tempfile()
                .ok()
                .and_then(|f| f.metadata().ok())
                .map(|m| m.uid())
        },
    )
}

/// The uid from `/proc/self` when there is one, else from the probe; never a guess: with
/// neither, `u32::MAX` (no file is owned by it, so every ownership check refuses and says
/// which uid it found, rather than taking someone else's socket for ours).
pub fn uid_from(proc_self: Option<u32>, created_file: impl FnOnce() -> Option<u32>) -> u32 {
    proc_self.or_else(created_file).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_files_and_dirs_are_private_whatever_the_umask() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        own_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o775)).unwrap();
        own_dir(&d).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        let f = d.join("x");
        open_append(&f).unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        let g = d.join("y");
        write_atomic(&g, b"new", 0o600).unwrap();
        assert_eq!(std::fs::metadata(&g).unwrap().mode() & 0o777, 0o600);
        assert_eq!(check_own(&g), None);
    }

    #[test]
    fn a_rewrite_keeps_the_mode_and_leaves_no_temporary_file() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("config");
        std::fs::write(&f, b"old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&f, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
    }

    #[test]
    fn files_open_to_others_or_symlinks_are_not_trusted() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("doc.json");
        std::fs::write(&f, b"{}").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(check_own(&f).unwrap().contains("writable by others"));
        let l = t.path().join("link");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        assert!(check_own(&l).unwrap().contains("not a regular file"));
    }
}
