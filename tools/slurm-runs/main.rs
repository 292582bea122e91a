//! slurm-runs: every run the tools submitted, on every cluster, from the local ledger; refreshed
//! with one squeue and at most one sacct per cluster, however many runs.

use clap::Parser;
use shared::contract::events::{Event, Sink};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::remote::Operation;
use shared::state::ledger::{self, Entry, Run};
use shared::{Document, ErrorKind, Result, ToolError};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

mod stats;

/// List the runs the tools submitted (every cluster, across restarts), and follow them.
///
/// Reads the local run ledger (`runs.jsonl` in `$SLURM_TOOLS_STATE_DIR`, else
/// `$XDG_STATE_HOME/slurm-tools`, else `~/.local/state/slurm-tools`), where slurm-submit and
/// `slurm-alloc up` add each
/// submission and slurm-watch its verdict. Unfinished runs are refreshed from their clusters:
/// one ssh execution per cluster (through its master, never a new login prompt) running one
/// squeue and at most one sacct for all of that cluster's runs. Runs seen ending are written
/// back to the ledger, so later listings need not ask again. A sweep (one job array) is one line:
/// RUNNING while a task runs, PENDING while one waits, then COMPLETED or the first other end,
/// with its tasks counted per state (`[2 RUNNING, 3 PENDING, 1 COMPLETED]`; `tasks` in --json);
/// its watched document's report has a row per task (`--tasks` lists them under it).
///
/// Each run's saved document (the `document` field of --json) can be handed to slurm-watch to
/// resume watching it, to slurm-fetch for its files, or to slurm-report. The IMAGE column (and
/// `image`, `image_digest` in --json) is the container image a run started from: the registry
/// digest of the image cache's file it ran, so two runs of one tag are told apart.
///
/// --watch follows every unfinished run (after the filters) until all have ended, at the same
/// cost per poll; --events writes one JSON line per state change (pending, running, ended) to a
/// file, /dev/fd/N, or `-` (stdout; the table then goes to stderr).
///
/// Reads no job document. Exit 0; 2 for bad flags; 4 when a cluster with unfinished runs could
/// not be asked (its runs are shown as the ledger has them, and a warning says why).
///
/// Example:
///   slurm-runs
///   slurm-runs --state running --since 2d --name 'train-*'
///   slurm-runs --json | jq -r 'select(.status == "FAILED") | .document'
///   slurm-runs --watch --events - | slurm-notify --webhook-file ~/.config/slurm-tools/webhook
#[derive(Parser, Debug)]
#[command(name = "slurm-runs", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    /// One JSON object per run, one per line, instead of the table.
    #[arg(long)]
    json: bool,

    /// Only runs on this cluster (the catalog entry's name, else the ssh host); repeatable.
    #[arg(long = "cluster", value_name = "NAME")]
    clusters: Vec<String>,

    /// Only runs in this state: a Slurm state (pending, running, completed, node_fail...), a
    /// verdict (passed, failed...), `active` or `finished`; repeatable, any case.
    #[arg(long = "state", value_name = "STATE")]
    states: Vec<String>,

    /// Only runs submitted within this age: 90s, 30m, 12h, 3d, 2w.
    #[arg(long, value_name = "AGE")]
    since: Option<String>,

    /// Only runs whose job name matches this glob (`*` and `?`).
    #[arg(long, value_name = "GLOB")]
    name: Option<String>,

    /// Show the ledger as it is: ask no cluster.
    #[arg(long)]
    no_refresh: bool,

    /// Poll until every listed unfinished run has ended, saying each change on stderr.
    #[arg(long)]
    watch: bool,

    /// With --watch (or for this one refresh): one JSON line per state change to FILE, or `-`.
    #[arg(long, value_name = "FILE")]
    events: Option<String>,

    /// Seconds between --watch polls.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    interval: f64,

    /// Under each sweep (a job array), a line per task from its watched document: index,
    /// verdict, Slurm's state, parameters (a sweep not watched yet shows its counts only).
    #[arg(long)]
    tasks: bool,

    /// The ledger to read instead of the default one.
    #[arg(long, value_name = "FILE")]
    ledger: Option<PathBuf>,

    /// What the finished runs whose job name matches NAME (a glob) used, from each cluster's
    /// accounting (one sacct per cluster): elapsed time, peak memory, GPUs, their 90th
    /// percentile, and the `time_limit` and `mem` sized from them (what slurm-resolve's
    /// `size_from_history` fills in). A cluster without accounting says so.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["watch", "no_refresh", "events"])]
    stats: Option<String>,
}

const TOOL: &str = "slurm-runs";

pub fn main() -> ExitCode {
    shared::contract::driver::run_plain::<Cli>(TOOL, runs)
}

/// A run's identity: (cluster, job id).
type RunKey = (String, String);

/// What a cluster said about one run in one poll.
#[derive(Debug, Clone, Default, PartialEq)]
struct Live {
    state: String,
    reason: Option<String>,
    estimated_start: Option<u64>,
    nodes: Option<String>,
    exit_code: Option<String>,
    /// A sweep's job array: how many tasks are in each state (`2 RUNNING, 3 PENDING`).
    tasks: Option<String>,
}

/// A job array's tasks (`<id>_<n>` in squeue -r and sacct) as one run: RUNNING while a task runs,
/// else PENDING while one waits, else COMPLETED when every task completed, else the first other
/// end; with the count of tasks in each state. `None` when no task of `id` was seen.
fn fold_array(id: &str, found: &[(String, Live)]) -> Option<Live> {
    let prefix = format!("{id}_");
    let mut tasks: Vec<(&str, &Live)> = Vec::new();
    for (tid, l) in found {
        if tid.starts_with(&prefix) && !tasks.iter().any(|(t, _)| t == tid) {
            tasks.push((tid.as_str(), l));
        }
    }
    if tasks.is_empty() {
        return None;
    }
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (_, l) in &tasks {
        match counts.iter_mut().find(|(s, _)| *s == l.state) {
            Some((_, n)) => *n += 1,
            None => counts.push((l.state.clone(), 1)),
        }
    }
    let has = |s: &str| tasks.iter().any(|(_, l)| l.state == s);
    let state = if has("RUNNING") || has("COMPLETING") || has("CONFIGURING") {
        "RUNNING".to_string()
    } else if has("PENDING") || has("REQUEUED") {
        "PENDING".to_string()
    } else if tasks
        .iter()
        .any(|(_, l)| !shared::slurm::is_final(&l.state))
    {
        tasks[0].1.state.clone()
    } else {
        tasks
            .iter()
            .map(|(_, l)| l.state.clone())
            .find(|s| s != "COMPLETED")
            .unwrap_or_else(|| "COMPLETED".to_string())
    };
    let mut nodes: Vec<&str> = tasks
        .iter()
        .filter_map(|(_, l)| l.nodes.as_deref())
        .collect();
    nodes.dedup();
    Some(Live {
        state,
        tasks: Some(
            counts
                .iter()
                .map(|(s, n)| format!("{n} {s}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        nodes: (!nodes.is_empty()).then(|| nodes.join(",")),
        ..Live::default()
    })
}

fn runs(cli: &Cli) -> Result<u8> {
    let path = ledger_path(cli)?;
    if cli.interval.is_nan() || cli.interval < 1.0 {
        return Err(ToolError::bad_input(format!(
            "--interval {} is too short: at least 1 second",
            cli.interval
        ))
        .with_hint(
            "polls cost the cluster's controller: 30 s (the default) is plenty for most runs",
        ));
    }
    let since = cli.since.as_deref().map(parse_age).transpose()?;
    let mut sink = cli.events.as_deref().map(Sink::open).transpose()?;
    let now = shared::support::clock::unix_now();
    let mut runs = read_runs(cli, &path, since, now)?;
    if let Some(pattern) = &cli.stats {
        return print_stats(cli, runs, pattern);
    }
    let mut live: BTreeMap<RunKey, Live> = BTreeMap::new();
    let mut code = 0u8;
    let mut first = true;
    loop {
        if !cli.no_refresh {
            let (seen, unreachable) = refresh(&runs)?;
            if unreachable && runs.iter().any(|r| !r.finished()) {
                code = 4;
            }
            for (key, now_live) in seen {
                let run = runs
                    .iter_mut()
                    .find(|r| (r.cluster.clone(), r.job_id.clone()) == key)
                    .expect("asked about this run");
                let said = cli.watch && !first;
                take_live(&path, run, live.get(&key), &now_live, said, sink.as_mut());
                live.insert(key, now_live);
            }
        }
        first = false;
        let open = runs.iter().filter(|r| !r.finished()).count();
        if !cli.watch || cli.no_refresh || open == 0 {
            break;
        }
        std::thread::sleep(Duration::from_secs_f64(cli.interval));
    }
    let shown: Vec<&Run> = runs
        .iter()
        .filter(|r| cli.states.is_empty() || cli.states.iter().any(|s| in_state(r, s)))
        .collect();
    let text = if cli.json {
        json_lines(&shown, &live)
    } else {
        table(&shown, &live, now, cli.tasks)
    };
    let to_stderr = cli.events.as_deref() == Some("-");
    let written = if to_stderr {
        std::io::stderr().write_all(text.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    if let Err(e) = written {
        shared::support::ui::note(TOOL, &format!("could not write the list: {e}"));
        return Ok(4);
    }
    Ok(code)
}

/// --ledger, else the state directory's runs.jsonl.
fn ledger_path(cli: &Cli) -> Result<std::path::PathBuf> {
    match &cli.ledger {
        Some(p) => Ok(p.clone()),
        None => ledger::path().ok_or_else(|| {
            ToolError::bad_input(
                "no state directory: neither SLURM_TOOLS_STATE_DIR, XDG_STATE_HOME nor HOME is set",
            )
            .with_hint(
                "set one of them (the ledger is <state dir>/runs.jsonl), or give --ledger FILE",
            )
        }),
    }
}

/// The ledger's runs that --cluster, --since and --name select (torn lines said and skipped).
fn read_runs(cli: &Cli, path: &std::path::Path, since: Option<u64>, now: u64) -> Result<Vec<Run>> {
    let (entries, torn) = ledger::read(path).map_err(|e| {
        ToolError::new(
            ErrorKind::BadInput,
            format!("cannot read the ledger {}: {e}", path.display()),
        )
        .with_hint("check the file's permissions, or give another with --ledger FILE")
    })?;
    if torn > 0 {
        shared::support::ui::warn(
            TOOL,
            &format!(
                "{torn} line(s) of {} are not entries (a writer killed mid-line?); skipped",
                path.display()
            ),
        );
    }
    Ok(ledger::fold(&entries)
        .into_iter()
        .filter(|r| cli.clusters.is_empty() || cli.clusters.contains(&r.cluster))
        .filter(|r| since.is_none_or(|age| r.submitted_at.unwrap_or(r.updated_at) + age >= now))
        .filter(|r| {
            cli.name
                .as_deref()
                .is_none_or(|g| r.job_name.as_deref().is_some_and(|n| glob(g, n)))
        })
        .collect())
}

/// --stats: the figures of the runs whose name matches.
fn print_stats(cli: &Cli, runs: Vec<Run>, pattern: &str) -> Result<u8> {
    let matching: Vec<Run> = runs
        .into_iter()
        .filter(|r| r.job_name.as_deref().is_some_and(|n| glob(pattern, n)))
        .collect();
    let (text, code) = stats::stats(&matching, pattern, cli.json)?;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        shared::support::ui::note(TOOL, &format!("could not write the figures: {e}"));
        return Ok(4);
    }
    Ok(code)
}

/// What the cluster said of a run now: a change said (when `said`) and sent as an event, a final
/// state recorded in the ledger once, the run brought up to date.
fn take_live(
    path: &std::path::Path,
    run: &mut Run,
    before: Option<&Live>,
    now_live: &Live,
    said: bool,
    sink: Option<&mut Sink>,
) {
    let changed =
        before.map(|b| (&b.state, &b.reason)) != Some((&now_live.state, &now_live.reason));
    if changed {
        if said {
            shared::support::ui::note(
                TOOL,
                &format!(
                    "{} job {}{}: {}{}",
                    run.cluster,
                    run.job_id,
                    run.job_name
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default(),
                    now_live.state,
                    now_live
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
            );
        }
        if let Some(sink) = sink {
            sink.send(TOOL, &event_for(run, now_live));
        }
    }
    if shared::slurm::is_final(&now_live.state)
        && run.slurm_state.as_deref() != Some(now_live.state.as_str())
    {
        record_end(path, run, now_live);
    }
    run.slurm_state = Some(now_live.state.clone());
    if now_live.nodes.is_some() {
        run.nodes = now_live.nodes.clone();
    }
}

/// --json: a line per run, with what the cluster said of it.
fn json_lines(shown: &[&Run], live: &BTreeMap<RunKey, Live>) -> String {
    let mut t = String::new();
    for r in shown {
        let mut v = serde_json::to_value(r).expect("a run serialises");
        if let Some(l) = live.get(&(r.cluster.clone(), r.job_id.clone())) {
            v["reason"] = l.reason.clone().into();
            v["pending_category"] = pending_category(l).into();
            v["estimated_start"] = l.estimated_start.into();
            if let Some(t) = &l.tasks {
                v["tasks"] = t.clone().into();
            }
        }
        t.push_str(&v.to_string());
        t.push('\n');
    }
    t
}

/// A pending run's reason in its category (shared/src/slurm/pending.rs; slurm-watch explains it
/// with the figures).
fn pending_category(l: &Live) -> Option<&'static str> {
    l.reason
        .as_deref()
        .filter(|_| l.state == "PENDING")
        .map(|r| shared::slurm::pending::Category::of(r).name())
}

fn event_for(run: &Run, l: &Live) -> Event {
    let kind = match l.state.as_str() {
        "PENDING" => "pending",
        "RUNNING" | "COMPLETING" | "CONFIGURING" => "running",
        s if shared::slurm::is_final(s) => "ended",
        _ => "state",
    };
    let mut e = Event::new(kind, &run.cluster, &run.job_id);
    e.job_name = run.job_name.clone();
    e.state = Some(l.state.clone());
    e.reason = l.reason.clone();
    e.category = pending_category(l).map(str::to_string);
    e.estimated_start = l.estimated_start;
    e.nodes = l.nodes.clone();
    e.status = run.status.clone();
    e.document = run.document.clone();
    e
}

/// A run seen ending: written back, so later listings need not ask the cluster.
fn record_end(path: &std::path::Path, run: &Run, l: &Live) {
    let e = Entry {
        event: "state".into(),
        at: shared::support::clock::unix_now(),
        cluster: run.cluster.clone(),
        job_id: run.job_id.clone(),
        slurm_state: Some(l.state.clone()),
        nodes: l.nodes.clone(),
        ..Entry::default()
    };
    if let Err(err) = ledger::append_to(path, &e) {
        shared::support::ui::warn(
            TOOL,
            &format!("could not write to the ledger {} ({err})", path.display()),
        );
    }
}

/// The saved document at `path`, when it can be trusted: under the state directory, the person's
/// own, not writable by others, and a valid document. Otherwise a warning and `None`.
fn trusted_document(cluster: &str, path: &str) -> Option<Document> {
    let p = Path::new(path);
    let under_state = shared::state::journal::state_dir()
        .and_then(|d| d.canonicalize().ok())
        .zip(p.canonicalize().ok())
        .is_some_and(|(d, f)| f.starts_with(d));
    let why = if !under_state {
        Some("is not under the tools' state directory".to_string())
    } else {
        shared::state::private_files::check_own(p)
    };
    if let Some(why) = why {
        shared::support::ui::warn(
            TOOL,
            &format!("{cluster}: not using the saved document {path}: it {why}"),
        );
        return None;
    }
    std::fs::read(p)
        .ok()
        .and_then(|b| Document::parse(&b, path).ok())
}

/// Ask every cluster with unfinished runs, all at once (one thread and one ssh execution per
/// cluster). What each said, and whether some cluster could not be asked.
fn refresh(runs: &[Run]) -> Result<(Vec<(RunKey, Live)>, bool)> {
    let mut by_cluster: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in runs.iter().filter(|r| !r.finished()) {
        by_cluster.entry(r.cluster.as_str()).or_default().push(r);
    }
    let asks = ask_each_cluster::<RunsQuery>(by_cluster);
    let mut seen = Vec::new();
    let mut unreachable = false;
    for (cluster, ids, reply) in asks {
        let (found, calls) = match reply {
            Ok(r) => r,
            Err(e) => {
                unreachable = true;
                shared::support::ui::warn(
                    TOOL,
                    &format!(
                        "{cluster}: {}{}; its runs are shown as the ledger has them",
                        e.message,
                        e.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                    ),
                );
                continue;
            }
        };
        shared::support::process::trace_event(&shared::support::process::TraceEvent::SlurmCalls {
            event: "slurm-calls",
            cluster: &cluster,
            squeue: calls.0,
            sacct: calls.1,
            jobs: ids.len() as u32,
        });
        for id in &ids {
            let direct = found.iter().find(|(f, _)| f == id).map(|(_, l)| l.clone());
            if let Some(l) = direct.or_else(|| fold_array(id, &found)) {
                seen.push(((cluster.clone(), id.clone()), l));
            }
        }
    }
    Ok((seen, unreachable))
}

/// One ssh execution per cluster, all at once (one thread each): operation `O` for that
/// cluster's job ids, through the cluster's newest trusted saved document. A cluster no saved
/// document can reach is skipped with a warning. Each asked cluster, its ids, and what came back.
#[allow(clippy::type_complexity)]
fn ask_each_cluster<O>(
    by_cluster: BTreeMap<&str, Vec<&Run>>,
) -> Vec<(String, Vec<String>, Result<O::Reply>)>
where
    O: Operation<Params = [String]>,
    O::Reply: Send + 'static,
{
    let mut asks = Vec::new();
    for (cluster, rs) in by_cluster {
        // The newest saved document of this cluster says how to reach it.
        // A saved document is configuration (its ssh options are run): only one of the person's
        // own, under the state directory, and not writable by others is used.
        let doc = rs
            .iter()
            .rev()
            .filter_map(|r| r.document.as_deref())
            .find_map(|p| trusted_document(cluster, p));
        let Some(doc) = doc else {
            shared::support::ui::warn(TOOL, &format!("{cluster}: no saved document says how to reach it; its runs are shown as the ledger has them"));
            continue;
        };
        let ids: Vec<String> = rs
            .iter()
            .map(|r| r.job_id.clone())
            .filter(|id| shared::slurm::is_job_id(id))
            .collect();
        let ssh = match shared::remote::ssh::Connection::read(&doc).and_then(|c| Ssh::connect(&c)) {
            Ok(s) => s,
            Err(e) => {
                shared::support::ui::warn(TOOL, &format!("{cluster}: its saved document cannot be used to reach it ({}); its runs are shown as the ledger has them", e.message));
                continue;
            }
        };
        let cluster = cluster.to_string();
        asks.push(std::thread::spawn(move || {
            let reply = shared::remote::run::<O>(&ssh, &ids);
            (cluster, ids, reply)
        }));
    }
    asks.into_iter()
        .map(|a| a.join().expect("a cluster's query thread"))
        .collect()
}

/// The live state of a cluster's runs (runs-query.sh): one squeue for every id (finished jobs
/// Slurm still holds included), then one sacct for the ids squeue did not know. Its reply: the
/// runs found, and the (squeue, sacct) calls it made.
struct RunsQuery;

impl Operation for RunsQuery {
    /// The job ids.
    type Params = [String];
    type Reply = (Vec<(String, Live)>, (u32, u32));
    const DEADLINE: Duration = Duration::from_secs(120);

    fn script(ids: &[String]) -> Result<Script> {
        let mut s = Script::new();
        s.assign("ids", &ids.join(","))?;
        s.raw(shared::remote::RUNS_QUERY);
        Ok(s)
    }

    fn reply(_: &[String], out: &shared::support::process::Output) -> Result<Self::Reply> {
        if !out.success() {
            return Err(shared::ToolError::remote(format!(
                "the query failed ({}): {}",
                out.exit_text(),
                out.stderr_tail.trim()
            )));
        }
        Ok(parse_reply(&out.stdout_text()))
    }
}

/// The runs a reply describes, and the (squeue, sacct) calls it made.
fn parse_reply(text: &str) -> (Vec<(String, Live)>, (u32, u32)) {
    let mut found = Vec::new();
    let mut calls = (0, 0);
    for line in text.lines() {
        if line.starts_with("SQUEUE ") {
            calls.0 += 1;
        } else if line.starts_with("SACCT ") {
            calls.1 += 1;
        } else if let Some(q) = line.strip_prefix("Q ") {
            let f: Vec<&str> = q.split('|').collect();
            if f.len() >= 5 && shared::slurm::is_job_id(f[0]) {
                let pending = f[1] == "PENDING";
                found.push((
                    f[0].to_string(),
                    Live {
                        state: f[1].to_string(),
                        reason: Some(f[2].to_string()).filter(|r| pending && r != "None"),
                        estimated_start: f[3].parse().ok().filter(|s| pending && *s > 0),
                        nodes: Some(f[4].to_string()).filter(|n| !n.is_empty() && !pending),
                        ..Live::default()
                    },
                ));
            }
        } else if let Some(a) = line.strip_prefix("A ") {
            let f: Vec<&str> = a.split('|').collect();
            if f.len() >= 4 && shared::slurm::is_job_id(f[0]) {
                let state = f[1]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_end_matches('+');
                found.push((
                    f[0].to_string(),
                    Live {
                        state: state.to_string(),
                        nodes: Some(f[3].to_string())
                            .filter(|n| !n.is_empty() && n != "None assigned"),
                        exit_code: Some(f[2].to_string()),
                        ..Live::default()
                    },
                ));
            }
        }
    }
    (found, calls)
}

fn in_state(r: &Run, want: &str) -> bool {
    let w = want.to_ascii_uppercase();
    match w.as_str() {
        "ACTIVE" => !r.finished(),
        "FINISHED" | "DONE" | "ENDED" => r.finished(),
        _ => {
            r.slurm_state.as_deref() == Some(w.as_str()) || r.status.as_deref() == Some(w.as_str())
        }
    }
}

/// `90s`, `30m`, `12h`, `3d`, `2w` (a bare number is seconds).
fn parse_age(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let mult = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => 0,
    };
    match num.parse::<u64>() {
        Ok(n) if mult > 0 => Ok(n.saturating_mul(mult)),
        _ => Err(ToolError::bad_input(format!("--since {s:?} is not an age"))
            .with_hint("give a number and a unit: 90s, 30m, 12h, 3d or 2w")),
    }
}

/// `*` any run of characters, `?` one character, everything else itself.
fn glob(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = name.chars().collect();
    glob_match(&p, &s)
}

/// `*` and `?` over characters, iteratively with one backtrack point (the last `*`): linear in
/// practice and never deeper than one stack frame, whatever the name or pattern.
fn glob_match(p: &[char], s: &[char]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(c) if *c == '?' || *c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

fn ago(now: u64, t: Option<u64>) -> String {
    let Some(t) = t else {
        return "?".into();
    };
    let d = now.saturating_sub(t);
    match d {
        0..=119 => format!("{d}s ago"),
        120..=7199 => format!("{}m ago", d / 60),
        7200..=172_799 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86_400),
    }
}

/// The image a run started from: the cached image's digest, short (`sha256:0123456789ab`), else
/// the image as the runtime got it, else `-`.
fn image_cell(r: &Run) -> String {
    match (&r.image_digest, &r.image) {
        (Some(d), _) => d.chars().take(19).collect(),
        (None, Some(i)) => i.clone(),
        (None, None) => "-".into(),
    }
}

shared::document_input! {
    /// What a run's saved document shows: its verdict (not of its type: none).
    struct SavedReport {
        report: Option<shared::contract::schema::Report> = label_section,
    }
}

/// A sweep's task rows from the run's saved (watched) document, when it has them.
fn task_rows(r: &Run) -> Vec<[String; 9]> {
    let Some(doc) = r
        .document
        .as_deref()
        .and_then(|p| trusted_document(&r.cluster, p))
    else {
        return Vec::new();
    };
    let Some(tasks) = SavedReport::read(&doc)
        .ok()
        .and_then(|s| s.report)
        .and_then(|rep| rep.tasks)
    else {
        return Vec::new();
    };
    tasks
        .iter()
        .map(|t| {
            let params: Vec<String> = t
                .params
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    format!("{k}={}", shared::remote::quote::quote_for_display(&v))
                })
                .collect();
            [
                String::new(),
                format!("  task {}", t.index),
                params.join(" "),
                "task".into(),
                t.slurm_state.clone(),
                t.status.to_string(),
                String::new(),
                String::new(),
                String::new(),
            ]
        })
        .collect()
}

fn table(runs: &[&Run], live: &BTreeMap<RunKey, Live>, now: u64, tasks: bool) -> String {
    if runs.is_empty() {
        return "no runs (slurm-submit and `slurm-alloc up` add theirs to the ledger)\n".into();
    }
    let mut rows = vec![[
        "CLUSTER".to_string(),
        "JOB".into(),
        "NAME".into(),
        "KIND".into(),
        "STATE".into(),
        "VERDICT".into(),
        "SUBMITTED".into(),
        "SNAPSHOT".into(),
        "IMAGE".into(),
    ]];
    for r in runs {
        let l = live.get(&(r.cluster.clone(), r.job_id.clone()));
        let mut state = r.slurm_state.clone().unwrap_or_else(|| "?".into());
        if r.cancelled_by
            .as_deref()
            .is_some_and(|c| c.starts_with("the race"))
        {
            state.push_str(" (by the race)");
        }
        // A sweep's tasks: counted per state while it runs, per verdict once watched.
        if let Some(tasks) = l.and_then(|l| l.tasks.as_deref()).or(r.tasks.as_deref()) {
            state.push_str(&format!(" [{tasks}]"));
        }
        if let Some(reason) = l.and_then(|l| l.reason.as_deref()) {
            match l.and_then(pending_category) {
                Some(c) => state.push_str(&format!(" ({reason}: {c})")),
                None => state.push_str(&format!(" ({reason})")),
            }
        }
        rows.push([
            r.cluster.clone(),
            r.job_id.clone(),
            r.job_name.clone().unwrap_or_else(|| "-".into()),
            r.kind.clone().unwrap_or_else(|| "-".into()),
            state,
            r.status.clone().unwrap_or_else(|| "-".into()),
            ago(now, r.submitted_at),
            r.snapshot
                .as_deref()
                .map(|s| s.chars().take(10).collect())
                .unwrap_or_else(|| "-".into()),
            image_cell(r),
        ]);
        if tasks {
            rows.extend(task_rows(r));
        }
    }
    columns(rows)
}

/// Rows as aligned columns; a cell is at most 60 characters (a ledger line may hold a
/// megabyte-long name).
fn columns<const N: usize>(mut rows: Vec<[String; N]>) -> String {
    for r in rows.iter_mut() {
        for c in r.iter_mut() {
            if c.chars().count() > 60 {
                *c = c.chars().take(59).chain(std::iter::once('…')).collect();
            }
        }
    }
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut t = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        t.push_str(line.join("  ").trim_end());
        t.push('\n');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query's script as assembled is clean; a query that failed is an error with its exit
    /// and stderr (the cluster's runs are then shown as the ledger has them).
    #[test]
    fn the_runs_query_as_assembled_is_clean_and_a_failed_one_says_why() {
        let ids = ["12".to_string(), "13_[0-3]".to_string()];
        shared::remote::script_check::assert_clean(
            "runs-query",
            RunsQuery::script(&ids).unwrap().as_str(),
        );
        let failed =
            shared::support::process::Output::of(Some(1), "", "squeue: error: slurm_load_jobs\n");
        let e = RunsQuery::reply(&ids, &failed).unwrap_err();
        assert_eq!(
            e.message,
            "the query failed (exit 1): squeue: error: slurm_load_jobs"
        );
        let ok = shared::support::process::Output::of(
            Some(0),
            "SQUEUE 0\nQ 12|RUNNING|None|0|mn1\n",
            "",
        );
        let (found, calls) = RunsQuery::reply(&ids, &ok).unwrap();
        assert_eq!((found.len(), calls), (1, (1, 0)));
    }

    #[test]
    fn a_job_array_is_one_run_with_its_tasks_counted() {
        let (found, _) = parse_reply(
            "SQUEUE 0\nQ 20_0|RUNNING|None|1|mn1\nQ 20_1|PENDING|JobArrayTaskLimit|0|\nQ 20_2|COMPLETED|None|1|mn2\nQ 21|RUNNING|None|1|mn3\nSACCT 0\nA 20_2|COMPLETED|0:0|mn2\n",
        );
        let l = fold_array("20", &found).unwrap();
        assert_eq!(l.state, "RUNNING");
        assert_eq!(
            l.tasks.as_deref(),
            Some("1 RUNNING, 1 PENDING, 1 COMPLETED")
        );
        assert_eq!(
            fold_array("21", &found),
            None,
            "a plain job is not an array"
        );
        assert_eq!(fold_array("2", &found), None, "20's tasks are not 2's");
        let (done, _) = parse_reply(
            "SACCT 0\nA 30_0|COMPLETED|0:0|mn1\nA 30_1|FAILED|3:0|mn1\nA 30_2|COMPLETED|0:0|mn1\n",
        );
        let l = fold_array("30", &done).unwrap();
        assert_eq!(
            (l.state.as_str(), l.tasks.as_deref()),
            ("FAILED", Some("2 COMPLETED, 1 FAILED"))
        );
        assert_eq!(l.nodes.as_deref(), Some("mn1"));
    }

    #[test]
    fn ages_globs_and_replies() {
        assert_eq!(parse_age("90s").unwrap(), 90);
        assert_eq!(parse_age("3d").unwrap(), 259_200);
        assert!(parse_age("3 days").is_err());
        assert!(glob("train-*", "train-llama"));
        assert!(!glob("train-?", "train-ab"));
        assert!(glob("*a*b", "xxaxxb"));
        assert!(!glob("*a*b", "xxaxxbc"));
        assert!(glob("é?", "éü"));
        // A 1 MB name and a pathological pattern: no deep recursion, no exponential time.
        let long = "y".repeat(1 << 20);
        assert!(glob("*", &long));
        assert!(!glob(&format!("{}x", "*y".repeat(8)), &long));
        let (found, calls) = parse_reply(
            "SQUEUE 0\nQ 12|PENDING|Priority|1800000000|\nQ 13|RUNNING|None|1700000000|mn[1-2]\nSACCT 0\nA 11|CANCELLED by 1001|0:15|mn1\n",
        );
        assert_eq!(calls, (1, 1));
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].1.reason.as_deref(), Some("Priority"));
        assert_eq!(found[1].1.nodes.as_deref(), Some("mn[1-2]"));
        assert_eq!(found[2].1.state, "CANCELLED");
    }
}
