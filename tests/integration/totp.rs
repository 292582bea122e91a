//! A real two-factor login (the testbed's TOTP sshd: PAM asks the account's password, then a
//! one-time code from pam_google_authenticator), driven through a real terminal as a person
//! drives it: a shell in a tmux pane, keys sent, the screen read back.

use crate::harness::*;
use serde_json::json;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The TOTP sshd's log is counted per test: one test at a time.
static TOTP: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    TOTP.lock().unwrap_or_else(|e| e.into_inner())
}

/// The current one-time code, as the person's authenticator app shows it.
fn code() -> String {
    let secret = std::fs::read_to_string(testbed().s("totp_secret_file")).unwrap();
    let out = Command::new("oathtool")
        .args(["--totp", "-b", secret.trim()])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn password() -> String {
    std::fs::read_to_string(testbed().s("mfa_password_file"))
        .unwrap()
        .trim()
        .to_string()
}

fn log() -> String {
    testbed().s("totp_sshd_log")
}

fn accepted() -> usize {
    log_count(&log(), "Accepted keyboard-interactive")
}

fn failed() -> usize {
    log_count(&log(), "Failed keyboard-interactive")
}

/// A shell in a tmux pane: a terminal a person types into.
pub(crate) struct Pane {
    name: String,
}

impl Pane {
    pub(crate) fn new(test: &str) -> Pane {
        let name = format!("st-totp-{test}-{}", std::process::id());
        let home = test_home();
        let shell = format!(
            "env -i HOME={h} XDG_STATE_HOME={h}/state XDG_CONFIG_HOME={h}/config XDG_CACHE_HOME={h}/cache \
             PATH=/usr/local/bin:/usr/bin:/bin TERM=xterm LANG=C.UTF-8 GIT_CONFIG_GLOBAL=/dev/null \
             PS1='$ ' bash --norc --noprofile",
            h = home.display()
        );
        Pane::start(name, &shell)
    }

    /// A terminal that runs `command` (through tmux's shell) instead of an interactive shell.
    pub(crate) fn running(test: &str, command: &str) -> Pane {
        Pane::start(format!("st-term-{test}-{}", std::process::id()), command)
    }

    fn start(name: String, shell: &str) -> Pane {
        // The tmux server exits when its last session closes (another test's pane ending): a
        // new session asked of it in that moment fails, and is asked again of a new server.
        let mut tries = 0;
        loop {
            let ok = Command::new("tmux")
                .args([
                    "new-session",
                    "-d",
                    "-s",
                    &name,
                    "-x",
                    "250",
                    "-y",
                    "60",
                    shell,
                ])
                .status()
                .unwrap();
            tries += 1;
            if ok.success() {
                break;
            }
            assert!(tries < 3, "tmux new-session {name} failed {tries} times");
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        Pane { name }
    }

    pub(crate) fn type_line(&self, text: &str) {
        for args in [vec!["-l", text], vec!["Enter"]] {
            let ok = Command::new("tmux")
                .args(["send-keys", "-t", &self.name])
                .args(args)
                .status()
                .unwrap();
            assert!(ok.success());
        }
    }

    /// A clean screen and scrollback: what is waited for next is new.
    pub(crate) fn reset(&self) {
        self.type_line("clear");
        std::thread::sleep(Duration::from_millis(300));
        let ok = Command::new("tmux")
            .args(["clear-history", "-t", &self.name])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    pub(crate) fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-J", "-S", "-500", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until the screen shows `needle`; the screen then.
    pub(crate) fn wait_for(&self, needle: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if s.contains(needle) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {needle:?}:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

/// A document for the TOTP host with a control path of its own, written to a file.
fn doc_file(dir: &std::path::Path, test: &str, with_password: bool) -> (String, String) {
    let cp = control_path(&format!("totp-{test}"));
    let mut d = doc_for("totp_host");
    d["control_path"] = json!(cp);
    d["mfa_style"] = json!(true);
    if with_password {
        d["slurm_password"] = json!(password());
    }
    let f = dir.join("doc.json");
    std::fs::write(&f, d.to_string()).unwrap();
    (f.display().to_string(), cp)
}

/// One test's login: its document (a control path of its own), where the output goes, and a
/// terminal to type in.
struct Login {
    _dir: tempfile::TempDir,
    f: String,
    cp: String,
    out: std::path::PathBuf,
    pane: Pane,
}

impl Login {
    fn new(test: &str, with_password: bool) -> Login {
        let dir = tempdir();
        let (f, cp) = doc_file(dir.path(), test, with_password);
        let out = dir.path().join("out.json");
        Login {
            _dir: dir,
            f,
            cp,
            out,
            pane: Pane::new(test),
        }
    }

    /// Type `slurm-ssh-preflight --establish FLAGS DOC > OUT; echo EXIT=$?` at the prompt.
    fn establish(&self, flags: &str) {
        self.pane.type_line(&format!(
            "{} --establish {flags}{} > {}; echo EXIT=$?",
            preflight(),
            self.f,
            self.out.display()
        ));
    }
}

fn close_master(cp: &str) {
    master_exit("totp_host", cp);
}

fn preflight() -> String {
    bin("slurm-ssh-preflight").to_string()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn without_a_master_the_totp_host_asks_for_a_login_with_the_command() {
    crate::needs_cluster!();
    let _one = lock();
    let dir = tempdir();
    let (f, cp) = doc_file(dir.path(), "nomaster", false);
    let before = (accepted(), failed());
    let mut cmd = tool("slurm-ssh-preflight");
    cmd.arg(&f);
    let r = run_raw(cmd, b"");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let host = testbed().s("totp_host");
    assert!(
        r.stderr.contains("-fNM") && r.stderr.contains(&cp.replace("%p", "")[..10]),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(&host), "{}", r.stderr);
    assert_eq!(
        (accepted(), failed()),
        before,
        "no login attempt without --establish"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn establish_without_a_password_shows_both_prompts_and_later_runs_ride_the_master() {
    crate::needs_cluster!();
    let _one = lock();
    let l = Login::new("both", false);
    let (pane, cp, out) = (&l.pane, &l.cp, &l.out);
    let before = (accepted(), failed());
    l.establish("");
    pane.wait_for("Password:", 30);
    pane.type_line(&password());
    pane.wait_for("Verification code:", 30);
    pane.type_line(&code());
    let screen = pane.wait_for("\nEXIT=", 60);
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains(&password()), "the password was echoed");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    assert_eq!(
        section_of::<shared::contract::schema::Preflight>(&doc, "preflight")
            .master
            .to_string(),
        "managed"
    );
    assert_eq!(accepted(), before.0 + 1);
    assert_eq!(failed(), before.1);
    // Later runs ride the master: no new login.
    for _ in 0..2 {
        let again = run("slurm-ssh-preflight", &[], &doc);
        assert_eq!(again.code, 0, "{}", again.stderr);
    }
    assert_eq!(accepted(), before.0 + 1, "no second login");
    close_master(cp);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn establish_with_the_password_shows_only_the_code_prompt_and_logs_in_once() {
    crate::needs_cluster!();
    let _one = lock();
    let l = Login::new("pw", true);
    let (pane, cp, out) = (&l.pane, &l.cp, &l.out);
    let before = (accepted(), failed());
    l.establish("");
    let screen = pane.wait_for("Verification code:", 30);
    assert!(
        !screen.contains("Password:"),
        "the password prompt was answered, not shown:\n{screen}"
    );
    pane.type_line(&code());
    let screen = pane.wait_for("\nEXIT=", 60);
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains(&password()));
    assert_eq!(accepted(), before.0 + 1, "one login");
    assert_eq!(failed(), before.1, "no failed attempt");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    assert_eq!(
        section_of::<shared::contract::schema::Preflight>(&doc, "preflight")
            .master
            .to_string(),
        "managed"
    );
    assert!(
        !std::fs::read_to_string(out).unwrap().contains(&password()),
        "the password is not in the output document"
    );
    close_master(cp);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_wrong_code_is_said_as_such_and_never_retried() {
    crate::needs_cluster!();
    let _one = lock();
    let l = Login::new("wrong", true);
    let pane = &l.pane;
    let before = (accepted(), failed());
    l.establish("");
    pane.wait_for("Verification code:", 30);
    let right: u32 = code().parse().unwrap();
    pane.type_line(&format!("{:06}", (right + 500_000) % 1_000_000));
    let screen = pane.wait_for("\nEXIT=", 60);
    assert!(screen.contains("EXIT=3"), "{screen}");
    assert!(
        screen.contains("\"Verification code:\" was refused"),
        "{screen}"
    );
    assert_eq!(
        screen.matches("Verification code:").count(),
        2,
        "asked once (the error names it once more), never again:\n{screen}"
    );
    assert_eq!(accepted(), before.0);
    assert!(
        failed() <= before.1 + 1,
        "at most one failed attempt in the sshd log"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_printed_login_command_works_and_a_timeout_leaves_the_terminal_echoing() {
    crate::needs_cluster!();
    let _one = lock();
    let l = Login::new("typed", false);
    let (pane, f, cp, out) = (&l.pane, &l.f, &l.cp, &l.out);

    // Nobody answers: the login times out, the terminal echoes again, the error has a line of
    // its own.
    l.establish("--establish-timeout 4 ");
    pane.wait_for("Password:", 30);
    let screen = pane.wait_for("\nEXIT=", 60);
    assert!(screen.contains("EXIT=3"), "{screen}");
    assert!(screen.contains("timed out after 4 s"), "{screen}");
    assert!(
        screen
            .lines()
            .any(|l| l.starts_with("slurm-ssh-preflight: error: the interactive login")),
        "the error starts on a fresh line:\n{screen}"
    );
    pane.type_line("stty -a | tr ' ' '\\n' | grep -x -e echo -e -echo; echo STTY-DONE");
    let screen = pane.wait_for("\nSTTY-DONE", 20);
    let after = screen.rsplit("stty -a").next().unwrap();
    assert!(
        after.lines().any(|l| l.trim() == "echo") && !after.lines().any(|l| l.trim() == "-echo"),
        "the terminal echoes again:\n{screen}"
    );

    // Ctrl-C at the prompt: the terminal echoes afterwards too.
    pane.reset();
    pane.type_line(&format!(
        "{} --establish {f} > {}",
        preflight(),
        out.display()
    ));
    pane.wait_for("Password:", 30);
    let ok = Command::new("tmux")
        .args(["send-keys", "-t", &pane.name, "C-c"])
        .status()
        .unwrap();
    assert!(ok.success());
    std::thread::sleep(Duration::from_secs(1));
    pane.type_line("stty -a | tr ' ' '\\n' | grep -x -e echo -e -echo; echo STTY2-DONE");
    let screen = pane.wait_for("\nSTTY2-DONE", 20);
    let after = screen.rsplit("stty -a").next().unwrap();
    assert!(
        after.lines().any(|l| l.trim() == "echo") && !after.lines().any(|l| l.trim() == "-echo"),
        "the terminal echoes after Ctrl-C:\n{screen}"
    );

    // The command preflight prints, typed by the person.
    let mut cmd = tool("slurm-ssh-preflight");
    cmd.arg(f);
    let r = run_raw(cmd, b"");
    assert_eq!(r.code, 3, "{}", r.stderr);
    let printed = r
        .stderr
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ssh ") && l.contains("-fNM"))
        .unwrap_or_else(|| panic!("no login command in: {}", r.stderr))
        .to_string();
    pane.reset();
    pane.type_line(&printed);
    pane.wait_for("Password:", 30);
    pane.type_line(&password());
    pane.wait_for("Verification code:", 30);
    pane.type_line(&code());
    let deadline = Instant::now() + Duration::from_secs(30);
    let rode = loop {
        let mut c = tool("slurm-ssh-preflight");
        c.arg(f);
        let r = run_raw(c, b"");
        if r.code == 0 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(rode.code, 0, "{}", rode.stderr);
    assert_eq!(rode.preflight().master.to_string(), "managed");
    close_master(cp);
}
