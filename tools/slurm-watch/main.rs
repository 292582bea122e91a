//! slurm-watch: follow a job to an honest verdict, with hang detection ("Watching a job",
//! "Recovering" and "The report" in the manual procedure, docs/migrating.md).

mod array;
mod poll;
mod race;
mod retry;
mod scan;
mod single;
mod verdict;

use clap::Parser;
use scan::{Findings, Patterns, Stream};
use shared::contract::schema::{self, JobKind, Report, Source, Status};
use shared::remote::forensics;
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::slurm::{self, AccountingEntry};
use shared::{Context, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::time::{Duration, Instant};
use verdict::Verdict;

/// Watch the submitted job until it ends, and say how it ended.
///
/// One ssh session serves the whole watch (a new one only after a lost connection): each poll
/// asks squeue for the job's state and, in the same round trip, only the bytes its .out and .err
/// logs gained since the last poll (the cost of a poll does not grow with the log). The
/// interval starts short and backs off to --interval; the job's end marker (job.end_marker,
/// written by slurm-submit's wrapper when the command ends) cuts a wait short, so the verdict
/// follows the job's end within about a second without extra slurmctld calls.
///
/// While the job pends, each new reason is explained once, on stderr and in the `pending` event:
/// its category (resources, priority, your_limit, partition_limit, held, dependency, begin_time,
/// nodes_unavailable, other), what holds it with the figure that matters ("time_limit 06:00:00
/// is over partition debug's MaxTime 04:00:00", "your QOS gpucap allows 4 GPUs per user and your
/// running job 12 uses 4") and what would help, from facts the same session gathers once per
/// reason (scontrol; the partitions, idle nodes, QOS and association limits where they matter).
///
/// --race FILE...: the input's job and the same job submitted elsewhere (the documents
/// slurm-submit wrote for the other clusters or partitions) are polled together; the first to
/// start is kept and watched, the others are cancelled (only those jobs), each cancel recorded in
/// the ledger; the output is the winner's document with the `race` section. A document from
/// `slurm-submit --race N` names its other entrants (`job.race_entrants`): it is raced without
/// the flag.
///
/// `hang_pattern` (default
/// "hang detected", case-insensitive) in a complete log line is a hang; so is silence with
/// `stall_seconds` (the logs gain nothing that long, or one rank's labelled lines stop while the
/// others go on). On a hang the job's evidence is collected first (`collect_forensics`, default
/// true: every task's state, kernel wait and Python stacks (py-spy) per node, in the `forensics`
/// section with a diagnosis naming the rank that stopped; at most 20 s), then the job is
/// cancelled: HANG_DETECTED, with the last 200 lines. When the job leaves squeue, sacct's State and
/// ExitCode give the verdict (scontrol when accounting is disabled), refined by the logs:
/// PASSED, FAILED, TIMEOUT, OUT_OF_MEMORY, CANCELLED (and by whom), ERROR (node failures and
/// other infrastructure ends, Slurm's state kept), BUILD_FAILED for a build job.
/// `failure_patterns` found make a passing job FAILED; `success_patterns`, when given, must all
/// be found for PASSED. `monitor_timeout_seconds` ends the watch with TIMEOUT and cancels the
/// job (unless --keep-on-timeout).
///
/// A sweep (slurm-submit's job array) is followed whole: each poll asks squeue once for every
/// task and sacct at most once (when a task left the queue), reads each running task's new log
/// bytes, and judges each task as a job of its own (its hang cancels it alone); the report has a
/// row per task (`tasks`) and is PASSED only when every task passed. With --retry, only the
/// tasks a node failure ended are submitted again (an array of their indexes, nodes excluded).
///
/// A lost connection, an unreachable controller, a job not yet in sacct or a log not yet
/// visible is never a verdict: the watch retries with backoff and never cancels the job because
/// it lost its link. If the MFA master died it exits 3 with the login command; rerunning
/// slurm-watch on the same document resumes.
///
/// {reads}
/// (job from slurm-submit; local_dir is the local folder for a copy of the log: a relative
/// work_dir puts it in the state directory, never in the repository.)
///
/// {adds}
/// The verdict is also added to the local run ledger (see slurm-runs), with the final document.
///
/// Exit 0 only for PASSED, 1 for any other verdict.
///
/// Example:
///   slurm-submit < synced.json | slurm-watch --follow > report.json
///   slurm-watch --events /dev/fd/3 3>&1 >report.json < submitted.json | slurm-notify --webhook-file F
#[derive(Parser, Debug)]
#[command(name = "slurm-watch", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Longest time between polls, in seconds (default: poll_interval_seconds, else 30).
    #[arg(long, value_name = "SECONDS")]
    interval: Option<f64>,

    /// On monitor_timeout_seconds, leave the job running instead of cancelling it.
    #[arg(long)]
    keep_on_timeout: bool,

    /// Stream new log lines to stderr as they arrive.
    #[arg(long)]
    follow: bool,

    /// Give up after this many seconds without reaching the cluster or its controller
    /// (no verdict; rerun to resume).
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    outage_limit: u64,

    /// Append one JSON line per state change to FILE (submitted, pending with its reason, its
    /// category, explanation and action, and estimated start, running, importing, progress, hang, verdict): a file, a named pipe, or
    /// /dev/fd/N for a descriptor the shell opened. For `| jq` or `| slurm-notify`.
    #[arg(long, value_name = "FILE")]
    events: Option<String>,

    /// When the job ends NODE_FAIL, PREEMPTED or BOOT_FAIL (the infrastructure's fault, never
    /// FAILED), submit it again with the nodes it ran on excluded and watch that, at most N
    /// times. Each attempt is in `attempts` and linked in the ledger.
    #[arg(long, value_name = "N")]
    retry: Option<u32>,

    /// The same job submitted elsewhere (other clusters or partitions): the documents
    /// slurm-submit wrote for them. Whichever of these and the input's job starts first is kept
    /// and watched; the others are cancelled (only those jobs), each cancel recorded in the
    /// ledger; the output is the winner's document with the `race` section.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    race: Vec<std::path::PathBuf>,

    /// Cancel the job first (scancel; a sweep: every task), then watch it to its verdict:
    /// CANCELLED, or the verdict it had already reached. Recorded in the ledger as cancelled by
    /// `slurm-watch --cancel` (slurm-mcp names its client instead, in SLURM_TOOLS_CANCELLED_BY).
    #[arg(long, conflicts_with_all = ["retry", "race"])]
    cancel: bool,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["report", "forensics", "race"];

    fn reads() -> Vec<&'static str> {
        let mut names = Input::reads();
        for n in retry::RetryInput::reads() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-watch", watch)
}

struct Job {
    id: String,
    kind: JobKind,
    out: String,
    err: String,
    end_marker: Option<String>,
    container_image: Option<String>,
    /// On pyxis: the cached image slurm-submit found or imported for the job.
    container_use: Option<schema::ContainerUse>,
    /// A sweep: the array's tasks.
    sweep_tasks: Option<Vec<schema::SweepTask>>,
}

shared::document_input! {
    /// What slurm-watch reads (again for each attempt of --retry).
    struct Input {
        job: Option<schema::Job> = section,
        /// A verdict already given for this job is passed on.
        report: Option<Report> = section,
        /// An earlier job's forensics are dropped.
        forensics: Option<schema::Forensics> = label_section,
        monitor_timeout_seconds: Option<i64> = int(1, 365 * 86_400),
        poll_interval_seconds: Option<i64> = int(1, 86_400),
        hang_pattern: Option<String> = string,
        stall_seconds: Option<i64> = int(10, 86_400),
        collect_forensics: Option<bool> = flag,
        install_py_spy: Option<bool> = flag,
        failure_patterns: Option<Vec<String>> = strings,
        success_patterns: Option<Vec<String>> = strings,
        job_name: Option<String> = string,
        /// A sweep's tasks an earlier attempt already judged.
        sweep_done: Option<Vec<schema::TaskReport>> = section,
        /// An earlier race's result: the document is not raced again.
        race: Option<schema::Race> = section,
        /// The local folder for a copy of the log and the forensics.
        local: shared::state::local_dirs::LocalDirs = part,
        cluster: shared::state::ledger::ClusterName = part,
        connection: shared::remote::ssh::Connection = part,
    }
}

fn job_of(job: Option<schema::Job>) -> Result<Option<Job>> {
    let Some(job) = job else {
        return Err(shared::contract::doc::missing(
            "job",
            "run slurm-submit first: slurm-watch follows the job it submitted",
        ));
    };
    if job.skipped == Some(true) {
        return Ok(None);
    }
    if job.dry_run == Some(true) {
        return Err(ToolError::field(
            ErrorKind::BadInput,
            "job",
            "the job section is from `slurm-submit --dry-run`: nothing was submitted",
        )
        .with_hint("run slurm-submit without --dry-run"));
    }
    let id = job.job_id.ok_or_else(|| {
        shared::contract::doc::missing("job", "the job section has no job_id; run slurm-submit")
    })?;
    slurm::check_job_id("job", &id)?;
    let out = job.stdout_path.ok_or_else(|| {
        shared::contract::doc::missing("job", "the job section has no stdout_path")
    })?;
    let err = job.stderr_path.unwrap_or_else(|| out.clone());
    Ok(Some(Job {
        id,
        kind: job.kind,
        out,
        err,
        end_marker: job.end_marker,
        container_image: job.container_image,
        container_use: job.container_use,
        sweep_tasks: job.sweep_tasks,
    }))
}

/// A serving loop's reply parser: the first whole reply in the bytes read, and how many bytes
/// it took.
type ParseReply<R> = Box<dyn Fn(&[u8]) -> Option<(R, usize)>>;

/// The watch's one ssh session (see `poll`, and `array` for a sweep): started on the first
/// poll, started again after a lost connection, closed at the end. `R` is the serving loop's
/// reply.
struct Link<'a, R> {
    ssh: &'a Ssh,
    script: Script,
    session: Option<shared::support::process::Running>,
    buf: Vec<u8>,
    /// The first whole reply in the bytes read, and how many bytes it took.
    parse: ParseReply<R>,
    /// The log bytes a reply brought (for the trace).
    log_bytes: fn(&R) -> u64,
}

impl<'a, R> Link<'a, R> {
    fn new(ssh: &'a Ssh, script: Script, parse: ParseReply<R>, log_bytes: fn(&R) -> u64) -> Self {
        Link {
            ssh,
            script,
            session: None,
            buf: Vec::new(),
            parse,
            log_bytes,
        }
    }

    /// Send one request line (whose poll waits `wait` seconds first on the cluster) and read its
    /// reply. `Ok(None)`: the session broke or went quiet (it is closed; the next poll starts a
    /// new one). `Err`: ssh itself failed, classified.
    fn ask(&mut self, line: &str, wait: f64) -> Result<Option<R>> {
        use shared::support::process::Received;
        if self.session.is_none() {
            self.session = Some(self.ssh.start_script(&self.script)?);
            self.buf.clear();
        }
        let deadline = Instant::now() + Duration::from_secs_f64(wait + 120.0);
        let mut woke: Option<Instant> = None;
        if let Some(s) = self.session.as_mut() {
            if s.send(line.as_bytes()).is_err() {
                return self.broken();
            }
        }
        loop {
            if woke.is_none() && self.buf.starts_with(b"WOKE\n") {
                woke = Some(Instant::now());
            }
            if let Some((reply, used)) = (self.parse)(&self.buf) {
                self.buf.drain(..used);
                shared::support::process::trace_event(&shared::support::process::TraceEvent::poll(
                    woke.map_or(0.0, |w| w.elapsed().as_secs_f64() * 1000.0),
                    (self.log_bytes)(&reply),
                ));
                return Ok(Some(reply));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(s) = self.session.as_mut() else {
                return Ok(None);
            };
            if left.is_zero() {
                self.close();
                return Ok(None);
            }
            match s.recv(left) {
                Received::Data(b) => self.buf.extend_from_slice(&b),
                Received::Eof => return self.broken(),
                Received::TimedOut => {}
            }
        }
    }

    fn broken(&mut self) -> Result<Option<R>> {
        let Some(s) = self.session.take() else {
            return Ok(None);
        };
        let out = s.close(Duration::from_secs(5));
        if out.code == Some(255) {
            return Err(self.ssh.failure_error(&out));
        }
        Ok(None)
    }

    fn close(&mut self) {
        if let Some(s) = self.session.take() {
            s.close(Duration::from_secs(5));
        }
    }
}

/// The `--events` stream of this watch (nothing when not asked for).
struct Events {
    sink: Option<shared::contract::events::Sink>,
    cluster: String,
    job_id: String,
    job_name: Option<String>,
    document: Option<String>,
}

impl Events {
    fn send(
        &mut self,
        event: &'static str,
        fill: impl FnOnce(&mut shared::contract::events::Event),
    ) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        let mut e = shared::contract::events::Event::new(event, &self.cluster, &self.job_id);
        e.job_name = self.job_name.clone();
        e.document = self.document.clone();
        fill(&mut e);
        sink.send("slurm-watch", &e);
    }
}

struct State {
    streams: [Stream; 2],
    findings: Findings,
    last_queue: Option<slurm::QueueEntry>,
    polls: u64,
    bytes: u64,
}

fn watch(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let entrants = if cli.race.is_empty() {
        race_entrants(ctx)?
    } else {
        cli.race.clone()
    };
    if !entrants.is_empty() {
        race::run(ctx, &entrants, cli.interval.unwrap_or(10.0).max(1.0))?;
    }
    loop {
        let outcome = watch_once(cli, ctx)?;
        let Some(max) = cli.retry else {
            return Ok(outcome);
        };
        match retry::after_verdict(ctx, max)? {
            retry::Next::Done => return Ok(outcome),
            retry::Next::Stop(o) => return Ok(o),
            retry::Next::Watch => continue,
        }
    }
}

/// The other entrants `slurm-submit --race N` named in the job section (none once the document
/// has its `race`: a race is run once).
fn race_entrants(ctx: &Context) -> Result<Vec<std::path::PathBuf>> {
    let input = Input::read(&ctx.doc)?;
    if input.race.is_some() {
        return Ok(Vec::new());
    }
    Ok(input
        .job
        .and_then(|j| j.race_entrants)
        .unwrap_or_default()
        .into_iter()
        .map(std::path::PathBuf::from)
        .collect())
}

fn watch_once(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let Some(job) = job_of(input.job.clone())? else {
        ctx.note("the build job was skipped (build_project is false): nothing to watch");
        return Ok(Outcome::Done);
    };
    // A verdict for this very job is already in the document (a pipeline stage before us
    // stopped): pass it on rather than watch again.
    if let Some(report) = &input.report {
        if report.job_id == job.id {
            ctx.note(format!(
                "job {} already has a verdict ({}); passing it on",
                job.id, report.status
            ));
            return Ok(outcome(report.status));
        }
    }
    // Forensics of an earlier job (a pipeline run again) would describe the wrong job.
    if input.forensics.as_ref().is_some_and(|f| f.job_id != job.id) {
        ctx.doc.remove("forensics");
    }
    let ssh = Ssh::connect(&input.connection)?;
    if cli.cancel {
        cancel(&ssh, &job)?;
        record_cancel(ctx, &input, &job.id);
        ctx.note(format!(
            "cancelled job {} (--cancel); watching it end",
            job.id
        ));
    }
    let set = settings(cli, &input, &job)?;
    let mut events = Events {
        sink: cli
            .events
            .as_deref()
            .map(shared::contract::events::Sink::open)
            .transpose()?,
        cluster: input.cluster.name(),
        job_id: job.id.clone(),
        job_name: input.job_name.clone(),
        document: None,
    };
    events.send("submitted", |_| {});
    if let Some(tasks) = &job.sweep_tasks {
        let setup = array::Setup {
            id: &job.id,
            out: &job.out,
            err: &job.err,
            tasks,
            patterns: &set.patterns,
            stall: set.stall,
            monitor_timeout: set.monitor_timeout,
            max_interval: set.max_interval,
            outage_limit: cli.outage_limit,
            follow: cli.follow,
            done: input.sweep_done.as_deref().unwrap_or_default(),
        };
        return array::watch(ctx, &ssh, &setup, &mut events);
    }
    ctx.note(format!(
        "watching {} job {} (logs: {})",
        job.kind.name(),
        job.id,
        job.out
    ));
    let mut w = single::Watch::new(ctx, cli, &job, &ssh, &set, events)?;
    let verdict = w.run(ctx)?;
    shared::support::testhook::pause("watch:verdict");
    if let Some(f) = &w.evidence {
        ctx.doc.set_section("forensics", f);
    }
    let report = finish_report(ctx, &set.save_to.dirs, &job, &w.st, verdict, w.started)?;
    Ok(publish(ctx, &mut w.events, &report))
}

/// What the document asks of the watch: its limits, poll interval, patterns (the workload's
/// success and failure patterns do not judge a build job, which is judged by its exit and the
/// hang pattern), stall and forensics.
fn settings(cli: &Cli, input: &Input, job: &Job) -> Result<single::Settings> {
    let max_interval = match cli.interval {
        Some(i) if i > 0.0 => i,
        Some(_) => {
            return Err(ToolError::bad_input(
                "--interval must be more than 0 seconds",
            ))
        }
        None => input.poll_interval_seconds.map_or(30.0, |i| i as f64),
    };
    let workload = |list: &Option<Vec<String>>| -> Vec<String> {
        if job.kind == JobKind::Build {
            Vec::new()
        } else {
            list.iter()
                .flatten()
                .map(|p| p.to_lowercase())
                .filter(|p| !p.is_empty())
                .collect()
        }
    };
    Ok(single::Settings {
        monitor_timeout: input.monitor_timeout_seconds,
        max_interval,
        patterns: Patterns {
            hang: input
                .hang_pattern
                .as_deref()
                .unwrap_or("hang detected")
                .to_lowercase(),
            failure: workload(&input.failure_patterns),
            success: workload(&input.success_patterns),
        },
        mfa: input
            .connection
            .preflight
            .as_ref()
            .is_some_and(|p| p.ssh_path == schema::SshPath::Mfa),
        stall: input.stall_seconds.map(|s| Duration::from_secs(s as u64)),
        collect_forensics: input.collect_forensics.unwrap_or(true),
        install_py_spy: input.install_py_spy.unwrap_or(false),
        save_to: forensics::SaveTo {
            dirs: input.local.clone(),
            cluster: input.cluster.name(),
        },
    })
}

/// The verdict said, written into the document and the ledger, and sent as the `verdict` event.
fn publish(ctx: &mut Context, events: &mut Events, report: &Report) -> Outcome {
    ctx.note(format!("{}: {}", report.status, report.summary));
    ctx.doc.set_section("report", report);
    shared::state::ledger::record_verdict(ctx, report);
    events.document = shared::state::ledger::path().map(|l| {
        shared::state::ledger::document_path(&l, &events.cluster, &report.job_id)
            .display()
            .to_string()
    });
    events.send("verdict", |e| {
        e.status = Some(report.status.name().to_string());
        e.state = Some(report.slurm_state.clone());
        e.summary = Some(report.summary.clone());
    });
    outcome(report.status)
}

fn outcome(status: Status) -> Outcome {
    if status == Status::Passed {
        Outcome::Done
    } else {
        Outcome::JobNotPassed
    }
}

fn describe_queue(q: &slurm::QueueEntry) -> String {
    let hms = |s: Option<u64>| s.map_or("?".to_string(), slurm::format_duration);
    match q.state.as_str() {
        "PENDING" => {
            let eta = q.start.map(|s| {
                let now = shared::support::clock::unix_now();
                if s > now {
                    format!(", estimated start in {}", slurm::format_duration(s - now))
                } else {
                    String::new()
                }
            });
            format!("PENDING ({}){}", q.reason, eta.unwrap_or_default())
        }
        state => format!("{state}, {} elapsed, {} left", hms(q.used), hms(q.left)),
    }
}

/// sacct's answer in this poll, when `accept` takes its state.
fn accounting_says(
    reply: &poll::Reply,
    accept: impl Fn(&AccountingEntry) -> bool,
) -> Option<AccountingEntry> {
    reply
        .accounting
        .as_deref()
        .and_then(slurm::parse_sacct)
        .filter(|a| accept(a))
}

fn from_scontrol(line: &str) -> Option<AccountingEntry> {
    let m = slurm::parse_scontrol(line);
    Some(AccountingEntry {
        state: m.get("JobState")?.clone(),
        cancelled_by_uid: None,
        exit_code: m.get("ExitCode").cloned().unwrap_or_default(),
        elapsed: m.get("RunTime").cloned().unwrap_or_default(),
    })
}

/// The ledger line for a cancel the person (or slurm-mcp's client) asked for.
fn record_cancel(ctx: &Context, input: &Input, job_id: &str) {
    let by = std::env::var("SLURM_TOOLS_CANCELLED_BY")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(|| "slurm-watch --cancel".to_string());
    shared::state::ledger::record_cancel(
        ctx,
        &input.cluster.name(),
        job_id,
        input.job_name.clone(),
        by,
    );
}

fn cancel(ssh: &Ssh, job: &Job) -> Result<()> {
    shared::remote::run::<shared::remote::Scancel>(ssh, std::slice::from_ref(&job.id))
}

/// A hang was decided (`reason`: `pattern` or `stalled`, `what`: the line or the silence):
/// the evidence first (unless `collect_forensics` is false; bounded, so the cancel follows within
/// forensics::LIMIT_SECONDS and a few), then the cancel.
fn hang_detected(
    ctx: &Context,
    ssh: &Ssh,
    job: &Job,
    st: &State,
    events: &mut Events,
    hang: Hang,
) -> (Verdict, Option<schema::Forensics>) {
    let evidence = hang.collect.then(|| {
        ctx.note(format!(
            "hang decided ({}): collecting every task's state and stacks on the job's nodes before cancelling job {} (at most {} s)",
            hang.what,
            job.id,
            forensics::limit(hang.install)
        ));
        let f = forensics::gather(
            ssh,
            hang.save_to,
            &job.id,
            hang.reason,
            Some((hang.silent.clone(), hang.rank_output.clone())),
            hang.install,
        );
        for d in &f.diagnosis {
            ctx.note(format!("forensics: {d}"));
        }
        f
    });
    let cancelled = cancel(ssh, job);
    let what = match hang.reason {
        "pattern" => format!("hang pattern found: {:?}", hang.what),
        _ => format!("stalled: {}", hang.what),
    };
    let mut summary = format!("{what}; job {} cancelled", job.id);
    if let Some(d) = evidence.as_ref().and_then(|f| f.diagnosis.first()) {
        summary.push_str(&format!("; {d}"));
    }
    if let Err(e) = &cancelled {
        ctx.warn(format!(
            "the hang was detected but scancel failed: {}",
            e.message
        ));
        summary = format!("{what}; scancel FAILED, the job may still run");
    }
    let verdict = Verdict {
        status: Status::HangDetected,
        slurm_state: if cancelled.is_ok() {
            "CANCELLED"
        } else {
            "UNKNOWN"
        }
        .to_string(),
        exit_code: None,
        elapsed: st
            .last_queue
            .as_ref()
            .and_then(|q| q.used)
            .map(slurm::format_duration),
        summary,
        source: Source::Watch,
        cancelled_by: None,
        success_patterns_missing: None,
        hang_line: (hang.reason == "pattern").then(|| hang.what.clone()),
        hang_reason: Some(hang.reason.to_string()),
        excerpt_lines: Some(200),
    };
    events.send("hang", |ev| {
        ev.line = Some(hang.what.clone());
        ev.summary = Some(verdict.summary.clone());
    });
    (verdict, evidence)
}

/// A hang as decided: how, the line or the silence, the silent ranks, whether to collect.
struct Hang<'a> {
    /// Where the evidence is kept.
    save_to: &'a forensics::SaveTo,
    reason: &'static str,
    what: String,
    silent: Vec<schema::SilentRank>,
    rank_output: Vec<schema::RankOutput>,
    collect: bool,
    install: bool,
}

fn monitor_timed_out(
    ctx: &Context,
    cli: &Cli,
    ssh: &Ssh,
    job: &Job,
    st: &State,
    limit: i64,
) -> Verdict {
    let kept = cli.keep_on_timeout;
    let mut summary = format!("monitor_timeout_seconds ({limit} s) reached");
    let mut state = st
        .last_queue
        .as_ref()
        .map_or("UNKNOWN".to_string(), |q| q.state.clone());
    if kept {
        summary.push_str(&format!(
            "; job {} left running (--keep-on-timeout)",
            job.id
        ));
    } else {
        match cancel(ssh, job) {
            Ok(()) => {
                summary.push_str(&format!("; job {} cancelled", job.id));
                state = "CANCELLED".into();
            }
            Err(e) => {
                ctx.warn(format!("could not cancel job {}: {}", job.id, e.message));
                summary.push_str("; scancel failed, the job may still run");
            }
        }
    }
    Verdict {
        status: Status::Timeout,
        slurm_state: state,
        exit_code: None,
        elapsed: None,
        summary,
        source: Source::Watch,
        cancelled_by: None,
        success_patterns_missing: None,
        hang_line: None,
        hang_reason: None,
        excerpt_lines: None,
    }
}

/// The whole report: the verdict, excerpts, the local copy, and the bookkeeping every report has.
fn finish_report(
    ctx: &Context,
    local: &shared::state::local_dirs::LocalDirs,
    job: &Job,
    st: &State,
    v: Verdict,
    started: Instant,
) -> Result<Report> {
    let (out_n, err_n) = match v.status {
        // A passed job's stderr too: a build's `fatal:` or a warning must not be invisible.
        Status::Passed => (20, 10),
        Status::HangDetected => (200, 200),
        _ => (100, 50),
    };
    let (local_log, local_log_complete) = local_copy(ctx, local, job, st)?;
    Ok(Report {
        status: v.status,
        job_id: job.id.clone(),
        kind: job.kind,
        slurm_state: v.slurm_state,
        exit_code: v.exit_code,
        elapsed: v.elapsed,
        summary: v.summary,
        source: v.source,
        cancelled_by: v.cancelled_by,
        success_patterns_missing: v.success_patterns_missing,
        failure_patterns_found: st.findings.failures.clone(),
        hang_line: v.hang_line,
        hang_reason: v.hang_reason,
        excerpt_lines: v.excerpt_lines,
        remote_log: job.out.clone(),
        remote_err_log: job.err.clone(),
        local_log,
        local_log_complete,
        log_seen: (!st.streams[0].seen).then_some(false),
        excerpt: st.streams[0].last_lines(out_n),
        excerpt_err: if job.out == job.err {
            Vec::new()
        } else {
            st.streams[1].last_lines(err_n)
        },
        polls: st.polls,
        bytes_scanned: st.bytes,
        watch_seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        container: st
            .findings
            .container_use
            .clone()
            .or_else(|| job.container_use.clone()),
        tasks: None,
    })
}

/// The log, as streamed, into the local folder (`local_dir`, see shared::state::local_dirs; never the
/// repository unless the person puts it there), whole when it fit in memory, else its tail.
fn local_copy(
    ctx: &Context,
    local: &shared::state::local_dirs::LocalDirs,
    job: &Job,
    st: &State,
) -> Result<(Option<String>, bool)> {
    let Some(dir) = shared::state::local_dirs::local_dir(local) else {
        return Ok((None, false));
    };
    let name =
        shared::remote::layout::basename(&job.out).unwrap_or_else(|| format!("job-{}.out", job.id));
    let path = dir.join(&name);
    let s = &st.streams[0];
    // Written aside and renamed, so a watch killed here never leaves half a log under the name.
    let aside = dir.join(format!(".{name}.{}.part", std::process::id()));
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&aside, s.kept()))
        .and_then(|()| std::fs::rename(&aside, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    match written {
        Ok(()) => Ok((Some(path.display().to_string()), s.dropped == 0)),
        Err(e) => {
            ctx.warn(format!(
                "could not write the local copy of the log to {}: {e}",
                path.display()
            ));
            Ok((None, false))
        }
    }
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
