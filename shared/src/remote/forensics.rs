//! Hang forensics: silence per rank (slurm-watch's stall detection: a hang that prints nothing),
//! and the evidence of a running job's tasks (shared/src/remote/sh/forensics-run.sh starts
//! forensics-collect.sh on every node of the job), read into the `forensics` section with a
//! diagnosis: by slurm-watch before it cancels a hung job, by `slurm-attach --stacks` on request.

use crate::contract::schema::{Forensics, ForensicsNode, ForensicsProcess, RankOutput, SilentRank};
use crate::remote::quote::Script;
use crate::remote::ssh::Ssh;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The rank a log line names: srun's `--label` form (`3: text`, padded with blanks) or PyTorch's
/// `[rank3]:`.
pub fn rank_of(line: &str) -> Option<u32> {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("[rank") {
        let (n, _) = rest.split_once("]:")?;
        return n.parse().ok();
    }
    let (n, _) = t.split_once(": ")?;
    if n.is_empty() || n.len() > 6 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// When the job's output last grew, as a whole and per rank.
#[derive(Debug, Default)]
pub struct Silence {
    last_any: Option<Instant>,
    /// Each rank's last line and when it came.
    ranks: BTreeMap<u32, (Instant, String)>,
}

impl Silence {
    /// The job is running and its output counts from now (also after a container import, which
    /// prints nothing while it works).
    pub fn restart(&mut self, now: Instant) {
        self.last_any = Some(now);
        for (t, _) in self.ranks.values_mut() {
            *t = now;
        }
    }

    pub fn running(&self) -> bool {
        self.last_any.is_some()
    }

    /// Output arrived: `bytes` of it, these complete lines.
    pub fn saw(&mut self, bytes: usize, lines: &[String], now: Instant) {
        if bytes > 0 && self.last_any.is_some() {
            self.last_any = Some(now);
        }
        for l in lines {
            if let Some(r) = rank_of(l) {
                self.ranks.insert(r, (now, l.clone()));
            }
        }
    }

    /// A stall: ranks silent for `limit` while another rank went on, or no output at all for
    /// `limit`; the words for it and the silent ranks.
    pub fn stalled(&self, limit: Duration, now: Instant) -> Option<(String, Vec<SilentRank>)> {
        let last = self.last_any?;
        let quiet = |t: &Instant| now.duration_since(*t) >= limit;
        let silent: Vec<SilentRank> = self
            .ranks
            .iter()
            .filter(|(_, (t, _))| quiet(t))
            .map(|(r, (t, _))| SilentRank {
                rank: *r,
                silent_seconds: now.duration_since(*t).as_secs(),
            })
            .collect();
        if self.ranks.len() >= 2
            && !silent.is_empty()
            && self.ranks.values().any(|(t, _)| !quiet(t))
        {
            let names: Vec<u32> = silent.iter().map(|s| s.rank).collect();
            return Some((
                format!(
                    "{} nothing for {} s while the other ranks went on (stall_seconds)",
                    phrase(&names, "printed", "printed"),
                    limit.as_secs()
                ),
                silent,
            ));
        }
        if quiet(&last) {
            return Some((
                format!(
                    "the job printed nothing for {} s (stall_seconds)",
                    now.duration_since(last).as_secs()
                ),
                silent,
            ));
        }
        None
    }
}

impl Silence {
    /// Each rank's last line, and the seconds since it came.
    pub fn rank_output(&self, now: Instant) -> Vec<RankOutput> {
        self.ranks
            .iter()
            .map(|(r, (t, line))| RankOutput {
                rank: *r,
                last_line: line.clone(),
                seconds_ago: now.duration_since(*t).as_secs(),
            })
            .collect()
    }
}

/// The seconds the whole collection may take: the cancel follows it.
pub const LIMIT_SECONDS: u64 = 20;

/// The same when py-spy may be installed first (`install_py_spy`): the install is cut at 10 s.
pub const LIMIT_INSTALL_SECONDS: u64 = 28;

/// The limit for a collection that may install py-spy or not.
pub fn limit(install: bool) -> u64 {
    if install {
        LIMIT_INSTALL_SECONDS
    } else {
        LIMIT_SECONDS
    }
}

/// Run the collection on every node of the running job; its output (nodes' lines with srun's
/// task label) and the seconds it took. With `check`, a job that is not running is an error
/// that says so (pending, ended) and nothing is started.
pub fn collect(
    ssh: &Ssh,
    job_id: &str,
    check: bool,
    install: bool,
) -> crate::Result<(String, f64)> {
    let started = Instant::now();
    let params = Collection {
        job_id: job_id.to_string(),
        check,
        install,
    };
    let text = crate::remote::run::<Collect>(ssh, &params)?;
    Ok((text, started.elapsed().as_secs_f64()))
}

/// What [`Collect`] is given.
pub struct Collection {
    pub job_id: String,
    /// Check first that the job runs (a job that does not is an error that says so).
    pub check: bool,
    /// Install py-spy where it is missing (a longer limit).
    pub install: bool,
}

/// The collection on every node of the job (forensics-run.sh running forensics-collect.sh in a
/// step): its output, nodes' lines with srun's task label, and its stderr as a last
/// `@@stderr` line.
pub struct Collect;

impl crate::remote::Operation for Collect {
    type Params = Collection;
    type Reply = String;
    const DEADLINE: Duration = Duration::from_secs(LIMIT_SECONDS + 15);

    fn deadline(p: &Collection) -> Duration {
        Duration::from_secs(limit(p.install) + 15)
    }

    fn script(p: &Collection) -> crate::Result<Script> {
        let mut collector = Script::new();
        collector.assign("job", &p.job_id)?;
        collector.assign("pyspy_timeout", "8")?;
        collector.raw(crate::remote::FORENSICS_COLLECT);
        let mut s = Script::new();
        if p.check {
            crate::remote::running::check_running(&mut s, &p.job_id)?;
        } else {
            s.assign("job", &p.job_id)?;
        }
        s.assign("limit", &limit(p.install).to_string())?;
        s.assign("install", if p.install { "1" } else { "0" })?;
        s.assign("collector", collector.as_str())?;
        s.raw(crate::remote::FORENSICS_RUN);
        Ok(s)
    }

    fn reply(p: &Collection, out: &crate::support::process::Output) -> crate::Result<String> {
        if p.check {
            if let Some(e) = crate::remote::running::not_running_error(&p.job_id, out) {
                return Err(e);
            }
        }
        let mut text = out.stdout_text();
        if !out.stderr_tail.trim().is_empty() {
            text.push_str(&format!("@@stderr {}\n", out.stderr_tail.trim()));
        }
        Ok(text)
    }
}

/// The whole of it: collected, read, saved in the local folder (`local_dir`), diagnosed. A
/// collection that failed is said in `missing`, never an error (a hung job is cancelled anyway).
pub fn gather(
    ssh: &Ssh,
    to: &SaveTo,
    job_id: &str,
    reason: &str,
    silence: Option<(Vec<SilentRank>, Vec<RankOutput>)>,
    install: bool,
) -> Forensics {
    let mut f = match collect(ssh, job_id, false, install) {
        Ok((text, secs)) => {
            let mut f = parse(job_id, reason, &text);
            f.collected_seconds = (secs * 10.0).round() / 10.0;
            f.file = save(to, job_id, &text);
            f
        }
        Err(e) => Forensics {
            job_id: job_id.to_string(),
            reason: reason.to_string(),
            missing: vec![format!("the collection: {}", e.message)],
            ..Forensics::default()
        },
    };
    if let Some((silent, output)) = silence {
        f.silent_ranks = silent;
        f.rank_output = output;
    }
    diagnose(&mut f);
    f
}

/// The whole collection, as the nodes printed it, into the local folder (else the state
/// directory's `forensics/`); its path (none when it cannot be written: said on stderr).
/// Where the evidence is kept: the document's local folder, else the state directory's
/// `forensics/<cluster>-<job>.txt`.
pub struct SaveTo {
    pub dirs: crate::state::local_dirs::LocalDirs,
    pub cluster: String,
}

pub fn save(to: &SaveTo, job_id: &str, text: &str) -> Option<String> {
    // The document's local folder, else the state directory (as slurm-fetch's default), so a
    // document that names no folder still keeps the evidence.
    let cluster = &to.cluster;
    let path = match crate::state::local_dirs::local_dir(&to.dirs) {
        Some(dir) => dir.join(format!("forensics-{job_id}.txt")),
        None => crate::state::journal::state_dir()?
            .join("forensics")
            .join(format!(
                "{}-{job_id}.txt",
                crate::remote::layout::sanitize(cluster, true)
            )),
    };
    let dir = path.parent()?.to_path_buf();
    match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
        Ok(()) => Some(path.display().to_string()),
        Err(e) => {
            eprintln!(
                "slurm-tools: warning: could not write the forensics to {}: {e}",
                path.display()
            );
            None
        }
    }
}

/// The collection's output read into its section (the diagnosis not yet made).
pub fn parse(job_id: &str, reason: &str, text: &str) -> Forensics {
    let mut f = Forensics {
        job_id: job_id.to_string(),
        reason: reason.to_string(),
        ..Forensics::default()
    };
    // Each node's lines carry its task's label; lines without one are srun's own or the run's.
    let mut by_task: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("@@") {
            run_line(&mut f, rest);
            continue;
        }
        match t.split_once(": ") {
            Some((n, rest)) if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
                by_task
                    .entry(n.parse().unwrap_or(0))
                    .or_default()
                    .push(rest);
            }
            _ => {}
        }
    }
    for lines in by_task.values() {
        let node = node_of(lines, &mut f.missing);
        f.nodes.push(node);
    }
    f
}

/// A line of the run's own (`@@word arg`, no task label): how the collection went.
fn run_line(f: &mut Forensics, rest: &str) {
    let (word, arg) = rest.split_once(' ').unwrap_or((rest, ""));
    match word {
        "cut" => f.cut = true,
        "error" => f.missing.push(format!("the collection: {arg}")),
        "status" if arg != "0" && arg != "124" && arg != "137" => f
            .missing
            .push(format!("the collection's srun exited {arg}")),
        "stderr" => f.missing.push(format!("the collection said: {arg}")),
        "installed" => f.installed.push(format!("{arg} (from the login node)")),
        "install-failed" => f.missing.push(arg.to_string()),
        _ => {}
    }
}

/// One node's lines (its task's label taken off): the node, its GPUs and processes with their
/// stacks; what it could not collect goes to `missing`.
fn node_of(lines: &[&str], missing: &mut Vec<String>) -> ForensicsNode {
    let mut node = ForensicsNode::default();
    let mut in_stack = false;
    for line in lines {
        if in_stack {
            if *line == "@@end" {
                in_stack = false;
            } else if let Some(p) = node.processes.last_mut() {
                // py-spy's own header (`Process N: ...`, `Python v3.x (...)`) is not a frame.
                let header = p.python_stack.is_empty()
                    && (line.starts_with("Process ") || line.starts_with("Python v"));
                if !line.trim().is_empty() && !header {
                    p.python_stack.push(line.trim_end().to_string());
                }
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("@@") else {
            continue;
        };
        let (word, arg) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "node" => node.node = arg.to_string(),
            "missing" => missing.push(format!(
                "{} on {}",
                arg,
                if node.node.is_empty() {
                    "a node"
                } else {
                    &node.node
                }
            )),
            "gpu" => node.gpus.push(arg.to_string()),
            "proc" => {
                if let Some(p) = process_of(arg) {
                    node.processes.push(p);
                }
            }
            "cmd" => {
                if let Some(p) = node.processes.last_mut() {
                    p.command = arg.trim().to_string();
                }
            }
            "env" => {
                if let (Some(p), Some((k, v))) = (node.processes.last_mut(), arg.split_once('=')) {
                    p.env.insert(k.to_string(), v.to_string());
                }
            }
            "stack" => in_stack = true,
            "resolve" => {
                if let Some((host, ok)) = arg.split_once(' ') {
                    node.master_resolves.insert(host.to_string(), ok == "ok");
                }
            }
            _ => {}
        }
    }
    node
}

/// `@@proc PID RANK STEP STATE WCHAN SOCKETS`
fn process_of(arg: &str) -> Option<ForensicsProcess> {
    let w: Vec<&str> = arg.split_whitespace().collect();
    (w.len() >= 6).then(|| ForensicsProcess {
        pid: w[0].parse().unwrap_or(0),
        rank: w[1].parse().ok(),
        step: (w[2] != "-").then(|| w[2].to_string()),
        state: w[3].to_string(),
        wchan: w[4].to_string(),
        sockets: w[5].parse().unwrap_or(0),
        ..ForensicsProcess::default()
    })
}

/// The frames of a process's main thread (`function (file:line)`), innermost first.
fn main_frames(p: &ForensicsProcess) -> Vec<&str> {
    let has_main = p.python_stack.iter().any(|x| x.contains("\"MainThread\""));
    let mut in_main = false;
    let mut frames = Vec::new();
    for l in &p.python_stack {
        let t = l.trim();
        if t.starts_with("Thread ") {
            if in_main {
                break;
            }
            in_main = !has_main || t.contains("\"MainThread\"");
            continue;
        }
        if in_main && t.contains(" (") && t.ends_with(')') {
            frames.push(t);
        }
    }
    frames
}

/// Where a process is: the innermost frame of its main thread, else where the kernel has it
/// waiting.
fn where_it_is(p: &ForensicsProcess) -> String {
    match main_frames(p).first() {
        Some(f) => f.to_string(),
        None => format!("the kernel's {} (state {})", p.wchan, p.state),
    }
}

/// The same, with the two frames that called it (`a (x.py:1), called from b (y.py:2) < c`).
fn where_it_is_long(p: &ForensicsProcess) -> String {
    let frames = main_frames(p);
    match frames.split_first() {
        Some((first, rest)) if !rest.is_empty() => {
            let callers: Vec<&str> = rest.iter().take(2).copied().collect();
            format!("{first}, called from {}", callers.join(" < "))
        }
        _ => where_it_is(p),
    }
}

/// The frame's function, for grouping ranks (`recv_into (socket.py:12)` -> `recv_into`).
fn function_of(frame: &str) -> &str {
    frame.split(" (").next().unwrap_or(frame)
}

/// `rank 3`, `ranks 1 and 3`, `ranks 0, 1 and 2`; and the verb's form for it (`has`/`have`).
fn phrase(list: &[u32], one: &'static str, many: &'static str) -> String {
    let r: Vec<String> = list.iter().map(u32::to_string).collect();
    match r.split_last() {
        Some((last, [])) => format!("rank {last} {one}"),
        Some((last, rest)) => format!("ranks {} and {last} {many}", rest.join(", ")),
        None => String::new(),
    }
}

/// The diagnosis: the rank that stopped first (silent longest, else the one whose stack differs
/// from all the others'), what the others wait in, and the classic multi-node mistakes.
pub fn diagnose(f: &mut Forensics) {
    let ranks = ranks_of(&f.nodes);
    let mut said = Vec::new();
    if ranks.is_empty() {
        said.push("no process of the job was found on its nodes (it may have ended while the evidence was collected)".to_string());
    }
    let (stalled_rank, stalled_node) = where_ranks_are(&ranks, &f.silent_ranks, &mut said);
    mistakes(&ranks, &f.nodes, &mut said);
    if stalled_rank.is_some() {
        f.stalled_rank = stalled_rank;
    }
    if stalled_node.is_some() {
        f.stalled_node = stalled_node;
    }
    if f.cut {
        said.push(
            "the collection was cut at its time limit: what the nodes printed until then is here"
                .to_string(),
        );
    }
    f.diagnosis = said;
}

/// One process per rank: the Python one where there is one, else the newest (the command a
/// shell started); with its node.
fn ranks_of(nodes: &[ForensicsNode]) -> BTreeMap<u32, (String, &ForensicsProcess)> {
    let mut ranks: BTreeMap<u32, (String, &ForensicsProcess)> = BTreeMap::new();
    for n in nodes {
        for p in &n.processes {
            let Some(r) = p.rank else { continue };
            let better = match ranks.get(&r) {
                None => true,
                Some((_, q)) => {
                    (!p.python_stack.is_empty() && q.python_stack.is_empty())
                        || (p.python_stack.is_empty() == q.python_stack.is_empty() && p.pid > q.pid)
                }
            };
            if better {
                ranks.insert(r, (n.node.clone(), p));
            }
        }
    }
    ranks
}

/// Where the ranks are: the rank that stopped first (silent longest, else the one somewhere
/// else than all the others) and its node, or that none stands out, said.
fn where_ranks_are(
    ranks: &BTreeMap<u32, (String, &ForensicsProcess)>,
    silent_ranks: &[crate::contract::schema::SilentRank],
    said: &mut Vec<String>,
) -> (Option<u32>, Option<String>) {
    let (mut stalled_rank, mut stalled_node) = (None, None);
    // Where each rank is, grouped.
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, (_, p)) in ranks {
        groups
            .entry(function_of(&where_it_is(p)).to_string())
            .or_default()
            .push(*r);
    }
    // The one rank somewhere else than all the others: by where each is (its Python frame, else
    // its kernel wait), else by the kernel wait alone (comparable where py-spy is missing on
    // some nodes).
    let odd_one = |groups: &BTreeMap<String, Vec<u32>>| {
        let singles: Vec<&Vec<u32>> = groups.values().filter(|v| v.len() == 1).collect();
        let largest = groups.values().map(Vec::len).max().unwrap_or(0);
        (ranks.len() >= 3 && singles.len() == 1 && largest >= 2).then(|| singles[0][0])
    };
    let mut kernel: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, (_, p)) in ranks {
        kernel.entry(p.wchan.clone()).or_default().push(*r);
    }
    let outlier = odd_one(&groups).or_else(|| odd_one(&kernel));
    let by_silence = silent_ranks
        .iter()
        .max_by_key(|s| s.silent_seconds)
        .map(|s| s.rank)
        .filter(|_| silent_ranks.len() < ranks.len().max(2));
    let stalled = by_silence.or(outlier);
    if let Some(r) = stalled {
        stalled_rank = Some(r);
        if let Some((node, p)) = ranks.get(&r) {
            stalled_node = Some(node.clone());
            let others: Vec<u32> = ranks.keys().copied().filter(|x| *x != r).collect();
            let mut s = format!(
                "rank {r} on {node} stopped first: it is in {}",
                where_it_is_long(p)
            );
            if by_silence == Some(r) {
                s.push_str(" and printed nothing since the others went on");
            }
            if !others.is_empty() {
                let theirs: std::collections::BTreeSet<String> = others
                    .iter()
                    .filter_map(|o| ranks.get(o))
                    .map(|(_, q)| function_of(&where_it_is(q)).to_string())
                    .collect();
                let theirs: Vec<String> = theirs.into_iter().collect();
                s.push_str(&format!(
                    "; {} {}",
                    phrase(&others, "waits in", "wait in"),
                    theirs.join(" / ")
                ));
            }
            said.push(s);
        } else {
            said.push(format!("rank {r} stopped printing first; none of its processes was found (it may have exited)"));
        }
    } else if groups.len() == 1 && ranks.len() >= 2 {
        let (at, all) = groups.iter().next().expect("one group");
        said.push(format!(
            "no rank stands out: {} all in {at} (a collective every rank waits in, or a hang outside the ranks)",
            phrase(all, "is", "are")
        ));
    } else if ranks.len() >= 2 {
        let parts: Vec<String> = groups
            .iter()
            .map(|(at, rs)| format!("{} in {at}", phrase(rs, "is", "are")))
            .collect();
        said.push(format!(
            "the ranks are in different places: {}",
            parts.join("; ")
        ));
    }
    (stalled_rank, stalled_node)
}

/// The classic multi-node mistakes: ranks that disagree on the world size or the master
/// address, a master address a node cannot resolve.
fn mistakes(
    ranks: &BTreeMap<u32, (String, &ForensicsProcess)>,
    nodes: &[ForensicsNode],
    said: &mut Vec<String>,
) {
    let mut world: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut master: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (r, (_, p)) in ranks {
        if let Some(w) = p.env.get("WORLD_SIZE").or(p.env.get("SLURM_NTASKS")) {
            world.entry(w.clone()).or_default().push(*r);
        }
        if let Some(m) = p.env.get("MASTER_ADDR") {
            master.entry(m.clone()).or_default().push(*r);
        }
    }
    if world.len() > 1 {
        let parts: Vec<String> = world
            .iter()
            .map(|(w, rs)| format!("{} {w}", phrase(rs, "has", "have")))
            .collect();
        said.push(format!(
            "the ranks disagree on the world size: {} (each waits for ranks that will never come)",
            parts.join("; ")
        ));
    }
    if master.len() > 1 {
        let parts: Vec<String> = master
            .iter()
            .map(|(m, rs)| format!("{} {m}", phrase(rs, "uses", "use")))
            .collect();
        said.push(format!(
            "the ranks disagree on the master address: {}",
            parts.join("; ")
        ));
    }
    for n in nodes {
        for (host, ok) in &n.master_resolves {
            if !ok {
                said.push(format!(
                    "the master address {host} does not resolve on {}: its ranks cannot reach the master",
                    n.node
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_read_from_srun_labels_and_pytorch_prefixes() {
        assert_eq!(rank_of("3: step 10"), Some(3));
        assert_eq!(rank_of(" 12: x"), Some(12));
        assert_eq!(rank_of("[rank5]: Traceback"), Some(5));
        assert_eq!(rank_of("12:30:01 started"), None, "a time is not a rank");
        assert_eq!(rank_of("epoch: 3"), None);
        assert_eq!(rank_of("no rank here"), None);
    }

    #[test]
    fn a_silent_rank_is_a_stall_while_the_others_go_on() {
        let t0 = Instant::now();
        let mut s = Silence::default();
        s.restart(t0);
        s.saw(10, &["0: a".into(), "1: a".into()], t0);
        let later = t0 + Duration::from_secs(30);
        s.saw(5, &["0: b".into()], later);
        let (why, silent) = s.stalled(Duration::from_secs(20), later).unwrap();
        assert!(why.contains("rank 1 printed nothing"), "{why}");
        assert_eq!(
            silent,
            vec![SilentRank {
                rank: 1,
                silent_seconds: 30
            }]
        );
        // Nothing from anyone.
        let mut q = Silence::default();
        q.restart(t0);
        assert!(q
            .stalled(Duration::from_secs(20), t0 + Duration::from_secs(5))
            .is_none());
        let (why, _) = q
            .stalled(Duration::from_secs(20), t0 + Duration::from_secs(21))
            .unwrap();
        assert!(why.contains("printed nothing for 21 s"), "{why}");
        // Not running yet: never a stall.
        assert!(Silence::default()
            .stalled(Duration::from_secs(1), later)
            .is_none());
    }

    const SAMPLE: &str = "0: @@node mn1
0: @@proc 100 0 0 S do_select 3
0: @@cmd python3 work.py
0: @@env WORLD_SIZE=4
0: @@env MASTER_ADDR=mn1
0: @@stack
0: Process 100: python3 work.py
0: Python v3.11.2 (/usr/bin/python3.11)
0: 
0: Thread 100 (idle): \"MainThread\"
0:     recv_into (socket.py:700)
0:     main (work.py:20)
0: @@end
0: @@proc 101 1 0 S do_select 2
0: @@cmd python3 work.py
0: @@env WORLD_SIZE=4
0: @@stack
0: Thread 101 (idle): \"MainThread\"
0:     recv_into (socket.py:700)
0:     main (work.py:20)
0: @@end
0: @@resolve mn1 ok
1: @@node mn2
1: @@missing py-spy (no Python stacks)
1: @@proc 200 2 0 S do_select 1
1: @@cmd python3 work.py
1: @@env WORLD_SIZE=4
1: @@proc 201 3 0 S hrtimer_nanosleep 0
1: @@cmd python3 work.py
1: @@env WORLD_SIZE=3
1: @@resolve mn1 fail
@@status 0
";

    #[test]
    fn the_collection_is_read_per_node_and_the_odd_rank_is_named() {
        let mut f = parse("7", "stalled", SAMPLE);
        assert_eq!(f.nodes.len(), 2);
        assert_eq!(f.nodes[0].node, "mn1");
        assert_eq!(f.nodes[0].processes.len(), 2);
        assert_eq!(
            f.nodes[0].processes[0].python_stack.len(),
            3,
            "py-spy's header is not a frame: {:?}",
            f.nodes[0].processes[0]
        );
        assert!(f.nodes[0].processes[0].python_stack[0].starts_with("Thread 100"));
        assert_eq!(
            f.nodes[0].processes[0].python_stack[1],
            "    recv_into (socket.py:700)"
        );
        assert_eq!(f.nodes[1].processes[1].wchan, "hrtimer_nanosleep");
        assert_eq!(f.missing, vec!["py-spy (no Python stacks) on mn2"]);
        diagnose(&mut f);
        assert_eq!(f.stalled_rank, Some(3), "{:?}", f.diagnosis);
        assert_eq!(f.stalled_node.as_deref(), Some("mn2"));
        let text = f.diagnosis.join("\n");
        assert!(
            text.contains("rank 3 on mn2 stopped first: it is in the kernel's hrtimer_nanosleep"),
            "{text}"
        );
        assert!(text.contains("disagree on the world size"), "{text}");
        assert!(text.contains("mn1 does not resolve on mn2"), "{text}");
    }

    #[test]
    fn the_rank_silent_longest_is_named_first() {
        let mut f = parse("7", "stalled", SAMPLE);
        f.silent_ranks = vec![SilentRank {
            rank: 1,
            silent_seconds: 40,
        }];
        diagnose(&mut f);
        assert_eq!(f.stalled_rank, Some(1));
        assert!(
            f.diagnosis[0].contains("printed nothing since"),
            "{:?}",
            f.diagnosis
        );
    }
}
