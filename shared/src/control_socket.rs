//! Checks on the ControlMaster socket before any ssh uses it (RELIABILITY.md promise 6).
//!
//! ssh fails with a bare exit 255 when the socket path is too long, and happily talks to a
//! socket someone else put there. So before ssh runs: the expanded path fits (a master binds
//! `<path>.<16 random chars>` first, so about 90 bytes on Linux, verified with OpenSSH 9.2), its
//! directory belongs to us or root and is not writable by others (unless sticky, like /tmp), and
//! an existing socket is a socket, not a symlink, and ours.

use crate::error::{ErrorKind, Result, ToolError};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// The longest expanded ControlPath a master can listen on (Linux `sun_path` is 108 bytes, minus
/// the 17-byte temporary suffix OpenSSH adds).
pub const MAX_CONTROL_PATH: usize = 90;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketState {
    Absent,
    /// A socket file exists (the master behind it may or may not be alive).
    Present,
}

fn our_uid() -> u32 {
    // The owner of /proc/self is the process's effective uid: no libc call needed.
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0)
}

fn refuse(msg: String, hint: &str) -> ToolError {
    ToolError::field(ErrorKind::BadInput, "control_path", msg).with_hint(hint.to_string())
}

/// Check an expanded control path. Creates its directory (mode 700) when missing.
pub fn check(expanded: &str) -> Result<SocketState> {
    const FIX: &str = "set `control_path` in the job document to a short path in a directory only you can write, e.g. /tmp/ssh-%C or ~/.ssh/cm-%C";
    if expanded.len() > MAX_CONTROL_PATH {
        return Err(refuse(
            format!(
                "the ControlMaster socket path {expanded:?} is {} bytes long; ssh can only use paths of at most {MAX_CONTROL_PATH} bytes (it would fail with exit 255)",
                expanded.len()
            ),
            FIX,
        ));
    }
    let path = Path::new(expanded);
    let me = our_uid();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(dir) {
            Err(_) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    refuse(
                        format!(
                            "cannot create the directory {} for the ControlMaster socket: {e}",
                            dir.display()
                        ),
                        FIX,
                    )
                })?;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            }
            Ok(m) => {
                let m = if m.file_type().is_symlink() {
                    std::fs::metadata(dir)
                        .map_err(|e| refuse(format!("{}: {e}", dir.display()), FIX))?
                } else {
                    m
                };
                if !m.is_dir() {
                    return Err(refuse(
                        format!(
                            "{} (the socket's directory) is not a directory",
                            dir.display()
                        ),
                        FIX,
                    ));
                }
                if m.uid() != me && m.uid() != 0 {
                    return Err(refuse(
                        format!("the directory {} of the ControlMaster socket belongs to uid {}, not to you (uid {me}); a socket there could be someone else's", dir.display(), m.uid()),
                        FIX,
                    ));
                }
                let mode = m.mode();
                let sticky = mode & 0o1000 != 0;
                if mode & 0o022 != 0 && !sticky {
                    return Err(refuse(
                        format!("the directory {} of the ControlMaster socket is writable by others (mode {:o}); anyone could replace the socket", dir.display(), mode & 0o7777),
                        FIX,
                    ));
                }
            }
        }
    }
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(SocketState::Absent),
        Ok(m) if m.file_type().is_symlink() => Err(refuse(
            format!("the ControlMaster socket path {expanded} is a symbolic link; refusing to follow it"),
            "remove the link (it was not made by ssh), or choose another `control_path`",
        )),
        Ok(m) if !m.file_type().is_socket() => Err(refuse(
            format!("{expanded} exists and is not a socket"),
            "remove that file, or choose another `control_path`",
        )),
        Ok(m) if m.uid() != me => Err(refuse(
            format!("the ControlMaster socket {expanded} belongs to uid {}, not to you (uid {me})", m.uid()),
            FIX,
        )),
        Ok(_) => Ok(SocketState::Present),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_long_is_refused_with_the_length() {
        let p = format!("/tmp/{}", "x".repeat(100));
        let e = check(&p).unwrap_err();
        assert!(e.message.contains("105 bytes"), "{}", e.message);
        assert_eq!(e.field.as_deref(), Some("control_path"));
    }

    #[test]
    fn symlink_and_plain_file_are_refused() {
        let dir = std::env::temp_dir().join(format!("cs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = dir.join("l");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        assert!(check(link.to_str().unwrap())
            .unwrap_err()
            .message
            .contains("symbolic link"));
        let file = dir.join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(check(file.to_str().unwrap())
            .unwrap_err()
            .message
            .contains("not a socket"));
        assert_eq!(
            check(dir.join("absent").to_str().unwrap()).unwrap(),
            SocketState::Absent
        );
        let open = dir.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check(open.join("s").to_str().unwrap())
            .unwrap_err()
            .message
            .contains("writable by others"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
