//! A sweep's job array (docs/contract.md, "sweep"): every task followed in one ssh session,
//! with one squeue of the whole array per poll and at most one sacct (only when a task left the
//! queue), whatever the number of tasks (shared/src/remote/sh/array-poll.sh). Each task's logs
//! are read incrementally, its hang decided on its own (the hang pattern in its log, or
//! `stall_seconds` of silence while it runs: that task alone is cancelled), and it ends with its
//! own verdict, judged exactly as a single job's (`verdict::final_verdict`). The report has a
//! row per task; its status is PASSED only when every task passed.

use super::scan::{Findings, Patterns, Stream};
use super::verdict::{final_verdict, Verdict};
use super::{publish, Events, Link};
use shared::contract::schema::{JobKind, Report, Source, Status, SweepTask, TaskReport};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::slurm::{self, AccountingEntry};
use shared::{Context, ErrorKind, Outcome, Result, ToolError};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The most log bytes one poll brings back per task log (a poll that hits it is followed at once
/// by the next).
const CHUNK_CAP: u64 = 4 * 1024 * 1024;

/// What the watch of a sweep needs from the document.
pub struct Setup<'a> {
    pub id: &'a str,
    /// The task logs, with `%a` for the index.
    pub out: &'a str,
    pub err: &'a str,
    pub tasks: &'a [SweepTask],
    pub patterns: &'a Patterns,
    pub stall: Option<Duration>,
    pub monitor_timeout: Option<i64>,
    pub max_interval: f64,
    pub outage_limit: u64,
    pub follow: bool,
    /// `sweep_done`: the tasks an earlier attempt already judged.
    pub done: &'a [TaskReport],
}

/// One task, as followed.
struct Task {
    index: u32,
    params: serde_json::Map<String, serde_json::Value>,
    streams: [Stream; 2],
    findings: Findings,
    state: Option<String>,
    nodes: Option<String>,
    used: Option<String>,
    /// The last time its logs grew (or it started running).
    grew: Option<Instant>,
    /// When it was first seen gone from the queue without an end in accounting.
    gone: Option<Instant>,
    capped: bool,
    /// The last poll brought its logs (a task that ended while pending is read once more
    /// before its verdict).
    read: bool,
    row: Option<TaskReport>,
    source: Source,
}

impl Task {
    fn label(&self) -> String {
        let words: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                format!("{k}={}", shared::remote::quote::quote_for_display(&v))
            })
            .collect();
        format!("task {} ({})", self.index, words.join(" "))
    }
}

/// One queue row of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub state: String,
    pub nodes: String,
    pub used: String,
}

/// What one poll said.
#[derive(Debug, Default)]
pub struct Reply {
    pub queue: BTreeMap<u32, QueueRow>,
    pub queue_error: Option<String>,
    /// A task's end, with its nodes (sacct, or scontrol where accounting is disabled).
    pub ended: BTreeMap<u32, (AccountingEntry, String)>,
    pub accounting_error: Option<String>,
    pub accounting_disabled: bool,
    /// Accounting is disabled and scontrol no longer knows the array (MinJobAge passed): only
    /// said after ACCT_DISABLED.
    pub scontrol_purged: bool,
    /// Who cancelled, by uid.
    pub by: BTreeMap<u32, String>,
    /// (out|err, index) → (offset, bytes, size).
    pub chunks: Vec<(String, u32, u64, Vec<u8>, u64)>,
    /// The questions this poll asked Slurm: squeue runs, sacct (or scontrol) runs.
    pub calls: (u32, u32),
}

/// The task index of an array task's id (`123_4` of array 123).
fn task_of(array: &str, id: &str) -> Option<u32> {
    id.strip_prefix(array)?.strip_prefix('_')?.parse().ok()
}

/// The task indexes of an array task id: one (`123_4`), or the tasks Slurm still holds as one
/// record (`123_[3-5,7%2]`: pending tasks, cancelled or not yet split off); empty when the id is
/// not this array's.
fn tasks_of(array: &str, id: &str) -> Vec<u32> {
    if let Some(i) = task_of(array, id) {
        return vec![i];
    }
    let Some(spec) = id
        .strip_prefix(array)
        .and_then(|r| r.strip_prefix("_["))
        .and_then(|r| r.strip_suffix(']'))
    else {
        return Vec::new();
    };
    indexes(spec)
}

/// `3-5,7%2` (an ArrayTaskId or the brackets of a job id) as its indexes; empty when malformed.
fn indexes(spec: &str) -> Vec<u32> {
    let list = spec.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) else {
            return Vec::new();
        };
        if b < a || b - a > 4_000_000 {
            return Vec::new();
        }
        out.extend(a..=b);
    }
    out
}

/// Parse the first whole reply in `bytes` (see array-poll.sh's "Prints").
pub fn parse_at(array: &str, bytes: &[u8]) -> Option<(Reply, usize)> {
    let mut r = Reply::default();
    let mut at = 0;
    loop {
        let nl = at + bytes.get(at..)?.iter().position(|b| *b == b'\n')?;
        let line = String::from_utf8_lossy(&bytes[at..nl]).into_owned();
        at = nl + 1;
        let (tag, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match tag {
            "END" => return Some((r, at)),
            "Q" => {
                let f: Vec<&str> = rest.split('|').collect();
                if let (Some(i), 5) = (f.first().and_then(|id| task_of(array, id)), f.len()) {
                    r.queue.insert(
                        i,
                        QueueRow {
                            state: f[1].to_string(),
                            nodes: f[2].to_string(),
                            used: f[3].to_string(),
                        },
                    );
                }
            }
            "QERR" => r.queue_error = Some(rest.to_string()),
            "CALLS" => {
                let mut n = rest.split(' ').map(|w| w.parse().unwrap_or(0));
                r.calls = (n.next().unwrap_or(0), n.next().unwrap_or(0));
            }
            "A" => {
                if let Some((id, tail)) = rest.split_once('|') {
                    if let Some(a) = slurm::parse_sacct(tail) {
                        let nodes = tail.rsplit('|').next().unwrap_or("").to_string();
                        for i in tasks_of(array, id) {
                            r.ended.insert(i, (a.clone(), nodes.clone()));
                        }
                    }
                }
            }
            "AERR" => r.accounting_error = Some(rest.to_string()),
            "ACCT_DISABLED" => r.accounting_disabled = true,
            "SC_PURGED" => r.scontrol_purged = true,
            "SC" => {
                let m = slurm::parse_scontrol(rest);
                let tasks = m.get("ArrayTaskId").map(|t| indexes(t)).unwrap_or_default();
                if let Some(state) = m.get("JobState") {
                    let end = AccountingEntry {
                        state: state.clone(),
                        cancelled_by_uid: None,
                        exit_code: m.get("ExitCode").cloned().unwrap_or_default(),
                        elapsed: m.get("RunTime").cloned().unwrap_or_default(),
                    };
                    let nodes = m.get("NodeList").cloned().unwrap_or_default();
                    for i in tasks {
                        r.ended.insert(i, (end.clone(), nodes.clone()));
                    }
                }
            }
            "BY" => {
                let (uid, name) = rest.split_once(' ').unwrap_or((rest, ""));
                if let Ok(uid) = uid.parse() {
                    let who = if name.is_empty() {
                        format!("uid {uid}")
                    } else {
                        name.to_string()
                    };
                    r.by.insert(uid, who);
                }
            }
            "CHUNK" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let (name, index, off, len, size) = (
                    f.first()?.to_string(),
                    f.get(1)?.parse().ok()?,
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.parse::<usize>().ok()?,
                    f.get(4)?.parse().ok()?,
                );
                let data = bytes.get(at..at + len)?.to_vec();
                at += len;
                r.chunks.push((name, index, off, data, size));
            }
            _ => {}
        }
    }
}

/// The serving loop for this array.
fn script(s: &Setup) -> Result<Script> {
    let split = |path: &str| -> (String, String) {
        match path.split_once("%a") {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (path.to_string(), String::new()),
        }
    };
    let (out_pre, out_post) = split(s.out);
    let (err_pre, err_post) = if s.err == s.out {
        (String::new(), String::new())
    } else {
        split(s.err)
    };
    let mut sc = Script::new();
    sc.raw("set -u\n");
    shared::remote::exit::assign::<shared::remote::exit::Watch>(&mut sc)?;
    sc.assign("job", s.id)?;
    sc.assign("out_pre", &out_pre)?;
    sc.assign("out_post", &out_post)?;
    sc.assign("err_pre", &err_pre)?;
    sc.assign("err_post", &err_post)?;
    sc.assign("cap", &CHUNK_CAP.to_string())?;
    sc.raw(shared::slurm::NAP);
    sc.raw(shared::remote::LOG_CHUNK);
    sc.raw(shared::remote::ARRAY_POLL);
    Ok(sc)
}

/// Slurm states a task is still in (not an end).
fn is_live(state: &str) -> bool {
    matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "REQUEUED"
            | "COMPLETING"
            | "SUSPENDED"
            | "CONFIGURING"
            | "RESIZING"
            | "REQUEUE_HOLD"
            | "REQUEUE_FED"
            | "STOPPED"
            | "SIGNALING"
            | "STAGE_OUT"
    )
}

/// The order in which a task's status decides the array's (the first one found).
const DECIDES: [Status; 7] = [
    Status::Failed,
    Status::HangDetected,
    Status::OutOfMemory,
    Status::Timeout,
    Status::Error,
    Status::Cancelled,
    Status::BuildFailed,
];

/// The array's status and summary, from its rows (pure).
pub fn summarise(rows: &[TaskReport]) -> (Status, String) {
    let mut counts: Vec<(Status, Vec<u32>)> = Vec::new();
    for r in rows {
        match counts.iter_mut().find(|(s, _)| *s == r.status) {
            Some((_, v)) => v.push(r.index),
            None => counts.push((r.status, vec![r.index])),
        }
    }
    let status = DECIDES
        .iter()
        .copied()
        .find(|s| counts.iter().any(|(c, _)| c == s))
        .unwrap_or(Status::Passed);
    let mut parts: Vec<String> = Vec::new();
    for s in std::iter::once(Status::Passed).chain(DECIDES) {
        if let Some((_, idx)) = counts.iter().find(|(c, _)| *c == s) {
            if s == Status::Passed {
                parts.push(format!("{} PASSED", idx.len()));
            } else {
                let list: Vec<String> = idx.iter().map(u32::to_string).collect();
                let noun = if idx.len() == 1 { "task" } else { "tasks" };
                parts.push(format!("{} {s} ({noun} {})", idx.len(), list.join(", ")));
            }
        }
    }
    (
        status,
        format!("{} tasks: {}", rows.len(), parts.join(", ")),
    )
}

fn row(setup: &Setup, t: &Task, v: Verdict) -> TaskReport {
    let (out_n, err_n) = if v.status == Status::Passed {
        (20, 10)
    } else {
        (100, 50)
    };
    let idx = t.index.to_string();
    TaskReport {
        index: t.index,
        job_id: format!("{}_{}", setup.id, t.index),
        params: t.params.clone(),
        status: v.status,
        slurm_state: v.slurm_state,
        exit_code: v.exit_code,
        elapsed: v.elapsed,
        summary: v.summary,
        nodes: t
            .nodes
            .clone()
            .filter(|n| !n.is_empty() && n != "(null)" && n != "None assigned"),
        remote_log: setup.out.replace("%a", &idx),
        hang_line: v.hang_line,
        excerpt: t.streams[0].last_lines(out_n),
        excerpt_err: if setup.err == setup.out {
            Vec::new()
        } else {
            t.streams[1].last_lines(err_n)
        },
        from_job: None,
    }
}

/// A verdict the watch decides itself (a hang, the monitor's limit).
fn watch_verdict(status: Status, state: &str, summary: String, used: Option<String>) -> Verdict {
    Verdict {
        status,
        slurm_state: state.to_string(),
        exit_code: None,
        elapsed: used,
        summary,
        source: Source::Watch,
        cancelled_by: None,
        success_patterns_missing: None,
        hang_line: None,
        hang_reason: None,
        excerpt_lines: None,
    }
}

/// scancel of some tasks (or of the whole array): one execution.
fn cancel(ssh: &Ssh, ids: &[String]) -> Result<()> {
    shared::remote::run::<shared::remote::Scancel>(ssh, ids)
}

/// Watch the array to the end; the report goes in the document.
/// Every task of the sweep, not yet seen.
fn new_tasks(setup: &Setup) -> Vec<Task> {
    setup
        .tasks
        .iter()
        .map(|t| Task {
            index: t.index,
            params: t.params.clone(),
            streams: [Stream::default(), Stream::default()],
            findings: Findings::default(),
            state: None,
            nodes: None,
            used: None,
            grew: None,
            gone: None,
            capped: false,
            read: false,
            row: None,
            source: Source::Sacct,
        })
        .collect()
}

/// The next poll's request: wait up to `wait` s (in quarters), then each open task's log
/// offsets and whether to read its logs (not while it pends).
fn request(tasks: &mut [Task], wait: f64) -> String {
    let open: Vec<String> = tasks
        .iter_mut()
        .filter(|t| t.row.is_none())
        .map(|t| {
            let read = t.state.as_deref() != Some("PENDING");
            t.read = read;
            format!(
                "{}:{}:{}:{}",
                t.index,
                t.streams[0].offset,
                t.streams[1].offset,
                u8::from(read)
            )
        })
        .collect();
    let quarters = (wait.max(0.0) * 4.0).round() as u64;
    format!("W {quarters} {}\n", open.join(","))
}

/// monitor_timeout_seconds reached: the array is cancelled and every open task is TIMEOUT.
fn timed_out(ctx: &Context, ssh: &Ssh, setup: &Setup, tasks: &mut [Task], limit: i64) {
    let id = setup.id.to_string();
    let cancelled = cancel(ssh, std::slice::from_ref(&id));
    if let Err(e) = &cancelled {
        ctx.warn(format!("could not cancel sweep {id}: {}", e.message));
    }
    for t in tasks.iter_mut().filter(|t| t.row.is_none()) {
        let v = watch_verdict(
            Status::Timeout,
            if cancelled.is_ok() { "CANCELLED" } else { "UNKNOWN" },
            format!("monitor_timeout_seconds ({limit} s) reached; the task was cancelled with the array"),
            t.used.clone(),
        );
        t.row = Some(row(setup, t, v));
    }
}

pub fn watch(ctx: &mut Context, ssh: &Ssh, setup: &Setup, events: &mut Events) -> Result<Outcome> {
    let started = Instant::now();
    let mut tasks = new_tasks(setup);
    ctx.note(format!(
        "watching sweep {}: {} tasks, one squeue per poll for all of them (logs: {})",
        setup.id,
        tasks.len(),
        setup.out
    ));
    let id = setup.id.to_string();
    let id_for_parse = id.clone();
    let mut link = Link::new(
        ssh,
        script(setup)?,
        Box::new(move |b: &[u8]| parse_at(&id_for_parse, b)),
        |r: &Reply| r.chunks.iter().map(|c| c.3.len() as u64).sum(),
    );
    let mut polls = 0u64;
    let mut bytes = 0u64;
    let mut wait = 0.0f64;
    let mut interval = 1.0f64;
    let mut outage: Option<Instant> = None;
    let mut backoff = 2.0f64;
    let mut last_counts = String::new();
    loop {
        if tasks.iter().all(|t| t.row.is_some()) {
            break;
        }
        if let Some(limit) = setup.monitor_timeout {
            let left = Duration::from_secs(limit as u64).saturating_sub(started.elapsed());
            if left.is_zero() {
                link.close();
                timed_out(ctx, ssh, setup, &mut tasks, limit);
                break;
            }
            wait = wait.min(left.as_secs_f64());
        }
        polls += 1;
        let reply = match link.ask(&request(&mut tasks, wait), wait) {
            Ok(r) => r,
            Err(e) if e.kind == ErrorKind::NeedsPerson => {
                return Err(e.with_hint(format!(
                    "log in again (`slurm-ssh-preflight --establish` on this document), then rerun slurm-watch on the same document to resume; sweep {id} was not touched"
                )))
            }
            Err(e) => {
                ctx.warn(format!("poll failed ({}); the sweep is not touched, retrying", e.message));
                None
            }
        };
        wait = 0.0;
        let Some(reply) = reply else {
            let since = *outage.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(setup.outage_limit) {
                return Err(ToolError::remote(format!(
                    "could not reach {} for {} s while watching sweep {id}; no verdict",
                    ssh.host, setup.outage_limit
                ))
                .with_hint("check the connection (slurm-ssh-preflight), then rerun slurm-watch on the same document to resume"));
            }
            std::thread::sleep(Duration::from_secs_f64(backoff));
            backoff = (backoff * 2.0).min(60.0);
            continue;
        };
        outage = None;
        backoff = 2.0;
        shared::support::process::trace_event(&shared::support::process::TraceEvent::SlurmCalls {
            event: "slurm-calls",
            cluster: &events.cluster,
            squeue: reply.calls.0,
            sacct: reply.calls.1,
            jobs: tasks.len() as u32,
        });
        let changed = take_reply(ctx, ssh, setup, &mut tasks, &reply, events, &mut bytes)?;
        let counts = counts(&tasks);
        if counts != last_counts {
            ctx.note(format!("sweep {id}: {counts}"));
            last_counts = counts;
        }
        let capped = tasks.iter().any(|t| t.row.is_none() && t.capped);
        if changed || capped {
            interval = 1.0;
        }
        if !capped {
            wait = interval;
            interval = (interval * 1.5).min(setup.max_interval);
        }
    }
    link.close();
    finish(ctx, setup, tasks, polls, bytes, started, events)
}

/// `2 running, 3 pending, 1 PASSED`.
fn counts(tasks: &[Task]) -> String {
    let mut c: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        let k = match (&t.row, &t.state) {
            (Some(r), _) => r.status.name().to_string(),
            (None, Some(s)) => s.to_lowercase(),
            (None, None) => "waiting for squeue".to_string(),
        };
        *c.entry(k).or_default() += 1;
    }
    c.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Take one poll's reply: logs, hangs, states, ends. Returns whether any task started or ended.
fn take_reply(
    ctx: &mut Context,
    ssh: &Ssh,
    setup: &Setup,
    tasks: &mut [Task],
    reply: &Reply,
    events: &mut Events,
    bytes: &mut u64,
) -> Result<bool> {
    let now = Instant::now();
    feed_logs(ctx, setup, tasks, reply, bytes, now);
    // Hangs: that task alone is cancelled.
    let hung = hung_tasks(setup, tasks, reply, now);
    let mut changed = !hung.is_empty();
    cancel_hung(ctx, ssh, setup, tasks, hung, events);
    if let Some(e) = &reply.queue_error {
        ctx.warn(format!("squeue failed ({e}); retrying"));
        return Ok(changed);
    }
    for t in tasks.iter_mut().filter(|t| t.row.is_none()) {
        changed |= match reply.queue.get(&t.index) {
            Some(q) => take_queued(ctx, t, q, events, now),
            None => take_left_queue(ctx, setup, t, reply, events, now),
        };
    }
    Ok(changed)
}

/// The log bytes the reply brought, into each task's streams (and the person's terminal with
/// `--follow`); what the patterns find in them.
fn feed_logs(
    ctx: &Context,
    setup: &Setup,
    tasks: &mut [Task],
    reply: &Reply,
    bytes: &mut u64,
    now: Instant,
) {
    for t in tasks.iter_mut() {
        t.capped = false;
    }
    for (name, index, off, data, size) in &reply.chunks {
        let Some(t) = tasks.iter_mut().find(|t| t.index == *index) else {
            continue;
        };
        let i = usize::from(name == "err");
        *bytes += data.len() as u64;
        t.capped |= off + (data.len() as u64) < *size;
        if !data.is_empty() {
            t.grew = Some(now);
        }
        let lines = t.streams[i].take(*off, data);
        if setup.follow {
            for l in &lines {
                ctx.note(format!("{} {name}| {l}", t.index));
            }
        }
        setup.patterns.scan(&lines, &mut t.findings);
    }
}

/// The tasks without a verdict that hang now (a hang pattern, or running and silent for
/// `stall_seconds`), each with its HANG_DETECTED verdict.
fn hung_tasks(setup: &Setup, tasks: &[Task], reply: &Reply, now: Instant) -> Vec<(usize, Verdict)> {
    let mut hung = Vec::new();
    for (k, t) in tasks.iter().enumerate() {
        if t.row.is_some() {
            continue;
        }
        let running = t.state.as_deref() == Some("RUNNING") && reply.queue.contains_key(&t.index);
        let (reason, what) = if let Some(line) = &t.findings.hang {
            ("pattern", format!("hang pattern found: {line:?}"))
        } else if let (true, Some(stall), Some(grew)) = (running, setup.stall, t.grew) {
            if now.duration_since(grew) < stall {
                continue;
            }
            (
                "stalled",
                format!("stalled: no output for {} s", stall.as_secs()),
            )
        } else {
            continue;
        };
        let mut v = watch_verdict(
            Status::HangDetected,
            "CANCELLED",
            format!("{what}; task {}_{} cancelled", setup.id, t.index),
            t.used.clone(),
        );
        v.hang_line = t.findings.hang.clone();
        v.hang_reason = Some(reason.to_string());
        hung.push((k, v));
    }
    hung
}

/// Cancel the hung tasks (one scancel for all of them) and give each its row; a failed scancel
/// is said in the verdict.
fn cancel_hung(
    ctx: &Context,
    ssh: &Ssh,
    setup: &Setup,
    tasks: &mut [Task],
    hung: Vec<(usize, Verdict)>,
    events: &mut Events,
) {
    if hung.is_empty() {
        return;
    }
    let ids: Vec<String> = hung
        .iter()
        .map(|(k, _)| format!("{}_{}", setup.id, tasks[*k].index))
        .collect();
    let cancelled = cancel(ssh, &ids);
    for (k, mut v) in hung {
        if let Err(e) = &cancelled {
            ctx.warn(format!(
                "the hang was detected but scancel failed: {}",
                e.message
            ));
            v.slurm_state = "UNKNOWN".into();
            v.summary = v
                .summary
                .replace(" cancelled", ": scancel FAILED, the task may still run");
        }
        let t = &mut tasks[k];
        ctx.note(format!("{}: HANG_DETECTED: {}", t.label(), v.summary));
        let r = row(setup, t, v);
        events.send("hang", |e| {
            e.task = Some(t.index);
            e.line = r.hang_line.clone();
            e.summary = Some(r.summary.clone());
        });
        t.row = Some(r);
    }
}

/// A task squeue still lists: its state, nodes and time used. Whether its state changed.
fn take_queued(
    ctx: &Context,
    t: &mut Task,
    q: &QueueRow,
    events: &mut Events,
    now: Instant,
) -> bool {
    let mut changed = false;
    if t.state.as_deref() != Some(q.state.as_str()) {
        if q.state == "RUNNING" {
            t.grew.get_or_insert(now);
            ctx.note(format!("{} running on {}", t.label(), q.nodes));
            events.send("running", |e| {
                e.task = Some(t.index);
                e.state = Some(q.state.clone());
                e.nodes = Some(q.nodes.clone());
            });
        }
        changed = true;
    }
    t.state = Some(q.state.clone());
    if !q.nodes.is_empty() {
        t.nodes = Some(q.nodes.clone());
    }
    // squeue's M:SS, as accounting writes it (HH:MM:SS).
    t.used = slurm::parse_slurm_duration(&q.used).map(slurm::format_duration);
    t.gone = None;
    changed
}

/// A task no longer in the queue: its end from accounting, once its logs are read to the end;
/// from its logs alone, at once, when accounting is disabled and scontrol no longer knows the
/// array; an ERROR row when Slurm records no end within the outage limit. Whether anything
/// changed.
fn take_left_queue(
    ctx: &Context,
    setup: &Setup,
    t: &mut Task,
    reply: &Reply,
    events: &mut Events,
    now: Instant,
) -> bool {
    match reply.ended.get(&t.index) {
        Some((a, nodes)) if !is_live(&a.state) => {
            if t.capped || !t.read {
                // Its logs' last bytes first (read in the next poll, at once).
                t.state = Some(a.state.clone());
                return true;
            }
            if !nodes.is_empty() {
                t.nodes = Some(nodes.clone());
            }
            t.source = if reply.accounting_disabled {
                Source::Scontrol
            } else {
                Source::Sacct
            };
            let by = a.cancelled_by_uid.and_then(|u| reply.by.get(&u).cloned());
            let v = final_verdict(JobKind::Run, &t.findings, setup.patterns, a, by, t.source);
            ended(ctx, setup, t, v, events);
            true
        }
        _ if reply.scontrol_purged => {
            // Nothing will ever record this task's end: judged now from its logs (slurmstepd's
            // line for a time limit or a cancellation), never after waiting out the outage limit.
            if t.capped || !t.read {
                t.state = Some("PURGED".into());
                return true;
            }
            t.source = Source::EndMarker;
            let v = super::verdict::purged_verdict(JobKind::Run, &t.findings, setup.patterns, None);
            ended(ctx, setup, t, v, events);
            true
        }
        _ => {
            let since = *t.gone.get_or_insert(now);
            if let Some(e) = &reply.accounting_error {
                ctx.warn(format!("sacct failed ({e}); retrying"));
            }
            if now.duration_since(since) <= Duration::from_secs(setup.outage_limit) {
                return false;
            }
            let v = watch_verdict(
                Status::Error,
                "UNKNOWN",
                format!(
                    "the task left the queue but Slurm recorded no end within {} s",
                    setup.outage_limit
                ),
                t.used.clone(),
            );
            t.row = Some(row(setup, t, v));
            true
        }
    }
}

/// A task's verdict: said, its row, its `task_ended` event.
fn ended(ctx: &Context, setup: &Setup, t: &mut Task, v: Verdict, events: &mut Events) {
    ctx.note(format!("{}: {}: {}", t.label(), v.status, v.summary));
    let r = row(setup, t, v);
    events.send("task_ended", |e| {
        e.task = Some(t.index);
        e.status = Some(r.status.name().to_string());
        e.state = Some(r.slurm_state.clone());
        e.summary = Some(r.summary.clone());
    });
    t.row = Some(r);
}

/// The report: a row per task (with the rows of tasks an earlier attempt already judged), the
/// array's verdict, the ledger and the verdict event.
fn finish(
    ctx: &mut Context,
    setup: &Setup,
    tasks: Vec<Task>,
    polls: u64,
    bytes: u64,
    started: Instant,
    events: &mut Events,
) -> Result<Outcome> {
    let sources: Vec<Source> = tasks.iter().map(|t| t.source).collect();
    let mut rows: Vec<TaskReport> = tasks.into_iter().filter_map(|t| t.row).collect();
    for r in setup.done {
        let mut r = r.clone();
        if !rows.iter().any(|x| x.index == r.index) {
            if r.from_job.is_none() {
                r.from_job = Some(
                    r.job_id
                        .rsplit_once('_')
                        .map_or(r.job_id.clone(), |(a, _)| a.to_string()),
                );
            }
            rows.push(r);
        }
    }
    rows.sort_by_key(|r| r.index);
    let (status, summary) = summarise(&rows);
    let decider = rows.iter().find(|r| r.status == status);
    let report = Report {
        status,
        job_id: setup.id.to_string(),
        kind: JobKind::Run,
        slurm_state: decider.map_or_else(String::new, |r| r.slurm_state.clone()),
        exit_code: decider.and_then(|r| r.exit_code.clone()),
        elapsed: None,
        summary,
        source: if sources.contains(&Source::Scontrol) {
            Source::Scontrol
        } else if sources.contains(&Source::EndMarker) {
            Source::EndMarker
        } else {
            Source::Sacct
        },
        cancelled_by: None,
        success_patterns_missing: None,
        failure_patterns_found: Vec::new(),
        hang_line: decider.and_then(|r| r.hang_line.clone()),
        hang_reason: None,
        excerpt_lines: None,
        remote_log: setup.out.to_string(),
        remote_err_log: setup.err.to_string(),
        local_log: None,
        local_log_complete: false,
        log_seen: None,
        excerpt: decider.map(|r| r.excerpt.clone()).unwrap_or_default(),
        excerpt_err: decider.map(|r| r.excerpt_err.clone()).unwrap_or_default(),
        polls,
        bytes_scanned: bytes,
        watch_seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        container: None,
        tasks: Some(rows),
    };
    ctx.doc.remove("sweep_done");
    Ok(publish(ctx, events, &report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_loop_passes_the_static_checks() {
        let setup = Setup {
            id: "12",
            out: "/w/job-12_%a.out",
            err: "/w/job-12_%a.err",
            tasks: &[],
            patterns: &Patterns {
                hang: "hang detected".into(),
                failure: Vec::new(),
                success: Vec::new(),
            },
            stall: None,
            monitor_timeout: None,
            max_interval: 30.0,
            outage_limit: 60,
            follow: false,
            done: &[],
        };
        let s = script(&setup).unwrap();
        shared::remote::script_check::assert_clean("array-poll", s.as_str());
        assert!(
            s.as_str().contains("out_pre='/w/job-12_'"),
            "{}",
            s.as_str()
        );
        assert!(s.as_str().contains("out_post=.out") || s.as_str().contains("out_post='.out'"));
    }

    #[test]
    fn a_reply_gives_each_task_its_row_its_end_and_its_bytes() {
        let bytes = b"WOKE\nQ 12_0|RUNNING|gn1|0:05|None\nQ 12_3|PENDING||0:00|JobArrayTaskLimit\nQ 99_1|RUNNING|x|0:01|None\nA 12_1|CANCELLED by 1001|0:0|00:00:03|gn2\nA 12_[4-5%2]|PENDING|0:0|00:00:00|None assigned\nA 12_2|COMPLETED|0:0|00:00:04|gn1\nBY 1001 alice\nCHUNK out 0 10 4 14\nab\ncCHUNK err 0 0 0 0\nCALLS 1 1\nEND\nWOKE\n";
        let (r, used) = parse_at("12", bytes).unwrap();
        assert_eq!(&bytes[used..], b"WOKE\n");
        assert_eq!(r.queue.len(), 2, "{:?}", r.queue);
        assert_eq!(r.queue[&0].nodes, "gn1");
        assert_eq!(r.queue[&3].state, "PENDING");
        assert_eq!(r.ended.len(), 4, "the pending remainder is two tasks");
        assert_eq!(r.ended[&5].0.state, "PENDING");
        assert_eq!(r.ended[&1].0.state, "CANCELLED");
        assert_eq!(r.ended[&1].0.cancelled_by_uid, Some(1001));
        assert_eq!(r.ended[&2].1, "gn1");
        assert_eq!(r.by[&1001], "alice");
        assert_eq!(r.calls, (1, 1));
        assert_eq!(
            r.chunks[0],
            ("out".to_string(), 0, 10, b"ab\nc".to_vec(), 14)
        );
        assert!(
            parse_at("12", &bytes[..40]).is_none(),
            "a cut reply is not taken"
        );
        // Without accounting: scontrol's records, by ArrayTaskId.
        let sc = b"ACCT_DISABLED\nSC JobId=15 ArrayJobId=12 ArrayTaskId=4 JobState=NODE_FAIL Reason=None ExitCode=0:0 RunTime=00:00:09 NodeList=gn2\nSC JobId=12 ArrayJobId=12 ArrayTaskId=5-6%2 JobState=CANCELLED\nEND\n";
        let (r, _) = parse_at("12", sc).unwrap();
        assert!(r.accounting_disabled);
        assert_eq!(r.ended.len(), 3);
        assert_eq!(r.ended[&4].0.state, "NODE_FAIL");
        assert_eq!(r.ended[&4].1, "gn2");
        assert_eq!(
            r.ended[&6].0.state, "CANCELLED",
            "the tasks a cancel ended while pending"
        );
        // Without accounting, an array scontrol no longer knows (MinJobAge passed).
        let (r, _) = parse_at("12", b"ACCT_DISABLED\nSC_PURGED\nEND\n").unwrap();
        assert!(r.accounting_disabled && r.scontrol_purged && r.ended.is_empty());
        // The same from sacct: a pending remainder cancelled is one record for its tasks.
        let (r, _) = parse_at("12", b"A 12_[3-4,7%2]|CANCELLED by 0|0:0|00:00:00|None assigned\nA 120_5|COMPLETED|0:0|00:00:01|x\nEND\n").unwrap();
        assert_eq!(r.ended.keys().copied().collect::<Vec<_>>(), [3, 4, 7]);
        assert_eq!(r.ended[&7].0.cancelled_by_uid, Some(0));
        assert_eq!(indexes("0-2,5"), [0, 1, 2, 5]);
        assert!(
            indexes("2-1").is_empty()
                && indexes("x").is_empty()
                && indexes("0-4294967295").is_empty()
        );
    }

    fn task(index: u32, status: Status) -> TaskReport {
        TaskReport {
            index,
            job_id: format!("7_{index}"),
            params: serde_json::Map::new(),
            status,
            slurm_state: String::new(),
            exit_code: None,
            elapsed: None,
            summary: String::new(),
            nodes: None,
            remote_log: String::new(),
            hang_line: None,
            excerpt: Vec::new(),
            excerpt_err: Vec::new(),
            from_job: None,
        }
    }

    #[test]
    fn the_array_passes_only_when_every_task_passed() {
        let rows = [task(0, Status::Passed), task(1, Status::Passed)];
        assert_eq!(
            summarise(&rows),
            (Status::Passed, "2 tasks: 2 PASSED".to_string())
        );
        let rows = [
            task(0, Status::Passed),
            task(1, Status::HangDetected),
            task(2, Status::Failed),
            task(3, Status::Passed),
            task(4, Status::Error),
            task(5, Status::Failed),
        ];
        assert_eq!(
            summarise(&rows),
            (
                Status::Failed,
                "6 tasks: 2 PASSED, 2 FAILED (tasks 2, 5), 1 HANG_DETECTED (task 1), 1 ERROR (task 4)".to_string()
            )
        );
        let rows = [task(0, Status::Passed), task(1, Status::Cancelled)];
        assert_eq!(summarise(&rows).0, Status::Cancelled);
    }

    #[test]
    fn live_states_are_not_ends() {
        for s in ["PENDING", "RUNNING", "COMPLETING", "REQUEUED"] {
            assert!(is_live(s));
        }
        for s in [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "OUT_OF_MEMORY",
            "PREEMPTED",
        ] {
            assert!(!is_live(s));
        }
    }
}
