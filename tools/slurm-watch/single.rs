//! The watch of one job (a sweep is `array.rs`): one poll after another over one ssh session
//! (`poll.rs`), each reply read in a fixed order: the logs first (a hang or an OOM line decides
//! even while the job still runs), then the queue (pending explained, the import said, a stall
//! decided), then, once the job has left the queue, accounting.

use super::scan::{Findings, Patterns, Stream};
use super::verdict::{final_verdict, Verdict};
use super::{
    accounting_says, describe_queue, from_scontrol, hang_detected, monitor_timed_out, poll,
    verdict, Cli, Events, Hang, Job, Link, State,
};
use shared::contract::schema::{self, Source};
use shared::remote::forensics;
use shared::remote::ssh::Ssh;
use shared::slurm::{self, AccountingEntry};
use shared::support::ui::Progress;
use shared::{Context, ErrorKind, Result, ToolError};
use std::time::{Duration, Instant};

/// What the document asks of the watch, checked once.
pub struct Settings {
    pub monitor_timeout: Option<i64>,
    pub max_interval: f64,
    pub patterns: Patterns,
    /// The cluster's login is MFA: a lost master needs the person.
    pub mfa: bool,
    pub stall: Option<Duration>,
    pub collect_forensics: bool,
    pub install_py_spy: bool,
    /// Where the forensics and the log's copy are kept.
    pub save_to: forensics::SaveTo,
}

/// What one step of the watch came to: a verdict, or `None` (poll again).
type Step = Option<Verdict>;

/// The watch of one job as it goes.
pub struct Watch<'a> {
    cli: &'a Cli,
    job: &'a Job,
    ssh: &'a Ssh,
    set: &'a Settings,
    pub events: Events,
    link: Link<'a, poll::Reply>,
    pub st: State,
    silence: forensics::Silence,
    progress: Progress,
    pub started: Instant,
    /// How long the next poll waits first (on the cluster side, inside the session), and the
    /// interval it grows from.
    wait: f64,
    interval: f64,
    marker_seen: bool,
    importing_said: Option<(String, String)>,
    outage: Option<Instant>,
    backoff: f64,
    last_state: String,
    last_reason: String,
    pending_facts: slurm::pending::Facts,
    progress_said: Option<u8>,
    waiting_for_accounting: Option<Instant>,
    /// The forensics of a hang, when collected.
    pub evidence: Option<schema::Forensics>,
}

impl<'a> Watch<'a> {
    pub fn new(
        ctx: &Context,
        cli: &'a Cli,
        job: &'a Job,
        ssh: &'a Ssh,
        set: &'a Settings,
        events: Events,
    ) -> Result<Watch<'a>> {
        let same_log = job.out == job.err;
        let link = Link::new(
            ssh,
            poll::script(&poll::Target {
                job_id: &job.id,
                out: &job.out,
                err: (!same_log).then_some(job.err.as_str()),
                end_marker: job.end_marker.as_deref(),
            })?,
            Box::new(poll::parse_at),
            |r: &poll::Reply| r.chunks.iter().map(|c| c.data.len() as u64).sum(),
        );
        Ok(Watch {
            cli,
            job,
            ssh,
            set,
            events,
            link,
            st: State {
                streams: [Stream::default(), Stream::default()],
                findings: Findings::default(),
                last_queue: None,
                polls: 0,
                bytes: 0,
            },
            silence: forensics::Silence::default(),
            progress: Progress::new(ctx.tool),
            started: Instant::now(),
            wait: 0.0,
            interval: 1.0,
            marker_seen: false,
            importing_said: None,
            outage: None,
            backoff: 2.0,
            last_state: String::new(),
            last_reason: String::new(),
            pending_facts: slurm::pending::Facts::default(),
            progress_said: None,
            waiting_for_accounting: None,
            evidence: None,
        })
    }

    /// Poll until there is a verdict; the session is closed then.
    pub fn run(&mut self, ctx: &mut Context) -> Result<Verdict> {
        let verdict = loop {
            match self.step(ctx) {
                Ok(None) => {}
                Ok(Some(v)) => break v,
                Err(e) => {
                    self.progress.finish();
                    return Err(e);
                }
            }
        };
        self.link.close();
        self.progress.finish();
        Ok(verdict)
    }

    fn step(&mut self, ctx: &mut Context) -> Result<Step> {
        if let Some(limit) = self.set.monitor_timeout {
            let left = Duration::from_secs(limit as u64).saturating_sub(self.started.elapsed());
            if left.is_zero() {
                return Ok(Some(monitor_timed_out(
                    ctx, self.cli, self.ssh, self.job, &self.st, limit,
                )));
            }
            self.wait = self.wait.min(left.as_secs_f64());
        }
        self.st.polls += 1;
        let Some(reply) = self.poll(ctx)? else {
            return Ok(None);
        };
        if reply.marker && !self.marker_seen {
            // The job's command ended: its end is near, look closely until Slurm agrees.
            self.marker_seen = true;
            self.interval = 0.5;
        }
        // Logs first: a hang or an OOM line decides even while the job still runs.
        let capped = self.read_logs(ctx, &reply);
        if let Some(line) = self.st.findings.hang.clone() {
            return Ok(Some(self.hang(ctx, "pattern", line, Vec::new())));
        }
        if let Some(q) = reply.queue.as_deref().and_then(slurm::parse_squeue) {
            let step = self.in_queue(ctx, q, &reply, capped);
            if step.is_none() && !capped {
                self.wait = self.interval;
                self.interval = (self.interval * 1.5).min(self.set.max_interval);
            }
            return Ok(step);
        }
        if let Some(e) = &reply.queue_error {
            return self.controller_down(ctx, e);
        }
        if capped {
            // Gone from squeue, but the logs are not read to their end yet: read on first, so
            // a pattern in the last lines still counts.
            return Ok(None);
        }
        self.gone(ctx, &reply)
    }

    /// One poll's reply; `None` after a failed poll (waited out with a growing backoff, up to
    /// --outage-limit). A lost MFA master is the person's to fix: an error at once.
    fn poll(&mut self, ctx: &mut Context) -> Result<Option<poll::Reply>> {
        let offsets = (self.st.streams[0].offset, self.st.streams[1].offset);
        let watch_marker = self.job.end_marker.is_some() && !self.marker_seen;
        let request = poll::request(self.wait, watch_marker, offsets.0, offsets.1);
        let reply = match self.link.ask(&request, self.wait) {
            Ok(r) => r,
            Err(e) if e.kind == ErrorKind::NeedsPerson => {
                // The MFA master is gone: only the person can log in again. The job is untouched.
                return Err(if self.set.mfa {
                    e.with_hint(format!(
                        "log in again (`slurm-ssh-preflight --establish` on this document), then rerun slurm-watch on the same document to resume; job {} was not touched",
                        self.job.id
                    ))
                } else {
                    e
                });
            }
            Err(e) => {
                ctx.warn(format!(
                    "poll failed ({}); the job is not touched, retrying",
                    e.message
                ));
                None
            }
        };
        self.wait = 0.0;
        let Some(reply) = reply else {
            let since = *self.outage.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(self.cli.outage_limit) {
                return Err(ToolError::remote(format!(
                    "could not reach {} for {} s while watching job {}; no verdict",
                    self.ssh.host, self.cli.outage_limit, self.job.id
                ))
                .with_hint("check the connection (slurm-ssh-preflight), then rerun slurm-watch on the same document to resume"));
            }
            std::thread::sleep(Duration::from_secs_f64(self.backoff));
            self.backoff = (self.backoff * 2.0).min(60.0);
            return Ok(None);
        };
        self.outage = None;
        self.backoff = 2.0;
        if self.st.polls == 1 {
            shared::support::testhook::pause("watch:polled");
        }
        Ok(Some(reply))
    }

    /// The reply's new log bytes: lines scanned (and shown with --follow). True when a chunk was
    /// capped (more is there to read).
    fn read_logs(&mut self, ctx: &mut Context, reply: &poll::Reply) -> bool {
        let mut capped = false;
        for c in &reply.chunks {
            let i = usize::from(c.name == "err");
            self.st.bytes += c.data.len() as u64;
            capped |= c.offset + (c.data.len() as u64) < c.size;
            let lines = self.st.streams[i].take(c.offset, &c.data);
            self.silence.saw(c.data.len(), &lines, Instant::now());
            if self.cli.follow {
                for l in &lines {
                    self.progress.finish();
                    ctx.note(format!("{}| {l}", c.name));
                }
            }
            self.set.patterns.scan(&lines, &mut self.st.findings);
        }
        capped
    }

    /// A hang decided (`pattern` or `stalled`): the session closed, the evidence collected, the
    /// job cancelled.
    fn hang(
        &mut self,
        ctx: &mut Context,
        reason: &'static str,
        what: String,
        silent: Vec<schema::SilentRank>,
    ) -> Verdict {
        self.progress.finish();
        self.link.close();
        let (v, e) = hang_detected(
            ctx,
            self.ssh,
            self.job,
            &self.st,
            &mut self.events,
            Hang {
                save_to: &self.set.save_to,
                reason,
                what,
                silent,
                rank_output: self.silence.rank_output(Instant::now()),
                collect: self.set.collect_forensics,
                install: self.set.install_py_spy,
            },
        );
        self.evidence = e;
        v
    }

    /// The job is in the queue: its state said as it changes, a stall decided, and a job that
    /// completes with accounting's final word judged at once.
    fn in_queue(
        &mut self,
        ctx: &mut Context,
        q: slurm::QueueEntry,
        reply: &poll::Reply,
        capped: bool,
    ) -> Step {
        if !reply.pending_facts.is_empty() {
            self.pending_facts = slurm::pending::Facts::from_lines(&reply.pending_facts);
        }
        self.say_state(ctx, &q);
        if q.state == "RUNNING" {
            if let Some((why, silent)) = self.stalled() {
                return Some(self.hang(ctx, "stalled", why, silent));
            }
        }
        let completing = q.state == "COMPLETING";
        self.st.last_queue = Some(q);
        if completing && !capped {
            if let Some(v) = self.completed(reply) {
                self.progress.finish();
                return Some(v);
            }
            self.interval = self.interval.min(0.5);
        }
        None
    }

    /// The queue state as it changes: pending explained, running, progress, the container's
    /// import, the progress line.
    fn say_state(&mut self, ctx: &mut Context, q: &slurm::QueueEntry) {
        if q.state == "PENDING" && (q.state != self.last_state || q.reason != self.last_reason) {
            self.say_pending(ctx, q);
        } else if q.state == "RUNNING" && q.state != self.last_state {
            self.events
                .send("running", |e| e.state = Some(q.state.clone()));
        }
        if self.st.findings.progress.is_some() && self.st.findings.progress != self.progress_said {
            self.progress_said = self.st.findings.progress;
            let percent = self.progress_said.map(u32::from);
            self.events.send("progress", |e| e.percent = percent);
        }
        if q.state != self.last_state {
            if q.state == "RUNNING" && !self.marker_seen {
                self.interval = 1.0;
            }
            if !self.progress.is_enabled() {
                ctx.note(describe_queue(q));
            }
            self.last_state = q.state.clone();
        }
        // Once the job has started (a short one may be COMPLETING by the poll after its import
        // ended: the end is said then too).
        if q.state != "PENDING" && self.st.findings.importing != self.importing_said {
            self.say_import(ctx);
        }
        let container = self.job.container_image.is_some();
        let (findings, bytes) = (&self.st.findings, self.st.bytes);
        self.progress.update(|| {
            let mut s = describe_queue(q);
            if let Some((_, what)) = &findings.importing {
                s.push_str(&format!(", {what}"));
            } else if container && q.state == "RUNNING" && bytes == 0 {
                s.push_str(", starting its container (no output yet)");
            }
            if let Some(p) = findings.progress {
                s.push_str(&format!(", build {p}%"));
            }
            s
        });
    }

    /// A pending job's reason in its category, with the figure and the action (once per reason).
    fn say_pending(&mut self, ctx: &mut Context, q: &slurm::QueueEntry) {
        let why = slurm::pending::explain(
            &self.job.id,
            &q.reason,
            &self.pending_facts,
            q.start,
            shared::support::clock::unix_now(),
        );
        self.events.send("pending", |e| {
            e.state = Some(q.state.clone());
            e.reason = Some(q.reason.clone());
            e.estimated_start = q.start;
            e.category = Some(why.category.name().to_string());
            e.explanation = Some(why.message.clone());
            e.action = Some(why.action.clone());
        });
        self.progress.finish();
        ctx.note(format!(
            "job {} is pending ({}, {}): {}; what would help: {}",
            self.job.id,
            q.reason,
            why.category.name(),
            why.message,
            why.action
        ));
        self.last_reason = q.reason.clone();
    }

    /// An import is silent for seconds to minutes: say when it starts and ends, so it does not
    /// look hung.
    fn say_import(&mut self, ctx: &mut Context) {
        let id = &self.job.id;
        if let Some((image, what)) = &self.st.findings.importing {
            self.events
                .send("importing", |e| e.image = Some(image.clone()));
            self.progress.finish();
            ctx.note(format!("job {id}: {what} (the command starts after it)"));
        } else if let Some((image, what)) = &self.importing_said {
            self.progress.finish();
            if what.starts_with("pyxis") {
                ctx.note(format!("job {id}: the container image is imported"));
            } else {
                ctx.note(format!(
                    "job {id}: the container image {image} is in the image cache"
                ));
            }
        }
        self.importing_said = self.st.findings.importing.clone();
    }

    /// A running job's silence: output counts from the start, and not while a container image
    /// is imported (which prints nothing while it works). Some((why, silent ranks)) once it is
    /// over `stall_seconds`.
    fn stalled(&mut self) -> Option<(String, Vec<schema::SilentRank>)> {
        if !self.silence.running() || self.st.findings.importing.is_some() {
            self.silence.restart(Instant::now());
            return None;
        }
        match (self.set.stall, self.marker_seen) {
            (Some(limit), false) => self.silence.stalled(limit, Instant::now()),
            _ => None,
        }
    }

    /// The job's script ended by itself (its end marker is there) and its nodes are cleaning up
    /// (epilog): when accounting already says COMPLETED or FAILED, that is the verdict, without
    /// waiting for the cleanup. Anything else (a node failure that Slurm may requeue, a time
    /// limit, a cancellation) waits until the job has left the queue. The logs were read after
    /// squeue in this same poll: complete. While the job completes, accounting may already say
    /// FAILED before it has the exit code (0:0 for a job that exited 3: seen in a full run):
    /// only a record whose exit code agrees with its state is taken; otherwise the final record
    /// decides.
    fn completed(&self, reply: &poll::Reply) -> Option<Verdict> {
        let marker_seen = self.marker_seen;
        let ended = |a: &AccountingEntry| {
            marker_seen
                && match a.state.as_str() {
                    "COMPLETED" => a.exit_code == "0:0",
                    "FAILED" => a.exit_code != "0:0",
                    _ => false,
                }
        };
        let acct = accounting_says(reply, ended)?;
        Some(final_verdict(
            self.job.kind,
            &self.st.findings,
            &self.set.patterns,
            &acct,
            reply.cancelled_by.clone(),
            Source::Sacct,
        ))
    }

    /// squeue failed: the controller may be down. Waited out (backoff) up to --outage-limit.
    fn controller_down(&mut self, ctx: &mut Context, e: &str) -> Result<Step> {
        ctx.warn(format!(
            "squeue failed ({e}); the controller may be down, retrying"
        ));
        let since = *self.outage.get_or_insert_with(Instant::now);
        if since.elapsed() > Duration::from_secs(self.cli.outage_limit) {
            return Err(ToolError::remote(format!(
                "the Slurm controller did not answer for {} s; no verdict for job {}",
                self.cli.outage_limit, self.job.id
            ))
            .with_hint("rerun slurm-watch on the same document once the controller is back"));
        }
        self.wait = self.backoff;
        self.backoff = (self.backoff * 2.0).min(60.0);
        Ok(None)
    }

    /// Gone from squeue: accounting decides (sacct's answer and "accounting is disabled" never
    /// come in the same reply); without accounting, scontrol or the end marker. Not in sacct yet
    /// (accounting lags), or not final: wait, never guess.
    fn gone(&mut self, ctx: &mut Context, reply: &poll::Reply) -> Result<Step> {
        if let Some(v) = self.final_word(ctx, reply) {
            self.progress.finish();
            return Ok(Some(v));
        }
        let since = *self.waiting_for_accounting.get_or_insert_with(Instant::now);
        if let Some(e) = &reply.accounting_error {
            ctx.warn(format!("sacct failed ({e}); retrying"));
        }
        if since.elapsed() > Duration::from_secs(self.cli.outage_limit) {
            return Err(ToolError::remote(format!("job {} left the queue but its end was not recorded within {} s; no verdict", self.job.id, self.cli.outage_limit))
                .with_hint("check `sacct -j <id>` on the cluster; rerun slurm-watch on the same document to resume"));
        }
        self.wait = if since.elapsed() < Duration::from_secs(5) {
            0.5
        } else {
            2.0
        };
        Ok(None)
    }

    /// The verdict of a job that left the queue, when the cluster has its final word.
    fn final_word(&mut self, ctx: &mut Context, reply: &poll::Reply) -> Option<Verdict> {
        let (kind, findings, patterns) = (self.job.kind, &self.st.findings, &self.set.patterns);
        if let Some(acct) = accounting_says(reply, |a| slurm::is_final(&a.state)) {
            let by = reply.cancelled_by.clone();
            return Some(final_verdict(
                kind,
                findings,
                patterns,
                &acct,
                by,
                Source::Sacct,
            ));
        }
        if !reply.accounting_disabled {
            return None;
        }
        if reply.scontrol_purged {
            self.progress.finish();
            ctx.warn("accounting is disabled on this cluster and Slurm no longer has the job's record (MinJobAge passed): the verdict comes from the job's end marker and logs");
            return Some(verdict::purged_verdict(
                kind,
                findings,
                patterns,
                reply.marker_text.as_deref(),
            ));
        }
        let acct = reply.scontrol.as_deref().and_then(from_scontrol)?;
        if !slurm::is_final(&acct.state) {
            return None;
        }
        self.progress.finish();
        ctx.warn("accounting is disabled on this cluster: the verdict comes from scontrol");
        Some(final_verdict(
            kind,
            findings,
            patterns,
            &acct,
            None,
            Source::Scontrol,
        ))
    }
}
