//! Why a pending job waits, in words a person can act on: Slurm's pending reason (squeue `%r`)
//! put in a category, with the figure that matters and the action that would help, from the facts
//! the watch gathers once per reason on the cluster (`shared/src/remote/sh/pending-facts.sh`).
//!
//! Slurm's reasons are many and grow with each release; they are sorted here by their words
//! (`QOS…`/`Assoc…` limits, `Partition…`, `…Held…`), so a reason this code has not seen still
//! lands in its category, and one that fits none is said as Slurm says it (`other`).

use std::collections::BTreeMap;

/// What kind of wait it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// The nodes, GPUs or licences it asks for are busy now.
    Resources,
    /// Other jobs are ahead of it.
    Priority,
    /// A limit of the person's own: their QOS's or association's (account's) limit.
    YourLimit,
    /// A limit or the state of the partition.
    PartitionLimit,
    /// Held (by the person, or by an administrator).
    Held,
    /// Waiting for another job.
    Dependency,
    /// Asked to start later.
    BeginTime,
    /// Nodes it needs are down, drained or reserved.
    NodesUnavailable,
    /// Anything else: Slurm's own words.
    Other,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Resources => "resources",
            Category::Priority => "priority",
            Category::YourLimit => "your_limit",
            Category::PartitionLimit => "partition_limit",
            Category::Held => "held",
            Category::Dependency => "dependency",
            Category::BeginTime => "begin_time",
            Category::NodesUnavailable => "nodes_unavailable",
            Category::Other => "other",
        }
    }

    /// The category of Slurm's reason (squeue `%r`, e.g. `QOSMaxGRESPerUser`,
    /// `ReqNodeNotAvail, UnavailableNodes:mn1`).
    pub fn of(reason: &str) -> Category {
        let word = reason
            .split([',', ' ', '('])
            .next()
            .unwrap_or_default()
            .trim();
        let lower = reason.to_ascii_lowercase();
        match word {
            "Resources" | "Licenses" | "BurstBufferResources" | "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions" => {
                Category::Resources
            }
            "Priority" => Category::Priority,
            "BeginTime" => Category::BeginTime,
            "Dependency" | "DependencyNeverSatisfied" => Category::Dependency,
            "JobHeldUser" | "JobHeldAdmin" | "JobHoldMaxRequeue" => Category::Held,
            "ReqNodeNotAvail" | "NodeDown" | "Reservation" | "ReservationDeleted"
            | "ResvDeleted" | "FrontEndDown" | "NodeNotAvail" => Category::NodesUnavailable,
            "MaxCpuPerAccount" | "AccountingPolicy" | "InvalidQOS" | "InvalidAccount"
            | "AccountNotAllowed" | "QOSNotAllowed" => Category::YourLimit,
            _ if word.starts_with("QOS") || word.starts_with("Assoc") => Category::YourLimit,
            _ if word.starts_with("Partition") => Category::PartitionLimit,
            _ if lower.contains("held") || lower.contains("hold") => Category::Held,
            _ if lower.starts_with("reqnode") || lower.contains("reserv") => {
                Category::NodesUnavailable
            }
            _ => Category::Other,
        }
    }
}

/// What the cluster said about the job and its limits (pending-facts.sh's tagged lines).
#[derive(Debug, Default, Clone)]
pub struct Facts {
    /// `scontrol show job -o`'s fields.
    pub job: BTreeMap<String, String>,
    /// `scontrol show partition -o`, one map per partition.
    pub partitions: Vec<BTreeMap<String, String>>,
    /// Partitions with idle nodes now, and how many.
    pub idle: Vec<(String, u64)>,
    /// The job's QOS: name, MaxTRESPerUser, MaxJobsPerUser, GrpTRES, MaxTRES, MaxWall.
    pub qos: Option<Vec<String>>,
    /// The user's associations: account, partition, GrpTRES, MaxTRES, MaxJobs, GrpJobs.
    pub assocs: Vec<Vec<String>>,
    /// The user's running jobs.
    pub running: Vec<RunningJob>,
}

/// One of the user's running jobs (a PR line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningJob {
    pub id: String,
    pub qos: String,
    /// Its account and partition ("" where the line did not say).
    pub account: String,
    pub partition: String,
    /// Allocated TRES (`gres/gpu` → `4`).
    pub tres: BTreeMap<String, String>,
}

/// `a=1,gres/gpu=4` as a map.
pub fn tres(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Facts {
    /// From pending-facts.sh's lines (other lines are ignored).
    pub fn from_lines<S: AsRef<str>>(lines: &[S]) -> Facts {
        let mut f = Facts::default();
        for l in lines {
            let (tag, rest) = l.as_ref().split_once(' ').unwrap_or((l.as_ref(), ""));
            let bars = || rest.split('|').map(str::to_string).collect::<Vec<_>>();
            match tag {
                "PJ" => f.job = super::parse_scontrol(rest),
                "PP" => f.partitions.push(super::parse_scontrol(rest)),
                "PI" => {
                    if let Some((p, n)) = rest.split_once('|') {
                        if let Ok(n) = n.trim().parse() {
                            f.idle.push((p.trim_end_matches('*').to_string(), n));
                        }
                    }
                }
                "PQ" => f.qos = Some(bars()),
                "PA" => f.assocs.push(bars()),
                "PR" => {
                    let w: Vec<&str> = rest.split_whitespace().collect();
                    let (id, qos, account, partition, t) = match w[..] {
                        [id, qos, account, partition, t, ..] => (id, qos, account, partition, t),
                        [id, qos, t] => (id, qos, "", "", t),
                        _ => continue,
                    };
                    f.running.push(RunningJob {
                        id: id.to_string(),
                        qos: qos.to_string(),
                        account: account.to_string(),
                        partition: partition.to_string(),
                        tres: tres(t),
                    });
                }
                _ => {}
            }
        }
        f
    }

    fn job(&self, key: &str) -> Option<&str> {
        self.job
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty() && *v != "(null)" && *v != "N/A")
    }

    fn partition(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.partitions
            .iter()
            .find(|p| p.get("PartitionName").map(String::as_str) == Some(name))
    }
}

impl Facts {
    /// The QOS's GPU cap per user (its MaxTRESPerUser), the GPUs the person's running jobs in
    /// that QOS use, and those jobs; `None` without a GPU cap.
    pub fn qos_gpu_cap(&self) -> Option<(u64, u64, Vec<String>)> {
        let q = self.qos.as_ref()?;
        let name = q.first()?;
        let cap = gpus(&tres(q.get(1)?));
        if cap == 0 {
            return None;
        }
        let mine: Vec<&RunningJob> = self.running.iter().filter(|r| &r.qos == name).collect();
        Some((
            cap,
            mine.iter().map(|r| gpus(&r.tres)).sum(),
            mine.iter().map(|r| r.id.clone()).collect(),
        ))
    }
}

impl Facts {
    /// The smallest per-job GPU cap (MaxTRES) of the person's associations that a request with
    /// `account` in `partition` falls under (an association of that account, for that partition
    /// or for every partition; any account when the request names none), with the account it is
    /// on; `None` without one.
    pub fn assoc_gpu_max_per_job(
        &self,
        account: Option<&str>,
        partition: Option<&str>,
    ) -> Option<(u64, String)> {
        self.assocs
            .iter()
            .filter(|a| account.is_none_or(|acct| a.first().map(String::as_str) == Some(acct)))
            .filter(|a| {
                let p = a.get(1).map(String::as_str).unwrap_or("");
                p.is_empty() || partition.is_none_or(|want| p == want)
            })
            .filter_map(|a| {
                let cap = gpus(&tres(a.get(3)?));
                (cap > 0).then(|| (cap, a.first().cloned().unwrap_or_default()))
            })
            .min_by_key(|(cap, _)| *cap)
    }

    /// The GPU cap on the running jobs of one of the person's associations (its GrpTRES) that a
    /// job with `account` in `partition` falls under, the GPUs the person's running jobs under
    /// that association use now, and those jobs: the tightest such cap (least left). Without an
    /// `account`, only when the person has one account (else the default one is not known).
    pub fn assoc_gpu_group_cap(
        &self,
        account: Option<&str>,
        partition: Option<&str>,
    ) -> Option<GroupCap> {
        let mut accounts: Vec<&str> = self
            .assocs
            .iter()
            .filter_map(|a| a.first().map(String::as_str))
            .filter(|a| !a.is_empty())
            .collect();
        accounts.sort_unstable();
        accounts.dedup();
        let account = match (account, accounts.as_slice()) {
            (Some(a), _) => a,
            (None, [only]) => only,
            (None, _) => return None,
        };
        let of_account: Vec<&Vec<String>> = self
            .assocs
            .iter()
            .filter(|a| a.first().map(String::as_str) == Some(account))
            .collect();
        // A job runs under its partition's own association where the account has one, else
        // under the account's association for every partition.
        let own = |p: &str| {
            of_account
                .iter()
                .any(|a| a.get(1).map(String::as_str) == Some(p))
        };
        of_account
            .iter()
            .filter_map(|a| {
                let on = a.get(1).cloned().unwrap_or_default();
                if !on.is_empty() && partition.is_some_and(|want| want != on) {
                    return None;
                }
                let cap = gpus(&tres(a.get(2)?));
                if cap == 0 {
                    return None;
                }
                let under: Vec<&RunningJob> = self
                    .running
                    .iter()
                    .filter(|r| r.account == account)
                    .filter(|r| {
                        if on.is_empty() {
                            !own(&r.partition)
                        } else {
                            r.partition == on
                        }
                    })
                    .collect();
                Some(GroupCap {
                    account: account.to_string(),
                    partition: (!on.is_empty()).then_some(on),
                    cap,
                    used: under.iter().map(|r| gpus(&r.tres)).sum(),
                    jobs: under.iter().map(|r| r.id.clone()).collect(),
                })
            })
            .min_by_key(|g| g.cap.saturating_sub(g.used))
    }
}

/// An association's cap on the GPUs its running jobs hold at once (GrpTRES), and its use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCap {
    pub account: String,
    /// The partition the association is for (`None`: every partition).
    pub partition: Option<String>,
    pub cap: u64,
    pub used: u64,
    /// The person's running jobs under it.
    pub jobs: Vec<String>,
}

impl GroupCap {
    /// "your association (account a) allows 4 GPUs at once (GrpTRES) and your running job 12
    /// uses 4"
    pub fn said(&self) -> String {
        let on = self
            .partition
            .as_deref()
            .map(|p| format!(", partition {p}"))
            .unwrap_or_default();
        let jobs = match self.jobs.len() {
            0 => "no job of yours runs under it".to_string(),
            1 => format!("your running job {} uses {}", self.jobs[0], self.used),
            _ => format!(
                "your running jobs {} use {}",
                self.jobs.join(", "),
                self.used
            ),
        };
        format!(
            "your association (account {}{on}) allows {} GPUs at once (GrpTRES) and {jobs}",
            self.account, self.cap
        )
    }
}

/// A pending job explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub category: Category,
    /// What holds it, with the figure that matters.
    pub message: String,
    /// What would help.
    pub action: String,
}

/// Slurm's time format ([D-]HH:MM:SS, MM:SS, UNLIMITED) in seconds; `None` for unlimited.
fn seconds(t: &str) -> Option<u64> {
    if t.eq_ignore_ascii_case("UNLIMITED") || t.eq_ignore_ascii_case("INFINITE") {
        return None;
    }
    super::parse_time_limit(t)
}

/// How many GPUs a TRES map names (`gres/gpu` and typed `gres/gpu:a100`).
pub fn gpus(t: &BTreeMap<String, String>) -> u64 {
    let typed: u64 = t
        .iter()
        .filter(|(k, _)| k.starts_with("gres/gpu:"))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum();
    t.get("gres/gpu")
        .and_then(|v| v.parse().ok())
        .unwrap_or(typed)
}

/// What a limit reason is about: (what it counts, whose limit) in words.
fn limit_words(reason: &str) -> (String, &'static str) {
    let what = if reason.contains("GRES") {
        "GPUs (or other generic resources)"
    } else if reason.contains("CPU") {
        "CPUs"
    } else if reason.contains("Mem") {
        "memory"
    } else if reason.contains("Node") {
        "nodes"
    } else if reason.contains("Jobs") || reason.contains("SubmitJob") {
        "jobs"
    } else if reason.contains("Wall") || reason.contains("Minutes") || reason.contains("RunMins") {
        "time"
    } else if reason.contains("Billing") {
        "billing units"
    } else {
        "resources"
    };
    let whose = if reason.contains("PerUser") {
        "per user"
    } else if reason.contains("PerAccount") || reason.starts_with("Assoc") && reason.contains("Grp")
    {
        "for your account"
    } else if reason.contains("PerJob") || reason.contains("MaxWallDurationPerJob") {
        "per job"
    } else if reason.contains("Grp") {
        "for everyone in it together"
    } else {
        ""
    };
    (what.to_string(), whose)
}

fn in_time(secs: u64) -> String {
    if secs < 60 {
        format!("{secs} s")
    } else if secs < 3600 {
        format!("{} min", secs.div_ceil(60))
    } else {
        format!("{} h {} min", secs / 3600, (secs % 3600) / 60)
    }
}

/// Slurm's estimate in words.
fn estimate(start: Option<u64>, now: u64) -> String {
    match start {
        Some(s) if s > now => format!("Slurm estimates its start in {}", in_time(s - now)),
        Some(_) => "Slurm expects to start it at any moment".to_string(),
        None => "Slurm has no estimate of its start yet".to_string(),
    }
}

/// Explain `reason` (squeue `%r`) for job `id` from `f`; `start` is squeue's estimated start.
pub fn explain(id: &str, reason: &str, f: &Facts, start: Option<u64>, now: u64) -> Explanation {
    let category = Category::of(reason);
    let partition = f.job("Partition").unwrap_or("?").to_string();
    let (message, action) = match category {
        Category::Resources | Category::Priority => {
            let asks = f
                .job("TRES")
                .map(|t| format!(" (it asks for {t})"))
                .unwrap_or_default();
            let what = if category == Category::Resources {
                format!("waiting for resources in partition {partition}{asks}")
            } else {
                format!("other jobs in partition {partition} are ahead of it (priority){asks}")
            };
            let elsewhere: Vec<String> = f
                .idle
                .iter()
                .filter(|(p, n)| *p != partition && *n > 0)
                .map(|(p, n)| {
                    format!(
                        "partition {p} has {n} idle node{}",
                        if *n == 1 { "" } else { "s" }
                    )
                })
                .collect();
            let mut action = "wait, or ask for less (`gpus_per_node`, `node_count`; a shorter `time_limit` lets the backfill scheduler start it in a gap)".to_string();
            if !elsewhere.is_empty() {
                action = format!(
                    "{action}, or use another partition: {} now",
                    elsewhere.join(", ")
                );
            }
            (format!("{what}; {}", estimate(start, now)), action)
        }
        Category::PartitionLimit => partition_limit(reason, f, &partition),
        Category::YourLimit => your_limit(reason, f),
        Category::Held => {
            if reason == "JobHeldUser" {
                (
                    "held by its owner (a `--hold`, or `scontrol hold`)".to_string(),
                    format!("release it with `scontrol release {id}`"),
                )
            } else {
                (
                    format!("held by an administrator or by Slurm ({reason})"),
                    format!("ask the cluster's administrators why; `scontrol release {id}` by you is refused, `scancel {id}` ends it"),
                )
            }
        }
        Category::Dependency => {
            let dep = f.job("Dependency").unwrap_or("(not shown)");
            if reason == "DependencyNeverSatisfied" {
                (
                    format!("its dependency {dep} can never be met (the job it waits for ended in a way it does not accept)"),
                    format!("cancel it with `scancel {id}` and submit again without that dependency"),
                )
            } else {
                (
                    format!("waiting for another job: dependency {dep}"),
                    "nothing to do: it becomes eligible when that job ends as the dependency asks"
                        .to_string(),
                )
            }
        }
        Category::BeginTime => {
            let at = f.job("StartTime").unwrap_or("a later time");
            (
                format!("asked to start no earlier than {at}; {}", estimate(start, now)),
                format!("nothing to do; `scontrol update JobId={id} StartTime=now` makes it eligible now"),
            )
        }
        Category::NodesUnavailable => {
            let nodes = reason
                .split_once("UnavailableNodes:")
                .map(|(_, n)| n.trim().to_string())
                .or_else(|| f.job("ReqNodeList").map(str::to_string));
            (
                format!(
                    "nodes it needs are down, drained or reserved ({reason}){}",
                    nodes.map(|n| format!(": {n}")).unwrap_or_default()
                ),
                "leave those nodes out of the request (`sbatch_options` with `--exclude`), or wait until they are back".to_string(),
            )
        }
        Category::Other if reason == "None" || reason.is_empty() => (
            "just submitted: the scheduler has not looked at it yet".to_string(),
            "nothing to do yet".to_string(),
        ),
        Category::Other => (
            format!("Slurm says {reason}"),
            format!("`scontrol show job {id}` shows the job as Slurm sees it"),
        ),
    };
    Explanation {
        category,
        message,
        action,
    }
}

fn partition_limit(reason: &str, f: &Facts, partition: &str) -> (String, String) {
    let p = f.partition(partition);
    let of = |k: &str| p.and_then(|p| p.get(k)).map(String::as_str);
    // Slurm names the same limit PartitionConfig first and PartitionTimeLimit (or
    // PartitionNodeLimit) once the scheduler looked: the figures decide, not the word.
    let over_time = match (f.job("TimeLimit").map(seconds), of("MaxTime").map(seconds)) {
        (Some(Some(asked)), Some(Some(max))) => asked > max,
        _ => false,
    };
    let nodes_asked = f
        .job("NumNodes")
        .and_then(|n| n.split('-').next())
        .and_then(|n| n.parse::<u64>().ok());
    let over_nodes = match (
        nodes_asked,
        of("MaxNodes").and_then(|m| m.parse::<u64>().ok()),
    ) {
        (Some(asked), Some(max)) => asked > max,
        _ => false,
    };
    let which = if reason == "PartitionTimeLimit" || (over_time && reason != "PartitionNodeLimit") {
        "time"
    } else if reason == "PartitionNodeLimit" || over_nodes {
        "nodes"
    } else {
        "other"
    };
    match which {
        "time" => {
            let asked = f.job("TimeLimit").unwrap_or("?");
            let max = of("MaxTime").unwrap_or("?");
            let need = seconds(asked);
            let others: Vec<String> = f
                .partitions
                .iter()
                .filter(|q| q.get("PartitionName").map(String::as_str) != Some(partition))
                .filter(|q| q.get("State").map(String::as_str) == Some("UP"))
                .filter(|q| match (need, q.get("MaxTime").map(|m| seconds(m))) {
                    (Some(n), Some(Some(m))) => m >= n,
                    (_, Some(None)) => true,
                    _ => false,
                })
                .filter_map(|q| {
                    Some(format!(
                        "partition {} (MaxTime {})",
                        q.get("PartitionName")?,
                        q.get("MaxTime")?
                    ))
                })
                .collect();
            let mut action = format!("lower `time_limit` to {max} or less");
            if !others.is_empty() {
                action = format!("{action}, or use {}", others.join(" or "));
            }
            (
                format!("time_limit {asked} is over partition {partition}'s MaxTime {max}: it will never start there"),
                action,
            )
        }
        "nodes" => {
            let asked = f.job("NumNodes").unwrap_or("?");
            (
                format!(
                    "it asks for {asked} nodes, outside partition {partition}'s limits (MinNodes {}, MaxNodes {}, {} nodes in all)",
                    of("MinNodes").unwrap_or("?"),
                    of("MaxNodes").unwrap_or("?"),
                    of("TotalNodes").unwrap_or("?")
                ),
                "change `node_count` to fit, or use another partition".to_string(),
            )
        }
        _ => (
            format!(
                "partition {partition} does not take it now ({reason}; the partition's State is {})",
                of("State").unwrap_or("?")
            ),
            "use another partition, or wait until the administrators bring it back".to_string(),
        ),
    }
}

fn your_limit(reason: &str, f: &Facts) -> (String, String) {
    let (what, whose) = limit_words(reason);
    let qos_name = f.job("QOS").unwrap_or("?").to_string();
    let running: Vec<&RunningJob> = if reason.starts_with("QOS") {
        f.running.iter().filter(|r| r.qos == qos_name).collect()
    } else {
        f.running.iter().collect()
    };
    let ids: Vec<&str> = running.iter().map(|r| r.id.as_str()).collect();
    let jobs_text = match ids.len() {
        0 => "no job of yours runs there now".to_string(),
        1 => format!("your running job {}", ids[0]),
        _ => format!("your running jobs {}", ids.join(", ")),
    };
    let asks_gpus = gpus(&f.job.get("TRES").map(|t| tres(t)).unwrap_or_default());
    if reason.starts_with("QOS") && reason.contains("GRES") {
        if let Some(said) = gpu_cap(f, whose, &qos_name, &running, &jobs_text, asks_gpus) {
            return said;
        }
    }
    if reason.starts_with("AssocGrpGRES") {
        if let Some(g) = f.assoc_gpu_group_cap(f.job("Account"), f.job("Partition")) {
            return assoc_gpu_cap(&g, asks_gpus);
        }
    }
    let limits = limits_shown(reason, f, &qos_name);
    let whose_limit = if reason.starts_with("QOS") {
        format!("your QOS {qos_name}'s limit on {what}")
    } else if reason.starts_with("Assoc") {
        format!("your account's limit on {what}")
    } else {
        format!("a limit of yours ({reason})")
    };
    let whose_text = if whose.is_empty() {
        String::new()
    } else {
        format!(" {whose}")
    };
    (
        format!(
            "{whose_limit}{whose_text} is reached ({reason}){}; {jobs_text}",
            limits.unwrap_or_default()
        ),
        if reason.starts_with("Invalid") || reason.ends_with("NotAllowed") {
            "use an account and QOS your user has (`sacctmgr show assoc user=$USER` lists them)"
                .to_string()
        } else {
            "wait for your other jobs to end (or `scancel` one), ask for less, or use another QOS or account (`qos`, `account`)".to_string()
        },
    )
}

/// A QOS's GPU cap with the GPUs your running jobs use, and what would help (None: the QOS
/// shows no GPU cap).
fn gpu_cap(
    f: &Facts,
    whose: &str,
    qos_name: &str,
    running: &[&RunningJob],
    jobs_text: &str,
    asks_gpus: u64,
) -> Option<(String, String)> {
    let cap = f
        .qos
        .as_ref()
        .and_then(|q| {
            let limits = match whose {
                "per user" => q.get(1),
                "per job" => q.get(4),
                _ => q.get(3),
            }?;
            Some(gpus(&tres(limits)))
        })
        .filter(|n| *n > 0);
    let used: u64 = running.iter().map(|r| gpus(&r.tres)).sum();
    let cap = cap?;
    Some((
            format!(
                "your QOS {qos_name} allows {cap} GPUs {whose} and {jobs_text} use{} {used}; this job asks for {asks_gpus}",
                if running.len() == 1 { "s" } else { "" }
            ),
            {
                let fits = if whose == "per job" {
                    cap
                } else {
                    cap.saturating_sub(used)
                };
                what_helps(running.len(), fits, "QOS (`qos`)")
            },
        ))
}

/// An association's GPU cap on its running jobs, with their use, and what would help.
fn assoc_gpu_cap(g: &GroupCap, asks_gpus: u64) -> (String, String) {
    (
        format!("{}; this job asks for {asks_gpus}", g.said()),
        what_helps(
            g.jobs.len(),
            g.cap.saturating_sub(g.used),
            "account (`account`)",
        ),
    )
}

/// What helps a job held by a GPU cap: waiting for the `running` jobs that use it, asking for
/// what `fits`, or another `other` (a QOS, an account).
fn what_helps(running: usize, fits: u64, other: &str) -> String {
    let wait = match running {
        0 => "",
        1 => "wait for it to end (or `scancel` it), ",
        _ => "wait for them to end (or `scancel` one), ",
    };
    let less = if fits > 0 {
        format!("ask for at most {fits} GPUs, ")
    } else {
        String::new()
    };
    format!("{wait}{less}or use another {other}")
}

/// The limits the QOS (or the account's association) shows you, as ` (QOS q: MaxTRES ..., ...)`.
fn limits_shown(reason: &str, f: &Facts, qos_name: &str) -> Option<String> {
    if reason.starts_with("QOS") {
        f.qos.as_ref().map(|q| {
            let names = [
                "MaxTRESPerUser",
                "MaxJobsPerUser",
                "GrpTRES",
                "MaxTRES",
                "MaxWall",
            ];
            let set: Vec<String> = names
                .iter()
                .zip(q.iter().skip(1))
                .filter(|(_, v)| !v.is_empty())
                .map(|(n, v)| format!("{n} {v}"))
                .collect();
            format!(
                " (QOS {qos_name}: {})",
                if set.is_empty() {
                    "no limit shown to you".to_string()
                } else {
                    set.join(", ")
                }
            )
        })
    } else {
        let account = f.job("Account").unwrap_or("?").to_string();
        f.assocs
            .iter()
            .find(|a| a.first() == Some(&account))
            .map(|a| {
                let names = ["GrpTRES", "MaxTRES", "MaxJobs", "GrpJobs"];
                let set: Vec<String> = names
                    .iter()
                    .zip(a.iter().skip(2))
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(n, v)| format!("{n} {v}"))
                    .collect();
                format!(
                    " (account {account}: {})",
                    if set.is_empty() {
                        "no limit shown to you".to_string()
                    } else {
                        set.join(", ")
                    }
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn every_kind_of_reason_lands_in_its_category() {
        for (reason, cat) in [
            ("Resources", Category::Resources),
            ("Licenses", Category::Resources),
            ("Priority", Category::Priority),
            ("QOSMaxGRESPerUser", Category::YourLimit),
            ("QOSGrpCpuLimit", Category::YourLimit),
            ("QOSMaxJobsPerUserLimit", Category::YourLimit),
            ("QOSMaxWallDurationPerJobLimit", Category::YourLimit),
            ("AssocGrpGRES", Category::YourLimit),
            ("AssocMaxJobsLimit", Category::YourLimit),
            ("AssocGrpBillingRunMinutes", Category::YourLimit),
            ("MaxCpuPerAccount", Category::YourLimit),
            ("InvalidQOS", Category::YourLimit),
            ("PartitionTimeLimit", Category::PartitionLimit),
            ("PartitionNodeLimit", Category::PartitionLimit),
            ("PartitionDown", Category::PartitionLimit),
            ("PartitionInactive", Category::PartitionLimit),
            ("JobHeldUser", Category::Held),
            ("JobHeldAdmin", Category::Held),
            ("launch failed requeued held", Category::Held),
            ("Dependency", Category::Dependency),
            ("DependencyNeverSatisfied", Category::Dependency),
            ("BeginTime", Category::BeginTime),
            (
                "ReqNodeNotAvail, UnavailableNodes:mn[1-2]",
                Category::NodesUnavailable,
            ),
            ("NodeDown", Category::NodesUnavailable),
            ("Reservation", Category::NodesUnavailable),
            ("ReservationDeleted", Category::NodesUnavailable),
            ("Cleaning", Category::Other),
            ("None", Category::Other),
            ("SomethingNew", Category::Other),
        ] {
            assert_eq!(Category::of(reason), cat, "{reason}");
        }
    }

    fn facts(lines: &[&str]) -> Facts {
        Facts::from_lines(lines)
    }

    #[test]
    fn a_time_limit_over_the_partitions_names_both_and_a_partition_that_takes_it() {
        let f = facts(&[
            "PJ JobId=7 Partition=debug TimeLimit=06:00:00 QOS=normal TRES=cpu=1,node=1",
            "PP PartitionName=debug MaxTime=04:00:00 State=UP",
            "PP PartitionName=long MaxTime=2-00:00:00 State=UP",
            "PP PartitionName=short MaxTime=01:00:00 State=UP",
            "PP PartitionName=open MaxTime=UNLIMITED State=DOWN",
        ]);
        let e = explain("7", "PartitionTimeLimit", &f, None, NOW);
        assert_eq!(e.category, Category::PartitionLimit);
        assert_eq!(
            e.message,
            "time_limit 06:00:00 is over partition debug's MaxTime 04:00:00: it will never start there"
        );
        assert_eq!(
            e.action,
            "lower `time_limit` to 04:00:00 or less, or use partition long (MaxTime 2-00:00:00)"
        );
        // The same limit under Slurm's first word for it.
        assert_eq!(explain("7", "PartitionConfig", &f, None, NOW), e);
        let nodes = facts(&[
            "PJ JobId=7 Partition=debug TimeLimit=01:00:00 NumNodes=4-4",
            "PP PartitionName=debug MaxTime=04:00:00 MaxNodes=2 MinNodes=0 TotalNodes=3 State=UP",
        ]);
        let n = explain("7", "PartitionConfig", &nodes, None, NOW);
        assert!(
            n.message.starts_with(
                "it asks for 4-4 nodes, outside partition debug's limits (MinNodes 0, MaxNodes 2"
            ),
            "{}",
            n.message
        );
        let down = facts(&[
            "PJ JobId=7 Partition=debug TimeLimit=01:00:00",
            "PP PartitionName=debug MaxTime=04:00:00 State=DOWN",
        ]);
        let d = explain("7", "PartitionDown", &down, None, NOW);
        assert_eq!(
            d.message,
            "partition debug does not take it now (PartitionDown; the partition's State is DOWN)"
        );
    }

    #[test]
    fn a_qos_gpu_cap_names_the_cap_the_jobs_that_use_it_and_what_fits() {
        let f = facts(&[
            "PJ JobId=9 Partition=debug QOS=gpucap TRES=cpu=1,mem=8000M,node=1,billing=1,gres/gpu=1",
            "PQ gpucap|gres/gpu=8||||",
            "PR 12 gpucap cpu=1,node=1,gres/gpu=4",
            "PR 13 gpucap cpu=1,node=1,gres/gpu:a100=4",
            "PR 14 normal cpu=1,node=1,gres/gpu=2",
        ]);
        let e = explain("9", "QOSMaxGRESPerUser", &f, None, NOW);
        assert_eq!(e.category, Category::YourLimit);
        assert_eq!(
            e.message,
            "your QOS gpucap allows 8 GPUs per user and your running jobs 12, 13 use 8; this job asks for 1"
        );
        assert_eq!(
            e.action,
            "wait for them to end (or `scancel` one), or use another QOS (`qos`)"
        );
        let room = facts(&[
            "PJ JobId=9 QOS=gpucap TRES=gres/gpu=6",
            "PQ gpucap|gres/gpu=8||||",
            "PR 12 gpucap gres/gpu=4",
        ]);
        assert_eq!(
            explain("9", "QOSMaxGRESPerUser", &room, None, NOW).action,
            "wait for it to end (or `scancel` it), ask for at most 4 GPUs, or use another QOS (`qos`)"
        );
    }

    /// An association's GrpTRES on GPUs: the cap, the running jobs under the job's association
    /// (its account, and its partition's own association where there is one) and what fits.
    #[test]
    fn an_association_gpu_cap_names_the_cap_the_jobs_under_it_and_what_fits() {
        let f = facts(&[
            "PJ JobId=9 Account=lab Partition=debug QOS=normal TRES=cpu=1,node=1,gres/gpu=2",
            "PA lab||gres/gpu=4||||",
            "PA lab|big|gres/gpu=16||||",
            "PR 12 normal lab debug cpu=1,node=1,gres/gpu=3",
            "PR 13 normal other debug cpu=1,gres/gpu=4",
            "PR 14 normal lab big cpu=1,gres/gpu=8",
        ]);
        let e = explain("9", "AssocGrpGRES", &f, None, NOW);
        assert_eq!(e.category, Category::YourLimit);
        assert_eq!(
            e.message,
            "your association (account lab) allows 4 GPUs at once (GrpTRES) and your running job 12 uses 3; this job asks for 2"
        );
        assert_eq!(
            e.action,
            "wait for it to end (or `scancel` it), ask for at most 1 GPUs, or use another account (`account`)"
        );
        // The PR lines of an older probe (id, QOS, TRES) still read.
        let old = facts(&["PR 12 gpucap cpu=1,gres/gpu=4"]);
        assert_eq!(old.running[0].qos, "gpucap");
        assert_eq!(gpus(&old.running[0].tres), 4);
        assert_eq!(old.running[0].account, "");
    }

    #[test]
    fn other_limits_of_yours_name_the_reason_and_the_limits_that_are_set() {
        let f = facts(&[
            "PJ JobId=9 Partition=debug QOS=normal Account=acct TRES=cpu=1",
            "PA acct||cpu=16||4|",
            "PR 12 normal cpu=1",
        ]);
        let e = explain("9", "AssocMaxJobsLimit", &f, None, NOW);
        assert_eq!(
            e.message,
            "your account's limit on jobs is reached (AssocMaxJobsLimit) (account acct: GrpTRES cpu=16, MaxJobs 4); your running job 12"
        );
        let q = facts(&["PJ JobId=9 QOS=normal", "PQ normal||2|||"]);
        let e = explain("9", "QOSMaxJobsPerUserLimit", &q, None, NOW);
        assert_eq!(
            e.message,
            "your QOS normal's limit on jobs per user is reached (QOSMaxJobsPerUserLimit) (QOS normal: MaxJobsPerUser 2); no job of yours runs there now"
        );
    }

    #[test]
    fn held_resources_dependency_begin_and_nodes_say_what_to_do() {
        let f = facts(&[
            "PJ JobId=5 Partition=debug TRES=cpu=1,node=1,gres/gpu=4 Dependency=afterok:4(unfulfilled) StartTime=2026-12-06T10:00:00",
            "PI debug|0",
            "PI long|3",
        ]);
        let held = explain("5", "JobHeldUser", &f, None, NOW);
        assert_eq!(held.action, "release it with `scontrol release 5`");
        let admin = explain("5", "JobHeldAdmin", &f, None, NOW);
        assert!(admin.action.contains("administrators"), "{}", admin.action);
        let r = explain("5", "Resources", &f, Some(NOW + 7800), NOW);
        assert_eq!(
            r.message,
            "waiting for resources in partition debug (it asks for cpu=1,node=1,gres/gpu=4); Slurm estimates its start in 2 h 10 min"
        );
        assert!(
            r.action.ends_with("partition long has 3 idle nodes now"),
            "{}",
            r.action
        );
        let d = explain("5", "Dependency", &f, None, NOW);
        assert_eq!(
            d.message,
            "waiting for another job: dependency afterok:4(unfulfilled)"
        );
        let never = explain("5", "DependencyNeverSatisfied", &f, None, NOW);
        assert!(never.action.starts_with("cancel it with `scancel 5`"));
        let b = explain("5", "BeginTime", &f, Some(NOW + 90), NOW);
        assert!(
            b.message.contains("2026-12-06T10:00:00") && b.message.contains("2 min"),
            "{}",
            b.message
        );
        let n = explain(
            "5",
            "ReqNodeNotAvail, UnavailableNodes:mn[1-2]",
            &f,
            None,
            NOW,
        );
        assert_eq!(n.category, Category::NodesUnavailable);
        assert!(n.message.ends_with(": mn[1-2]"), "{}", n.message);
        let o = explain("5", "SomethingNew", &Facts::default(), None, NOW);
        assert_eq!(o.message, "Slurm says SomethingNew");
    }

    #[test]
    fn facts_survive_lines_that_are_cut_or_empty() {
        let f = facts(&["PJ", "PP", "PI x", "PI y|z", "PR 1", "PQ", "junk"]);
        assert!(f.job.is_empty() && f.idle.is_empty() && f.running.is_empty());
        let e = explain("1", "PartitionTimeLimit", &f, None, NOW);
        assert!(
            e.message.contains("time_limit ? is over partition ?"),
            "{}",
            e.message
        );
    }
}
