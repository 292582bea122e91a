//! `slurm-resolve --place`: where would this request start first? Every catalog cluster that can
//! serve it is asked, one ssh execution each over its master (or a key login), what decides the
//! start (shared/src/remote/sh/place-probe.sh): Slurm's estimate for exactly this request
//! (`sbatch --test-only` with its arguments), the limits that would block it, the GPUs free now
//! and the person's own pending jobs there. The earliest estimated start wins; every candidate is
//! written with its figures and why it lost.

use super::catalog::{Catalog, Entry};
use shared::contract::doc::Document;
use shared::contract::schema::{Placement, PlacementCandidate};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::slurm::pending::Facts;
use shared::{ErrorKind, Result, ToolError};
use std::time::{Duration, Instant};

shared::document_input! {
    /// What a candidate's document asks of its cluster (by resolve's own rules): the request's
    /// Slurm settings, and how to reach the cluster.
    pub struct Request {
        pub settings: shared::slurm::SettingsInput = part,
        pub connection: shared::remote::ssh::Connection = part,
    }
}

/// The sbatch arguments of the request a candidate's document makes: nodes, GPUs per node, time
/// limit, account, partition and the site's options (qos, mem, ...).
pub fn request_argv(r: &Request) -> Result<Vec<String>> {
    let st = &r.settings;
    let mut argv = vec![format!("--nodes={}", st.node_count.unwrap_or(1))];
    for (v, flag) in [(&st.account, "--account"), (&st.partition, "--partition")] {
        if let Some(v) = v {
            argv.push(format!("{flag}={v}"));
        }
    }
    if let Some(g) = gpus_per_node(r) {
        argv.push(format!("--gpus-per-node={g}"));
    }
    if let Some(t) = &st.time_limit {
        argv.push(format!("--time={}", shared::slurm::check_time_limit(t)?));
    }
    shared::slurm::SiteOptions::from_input(st)?.push(&mut argv);
    Ok(argv)
}

/// GPUs per node the request asks for: `required_devices_per_node`, else `gpus_per_node`.
fn gpus_per_node(r: &Request) -> Option<i64> {
    r.settings
        .required_devices_per_node
        .or(r.settings.gpus_per_node)
}

/// What one cluster answered (place-probe.sh's lines).
#[derive(Debug, Default)]
pub struct Answer {
    pub partition: Option<String>,
    pub estimated_start: Option<u64>,
    pub refused: Option<String>,
    pub max_time: Option<String>,
    pub max_nodes: Option<String>,
    pub partition_state: Option<String>,
    pub free_gpus: u64,
    pub total_gpus: u64,
    pub idle_nodes: u64,
    pub pending_mine: Option<u64>,
    pub facts: Facts,
}

/// The GPU count of one sinfo gres word list (`gpu:4`, `gpu:a100:4`, `gpu:a100:0(IDX:N/A)`,
/// `gpu:2(IDX:0-1),tmpdisk:100`).
fn gres_gpus(text: &str) -> u64 {
    text.split(',')
        .filter(|g| g.starts_with("gpu"))
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u64>().ok())
        .sum()
}

impl Answer {
    pub fn parse(text: &str) -> Answer {
        let mut a = Answer::default();
        let mut facts = Vec::new();
        for line in text.lines() {
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            match tag {
                "PARTITION" => {
                    a.partition = Some(rest.trim().to_string()).filter(|p| !p.is_empty())
                }
                "TEST" => {
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    a.estimated_start = words
                        .windows(4)
                        .find(|w| w[0] == "to" && w[1] == "start" && w[2] == "at")
                        .and_then(|w| w[3].parse().ok());
                    if a.estimated_start.is_none() {
                        a.refused = Some(rest.trim().to_string());
                    }
                }
                "PART" => {
                    let mut p = shared::slurm::parse_scontrol(rest);
                    a.max_time = p.remove("MaxTime");
                    a.max_nodes = p.remove("MaxNodes");
                    a.partition_state = p.remove("State");
                }
                "NODE" => {
                    let w: Vec<&str> = rest.split_whitespace().collect();
                    if let [_, state, gres, used, ..] = w[..] {
                        let state = state.trim_end_matches(|c: char| !c.is_ascii_alphabetic());
                        let total = gres_gpus(gres);
                        a.total_gpus += total;
                        if state == "idle" {
                            a.idle_nodes += 1;
                        }
                        if state == "idle" || state == "mix" {
                            a.free_gpus += total.saturating_sub(gres_gpus(used));
                        }
                    }
                }
                "MINE_PENDING" => a.pending_mine = rest.trim().parse().ok(),
                "PQ" | "PR" | "PA" => facts.push(line.to_string()),
                _ => {}
            }
        }
        a.facts = Facts::from_lines(&facts);
        a
    }

    /// A limit that keeps the request from starting there now, in words.
    pub fn blocked_by(&self, r: &Request) -> Result<Option<String>> {
        if let Some(r) = &self.refused {
            return Ok(Some(format!("Slurm refuses the request: {r}")));
        }
        if let Some(s) = self.partition_state.as_deref().filter(|s| *s != "UP") {
            return Ok(Some(format!("the partition's State is {s}")));
        }
        let secs = |t: &str| shared::slurm::parse_time_limit(t);
        if let (Some(asked), Some(max)) =
            (r.settings.time_limit.as_deref(), self.max_time.as_deref())
        {
            if let (Some(a), Some(m)) = (secs(asked), secs(max)) {
                if a > m {
                    return Ok(Some(format!(
                        "time_limit {asked} is over the partition's MaxTime {max}"
                    )));
                }
            }
        }
        let nodes = r.settings.node_count.unwrap_or(1);
        if let Some(max) = self
            .max_nodes
            .as_deref()
            .and_then(|m| m.parse::<i64>().ok())
        {
            if nodes > max {
                return Ok(Some(format!(
                    "node_count {nodes} is over the partition's MaxNodes {max}"
                )));
            }
        }
        let asked = gpus_per_node(r).unwrap_or(0).max(0) as u64 * nodes.max(1) as u64;
        if let Some((cap, used, ids)) = self.facts.qos_gpu_cap() {
            if asked > 0 && used + asked > cap {
                let qos = self.facts.qos.as_ref().and_then(|q| q.first()).cloned();
                return Ok(Some(format!(
                    "your QOS {} allows {cap} GPUs per user and your running jobs {} use {used}; this request asks for {asked}",
                    qos.unwrap_or_default(),
                    if ids.is_empty() { "(none)".to_string() } else { ids.join(", ") }
                )));
            }
        }
        let partition = self
            .partition
            .as_deref()
            .or(r.settings.partition.as_deref());
        if let Some((cap, account)) = self
            .facts
            .assoc_gpu_max_per_job(r.settings.account.as_deref(), partition)
        {
            if asked > cap {
                return Ok(Some(format!(
                    "your association (account {account}) allows {cap} GPUs per job (MaxTRES) and this request asks for {asked}"
                )));
            }
        }
        if let Some(g) = self
            .facts
            .assoc_gpu_group_cap(r.settings.account.as_deref(), partition)
        {
            if asked > 0 && g.used + asked > g.cap {
                return Ok(Some(format!("{}; this request asks for {asked}", g.said())));
            }
        }
        Ok(None)
    }
}

/// Ask one cluster (its candidate document made by resolve's own rules).
pub fn probe(name: &str, doc: &Document, asked_at: u64) -> PlacementCandidate {
    let started = Instant::now();
    let r = match Request::read(doc) {
        Ok(r) => r,
        Err(e) => return probe_failed(name, &e.message),
    };
    let mut c = probe_failed(name, "");
    c.partition = r.settings.partition.clone();
    match ask(&r) {
        Ok(a) => {
            c.state = "answered".to_string();
            c.partition = a.partition.clone().or(c.partition);
            c.estimated_start = a.estimated_start;
            c.starts_in_seconds = a.estimated_start.map(|s| s.saturating_sub(asked_at));
            c.free_gpus = Some(a.free_gpus);
            c.total_gpus = Some(a.total_gpus);
            c.idle_nodes = Some(a.idle_nodes);
            c.your_pending_jobs = a.pending_mine;
            c.max_time = a.max_time.clone();
            c.max_nodes = a.max_nodes.clone();
            c.blocked_by = a.blocked_by(&r).unwrap_or_else(|e| Some(e.message));
        }
        Err((state, message, login)) => {
            c.state = state.to_string();
            c.reason = message;
            c.login_command = login;
        }
    }
    c.seconds = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    c
}

/// A cluster that could not be asked at all (its document could not be made: `why`).
pub fn probe_failed(name: &str, why: &str) -> PlacementCandidate {
    PlacementCandidate {
        cluster_name: name.to_string(),
        partition: None,
        state: "unreachable".to_string(),
        estimated_start: None,
        starts_in_seconds: None,
        free_gpus: None,
        total_gpus: None,
        idle_nodes: None,
        your_pending_jobs: None,
        max_time: None,
        max_nodes: None,
        blocked_by: None,
        chosen: false,
        reason: why.to_string(),
        login_command: None,
        seconds: 0.0,
    }
}

/// What a cluster says about a request (pending-facts.sh, place-probe.sh): its partitions,
/// nodes, queue and the person's associations, and `sbatch --test-only`'s word on the request.
struct PlaceProbe;

impl shared::remote::Operation for PlaceProbe {
    type Params = Request;
    type Reply = Answer;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(r: &Request) -> Result<Script> {
        let argv = request_argv(r)?;
        let mut s = Script::new();
        for (field, v) in [
            ("partition", &r.settings.partition),
            ("qos", &r.settings.qos),
        ] {
            s.assign(field, v.as_deref().unwrap_or(""))?;
        }
        s.raw("set --");
        for w in &argv {
            s.arg(w)?;
        }
        s.raw("\n");
        s.raw(shared::remote::PENDING_FACTS);
        s.raw(shared::remote::PLACE_PROBE);
        Ok(s)
    }

    fn reply(_: &Request, out: &shared::support::process::Output) -> Result<Answer> {
        if !out.success() {
            return Err(ToolError::remote(format!(
                "the probe failed ({}): {}",
                out.exit_text(),
                out.stderr_tail.trim()
            )));
        }
        Ok(Answer::parse(&out.stdout_text()))
    }
}

type AskError = (&'static str, String, Option<String>);

fn ask(r: &Request) -> std::result::Result<Answer, AskError> {
    let bad = |e: ToolError| ("unreachable", e.message.clone(), None);
    let ssh = Ssh::for_preflight(&r.connection).map_err(bad)?;
    match shared::remote::run::<PlaceProbe>(&ssh, r) {
        Ok(answer) => Ok(answer),
        Err(e) if e.kind == ErrorKind::NeedsPerson => {
            let login = ssh
                .control_path
                .as_deref()
                .map(|cp| ssh.master_command(cp).join(" "));
            Err(("login_needed", e.message.clone(), login))
        }
        Err(e) => Err(bad(e)),
    }
}

/// `--wait-login`: for each cluster that needed a login, wait (at most `secs` in all) for its
/// master, polling `ssh -O check` every two seconds, and ask it once it is there.
pub fn wait_for_logins(
    ctx: &shared::Context,
    cands: &mut [PlacementCandidate],
    docs: &[Document],
    asked_at: u64,
    secs: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    for (c, doc) in cands.iter_mut().zip(docs) {
        if c.state != "login_needed" {
            continue;
        }
        let Ok(ssh) =
            shared::remote::ssh::Connection::read(doc).and_then(|c| Ssh::for_preflight(&c))
        else {
            continue;
        };
        ctx.note(format!(
            "placement: waiting up to {} s for a login to {}: {}",
            deadline.saturating_duration_since(Instant::now()).as_secs(),
            c.cluster_name,
            c.login_command
                .as_deref()
                .unwrap_or("slurm-ssh-preflight --establish")
        ));
        loop {
            let up = ssh
                .control("check", ssh.control_path.as_deref())
                .run()
                .is_ok_and(|o| o.success());
            if up {
                let name = c.cluster_name.clone();
                *c = probe(&name, doc, asked_at);
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

fn in_words(secs: Option<u64>) -> String {
    match secs {
        None => "unknown (Slurm gave no estimate)".to_string(),
        Some(0) => "now".to_string(),
        Some(s) if s < 3600 => format!("in {} min", s.div_ceil(60)),
        Some(s) => format!("in {} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Choose by the earliest estimated start among the candidates that answered and nothing
/// blocks; a tie goes to more free GPUs, then to `prefer`'s order, then the catalog's. Fills in
/// every candidate's `chosen` and `reason`; returns the chosen one's index.
pub fn choose(cands: &mut [PlacementCandidate], prefer: &[String]) -> Option<usize> {
    let rank = |i: usize, c: &PlacementCandidate| {
        (
            c.estimated_start.unwrap_or(u64::MAX),
            std::cmp::Reverse(c.free_gpus.unwrap_or(0)),
            prefer
                .iter()
                .position(|p| *p == c.cluster_name)
                .unwrap_or(usize::MAX),
            i,
        )
    };
    let best = cands
        .iter()
        .enumerate()
        .filter(|(_, c)| c.state == "answered" && c.blocked_by.is_none())
        .min_by_key(|(i, c)| rank(*i, c))
        .map(|(i, _)| i);
    let winner = best.map(|i| {
        (
            cands[i].cluster_name.clone(),
            cands[i].starts_in_seconds,
            cands[i].free_gpus,
        )
    });
    for (i, c) in cands.iter_mut().enumerate() {
        c.chosen = Some(i) == best;
        c.reason = match (c.state.as_str(), &c.blocked_by, &winner) {
            _ if c.chosen => format!(
                "earliest estimated start: {} ({} GPUs free now)",
                in_words(c.starts_in_seconds),
                c.free_gpus.unwrap_or(0)
            ),
            ("answered", Some(b), _) => format!("blocked: {b}"),
            ("answered", None, Some((w, ws, wf))) => {
                if c.starts_in_seconds == *ws {
                    format!(
                        "starts as soon as {w} ({}), which has more free GPUs now ({} against {}) or comes first in the catalog",
                        in_words(*ws),
                        wf.unwrap_or(0),
                        c.free_gpus.unwrap_or(0)
                    )
                } else {
                    format!(
                        "starts later: {} ({} GPUs free now), against {} on {w}",
                        in_words(c.starts_in_seconds),
                        c.free_gpus.unwrap_or(0),
                        in_words(*ws)
                    )
                }
            }
            ("login_needed", _, _) => format!(
                "not asked: login needed ({}){}",
                c.reason,
                c.login_command
                    .as_deref()
                    .map(|l| format!("; open the master with `{l}`"))
                    .unwrap_or_default()
            ),
            (_, _, _) if !c.reason.is_empty() && !c.reason.starts_with("not asked") => {
                format!("not asked: {}", c.reason)
            }
            _ => c.reason.clone(),
        };
    }
    best
}

/// The placement of `cands` (asked at `asked_at`) as the section.
pub fn section(cands: Vec<PlacementCandidate>, chosen: Option<usize>, asked_at: u64) -> Placement {
    Placement {
        policy: "earliest_start".to_string(),
        chosen: chosen.map(|i| cands[i].cluster_name.clone()),
        asked_at,
        candidates: cands,
    }
}

/// Catalog clusters that can serve the request by what the catalog says (device type when
/// given, GPUs per node, size), and why each other one cannot.
pub fn static_candidates<'c>(
    cat: &'c Catalog,
    device: Option<&str>,
    per_node: Option<i64>,
    total: Option<i64>,
) -> (Vec<&'c Entry>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut out = Vec::new();
    for e in &cat.clusters {
        match e.rejection(device, per_node, total) {
            None => ok.push(e),
            Some(w) => out.push((e.cluster_name.clone(), w)),
        }
    }
    (ok, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        Document::parse(text.as_bytes(), "test").unwrap()
    }

    #[test]
    fn a_clusters_answer_gives_its_estimate_free_gpus_and_limits() {
        let a = Answer::parse(
            "PARTITION batch\n\
             TEST sbatch: Job 1066 to start at 1796545961 using 1 processors on nodes gn1 in partition batch \n\
             PART PartitionName=batch MaxNodes=UNLIMITED MaxTime=04:00:00 State=UP TotalNodes=2\n\
             NODE gn1 mix gpu:a100:4 gpu:a100:3(IDX:0-2)\n\
             NODE gn2 idle gpu:a100:4 gpu:a100:0(IDX:N/A)\n\
             NODE gn3 drain* gpu:4 gpu:0\n\
             MINE_PENDING 2\n",
        );
        assert_eq!(a.partition.as_deref(), Some("batch"));
        assert_eq!(a.estimated_start, Some(1_796_545_961));
        assert_eq!((a.free_gpus, a.total_gpus, a.idle_nodes), (5, 12, 1));
        assert_eq!(a.pending_mine, Some(2));
        assert_eq!(a.max_time.as_deref(), Some("04:00:00"));
        let d = doc(r#"{"time_limit":"06:00:00"}"#);
        assert_eq!(
            a.blocked_by(&Request::read(&d).unwrap())
                .unwrap()
                .as_deref(),
            Some("time_limit 06:00:00 is over the partition's MaxTime 04:00:00")
        );
        assert_eq!(
            a.blocked_by(&Request::read(&doc("{}")).unwrap()).unwrap(),
            None
        );
        let refused = Answer::parse(
            "TEST sbatch: error: Invalid account or account/partition combination specified \n",
        );
        assert!(refused
            .blocked_by(&Request::read(&doc("{}")).unwrap())
            .unwrap()
            .unwrap()
            .starts_with("Slurm refuses the request: sbatch: error: Invalid account"));
    }

    #[test]
    fn a_qos_cap_used_by_running_jobs_blocks_a_request_over_it() {
        let a = Answer::parse(
            "TEST sbatch: Job 1 to start at 5 using 1 processors\n\
             PQ gpucap|gres/gpu=4||||\n\
             PR 12 gpucap cpu=1,gres/gpu=4\n",
        );
        let d = doc(r#"{"qos":"gpucap","required_devices_per_node":1}"#);
        assert_eq!(
            a.blocked_by(&Request::read(&d).unwrap()).unwrap().as_deref(),
            Some("your QOS gpucap allows 4 GPUs per user and your running jobs 12 use 4; this request asks for 1")
        );
    }

    #[test]
    fn an_association_gpu_cap_per_job_blocks_a_request_over_it_on_its_account_only() {
        let a = Answer::parse(
            "TEST sbatch: Job 1 to start at 5 using 1 processors\n\
             PA capped|||gres/gpu=2|||\n\
             PA other|gpu||cpu=64|||\n",
        );
        let over = doc(r#"{"account":"capped","gpus_per_node":2,"node_count":2}"#);
        assert_eq!(
            a.blocked_by(&Request::read(&over).unwrap()).unwrap().as_deref(),
            Some("your association (account capped) allows 2 GPUs per job (MaxTRES) and this request asks for 4")
        );
        let within = doc(r#"{"account":"capped","gpus_per_node":2}"#);
        assert_eq!(
            a.blocked_by(&Request::read(&within).unwrap()).unwrap(),
            None
        );
        let elsewhere = doc(r#"{"account":"other","gpus_per_node":8}"#);
        assert_eq!(
            a.blocked_by(&Request::read(&elsewhere).unwrap()).unwrap(),
            None
        );
    }

    /// GrpTRES on an association caps its running jobs' GPUs together: a request over what is
    /// left is blocked, said with the cap, the jobs that use it and the ask; a partition's own
    /// association counts only its partition's jobs; another account's jobs do not count; and
    /// without an account named, only a person with one account is judged.
    #[test]
    fn an_association_gpu_cap_on_running_jobs_blocks_a_request_over_what_is_left() {
        let a = Answer::parse(
            "TEST sbatch: Job 1 to start at 5 using 1 processors\n\
             PA lab||gres/gpu=4||||\n\
             PA lab|big|gres/gpu=16||||\n\
             PR 12 normal lab debug cpu=1,gres/gpu=3\n\
             PR 13 normal other debug cpu=1,gres/gpu=4\n\
             PR 14 normal lab big cpu=1,gres/gpu=8\n",
        );
        let blocked = |json: &str| a.blocked_by(&Request::read(&doc(json)).unwrap()).unwrap();
        // Job 12 runs under lab's every-partition association (4 GPUs, 3 used); job 14 under
        // lab's own association for partition big; job 13 under another account.
        assert_eq!(
            blocked(r#"{"account":"lab","gpus_per_node":2}"#).as_deref(),
            Some("your association (account lab) allows 4 GPUs at once (GrpTRES) and your running job 12 uses 3; this request asks for 2")
        );
        assert_eq!(
            blocked(r#"{"account":"lab","gpus_per_node":1}"#),
            None,
            "3 + 1 fit in 4"
        );
        // Without an account: lab is the person's only account here.
        assert!(blocked(r#"{"gpus_per_node":2}"#).is_some());
        // No GPU asked: nothing to block.
        assert_eq!(blocked(r#"{"account":"lab"}"#), None);
        let only_big = Answer::parse(
            "PARTITION big\nPA lab|big|gres/gpu=16||||\nPR 12 normal lab debug gres/gpu=3\nPR 14 normal lab big gres/gpu=8\n",
        );
        let r = Request::read(&doc(
            r#"{"account":"lab","partition":"big","gpus_per_node":8}"#,
        ))
        .unwrap();
        assert_eq!(
            only_big.blocked_by(&r).unwrap(),
            None,
            "8 of 16 used: 8 fit"
        );
        let r = Request::read(&doc(
            r#"{"account":"lab","partition":"big","gpus_per_node":9}"#,
        ))
        .unwrap();
        assert_eq!(
            only_big.blocked_by(&r).unwrap().as_deref(),
            Some("your association (account lab, partition big) allows 16 GPUs at once (GrpTRES) and your running job 14 uses 8; this request asks for 9")
        );
        // Two accounts and none named: the default is not known, nothing judged.
        let two = Answer::parse(
            "PA lab||gres/gpu=1||||\nPA other||||||\nPR 12 normal lab debug gres/gpu=1\n",
        );
        assert_eq!(
            two.blocked_by(&Request::read(&doc(r#"{"gpus_per_node":1}"#)).unwrap())
                .unwrap(),
            None
        );
    }

    fn cand(name: &str, state: &str, start: Option<u64>, free: u64) -> PlacementCandidate {
        let mut c = probe_failed(name, "");
        c.state = state.into();
        c.estimated_start = start;
        c.starts_in_seconds = start.map(|s| s - 100);
        c.free_gpus = Some(free);
        c.total_gpus = Some(8);
        c.seconds = 0.1;
        if state == "login_needed" {
            c.reason = "a login is needed".into();
            c.login_command = Some("ssh -M x".into());
        }
        c
    }

    #[test]
    fn the_earliest_start_wins_and_every_other_candidate_says_why_it_lost() {
        let mut c = vec![
            cand("busy", "answered", Some(100 + 7200), 0),
            cand("free", "answered", Some(100), 4),
            cand("mfa", "login_needed", None, 0),
            cand("tied", "answered", Some(100), 2),
        ];
        c[0].blocked_by = None;
        let mut blocked = cand("limited", "answered", Some(100), 8);
        blocked.blocked_by =
            Some("time_limit 06:00:00 is over the partition's MaxTime 04:00:00".into());
        c.push(blocked);
        let best = choose(&mut c, &[]);
        assert_eq!(best, Some(1));
        assert!(c[1].chosen && c.iter().filter(|x| x.chosen).count() == 1);
        assert_eq!(
            c[1].reason,
            "earliest estimated start: now (4 GPUs free now)"
        );
        assert_eq!(
            c[0].reason,
            "starts later: in 2 h 0 min (0 GPUs free now), against now on free"
        );
        assert!(
            c[2].reason.starts_with(
                "not asked: login needed (a login is needed); open the master with `ssh -M x`"
            ),
            "{}",
            c[2].reason
        );
        assert!(
            c[3].reason.starts_with(
                "starts as soon as free (now), which has more free GPUs now (4 against 2)"
            ),
            "{}",
            c[3].reason
        );
        assert_eq!(
            c[4].reason,
            "blocked: time_limit 06:00:00 is over the partition's MaxTime 04:00:00"
        );
        // The catalog's `prefer` breaks a full tie.
        let mut t = vec![
            cand("a", "answered", Some(100), 4),
            cand("b", "answered", Some(100), 4),
        ];
        assert_eq!(choose(&mut t, &["b".to_string()]), Some(1));
        // Nothing answered: nothing chosen.
        let mut none = vec![cand("mfa", "login_needed", None, 0)];
        assert_eq!(choose(&mut none, &[]), None);
    }

    #[test]
    fn the_request_is_the_documents_with_the_sites_options() {
        let d = doc(
            r#"{"node_count":2,"required_devices_per_node":1,"gpus_per_node":4,"time_limit":"01:00:00","account":"acct","partition":"p","qos":"q","mem":"8G"}"#,
        );
        let argv = request_argv(&Request::read(&d).unwrap()).unwrap();
        for w in [
            "--nodes=2",
            "--account=acct",
            "--partition=p",
            "--gpus-per-node=1",
            "--time=01:00:00",
            "--qos=q",
            "--mem=8G",
        ] {
            assert!(argv.contains(&w.to_string()), "{w}: {argv:?}");
        }
    }

    /// The probe as assembled (a partition and QoS with a quote in them) passes shellcheck and
    /// the four shells' `sh -n`; a failed probe is an error with its exit and stderr.
    #[test]
    fn the_probe_as_assembled_passes_the_static_checks_and_a_failed_one_says_why() {
        use shared::remote::Operation;
        let d = doc(r#"{"node_count":1,"account":"acct","partition":"it's","qos":"q;q"}"#);
        let s = PlaceProbe::script(&Request::read(&d).unwrap()).unwrap();
        shared::remote::script_check::assert_clean("place-probe", s.as_str());
        assert!(
            s.as_str().contains("partition='it'\\''s'"),
            "{}",
            s.as_str()
        );
        let failed = shared::support::process::Output::of(Some(2), "", "sinfo: not found\n");
        let e = PlaceProbe::reply(&Request::read(&d).unwrap(), &failed).unwrap_err();
        assert_eq!(e.message, "the probe failed (exit 2): sinfo: not found");
    }
}
