//! Running external programs (ssh, git, tar) with a deadline, bounded output, and a record of
//! what ran for error reports.
//!
//! Every external process of the project goes through [`Cmd::run`]. It never blocks past the
//! deadline (the child is killed), reads stdout and stderr on their own threads so a full pipe
//! cannot deadlock, keeps at most [`STDOUT_CAP`] of stdout and the last [`STDERR_TAIL`] of
//! stderr, and, when `SLURM_TOOLS_TRACE` names a file, appends one JSON line per execution
//! (program, argv, exit code, milliseconds) so tests and benchmarks can count ssh executions.

use crate::contract::error::CommandRecord;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The most stdout kept from one command: more is read and discarded (so the child never blocks
/// on a full pipe) and is not in [`Output::stdout`]. No remote read of ours should come near it;
/// whatever may be large (logs, file contents) is read in bounded chunks instead.
pub const STDOUT_CAP: usize = 64 * 1024 * 1024;
/// How much of the end of stderr is kept for error reports.
pub const STDERR_TAIL: usize = 8 * 1024;

/// Writes a stream into a child's stdin (e.g. a tar archive as it is built).
pub type StreamWriter = Box<dyn FnOnce(&mut dyn Write) -> std::io::Result<()> + Send>;

/// What the child reads.
pub enum Input {
    Null,
    Bytes(Vec<u8>),
    /// The person's terminal (interactive ssh for MFA).
    Inherit,
    /// A stream produced while the child runs (e.g. a tar archive): the writer gets the child's
    /// stdin and must return when done; the pipe is closed after it returns.
    Stream(StreamWriter),
}

pub struct Cmd {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    input: Input,
    inherit_stdout: bool,
    inherit_stderr: bool,
    through: bool,
    stderr_through: bool,
    progress: bool,
    deadline: Duration,
    cwd: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Output {
    /// `None` when killed at the deadline or by a signal.
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr_tail: String,
    pub timed_out: bool,
    pub elapsed: Duration,
    pub argv: Vec<String>,
}

impl Output {
    /// An execution's output as an operation's reply reads it (tests of reply parsers): its exit
    /// code, stdout and stderr.
    pub fn of(code: Option<i32>, stdout: &str, stderr: &str) -> Output {
        Output {
            code,
            stdout: stdout.as_bytes().to_vec(),
            stderr_tail: stderr.to_string(),
            timed_out: false,
            elapsed: Duration::ZERO,
            argv: Vec::new(),
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// "exit 3", "timed out", or "killed by a signal", for messages.
    pub fn exit_text(&self) -> String {
        if self.timed_out {
            "timed out".into()
        } else {
            describe_exit(self.code)
        }
    }

    pub fn record(&self) -> CommandRecord {
        CommandRecord {
            argv: self.argv.clone(),
            exit_code: self.code,
            stderr_tail: self.stderr_tail.clone(),
        }
    }
}

/// An exit code for a message: "exit 3", or "killed by a signal" when there is none.
pub fn describe_exit(code: Option<i32>) -> String {
    code.map_or_else(|| "killed by a signal".into(), |c| format!("exit {c}"))
}

impl Cmd {
    pub fn new(program: impl Into<String>) -> Self {
        Cmd {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            input: Input::Null,
            inherit_stdout: false,
            inherit_stderr: false,
            through: false,
            stderr_through: false,
            progress: false,
            deadline: Duration::from_secs(60),
            cwd: None,
        }
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn env_remove(mut self, k: impl Into<String>) -> Self {
        self.env_remove.push(k.into());
        self
    }

    pub fn input(mut self, input: Input) -> Self {
        self.input = input;
        self
    }

    pub fn current_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Let the child write straight to our stderr (interactive ssh, progress of git).
    pub fn inherit_stderr(mut self) -> Self {
        self.inherit_stderr = true;
        self
    }

    /// Let the child write straight to our *stderr* as its stdout too: stdout of the tools is
    /// reserved for the document, so an interactive child's stdout goes to stderr.
    pub fn stdout_to_stderr(mut self) -> Self {
        self.inherit_stdout = true;
        self
    }

    /// A person's command: its stdout straight to ours ([`Cmd::run`]; a started child's stdout
    /// stays a pipe, handed out by [`Running::recv`]), its stderr to ours as it comes, with its
    /// tail kept for classifying ssh's own failures. ssh's line about a stale control socket and
    /// the project's own `@@slurm-tools ` lines are left out when they come before anything else.
    pub fn output_through(mut self) -> Self {
        self.through = true;
        self.stderr_through = true;
        self
    }

    /// Only the stderr half of [`Cmd::output_through`]: the child's stderr (git's progress, say)
    /// reaches ours as it comes and its tail is kept; stdout is read as usual.
    pub fn stderr_through(mut self) -> Self {
        self.stderr_through = true;
        self
    }

    /// Progress for a person watching: the child's stderr lines that start with [`PROGRESS`]
    /// reach ours (without the marker) as they come; everything else is only kept in the tail,
    /// as without this.
    pub fn progress_lines(mut self) -> Self {
        self.progress = true;
        self
    }

    pub fn deadline(mut self, d: Duration) -> Self {
        self.deadline = d;
        self
    }

    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// The program with its arguments, environment and working directory (no stdio yet).
    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        for k in &self.env_remove {
            command.env_remove(k);
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
    }

    /// Start the child and keep talking to it (see [`Running`]). `input` bytes, if any, are
    /// written first; stdin stays open for [`Running::send`]. The deadline does not apply.
    pub fn start(self) -> Result<Running, std::io::Error> {
        let argv = self.argv();
        let mut command = self.command();
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let mut stdin = child.stdin.take();
        if let (Input::Bytes(b), Some(w)) = (&self.input, stdin.as_mut()) {
            w.write_all(b)?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut out) = child.stdout.take() {
            thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match out.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tx.send(buf[..n].to_vec()).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
        let err = child
            .stderr
            .take()
            .map(|e| stderr_reader(e, self.stderr_through, self.progress));
        Ok(Running {
            child,
            stdin,
            rx,
            err,
            started: Instant::now(),
            argv,
            closed: false,
        })
    }

    /// Run to completion or deadline. An error here means the program could not be started.
    pub fn run(self) -> Result<Output, std::io::Error> {
        let argv = self.argv();
        let started = Instant::now();
        let mut command = self.command();
        command.stdin(match self.input {
            Input::Null => Stdio::null(),
            Input::Inherit => Stdio::inherit(),
            Input::Bytes(_) | Input::Stream(_) => Stdio::piped(),
        });
        if self.through {
            command.stdout(Stdio::inherit());
        } else if self.inherit_stdout {
            // The tool's stdout is the document: hand the child a duplicate of stderr instead.
            command.stdout(Stdio::from(std::io::stderr().as_fd_owned()?));
        } else {
            command.stdout(Stdio::piped());
        }
        command.stderr(if self.inherit_stderr {
            Stdio::inherit()
        } else {
            Stdio::piped()
        });
        let mut child = command.spawn()?;

        let writer = match (self.input, child.stdin.take()) {
            (Input::Bytes(bytes), Some(mut stdin)) => Some(thread::spawn(move || {
                // A child that exits early closes the pipe: that is its business, not an error.
                let _ = stdin.write_all(&bytes);
            })),
            (Input::Stream(f), Some(mut stdin)) => Some(thread::spawn(move || {
                let _ = f(&mut stdin);
            })),
            _ => None,
        };
        let out_reader = child.stdout.take().map(|mut out| {
            thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = (&mut out).take(STDOUT_CAP as u64).read_to_end(&mut buf);
                // Drain anything beyond the cap so the child is not blocked forever.
                let _ = std::io::copy(&mut out, &mut std::io::sink());
                buf
            })
        });
        let err_reader = child
            .stderr
            .take()
            .map(|err| stderr_reader(err, self.stderr_through, self.progress));

        let (status, timed_out) = wait_deadline(&mut child, self.deadline);
        if let Some(w) = writer {
            let _ = w.join();
        }
        let stdout = out_reader
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let stderr_tail = err_reader
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let code = if timed_out { None } else { status };
        let out = Output {
            code,
            stdout,
            stderr_tail,
            timed_out,
            elapsed: started.elapsed(),
            argv,
        };
        trace(&out);
        Ok(out)
    }
}

/// A child that keeps running while we talk to it: requests on its stdin, replies read from its
/// stdout as they come (slurm-watch's one ssh session for a whole watch). It is killed when
/// dropped without [`Running::close`]; `close` traces it like any other execution.
pub struct Running {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    rx: std::sync::mpsc::Receiver<Vec<u8>>,
    err: Option<thread::JoinHandle<String>>,
    started: Instant,
    argv: Vec<String>,
    closed: bool,
}

/// What [`Running::recv`] got.
pub enum Received {
    Data(Vec<u8>),
    /// The child closed its stdout (it ended, or is about to).
    Eof,
    TimedOut,
}

impl Running {
    /// Write a request to the child's stdin.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin already closed"))?;
        stdin.write_all(bytes)?;
        stdin.flush()
    }

    /// Close stdin (the child reads EOF there) and go on reading its stdout.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// The next bytes of stdout, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Received {
        use std::sync::mpsc::RecvTimeoutError;
        match self.rx.recv_timeout(timeout) {
            Ok(b) => Received::Data(b),
            Err(RecvTimeoutError::Timeout) => Received::TimedOut,
            Err(RecvTimeoutError::Disconnected) => Received::Eof,
        }
    }

    /// Close stdin (the child's cue to finish), give it `grace` to exit, kill it after that, and
    /// return how it ended (stdout is not kept: it was handed out by `recv`).
    pub fn close(mut self, grace: Duration) -> Output {
        self.closed = true;
        drop(self.stdin.take());
        let (status, timed_out) = wait_deadline(&mut self.child, grace);
        let stderr_tail = self
            .err
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        let out = Output {
            code: if timed_out { None } else { status },
            stdout: Vec::new(),
            stderr_tail,
            timed_out,
            elapsed: self.started.elapsed(),
            argv: std::mem::take(&mut self.argv),
        };
        trace(&out);
        out
    }
}

impl Running {
    /// Like [`Running::close`], waiting up to `deadline`, and with every stdout byte not yet
    /// taken by [`Running::recv`] in the output.
    pub fn close_collect(mut self, deadline: Duration) -> Output {
        drop(self.stdin.take());
        let mut stdout = Vec::new();
        let started = Instant::now();
        // Drain while waiting, so a child with much to say never blocks on a full pipe.
        loop {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(b) => stdout.extend_from_slice(&b),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if started.elapsed() >= deadline {
                        break;
                    }
                }
            }
        }
        let left = deadline.saturating_sub(started.elapsed());
        let mut out = self.close(left.max(Duration::from_secs(1)));
        out.stdout = stdout;
        out
    }
}

/// Writes into a running child's stdin (e.g. a tar stream after a conversation's first part).
pub struct StdinWriter<'a>(pub &'a mut Running);

impl Write for StdinWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let stdin = self
            .0
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("stdin already closed"))?;
        stdin.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.0.stdin.as_mut() {
            Some(s) => s.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> std::io::Result<std::os::fd::OwnedFd>;
}

impl AsFdOwned for std::io::Stderr {
    fn as_fd_owned(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned()
    }
}

/// The thread that reads a child's stderr: its tail, and with `through` every byte passed on to
/// ours ([`pass_tail`]).
fn stderr_reader(
    err: std::process::ChildStderr,
    through: bool,
    progress: bool,
) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        if through {
            pass_tail(err, std::io::stderr())
        } else if progress {
            pass_progress(err, std::io::stderr())
        } else {
            read_tail(err)
        }
    })
}

/// The marker of a progress line a remote script writes to its stderr for a person watching
/// (see [`Cmd::progress_lines`]; `shared/src/sync/tracked_remote.rs` writes them while the
/// cluster clones).
pub const PROGRESS: &str = "@@slurm-tools-progress ";

/// [`read_tail`], also writing each whole line that starts with [`PROGRESS`] to `to`, without
/// the marker, as it comes. The tail keeps every line (progress lines too).
fn pass_progress(r: impl Read, mut to: impl Write) -> String {
    let mut line: Vec<u8> = Vec::new();
    let mut long = false;
    read_chunks(r, |chunk| {
        for &b in chunk {
            if b == b'\n' {
                if !long {
                    if let Some(rest) = line.strip_prefix(PROGRESS.as_bytes()) {
                        let _ = to
                            .write_all(rest)
                            .and_then(|()| to.write_all(b"\n"))
                            .and_then(|()| to.flush());
                    }
                }
                line.clear();
                long = false;
            } else if !long {
                line.push(b);
                // Progress lines are short: a longer one is not collected.
                if line.len() > 4096 {
                    line.clear();
                    long = true;
                }
            }
        }
    })
}

/// Read `r` to its end, handing each chunk to `each` as it comes; the stream's tail as text.
fn read_chunks(mut r: impl Read, mut each: impl FnMut(&[u8])) -> String {
    let mut tail = Tail::default();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tail.push(&buf[..n]);
                each(&buf[..n]);
            }
        }
    }
    tail.text()
}

/// The last [`STDERR_TAIL`] bytes of a stream, kept as they come.
#[derive(Default)]
struct Tail(Vec<u8>);

/// Where the first line of `text` that is exactly `line` (its newline included) starts: a
/// conversation's marker between one part of a script's answer and the next.
pub fn line_at(text: &[u8], line: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].windows(line.len()).position(|w| w == line) {
        let at = from + i;
        if at == 0 || text[at - 1] == b'\n' {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Whether `text` ends with `line` as a whole line (its newline included): a conversation's
/// marker at the end of what was read so far, found without reading all of it again.
pub fn ends_with_line(text: &[u8], line: &[u8]) -> bool {
    text.ends_with(line) && (text.len() == line.len() || text[text.len() - line.len() - 1] == b'\n')
}

/// The end of `text` an [`Output`]'s `stderr_tail` keeps.
pub fn tail_of(text: &str) -> String {
    let mut t = Tail(Vec::new());
    t.push(text.as_bytes());
    t.text()
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
        if self.0.len() > 2 * STDERR_TAIL {
            self.0.drain(..self.0.len() - STDERR_TAIL);
        }
    }

    /// The tail as text (ssh ends its messages with \r\n: the \r go).
    fn text(mut self) -> String {
        if self.0.len() > STDERR_TAIL {
            self.0.drain(..self.0.len() - STDERR_TAIL);
        }
        String::from_utf8_lossy(&self.0).replace('\r', "")
    }
}

/// Lines that are not the person's, when they open a passed-through stderr: ssh's note about a
/// control socket it could not use (it then connects on its own) and the project's own protocol
/// lines (`@@slurm-tools PENDING ...`).
const NOT_THE_PERSONS: [&[u8]; 2] = [b"Control socket connect(", b"@@slurm-tools "];

/// [`read_tail`], also writing every byte to `to` as it comes, except whole lines opening the
/// stream that start with one of [`NOT_THE_PERSONS`]. Bytes are held back only while they could
/// still be such a line, so the person's output arrives unchanged and without delay.
fn pass_tail(r: impl Read, mut to: impl Write) -> String {
    let mut held: Vec<u8> = Vec::new();
    let mut opening = true;
    let text = read_chunks(r, |chunk| {
        if !opening {
            let _ = to.write_all(chunk).and_then(|()| to.flush());
            return;
        }
        held.extend_from_slice(chunk);
        // Drop the opening lines that are not the person's; stop at the first that is (or could
        // no longer become one of them).
        loop {
            let ours = |line: &[u8]| {
                NOT_THE_PERSONS
                    .iter()
                    .any(|p| line.starts_with(p) || p.starts_with(line))
            };
            match held.iter().position(|&b| b == b'\n') {
                Some(end) if NOT_THE_PERSONS.iter().any(|p| held.starts_with(p)) => {
                    held.drain(..=end);
                }
                Some(_) => {
                    opening = false;
                    break;
                }
                None if ours(&held) => break,
                None => {
                    opening = false;
                    break;
                }
            }
        }
        if !opening {
            let _ = to.write_all(&held).and_then(|()| to.flush());
            held.clear();
        }
    });
    // An opening line cut short at the end is the person's after all.
    if opening && !held.is_empty() && !NOT_THE_PERSONS.iter().any(|p| held.starts_with(p)) {
        let _ = to.write_all(&held).and_then(|()| to.flush());
    }
    text
}

fn read_tail(r: impl Read) -> String {
    read_chunks(r, |_| {})
}

/// Wait for the child, ending it at the deadline. Returns (exit code, timed out).
///
/// At the deadline it gets SIGTERM first and two seconds to go (ssh at a password prompt puts
/// the terminal's echo back on SIGTERM; SIGKILL would leave it off), then SIGKILL.
fn wait_deadline(child: &mut Child, deadline: Duration) -> (Option<i32>, bool) {
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    let mut terminated: Option<Instant> = None;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if terminated.is_some() => return (status.code(), true),
            Ok(Some(status)) => return (status.code(), false),
            Ok(None) => {}
            Err(_) => return (None, false),
        }
        if terminated.is_some_and(|t| t.elapsed() >= Duration::from_secs(2)) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, true);
        }
        if terminated.is_none() && start.elapsed() >= deadline {
            // std has no SIGTERM: kill(1) sends it.
            let sent = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !sent {
                let _ = child.kill();
                let _ = child.wait();
                return (None, true);
            }
            terminated = Some(Instant::now());
        }
        thread::sleep(nap);
        // A short command (most are: an ssh execution over the master takes milliseconds) is
        // seen to end within a millisecond; only after a quarter of a second do the looks thin
        // out, to one every 20 ms. (Backing off from the start made a 7 ms execution cost 15.)
        if start.elapsed() >= Duration::from_millis(250) {
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }
}

/// One line of the `SLURM_TOOLS_TRACE` file (JSON lines), for measurements.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub enum TraceEvent<'a> {
    /// An external command ended.
    Command {
        argv: &'a [String],
        exit_code: Option<i32>,
        ms: u64,
        pid: u32,
    },
    /// A measurement inside a long execution (e.g. each poll of a watch's one ssh session).
    Poll {
        event: &'static str,
        ms: f64,
        bytes: u64,
    },
    /// The Slurm commands one remote execution ran for several jobs (slurm-runs' refresh).
    SlurmCalls {
        event: &'static str,
        cluster: &'a str,
        squeue: u32,
        sacct: u32,
        jobs: u32,
    },
}

impl TraceEvent<'_> {
    /// A poll of a watch: how long the cluster side took, and the log bytes it carried.
    pub fn poll(ms: f64, bytes: u64) -> TraceEvent<'static> {
        TraceEvent::Poll {
            event: "poll",
            ms,
            bytes,
        }
    }
}

/// Append one event to the `SLURM_TOOLS_TRACE` file, if tracing is on.
pub fn trace_event(event: &TraceEvent) {
    let Some(path) = std::env::var_os("SLURM_TOOLS_TRACE") else {
        return;
    };
    let Ok(line) = serde_json::to_string(event) else {
        return;
    };
    // One write of the whole line: threads of one tool (slurm-runs asks its clusters at once)
    // and concurrent tools append to the same file without interleaving.
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    if let Ok(mut f) = crate::state::private_files::open_append(std::path::Path::new(&path)) {
        let _ = f.write_all(&bytes);
    }
}

/// An argument as the trace shows it: a URL's credentials (`user:token@`) and query (`?...`)
/// replaced by `***`, so a token in a URL never reaches the trace file.
fn redacted(arg: &str) -> String {
    let Some(at) = arg.find("://") else {
        return arg.to_string();
    };
    let (scheme, rest) = arg.split_at(at + 3);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let authority = match authority.rfind('@') {
        Some(i) => format!("***@{}", &authority[i + 1..]),
        None => authority.to_string(),
    };
    let path = match path.find('?') {
        Some(i) => format!("{}?***", &path[..i]),
        None => path.to_string(),
    };
    format!("{scheme}{authority}{path}")
}

fn trace(out: &Output) {
    if std::env::var_os("SLURM_TOOLS_TRACE").is_none() {
        return;
    }
    let argv: Vec<String> = out.argv.iter().map(|a| redacted(a)).collect();
    trace_event(&TraceEvent::Command {
        argv: &argv,
        exit_code: out.code,
        ms: out.elapsed.as_millis() as u64,
        pid: std::process::id(),
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_marker_counts_only_as_a_whole_line() {
        let m = b"--end--\n";
        assert_eq!(super::line_at(b"--end--\nrest", m), Some(0));
        assert_eq!(super::line_at(b"a\n--end--\n", m), Some(2));
        // Inside a line first, then a line of its own.
        assert_eq!(super::line_at(b"x--end--\n--end--\nrest", m), Some(9));
        assert_eq!(super::line_at(b"x--end--\n", m), None);
        assert_eq!(super::line_at(b"--end--", m), None);
        assert!(super::ends_with_line(b"--end--\n", m));
        assert!(super::ends_with_line(b"a\n--end--\n", m));
        assert!(!super::ends_with_line(b"x--end--\n", m));
        assert!(!super::ends_with_line(b"--end--\nrest", m));
    }

    #[test]
    fn only_marked_lines_pass_as_progress_and_the_tail_keeps_everything() {
        let input = format!(
            "warning: noise\n{p}cloning: 1 MB\n{p}cloning: 2 MB\nfatal: kept\n{long}\n{p}cut",
            p = super::PROGRESS,
            long = "x".repeat(5000)
        );
        let mut shown = Vec::new();
        let tail = super::pass_progress(input.as_bytes(), &mut shown);
        assert_eq!(
            String::from_utf8(shown).unwrap(),
            "cloning: 1 MB\ncloning: 2 MB\n",
            "only whole marked lines, without the marker"
        );
        assert!(
            tail.contains("warning: noise") && tail.contains("fatal: kept"),
            "{tail}"
        );
    }

    use super::*;

    /// A reader that hands out its bytes in the chunks given (as a pipe would).
    struct Chunks(Vec<Vec<u8>>);

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let c = self.0.remove(0);
            buf[..c.len()].copy_from_slice(&c);
            Ok(c.len())
        }
    }

    fn passed(chunks: &[&str]) -> (String, String) {
        let mut to = Vec::new();
        let tail = pass_tail(
            Chunks(chunks.iter().map(|c| c.as_bytes().to_vec()).collect()),
            &mut to,
        );
        (String::from_utf8(to).unwrap(), tail)
    }

    #[test]
    fn a_passed_through_stderr_is_the_persons_byte_for_byte_without_our_opening_lines() {
        // The person's bytes, whatever their chunks: unchanged.
        for chunks in [
            &["err\n", "more"][..],
            &["e", "r", "r\n"],
            &["50%\r", "100%\r\n"],
            &["@", "@x\n"],
            &["@@"],
            &[""],
        ] {
            let all: String = chunks.concat();
            assert_eq!(passed(chunks).0, all, "{chunks:?}");
        }
        // Our protocol lines and ssh's stale-socket line, opening the stream: left out, in any
        // chunks; the tail keeps them for the classifiers.
        let (out, tail) = passed(&[
            "Control socket connect(/tmp/cm): Connection refused\r\n@@slurm-tools PEN",
            "DING N/A\nthe person's line\n@@slurm-tools STATE later\n",
        ]);
        assert_eq!(out, "the person's line\n@@slurm-tools STATE later\n");
        assert!(tail.contains("@@slurm-tools PENDING N/A"), "{tail}");
        assert_eq!(passed(&["@@slurm-tools STATE FAILED"]).0, "");
    }

    #[test]
    fn traces_redact_credentials_and_queries_in_urls() {
        assert_eq!(
            redacted("https://bob:ghp_secret@github.com/org/repo.git"),
            "https://***@github.com/org/repo.git"
        );
        assert_eq!(
            redacted("https://hooks.example.org/T0?token=abc"),
            "https://hooks.example.org/T0?***"
        );
        assert_eq!(redacted("ssh://git@host:22/r"), "ssh://***@host:22/r");
        assert_eq!(redacted("-oControlPath=/tmp/x"), "-oControlPath=/tmp/x");
        assert_eq!(redacted("/srv/origin.git"), "/srv/origin.git");
    }

    #[test]
    fn deadline_kills_and_says_so() {
        let out = Cmd::new("sleep")
            .arg("5")
            .deadline(Duration::from_millis(100))
            .run()
            .unwrap();
        assert!(out.timed_out);
        assert_eq!(out.code, None);
        assert!(out.elapsed < Duration::from_secs(2));
    }

    #[test]
    fn exit_codes_read_as_words_in_messages() {
        assert_eq!(describe_exit(Some(41)), "exit 41");
        assert_eq!(describe_exit(None), "killed by a signal");
        let out = Cmd::new("sh").args(["-c", "exit 3"]).run().unwrap();
        assert_eq!(out.exit_text(), "exit 3");
    }

    #[test]
    fn captures_stdout_and_stderr_tail_and_stdin() {
        let out = Cmd::new("sh")
            .args(["-c", "cat; echo err >&2; exit 3"])
            .input(Input::Bytes(b"hello".to_vec()))
            .run()
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, b"hello");
        assert_eq!(out.stderr_tail, "err\n");
    }

    #[test]
    fn stderr_keeps_only_the_tail() {
        let out = Cmd::new("sh")
            .args([
                "-c",
                "head -c 100000 /dev/zero | tr '\\0' x >&2; echo END >&2",
            ])
            .run()
            .unwrap();
        assert!(out.stderr_tail.len() <= STDERR_TAIL);
        assert!(out.stderr_tail.ends_with("END\n"));
    }
}
