//! Private temporary directories (mode 0700, made by `tempfile`: a random name created with
//! O_EXCL semantics) named `<prefix>-<pid>-<random>` in the system's temp directory. A tool killed
//! with SIGKILL cannot remove its own, so each new one first removes those of the same prefix
//! whose process is gone (checked in /proc; without /proc nothing is removed). That sweep is
//! ours: tempfile removes a directory only when its owner drops it, which a killed process never
//! does.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Create a fresh private directory for this process, after removing dead processes' ones.
pub fn create(prefix: &str) -> std::io::Result<PathBuf> {
    let tmp = std::env::temp_dir();
    remove_stale(&tmp, prefix);
    let dir = tempfile::Builder::new()
        .prefix(&format!("{prefix}-{}-", std::process::id()))
        .tempdir_in(&tmp)?
        .keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Remove `<prefix>-<pid>-*` directories in `tmp` whose process no longer runs and that are
/// ours (same owner). Best effort: what cannot be removed stays.
fn remove_stale(tmp: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let lead = format!("{prefix}-");
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&lead)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().filter(|p| p.parse::<u32>().is_ok()) else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        let ours = me
            .as_ref()
            .is_ok_and(|uid| std::os::unix::fs::MetadataExt::uid(&meta) == *uid);
        if meta.is_dir() && ours && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dead_processs_directory_is_removed_and_a_live_ones_is_kept() {
        let prefix = format!("slurm-tools-tempdir-test-{}", std::process::id());
        let tmp = std::env::temp_dir();
        // No process has pid 4294967; ours is alive.
        let dead = tmp.join(format!("{prefix}-4294967-1"));
        std::fs::create_dir_all(&dead).unwrap();
        let mine = super::create(&prefix).unwrap();
        assert!(!dead.exists());
        let again = super::create(&prefix).unwrap();
        assert!(mine.exists() && again.exists());
        for d in [mine, again] {
            std::fs::remove_dir_all(d).unwrap();
        }
    }
}
