//! Messages for people, on stderr only (stdout is the document's).
//!
//! Plain text, no colour (so `NO_COLOR` holds trivially), one line per message prefixed with the
//! tool's name, so in a pipeline of six tools the person knows which one is talking.

use crate::contract::error::ToolError;
use std::io::Write;

pub fn note(tool: &str, msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{tool}: {msg}");
}

pub fn warn(tool: &str, msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{tool}: warning: {msg}");
}

pub fn error(tool: &str, e: &ToolError) {
    let mut err = std::io::stderr().lock();
    for line in e.to_string().lines() {
        let _ = writeln!(err, "{tool}: {line}");
    }
}

/// The person's terminal settings (`stty -g` of /dev/tty), saved before a program that may
/// change them (ssh turns echo off at a password prompt) and put back afterwards: a program
/// killed mid-prompt (a timeout) must not leave the terminal without echo. No terminal: `None`.
pub struct Terminal {
    saved: String,
}

impl Terminal {
    pub fn save() -> Option<Terminal> {
        let tty = std::fs::File::open("/dev/tty").ok()?;
        let out = std::process::Command::new("stty")
            .arg("-g")
            .stdin(tty)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        let saved = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !saved.is_empty()).then_some(Terminal { saved })
    }

    /// Put the settings back; with `fresh_line`, also end whatever line a prompt left open, so
    /// the message that follows starts at the left margin.
    pub fn restore(&self, fresh_line: bool) {
        if let Ok(tty) = std::fs::File::open("/dev/tty") {
            let _ = std::process::Command::new("stty")
                .arg(&self.saved)
                .stdin(tty)
                .stderr(std::process::Stdio::null())
                .status();
        }
        if fresh_line {
            let _ = std::io::stderr().write_all(b"\n");
        }
    }
}

/// A one-line progress display on stderr, redrawn at most five times a second, only when
/// stderr is a terminal (and `TERM` is not `dumb`).
///
/// Hand-written on purpose, not indicatif: the tools draw one line of text (no bars, no
/// multi-progress, no templates), which is these 40 lines; indicatif would bring a console
/// layer, unicode width tables and a ticker thread into every binary for that, on a 2-core build
/// machine, and its TTY detection differs from ours (we also honour `TERM=dumb`, and never draw
/// when stderr is a pipe, so a pipeline's log stays clean).
pub struct Progress {
    tool: String,
    enabled: bool,
    last: Option<std::time::Instant>,
    drawn: bool,
}

impl Progress {
    pub fn new(tool: &str) -> Progress {
        use std::io::IsTerminal;
        let enabled =
            std::io::stderr().is_terminal() && std::env::var("TERM").map_or(true, |t| t != "dumb");
        Progress {
            tool: tool.to_string(),
            enabled,
            last: None,
            drawn: false,
        }
    }

    /// Whether the line is drawn (stderr is a terminal).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn update(&mut self, line: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|l| now.duration_since(l).as_millis() < 200)
        {
            return;
        }
        self.last = Some(now);
        self.drawn = true;
        let _ = write!(
            std::io::stderr().lock(),
            "\r\x1b[2K{}: {}",
            self.tool,
            line()
        );
    }

    pub fn finish(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            self.drawn = false;
        }
    }
}

/// `12.3 MB` style sizes for people.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
