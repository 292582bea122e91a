//! Both syncs and a command in one ssh execution: `slurm-alloc exec --sync`, the inner loop
//! (edit, run again in a held allocation) at a login node's distance, where every execution
//! costs round trips before any work.
//!
//! The execution is a conversation. It starts while the snapshot is pushed to origin: the
//! cluster sends the untracked files' manifest (what the last sync left) and waits. We then
//! send, framed like every script, one script of three parts, and the untracked files' tar
//! stream behind it: the tracked sync's remote part (stdin at /dev/null), the untracked
//! extraction (reading the stream), and the command. Each sync part's exit code, stdout and
//! stderr come back behind a header line (`@@slurm-tools-part NAME RC OUTBYTES ERRBYTES`),
//! are checked by the same code as the tools' own, and write the same sections; the command
//! runs only when both succeeded and the checkout is at the snapshot, and its output streams
//! to our stderr as it comes. So the whole loop costs the channel's round trip, the manifest's
//! (overlapped with the push) and the command's.
//!
//! `slurm-submit --sync` runs its submission script as the command: the job's files (job
//! script, extra files) travel in the same stream, before the untracked files' tar, kept in a
//! file on the cluster that the command reads as its stdin; its output comes back as a third
//! part, captured, not streamed.
//!
//! A sync that needs executions of its own (submodules, LFS objects) runs as the tools run it,
//! and the command after it in its own execution: the same result, more round trips.

use super::{tracked, untracked};
use crate::contract::schema::Via;
use crate::remote::quote::Script;
use crate::remote::ssh::Ssh;
use crate::support::process::{Output, Received, Running};
use crate::{Context, Result, ToolError};
use std::io::Write;
use std::time::{Duration, Instant};

/// How [`start`] went on.
pub enum Start {
    /// Ready: run the command with [`Fused::run`].
    Fused(Box<Fused>),
    /// The syncs ran in executions of their own (said why); the command runs in its own too.
    Separate,
}

/// The syncs prepared and the conversation open.
pub struct Fused {
    started: Instant,
    tracked: tracked::Prepared,
    untracked: untracked::Input,
    tracked_script: Script,
    conversation: Conversation,
    lock_wait: u64,
}

/// The command run after both syncs.
pub struct Command<'a> {
    pub script: &'a Script,
    /// What the command reads on its stdin (else /dev/null): sent ahead of the untracked files'
    /// stream and read on the cluster as one block (a byte at a time, about 0.7 s a MiB, where dd
    /// has no `iflag=fullblock`), so at most [`STDIN_MAX`] bytes.
    pub stdin: Option<Vec<u8>>,
    /// Its stdout and stderr come back in the output returned (else they stream to ours).
    pub capture: bool,
}

/// The most a fused command reads on its stdin (see [`Command::stdin`]).
pub const STDIN_MAX: usize = 256 << 10;

const PART: &str = "@@slurm-tools-part ";
const MOVED: &str = "@@slurm-tools-moved";
const STALE: &str = "@@slurm-tools-stale";
const RUN: &str = "@@slurm-tools-run";

/// The conversation's opening: the manifest when asked for (none when the checkout or the
/// manifest is not there yet: then every untracked file is sent), then the framed rest.
fn opening(repo: &str, send_manifest: bool) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    s.assign("send_manifest", if send_manifest { "yes" } else { "no" })?;
    s.assign("repo", repo)?;
    s.assign("manifest", crate::repo::manifest::MANIFEST)?;
    s.raw(crate::remote::FUSED_OPENING);
    Ok(s)
}

/// An open conversation and what it will take: the manifest kept locally (its tag is checked
/// on the cluster before anything runs), or the cluster's, which it sends first.
struct Conversation {
    running: Running,
    repo: String,
    kept: Option<(String, crate::repo::manifest::Manifest)>,
}

impl Conversation {
    fn open(ssh: &Ssh, repo: &str, use_kept: bool) -> Result<Conversation> {
        let kept = use_kept
            .then(|| untracked::kept_copy(&ssh.host, repo))
            .flatten();
        let running = ssh.start_script_through(&opening(repo, kept.is_none())?)?;
        Ok(Conversation {
            running,
            repo: repo.to_string(),
            kept,
        })
    }
}

/// The untracked sync's options in a fused conversation: the defaults, with its lock's wait.
fn untracked_options(lock_wait: u64) -> untracked::Options {
    untracked::Options {
        lock_wait,
        ..untracked::Options::default()
    }
}

/// The tracked sync prepared (the snapshot), pushed to origin, and the conversation opened.
/// `lock_wait`: seconds to wait while another sync holds the remote clone's lock.
pub fn start(ctx: &mut Context, ssh: &Ssh, lock_wait: u64) -> Result<Start> {
    let ready = prepare(ctx, ssh, lock_wait)?;
    if let Some(why) = ready.not_fusable() {
        ready.separately(ctx, why)?;
        return Ok(Start::Separate);
    }
    Ok(Start::Fused(Box::new(ready.push(ctx, ssh)?)))
}

/// Both syncs prepared locally (the snapshot made, the layout derived into the document) and,
/// when they can run in the command's execution, the conversation opened: nothing has left the
/// machine yet, so a caller can check the rest of its input before [`Ready::push`].
pub struct Ready {
    started: Instant,
    tracked: tracked::Prepared,
    untracked: untracked::Input,
    conversation: Option<Conversation>,
    lock_wait: u64,
}

/// See [`Ready`]. `lock_wait`: seconds to wait while another sync holds the remote clone's lock
/// (then the sync fails naming the holder, and nothing runs).
pub fn prepare(ctx: &mut Context, ssh: &Ssh, lock_wait: u64) -> Result<Ready> {
    let started = Instant::now();
    let opts = tracked::Options {
        via: Via::Origin,
        dry_run: false,
        allow_unrelated: false,
        lock_wait,
    };
    // The conversation opens while the snapshot is made, when the document already names the
    // remote clone (as it does from the second run on).
    let layout = crate::remote::layout::LayoutInput::read(&ctx.doc)?;
    let early = crate::remote::layout::Layout::of(&layout)
        .repo_path(None)?
        .map(|d| d.path);
    let mut conversation = match &early {
        Some(repo) => Some(Conversation::open(ssh, repo, true)?),
        None => None,
    };
    let prepared = tracked::prepare(&opts, ctx)?;
    // The untracked part's input, read once the tracked part derived the layout into the
    // document.
    let untracked = untracked::Input::read(&ctx.doc)?;
    let conversation = match conversation.take() {
        _ if prepared.not_fusable().is_some() => None,
        Some(c) if c.repo == prepared.remote_repo_path() => Some(c),
        _ => Some(Conversation::open(ssh, prepared.remote_repo_path(), true)?),
    };
    Ok(Ready {
        started,
        tracked: prepared,
        untracked,
        conversation,
        lock_wait,
    })
}

impl Ready {
    /// Why the syncs cannot run in the command's execution, if they cannot.
    pub fn not_fusable(&self) -> Option<&'static str> {
        self.tracked.not_fusable()
    }

    /// The tracked sync's section as it will be written (its `commit` is the snapshot).
    pub fn synced(&self) -> &crate::contract::schema::SyncTracked {
        self.tracked.section()
    }

    /// Both syncs as the tools run them, said why; the command then runs on its own.
    pub fn separately(self, ctx: &mut Context, why: &str) -> Result<()> {
        drop(self.conversation);
        ctx.note(format!(
            "syncing first in executions of their own ({why}), then running the command"
        ));
        tracked::run(self.tracked, ctx)?;
        untracked::sync(&untracked_options(self.lock_wait), ctx)?;
        Ok(())
    }

    /// The snapshot pushed to origin: ready for [`Fused::run`]. Only when [`Ready::not_fusable`]
    /// says nothing.
    pub fn push(self, ctx: &mut Context, ssh: &Ssh) -> Result<Fused> {
        let conversation = match self.conversation {
            Some(c) => c,
            None => Conversation::open(ssh, self.tracked.remote_repo_path(), true)?,
        };
        let tracked_script = tracked::push_for_fused(&self.tracked, ctx)?;
        Ok(Fused {
            started: self.started,
            tracked: self.tracked,
            untracked: self.untracked,
            tracked_script,
            conversation,
            lock_wait: self.lock_wait,
        })
    }
}

impl Fused {
    /// The snapshot the command will run on.
    pub fn snapshot(&self) -> &str {
        self.tracked.snapshot()
    }

    /// Finish both syncs and run `command` after them in the same execution. Unless captured,
    /// the command's stdout goes to ours and its stderr to ours as they come; the output
    /// returned has its exit code.
    pub fn run(
        self: Box<Self>,
        ctx: &mut Context,
        ssh: &Ssh,
        command: Command,
        deadline: Duration,
    ) -> Result<Output> {
        debug_assert!(command.stdin.as_ref().map_or(0, Vec::len) <= STDIN_MAX);
        let Fused {
            started,
            tracked: prepared,
            untracked,
            tracked_script,
            conversation,
            lock_wait,
        } = *self;
        let repo = prepared.remote_repo_path().to_string();
        let parts = Parts {
            ssh,
            repo: &repo,
            command: &command,
            prepared: &prepared,
            tracked_script: &tracked_script,
            untracked: &untracked,
            started,
            deadline,
            lock_wait,
        };
        let mut attempt = parts.send(conversation, ctx)?;
        let first = attempt.reader.part()?;
        let first = if attempt.reader.stale {
            // Another machine (or a sync cut short) wrote the cluster's manifest since this
            // machine's copy: ask the cluster for it, in a new execution.
            ctx.note("the untracked files' manifest on the cluster is not the one this machine last wrote: asking for it");
            drop(attempt);
            attempt = parts.send(Conversation::open(ssh, &repo, false)?, ctx)?;
            attempt.reader.part()?
        } else {
            first
        };
        // The tracked part.
        let Some(t) = first else {
            return Err(attempt.reader.broke(ssh, "the tracked sync"));
        };
        let deleting =
            tracked::finish_fused(prepared, ctx, t.code, &t.stdout).map_err(|e| t.attach(e))?;
        // The temporary branch is deleted from origin while the cluster goes on (a push to the
        // git server, a round trip or more): its result is recorded once the command ended.
        let out = after_tracked(ctx, ssh, &repo, &command, started, attempt);
        deleting.settle(ctx)?;
        out
    }
}

/// What a fused conversation sends and waits for.
struct Parts<'a> {
    ssh: &'a Ssh,
    repo: &'a str,
    command: &'a Command<'a>,
    prepared: &'a tracked::Prepared,
    tracked_script: &'a Script,
    untracked: &'a untracked::Input,
    started: Instant,
    deadline: Duration,
    lock_wait: u64,
}

impl Parts<'_> {
    /// The untracked files' plan against the manifest (kept here, else the cluster's, read
    /// first), then the script, the command's stdin and the tar stream sent.
    fn send(&self, conversation: Conversation, ctx: &mut Context) -> Result<Sent> {
        let Conversation { running, kept, .. } = conversation;
        let (mut running, previous, id) = match kept {
            Some((id, m)) => (running, Some(m), Some(id)),
            None => {
                let (r, m) = untracked::read_manifest(running, self.ssh, self.repo)?;
                (r, m, None)
            }
        };
        let local =
            untracked::Local::of(ctx, self.untracked)?.with_snapshot(self.prepared.snapshot());
        let plan = untracked::Plan::make(
            &untracked_options(self.lock_wait),
            ctx,
            &self.ssh.host,
            local,
            previous,
            self.started,
        );
        let script = parts(
            self.tracked_script,
            &plan.script()?,
            self.command,
            self.repo,
            self.prepared.snapshot(),
            id.as_deref(),
        )?;
        let payload = plan.payload(ctx);
        let stdin = self.command.stdin.as_deref().unwrap_or_default();
        let written = running
            .send(&crate::remote::ssh::framed(&script))
            .and_then(|()| running.send(stdin))
            .and_then(|()| payload(&mut crate::support::process::StdinWriter(&mut running)));
        running.close_stdin();
        Ok(Sent {
            plan,
            written,
            reader: Reader::new(running, self.deadline),
        })
    }
}

/// After the tracked part: the untracked part (after the checkout was checked: the cluster says
/// MOVED if the checkout left the snapshot in between), then the command, captured or streamed.
fn after_tracked(
    ctx: &mut Context,
    ssh: &Ssh,
    repo: &str,
    command: &Command,
    started: Instant,
    attempt: Sent,
) -> Result<Output> {
    let Sent {
        plan,
        written: sent,
        mut reader,
    } = attempt;
    let Some(u) = reader.part()? else {
        if reader.moved {
            return Err(ToolError::remote(format!(
                "the remote checkout {repo} left the snapshot before the command could run"
            ))
            .with_hint("something changed the remote clone during the sync; rerun"));
        }
        return Err(reader.broke(ssh, "the untracked sync"));
    };
    if let Err(e) = &sent {
        // The stream broke on our side (the cluster said why in the part, or did not).
        ctx.warn(format!("the tar stream to {} broke: {e}", ssh.host));
    }
    let (unlinked, deleted) = plan.outcome(u.code, &u.stdout).map_err(|e| u.attach(e))?;
    plan.finish(ctx, unlinked, deleted)?;
    if command.capture {
        let Some(c) = reader.part()? else {
            return Err(reader.broke(ssh, "the command"));
        };
        ctx.note(format!(
            "synced in the command's own ssh execution ({:.2} s with the command)",
            started.elapsed().as_secs_f64()
        ));
        return Ok(reader.captured(c));
    }
    if !reader.run()? {
        return Err(reader.broke(ssh, "the command"));
    }
    ctx.note(format!(
        "synced in the command's own ssh execution ({:.2} s to the command's start)",
        started.elapsed().as_secs_f64()
    ));
    let out = reader.stream()?;
    if out.code == Some(255) {
        return Err(ssh.failure_error(&out));
    }
    Ok(out)
}

/// A conversation with the script and the stream sent.
struct Sent {
    plan: untracked::Plan,
    written: std::io::Result<()>,
    reader: Reader,
}

/// The script after the opening: the command's stdin into a file, both sync parts, each
/// reported behind a header, then the command when both succeeded and the checkout is at the
/// snapshot (reported as a third part when captured).
fn parts(
    tracked: &Script,
    untracked: &Script,
    command: &Command,
    repo: &str,
    snapshot: &str,
    kept_id: Option<&str>,
) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    s.assign("fused_repo", repo)?;
    s.assign("fused_snapshot", snapshot)?;
    let stdin_bytes = command.stdin.as_ref().map_or(0, Vec::len);
    s.assign("fused_in_bytes", &stdin_bytes.to_string())?;
    s.raw(crate::remote::FUSED_PARTS);
    if let Some(id) = kept_id {
        // The manifest this machine kept must be the cluster's: else nothing runs, and it is
        // asked for.
        s.raw("fused_check_kept");
        s.arg(crate::repo::manifest::MANIFEST_ID)?;
        s.arg(id)?;
        s.raw("\n");
    }
    s.raw("fused_start\n");
    // Each part runs in a subshell (its functions called only from its own EXIT trap look
    // unreachable to shellcheck there).
    s.raw("# shellcheck disable=SC2317\n(\n");
    s.append(tracked);
    s.raw("\n) </dev/null >\"$fused_out\" 2>\"$fused_err\"\nfused_part tracked $?\n");
    s.raw("# shellcheck disable=SC2317\n(\n");
    s.append(untracked);
    s.raw("\n) >\"$fused_out\" 2>\"$fused_err\"\nfused_part untracked $?\n");
    if command.capture {
        s.raw("# shellcheck disable=SC2317\n(\n");
        s.append(command.script);
        s.raw("\n) <\"$fused_in\" >\"$fused_out\" 2>\"$fused_err\"\nfused_part command $?\n");
    } else {
        s.raw("fused_hand_over\n");
        s.append(command.script);
    }
    Ok(s)
}

/// One sync part as the cluster reported it.
struct Part {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Part {
    /// The part's stderr goes with its error, as a tool's own execution's would.
    fn attach(&self, e: ToolError) -> ToolError {
        if e.command.is_some() || self.stderr.trim().is_empty() {
            return e;
        }
        e.with_command(crate::contract::error::CommandRecord {
            argv: vec![
                "ssh".into(),
                "(the sync part of slurm-alloc exec --sync)".into(),
            ],
            exit_code: self.code,
            stderr_tail: self.stderr.clone(),
        })
    }
}

/// Reads the conversation's stdout: the parts, then the command's stream.
struct Reader {
    conversation: Option<Running>,
    buf: Vec<u8>,
    eof: bool,
    deadline: Instant,
    moved: bool,
    stale: bool,
}

impl Reader {
    fn new(conversation: Running, deadline: Duration) -> Reader {
        Reader {
            conversation: Some(conversation),
            buf: Vec::new(),
            eof: false,
            deadline: Instant::now() + deadline,
            moved: false,
            stale: false,
        }
    }

    /// More bytes; false at the end (or the deadline).
    fn fill(&mut self) -> bool {
        if self.eof {
            return false;
        }
        let Some(c) = self.conversation.as_mut() else {
            return false;
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        match c.recv(left) {
            Received::Data(b) => {
                self.buf.extend_from_slice(&b);
                true
            }
            Received::Eof | Received::TimedOut => {
                self.eof = true;
                false
            }
        }
    }

    /// The next line that starts with `@@slurm-tools-` (the lines before it are dropped: only
    /// the newline the header starts with is there).
    fn header(&mut self) -> Option<String> {
        loop {
            while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
                self.buf.drain(..=i);
                if line.starts_with("@@slurm-tools-") {
                    return Some(line);
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// The next part, or `None` when the stream ended first (or said MOVED).
    fn part(&mut self) -> Result<Option<Part>> {
        let Some(line) = self.header() else {
            return Ok(None);
        };
        if line == MOVED || line == STALE {
            self.moved = line == MOVED;
            self.stale = line == STALE;
            return Ok(None);
        }
        let bad = || {
            ToolError::remote(format!(
                "an unreadable part header from the cluster: {line:?}"
            ))
        };
        let fields: Vec<&str> = line
            .strip_prefix(PART)
            .ok_or_else(bad)?
            .split(' ')
            .collect();
        let [_, rc, out, err] = fields[..] else {
            return Err(bad());
        };
        let (Ok(rc), Ok(out), Ok(err)) = (rc.parse::<i32>(), out.parse(), err.parse()) else {
            return Err(bad());
        };
        let (Some(stdout), Some(stderr)) = (self.take(out), self.take(err)) else {
            return Ok(None);
        };
        Ok(Some(Part {
            code: Some(rc),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }))
    }

    /// The captured command's output, as a tool's own execution of it would return it.
    fn captured(mut self, c: Part) -> Output {
        let conversation = self.conversation.take().expect("the conversation is open");
        let mut out = conversation.close(Duration::from_secs(10));
        out.code = c.code;
        out.timed_out = false;
        out.stdout = c.stdout.into_bytes();
        out.stderr_tail = crate::support::process::tail_of(&c.stderr);
        out
    }

    /// Whether the command starts (its marker came).
    fn run(&mut self) -> Result<bool> {
        Ok(self.header().as_deref() == Some(RUN))
    }

    /// The command's output to our stdout until the end (its stderr reached ours directly); how
    /// the execution ended.
    fn stream(mut self) -> Result<Output> {
        let mut out = std::io::stdout();
        let _ = out.write_all(&self.buf).and_then(|()| out.flush());
        self.buf.clear();
        let mut c = self.conversation.take().expect("the conversation is open");
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match c.recv(left) {
                Received::Data(b) => {
                    let _ = out.write_all(&b).and_then(|()| out.flush());
                }
                Received::Eof | Received::TimedOut => break,
            }
        }
        Ok(c.close(Duration::from_secs(10)))
    }

    /// The execution ended before `what` reported: ssh's own failure, or what the cluster said.
    fn broke(&mut self, ssh: &Ssh, what: &str) -> ToolError {
        let Some(c) = self.conversation.take() else {
            return ToolError::remote(format!("the ssh execution ended before {what} reported"));
        };
        let out = c.close(Duration::from_secs(10));
        if out.code == Some(255) {
            return ssh.failure_error(&out);
        }
        ToolError::remote(format!(
            "the ssh execution to {} ended before {what} reported ({})",
            ssh.host,
            out.exit_text()
        ))
        .with_hint("rerun; if it happens again, run the pipeline's tools one by one to see which part fails")
        .with_command(out.record())
    }
}

impl Drop for Reader {
    /// An error before the end: the execution is closed (the cluster side has ended or ends at
    /// the closed stdin) and traced like any other.
    fn drop(&mut self) {
        if let Some(c) = self.conversation.take() {
            let _ = c.close(Duration::from_secs(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_passes_the_static_checks() {
        crate::remote::script_check::assert_clean(
            "alloc-sync-opening",
            opening("/h/u/work/repo", true).unwrap().as_str(),
        );
        crate::remote::script_check::assert_clean(
            "alloc-sync-opening-kept",
            opening("/h/u/work/repo", false).unwrap().as_str(),
        );
        // The real parts, as a loop sends them.
        let refresh = vec!["cpp".to_string()];
        let roots = vec!["a".repeat(40)];
        let plan = crate::sync::tracked_remote::Plan {
            repo: "/h/u/work/repo",
            url: "/srv/origin.git",
            temp: "u_m_20261204T000000Z",
            work: "/h/u/work/repo/work_dirs/m",
            refresh: &refresh,
            roots: &roots,
            allow_unrelated: false,
            lock_wait: 600,
            modules: &[],
            lfs: &[],
            show_progress: false,
        };
        let a = crate::sync::tracked_remote::origin_script(&plan).unwrap();
        let items = vec![crate::repo::archive::Item {
            source: crate::repo::archive::Source::File("/dev/null".into()),
            name: "data/u.bin".into(),
        }];
        let b =
            untracked::extract_script("/h/u/work/repo", &items, &["gone.txt".to_string()], false)
                .unwrap();
        let mut c = Script::new();
        c.raw("srun true\n");
        for kept in [None, Some("m-1")] {
            for (stdin, capture) in [(None, false), (Some(b"x".to_vec()), true)] {
                let command = Command {
                    script: &c,
                    stdin,
                    capture,
                };
                crate::remote::script_check::assert_clean(
                    "alloc-sync-parts",
                    parts(&a, &b, &command, "/h/u/work/repo", &"c".repeat(40), kept)
                        .unwrap()
                        .as_str(),
                );
            }
        }
    }
}
