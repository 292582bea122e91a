//! slurm-resolve: pick the cluster and fill in what follows from it (docs/migrating.md, step 1).

mod catalog;
mod defaults;
mod place;

use catalog::{apply_pattern, Catalog, Entry};
use clap::Parser;
use shared::contract::doc::{field_error, Document};
use shared::contract::schema::{Candidate, Resolve, SelectedBy};
use shared::remote::layout::Layout;
use shared::{Context, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::path::PathBuf;

/// Pick the Slurm cluster for a job and fill in the fields that follow from it.
///
/// Explicit: `slurm_cluster` names the cluster. Auto-select: `device_type`,
/// `required_devices_per_node` (and optionally `total_required_devices`) choose among the
/// catalog's clusters: the device type must match, `gpus_per_node` must be enough, and the
/// cluster must be big enough for the total where the catalog knows its node count. No match:
/// exit 2 with each cluster's reason. Several: exit 3 listing them, unless `--pick` or the
/// catalog's `prefer` list decides. Without a catalog, an explicit cluster resolves from the
/// document alone.
///
/// {reads}
///
/// Fills when absent (never overwrites): slurm_cluster (auto), ssh_host (from the catalog's
/// pattern), mfa_style, gpus_per_node, default_user_root_dir, default_models_repo, node_count
/// (ceil(total / per node), at least 1), remote_repo_path (<root>/<repo name>),
/// remote_work_dir (<remote_repo_path>/work_dirs/<basename of work_dir>); the remote paths by the
/// rules of the contract's remote layout, and not yet when the root starts with `~/` (the
/// cluster home is known only after slurm-ssh-preflight; slurm-sync-tracked derives them then).
/// A catalog entry's `defaults` (a site's qos, account, mem, ...) fill what the document lacks.
///
/// Your own defaults: any job document fields in $XDG_CONFIG_HOME/slurm-tools/defaults.json
/// (else ~/.config/slurm-tools/defaults.json, or the file $SLURM_TOOLS_DEFAULTS names), filled
/// in where the document is silent, after the catalog's (a site's rule wins over a habit); the
/// fields that choose the cluster (slurm_cluster, device_type, required_devices_per_node,
/// total_required_devices) and slurm_user are taken first. So a job document can be `{"command": "python train.py"}`.
///
/// {adds}
///
/// Exit: 0 resolved; 2 bad input or no cluster can take the job; 3 several clusters match, or a
/// value only you can give is missing.
///
/// Example:
///   echo '{"device_type":"H100","required_devices_per_node":4,"slurm_user":"me"}' \
///     | slurm-resolve --catalog ~/.config/slurm-tools/clusters.json
#[derive(Parser, Debug)]
#[command(name = "slurm-resolve", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// The cluster catalog (JSON, see docs/catalog.md). Default: $SLURM_TOOLS_CATALOG, else
    /// $XDG_CONFIG_HOME/slurm-tools/clusters.json when it exists.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,

    /// When several clusters match, take this one.
    #[arg(long, value_name = "CLUSTER")]
    pick: Option<String>,

    /// Choose the catalog cluster where the request would start first: ask every cluster that
    /// can serve it (one ssh execution each, through its master or a key login) for Slurm's
    /// estimated start of exactly this request, the limits that would block it, the GPUs free
    /// now and your pending jobs there; write them all in the `placement` section.
    #[arg(long, conflicts_with = "pick")]
    place: bool,

    /// With --place: wait up to this many seconds for a login to each cluster that needs one
    /// (its master opened, e.g. with the command placement prints), and ask it then, instead of
    /// going on without it.
    #[arg(long, value_name = "SECONDS", requires = "place")]
    wait_login: Option<u64>,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["resolve", "placement"];

    fn reads() -> Vec<&'static str> {
        let mut names = Input::reads();
        for n in Sizing::reads()
            .into_iter()
            .chain(shared::slurm::SettingsInput::reads())
        {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-resolve", resolve)
}

shared::document_input! {
    /// What slurm-resolve reads (once your defaults filled in the fields that choose the
    /// cluster): what chooses the cluster, and what the derived fields are derived from.
    struct Input {
        slurm_cluster: Option<String> = string,
        device_type: Option<String> = string,
        required_devices_per_node: Option<i64> = int(1, 4096),
        total_required_devices: Option<i64> = int(1, 10_000_000),
        fill: Fill = part,
        size_from_history: Option<bool> = flag,
        /// With --place, each cluster is asked through its own master.
        connection: shared::remote::ssh::Connection = part,
    }
}

shared::document_input! {
    /// The fields resolve fills when absent, and what it fills them from (read again for each
    /// candidate document of --place).
    struct Fill {
        slurm_user: Option<String> = string,
        ssh_host: Option<String> = string,
        mfa_style: Option<bool> = mfa,
        gpus_per_node: Option<i64> = int(1, 4096),
        gres: Option<String> = string,
        node_count: Option<i64> = int(1, 100_000),
        default_models_repo: Option<String> = string,
        /// The remote paths, by the contract's remote layout.
        layout: shared::remote::layout::LayoutInput = part,
    }
}

shared::document_input! {
    /// What `size_from_history` reads, once the cluster's and your defaults are in.
    struct Sizing {
        job_name: Option<String> = string,
        recipe: Option<String> = label,
        /// Given at all (a value of yours stays; its type is slurm-submit's to check).
        time_limit: Option<serde_json::Value> = value,
        mem: Option<serde_json::Value> = value,
        cluster: shared::state::ledger::ClusterName = part,
        connection: shared::remote::ssh::Connection = part,
    }
}

struct Wanted {
    cluster: Option<String>,
    /// The document's `ssh_host`: the cluster itself when nothing else names one.
    host: Option<String>,
    device: Option<String>,
    per_node: Option<i64>,
    total: Option<i64>,
}

fn resolve(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    // The person's own defaults: the fields that choose the cluster first, the rest after the
    // cluster's (see defaults.rs).
    let user = defaults::load()?;
    let mut derived = Vec::new();
    let mut from_defaults = Vec::new();
    if let Some(u) = &user {
        from_defaults.extend(u.apply(&mut ctx.doc, true, &mut derived));
    }
    let input = Input::read(&ctx.doc)?;
    let wanted = Wanted {
        cluster: input.slurm_cluster.clone(),
        host: input.fill.ssh_host.clone(),
        device: input.device_type.clone(),
        per_node: input.required_devices_per_node,
        total: input.total_required_devices,
    };
    if let Some(h) = &input.fill.ssh_host {
        shared::remote::ssh::check_host(h)?;
    }

    let catalog = match catalog::locate(cli.catalog.as_deref())? {
        Some(p) => Some(Catalog::load(&p)?),
        None => None,
    };

    let (entry, selected_by, candidates) = if cli.place {
        placed(ctx, &input, &wanted, catalog.as_ref(), cli.wait_login)?
    } else {
        select(&wanted, catalog.as_ref(), cli.pick.as_deref())?
    };
    let cluster_name = entry
        .map(|e| e.cluster_name.clone())
        .or(wanted.cluster.clone())
        .or(wanted.host.clone())
        .expect("select returns an entry, an explicit name or the document's host");
    if catalog.is_none() {
        ctx.note(format!(
            "no catalog: resolving cluster {cluster_name} from the job document alone"
        ));
    }

    derive_fields(&mut ctx.doc, entry, &cluster_name, &wanted, &mut derived)?;
    if let Some(u) = &user {
        from_defaults.extend(u.apply(&mut ctx.doc, false, &mut derived));
        if !from_defaults.is_empty() {
            ctx.note(format!(
                "from your defaults {}: {}",
                u.path.display(),
                from_defaults.join(", ")
            ));
        }
    }
    if !derived.is_empty() {
        ctx.note(format!(
            "cluster {cluster_name} ({selected_by}); filled in: {}",
            derived.join(", ")
        ));
    } else {
        ctx.note(format!(
            "cluster {cluster_name} ({selected_by}); nothing to fill in"
        ));
    }
    let sized_from_history = if input.size_from_history == Some(true) {
        Some(size_from_history(ctx, &cluster_name, &mut derived)?)
    } else {
        None
    };
    let section = Resolve {
        sized_from_history,
        cluster_name,
        selected_by,
        derived,
        catalog: catalog.as_ref().map(|c| c.path.display().to_string()),
        defaults_file: user.as_ref().map(|u| u.path.display().to_string()),
        from_defaults,
        candidates,
        partitions: entry.map(|e| e.partitions.clone()).unwrap_or_default(),
        flags: entry.map(|e| e.flags.clone()).unwrap_or_default(),
    };
    ctx.doc.set_section("resolve", &section);
    Ok(Outcome::Done)
}

/// `size_from_history`: `mem` and `time_limit` from the completed past runs of this `job_name`
/// on the chosen cluster, from its accounting (one ssh execution, one sacct; shared::slurm::usage),
/// where the document does not give them (a catalog's or your defaults' value is replaced).
fn size_from_history(
    ctx: &mut Context,
    cluster: &str,
    derived: &mut Vec<String>,
) -> Result<shared::contract::schema::HistorySizing> {
    use shared::slurm::usage::Answer;
    let input = Sizing::read(&ctx.doc)?;
    let Some(name) = input.job_name.clone() else {
        return Err(shared::contract::doc::missing(
            "job_name",
            "`size_from_history` finds past runs by their job name: set `job_name`",
        ));
    };
    let ledger_cluster = input.cluster.name();
    let mut sizing = shared::contract::schema::HistorySizing {
        job_name: name.clone(),
        cluster: ledger_cluster.clone(),
        runs: 0,
        completed: 0,
        elapsed_p90_seconds: None,
        peak_memory_p90_bytes: None,
        time_limit: None,
        mem: None,
        filled: Vec::new(),
        note: String::new(),
    };
    let ids = past_runs(&ledger_cluster, &name);
    sizing.runs = ids.len();
    let answer = if ids.is_empty() {
        None
    } else {
        let ssh = shared::remote::ssh::Ssh::for_preflight(&input.connection)?;
        match shared::remote::run::<shared::remote::UsageQuery>(&ssh, &ids) {
            Ok(answer) => Some(answer),
            Err(e) if e.kind == ErrorKind::NeedsPerson => Some(Answer::Failed(format!(
                "{} ({})",
                e.message,
                e.hint.unwrap_or_default()
            ))),
            Err(e) => return Err(e),
        }
    };
    sizing.note = match answer {
        None => format!("no past run of {name} on {cluster} in the ledger: nothing sized"),
        Some(Answer::Disabled) => format!(
            "{cluster} keeps no accounting (sacct: accounting storage is disabled): nothing sized, nothing guessed"
        ),
        Some(Answer::Failed(why)) => {
            format!("{cluster} could not be asked for its accounting: {why}; nothing sized")
        }
        Some(Answer::Jobs(jobs)) => sized(ctx, &input, &jobs, &mut sizing, cluster, derived),
    };
    ctx.note(&sizing.note);
    Ok(sizing)
}

/// The past runs' figures sized into `time_limit` and `mem` (with their margins) where the
/// document does not give them: what was done, said.
fn sized(
    ctx: &mut Context,
    input: &Sizing,
    jobs: &[shared::slurm::usage::Usage],
    sizing: &mut shared::contract::schema::HistorySizing,
    cluster: &str,
    derived: &mut Vec<String>,
) -> String {
    use shared::slurm::usage;
    let name = sizing.job_name.clone();
    // The tasks per node the job's settings give (one when they cannot be read).
    let tasks = shared::slurm::Settings::from_doc(&ctx.doc)
        .ok()
        .zip(
            input
                .recipe
                .as_deref()
                .map_or(
                    Ok(shared::contract::schema::Recipe::Single),
                    shared::contract::schema::Recipe::parse,
                )
                .ok(),
        )
        .map_or(1, |(st, r)| st.tasks_per_node(r).max(1) as u64);
    match usage::size(jobs, tasks) {
        None => format!(
            "none of the {} past runs of {name} on {cluster} completed: nothing sized",
            jobs.len()
        ),
        Some(s) => {
            sizing.completed = s.runs;
            sizing.elapsed_p90_seconds = Some(s.elapsed_p90_seconds);
            sizing.peak_memory_p90_bytes = s.peak_memory_p90_bytes;
            sizing.time_limit = Some(s.time_limit.clone());
            sizing.mem = s.mem.clone();
            for (field, value, given) in [
                (
                    "time_limit",
                    sizing.time_limit.clone(),
                    input.time_limit.is_some(),
                ),
                ("mem", sizing.mem.clone(), input.mem.is_some()),
            ] {
                // The document's own value stays; a catalog's or your defaults' gives way.
                let from_defaults = derived.iter().any(|d| d == field);
                if let (Some(v), true) = (value, !given || from_defaults) {
                    ctx.doc.remove(field);
                    derived.retain(|d| d != field);
                    ctx.doc.derive(field, v.into(), derived);
                    sizing.filled.push(field.to_string());
                }
            }
            let mem = match (&s.mem, s.peak_memory_p90_bytes) {
                (Some(m), Some(p)) => format!(
                    "{m} (their p90 peak {} x1.25 x{tasks} tasks per node)",
                    usage::memory_text(p)
                ),
                _ => "not sized (accounting sampled no memory)".to_string(),
            };
            let filled = if sizing.filled.is_empty() {
                "nothing (the document gives both)".to_string()
            } else {
                sizing.filled.join(", ")
            };
            format!(
                "sized from {} completed past runs of {name} on {cluster}: time_limit {} (their p90 elapsed {} x1.5, at least 5 min more), mem {mem}; filled: {filled}",
                s.runs,
                s.time_limit,
                shared::slurm::format_duration(s.elapsed_p90_seconds),
            )
        }
    }
}

/// The ids of the newest 20 runs of `name` on `cluster` in the ledger.
fn past_runs(cluster: &str, name: &str) -> Vec<String> {
    let runs: Vec<shared::state::ledger::Run> = shared::state::ledger::path()
        .and_then(|p| shared::state::ledger::read(&p).ok())
        .map(|(entries, _)| shared::state::ledger::fold(&entries))
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.cluster == cluster && r.job_name.as_deref() == Some(name))
        .filter(|r| shared::slurm::is_job_id(&r.job_id))
        .collect();
    runs.iter()
        .rev()
        .take(20)
        .map(|r| r.job_id.clone())
        .collect()
}

/// `--place`: every catalog cluster that can serve the request asked when it would start it
/// (place.rs); the earliest wins. The `placement` section is written either way.
fn placed<'c>(
    ctx: &mut Context,
    input: &Input,
    w: &Wanted,
    catalog: Option<&'c Catalog>,
    wait_login: Option<u64>,
) -> Result<(Option<&'c Entry>, SelectedBy, Vec<Candidate>)> {
    let cat = placement_catalog(input, w, catalog)?;
    let (entries, out) = place::static_candidates(cat, w.device.as_deref(), w.per_node, w.total);
    let mut report: Vec<Candidate> = out
        .iter()
        .map(|(n, why)| Candidate {
            cluster_name: n.clone(),
            accepted: false,
            reason: Some(why.clone()),
        })
        .collect();
    if entries.is_empty() {
        return Err(ToolError::bad_input(format!(
            "no cluster in {} can take the request: {}",
            cat.path.display(),
            out.iter()
                .map(|(n, w)| format!("{n}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        ))
        .with_field("required_devices_per_node"));
    }
    let asked_at = shared::support::clock::unix_now();
    let (mut cands, docs) = ask_each(ctx, &entries, w, asked_at);
    if let Some(secs) = wait_login {
        place::wait_for_logins(ctx, &mut cands, &docs, asked_at, secs);
    }
    let best = place::choose(&mut cands, &cat.prefer);
    for c in &cands {
        ctx.note(format!(
            "placement: {}{}: {}",
            c.cluster_name,
            if c.chosen { " (chosen)" } else { "" },
            c.reason
        ));
    }
    let section = place::section(cands, best, asked_at);
    ctx.doc.set_section("placement", &section);
    let Some(i) = best else {
        return Err(no_winner(&section).with_field("slurm_cluster"));
    };
    let chosen = section.candidates[i].cluster_name.clone();
    for e in &entries {
        report.push(Candidate {
            cluster_name: e.cluster_name.clone(),
            accepted: e.cluster_name == chosen,
            reason: section
                .candidates
                .iter()
                .find(|c| c.cluster_name == e.cluster_name)
                .map(|c| c.reason.clone()),
        });
    }
    let entry = entries.into_iter().find(|e| e.cluster_name == chosen);
    Ok((entry, SelectedBy::Placement, report))
}

/// --place needs a catalog, no `slurm_cluster`, and a control path that differs per host.
fn placement_catalog<'c>(
    input: &Input,
    w: &Wanted,
    catalog: Option<&'c Catalog>,
) -> Result<&'c Catalog> {
    if w.cluster.is_some() {
        return Err(
            field_error("slurm_cluster", "is set, and --place chooses the cluster")
                .with_hint("remove `slurm_cluster` to let placement choose, or drop --place"),
        );
    }
    let Some(cat) = catalog else {
        return Err(ToolError::bad_input("--place asks the catalog's clusters, and no catalog was found")
            .with_hint("pass --catalog FILE, set SLURM_TOOLS_CATALOG, or create $XDG_CONFIG_HOME/slurm-tools/clusters.json (docs/catalog.md)"));
    };
    // Every cluster is asked through its own master: one literal path would be one socket for
    // all of them, and each would be asked through whichever master holds it.
    let cp = input.connection.requested_control_path();
    if !cp.contains('%') {
        return Err(field_error(
            "control_path",
            &format!("is the one path {cp:?}, which every cluster --place asks would share"),
        )
        .with_hint("give a pattern that differs per host, e.g. \"~/.ssh/slurm-tools/%C\" (the default), or leave `control_path` out"));
    }
    Ok(cat)
}

/// Every cluster asked (one ssh execution each, through its own master) with the document it
/// would get by resolve's own rules: the candidates and those documents.
fn ask_each(
    ctx: &mut Context,
    entries: &[&Entry],
    w: &Wanted,
    asked_at: u64,
) -> (
    Vec<shared::contract::schema::PlacementCandidate>,
    Vec<Document>,
) {
    let mut cands = Vec::new();
    let mut docs = Vec::new();
    for e in entries {
        // The document this cluster would get, by resolve's own rules.
        let mut d = ctx.doc.clone();
        let mut ignored = Vec::new();
        let free = Wanted {
            cluster: None,
            host: None,
            device: w.device.clone(),
            per_node: w.per_node,
            total: w.total,
        };
        let c = match derive_fields(&mut d, Some(e), &e.cluster_name, &free, &mut ignored) {
            Ok(()) => {
                ctx.note(format!("placement: asking {}", e.cluster_name));
                place::probe(&e.cluster_name, &d, asked_at)
            }
            Err(err) => {
                let mut c = place::probe_failed(&e.cluster_name, &err.message);
                c.partition = place::Request::read(&d)
                    .ok()
                    .and_then(|r| r.settings.partition);
                c
            }
        };
        cands.push(c);
        docs.push(d);
    }
    (cands, docs)
}

/// No cluster can start the request: why each cannot, and the login a cluster still needs.
fn no_winner(section: &shared::contract::schema::Placement) -> ToolError {
    let login: Vec<&shared::contract::schema::PlacementCandidate> = section
        .candidates
        .iter()
        .filter(|c| c.state == "login_needed")
        .collect();
    let reasons: Vec<String> = section
        .candidates
        .iter()
        .map(|c| format!("{}: {}", c.cluster_name, c.reason))
        .collect();
    if login.is_empty() {
        ToolError::bad_input(format!(
            "no cluster can start the request now: {}",
            reasons.join("; ")
        ))
        .with_hint("change what blocks it (each cluster's reason above), or set `slurm_cluster` to queue it anyway")
    } else {
        ToolError::needs_person(format!(
            "no cluster that answered can start the request now: {}",
            reasons.join("; ")
        ))
        .with_hint(format!(
            "log in to {} and rerun: {}",
            login[0].cluster_name,
            login[0]
                .login_command
                .as_deref()
                .unwrap_or("slurm-ssh-preflight --establish")
        ))
    }
}

/// Choose the catalog entry. Returns (entry, how it was selected, candidates report).
fn select<'c>(
    w: &Wanted,
    catalog: Option<&'c Catalog>,
    pick: Option<&str>,
) -> Result<(Option<&'c Entry>, SelectedBy, Vec<Candidate>)> {
    if let Some(name) = &w.cluster {
        let Some(cat) = catalog else {
            return Ok((None, SelectedBy::Explicit, vec![]));
        };
        return match cat.find(name) {
            Some(e) => Ok((Some(e), SelectedBy::Explicit, vec![])),
            None => Err(field_error(
                "slurm_cluster",
                &format!(
                    "is {name:?}, which is not in the catalog {} (it has: {})",
                    cat.path.display(),
                    cat.names().join(", ")
                ),
            )
            .with_hint("fix `slurm_cluster`, or add the cluster to the catalog")),
        };
    }
    let Some(device) = &w.device else {
        if w.host.is_some() {
            // The smallest document: a login host and a command. That host is the cluster.
            return Ok((None, SelectedBy::SshHost, vec![]));
        }
        return Err(ToolError::field(
            ErrorKind::BadInput,
            "slurm_cluster",
            "no cluster given: the document has none of `slurm_cluster`, `device_type` or `ssh_host`",
        )
        .with_hint("set `ssh_host` to the cluster's login host, `slurm_cluster` to a catalog cluster's name, or `device_type` and `required_devices_per_node` to pick one from the catalog"));
    };
    let Some(per_node) = w.per_node else {
        return Err(shared::contract::doc::missing(
            "required_devices_per_node",
            "auto-select needs `required_devices_per_node` (GPUs per node the job uses) next to `device_type`",
        ));
    };
    let Some(cat) = catalog else {
        return Err(ToolError::bad_input(
            "auto-select (`device_type` without `slurm_cluster`) needs a cluster catalog, and none was found",
        )
        .with_hint("pass --catalog FILE, set SLURM_TOOLS_CATALOG, or create $XDG_CONFIG_HOME/slurm-tools/clusters.json (docs/catalog.md); or set `slurm_cluster`"));
    };
    let mut matches = Vec::new();
    let mut report = Vec::new();
    for e in &cat.clusters {
        match e.rejection(Some(device), Some(per_node), w.total) {
            None => {
                matches.push(e);
                report.push(Candidate {
                    cluster_name: e.cluster_name.clone(),
                    accepted: true,
                    reason: None,
                });
            }
            Some(why) => report.push(Candidate {
                cluster_name: e.cluster_name.clone(),
                accepted: false,
                reason: Some(why),
            }),
        }
    }
    let wanted_text = format!(
        "{device} x{per_node} per node{}",
        w.total
            .map(|t| format!(", {t} in total"))
            .unwrap_or_default()
    );
    chosen_match(matches, report, cat, pick, &wanted_text)
}

/// Auto-select among the catalog's clusters that can take the request: the one, the one
/// --pick names, the catalog's first `prefer`red, else the person chooses.
fn chosen_match<'c>(
    matches: Vec<&'c Entry>,
    report: Vec<Candidate>,
    cat: &'c Catalog,
    pick: Option<&str>,
    wanted_text: &str,
) -> Result<(Option<&'c Entry>, SelectedBy, Vec<Candidate>)> {
    match matches.len() {
        0 => {
            let reasons: Vec<String> = report
                .iter()
                .map(|r| {
                    format!(
                        "  {}: {}",
                        r.cluster_name,
                        r.reason.as_deref().unwrap_or("")
                    )
                })
                .collect();
            Err(ToolError::bad_input(format!(
                "no cluster in {} can take {wanted_text}:\n{}",
                cat.path.display(),
                if reasons.is_empty() { "  (the catalog lists no clusters)".to_string() } else { reasons.join("\n") }
            ))
            .with_field("device_type")
            .with_hint("lower `required_devices_per_node`/`total_required_devices`, pick another `device_type`, or set `slurm_cluster`"))
        }
        1 => Ok((Some(matches[0]), SelectedBy::Auto, report)),
        _ => {
            let names: Vec<&str> = matches.iter().map(|e| e.cluster_name.as_str()).collect();
            if let Some(p) = pick {
                return match matches.iter().find(|e| e.cluster_name == p) {
                    Some(e) => Ok((Some(*e), SelectedBy::Auto, report)),
                    None => Err(ToolError::bad_input(format!(
                        "--pick {p}: not among the matching clusters ({})",
                        names.join(", ")
                    ))
                    .with_hint("pick one of the matching clusters")),
                };
            }
            if let Some(e) = cat
                .prefer
                .iter()
                .find_map(|p| matches.iter().find(|e| &e.cluster_name == p))
            {
                return Ok((Some(*e), SelectedBy::Auto, report));
            }
            Err(ToolError::needs_person(format!(
                "several clusters can take {wanted_text}: {}",
                names.join(", ")
            ))
            .with_field("slurm_cluster")
            .with_hint(format!(
                "choose one: set `slurm_cluster`, or rerun with --pick {} (or add a `prefer` list to the catalog)",
                names[0]
            )))
        }
    }
}

/// The login host from the catalog's pattern (checked), or the person is asked for it.
fn host_of(entry: Option<&Entry>, user: Option<&str>, cluster: &str) -> Result<String> {
    let Some(pattern) = entry.and_then(|e| e.ssh_host.as_deref()) else {
        return Err(ToolError::field(
            ErrorKind::NeedsPerson,
            "ssh_host",
            format!("no ssh host for cluster {cluster}: the document has no `ssh_host` and the catalog gives no pattern"),
        )
        .with_hint("set `ssh_host` to the cluster's login host (an alias from your ssh config works)"));
    };
    let host = apply_pattern(pattern, user, cluster).map_err(|missing| {
        ToolError::field(
            ErrorKind::NeedsPerson,
            missing,
            format!("the catalog's ssh_host pattern {pattern:?} needs `{missing}`, which the document does not have"),
        )
        .with_hint(format!("set `{missing}` (your user name on {cluster}) or `ssh_host`"))
    })?;
    shared::remote::ssh::check_host(&host).map_err(|e| {
        ToolError::bad_input(format!(
            "the catalog's ssh_host pattern gives {host:?}: {}",
            e.message
        ))
        .with_field("ssh_host")
    })?;
    Ok(host)
}

/// What the catalog entry gives, each only where the document is silent: mfa_style, the GPUs
/// per node, the site's defaults, the root and models directories from their patterns.
fn from_entry(
    doc: &mut Document,
    fill: &Fill,
    e: &Entry,
    cluster: &str,
    derived: &mut Vec<String>,
) -> Result<()> {
    let user = fill.slurm_user.as_deref();
    if let Some(m) = e.mfa_style {
        if fill.mfa_style.is_none() && m.is_some() {
            doc.derive("mfa_style", m.into(), derived);
        }
    }
    if let Some(g) = e.gpus_per_node {
        // A site default asking for GPUs by `gres` (with a type) stands for gpus_per_node.
        let gres_gpu = e
            .defaults
            .get("gres")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|g| g.split(',').any(|i| i.split(':').next() == Some("gpu")));
        if !gres_gpu && fill.gres.is_none() {
            doc.derive("gpus_per_node", g.into(), derived);
        }
    }
    // The site's defaults (qos, mem, account, ...), each only where the document is silent
    // (`derive` fills a field only when it is absent).
    for (field, v) in &e.defaults {
        doc.derive(field, v.clone(), derived);
    }
    for (field, pattern, given) in [
        (
            "default_user_root_dir",
            &e.default_user_root_dir,
            fill.layout.default_user_root_dir.is_some(),
        ),
        (
            "default_models_repo",
            &e.default_models_repo,
            fill.default_models_repo.is_some(),
        ),
    ] {
        if let (false, Some(p)) = (given, pattern) {
            let v = apply_pattern(p, user, cluster).map_err(|missing| {
                ToolError::field(
                    ErrorKind::NeedsPerson,
                    missing,
                    format!("the catalog's {field} pattern {p:?} needs `{missing}`"),
                )
                .with_hint(format!("set `{missing}` or `{field}`"))
            })?;
            doc.derive(field, v.into(), derived);
        }
    }
    Ok(())
}

fn derive_fields(
    doc: &mut Document,
    entry: Option<&Entry>,
    cluster: &str,
    w: &Wanted,
    derived: &mut Vec<String>,
) -> Result<()> {
    let fill = Fill::read(doc)?;
    if w.cluster.is_none() && entry.is_some() {
        doc.derive("slurm_cluster", cluster.into(), derived);
    }
    // ssh_host: supplied > catalog pattern > ask the person.
    if fill.ssh_host.is_none() {
        let host = host_of(entry, fill.slurm_user.as_deref(), cluster)?;
        doc.derive("ssh_host", host.into(), derived);
    }
    if let Some(e) = entry {
        from_entry(doc, &fill, e, cluster, derived)?;
    }
    // docs/migrating.md, step 4a: without a root dir, the remote working directory is the root.
    if let Some(cwd) = &fill.layout.remote_cwd {
        doc.derive("default_user_root_dir", cwd.clone().into(), derived);
    }
    if fill.node_count.is_none() {
        let n = match (w.total, w.per_node) {
            (Some(t), Some(p)) => ((t + p - 1) / p).max(1),
            _ => 1,
        };
        doc.derive("node_count", n.into(), derived);
    }
    // docs/migrating.md, step 4b and 4f.1, by the one rule in shared::remote::layout, on the
    // layout fields as filled in above. A root in the cluster home (`~/...`) waits for
    // preflight, which learns the home.
    let filled = shared::remote::layout::LayoutInput::read(doc)?;
    let in_home = filled
        .default_user_root_dir
        .as_deref()
        .is_some_and(|r| r.starts_with('~'));
    if !in_home {
        let layout = Layout::of(&filled);
        let repo = layout.repo_path(filled.repo_url.as_deref())?;
        let work = match &repo {
            Some(r) if filled.remote_work_dir.is_none() => Some(layout.work_dir(&r.path)?),
            _ => None,
        };
        if let Some(r) = repo.filter(|r| r.derived) {
            doc.derive("remote_repo_path", r.path.into(), derived);
        }
        if let Some(w) = work {
            doc.derive("remote_work_dir", w.path.into(), derived);
        }
    }
    Ok(())
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
