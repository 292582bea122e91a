//! The login prompts of `--establish` when `slurm_password` is given: the password goes to the
//! password prompt, once; every other prompt (a one-time code, "Passcode or option", "press
//! ENTER after approving") goes to the person's terminal; nothing is ever answered twice, so a
//! refused password or code is never retried into a lockout.
//!
//! ssh asks `SSH_ASKPASS` for each prompt (`SSH_ASKPASS_REQUIRE=force`), the prompt text as its
//! argument. We point it at this very binary and at a Unix socket in a fresh 0700 directory: the
//! binary, started by ssh in askpass mode, sends the prompt and gets back what to do. The
//! password never travels in an argv, an environment or a file (docs/reliability.md promise 5): only
//! the socket's *path* is in the environment. The directory is removed when the login ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub const SOCKET_ENV: &str = "SLURM_TOOLS_ASKPASS_SOCKET";

/// A prompt that asks for the account's password (not a code, not a new password).
pub fn is_password_prompt(prompt: &str) -> bool {
    let p = prompt.to_ascii_lowercase();
    p.contains("password")
        && ![
            "new password",
            "retype",
            "one-time",
            "one time",
            "otp",
            "token",
            "code",
        ]
        .iter()
        .any(|w| p.contains(w))
}

/// The prompt without the `(user@host) ` OpenSSH 8.x+ puts before keyboard-interactive prompts.
fn without_user_host(prompt: &str) -> &str {
    match prompt.strip_prefix('(').and_then(|r| r.split_once(") ")) {
        Some((who, rest)) if who.contains('@') && !who.contains(' ') => rest,
        _ => prompt,
    }
}

/// Whose prompt it is, when the prompt says: `(user@host) ...` (OpenSSH's keyboard-interactive
/// prompts) or `user@host's password:` (password authentication).
fn identity_of(prompt: &str) -> Option<(String, String)> {
    let who = match prompt.strip_prefix('(').and_then(|r| r.split_once(") ")) {
        Some((who, _)) if !who.contains(' ') => who,
        _ => prompt.split_once("'s password")?.0,
    };
    let (user, host) = who.rsplit_once('@')?;
    (!user.is_empty() && !host.is_empty() && !host.contains(' '))
        .then(|| (user.to_string(), host.to_string()))
}

/// The login `slurm_password` belongs to: the cluster's user and the names its host may appear
/// under in a prompt (from `ssh -G`: hostname, host key alias, the alias itself), and whether a
/// jump host or proxy command stands before it (whose own prompts must go to the person).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected {
    pub user: String,
    pub hosts: Vec<String>,
    pub proxied: bool,
}

impl Expected {
    /// May the password answer a prompt of this identity (`None`: the prompt names nobody)?
    fn allows(&self, who: Option<&(String, String)>) -> bool {
        match who {
            Some((u, h)) => *u == self.user && self.hosts.iter().any(|x| x == h),
            // A bare "Password:" is the cluster's only when nothing else can be asking.
            None => !self.proxied,
        }
    }
}

/// What the server tells the helper to do with one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answer with these bytes (the password).
    Answer(String),
    /// Ask the person on the terminal.
    Person,
    /// Answer nothing: ssh gives up this login.
    Refuse,
}

/// What happened at the prompts, for the message after the login.
#[derive(Debug, Default, Clone)]
pub struct State {
    /// Whose password it is; `None` answers any password prompt (no `ssh -G` facts).
    pub expected: Option<Expected>,
    pub password_given: bool,
    /// Every prompt, in order (their text, never an answer).
    pub prompts: Vec<String>,
    /// Why a prompt was refused (the login failed at the one before it).
    pub refused: Option<String>,
}

impl State {
    /// Decide one prompt. Pure: table-tested below.
    pub fn decide(&mut self, prompt: &str, have_password: bool) -> Reply {
        let who = identity_of(prompt.trim());
        let prompt = without_user_host(prompt.trim()).to_string();
        let before = self.prompts.last().cloned();
        self.prompts.push(prompt.clone());
        let ours = self
            .expected
            .as_ref()
            .is_none_or(|e| e.allows(who.as_ref()));
        if is_password_prompt(&prompt) && have_password && ours {
            if self.password_given {
                self.refused = Some(match before {
                    Some(b) if !is_password_prompt(&b) => format!(
                        "the login was refused after the answer to {b:?} (a wrong or expired one-time code?): the password prompt came back"
                    ),
                    _ => "the password in `slurm_password` was refused: the password prompt came back".to_string(),
                });
                return Reply::Refuse;
            }
            self.password_given = true;
            return Reply::Answer(String::new());
        }
        Reply::Person
    }

    /// The prompt the login stopped at, when the person had not answered it.
    pub fn waiting_at(&self) -> Option<&str> {
        self.prompts.last().map(String::as_str)
    }
}

/// If this process was started by ssh as its askpass helper: answer, and the exit code (1, no
/// answer, ends that login attempt in ssh).
pub fn answer_if_asked() -> Option<std::process::ExitCode> {
    let sock = std::env::var_os(SOCKET_ENV)?;
    let prompt = std::env::args().nth(1).unwrap_or_default();
    let mut reply = Vec::new();
    if let Ok(mut s) = UnixStream::connect(PathBuf::from(sock)) {
        let _ = s.write_all(prompt.as_bytes());
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.read_to_end(&mut reply);
    }
    let answer = match reply.split_first() {
        Some((b'A', pw)) => Some(pw.to_vec()),
        Some((b'P', _)) => ask_person(&prompt),
        _ => None,
    };
    match answer {
        Some(mut a) => {
            a.push(b'\n');
            let _ = std::io::stdout().write_all(&a);
            Some(std::process::ExitCode::SUCCESS)
        }
        // ssh takes a failed askpass as "no answer" and ends this login attempt.
        None => Some(std::process::ExitCode::FAILURE),
    }
}

/// The prompt on the person's terminal, their line back (no terminal: no answer).
fn ask_person(prompt: &str) -> Option<Vec<u8>> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut w = tty.try_clone().ok()?;
    let shown = if prompt.ends_with(' ') || prompt.ends_with('\n') {
        prompt.to_string()
    } else {
        format!("{prompt} ")
    };
    w.write_all(shown.as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(tty).read_line(&mut line).ok()?;
    Some(line.trim_end_matches(['\n', '\r']).as_bytes().to_vec())
}

/// Serves the prompts of one login.
pub struct Server {
    dir: PathBuf,
    pub socket: PathBuf,
    pub state: Arc<Mutex<State>>,
    handle: Option<JoinHandle<()>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Server {
    pub fn start(password: String, expected: Expected) -> std::io::Result<Server> {
        // A killed run's directory (its socket, never the password) goes with the next run.
        let dir = shared::state::tempdir::create("slurm-tools-askpass")?;
        let socket = dir.join("s");
        let listener = UnixListener::bind(&socket)?;
        let state = Arc::new(Mutex::new(State {
            expected: Some(expected),
            ..State::default()
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, halt) = (state.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            // A login has a handful of prompts; a helper gone wild cannot keep it busy.
            for mut s in listener.incoming().take(16).flatten() {
                if halt.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let mut prompt = Vec::new();
                let _ = (&mut s).take(4096).read_to_end(&mut prompt);
                shared::support::testhook::pause("preflight:askpass");
                let reply = st
                    .lock()
                    .map(|mut g| g.decide(&String::from_utf8_lossy(&prompt), true))
                    .unwrap_or(Reply::Refuse);
                let _ = match reply {
                    Reply::Answer(_) => s
                        .write_all(b"A")
                        .and_then(|_| s.write_all(password.as_bytes())),
                    Reply::Person => s.write_all(b"P"),
                    Reply::Refuse => s.write_all(b"R"),
                };
            }
        });
        Ok(Server {
            dir,
            socket,
            state,
            handle: Some(handle),
            stop,
        })
    }

    pub fn state(&self) -> State {
        self.state.lock().map(|g| g.clone()).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Unblock the accept loop, then remove the directory.
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..4 {
            if self.handle.as_ref().is_some_and(|h| h.is_finished()) {
                break;
            }
            let _ = UnixStream::connect(&self.socket);
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_prompts_are_told_from_code_prompts() {
        for p in [
            "Password:",
            "clusteruser@127.0.0.1's password: ",
            "Password for alice@EXAMPLE.ORG: ",
        ] {
            assert!(is_password_prompt(p), "{p}");
        }
        for p in [
            "Verification code: ",
            "Passcode or option (1-3): ",
            "Duo two-factor login for alice\n\nEnter a passcode or select one of the following options:",
            "One-time password (OATH) for `alice': ",
            "Enter your OTP password: ",
            "New password: ",
            "Retype new password: ",
            "Press ENTER after approving the push on your phone",
            "Token code: ",
        ] {
            assert!(!is_password_prompt(p), "{p}");
        }
    }

    #[test]
    fn only_the_clusters_own_prompt_gets_the_password() {
        let exp = Expected {
            user: "alice".into(),
            hosts: vec!["login.example.org".into(), "cluster".into()],
            proxied: true,
        };
        // A ProxyJump bastion asks first: its prompt goes to the person.
        let mut s = State {
            expected: Some(exp.clone()),
            ..State::default()
        };
        assert_eq!(
            s.decide("bob@gw.example.org's password: ", true),
            Reply::Person
        );
        assert_eq!(
            s.decide("(bob@gw.example.org) Password: ", true),
            Reply::Person
        );
        assert_eq!(
            s.decide("(alice@gw.example.org) Password: ", true),
            Reply::Person
        );
        // A bare prompt behind a proxy could be either host's: the person's.
        assert_eq!(s.decide("Password: ", true), Reply::Person);
        assert!(!s.password_given);
        // The cluster's own, in both forms.
        assert_eq!(
            s.decide("(alice@login.example.org) Password: ", true),
            Reply::Answer(String::new())
        );
        let mut s = State {
            expected: Some(exp),
            ..State::default()
        };
        assert_eq!(
            s.decide("alice@cluster's password: ", true),
            Reply::Answer(String::new())
        );
        // Without a proxy, a bare prompt is the cluster's.
        let mut s = State {
            expected: Some(Expected {
                user: "alice".into(),
                hosts: vec!["h".into()],
                proxied: false,
            }),
            ..State::default()
        };
        assert_eq!(s.decide("Password: ", true), Reply::Answer(String::new()));
    }

    #[test]
    fn the_password_goes_once_and_everything_else_to_the_person() {
        let mut s = State::default();
        assert_eq!(s.decide("Password: ", true), Reply::Answer(String::new()));
        assert_eq!(s.decide("Verification code: ", true), Reply::Person);
        assert!(s.refused.is_none());
        // The code was wrong: the next round asks for the password again; never answered twice.
        assert_eq!(s.decide("Password: ", true), Reply::Refuse);
        let why = s.refused.clone().unwrap();
        assert!(
            why.contains("Verification code") && why.contains("one-time code"),
            "{why}"
        );

        // A refused password: the password prompt comes right back.
        let mut s = State::default();
        s.decide("Password: ", true);
        assert_eq!(s.decide("Password: ", true), Reply::Refuse);
        assert!(s.refused.unwrap().contains("`slurm_password` was refused"));

        // OpenSSH's "(user@host) " before the prompt is not part of its name.
        let mut s = State::default();
        s.decide("(alice@login1) Password: ", true);
        s.decide("(alice@login1) Verification code: ", true);
        assert_eq!(s.waiting_at(), Some("Verification code:"));
        assert_eq!(without_user_host("(not a host) x"), "(not a host) x");

        // Without a password every prompt is the person's.
        let mut s = State::default();
        assert_eq!(s.decide("Password: ", false), Reply::Person);
        assert_eq!(s.decide("Verification code: ", false), Reply::Person);
        assert_eq!(s.waiting_at(), Some("Verification code:"));
    }
}
