//! Handing `slurm_password` to ssh without it ever being in an argv, an environment or a file
//! (RELIABILITY.md promise 5).
//!
//! ssh asks `SSH_ASKPASS` for the password. We point it at this very binary and at a Unix socket
//! in a fresh 0700 directory; the binary, started by ssh in askpass mode, connects and prints
//! what the socket serves. Only the socket's *path* is in the environment. The server answers a
//! few prompts at most, then the directory is removed.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::thread::JoinHandle;

pub const SOCKET_ENV: &str = "SLURM_TOOLS_ASKPASS_SOCKET";

/// If this process was started by ssh as its askpass helper, answer and return true.
pub fn answer_if_asked() -> bool {
    let Some(sock) = std::env::var_os(SOCKET_ENV) else {
        return false;
    };
    let mut answer = Vec::new();
    if let Ok(mut s) = std::os::unix::net::UnixStream::connect(PathBuf::from(sock)) {
        let _ = s.read_to_end(&mut answer);
    }
    answer.push(b'\n');
    let _ = std::io::stdout().write_all(&answer);
    true
}

/// Serves the password to at most `prompts` askpass calls.
pub struct Server {
    dir: PathBuf,
    pub socket: PathBuf,
    handle: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(password: String, prompts: usize) -> std::io::Result<Server> {
        // A killed run's directory (its socket, never the password) goes with the next run.
        let dir = shared::tempdir::create("slurm-tools-askpass")?;
        let socket = dir.join("s");
        let listener = UnixListener::bind(&socket)?;
        let handle = std::thread::spawn(move || {
            for mut s in listener.incoming().take(prompts).flatten() {
                shared::testhook::pause("preflight:askpass");
                let _ = s.write_all(password.as_bytes());
            }
        });
        Ok(Server {
            dir,
            socket,
            handle: Some(handle),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Unblock the accept loop, then remove the directory.
        for _ in 0..4 {
            if self.handle.as_ref().is_some_and(|h| h.is_finished()) {
                break;
            }
            let _ = std::os::unix::net::UnixStream::connect(&self.socket);
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
