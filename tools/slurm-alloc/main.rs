//! slurm-alloc: a held allocation with a persistent container, for interactive development
//! (the held allocation and the walltime strategy of the manual procedure, docs/migrating.md).

use clap::{Args, Parser, Subcommand, ValueEnum};
use shared::contract::schema::{Allocation, AllocationState, ExecMode, LastExec, Negotiation};
use shared::remote::exit::{self, Alloc as Exit, ExitCodes};
use shared::remote::layout::{self, Layout};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::slurm::{self, check_slurm_value, format_duration, Settings, OVERLAP};
use shared::{Context, DocumentTo, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::time::{Duration, Instant};

/// Hold an allocation on the cluster for interactive work, and run commands in it.
///
///   slurm-alloc up   [FILE]            hold it (salloc inside tmux on the login node)
///   slurm-alloc exec [FILE] -- CMD...  run a command in it (srun --jobid), exit with its code
///   slurm-alloc exec --sync [FILE] -- CMD...
///                                      sync your working tree first, in the same ssh execution
///   slurm-alloc down [FILE]            release it (container, tmux session, allocation)
///
/// `exec --sync` is the inner loop (edit, run again): what `slurm-sync-tracked |
/// slurm-sync-untracked | slurm-alloc exec` does, in one ssh execution instead of three, writing
/// the same sync sections; the command runs only when both syncs succeeded.
///
/// `exec` gives the command's stdout on stdout and its stderr on stderr, byte for byte, and exits
/// with its exit code, as ssh and srun do (`exec alloc.json -- python eval.py > results.txt`);
/// the document (the `allocation` section's `last_exec`, the sync sections) goes to the file
/// named with `--doc FILE`, and is not written without it. slurm-alloc's own lines on stderr
/// start with `slurm-alloc:`. `up` and `down` write the document on stdout, as every tool does.
///
/// `up` checks before creating: a live allocation (or tmux session) of the same name is reused.
/// It asks for the partition's maximum walltime (from `scontrol show partition`); while the job
/// is PENDING with its estimated start more than 10 minutes away (or unknown), it lowers the limit
/// to what the work needs (`expected_duration`, else by `purpose`: profiling 30 min, development
/// 2 h, training 2 h), rounded up to the hour, with `scontrol update`, says so, and re-checks;
/// still far: exit 3 with the estimate and what to try (a backfill partition, fewer nodes,
/// another cluster), unless --wait. With `container_image` on pyxis, a registry image is
/// imported once per digest into the image cache on the login node (as slurm-submit does), each
/// node's named container `slurm-tools-<jobid>` is created from that file, and `packages` are
/// installed in it when given. On Apptainer (`container_runtime`, or the only runtime the
/// cluster has) the image is pulled once into the image cache, every node starts the instance
/// `slurm-tools-<jobid>` from it with a writable overlay (held by a step of its own for the
/// allocation's life), `packages` are installed once with pip --target into a directory on the
/// shared filesystem every node's instance sees, and `exec` and slurm-attach run in the node's
/// instance (what a command changes in the container stays there for the next one); `down` stops
/// the instances and removes the overlays, the launcher and the packages.
///
/// salloc holds the allocation with a command of its own (never an interactive step, which
/// sites with `use_interactive_step` would start and every `exec` would then wait behind), and
/// steps take `--overlap` where srun has it. Each `up` knows its allocation by a tag unique to it,
/// so a finished allocation of the same name that Slurm still lists is never taken for the new
/// one; an `up` whose allocation is refused or ends at once closes the tmux session it started.
/// tmux sessions are matched by exact name (another allocation's `slurm-tools-<name>-x` is never
/// touched). `down` releases the allocation the document names even when the document carries an
/// error (e.g. `up`'s exit 3 while it pended), and clears that error.
///
/// {reads}
/// (job_name defaults to `<model_name>.alloc`; mounts is a string or a list; expected_duration
/// is [D-]HH:MM:SS; purpose is profiling, development or training; commands run in
/// remote_repo_path, else remote_cwd; command is exec's default. The Slurm fields are read the
/// same way slurm-submit reads them.)
///
/// {adds}
///
/// Exit: 0 done; `exec` exits with its command's own exit code; 2 bad input; 3 a login is
/// needed, or the allocation pends far away (without --wait); 4 ssh, Slurm or the container
/// import failed.
///
/// Examples:
///   slurm-alloc up job.json > alloc.json && slurm-alloc exec alloc.json -- nvidia-smi
///   slurm-alloc exec --sync alloc.json -- python -m pytest -x tests/   # after each edit
#[derive(Parser, Debug)]
#[command(name = "slurm-alloc", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Hold the allocation (or find the one already held), wait until it runs.
    Up(UpArgs),
    /// Run a command in the allocation: its stdout on stdout, its stderr on stderr, its exit
    /// code; the document only with --doc FILE.
    Exec(ExecArgs),
    /// Release it: remove the named container, kill the tmux session, cancel the allocation.
    Down(DownArgs),
}

#[derive(Args, Debug)]
struct UpArgs {
    #[command(flatten)]
    input: InputArg,
    /// Keep waiting while the allocation pends, instead of exit 3 with suggestions.
    #[arg(long)]
    wait: bool,
    /// Seconds to wait for the allocation to start (with --wait, or when it starts soon).
    #[arg(long, default_value_t = 1800, value_name = "SECONDS")]
    wait_timeout: u64,
    /// Seconds between the walltime reduction and the re-check of the estimated start.
    #[arg(long, default_value_t = 15, value_name = "SECONDS")]
    recheck_after: u64,
    /// Say the salloc command line `up` would run and start nothing (no ssh connection; the
    /// document passed on unchanged).
    #[arg(long)]
    dry_run: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// One task in total.
    Single,
    /// One task per node.
    PerNode,
    /// A task per GPU with --mpi=pmix.
    Mpi,
    /// A task per GPU, RANK/LOCAL_RANK/WORLD_SIZE set.
    Distributed,
}

#[derive(Args, Debug)]
struct ExecArgs {
    #[command(flatten)]
    input: InputArg,
    /// How the command is spread over the allocation.
    #[arg(long, value_enum, default_value_t = Mode::Single)]
    mode: Mode,
    /// Write outside the mounts: pyxis's --container-writable; on Apptainer the node's instance
    /// is always writable (its overlay), and where it does not run, a writable tmpfs over the
    /// image that goes with the command.
    #[arg(long)]
    writable: bool,
    /// Run in a code tree of its own: the synced snapshot (`sync_tracked.commit`) and its
    /// untracked files, which later syncs do not change (as slurm-submit does for every job),
    /// instead of in the remote clone itself, which a sync from another checkout into the same
    /// clone (a second worktree, a run launched beside this one) may change while the command
    /// runs. Old trees are pruned as slurm-submit prunes them.
    #[arg(long)]
    own_tree: bool,
    /// Sync first, in the same ssh execution: what `slurm-sync-tracked | slurm-sync-untracked |
    /// slurm-alloc exec` does, writing the same sections, with one execution instead of three
    /// (the inner loop at a login node's distance: edit, run again). The snapshot travels
    /// through origin; the command runs only when both syncs succeeded. A repository with
    /// submodules or Git LFS files is synced in executions of its own first (said so).
    #[arg(long)]
    sync: bool,
    /// With --sync: seconds to wait while another sync into the same remote clone holds its
    /// lock (as slurm-sync-tracked's --lock-wait; default 600); after that, exit 4 naming the
    /// holder, and the command does not run.
    #[arg(long, value_name = "SECONDS", requires = "sync")]
    lock_wait: Option<u64>,
    /// Write the document (with `allocation.last_exec`, and the sync sections with --sync) to
    /// FILE when the command ended, replacing FILE in one step (it may be the input file).
    /// Without it no document is written: stdout is the command's.
    #[arg(long, value_name = "FILE")]
    doc: Option<std::path::PathBuf>,
    /// The command: one argument is shell text (`-- 'make && ./run.sh'`); several are a
    /// program and its arguments, each passed as it is (`-- python3 -c 'print(6 * 7)'`), as
    /// srun and docker exec take them. Without it, the document's `command`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct DownArgs {
    #[command(flatten)]
    input: InputArg,
}

impl From<Mode> for ExecMode {
    fn from(m: Mode) -> ExecMode {
        match m {
            Mode::Single => ExecMode::Single,
            Mode::PerNode => ExecMode::PerNode,
            Mode::Mpi => ExecMode::Mpi,
            Mode::Distributed => ExecMode::Distributed,
        }
    }
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        match &self.cmd {
            Cmd::Up(a) => &a.input,
            Cmd::Exec(a) => &a.input,
            Cmd::Down(a) => &a.input,
        }
    }
    const SECTIONS: &'static [&'static str] = &["allocation", "sync_tracked", "sync_untracked"];

    fn reads() -> Vec<&'static str> {
        Input::reads()
    }

    /// Releasing is cleanup: `down` acts on the allocation the document names, whatever error
    /// the document carries (e.g. `up`'s own exit 3 while the allocation pended).
    fn handles_upstream_error(&self) -> bool {
        matches!(self.cmd, Cmd::Down(_))
    }

    /// `exec`: stdout is the command's; the document goes to `--doc FILE`, if given.
    fn document_to(&self) -> DocumentTo {
        match &self.cmd {
            Cmd::Exec(a) => a.doc.clone().map_or(DocumentTo::Nowhere, DocumentTo::File),
            _ => DocumentTo::Stdout,
        }
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-alloc", |cli, ctx| match &cli.cmd {
        Cmd::Up(a) => up(a, ctx),
        Cmd::Exec(a) => exec(a, ctx),
        Cmd::Down(_) => down(ctx),
    })
}

shared::document_input! {
    /// What slurm-alloc reads (each subcommand what it needs of it).
    struct Input {
        /// The Slurm settings, as slurm-submit reads them; their layout part names where
        /// commands run.
        settings: shared::slurm::SettingsInput = part,
        model_name: Option<String> = string,
        expected_duration: Option<String> = string,
        purpose: Option<String> = string,
        packages: Option<Vec<String>> = strings,
        command: Option<String> = string,
        allocation: Option<Allocation> = section,
        /// An upstream error `down` clears once the allocation is released (as it came: one
        /// not of its type is cleared too).
        error: Option<serde_json::Value> = value,
        connection: shared::remote::ssh::Connection = part,
    }
}

shared::document_input! {
    /// What `exec` reads once its optional sync has run: where the clone is and the snapshot.
    struct Synced {
        layout: shared::remote::layout::LayoutInput = part,
        sync_tracked: Option<shared::contract::schema::SyncTracked> = section,
    }
}

impl Input {
    fn layout(&self) -> &shared::remote::layout::LayoutInput {
        &self.settings.places.layout
    }
}

/// What every subcommand needs.
struct Alloc {
    ssh: Ssh,
    job_name: String,
    session: String,
    tag: String,
    dir: String,
}

fn alloc_of(input: &Input) -> Result<Alloc> {
    let ssh = Ssh::connect(&input.connection)?;
    let job_name = match &input.settings.job_name {
        Some(n) => n.clone(),
        None => format!(
            "{}.alloc",
            layout::sanitize(input.model_name.as_deref().unwrap_or("slurm-tools"), true)
        ),
    };
    check_slurm_value("job_name", &job_name)?;
    // Where commands run: the remote checkout, else the working directory (shared::remote::layout).
    let layout = Layout::of(input.layout());
    let dir = match (&input.layout().remote_repo_path, &input.layout().remote_cwd) {
        (Some(d), _) => layout.absolute("remote_repo_path", d)?,
        (None, Some(d)) => layout.absolute("remote_cwd", d)?,
        (None, None) => {
            return Err(shared::contract::doc::missing(
                "remote_cwd",
                "set `remote_cwd` (or run slurm-sync-tracked for `remote_repo_path`)",
            ))
        }
    };
    let id = layout::sanitize(&job_name, false);
    Ok(Alloc {
        ssh,
        session: format!("slurm-tools-{id}"),
        // Unique per `up`: a finished allocation of the same name that Slurm still lists
        // (MinJobAge) is never taken for the one this `up` creates.
        tag: shared::state::journal::unique_tag(&format!("slurm-tools-alloc-{id}")),
        job_name,
        dir,
    })
}

fn section(input: &Input) -> Allocation {
    input.allocation.clone().unwrap_or_default()
}

fn tagged<'a>(text: &'a str, tag: &'a str) -> Option<&'a str> {
    shared::remote::Tagged::of(text).first(tag)
}

/// The work's need in seconds: `expected_duration`, else by `purpose` (docs/migrating.md, "Walltime").
fn need(input: &Input) -> Result<u64> {
    if let Some(d) = &input.expected_duration {
        return slurm::parse_time_limit(d).ok_or_else(|| {
            shared::contract::doc::field_error(
                "expected_duration",
                &format!("is {d:?}, not [D-]HH:MM:SS"),
            )
            .with_hint("e.g. \"03:00:00\"")
        });
    }
    Ok(match input.purpose.as_deref() {
        Some("profiling") => 30 * 60,
        None | Some("development") | Some("training") => 2 * 3600,
        Some(other) => {
            return Err(shared::contract::doc::field_error(
                "purpose",
                &format!("is {other:?}; use profiling, development or training"),
            ))
        }
    })
}

fn up(args: &UpArgs, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let a = alloc_of(&input)?;
    let need = need(&input)?;
    let mut st = Settings::from_input(&input.settings)?;
    let gpus = st.gpus_per_node;
    let image = st.container_image.clone();
    let packages = packages_of(input.packages.clone(), image.is_some())?;
    // Commands run in the working directory: inside the container it must be at the same path.
    st.check_container_sees(
        Layout::of(input.layout()).home(),
        &[("the working directory", a.dir.as_str())],
    )?;

    if args.dry_run {
        let salloc = salloc_argv(&st, &a.job_name, &a.tag);
        ctx.note(format!(
            "dry run: would run on {} (held in tmux session {}): {} --time=<MaxTime of partition {}> <a command that holds the allocation>; an allocation named {} already queued or running would be reused instead, and a pending one's walltime shortened toward {} to start sooner",
            a.ssh.host,
            a.session,
            shared::contract::error::render_argv(&salloc),
            st.partition.as_deref().unwrap_or("(the default)"),
            a.job_name,
            format_duration(need)
        ));
        return Ok(Outcome::Done);
    }
    shared::support::testhook::pause("alloc:before");
    let started = start_or_reuse(&a, &st)?;
    shared::support::testhook::pause("alloc:created");
    let mut sec = section(&input);
    // This document's own allocation, already set up by an `up` that finished.
    let set_up_before = sec.job_id.as_deref() == Some(started.job.as_str())
        && sec.state == Some(AllocationState::Running);
    note_started(ctx, &a, &mut sec, &started);
    let (job, reused) = (started.job, started.reused);

    // Wait for RUNNING, negotiating the walltime while it pends.
    let state = wait_running(ctx, args, &a, &mut sec, &job, need, reused.is_some())?;
    sec.state = Some(AllocationState::Running);
    sec.time_limit = state.limit.map(format_duration);
    shared::support::testhook::pause("alloc:running");

    // The container, once per node. A reused allocation goes through this too unless this very
    // document says its `up` finished: the `up` that created it may have been killed before the
    // import, and pyxis skips the import of a named container that exists, so it costs little.
    let container = instance_name(&job);
    if st.on_apptainer() {
        let img = image.as_deref().unwrap_or_default();
        // Named before they are made, so that `down` on the document removes them even after
        // an `up` that failed half-way.
        let dir = shared::slurm::container::allocation_dir(&st.places, &job)?;
        sec.container_launcher = Some(layout::join(&dir, "container.sh"));
        sec.packages_dir = (!packages.is_empty()).then(|| layout::join(&dir, "packages"));
        sec.container_instance = Some(container.clone());
        if !set_up_before {
            if let Err(e) = apptainer_up(ctx, &a, &st, &job, &packages, &sec) {
                // The allocation stays held: `down` on the document releases it.
                ctx.doc.set_section("allocation", &sec);
                return Err(e);
            }
        }
        ctx.note(format!(
            "the allocation's container runs {img} on Apptainer, as instance {container} on every node{}",
            if packages.is_empty() {
                String::new()
            } else {
                format!(", packages installed: {}", packages.join(" "))
            }
        ));
    } else if let (Some(img), false) = (&image, set_up_before) {
        pyxis_up(
            ctx,
            &a,
            &mut st,
            img,
            &job,
            &packages,
            &mut sec,
            reused.is_some(),
        )?;
    }
    if image.is_some() && !st.on_apptainer() {
        sec.container_name = Some(container);
    }
    // Unknown GPU count: ask the node once.
    if gpus.is_none() && sec.gpus_per_node_probed.is_none() {
        probe_gpus(ctx, &a, &job, &mut sec)?;
    }
    ctx.note(format!(
        "allocation {job} is RUNNING; run commands with `slurm-alloc exec`"
    ));
    ctx.doc.set_section("allocation", &sec);
    shared::state::ledger::record_submission(ctx, "allocation", &job);
    Ok(Outcome::Done)
}

/// Say what `up`'s first round trip found or started, into the section too.
fn note_started(ctx: &mut Context, a: &Alloc, sec: &mut Allocation, started: &Started) {
    let Started {
        text,
        job,
        reused,
        max,
        login,
    } = started;
    if reused.is_some() {
        ctx.note(format!(
            "reusing allocation {job} ({}) held in tmux session {}",
            a.job_name, a.session
        ));
        if !text.lines().any(|l| l == format!("SESSION {}", a.session)) {
            warn_other_login(ctx, &a.ssh.host, sec, login.as_deref());
        }
    } else {
        ctx.note(format!(
            "allocation {job} requested at the partition maximum ({max}), held in tmux session {}",
            a.session
        ));
    }
    sec.job_id = Some(job.clone());
    sec.job_name = Some(a.job_name.clone());
    sec.tmux_session = Some(a.session.clone());
    sec.reused = Some(reused.is_some());
    if reused.is_none() {
        sec.login_host = login.clone();
        sec.time_limit_requested = Some(max.clone());
        sec.negotiation = None;
    }
}

/// `packages`: pip requirement specifiers (never options), only with a container image.
fn packages_of(packages: Option<Vec<String>>, has_image: bool) -> Result<Vec<String>> {
    let packages = packages.unwrap_or_default();
    if let Some(p) = packages.iter().find(|p| p.starts_with('-')) {
        return Err(shared::contract::doc::field_error(
            "packages",
            &format!("has {p:?}, which pip would take as an option"),
        )
        .with_hint(
            "give requirement specifiers only (e.g. \"numpy==1.26\"); nothing was started",
        ));
    }
    if !packages.is_empty() && !has_image {
        return Err(shared::contract::doc::field_error(
            "packages",
            "is set but `container_image` is not: packages are installed in the allocation's container",
        )
        .with_hint("set `container_image` (an image with python3), or install the packages yourself with `slurm-alloc exec`; nothing was started"));
    }
    Ok(packages)
}

/// What `up`'s first round trip found or started.
struct Started {
    text: String,
    job: String,
    /// The job id of an allocation of this name that was there already.
    reused: Option<String>,
    /// The partition's MaxTime, at which a new allocation is requested.
    max: String,
    login: Option<String>,
}

/// One round trip: reuse what exists, else start salloc in tmux at the partition's maximum.
/// What `up` gives the cluster: the allocation's names, its partition, and the salloc line tmux
/// holds (the limit is filled in by the script).
struct UpParams {
    host: String,
    name: String,
    session: String,
    tag: String,
    partition: Option<String>,
    salloc: Vec<String>,
}

/// `slurm-alloc up`'s first round trip (alloc-up.sh): an allocation of this name reused, or one
/// started in tmux at the partition's maximum walltime.
struct AllocUp;

impl shared::remote::Operation for AllocUp {
    type Params = UpParams;
    type Reply = Started;
    const DEADLINE: Duration = Duration::from_secs(90);

    fn script(p: &UpParams) -> Result<Script> {
        let mut s = Script::new();
        s.raw("set -u\n");
        exit::assign::<Exit>(&mut s)?;
        s.assign("name", &p.name)?;
        s.assign("session", &p.session)?;
        s.assign("tag", &p.tag)?;
        s.assign("part", p.partition.as_deref().unwrap_or(""))?;
        s.raw(shared::remote::TMUX);
        let mut quoted = String::new();
        for w in &p.salloc {
            quoted.push_str(&shared::remote::quote::quote(w)?);
            quoted.push(' ');
        }
        s.assign("salloc_words", &quoted)?;
        s.raw(shared::remote::ALLOC_UP);
        Ok(s)
    }

    fn reply(p: &UpParams, out: &shared::support::process::Output) -> Result<Started> {
        let text = out.stdout_text();
        if !out.success() {
            return Err(ToolError::remote(format!(
                "could not start the allocation on {} ({})",
                p.host,
                out.exit_text()
            ))
            .with_hint("check account/partition (`salloc` by hand in tmux shows Slurm's message)")
            .with_command(out.record()));
        }
        let reused = tagged(&text, "REUSE").map(str::to_string);
        let job = reused
            .clone()
            .or_else(|| tagged(&text, "CREATED").map(str::to_string))
            .ok_or_else(|| ToolError::remote("no job id came back for the allocation"))?;
        let max = tagged(&text, "MAXTIME").unwrap_or("UNLIMITED").to_string();
        let login = tagged(&text, "LOGIN")
            .filter(|h| !h.is_empty())
            .map(str::to_string);
        Ok(Started {
            text,
            job,
            reused,
            max,
            login,
        })
    }
}

fn start_or_reuse(a: &Alloc, st: &Settings) -> Result<Started> {
    let params = UpParams {
        host: a.ssh.host.clone(),
        name: a.job_name.clone(),
        session: a.session.clone(),
        tag: a.tag.clone(),
        partition: st.partition.clone(),
        salloc: salloc_argv(st, &a.job_name, &a.tag),
    };
    shared::remote::run::<AllocUp>(&a.ssh, &params)
}

/// Wait until the allocation runs (its queue entry then), negotiating the walltime once while
/// it pends far from its start; a pending one without --wait, one that left the queue (what
/// this `up` started is closed) or the wait's end is an error.
fn wait_running(
    ctx: &mut Context,
    args: &UpArgs,
    a: &Alloc,
    sec: &mut Allocation,
    job: &str,
    need: u64,
    reused: bool,
) -> Result<slurm::QueueEntry> {
    let started = Instant::now();
    let mut negotiated = sec.negotiation.is_some();
    loop {
        let q = queue(a, job)?;
        match q.as_ref().map(|q| q.state.as_str()) {
            Some("RUNNING") => return Ok(q.expect("running")),
            Some("PENDING") => {
                let q = q.expect("pending");
                let now = shared::support::clock::unix_now();
                let far = starts_far_away(q.start, now);
                if far && !negotiated {
                    negotiated = true;
                    let current = q.limit.unwrap_or(u64::MAX);
                    if let Some(new) = reduced_limit(need, current) {
                        set_limit(a, job, new)?;
                        let msg = format!(
                            "reduced walltime from {} to {} for faster scheduling",
                            hours(current),
                            hours(new)
                        );
                        ctx.note(&msg);
                        sec.negotiation = Some(Negotiation {
                            reduced_from: format_duration(current.min(u64::from(u32::MAX))),
                            reduced_to: format_duration(new),
                            estimated_start_before: q.start,
                            message: msg,
                        });
                        std::thread::sleep(Duration::from_secs(args.recheck_after));
                        continue;
                    }
                }
                if far && !args.wait {
                    let eta = q.start.map_or("unknown".to_string(), |s| {
                        format!("in {}", format_duration(s.saturating_sub(now)))
                    });
                    sec.state = Some(AllocationState::Pending);
                    sec.estimated_start = q.start;
                    ctx.doc.set_section("allocation", sec);
                    return Err(ToolError::needs_person(format!(
                        "allocation {job} is pending ({}) and its estimated start is {eta}",
                        q.reason
                    ))
                    .with_hint(format!(
                        "keep waiting with `slurm-alloc up --wait` (it is held in tmux session {}), or try a backfill partition with a shorter limit, fewer nodes (`node_count`), or another cluster; `slurm-alloc down` on the same input document releases it",
                        a.session
                    )));
                }
            }
            _ => {
                // Whatever this `up` started goes: nothing stays held in tmux.
                let released = if !reused {
                    release_session(a).unwrap_or(false)
                } else {
                    false
                };
                return Err(ToolError::remote(format!(
                    "allocation {job} is no longer in the queue (it ended or was refused){}",
                    if released {
                        format!("; its tmux session {} was closed", a.session)
                    } else {
                        String::new()
                    }
                ))
                .with_hint(
                    "check the account and partition (salloc by hand shows Slurm's message), then rerun `slurm-alloc up`",
                ));
            }
        }
        if started.elapsed() > Duration::from_secs(args.wait_timeout) {
            return Err(ToolError::needs_person(format!(
                "allocation {job} did not start within {} s",
                args.wait_timeout
            ))
            .with_hint("rerun `slurm-alloc up --wait` to keep waiting, or `slurm-alloc down`"));
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// pyxis: the container on every node of the allocation (a registry image imported once per
/// digest on the login node into the image cache, as for slurm-submit; every node's container
/// is created from that file), and `packages` installed in it.
#[allow(clippy::too_many_arguments)]
fn pyxis_up(
    ctx: &mut Context,
    a: &Alloc,
    st: &mut Settings,
    img: &str,
    job: &str,
    packages: &[String],
    sec: &mut Allocation,
    reused: bool,
) -> Result<()> {
    let container = instance_name(job);
    // A registry image is imported once per digest on the login node into the image cache
    // (as for slurm-submit); every node's container is created from that file.
    let held = format!(
        "the container image {} could not be imported; allocation {job} stays held: fix `container_image` and rerun `slurm-alloc up` (it reuses the allocation), or release it with `slurm-alloc down`",
        st.container_ref.as_deref().unwrap_or(img)
    );
    sec.container_use = shared::slurm::container::pyxis_cache(
        ctx,
        &a.ssh,
        st,
        &a.tag,
        "every node's container starts",
        &held,
    )
    .inspect_err(|_| ctx.doc.set_section("allocation", sec))?;
    let params = PyxisUpAsk {
        job: job.to_string(),
        image: st.container_ref.clone().unwrap_or_else(|| img.to_string()),
        written: img.to_string(),
        container: container.clone(),
        packages: packages.to_vec(),
    };
    ctx.note(format!(
        "importing the container image {img} on each node of allocation {job} ({})",
        match &sec.container_use {
            Some(_) => "from the image cache's file",
            None => "pyxis imports it once per node; a large image takes minutes",
        }
    ));
    shared::remote::run::<PyxisUp>(&a.ssh, &params)
        .inspect_err(|_| ctx.doc.set_section("allocation", sec))?;
    ctx.note(format!(
        "container {container} {} on each node{}",
        if reused {
            "is ready (pyxis reuses a named container and skips the import)"
        } else {
            "imported"
        },
        if packages.is_empty() {
            String::new()
        } else {
            format!(", packages installed: {}", packages.join(" "))
        }
    ));
    Ok(())
}

/// What [`PyxisUp`] is given: the allocation, the image (the cache's file when there is one) and
/// as the document wrote it, the container's name, the packages.
struct PyxisUpAsk {
    job: String,
    image: String,
    written: String,
    container: String,
    packages: Vec<String>,
}

/// pyxis: the named container created from the image on every node of the allocation, then
/// `packages` installed in it with the image's python3 (one execution, up to an hour).
struct PyxisUp;

impl shared::remote::Operation for PyxisUp {
    type Params = PyxisUpAsk;
    type Reply = ();
    const DEADLINE: Duration = Duration::from_secs(3600);

    fn script(p: &PyxisUpAsk) -> Result<Script> {
        let mut s = Script::new();
        exit::assign::<Exit>(&mut s)?;
        s.raw(OVERLAP);
        s.assign("job", &p.job)?;
        // Every node of the allocation: a step started from outside it spans one node unless
        // told otherwise.
        s.raw(ALL_NODES);
        let every_node = |s: &mut Script| -> Result<()> {
            s.raw("srun $ov")
                .arg(&format!("--jobid={}", p.job))?
                .raw(" --nodes=\"$nn\"")
                .arg("--ntasks-per-node=1")?;
            Ok(())
        };
        every_node(&mut s)?;
        s.arg(&format!("--container-image={}", p.image))?
            .arg(&format!("--container-name={}", p.container))?;
        s.raw(" true || exit \"$E_IMPORT\"\n");
        if !p.packages.is_empty() {
            // pip of the image's python3, in the writable container; an image without python3
            // is said as such (not as pip's "command not found").
            every_node(&mut s)?;
            s.arg(&format!("--container-name={}", p.container))?
                .arg("--container-writable")?;
            s.raw(" sh -c 'command -v python3 >/dev/null 2>&1 || exit 97; exec python3 -m pip install \"$@\"' sh --");
            for w in &p.packages {
                s.arg(w)?;
            }
            s.raw(
                "\ncase $? in 0) ;; 97) exit \"$E_NO_PYTHON\" ;; *) exit \"$E_PACKAGES\" ;; esac\n",
            );
        }
        Ok(s)
    }

    fn reply(p: &PyxisUpAsk, out: &shared::support::process::Output) -> Result<()> {
        if !out.success() {
            return Err(container_setup_error(out, &p.written, &p.job, "importing"));
        }
        Ok(())
    }
}

/// How many GPUs one node of the allocation has (nvidia-smi -L); `None` without nvidia-smi.
struct GpuProbe;

impl shared::remote::Operation for GpuProbe {
    /// The allocation's job id.
    type Params = str;
    type Reply = Option<u64>;
    const DEADLINE: Duration = Duration::from_secs(120);

    fn script(job: &str) -> Result<Script> {
        let mut s = Script::new();
        s.raw(OVERLAP);
        s.raw("srun $ov").arg(&format!("--jobid={job}"))?.raw(" --ntasks=1 sh -c 'if command -v nvidia-smi >/dev/null; then nvidia-smi -L | wc -l; else echo none; fi'\n");
        Ok(s)
    }

    fn reply(_: &str, out: &shared::support::process::Output) -> Result<Option<u64>> {
        Ok(out.stdout_text().trim().parse::<u64>().ok())
    }
}

/// Ask one node of the allocation how many GPUs it has (nvidia-smi), into the section and the
/// document's `gpus_per_node`.
fn probe_gpus(ctx: &mut Context, a: &Alloc, job: &str, sec: &mut Allocation) -> Result<()> {
    let probed = shared::remote::run::<GpuProbe>(&a.ssh, job)?;
    sec.gpus_per_node_probed = Some(probed);
    if let Some(n) = probed {
        let mut derived = Vec::new();
        ctx.doc.derive("gpus_per_node", n.into(), &mut derived);
    } else {
        ctx.note("no nvidia-smi on the node: gpus_per_node stays unknown");
    }
    Ok(())
}

/// The allocation's container on Apptainer (alloc-apptainer-up.sh): its launcher written on the
/// cluster, the image pulled into the image cache once (every node runs it once, which also
/// checks it starts there), the instance started on every node, and `packages` installed once
/// with pip --target into a directory on the shared filesystem that every node's instance sees;
/// at the paths and under the instance name `sec` gives.
fn apptainer_up(
    ctx: &mut Context,
    a: &Alloc,
    st: &Settings,
    job: &str,
    packages: &[String],
    sec: &Allocation,
) -> Result<()> {
    let dir = shared::slurm::container::allocation_dir(&st.places, job)?;
    let launcher_path = sec.container_launcher.clone().unwrap_or_default();
    let packages_dir = sec.packages_dir.clone();
    let cache = shared::slurm::container::image_cache(&st.places)?;
    let text = st
        .apptainer_launcher(
            "",
            &cache,
            None,
            packages_dir.as_deref(),
            sec.container_instance.as_deref(),
        )?
        .expect("on Apptainer with an image");
    let img = st.container_ref.as_deref().unwrap_or_default();
    let params = ApptainerUpAsk {
        job: job.to_string(),
        image: img.to_string(),
        dir,
        launcher: launcher_path,
        launcher_text: text,
        packages_dir,
        packages: packages.to_vec(),
    };
    ctx.note(format!(
        "getting the container image {img} ready on each node of allocation {job} (Apptainer pulls it once into the image cache {cache}; a large image takes minutes)"
    ));
    let up = shared::remote::run::<ApptainerUp>(&a.ssh, &params)?;
    if !up.instance_failed.is_empty() {
        ctx.warn(format!(
            "the allocation's instance {} did not start on {} ({}): commands there run in the image, and what they change in the container is not kept (an image without Apptainer's start action, such as an enroot .sqsh, cannot be an instance; a registry image or a .sif can)",
            sec.container_instance.as_deref().unwrap_or_default(),
            up.instance_failed.join(", "),
            up.instance_why.as_deref().unwrap_or("the runtime said nothing more")
        ));
    }
    up.failure.map_or(Ok(()), Err)
}

/// What [`ApptainerUp`] is given: the allocation, its image, its container files' directory,
/// the launcher's path and text, the packages and where they go.
struct ApptainerUpAsk {
    job: String,
    image: String,
    dir: String,
    launcher: String,
    launcher_text: String,
    packages_dir: Option<String>,
    packages: Vec<String>,
}

/// What Apptainer's setup said: the nodes whose instance did not start (and why), and a
/// failure, with the runtime's words.
struct ApptainerReady {
    instance_failed: Vec<String>,
    instance_why: Option<String>,
    failure: Option<ToolError>,
}

/// Apptainer: the launcher written, the image pulled once into the image cache, the instance
/// started on every node, the packages installed (alloc-apptainer-up.sh): one execution.
struct ApptainerUp;

impl shared::remote::Operation for ApptainerUp {
    type Params = ApptainerUpAsk;
    type Reply = ApptainerReady;
    const DEADLINE: Duration = Duration::from_secs(3600);

    fn script(p: &ApptainerUpAsk) -> Result<Script> {
        let mut s = Script::new();
        // The packages, as the script's arguments (exact words, each quoted once).
        s.raw("set --");
        for w in &p.packages {
            s.arg(w)?;
        }
        s.raw("\n");
        exit::assign::<Exit>(&mut s)?;
        s.raw(OVERLAP);
        s.assign("job", &p.job)?;
        s.assign("dir", &p.dir)?;
        s.assign("launcher", &p.launcher)?;
        s.assign("launcher_text", &p.launcher_text)?;
        s.assign("packages_dir", p.packages_dir.as_deref().unwrap_or(""))?;
        s.assign("wait_seconds", "300")?;
        s.raw(ALL_NODES);
        s.raw(shared::remote::ALLOC_APPTAINER_UP);
        Ok(s)
    }

    fn reply(p: &ApptainerUpAsk, out: &shared::support::process::Output) -> Result<ApptainerReady> {
        let text = out.stdout_text();
        let said = shared::remote::Tagged::of(&text);
        Ok(ApptainerReady {
            instance_failed: said.all("INSTANCE_FAILED").map(str::to_string).collect(),
            instance_why: said.first("INSTANCE_WHY").map(str::to_string),
            failure: (!out.success())
                .then(|| container_setup_error(out, &p.image, &p.job, "starting")),
        })
    }
}

/// The allocation's named container on every node: pyxis's container (created from the image
/// by the first step that names it) and Apptainer's instance (held by a step of its own).
fn instance_name(job: &str) -> String {
    format!("slurm-tools-{job}")
}

/// Why getting the allocation's container ready failed (`doing`: what it was doing to the image),
/// naming the field to fix: the runtime's own words where its lines say (shared::slurm::container).
fn container_setup_error(
    out: &shared::support::process::Output,
    img: &str,
    job: &str,
    doing: &str,
) -> ToolError {
    let lines: Vec<String> = out.stderr_tail.lines().map(str::to_string).collect();
    let (what, field) = match Exit::from_status(out.code) {
        Some(Exit::Packages) => (
            "installing `packages` in the container".to_string(),
            "packages",
        ),
        Some(Exit::NoPython) => (
            format!(
                "installing `packages`: the image {img} has no python3, so pip cannot run in it"
            ),
            "packages",
        ),
        _ => (
            shared::slurm::container::failure(&lines)
                .unwrap_or_else(|| format!("{doing} the container image {img} failed")),
            "container_image",
        ),
    };
    ToolError::remote(format!(
        "{what} ({}); allocation {job} stays held",
        out.exit_text()
    ))
    .with_field(field)
    .with_hint(format!("fix `{field}` (the command's stderr shows the details) and rerun `slurm-alloc up` (it reuses the allocation), or release it with `slurm-alloc down` on the same input document"))
    .with_command(out.record())
}

/// The login node this connection reached, as preflight saw it.
fn preflight_login(input: &Input) -> Option<String> {
    input
        .connection
        .preflight
        .as_ref()
        .and_then(|p| p.remote.login_host.clone())
}

/// Say so when this connection reached another login node than the one whose tmux holds the
/// allocation (a round-robin login alias): what still works from here, and how to reach it.
fn warn_other_login(ctx: &mut Context, host: &str, sec: &Allocation, here: Option<&str>) {
    let (Some(there), Some(here)) = (sec.login_host.as_deref(), here) else {
        return;
    };
    if there == here {
        return;
    }
    let session = sec.tmux_session.as_deref().unwrap_or("slurm-tools-<name>");
    ctx.warn(format!(
        "the allocation's tmux session {session} is on login node {there}, but this connection reached {here} \
         (`{host}` leads to several login nodes, or the connection was reopened on another one): \
         srun steps (`slurm-alloc exec`) and scancel (`slurm-alloc down`) work from any login node, \
         the tmux session does not show here; to see it, log in to {there} itself \
         (e.g. `ssh -t {host} ssh -t {there} tmux attach -t {session}`, or a Host entry for {there} in your ssh config)"
    ));
}

/// The salloc argv held in tmux (the time limit is added by the script, from the partition).
fn salloc_argv(st: &Settings, job_name: &str, tag: &str) -> Vec<String> {
    let mut argv = vec![
        "salloc".to_string(),
        format!("--job-name={job_name}"),
        format!("--nodes={}", st.nodes),
        format!("--comment={tag}"),
        // The hold command ends when the allocation is revoked (scancel, time limit).
        "--kill-command=TERM".to_string(),
    ];
    st.common(&mut argv);
    argv
}

/// docs/migrating.md, "Walltime": a pending allocation whose estimated start is unknown or more than ten
/// minutes away is worth a shorter limit.
fn starts_far_away(estimated_start: Option<u64>, now: u64) -> bool {
    estimated_start.is_none_or(|s| s > now + 600)
}

/// The limit to lower to: what the work needs, rounded up to the hour, when that is less than
/// the current limit (`u64::MAX`: unlimited).
fn reduced_limit(need: u64, current: u64) -> Option<u64> {
    let new = need.div_ceil(3600) * 3600;
    (new < current).then_some(new)
}

fn hours(secs: u64) -> String {
    if secs == u64::MAX {
        "unlimited".into()
    } else {
        format!("{}h", secs.div_ceil(3600))
    }
}

fn queue(a: &Alloc, job: &str) -> Result<Option<slurm::QueueEntry>> {
    shared::remote::run::<QueueEntryOf>(&a.ssh, job)
}

fn set_limit(a: &Alloc, job: &str, secs: u64) -> Result<()> {
    shared::remote::run::<SetTimeLimit>(&a.ssh, &(job.to_string(), secs))
}

/// The allocation's line in squeue (times in seconds); `None` once it left the queue.
struct QueueEntryOf;

impl shared::remote::Operation for QueueEntryOf {
    /// The job id.
    type Params = str;
    type Reply = Option<slurm::QueueEntry>;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(job: &str) -> Result<Script> {
        let mut s = Script::new();
        s.raw("env SLURM_TIME_FORMAT=%s squeue -h -j")
            .arg(job)?
            .raw(" -o")
            .arg(slurm::SQUEUE_FORMAT)?
            .raw(" 2>/dev/null\n");
        Ok(s)
    }

    fn reply(_: &str, out: &shared::support::process::Output) -> Result<Self::Reply> {
        Ok(out
            .stdout_text()
            .lines()
            .next()
            .and_then(slurm::parse_squeue))
    }
}

/// A new time limit for the allocation (scontrol update), in seconds.
struct SetTimeLimit;

impl shared::remote::Operation for SetTimeLimit {
    /// The job id and the limit in seconds.
    type Params = (String, u64);
    type Reply = ();
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script((job, secs): &(String, u64)) -> Result<Script> {
        let mut s = Script::new();
        s.raw("scontrol update")
            .arg(&format!("JobId={job}"))?
            .arg(&format!("TimeLimit={}", format_duration(*secs)))?
            .raw("\n");
        Ok(s)
    }

    fn reply((job, _): &(String, u64), out: &shared::support::process::Output) -> Result<()> {
        if !out.success() {
            return Err(ToolError::remote(format!(
                "scontrol update of job {job}'s time limit failed"
            ))
            .with_command(out.record()));
        }
        Ok(())
    }
}

fn job_of(input: &Input) -> Result<(Alloc, String, Allocation)> {
    let a = alloc_of(input)?;
    let sec = section(input);
    let job = sec.job_id.clone().ok_or_else(|| {
        ToolError::field(
            ErrorKind::BadInput,
            "allocation",
            "no allocation in the document",
        )
        .with_hint("run `slurm-alloc up` first")
    })?;
    slurm::check_job_id("allocation", &job)?;
    Ok((a, job, sec))
}

/// The command `exec` runs: after `--` (one word: shell text; several: a command and its
/// arguments, each passed as is, as srun and docker exec take them), else `command`.
fn command_of(args: &ExecArgs, input: &Input) -> Result<String> {
    Ok(if args.command.is_empty() {
        input.command.clone().ok_or_else(|| {
            shared::contract::doc::missing(
                "command",
                "give the command after `--`, or set `command`",
            )
        })?
    } else if let [text] = args.command.as_slice() {
        text.clone()
    } else {
        // A command and its arguments, each passed as is (as srun and docker exec take them).
        args.command
            .iter()
            .map(|w| shared::remote::quote::quote(w))
            .collect::<Result<Vec<_>>>()?
            .join(" ")
    })
}

/// srun's flags for the mode (and the allocation's pyxis container).
fn exec_argv(args: &ExecArgs, st: &Settings, job: &str, sec: &Allocation) -> Vec<String> {
    let (per_node, nodes) = (st.devices_per_node(), st.nodes);
    let mut argv = vec!["srun".to_string(), format!("--jobid={job}")];
    match args.mode {
        Mode::Single => argv.extend(["--nodes=1".into(), "--ntasks=1".into()]),
        Mode::PerNode => argv.extend([format!("--nodes={nodes}"), "--ntasks-per-node=1".into()]),
        Mode::Mpi => argv.extend([
            format!("--nodes={nodes}"),
            format!("--ntasks-per-node={per_node}"),
            "--mpi=pmix".into(),
        ]),
        Mode::Distributed => argv.extend([
            format!("--nodes={nodes}"),
            format!("--ntasks-per-node={per_node}"),
        ]),
    }
    if let Some(c) = &sec.container_name {
        argv.push(format!("--container-name={c}"));
        st.container_mounts(&mut argv);
        if args.writable {
            argv.push("--container-writable".into());
        }
    }
    argv
}

/// The command's own code tree (at the synced snapshot when the sync ran in this execution):
/// made by the script, which then runs the command in it.
fn own_tree(
    ctx: &mut Context,
    synced: &Synced,
    s: &mut Script,
    job: &str,
    snapshot: Option<String>,
) -> Result<String> {
    let repo = Layout::of(&synced.layout).repo_path_req()?.path;
    let token = format!("exec-{}-{}", job, shared::support::clock::unix_now());
    let mut trees = shared::remote::trees::Trees::of(
        &synced.layout,
        &repo,
        &token,
        10,
        synced.sync_tracked.as_ref(),
    )?;
    if let Some(commit) = snapshot {
        trees.commit = commit;
    }
    trees.assign(s, false)?;
    s.raw("make_tree >/dev/null || { echo \"slurm-alloc: could not make the command's own code tree $tree\" >&2; exit 126; }\nprune_trees >/dev/null\ncd -- \"$tree\" || exit 126\n");
    ctx.note(format!(
        "the command runs in its own code tree {}",
        trees.job
    ));
    Ok(trees.job)
}

fn exec(args: &ExecArgs, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let (a, job, mut sec) = job_of(&input)?;
    let command = command_of(args, &input)?;
    warn_other_login(ctx, &a.ssh.host, &sec, preflight_login(&input).as_deref());
    let st = Settings::from_input(&input.settings)?;
    if args.mode == Mode::Mpi {
        if let Some(p) = &input.connection.preflight {
            p.remote
                .require_pmix("mode", "`slurm-alloc exec --mode mpi`")?;
        }
    }
    let argv = exec_argv(args, &st, &job, &sec);
    // With --sync, the snapshot is made and pushed now; the cluster side runs in the command's
    // execution.
    let fused = if args.sync {
        let lock_wait = args
            .lock_wait
            .unwrap_or(shared::sync::tracked::LOCK_WAIT_SECS);
        match shared::sync::fused::start(ctx, &a.ssh, lock_wait)? {
            shared::sync::fused::Start::Fused(f) => Some(f),
            shared::sync::fused::Start::Separate => None,
        }
    } else {
        None
    };
    let mut body = String::new();
    if args.mode == Mode::Distributed {
        body.push_str(slurm::DISTRIBUTED_ENV);
    }
    body.push_str(&command);
    // Where the command runs: with --sync, the clone the sync just made equal to the working
    // tree (a document that never saw a sync, as `slurm-alloc up` writes it, names only
    // `remote_cwd`; the sync has decided `remote_repo_path` by now).
    // Read once the sync (if any) has written what it decided into the document.
    let synced = Synced::read(&ctx.doc)?;
    let dir = if args.sync {
        Layout::of(&synced.layout).repo_path_req()?.path
    } else {
        a.dir.clone()
    };
    let mut s = Script::new();
    s.raw("cd --").arg(&dir)?.raw(" || exit 126\n");
    let tree = if args.own_tree {
        let snapshot = fused.as_ref().map(|f| f.snapshot().to_string());
        Some(own_tree(ctx, &synced, &mut s, &job, snapshot)?)
    } else {
        None
    };
    s.raw(OVERLAP);
    if sec.container_launcher.is_some() && args.writable {
        // Apptainer without the node's instance: a writable tmpfs over the image for this
        // command (the instance's overlay is writable already).
        s.raw("SLURM_TOOLS_CONTAINER_WRITABLE=1 ");
    }
    s.raw("srun $ov");
    for w in &argv[1..] {
        s.arg(w)?;
    }
    if sec.container_name.is_some() {
        // In the container too, the command starts where it would outside.
        s.raw(" --container-workdir=\"$PWD\"");
    }
    if let Some(l) = &sec.container_launcher {
        // Apptainer: through the allocation's launcher (the cached image, mounts, packages),
        // starting where it would outside.
        s.raw(" /bin/sh").arg(l)?;
    }
    s.raw(" bash -c").arg(&body)?.raw("\n");
    shared::support::testhook::pause("alloc:exec");
    ctx.note(format!("running in allocation {job}: {command}"));
    let deadline = Duration::from_secs(7 * 86_400);
    let out = match fused {
        Some(f) => f.run(
            ctx,
            &a.ssh,
            shared::sync::fused::Command {
                script: &s,
                stdin: None,
                capture: false,
            },
            deadline,
        )?,
        None => a.ssh.run_script_through(&s, deadline)?,
    };
    let code = out.code.unwrap_or(255);
    sec.last_exec = Some(LastExec {
        command,
        mode: args.mode.into(),
        exit_code: code,
        tree,
    });
    ctx.doc.set_section("allocation", &sec);
    Ok(Outcome::Exit(u8::try_from(code).unwrap_or(255)))
}

/// Close this allocation's tmux session (and with it a salloc still waiting in it).
fn release_session(a: &Alloc) -> Result<bool> {
    shared::remote::run::<KillSession>(&a.ssh, &a.session)
}

/// A tmux session closed (tmux.sh's `kill_session`): whether there was one.
struct KillSession;

impl shared::remote::Operation for KillSession {
    /// The session's name.
    type Params = str;
    type Reply = bool;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(session: &str) -> Result<Script> {
        let mut s = Script::new();
        s.assign("session", session)?;
        s.raw(shared::remote::TMUX);
        s.raw("kill_session \"$session\" && echo KILLED\nexit 0\n");
        Ok(s)
    }

    fn reply(_: &str, out: &shared::support::process::Output) -> Result<bool> {
        Ok(shared::remote::Tagged::of(&out.stdout_text()).has("KILLED"))
    }
}

/// `nn`: the node count of allocation `$job`, for a step on every node of it.
const ALL_NODES: &str =
    "nn=$(squeue -h -j \"$job\" -o '%D' 2>/dev/null | head -n 1); [ -n \"$nn\" ] || nn=1\n";

/// What `down` gives the cluster: the allocation's names, and its container's files and instance
/// where `up` recorded them (only ever a `slurm-tools-alloc/<job>` directory, and the instance
/// `up` names).
struct DownParams {
    session: String,
    name: String,
    job: Option<String>,
    container_dir: Option<String>,
    instance: Option<String>,
}

/// What the cluster released, and the login node `down` reached.
struct Released {
    login: Option<String>,
    did: Vec<String>,
}

/// `slurm-alloc down` on the cluster (alloc-down.sh, with the instance stop and tmux's helpers).
struct AllocDown;

impl shared::remote::Operation for AllocDown {
    type Params = DownParams;
    type Reply = Released;
    const DEADLINE: Duration = Duration::from_secs(120);

    fn script(p: &DownParams) -> Result<Script> {
        let mut s = Script::new();
        s.raw("set -u\n");
        s.assign("session", &p.session)?;
        s.assign("name", &p.name)?;
        s.assign("job", p.job.as_deref().unwrap_or(""))?;
        s.assign("container_dir", p.container_dir.as_deref().unwrap_or(""))?;
        s.assign("instance", p.instance.as_deref().unwrap_or(""))?;
        s.raw(shared::remote::TMUX);
        s.raw(OVERLAP);
        s.raw(shared::remote::ALLOC_INSTANCE_STOP);
        s.raw(shared::remote::ALLOC_DOWN);
        Ok(s)
    }

    fn reply(_: &DownParams, out: &shared::support::process::Output) -> Result<Released> {
        let text = out.stdout_text();
        Ok(Released {
            login: tagged(&text, "LOGIN").map(str::to_string),
            did: text
                .lines()
                .filter(|l| !l.starts_with("LOGIN "))
                .map(str::to_string)
                .collect(),
        })
    }
}

fn down_params(a: &Alloc, sec: &Allocation, job: Option<&String>) -> DownParams {
    // Apptainer: the allocation's container files (launcher, packages) on the shared
    // filesystem, only ever a `slurm-tools-alloc/<job>` directory.
    let container_dir = match (&sec.container_launcher, job) {
        (Some(l), Some(id)) => {
            let dir = l
                .rsplit_once('/')
                .map(|(d, _)| d.to_string())
                .unwrap_or_default();
            dir.ends_with(&format!("/slurm-tools-alloc/{id}"))
                .then_some(dir)
        }
        _ => None,
    };
    // Apptainer: the allocation's instance (`up` names it) on every node.
    let instance = sec
        .container_instance
        .as_ref()
        .zip(job)
        .filter(|(i, id)| **i == instance_name(id))
        .map(|(i, _)| i.clone());
    DownParams {
        session: a.session.clone(),
        name: a.job_name.clone(),
        job: job.cloned(),
        container_dir,
        instance,
    }
}

fn down(ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let a = alloc_of(&input)?;
    let mut sec = section(&input);
    let job = sec.job_id.clone();
    if let Some(id) = &job {
        slurm::check_job_id("allocation", id)?;
    }
    let params = down_params(&a, &sec, job.as_ref());
    shared::support::testhook::pause("alloc:down");
    let Released { login: here, did } = shared::remote::run::<AllocDown>(&a.ssh, &params)?;
    warn_other_login(ctx, &a.ssh.host, &sec, here.as_deref());
    ctx.note(if did.is_empty() {
        "nothing was left to release".to_string()
    } else {
        format!("released: {}", did.join(", "))
    });
    sec.state = Some(AllocationState::Released);
    sec.released = Some(did);
    ctx.doc.set_section("allocation", &sec);
    // The error the document carried (a pending `up`, say) is over once the allocation is gone.
    if let Some(error) = &input.error {
        let what =
            match serde_json::from_value::<shared::contract::schema::ErrorSection>(error.clone()) {
                Ok(e) => format!(" from {} ({})", e.tool, e.message),
                Err(_) => String::new(),
            };
        ctx.note(format!(
            "the document's error{what} is cleared: the allocation is released"
        ));
        ctx.doc.remove("error");
    }
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::Document;

    /// `up`'s first script as assembled passes the static checks, with its salloc line quoted.
    #[test]
    fn the_up_script_passes_the_static_checks_as_assembled() {
        use shared::remote::Operation;
        let doc =
            Document::parse(br#"{"account":"a","partition":"p","node_count":2}"#, "t").unwrap();
        let st = Settings::from_doc(&doc).unwrap();
        let p = UpParams {
            host: "h".into(),
            name: "m.alloc".into(),
            session: "slurm-tools-m".into(),
            tag: "slurm-tools-alloc-m-1".into(),
            partition: st.partition.clone(),
            salloc: salloc_argv(&st, "m.alloc", "slurm-tools-alloc-m-1"),
        };
        let s = AllocUp::script(&p).unwrap();
        shared::remote::script_check::assert_clean("alloc-up", s.as_str());
        assert!(
            s.as_str().contains(" --comment=slurm-tools-alloc-m-1 "),
            "{}",
            s.as_str()
        );
    }

    /// The allocation's other operations as assembled (values with quotes in them) pass the
    /// static checks, and their replies read as the tool decides on them.
    #[test]
    fn the_allocations_operations_are_clean_and_their_replies_read() {
        use shared::remote::Operation;
        use shared::support::process::Output;
        for packages in [vec![], vec!["numpy==2.0".to_string(), "it's".to_string()]] {
            let p = PyxisUpAsk {
                job: "42".into(),
                image: "/c/ab.sqsh".into(),
                written: "reg:5000/img:1".into(),
                container: instance_name("42"),
                packages: packages.clone(),
            };
            shared::remote::script_check::assert_clean(
                "alloc-pyxis-up",
                PyxisUp::script(&p).unwrap().as_str(),
            );
            assert!(PyxisUp::reply(&p, &Output::of(Some(0), "", "")).is_ok());
            let e = PyxisUp::reply(
                &p,
                &Output::of(Some(Exit::Packages.code()), "", "pip: error\n"),
            )
            .unwrap_err();
            assert_eq!(e.field.as_deref(), Some("packages"), "{}", e.message);
            let a = ApptainerUpAsk {
                job: "42".into(),
                image: "docker://reg:5000/img:1".into(),
                dir: "/h/u/slurm-tools-alloc/42".into(),
                launcher: "/h/u/slurm-tools-alloc/42/launch.sh".into(),
                launcher_text: "#!/bin/sh\nexec apptainer exec 'x' \"$@\"\n".into(),
                packages_dir: Some("/h/u/slurm-tools-alloc/42/packages".into()),
                packages,
            };
            shared::remote::script_check::assert_clean(
                "alloc-apptainer-up",
                ApptainerUp::script(&a).unwrap().as_str(),
            );
        }
        let a = ApptainerUpAsk {
            job: "42".into(),
            image: "x.sqsh".into(),
            dir: "/d".into(),
            launcher: "/d/l".into(),
            launcher_text: String::new(),
            packages_dir: None,
            packages: vec![],
        };
        let r = ApptainerUp::reply(
            &a,
            &Output::of(
                Some(0),
                "INSTANCE_FAILED mn1\nINSTANCE_FAILED mn2\nINSTANCE_WHY no start script\n",
                "",
            ),
        )
        .unwrap();
        assert_eq!(r.instance_failed, ["mn1", "mn2"]);
        assert_eq!(r.instance_why.as_deref(), Some("no start script"));
        assert!(r.failure.is_none());
        for s in [
            GpuProbe::script("42").unwrap(),
            QueueEntryOf::script("42").unwrap(),
            SetTimeLimit::script(&("42".into(), 7200)).unwrap(),
            KillSession::script("slurm-tools-it's").unwrap(),
        ] {
            shared::remote::script_check::assert_clean("alloc-small", s.as_str());
        }
        assert_eq!(
            GpuProbe::reply("42", &Output::of(Some(0), "4\n", "")).unwrap(),
            Some(4)
        );
        assert_eq!(
            GpuProbe::reply("42", &Output::of(Some(0), "none\n", "")).unwrap(),
            None
        );
        assert!(KillSession::reply("s", &Output::of(Some(0), "KILLED\n", "")).unwrap());
        assert!(!KillSession::reply("s", &Output::of(Some(0), "", "")).unwrap());
        let e = SetTimeLimit::reply(&("42".into(), 60), &Output::of(Some(1), "", "denied\n"))
            .unwrap_err();
        assert_eq!(e.message, "scontrol update of job 42's time limit failed");
    }

    /// `down`'s script as assembled (with and without an Apptainer instance and its files)
    /// passes shellcheck and the four shells' `sh -n`, without a cluster.
    #[test]
    fn the_down_script_passes_the_static_checks_as_assembled() {
        use shared::remote::Operation;
        for apptainer in [false, true] {
            let p = DownParams {
                session: "slurm-tools-it's".into(),
                name: "m.alloc".into(),
                job: Some("42".into()),
                container_dir: apptainer.then(|| "/h/u/slurm-tools-alloc/42".into()),
                instance: apptainer.then(|| instance_name("42")),
            };
            let s = AllocDown::script(&p).unwrap();
            shared::remote::script_check::assert_clean("alloc-down", s.as_str());
            assert!(s.as_str().contains("session='slurm-tools-it'\\''s'"));
        }
    }

    #[test]
    fn the_salloc_line_carries_the_settings_and_the_tag() {
        let doc = Document::parse(
            br#"{"account":"a","partition":"p","node_count":2,"gpus_per_node":4,"mounts":["/x:/x"]}"#,
            "test",
        )
        .unwrap();
        let st = Settings::from_doc(&doc).unwrap();
        assert_eq!(
            salloc_argv(&st, "m.alloc", "slurm-tools-alloc-m"),
            [
                "salloc",
                "--job-name=m.alloc",
                "--nodes=2",
                "--comment=slurm-tools-alloc-m",
                "--kill-command=TERM",
                "--account=a",
                "--partition=p",
                "--gpus-per-node=4"
            ]
        );
        assert_eq!(st.mounts.as_deref(), Some("/x:/x"));
    }

    #[test]
    fn the_walltime_is_lowered_only_when_the_start_is_far_and_the_need_is_shorter() {
        let now = 1_000_000;
        for (start, far) in [
            (None, true),
            (Some(now + 601), true),
            (Some(now + 600), false),
            (Some(now), false),
        ] {
            assert_eq!(starts_far_away(start, now), far, "{start:?}");
        }
        // (need, current limit, lowered to)
        for (need, current, new) in [
            (30 * 60, 4 * 3600, Some(3600)),
            (2 * 3600, u64::MAX, Some(2 * 3600)),
            (2 * 3600 + 1, 4 * 3600, Some(3 * 3600)),
            (4 * 3600, 4 * 3600, None),
            (5 * 3600, 4 * 3600, None),
        ] {
            assert_eq!(reduced_limit(need, current), new, "{need} {current}");
        }
        assert_eq!(hours(u64::MAX), "unlimited");
        assert_eq!(hours(5400), "2h");
    }
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
