//! Checks on the ControlMaster socket before any ssh uses it (docs/reliability.md promise 6).
//!
//! ssh fails with a bare exit 255 when the socket path is too long, and happily talks to a
//! socket someone else put there. So before ssh runs: the expanded path fits (a master binds
//! `<path>.<16 random chars>` first, so about 90 bytes on Linux, verified with OpenSSH 9.2), its
//! directory belongs to us or root and is not writable by others (unless sticky, like /tmp), and
//! an existing socket is a socket, not a symlink, and ours.
//!
//! Portable to macOS: the uid comes from the OS (the owner of `/proc/self` on Linux, else of a
//! file this process just created: macOS has no `/proc`), and the length limit follows the
//! platform's `sun_path` (104 bytes on macOS and the BSDs, 108 on Linux). Both are injectable
//! ([`Platform`]) so the other platforms' paths are unit-tested here.

use crate::contract::error::{ErrorKind, Result, ToolError};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// The size of `sockaddr_un.sun_path`: 104 bytes on macOS and the BSDs, 108 on Linux.
pub const SUN_PATH: usize = if cfg!(any(
    target_os = "macos",
    target_os = "ios",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd",
    target_os = "dragonfly"
)) {
    104
} else {
    108
};

/// The longest expanded ControlPath a master can listen on with a `sun_path` of `sun_path`
/// bytes: minus the NUL and the `.<16 random chars>` suffix OpenSSH adds while it binds.
pub const fn max_control_path(sun_path: usize) -> usize {
    sun_path - 18
}

/// This platform's limit: 90 bytes on Linux, 86 on macOS.
pub const MAX_CONTROL_PATH: usize = max_control_path(SUN_PATH);

/// What the checks take from the operating system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    /// The effective uid of this process.
    pub uid: u32,
    pub max_control_path: usize,
}

impl Platform {
    pub fn this_machine() -> Platform {
        Platform {
            uid: crate::state::private_files::our_uid(),
            max_control_path: MAX_CONTROL_PATH,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketState {
    Absent,
    /// A socket file exists (the master behind it may or may not be alive).
    Present,
}

fn refuse(msg: String, hint: &str) -> ToolError {
    ToolError::field(ErrorKind::BadInput, "control_path", msg).with_hint(hint.to_string())
}

/// Check an expanded control path. Creates its directory (mode 700) when missing.
pub fn check(expanded: &str) -> Result<SocketState> {
    check_on(expanded, &Platform::this_machine())
}

/// [`check`] with the platform's facts given (tests of other platforms).
pub fn check_on(expanded: &str, platform: &Platform) -> Result<SocketState> {
    const FIX: &str = "set `control_path` in the job document to a short path in a directory only you can write, e.g. ~/.ssh/slurm-tools/%C (the default)";
    let max = platform.max_control_path;
    if expanded.len() > max {
        return Err(refuse(
            format!(
                "the ControlMaster socket path {expanded:?} is {} bytes long; ssh can only use paths of at most {max} bytes here (it would fail with exit 255)",
                expanded.len()
            ),
            FIX,
        ));
    }
    let path = Path::new(expanded);
    let me = platform.uid;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(dir) {
            Err(_) => {
                crate::state::private_files::create_dir(dir).map_err(|e| {
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
    fn the_uid_comes_from_the_os_without_proc() {
        // Linux: /proc/self's owner. macOS: no /proc, the owner of a file it created.
        use crate::state::private_files::uid_from;
        assert_eq!(uid_from(Some(1000), || Some(7)), 1000);
        assert_eq!(uid_from(None, || Some(501)), 501);
        assert_eq!(uid_from(None, || None), u32::MAX);
        // The probe this platform uses agrees with /proc where both exist.
        let probed = tempfile::tempfile().unwrap().metadata().unwrap().uid();
        if let Ok(m) = std::fs::metadata("/proc/self") {
            assert_eq!(m.uid(), probed);
        }
        assert_eq!(Platform::this_machine().uid, probed);
    }

    #[test]
    fn the_length_limit_follows_the_platforms_sun_path() {
        assert_eq!(max_control_path(108), 90);
        assert_eq!(max_control_path(104), 86);
        let mac = Platform {
            uid: 501,
            max_control_path: max_control_path(104),
        };
        let p87 = format!("/tmp/{}", "x".repeat(82));
        assert_eq!(p87.len(), 87);
        let e = check_on(&p87, &mac).unwrap_err();
        assert!(e.message.contains("at most 86 bytes"), "{}", e.message);
        let linux = Platform {
            max_control_path: 90,
            ..mac
        };
        assert!(check_on(&p87, &linux).is_ok());
    }

    /// A Mac user (uid 501) with their own master socket in their own directory: accepted; the
    /// same socket seen by another uid: refused naming both uids.
    #[test]
    fn a_socket_owned_by_the_user_is_theirs_on_every_platform() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("cm");
        std::fs::create_dir(&own).unwrap();
        std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = own.join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let owner = std::fs::metadata(&sock).unwrap().uid();
        let as_uid = |uid| Platform {
            uid,
            max_control_path: 86,
        };
        assert_eq!(
            check_on(sock.to_str().unwrap(), &as_uid(owner)).unwrap(),
            SocketState::Present
        );
        let e = check_on(sock.to_str().unwrap(), &as_uid(owner + 501)).unwrap_err();
        assert!(
            e.message.contains(&format!("belongs to uid {owner}"))
                || e.message.contains(&format!("uid {owner},")),
            "{}",
            e.message
        );
    }

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
