//! Private temporary directories (mode 0700, made by `tempfile`: a random name created with
//! O_EXCL semantics) named `<prefix>-<pid>-<random>` in the system's temp directory. A tool killed
//! with SIGKILL cannot remove its own, so each new one first removes those of the same prefix
//! whose process is gone (checked in /proc on Linux; with `kill -0` where there is no /proc, as
//! on macOS). That sweep is
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
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    let lead = format!("{prefix}-");
    let me: std::io::Result<u32> = Ok(crate::remote::control_socket::Platform::this_machine().uid);
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
        if meta.is_dir() && ours && !alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether process `pid` runs: /proc on Linux, else `kill -0` (macOS and the BSDs have no
/// /proc). In doubt, alive: a live run's directory is never removed.
pub(crate) fn alive(pid: &str) -> bool {
    alive_with(pid, Path::new("/proc/self").exists())
}

fn alive_with(pid: &str, proc_present: bool) -> bool {
    if proc_present {
        return Path::new("/proc").join(pid).exists();
    }
    std::process::Command::new("kill")
        .args(["-0", pid])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_process_is_known_alive_or_dead_with_and_without_proc() {
        let me = std::process::id().to_string();
        for proc_present in [true, false] {
            assert!(super::alive_with(&me, proc_present), "{proc_present}");
            assert!(
                !super::alive_with("4294967", proc_present),
                "{proc_present}"
            );
        }
    }

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
