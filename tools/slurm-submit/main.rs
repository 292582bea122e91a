//! slurm-submit: the build job and every recipe (docs/migrating.md, step 5 and "Recipes").

mod race;
mod recipe;

use clap::Parser;
use shared::contract::error::render_argv;
use shared::contract::schema::{self, Job, JobKind, Recipe, Report, Status};
use shared::remote::exit::{ExitCodes, Submit as Exit};
use shared::remote::layout::{self, join, Layout};
use shared::remote::quote::{quote, Script};
use shared::remote::ssh::Ssh;
use shared::remote::trees::{tree_notes, Trees};
use shared::remote::Operation;
use shared::repo::archive::{self, Item, Stats};
use shared::slurm::Settings;
use shared::{Context, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const BUILD_SLURM: &str = include_str!("../../scripts/build.slurm");
const BUILD_SH: &str = include_str!("../../scripts/build.sh");

/// Submit the job (every recipe) or, with --build, the build job; return once Slurm accepted it.
///
/// Recipes: single (srun, 1 node, 1 task), mpi (srun --mpi=pmix, a task per GPU), distributed
/// (srun, a task per GPU, RANK/LOCAL_RANK/WORLD_SIZE set), launcher (srun, one torchrun per
/// node), batch (sbatch). srun recipes run inside a tmux session on the login node, so they
/// survive your ssh connection dropping; their job id is learned exactly from a unique token in
/// --comment, never guessed. Files (`script_path`, `extra_files`, the generated job script) go
/// up in the same ssh execution as the submission, as one stream. Nothing is submitted twice:
/// the cluster-side script looks for a job with the token before it submits, a lost connection
/// is retried once with the same token, and a rerun on the same input after an interrupted run
/// (killed, Ctrl-C, connection lost) reuses that run's token from a local record
/// ($SLURM_TOOLS_STATE_DIR, else ~/.local/state/slurm-tools, where the input is saved too and
/// named on stderr, for pipelines) and so finds its job. A rerun after a completed run submits
/// anew. Every value reaches Slurm as one literal argument.
///
/// Containers: `container_image` runs on pyxis (srun's --container-* flags) or on Apptainer
/// (every task runs the command through a launcher: `apptainer exec` with `mounts` as --bind,
/// the job's tree as the working directory, --nv with GPUs), as `container_runtime` says (auto:
/// pyxis where srun has it, else Apptainer). A registry image is made ready once per content
/// digest in <default_user_root_dir>/slurm-tools-images/ (`image_cache_dir`) under a lock, and
/// every later job runs that file: on pyxis this tool imports it with enroot on the login node
/// before submitting (a second submission waits for the first's import; no node imports); on
/// Apptainer the job's first task pulls it (slurm-watch says the pull). The report names the
/// cached image the job used; `image_cache_keep: 0` turns the cache off.
///
/// --build submits the build job, when the document asks for one: `build_command` (shell text
/// that builds the project in its code tree), or a repository that carries TensorRT-LLM's
/// scripts/build_wheel.py (said when it is detected). Otherwise, or with `build_project: false`,
/// it submits nothing and says so (the job section records the skip), so the same pipeline works
/// for every repository. build.slurm and build.sh are uploaded to
/// <default_user_root_dir>/slurm-tools-build/ and run with sbatch (one node, 02:00:00, job name
/// <job_name>.build). The whole flow is
///   slurm-submit --build | slurm-watch | slurm-submit | slurm-watch
/// and a build that did not pass stops the second slurm-submit (exit 1, document unchanged).
///
/// Sweeps: a `sweep` (a `grid` of parameter lists, crossed, or a list of `sets`, and
/// `max_parallel`) is submitted as one Slurm job array (sbatch --array, for every recipe: an srun
/// recipe's step runs inside each task's allocation), checked against the cluster's MaxArraySize
/// first. Each task has SWEEP_<NAME>, SWEEP_INDEX, SWEEP_COUNT and SWEEP_PARAMS (JSON) in its
/// environment, and `{name}` in `command` is the value as one word. --only-failed runs again the
/// tasks of a watched sweep that did not pass. `after` (job ids or saved documents) makes Slurm
/// hold the job until they end (--dependency, afterok unless prefixed).
///
/// {reads}
/// (recipe defaults to single; command, or script_path with script_name; mounts is a string or a
/// list; resolve gives the catalog's flags; build_project, build_command and device_type are
/// --build's; job and report are a watched build job's, sweep_done --only-failed's.)
///
/// {adds}
/// When a run job follows a watched build job, the build's job and report move to `build`.
/// Each accepted job is added to the local run ledger (see slurm-runs) with the document.
///
/// Exit: 0 Slurm accepted the job (or --build had nothing to build and said so); 1 the build
/// before it did not pass (document unchanged); 2 bad input or Slurm refused a field (named); 3
/// a login is needed; 4 ssh or the controller failed (a rerun never submits twice).
///
/// Examples:
///   slurm-sync-untracked < synced.json | slurm-submit | slurm-watch > report.json
///   slurm-ssh-preflight < job.json | slurm-submit --sync | slurm-watch > report.json
///   slurm-resolve --place < job.json | slurm-ssh-preflight | slurm-sync-tracked \
///     | slurm-sync-untracked | slurm-submit --race 2 | slurm-watch > report.json
#[derive(Parser, Debug)]
#[command(name = "slurm-submit", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Submit the build job instead of the run job.
    #[arg(long)]
    build: bool,

    /// Print the document with the exact command that would run; run nothing.
    #[arg(long)]
    dry_run: bool,

    /// Race the job on N clusters: submit it here, and also to the next N-1 best clusters of the
    /// document's placement (slurm-resolve --place), each through its own whole pipeline
    /// (resolve, preflight, both syncs, submit); slurm-watch then keeps the first to start and
    /// cancels the others. Their submitted documents are kept in the state directory and named
    /// in `job.race_entrants`. A cluster whose pipeline fails is said and left out.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=8), conflicts_with_all = ["build", "dry_run", "only_failed"])]
    race: Option<u32>,

    /// Run again only the tasks of a finished sweep that did not pass, with the same snapshot:
    /// the input is the sweep's watched document (with its report); the tasks that passed keep
    /// their verdicts (`sweep_done`), and the next slurm-watch reports all of them.
    #[arg(long)]
    only_failed: bool,

    /// Sync first, in the submission's own ssh execution: what `slurm-sync-tracked |
    /// slurm-sync-untracked | slurm-submit` does, with one ssh execution instead of three, and
    /// the same sync sections written; nothing is submitted unless both syncs succeeded, and the
    /// submission's fields are checked before anything is pushed. The snapshot travels through
    /// origin. A repository with submodules or Git LFS files, or job files over 256 KiB, is
    /// synced in executions of its own first (said so).
    #[arg(long, conflicts_with_all = ["dry_run", "only_failed"])]
    sync: bool,

    /// With --sync: seconds to wait while another sync into the same remote clone holds its
    /// lock (as slurm-sync-tracked's --lock-wait; default 600); after that, exit 4 naming the
    /// holder, and nothing is submitted.
    #[arg(long, value_name = "SECONDS", requires = "sync")]
    lock_wait: Option<u64>,

    /// How many finished jobs' code trees to keep (besides those of jobs still pending or
    /// running, which are never removed). Older ones are removed at each submission.
    #[arg(long, default_value_t = 10, value_name = "N")]
    keep_trees: u32,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["job", "build", "sync_tracked", "sync_untracked"];

    fn reads() -> Vec<&'static str> {
        let mut r = Input::reads();
        for f in race::RaceInput::reads() {
            if !r.contains(&f) {
                r.push(f);
            }
        }
        r
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-submit", submit)
}

/// What is sent and run for one submission.
struct Plan {
    kind: JobKind,
    recipe: Option<Recipe>,
    argv: Vec<String>,
    /// Words after the argv (the script and its arguments).
    tail: Vec<String>,
    /// Where the tar is extracted, and what goes in it.
    upload_dir: String,
    items: Vec<Item>,
    stdout_path: String,
    stderr_path: String,
    tmux_session: Option<String>,
    wrapper: Option<String>,
    /// On Apptainer: the job's container launcher.
    launcher: Option<String>,
    state_dir: String,
    /// The unique tag in the job's --comment (and the names of its files).
    token: String,
    tree: Trees,
    /// A sweep: its tasks (the array's last index is checked against MaxArraySize).
    sweep: Option<shared::slurm::sweep::Plan>,
    /// `--dependency`, from `after`.
    dependency: Option<String>,
}

shared::document_input! {
    /// What slurm-submit reads (after --only-failed made the document ready).
    struct Input {
        settings: shared::slurm::SettingsInput = part,
        recipe: Option<String> = string,
        command: Option<String> = string,
        script_path: Option<String> = string,
        script_name: Option<String> = string,
        extra_files: Option<Vec<String>> = strings,
        sweep: Option<schema::Sweep> = section,
        after: Option<schema::Mounts> = section,
        /// A watched build job and its verdict, before the run job.
        job: Option<Job> = section,
        report: Option<Report> = section,
        build_project: Option<bool> = flag,
        build_command: Option<String> = string,
        device_type: Option<String> = string,
        /// Where --build looks for TensorRT-LLM's build script.
        repo_root: Option<String> = string,
        connection: shared::remote::ssh::Connection = part,
    }
}

shared::document_input! {
    /// What slurm-submit reads once --sync has run: the clone and the snapshot it decided.
    struct Placed {
        layout: shared::remote::layout::LayoutInput = part,
        sync_tracked: Option<schema::SyncTracked> = section,
    }
}

shared::document_input! {
    /// What --only-failed reads: the watched sweep.
    struct OnlyFailed {
        sweep: Option<schema::Sweep> = section,
        report: Option<Report> = section,
        sweep_done: Option<Vec<schema::TaskReport>> = section,
    }
}

/// The input, read once, and where the clone is, read once the (optional) sync ran.
struct Given {
    input: Input,
    placed: Placed,
}

fn submit(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    if cli.only_failed && !only_failed(ctx)? {
        return Ok(Outcome::Done);
    }
    let input = Input::read(&ctx.doc)?;
    // --race: the document as read, for the other entrants' pipelines.
    let race = cli.race.map(|_| race::Race::of(&ctx.doc)).transpose()?;
    if let Some(status) = failed_build(&input) {
        ctx.note(format!("the build job ended {status}; not submitting the run job (document passed on unchanged)"));
        return Ok(Outcome::JobNotPassed);
    }
    let mut st = Settings::from_input(&input.settings)?;
    // The input as read (secrets taken out): the record's key, and the document saved with it.
    let input_line = ctx.doc.to_line();
    // A dry run reaches nothing (and --sync is not one).
    let ssh = if cli.dry_run {
        None
    } else {
        Some(Ssh::connect(&input.connection)?)
    };
    // --sync: the snapshot made (nothing pushed yet), or both syncs done already.
    let ready = match (&ssh, cli.sync) {
        (Some(ssh), true) => sync_first(cli, ctx, &input, ssh)?,
        _ => None,
    };
    let given = Given {
        placed: Placed::read(&ctx.doc)?,
        input,
    };
    let repo = Layout::of(&given.placed.layout).repo_path_req()?.path;
    let synced = match &ready {
        Some(r) => Some(r.synced().clone()),
        None => given.placed.sync_tracked.clone(),
    };
    let journal = if cli.dry_run {
        None
    } else if cli.sync {
        // The same input with other code is another submission.
        let commit = synced.as_ref().map_or("", |t| t.commit.as_str());
        open_journal(ctx, cli.build, &format!("{input_line}\nsynced {commit}"))
    } else {
        open_journal(ctx, cli.build, &input_line)
    };
    let token = journal
        .as_ref()
        .map_or_else(new_token, |entry| entry.tag.clone());
    let build_skipped = cli.build && no_build_reason(ctx, &given.input)?.is_some();
    // On pyxis, a registry image is imported once per digest on the login node; the job runs
    // the file (see shared/src/remote/sh/pyxis-import.sh).
    let container_use = match &ssh {
        Some(ssh) if !build_skipped => shared::slurm::container::pyxis_cache(
            ctx,
            ssh,
            &mut st,
            &token,
            "the job starts",
            "nothing was submitted",
        )?,
        _ => None,
    };
    let Some(plan) = make_plan(ctx, cli, &given, &st, &repo, &token, synced.as_ref())? else {
        return Ok(Outcome::Done);
    };
    // Built before anything is recorded or sent, so a value that cannot be quoted stops here.
    let resumed = journal.as_ref().is_some_and(|e| e.resumed);
    let host = ssh.as_ref().map(|s| s.host.clone()).unwrap_or_default();
    let ask = SubmitAsk {
        plan: &plan,
        repo: &repo,
        thorough: resumed,
        host: &host,
    };
    let script = Submission::script(&ask)?;
    let mut section = job_section(&st, &plan, &repo, &token, container_use)?;
    let command = section.command.clone().unwrap_or_default();
    if cli.dry_run {
        return Ok(dry_run(ctx, section, &plan, &script, &given.input));
    }
    let ssh = ssh.expect("not a dry run");
    ctx.note(format!(
        "submitting the {} job: {command}",
        plan.kind.name()
    ));
    shared::support::testhook::pause("submit:before");
    if let Some(entry) = &journal {
        record_input(ctx, entry, &input_line, cli.build);
    }
    let (job_id, said) = match ready {
        Some(ready) => submit_synced(ctx, &ssh, &ask, script, ready)?,
        None => submit_once(ctx, &ssh, ask)?,
    };
    let trees_kb = tree_notes(ctx, &plan.tree, &said);
    shared::support::testhook::pause("submit:accepted");
    if let Some(entry) = journal {
        ctx.after_written(move || entry.finish());
    }
    note_accepted(ctx, &plan, &job_id);
    fill_accepted(&mut section, &plan, &token, job_id, trees_kb);
    if let (Some(n), Some(race)) = (cli.race, &race) {
        let files = race::enter(ctx, n, race, &token);
        section.race_entrants = (!files.is_empty()).then_some(files);
    }
    keep_build_record(&mut ctx.doc, &given.input);
    let id = section.job_id.clone().unwrap_or_default();
    ctx.doc.set_section("job", &section);
    shared::state::ledger::record_submission(ctx, plan.kind.name(), &id);
    Ok(Outcome::Done)
}

/// --dry-run: the job section with the exact script and paths; nothing sent.
fn dry_run(
    ctx: &mut Context,
    mut section: Job,
    plan: &Plan,
    script: &Script,
    input: &Input,
) -> Outcome {
    let command = section.command.clone().unwrap_or_default();
    section.dry_run = Some(true);
    section.stdout_path = Some(plan.stdout_path.clone());
    section.stderr_path = Some(plan.stderr_path.clone());
    section.remote_script = Some(script.as_str().to_string());
    ctx.note(format!("dry run: would run on the cluster: {command}"));
    keep_build_record(&mut ctx.doc, input);
    ctx.doc.set_section("job", &section);
    Outcome::Done
}

/// The build plan (None: nothing to build, said and recorded as a skipped build job) or the run
/// plan.
fn make_plan(
    ctx: &mut Context,
    cli: &Cli,
    given: &Given,
    st: &Settings,
    repo: &str,
    token: &str,
    synced: Option<&shared::contract::schema::SyncTracked>,
) -> Result<Option<Plan>> {
    let layout = &given.placed.layout;
    if !cli.build {
        let trees = Trees::of(layout, repo, token, cli.keep_trees, synced)?;
        return run_plan(ctx, given, st, repo, token, trees).map(Some);
    }
    if let Some(reason) = no_build_reason(ctx, &given.input)? {
        ctx.note(format!("no build job: {reason}"));
        ctx.doc.set_section(
            "job",
            &Job {
                kind: JobKind::Build,
                skipped: Some(true),
                reason: Some(reason),
                ..Job::default()
            },
        );
        return Ok(None);
    }
    let trees = Trees::of(layout, repo, token, cli.keep_trees, synced)?;
    build_plan(given, st, token, trees).map(Some)
}

/// The `job` section as far as it is known before the submission.
fn job_section(
    st: &Settings,
    plan: &Plan,
    repo: &str,
    token: &str,
    container_use: Option<shared::contract::schema::ContainerUse>,
) -> Result<Job> {
    let full_argv = [plan.argv.clone(), plan.tail.clone()].concat();
    let command = render_argv(&full_argv);
    let uploads: Vec<String> = plan
        .items
        .iter()
        .map(|i| String::from_utf8_lossy(i.name.as_bytes()).into_owned())
        .collect();

    Ok(Job {
        kind: plan.kind,
        recipe: plan.recipe,
        command: Some(command.clone()),
        argv: Some(full_argv),
        submit_tag: Some(token.to_string()),
        tmux_session: plan.tmux_session.clone(),
        remote_repo_path: Some(repo.to_string()),
        upload_dir: Some(plan.upload_dir.clone()),
        uploads: Some(uploads),
        container_image: st.container_ref.clone(),
        container_runtime: st.container_runtime.map(|r| r.name().to_string()),
        image_cache: (st.on_apptainer()
            || container_use.as_ref().is_some_and(|u| u.file.is_some()))
        .then(|| shared::slurm::container::image_cache(&st.places))
        .transpose()?,
        container_use,
        container_launcher: plan.launcher.clone(),
        // pyxis names the container, so slurm-attach can join it.
        container_name: (plan.kind == JobKind::Run
            && st.container_runtime == Some(shared::slurm::container::Runtime::Pyxis))
        .then(|| token.to_string()),
        sweep_tasks: plan.sweep.as_ref().map(|p| {
            p.running()
                .into_iter()
                .map(|t| shared::contract::schema::SweepTask {
                    index: t.index,
                    params: t.params_map(),
                })
                .collect()
        }),
        array: plan.sweep.as_ref().map(|p| p.array_spec()),
        dependency: plan.dependency.clone(),
        ..Job::default()
    })
}

/// The submission record written before anything is sent: a rerun finds the job instead of
/// submitting it again.
fn record_input(
    ctx: &mut Context,
    entry: &shared::state::journal::Entry,
    input: &str,
    build: bool,
) {
    match entry.record(input.as_bytes()) {
        Ok(()) => ctx.note(format!(
            "if this is interrupted, `slurm-submit{} {}` finds the job instead of submitting it again",
            if build { " --build" } else { "" },
            entry.input_path().display()
        )),
        Err(e) => ctx.warn(format!("could not write the submission record {} ({e}); if this run is interrupted, a rerun cannot tell whether it submitted", entry.path().display())),
    }
}

fn note_accepted(ctx: &mut Context, plan: &Plan, job_id: &str) {
    let out = plan.stdout_path.replace("%j", job_id).replace("%A", job_id);
    match &plan.sweep {
        Some(p) => ctx.note(format!(
            "sweep accepted: job array {job_id}, {} tasks ({}); logs: {out} (%a: the task's index)",
            p.tasks.len(),
            p.array_spec()
        )),
        None => ctx.note(format!("job {job_id} accepted; logs: {out}")),
    }
}

/// What Slurm's acceptance adds to the `job` section.
fn fill_accepted(
    section: &mut Job,
    plan: &Plan,
    token: &str,
    job_id: String,
    trees_kb: Option<u64>,
) {
    section.stdout_path = Some(
        plan.stdout_path
            .replace("%j", &job_id)
            .replace("%A", &job_id),
    );
    section.stderr_path = Some(
        plan.stderr_path
            .replace("%j", &job_id)
            .replace("%A", &job_id),
    );
    section.job_id = Some(job_id);
    section.submitted_at = Some(shared::support::clock::unix_now());
    section.state_dir = Some(plan.state_dir.clone());
    section.tree = Some(plan.tree.job.clone());
    section.trees_disk_kb = trees_kb;
    section.tree_commit = (!plan.tree.commit.is_empty()).then(|| plan.tree.commit.clone());
    // A sweep's tasks end one by one: slurm-watch follows them in squeue and sacct.
    section.end_marker = plan
        .recipe
        .filter(|_| plan.sweep.is_none())
        .map(|recipe| end_marker(&plan.state_dir, token, recipe));
}

/// The file that appears when the job's command has ended, for slurm-watch: the batch script's
/// EXIT trap writes it; for the srun recipes it is the exit file tmux's wrapper writes when srun
/// returns.
fn end_marker(state_dir: &str, token: &str, recipe: Recipe) -> String {
    if recipe == Recipe::Batch {
        join(state_dir, &format!("{token}.end"))
    } else {
        srun_exit_file(state_dir, token)
    }
}

/// Where the tmux wrapper of an srun recipe writes srun's exit code.
fn srun_exit_file(state_dir: &str, token: &str) -> String {
    join(state_dir, &format!("{token}.srun-exit"))
}

/// A watched build job that did not pass: its status.
fn failed_build(input: &Input) -> Option<Status> {
    let job = input.job.as_ref()?;
    if job.kind != JobKind::Build || job.skipped == Some(true) {
        return None;
    }
    input
        .report
        .as_ref()
        .map(|r| r.status)
        .filter(|s| *s != Status::Passed)
}

/// Before a run job replaces `job`, a watched build job and its report move to `build`.
fn keep_build_record(doc: &mut shared::Document, input: &Input) {
    let Some(job) = input.job.clone() else {
        return;
    };
    if job.kind != JobKind::Build {
        return;
    }
    let report = input.report.clone();
    let had_report = report.is_some();
    doc.set_section("build", &schema::Build { job, report });
    if had_report {
        doc.remove("report");
    }
}

/// The submission record for this input (see shared::state::journal): a rerun of an interrupted
/// submission gets the tag it used, so the job Slurm already has is found, not submitted again.
fn open_journal(ctx: &Context, build: bool, input: &str) -> Option<shared::state::journal::Entry> {
    let Some(dir) = shared::state::journal::state_dir() else {
        ctx.warn("neither SLURM_TOOLS_STATE_DIR, XDG_STATE_HOME nor HOME is set: no submission record is kept, so a rerun after an interruption cannot tell whether this run submitted");
        return None;
    };
    let kind = if build { "build" } else { "run" };
    let key = format!("slurm-submit {kind}\n{input}");
    match shared::state::journal::begin(&dir, key.as_bytes(), new_token) {
        Ok(entry) => {
            if entry.resumed {
                ctx.note(format!(
                    "an earlier slurm-submit on this same input did not finish (interrupted, or failed after sending); Slurm is asked for its job (tag {}) first, and the job is submitted only if Slurm does not have it",
                    entry.tag
                ));
            }
            Some(entry)
        }
        Err(e) => {
            ctx.warn(format!("cannot read the submission records in {} ({e}); a rerun after an interruption cannot tell whether this run submitted", dir.display()));
            None
        }
    }
}

/// TensorRT-LLM's build script, relative to the repository: a repository that carries it builds
/// with it when the document names no `build_command`.
const TRTLLM_BUILD_SCRIPT: &str = "scripts/build_wheel.py";

/// Why `--build` submits nothing, or `None` when a build was asked for: `build_project: false`;
/// or no `build_command` and no TensorRT-LLM build script in the repository (a build is never
/// assumed). `build_project: true` with nothing to build with is an error naming the field.
fn no_build_reason(ctx: &Context, input: &Input) -> Result<Option<String>> {
    let asked = input.build_project;
    if asked == Some(false) {
        return Ok(Some("build_project is false".into()));
    }
    if input.build_command.is_some() {
        return Ok(None);
    }
    let script = shared::repo::git::LocalRepo::open(input.repo_root.as_deref())
        .ok()
        .map(|r| r.root.join(TRTLLM_BUILD_SCRIPT))
        .filter(|p| p.is_file());
    match (script, asked) {
        (Some(p), _) => {
            ctx.note(format!(
                "the repository carries TensorRT-LLM's build script ({}): the build job runs it (set `build_command` to build another way, or `build_project: false` to skip the build)",
                p.display()
            ));
            Ok(None)
        }
        (None, Some(true)) => Err(shared::contract::doc::field_error(
            "build_project",
            "is true, but there is nothing to build with: no `build_command`, and the repository has no scripts/build_wheel.py",
        )
        .with_hint("set `build_command` to the shell text that builds your project (it runs in the job's code tree)")),
        (None, _) => Ok(Some(
            "none asked for: no `build_command`, and the repository has no TensorRT-LLM build script".into(),
        )),
    }
}

/// --only-failed: the document made ready to run again the sweep's tasks that did not pass
/// (`sweep.only`), keeping the others' rows in `sweep_done`. False when every task passed
/// (nothing to run; the document passes on unchanged).
fn only_failed(ctx: &mut Context) -> Result<bool> {
    let hint = "give the document slurm-watch wrote for the sweep (e.g. `slurm-submit --only-failed report.json`)";
    let input = OnlyFailed::read(&ctx.doc)?;
    let sweep = input.sweep.ok_or_else(|| {
        shared::contract::doc::missing(
            "sweep",
            &format!("--only-failed reruns a sweep's tasks; {hint}"),
        )
    })?;
    let rows = input.report.and_then(|r| r.tasks).ok_or_else(|| {
        shared::contract::doc::missing(
            "report",
            &format!("--only-failed needs the sweep's verdicts per task; {hint}"),
        )
    })?;
    let (passed, failed): (Vec<_>, Vec<_>) =
        rows.into_iter().partition(|r| r.status == Status::Passed);
    if failed.is_empty() {
        ctx.note(format!(
            "every task of the sweep passed ({}): nothing to run again",
            passed.len()
        ));
        return Ok(false);
    }
    let only: Vec<u32> = failed.iter().map(|r| r.index).collect();
    ctx.note(format!(
        "running again the {} task(s) that did not pass ({}), with the same snapshot; {} passed task(s) keep their verdicts",
        only.len(),
        failed.iter().map(|r| format!("{} {}", r.index, r.status)).collect::<Vec<_>>().join(", "),
        passed.len()
    ));
    let mut done = input.sweep_done.unwrap_or_default();
    done.retain(|d| !passed.iter().any(|p| p.index == d.index) && !only.contains(&d.index));
    done.extend(passed);
    done.sort_by_key(|r| r.index);
    ctx.doc.set_section(
        "sweep",
        &shared::contract::schema::Sweep {
            only: Some(only),
            ..sweep
        },
    );
    ctx.doc.set_section("sweep_done", &done);
    for section in ["job", "report", "forensics"] {
        ctx.doc.remove(section);
    }
    Ok(true)
}

/// `after`: the jobs this run waits for, as `--dependency` (a saved document gives its
/// `job.job_id`).
fn after(input: &Input) -> Result<Option<String>> {
    let Some(after) = input.after.clone() else {
        return Ok(None);
    };
    let entries = match after {
        shared::contract::schema::Mounts::Joined(one) => vec![one],
        shared::contract::schema::Mounts::List(list) => list,
    };
    shared::slurm::sweep::dependency(&entries, |path| {
        let bad = |what: String| {
            shared::contract::doc::field_error("after", &format!("names {}, {what}", shared::remote::quote::preview(path)))
                .with_hint("give a job id (digits, or ID_INDEX for an array task) or a job document saved from slurm-submit's output (e.g. `slurm-submit < a.json > a.submitted.json`)")
        };
        let text = std::fs::read(path).map_err(|e| {
            bad(format!(
                "which is not a job id and cannot be read as a document ({e})"
            ))
        })?;
        let saved: shared::contract::schema::JobDocument = serde_json::from_slice(&text)
            .map_err(|e| bad(format!("which is not a job document ({e})")))?;
        saved
            .job
            .and_then(|j| j.job_id)
            .ok_or_else(|| bad("a document without `job.job_id` (was it submitted?)".to_string()))
    })
}

fn new_token() -> String {
    shared::state::journal::unique_tag("slurm-tools")
}

fn local_file(field: &str, path: &str) -> Result<std::path::PathBuf> {
    let p = Path::new(path);
    if !p.is_file() {
        return Err(shared::contract::doc::field_error(
            field,
            &format!("names {path:?}, which is not a readable file here"),
        )
        .with_hint(format!(
            "fix `{field}` (a path on this machine; relative paths are from the current directory)"
        )));
    }
    Ok(p.to_path_buf())
}

fn run_plan(
    ctx: &mut Context,
    given: &Given,
    st: &Settings,
    repo: &str,
    token: &str,
    tree: Trees,
) -> Result<Plan> {
    let input = &given.input;
    let recipe = recipe_of(ctx, input)?;
    let layout = Layout::of(&given.placed.layout);
    let work = layout.work_dir(repo)?.path;
    let state_dir = join(&work, ".slurm-tools");
    let mut items = Vec::new();
    let command = job_files(input, &work, &mut items)?;
    let sweep = match &input.sweep {
        Some(sw) => Some(shared::slurm::sweep::plan(sw)?),
        None => None,
    };
    let dependency = after(input)?;
    let (stdout_path, stderr_path) = log_paths(st, &work, sweep.is_some());
    let cmd_name = format!(".slurm-tools/{token}.cmd.sh");
    let cmd = command_text(recipe, st, &command, &state_dir, token, sweep.as_ref())?;
    items.push(Item::bytes(cmd_name.clone(), cmd, true));
    let cmd_path = join(&work, &cmd_name);
    // In a container, the job's code and files must be there at the same paths.
    st.check_container_sees(
        layout.home(),
        &[
            ("the job's code tree", tree.job.as_str()),
            ("the job's work dir", work.as_str()),
        ],
    )?;
    let (argv, step) = job_argv(
        recipe,
        st,
        token,
        &tree.job,
        (&stdout_path, &stderr_path),
        sweep.as_ref(),
        dependency.as_deref(),
    );
    // On Apptainer every task runs the command through the launcher (the image cache, then
    // `apptainer exec`), in the job's own tree.
    let launcher = launcher_item(st, &tree, token, &work, &mut items)?;
    // A sweep of an srun recipe: each task's batch script runs the recipe's step.
    let array_script = match step {
        Some(step) => Some(array_item(
            &step,
            launcher.as_deref(),
            &cmd_path,
            token,
            &work,
            &mut items,
        )?),
        None => None,
    };
    let (tail, tmux_session, wrapper) = if recipe == Recipe::Batch || array_script.is_some() {
        let tail = match (array_script, &launcher) {
            (Some(a), _) => vec![a],
            (None, Some(l)) => vec![l.clone(), "bash".to_string(), cmd_path],
            (None, None) => vec![cmd_path],
        };
        (tail, None, None)
    } else {
        let tail = match &launcher {
            Some(l) => ["/bin/sh", l, "bash", &cmd_path].map(String::from).to_vec(),
            None => vec!["bash".to_string(), cmd_path],
        };
        // srun runs in tmux on the login node, writing its own exit code and messages to files.
        let w = tmux_wrapper(&argv, &tail, &tree.job, &state_dir, token)?;
        let wrapper_name = format!(".slurm-tools/{token}.run.sh");
        items.push(Item::bytes(wrapper_name.clone(), w.into_string(), true));
        let wrapper = join(&work, &wrapper_name);
        (tail, Some(token.to_string()), Some(wrapper))
    };
    Ok(Plan {
        kind: JobKind::Run,
        recipe: Some(recipe),
        argv,
        tail,
        upload_dir: work,
        items,
        stdout_path,
        stderr_path,
        tmux_session,
        wrapper,
        launcher,
        state_dir,
        token: token.to_string(),
        tree,
        sweep,
        dependency,
    })
}

/// The job's command file: the recipe around the command, writing the job id and the end
/// marker into the state directory.
fn command_text(
    recipe: Recipe,
    st: &Settings,
    command: &str,
    state_dir: &str,
    token: &str,
    sweep: Option<&shared::slurm::sweep::Plan>,
) -> Result<String> {
    recipe::command_file(
        recipe,
        st,
        command,
        &join(state_dir, &format!("{token}.jobid")),
        &end_marker(state_dir, token, recipe),
        sweep,
    )
}

/// sbatch's or srun's command line for the run job (and a sweep's per-task step): the job runs
/// in its own tree, so no later sync changes the code it was submitted with.
fn job_argv(
    recipe: Recipe,
    st: &Settings,
    token: &str,
    tree: &str,
    logs: (&str, &str),
    sweep: Option<&shared::slurm::sweep::Plan>,
    dependency: Option<&str>,
) -> (Vec<String>, Option<Vec<String>>) {
    let (mut argv, mut step) = match sweep {
        Some(p) => recipe::array_argv(recipe, st, token, tree, logs, &p.array_spec()),
        None => (
            recipe::run_argv(recipe, st, token, tree, logs.0, logs.1),
            None,
        ),
    };
    if let Some(d) = dependency {
        argv.push(format!("--dependency={d}"));
    }
    if st.container_runtime == Some(shared::slurm::container::Runtime::Pyxis) {
        // Named, so slurm-attach can join the running container (pyxis removes it when the
        // job ends, with its default container_scope=job).
        step.as_mut()
            .unwrap_or(&mut argv)
            .push(format!("--container-name={token}"));
    }
    (argv, step)
}

/// The job's stdout and stderr files in `work`, named after the job (a sweep's tasks each have
/// their own: %A the array's id, %a the task's index).
fn log_paths(st: &Settings, work: &str, sweep: bool) -> (String, String) {
    let leaf = st
        .job_name
        .as_deref()
        .map(|n| layout::sanitize(n, true))
        .unwrap_or_else(|| "job".into());
    let id_in_name = if sweep { "%A_%a" } else { "%j" };
    (
        join(work, &format!("{leaf}-{id_in_name}.out")),
        join(work, &format!("{leaf}-{id_in_name}.err")),
    )
}

/// The run job's recipe (single when none is given); mpi needs PMIx where preflight saw srun.
fn recipe_of(ctx: &mut Context, input: &Input) -> Result<Recipe> {
    let recipe = match &input.recipe {
        Some(r) => Recipe::parse(r)?,
        None => {
            ctx.note("no `recipe`: using single (one node, one task)");
            Recipe::Single
        }
    };
    if recipe == Recipe::Mpi {
        if let Some(p) = &input.connection.preflight {
            p.remote
                .require_pmix("recipe", "field `recipe` is \"mpi\", which")?;
        }
    }
    Ok(recipe)
}

/// The job's own files to upload into `work` (its script, `extra_files`), and its command.
fn job_files(input: &Input, work: &str, items: &mut Vec<Item>) -> Result<String> {
    // The uploaded job script, if any.
    let script = match &input.script_path {
        Some(p) => {
            let local = local_file("script_path", p)?;
            let name = match &input.script_name {
                Some(n) => n.clone(),
                None => layout::basename(p).unwrap_or_else(|| "job.sh".into()),
            };
            if name.contains('/') || name.starts_with('.') || name.starts_with('-') {
                return Err(shared::contract::doc::field_error(
                    "script_name",
                    &format!("is {name:?}; give a plain file name"),
                ));
            }
            items.push(Item::file(local, name.clone()));
            Some(join(work, &name))
        }
        None => None,
    };
    for f in input.extra_files.clone().unwrap_or_default() {
        let local = local_file("extra_files", &f)?;
        let name = layout::basename(&f).ok_or_else(|| {
            shared::contract::doc::field_error(
                "extra_files",
                &format!("has {f:?}, which has no file name"),
            )
        })?;
        items.push(Item::file(local, name));
    }
    let command = match (&input.command, &script) {
        (Some(c), _) => c.clone(),
        (None, Some(s)) => format!("bash {}", quote(s)?),
        (None, None) => return Err(shared::contract::doc::missing(
            "command",
            "set `command` (what the job runs, shell text run exactly as written) or `script_path`",
        )),
    };
    if command.contains('\0') {
        return Err(shared::contract::doc::field_error(
            "command",
            "contains a NUL byte",
        ));
    }
    Ok(command)
}

/// On Apptainer every task runs the command through the launcher (the image cache, then
/// `apptainer exec`), in the job's own tree: its path once uploaded.
fn launcher_item(
    st: &Settings,
    tree: &Trees,
    token: &str,
    work: &str,
    items: &mut Vec<Item>,
) -> Result<Option<String>> {
    Ok(
        match st.apptainer_launcher(
            &tree.job,
            &shared::slurm::container::image_cache(&st.places)?,
            None,
            None,
            None,
        )? {
            Some(text) => {
                let name = format!(".slurm-tools/{token}.container.sh");
                items.push(Item::bytes(name.clone(), text, true));
                Some(join(work, &name))
            }
            None => None,
        },
    )
}

/// A sweep of an srun recipe: each task's batch script runs the recipe's step; its path once
/// uploaded.
fn array_item(
    step: &[String],
    launcher: Option<&str>,
    cmd_path: &str,
    token: &str,
    work: &str,
    items: &mut Vec<Item>,
) -> Result<String> {
    let mut w = Script::new();
    w.raw(
        "#!/bin/sh\n# Written by slurm-submit: one task of a sweep runs the recipe's step.\nexec",
    );
    for word in step {
        w.arg(word)?;
    }
    if let Some(l) = launcher {
        w.arg("/bin/sh")?.arg(l)?;
    }
    w.arg("bash")?.arg(cmd_path)?.raw("\n");
    let name = format!(".slurm-tools/{token}.array.sh");
    items.push(Item::bytes(name.clone(), w.into_string(), true));
    Ok(join(work, &name))
}

/// The script tmux holds on the login node: srun in the job's own tree, its exit code and
/// messages written to files.
fn tmux_wrapper(
    argv: &[String],
    tail: &[String],
    tree: &str,
    state_dir: &str,
    token: &str,
) -> Result<Script> {
    let exit_file = srun_exit_file(state_dir, token);
    let srun_log = join(state_dir, &format!("{token}.srun.log"));
    let mut w = Script::new();
    w.raw("#!/bin/sh\n# Written by slurm-submit: holds the srun of one job in tmux.\ncd --")
        .arg(tree)?;
    w.raw(" || { echo 126 >")
        .arg(&exit_file)?
        .raw("; exit 0; }\n");
    for word in argv.iter().chain(tail.iter()) {
        w.arg(word)?;
    }
    w.raw(" >/dev/null 2>")
        .arg(&srun_log)?
        .raw("\necho \"$?\" >")
        .arg(&exit_file)?
        .raw("\n");
    Ok(w)
}

fn build_plan(given: &Given, st: &Settings, token: &str, tree: Trees) -> Result<Plan> {
    let root = Layout::of(&given.placed.layout).root()?.ok_or_else(|| {
        shared::contract::doc::missing(
            "default_user_root_dir",
            "set `default_user_root_dir` (slurm-resolve derives it) or `remote_cwd`",
        )
    })?;
    layout::check_log_dir("default_user_root_dir (or remote_cwd)", &root)?;
    let scripts = join(&root, "slurm-tools-build");
    let log = join(&scripts, "log/build_%j.srun.log");
    // pyxis's image goes to srun's flags; on Apptainer a launcher runs the build in it.
    let image = match (&st.container_ref, st.on_apptainer()) {
        (Some(i), false) => i.clone(),
        _ => "none".to_string(),
    };
    let mut items = vec![
        Item::bytes("build.slurm", BUILD_SLURM, true),
        Item::bytes("build.sh", BUILD_SH, true),
    ];
    let launcher = st.apptainer_launcher(
        &root,
        &shared::slurm::container::image_cache(&st.places)?,
        Some(&format!("{root}:{root}")),
        None,
        None,
    )?;
    let mut tail = vec![
        join(&scripts, "build.slurm"),
        image,
        root.clone(),
        scripts.clone(),
        // The build builds in the branch's warm tree, brought to this job's own tree when it
        // starts (unchanged files keep their mtimes, so outputs from the last build stay valid).
        tree.warm.clone(),
    ];
    if let Some(m) = &st.mounts {
        tail.extend(["--mounts".to_string(), m.clone()]);
    }
    if let Some(text) = launcher {
        let name = format!("build-container-{token}.sh");
        items.push(Item::bytes(name.clone(), text, true));
        tail.extend(["--launcher".to_string(), join(&scripts, &name)]);
    }
    tail.extend([
        "--sync-from".to_string(),
        tree.job.clone(),
        tree.commit.clone(),
    ]);
    match &given.input.build_command {
        Some(c) => {
            let name = format!("build-command-{token}.sh");
            items.push(Item::bytes(
                name.clone(),
                format!("#!/bin/bash\n{c}\n"),
                true,
            ));
            tail.push("--command-file".into());
            tail.push(join(&scripts, &name));
        }
        None => {
            tail.push("-a".into());
            tail.push(shared::slurm::cuda_arch(given.input.device_type.as_deref()).into());
            tail.push("--nvtx".into());
        }
    }
    let argv = recipe::build_argv(st, token, &tree.job, &log);
    Ok(Plan {
        kind: JobKind::Build,
        recipe: None,
        argv,
        tail,
        upload_dir: scripts.clone(),
        items,
        stdout_path: log.clone(),
        stderr_path: log,
        tmux_session: None,
        wrapper: None,
        launcher: None,
        state_dir: join(&scripts, "log"),
        token: token.to_string(),
        tree,
        sweep: None,
        dependency: None,
    })
}

/// One submission per tag at a time, held until the script exits; a lock whose owner died on
/// this login node, or older than ten minutes (an owner on another login node), is broken.
/// Waits two minutes at most.
fn tag_lock<'a>(state_dir: &str, token: &'a str) -> shared::remote::Lock<'a> {
    shared::remote::Lock {
        dir: join(state_dir, &format!("{token}.lock.d")),
        token,
        wait_secs: 120,
        stale_minutes: 10,
        by_pid: true,
        exit_wait: Exit::LockTimeout.code(),
        exit_failed: Exit::LockFailed.code(),
    }
}

/// Upload, then submit and learn the job id, in one script. The script is idempotent per tag:
/// under a lock on the tag it first looks for a job Slurm already has with it (an earlier attempt
/// whose answer was lost, or the run a rerun resumes) and only submits when there is none. A
/// fresh tag can only be in the job id file (written under the same lock by a concurrent run on
/// the same input), so squeue is asked only when `thorough` (a retry or a resumed run).
fn remote_script(plan: &Plan, repo: &str, thorough: bool) -> Result<Script> {
    let token = plan.token.as_str();
    let mut s = Script::new();
    s.raw("set -u\n");
    shared::remote::exit::assign::<Exit>(&mut s)?;
    s.assign("dir", &plan.upload_dir)?;
    s.assign("state", &plan.state_dir)?;
    s.assign("repo", repo)?;
    s.assign("token", token)?;
    s.assign(
        "jobid_file",
        &join(&plan.state_dir, &format!("{token}.jobid")),
    )?;
    s.assign("thorough", if thorough { "yes" } else { "no" })?;
    plan.tree.assign(&mut s, plan.kind == JobKind::Build)?;
    s.raw(shared::slurm::NAP);
    tag_lock(&plan.state_dir, token).define(&mut s)?;
    s.raw(shared::remote::SUBMIT);
    s.raw("submit_prepare\n");
    match (&plan.tmux_session, &plan.wrapper) {
        (Some(session), Some(wrapper)) => {
            // `exec /bin/sh FILE`: the same words in sh, bash, zsh, tcsh and fish (tmux runs its
            // command with the person's login shell).
            s.raw(shared::remote::TMUX);
            s.raw("submit_in_tmux");
            s.arg(session)?;
            s.arg(&srun_exit_file(&plan.state_dir, token))?;
            s.arg(&join(&plan.state_dir, &format!("{token}.srun.log")))?;
            s.arg(&format!("exec /bin/sh {}", quote(wrapper)?))?;
            s.raw("\n");
        }
        _ => {
            if let Some(p) = &plan.sweep {
                let last = p.running().last().map_or(0, |t| t.index);
                s.assign("array_last", &last.to_string())?;
                s.raw(shared::remote::ARRAY_SIZE);
            }
            s.raw("submit_batch");
            for w in plan.argv.iter().chain(plan.tail.iter()) {
                s.arg(w)?;
            }
            s.raw("\n");
        }
    }
    Ok(s)
}

fn job_id_of(text: &str) -> Option<String> {
    shared::remote::Tagged::of(text)
        .first("JOBID")
        .map(|id| id.trim().to_string())
        .filter(|id| shared::slurm::is_job_id(id))
}

/// What the submission is given: its plan, the clone's path, whether it first looks in squeue
/// for a job with its tag (a retry, a resumed run), and the host, for what a failure names.
struct SubmitAsk<'a> {
    plan: &'a Plan,
    repo: &'a str,
    thorough: bool,
    host: &'a str,
}

/// Slurm took the job: its id, all the script said, and whether Slurm had it already (the
/// tag found: not submitted again).
#[derive(Debug)]
struct Accepted {
    job_id: String,
    said: String,
    resumed: bool,
}

/// The submission (submit.sh under the tag's lock, the job's files on stdin): one execution, or
/// the last part of the fused one after --sync.
struct Submission<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> shared::remote::Operation for Submission<'a> {
    type Params = SubmitAsk<'a>;
    type Reply = Accepted;
    const DEADLINE: Duration = Duration::from_secs(180);

    fn script(a: &SubmitAsk<'a>) -> Result<Script> {
        remote_script(a.plan, a.repo, a.thorough)
    }

    /// The job id, or the error the script's exit means.
    fn reply(a: &SubmitAsk<'a>, out: &shared::support::process::Output) -> Result<Accepted> {
        let text = out.stdout_text();
        match (out.success(), job_id_of(&text)) {
            (true, Some(job_id)) => Ok(Accepted {
                job_id,
                resumed: text.lines().any(|l| l == "RESUMED"),
                said: text,
            }),
            _ => Err(failure(out, a.plan, a.host)),
        }
    }
}

/// The job's files, as the tar stream the submission reads on its stdin.
fn payload(plan: &Plan) -> shared::support::process::StreamWriter {
    let items = plan.items.clone();
    let stats = Arc::new(Mutex::new(Stats::default()));
    Box::new(move |w: &mut dyn std::io::Write| {
        archive::write_archive(&items, w, false, &stats, None)
    })
}

/// --sync, before the submission is planned: the snapshot made and the layout derived, nothing
/// pushed (`Some`: [`submit_synced`] pushes and runs both syncs in the submission's execution),
/// or both syncs run in executions of their own (`None`), as for a build there is nothing to
/// submit for, or a repository whose sync needs executions of its own.
fn sync_first(
    cli: &Cli,
    ctx: &mut Context,
    input: &Input,
    ssh: &Ssh,
) -> Result<Option<shared::sync::fused::Ready>> {
    let lock_wait = cli
        .lock_wait
        .unwrap_or(shared::sync::tracked::LOCK_WAIT_SECS);
    let ready = shared::sync::fused::prepare(ctx, ssh, lock_wait)?;
    let why = match (cli.build, ready.not_fusable()) {
        (true, _) if no_build_reason(ctx, input)?.is_some() => "no build job to submit",
        (_, Some(why)) => why,
        (_, None) => return Ok(Some(ready)),
    };
    ready.separately(ctx, why)?;
    Ok(None)
}

/// The job's files as one tar stream in memory, when they fit in a fused execution's stdin.
fn uploads_in_memory(plan: &Plan) -> Result<Option<Vec<u8>>> {
    let stats = Arc::new(Mutex::new(Stats::default()));
    let mut bytes = Capped(Vec::new());
    match archive::write_archive(&plan.items, &mut bytes, false, &stats, None) {
        Ok(()) => Ok(Some(bytes.0)),
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => Ok(None),
        Err(e) => Err(ToolError::bad_input(format!(
            "cannot read the job's files (script_path, extra_files): {e}"
        ))),
    }
}

/// A buffer that refuses to grow past what a fused execution's stdin takes.
struct Capped(Vec<u8>);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > shared::sync::fused::STDIN_MAX {
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// --sync: both syncs and the submission in one ssh execution (the job's files on its stdin);
/// job files too large for that: the syncs in their own executions, then the submission.
fn submit_synced(
    ctx: &mut Context,
    ssh: &Ssh,
    ask: &SubmitAsk,
    script: Script,
    ready: shared::sync::fused::Ready,
) -> Result<(String, String)> {
    let plan = ask.plan;
    let Some(uploads) = uploads_in_memory(plan)? else {
        ready.separately(ctx, "the job's files are over 256 KiB")?;
        return submit_once(ctx, ssh, SubmitAsk { ..*ask });
    };
    let fused = ready.push(ctx, ssh)?;
    let command = shared::sync::fused::Command {
        script: &script,
        stdin: Some(uploads),
        capture: true,
    };
    // A first sync clones the repository: as long as slurm-sync-tracked gives that.
    match Box::new(fused).run(ctx, ssh, command, Duration::from_secs(30 * 60)) {
        Ok(out) => accepted(ctx, ask, &out),
        Err(e) if e.kind == ErrorKind::Remote => Err(e.with_hint(format!(
            "the job may or may not have been submitted: rerun slurm-submit --sync on the same input document, it finds a job with tag {} instead of submitting again (or look: squeue -u $USER -o '%i %k' | grep {})",
            plan.token, plan.token
        ))),
        Err(e) => Err(e),
    }
}

/// The submission's answer: the job id (and all it said), or the error it means.
fn accepted(
    ctx: &Context,
    ask: &SubmitAsk,
    out: &shared::support::process::Output,
) -> Result<(String, String)> {
    let a = Submission::reply(ask, out)?;
    if a.resumed {
        ctx.note(format!(
            "Slurm already had this submission (job {}, tag {}); not submitting again",
            a.job_id, ask.plan.token
        ));
    }
    Ok((a.job_id, a.said))
}

/// Send the submission; after a lost connection, send it once more in its thorough form.
fn submit_once(ctx: &Context, ssh: &Ssh, mut ask: SubmitAsk) -> Result<(String, String)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        if attempt > 1 {
            ask.thorough = true;
        }
        match shared::remote::execute::<Submission>(ssh, &ask, Some(payload(ask.plan))) {
            Ok(out) => return accepted(ctx, &ask, &out),
            Err(e) if e.kind == ErrorKind::Remote && attempt == 1 => {
                // The request may have reached Slurm. The script looks for the tag before it
                // submits, under a lock the first attempt holds while it lives: sending it
                // again cannot submit twice.
                ctx.warn(format!("the connection failed during submission ({}); trying once more (a job Slurm already has is found by its tag, not submitted again)", e.message));
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(e) => {
                return Err(e.with_hint(format!(
                    "the job may or may not have been submitted: rerun slurm-submit on the same input document, it finds a job with tag {} instead of submitting again (or look: squeue -u $USER -o '%i %k' | grep {})",
                    ask.plan.token, ask.plan.token
                )))
            }
        }
    }
}

fn failure(out: &shared::support::process::Output, plan: &Plan, host: &str) -> ToolError {
    let token = &plan.token;
    let record = out.record();
    let e = match Exit::from_status(out.code) {
        Some(Exit::SubmitFailed | Exit::SrunExited) => shared::slurm::submission_error(&out.stderr_tail),
        Some(Exit::UploadDir | Exit::Extract) => ToolError::remote(format!("could not upload the job's files into {} on {}", plan.upload_dir, host))
            .with_hint("check that the directory is writable and the disk is not full"),
        Some(Exit::Tree) => ToolError::remote(format!("could not make the job's own code tree {} on {}", plan.tree.job, host))
            .with_hint("see git's stderr in this error: the disk may be full, or the snapshot commit missing from the clone (rerun slurm-sync-tracked)"),
        Some(Exit::NoCheckout) => ToolError::remote(format!("the remote checkout does not exist on {}", host)).with_field("remote_repo_path")
            .with_hint("run slurm-sync-tracked first"),
        Some(Exit::TmuxStart | Exit::NoTmux) => ToolError::remote(format!("could not start a tmux session on {} to hold the srun", host))
            .with_hint("check that tmux works on the login node (`tmux new -d true`), or use the batch recipe"),
        Some(Exit::LockTimeout) => ToolError::remote(format!("another submission with tag {token} held its lock on {} for two minutes", host))
            .with_hint("another slurm-submit on the same input is still submitting; wait for it, then rerun"),
        Some(Exit::LockFailed) => ToolError::remote(format!("could not create the submission's lock directory in {} on {}", plan.state_dir, host))
            .with_hint("mkdir failed there (read-only, full, or not yours): check the directory; nothing was submitted"),
        Some(Exit::ArrayTooBig) => {
            let max = out.stdout_text().lines().find_map(|l| l.strip_prefix("ARRAY_TOO_BIG ").map(str::to_string)).unwrap_or_default();
            let n = plan.sweep.as_ref().map_or(0, |p| p.tasks.len());
            ToolError::field(ErrorKind::BadInput, "sweep", format!("field `sweep` makes {n} tasks (indexes 0-{}), but the cluster's MaxArraySize is {max}: Slurm takes indexes below it", n.saturating_sub(1)))
                .with_hint(format!("split the sweep into documents of at most {max} tasks (`after` can chain them), or ask the site to raise MaxArraySize; nothing was submitted"))
        }
        Some(Exit::NoJobId) => ToolError::remote(format!("srun started in tmux session {token}, but its job did not show up in squeue within a minute"))
            .with_hint(format!("look with: squeue -u $USER -o '%i %k' | grep {token}; attach with: tmux attach -t {token}")),
        None => ToolError::remote(format!("submission on {} failed ({}) without a job id", host, shared::support::process::describe_exit(out.code))).with_hint("see the command's stderr in this error"),
    };
    e.with_command(record)
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script as it is sent, assembled from its library files (the tag lock, the job's
    /// tree, tmux, the submission), for sbatch and for srun held in tmux, first try and retry:
    /// shellcheck and four shells' `sh -n` without a cluster (a library function a script does
    /// not call must not read as unreachable code).
    #[test]
    fn the_submission_scripts_pass_the_static_checks_as_assembled() {
        let repo = "/h/u/work/repo";
        let work = "/h/u/work/repo/work_dirs/t";
        let doc = shared::Document::parse(
            format!(r#"{{"remote_repo_path":"{repo}","remote_work_dir":"{work}"}}"#).as_bytes(),
            "test",
        )
        .unwrap();
        let token = "slurm-tools-t1";
        let state_dir = join(work, ".slurm-tools");
        for tmux in [false, true] {
            let plan = Plan {
                kind: JobKind::Run,
                recipe: Some(if tmux { Recipe::Single } else { Recipe::Batch }),
                argv: vec![
                    if tmux { "srun" } else { "sbatch" }.into(),
                    "--job-name=it's".into(),
                ],
                tail: vec!["bash".into(), join(&state_dir, "t.cmd.sh")],
                upload_dir: work.into(),
                items: Vec::new(),
                stdout_path: join(work, "job-%j.out"),
                stderr_path: join(work, "job-%j.err"),
                tmux_session: tmux.then(|| token.to_string()),
                wrapper: tmux.then(|| join(&state_dir, "t.run.sh")),
                launcher: None,
                state_dir: state_dir.clone(),
                token: token.into(),
                tree: Trees::of(
                    &shared::remote::layout::LayoutInput::read(&doc).unwrap(),
                    repo,
                    token,
                    10,
                    None,
                )
                .unwrap(),
                sweep: None,
                dependency: None,
            };
            for thorough in [false, true] {
                let ask = SubmitAsk {
                    plan: &plan,
                    repo,
                    thorough,
                    host: "login1",
                };
                let s = Submission::script(&ask).unwrap();
                assert!(s.as_str().contains(if tmux {
                    "submit_in_tmux"
                } else {
                    "submit_batch"
                }));
                shared::remote::script_check::assert_clean(
                    if tmux { "submit-tmux" } else { "submit-batch" },
                    s.as_str(),
                );
                // The reply: the job id (Slurm had it already: RESUMED), or what the exit means.
                let out = |code, stdout: &str| {
                    shared::support::process::Output::of(Some(code), stdout, "")
                };
                let a = Submission::reply(&ask, &out(0, "JOBID 4242\nRESUMED\n")).unwrap();
                assert_eq!((a.job_id.as_str(), a.resumed), ("4242", true));
                let a = Submission::reply(&ask, &out(0, "JOBID 17\n")).unwrap();
                assert_eq!((a.job_id.as_str(), a.resumed), ("17", false));
                let e = Submission::reply(&ask, &out(0, "nothing\n")).unwrap_err();
                assert_eq!(
                    e.message,
                    "submission on login1 failed (exit 0) without a job id"
                );
                let locked = Exit::LockTimeout.code();
                let e = Submission::reply(&ask, &out(locked, "")).unwrap_err();
                assert_eq!(e.message, format!("another submission with tag {token} held its lock on login1 for two minutes"));
                assert!(e.command.is_some());
            }
        }
    }

    /// The tag lock, run for real in sh: a lock that cannot be made is said as such (not as a
    /// timeout), a dead owner's lock on this host is broken, and the lock goes when the script
    /// ends. No flock anywhere.
    #[test]
    fn the_tag_lock_works_without_flock_and_says_what_failed() {
        let run = |state: &str| {
            let mut s = Script::new();
            shared::remote::exit::assign::<Exit>(&mut s).unwrap();
            tag_lock(state, "slurm-tools-t1").define(&mut s).unwrap();
            s.raw("take_lock\ntrap release_lock EXIT\necho TOOK\n");
            assert!(!s.as_str().contains("flock"));
            shared::remote::script_check::assert_clean("submit-tag-lock", s.as_str());
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(s.as_str())
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        // Cannot be made: its parent is a file.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let (code, out) = run(file.to_str().unwrap());
        assert_eq!(code, Some(40), "{out}");
        assert!(out.contains("LOCK_FAILED"), "{out}");
        assert_eq!(Exit::from_status(code), Some(Exit::LockFailed));
        // A dead owner on this login node: broken, then taken, then gone at the end.
        let state = dir.path().join("state");
        let lock = state.join("slurm-tools-t1.lock.d");
        std::fs::create_dir_all(&lock).unwrap();
        let host = std::process::Command::new("hostname").output().unwrap();
        let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
        // An older version's owner line ("PID HOST") and this one's ("TOKEN PID HOST").
        for owner in [
            format!("4294967 {host}"),
            format!("slurm-tools-t0 4294967 {host}"),
        ] {
            std::fs::create_dir_all(&lock).unwrap();
            std::fs::write(lock.join("owner"), format!("{owner}\n")).unwrap();
            let (code, out) = run(state.to_str().unwrap());
            assert_eq!(code, Some(0), "{out}");
            assert!(
                out.contains(&format!("BROKE_STALE_LOCK {owner}")) && out.contains("TOOK"),
                "{out}"
            );
            assert!(!lock.exists(), "the lock outlived its script");
        }
    }

    #[test]
    fn the_job_id_comes_only_from_a_jobid_line_that_is_a_job_id() {
        for (text, id) in [
            ("TMUX t\nJOBID 42\n", Some("42")),
            ("RESUMED\nJOBID 7_3\n", Some("7_3")),
            ("JOBID \n", None),
            ("JOBID 42;cluster\n", None),
            ("SRUN_EXIT 1\n", None),
        ] {
            assert_eq!(job_id_of(text).as_deref(), id, "{text:?}");
        }
    }
}
