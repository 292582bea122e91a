//! The tracked sync (slurm-sync-tracked; `slurm-alloc exec --sync` runs it inside its own ssh
//! execution): the remote checkout becomes HEAD plus the local working tree's tracked changes,
//! as one snapshot commit; the local repository is never touched (docs/migrating.md, step 4).

use super::last_sync;
use super::pending;
use super::tracked_remote as remote;
use crate::contract::schema::{self, Stash, SyncTracked, Via};
use crate::remote::layout::{self, Layout};
use crate::remote::ssh::Ssh;
use crate::repo::git::{run_git, LocalRepo};
use crate::repo::snapshot;
use crate::{Context, ErrorKind, Outcome, Result, ToolError};
use std::time::{Duration, Instant};

/// What the tool's flags decide.
pub use super::tracked_remote::LOCK_WAIT_SECS;

crate::document_input! {
    /// What slurm-sync-tracked reads.
    pub struct Input {
        pub connection: crate::remote::ssh::Connection = part,
        pub repo_root: Option<String> = string,
        pub repo_url: Option<String> = string,
        /// The remote clone and work directory, decided in crate::remote::layout.
        pub layout: crate::remote::layout::LayoutInput = part,
        pub refresh_paths: Option<Vec<String>> = strings,
        /// With `model_name`, names the temporary branch.
        pub slurm_user: Option<String> = string,
        pub model_name: Option<String> = string,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub via: Via,
    pub dry_run: bool,
    pub allow_unrelated: bool,
    /// Seconds to wait for another run's lock on the remote clone.
    pub lock_wait: u64,
}

const PUSH_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The sync: [`prepare`] (everything local, checked before anything leaves the machine), then
/// the remote part.
pub fn sync(cli: &Options, ctx: &mut Context) -> Result<Outcome> {
    let p = prepare_with(cli, ctx, !cli.dry_run)?;
    if cli.dry_run {
        let mut section = p.section;
        section.dry_run = Some(true);
        section.refresh_paths = Some(p.refresh);
        section.warnings = p.warnings;
        section.derived = p.derived;
        section.seconds = seconds(p.started);
        ctx.doc.set_section("sync_tracked", &section);
        return Ok(Outcome::Done);
    }
    run(p, ctx)
}

/// Everything the remote part needs, made locally: the snapshot (and its submodules'), the
/// derived layout, the section as far as it is known before the cluster answers.
pub struct Prepared {
    opts: Options,
    started: Instant,
    ssh: Ssh,
    local: LocalRepo,
    head_commit: String,
    url: String,
    repo_path: String,
    work: String,
    refresh: Vec<String>,
    temp: String,
    subs: Vec<crate::repo::submodules::Submodule>,
    snapshot: String,
    lfs_files: Vec<(String, String)>,
    lfs_oids: Vec<String>,
    section: SyncTracked,
    warnings: Vec<String>,
    derived: Vec<String>,
    /// The unchanged check, started before the snapshot was made ([`Early`]).
    early: Option<Early>,
}

/// The unchanged check started before the snapshot is made (slurm-sync-tracked on its own): the
/// cluster looks whether its clone is still as this checkout's last sync left it while the
/// working tree is read here, and then waits, under the clone's lock, for a second part
/// (`shared/src/remote/sh/tracked-continue.sh`). Once the snapshot is made, what follows is sent
/// at once, without waiting for the look's answer: nothing (its stdin closed) when the snapshot
/// and the submodules' commits are the ones on record (the answer then says whether the clone is
/// as they left it), or the re-sync against the recorded snapshot with its pack ([`via_delta`]),
/// which uses what the look found (`look=unchanged` there: the clone's status is not looked at
/// again). A changed re-sync is then one execution too, and neither case waits a round trip for
/// the answer before going on. Any other path closes it (the lock given back) before it runs.
struct Early {
    synced: last_sync::Synced,
    running: Option<crate::support::process::Running>,
    repo: String,
    url: String,
    temp: String,
    work: String,
    host: String,
    lock_wait: u64,
    modules: Vec<remote::Module>,
}

impl Early {
    /// Started when a last sync with its submodules is on record for this clone and checkout,
    /// and a master's socket is there: the look is then a second session on the connection, never
    /// a second connection (concurrent pipelines without a master would each open two, and a
    /// server's MaxStartups drops some).
    fn start(
        ssh: &Ssh,
        local: &LocalRepo,
        dirs: (&str, &str),
        url: &str,
        temp: &str,
        lock_wait: u64,
    ) -> Option<Early> {
        if !ssh.master_socket_present() {
            return None;
        }
        let (repo, work) = dirs;
        let source = crate::repo::manifest::checkout_source(&local.root);
        let synced = last_sync::synced(&ssh.host, repo, &source)?;
        let modules = synced
            .modules
            .clone()?
            .into_iter()
            .map(|(path, commit)| remote::Module {
                path,
                commit,
                module_dir: String::new(),
                name: String::new(),
                url: String::new(),
                parent: String::new(),
            })
            .collect();
        let mut early = Early {
            synced,
            running: None,
            repo: repo.to_string(),
            url: url.to_string(),
            temp: temp.to_string(),
            work: work.to_string(),
            host: ssh.host.clone(),
            lock_wait,
            modules,
        };
        let script = remote::unchanged_then_script(&early.plan(), &early.synced.commit).ok()?;
        early.running = Some(ssh.start_script(&script).ok()?);
        Some(early)
    }

    /// The look's plan: the clone, and the recorded submodules' paths and commits.
    fn plan(&self) -> remote::Plan<'_> {
        remote::Plan {
            repo: &self.repo,
            url: &self.url,
            temp: &self.temp,
            work: &self.work,
            refresh: &[],
            roots: &[],
            allow_unrelated: false,
            lock_wait: self.lock_wait,
            modules: &self.modules,
            lfs: &[],
            show_progress: false,
        }
    }

    /// Send `next` (a framed script and what it reads, or nothing), and read the execution to its
    /// end: the look's answer and what came after [`remote::END_OF_ANSWER`]. `None`: the server
    /// refused the session (MaxSessions; nothing ran: the caller goes on without the look).
    fn finish(
        mut self,
        ssh: &Ssh,
        next: &[&[u8]],
    ) -> Result<Option<(remote::Report, crate::support::process::Output)>> {
        use crate::remote::Operation;
        let mut running = self.running.take().expect("a look runs");
        // A write cut short (the look failed and ended, the continuation refused the pack) is
        // read from the exit and the reply.
        for bytes in next {
            if running.send(bytes).is_err() {
                break;
            }
        }
        let plan = self.plan();
        let ask = remote::StepAsk {
            plan: &plan,
            step: remote::Step::Unchanged {
                snapshot: &self.synced.commit,
            },
            host: &self.host,
        };
        let mut out = crate::remote::ssh::without_client_noise(
            running.close_collect(remote::CloneStep::deadline(&ask)),
        );
        if out.code == Some(255) {
            if crate::remote::ssh::SshFailure::session_refused(&out.stderr_tail) {
                return Ok(None);
            }
            return Err(ssh.failure_error(&out));
        }
        let Some(at) = crate::support::process::line_at(&out.stdout, remote::END_OF_ANSWER) else {
            // It ended before its answer was through: its exit says why.
            remote::CloneStep::reply(&ask, &out)?;
            return Err(ToolError::remote(format!(
                "the look at the remote clone {} on {} ended before its answer",
                self.repo, self.host
            ))
            .with_hint("rerun the sync")
            .with_command(out.record()));
        };
        let answer = remote::parse(&String::from_utf8_lossy(&out.stdout[..at]));
        out.stdout.drain(..at + remote::END_OF_ANSWER.len());
        Ok(Some((answer, out)))
    }
}

impl Drop for Early {
    /// Never left running: its execution holds the clone's lock until it ends (its stdin closed,
    /// it ends at once).
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let _ = running.close(Duration::from_secs(60));
        }
    }
}

impl Prepared {
    /// The snapshot commit the remote checkout is to be at.
    pub fn snapshot(&self) -> &str {
        &self.snapshot
    }

    /// The section as far as it is known before the cluster answers (`commit` is the snapshot).
    pub fn section(&self) -> &SyncTracked {
        &self.section
    }

    /// The remote clone.
    pub fn remote_repo_path(&self) -> &str {
        &self.repo_path
    }

    /// Why this sync cannot run inside another tool's ssh execution (it needs executions of its
    /// own: a direct push, submodules, LFS objects), or `None` when it can.
    pub fn not_fusable(&self) -> Option<&'static str> {
        if self.opts.via == Via::Direct {
            Some("--via direct pushes over an ssh execution of its own")
        } else if !self.modules().is_empty() {
            Some("the submodules travel in ssh executions of their own")
        } else if !self.lfs_oids.is_empty() {
            Some("Git LFS objects travel in an ssh execution of their own")
        } else {
            None
        }
    }

    fn modules(&self) -> Vec<remote::Module> {
        self.subs
            .iter()
            .zip(&self.section.submodules)
            .filter(|(_, s)| s.initialised)
            .map(|(m, s)| remote::Module {
                path: m.path.clone(),
                module_dir: m.module_dir.clone(),
                commit: s.commit.clone(),
                name: m.name.clone(),
                url: m.url.clone().unwrap_or_default(),
                parent: m.parent.clone(),
            })
            .collect()
    }
}

/// `repo_url`, else the local repository's origin (derived); never an option's look-alike.
fn repo_url(
    ctx: &mut Context,
    input: &Input,
    local: &LocalRepo,
    derived: &mut Vec<String>,
) -> Result<String> {
    let url = match &input.repo_url {
        Some(u) => u.clone(),
        None => {
            let u = local.origin_url().ok_or_else(|| {
                ToolError::field(ErrorKind::BadInput, "repo_url", "no `repo_url` in the document and the local repository has no `origin` remote")
                    .with_hint("set `repo_url` to the URL the cluster clones from, or add an origin remote (`git remote add origin URL`); or use --via direct")
            })?;
            ctx.doc.derive("repo_url", u.clone().into(), derived);
            u
        }
    };
    if url.starts_with('-') {
        return Err(crate::contract::doc::field_error(
            "repo_url",
            "may not start with `-`",
        ));
    }
    Ok(url)
}

/// The remote clone and the job's work directory, decided in crate::remote::layout (one precedence for
/// every tool), derived into the document where it did not name them.
fn remote_dirs(
    ctx: &mut Context,
    input: &Input,
    url: &str,
    derived: &mut Vec<String>,
) -> Result<(String, String)> {
    let remote = Layout::of(&input.layout);
    let repo = remote.repo_path(Some(url))?.ok_or_else(|| {
        crate::contract::doc::missing(
            "remote_repo_path",
            "set `remote_repo_path`, or `default_user_root_dir`/`remote_cwd` to derive it (slurm-resolve does)",
        )
    })?;
    let work = remote.work_dir(&repo.path)?;
    let repo_path = repo.path;
    if repo.derived {
        ctx.doc
            .derive("remote_repo_path", repo_path.clone().into(), derived);
    }
    if work.derived {
        ctx.doc
            .derive("remote_work_dir", work.path.clone().into(), derived);
    }
    Ok((repo_path, work.path))
}

/// Local state worth a word: a detached HEAD, a held index lock, skip-worktree and
/// intent-to-add files.
fn local_notes(
    ctx: &mut Context,
    local: &LocalRepo,
    detached: bool,
    head: &str,
    warnings: &mut Vec<String>,
) {
    if detached {
        ctx.note(format!(
            "HEAD is detached at {}; syncing that commit plus your edits",
            short(head)
        ));
    }
    if local.index_locked() {
        let w = "`.git/index.lock` exists (another git command is running, or one crashed): the snapshot uses the index as last written; nothing in the repository is changed".to_string();
        warn_and_record(ctx, warnings, w);
    }
    let notes = local.index_notes();
    if !notes.skip_worktree.is_empty() {
        let w = format!(
            "{} skip-worktree file(s) (e.g. {}) are synced as committed, not as edited: git does not look at their working-tree content",
            notes.skip_worktree.len(),
            notes.skip_worktree[0]
        );
        warn_and_record(ctx, warnings, w);
    }
    if !notes.intent_to_add.is_empty() {
        ctx.note(format!(
            "{} intent-to-add file(s) (git add -N) are included with their working-tree content",
            notes.intent_to_add.len()
        ));
    }
}

/// The snapshot's Git LFS files (none, said, where git-lfs cannot list them) and their objects.
fn lfs_of(
    ctx: &mut Context,
    local: &LocalRepo,
    commit: &str,
    warnings: &mut Vec<String>,
) -> (Vec<(String, String)>, Vec<String>) {
    let lfs_files = match local.lfs_files(commit) {
        Ok(files) => files,
        Err(why) => {
            let w = format!(
                "the repository uses Git LFS, but git-lfs cannot list its files here ({why}): LFS files travel as the pointer files git has (install git-lfs locally to send their content)"
            );
            warn_and_record(ctx, warnings, w);
            Vec::new()
        }
    };
    let mut lfs_oids: Vec<String> = lfs_files.iter().map(|(o, _)| o.clone()).collect();
    lfs_oids.sort();
    lfs_oids.dedup();
    (lfs_files, lfs_oids)
}

/// The snapshot: submodules first, innermost first (each one's snapshot, its HEAD when clean, is
/// what its parent's snapshot records), then the repository's own, on `head`.
fn snapshot_all(
    ctx: &mut Context,
    input: &Input,
    local: &LocalRepo,
    head: &str,
    temp: &str,
    warnings: &mut Vec<String>,
) -> Result<(
    Vec<crate::repo::submodules::Submodule>,
    Vec<schema::SyncedSubmodule>,
    snapshot::Snapshot,
)> {
    let message = format!(
        "slurm-tools snapshot {temp}\n\nHEAD {} plus the working tree's tracked changes.\n",
        head
    );
    // Submodules first, innermost first: each one's snapshot (its HEAD when clean) is what its
    // parent's snapshot records.
    let subs = crate::repo::submodules::all(local);
    let repo_label = input.repo_root.as_deref().unwrap_or("the repository");
    let synced_subs = snapshot_submodules(ctx, repo_label, &subs, temp, warnings)?;
    let top_links: Vec<(String, String)> = subs
        .iter()
        .zip(&synced_subs)
        .filter(|(m, s)| m.parent.is_empty() && s.initialised)
        .map(|(m, s)| (m.path_in_parent.clone(), s.commit.clone()))
        .collect();
    let snap = snapshot::create_with(local, head, &message, &top_links, false)?;
    Ok((subs, synced_subs, snap))
}

/// The local half of the sync: checks, the snapshot, the section so far. Nothing leaves the
/// machine.
pub fn prepare(cli: &Options, ctx: &mut Context) -> Result<Prepared> {
    prepare_with(cli, ctx, false)
}

/// [`prepare`]; `early`: start the unchanged check before the snapshot ([`Early`]; only where
/// [`run`] follows, which reads its answer).
fn prepare_with(cli: &Options, ctx: &mut Context, early: bool) -> Result<Prepared> {
    let started = Instant::now();
    // Everything is checked before anything leaves the machine.
    let input = Input::read(&ctx.doc)?;
    let ssh = Ssh::connect(&input.connection)?;
    let local = LocalRepo::open(input.repo_root.as_deref())?;
    let head = local.head()?;
    let mut derived = Vec::new();
    let mut warnings: Vec<String> = Vec::new();

    let url = repo_url(ctx, &input, &local, &mut derived)?;
    if !cli.allow_unrelated {
        check_repo_url(&local, &url, !cli.dry_run)?;
    }
    let (repo_path, work) = remote_dirs(ctx, &input, &url, &mut derived)?;
    // None unless the document names them: no repository layout is assumed.
    let refresh = input.refresh_paths.clone().unwrap_or_default();
    for p in &refresh {
        check_refresh_path(p)?;
    }
    local_notes(
        ctx,
        &local,
        head.branch.is_none(),
        &head.commit,
        &mut warnings,
    );
    let temp = temp_branch(&input);
    let early = if early && refresh.is_empty() {
        Early::start(
            &ssh,
            &local,
            (&repo_path, &work),
            &url,
            &temp,
            cli.lock_wait,
        )
    } else {
        None
    };
    let (subs, synced_subs, snap) =
        snapshot_all(ctx, &input, &local, &head.commit, &temp, &mut warnings)?;
    crate::support::testhook::pause("sync-tracked:snapshot");
    let changed = local.changed_paths(&head.commit, &snap.commit);
    let (lfs_files, lfs_oids) = lfs_of(ctx, &local, &snap.commit, &mut warnings);
    ctx.note(format!(
        "snapshot {} = HEAD {} + {changed} changed path(s); syncing to {}:{repo_path} via {}",
        short(&snap.commit),
        short(&head.commit),
        ssh.host,
        if cli.via == Via::Origin {
            "origin"
        } else {
            "direct push"
        }
    ));

    let section = SyncTracked {
        dry_run: None,
        temp_branch: temp.clone(),
        commit: snap.commit.clone(),
        base_commit: head.commit.clone(),
        branch: head.branch.clone(),
        remote_repo_path: repo_path.clone(),
        remote_work_dir: work.clone(),
        via: cli.via,
        temp_ref_deleted: None,
        changed_paths: changed as u64,
        refreshed: None,
        refresh_paths: None,
        stash: None,
        created: None,
        unchanged: None,
        submodules: synced_subs,
        lfs: (!lfs_files.is_empty()).then_some(schema::SyncedLfs {
            files: lfs_files.len() as u64,
            objects_sent: 0,
            bytes_sent: 0,
        }),
        warnings: Vec::new(),
        derived: Vec::new(),
        seconds: 0.0,
    };
    Ok(Prepared {
        opts: *cli,
        started,
        ssh,
        local,
        head_commit: head.commit,
        url,
        repo_path,
        work,
        refresh,
        temp,
        subs,
        snapshot: snap.commit,
        lfs_files,
        lfs_oids,
        section,
        warnings,
        derived,
        early,
    })
}

/// The remote half, in ssh executions of its own.
pub fn run(mut p: Prepared, ctx: &mut Context) -> Result<Outcome> {
    // The look started before the snapshot ([`Early`]).
    let mut early = p.early.take();
    clean_leftovers(&p, ctx);
    let modules = p.modules();
    // The root commits (git rev-list: the check that a clone holds this repository before
    // anything is checked out over it) only where a clone may be made or met for the first time:
    // through origin or a direct push. The unchanged look, the re-sync against the recorded
    // snapshot and the steps that follow a checkout use none.
    let plan = p.plan(&[], &modules);
    let roots = || p.local.root_commits(&p.head_commit, 20);
    // This checkout's last sync into the clone, on record (read once).
    let last = last_sync::synced(
        &p.ssh.host,
        &p.repo_path,
        &crate::repo::manifest::checkout_source(&p.local.root),
    );
    if confirmed_unchanged(&p, &plan, last.as_ref(), &mut early, ctx)? {
        let Prepared {
            started,
            repo_path,
            snapshot,
            mut section,
            warnings,
            derived,
            ..
        } = p;
        ctx.note(format!(
            "remote {repo_path} is at {} already, as this machine's last sync left it: nothing pushed",
            short(&snapshot)
        ));
        for sub in section.submodules.iter_mut().filter(|s| s.initialised) {
            sub.stash = Some(None);
        }
        section.unchanged = Some(true);
        section.temp_ref_deleted = Some(None);
        section.refreshed = Some(Vec::new());
        section.stash = Some(None);
        section.created = Some(false);
        section.warnings = warnings;
        section.derived = derived;
        section.seconds = seconds(started);
        ctx.doc.set_section("sync_tracked", &section);
        return Ok(Outcome::Done);
    }
    // The look started before the snapshot takes the re-sync into its execution, or is closed
    // (its lock given back) before any other step.
    let synced = match p.opts.via {
        Via::Origin => match via_delta(ctx, &p, &plan, last.as_ref(), early.take())? {
            Some(report) => Ok((report, None)),
            None => via_origin(
                ctx,
                &p.local,
                &p.ssh,
                &p.plan(&roots(), &modules),
                &p.snapshot,
                &p.subs,
                super::tracked_packs::Known::of(last.as_ref(), &p.ssh.host, &p.repo_path),
            ),
        },
        Via::Direct => {
            drop(early.take());
            via_direct(&p.local, &p.ssh, &p.plan(&roots(), &modules), &p.snapshot)
                .map(|r| (r, None))
        }
    };
    let (mut report, temp_ref_deleted) = synced.map_err(|e| name_lfs_files(e, &p.lfs_files))?;
    let mut lfs_sent = None;
    if !p.lfs_oids.is_empty() && report.head.as_deref() == Some(p.snapshot.as_str()) {
        lfs_sent = Some(sync_lfs(
            ctx,
            &p.local,
            &p.ssh,
            &plan,
            &report.lfs_need,
            &p.lfs_files,
        )?);
    }
    if !modules.is_empty()
        && report.head.as_deref() == Some(p.snapshot.as_str())
        && !report.modules_done
    {
        let done = sync_submodules(ctx, &p.ssh, &plan, &p.subs, &report.modules_missing)?;
        report.module_heads = done.module_heads;
        report.module_stashes = done.module_stashes;
    }
    if let (Some((objects, bytes)), Some(l)) = (lfs_sent, p.section.lfs.as_mut()) {
        l.objects_sent = objects;
        l.bytes_sent = bytes;
    }
    finish(p, ctx, report, temp_ref_deleted)?;
    Ok(Outcome::Done)
}

/// Whether the cluster's clone is at this snapshot already, as this machine's last sync from this
/// checkout left it: then one execution confirms it and nothing is pushed or checked out. Only
/// when there is nothing else to do (no refresh paths, no LFS content to send); a clone that
/// changed since (another checkout's sync, an edit on the cluster) is said, and synced as usual.
///
/// `early`: the same check, started before the snapshot was made ([`Early`]); its answer is
/// used (and taken) when the snapshot and the submodules are the ones it asked about; else it is
/// left to end on its own while the sync goes on (the clone's lock, which it holds for a few
/// milliseconds there, is waited for with short looks, and this run's own is not said as another
/// run's wait).
fn confirmed_unchanged(
    p: &Prepared,
    plan: &remote::Plan,
    last: Option<&last_sync::Synced>,
    early: &mut Option<Early>,
    ctx: &Context,
) -> Result<bool> {
    let now = last_sync::Synced {
        commit: p.snapshot.clone(),
        modules: Some(recorded_modules(plan.modules)),
    };
    let eligible = p.refresh.is_empty() && p.lfs_oids.is_empty();
    let alone = || {
        step(
            &p.ssh,
            plan,
            remote::Step::Unchanged {
                snapshot: &p.snapshot,
            },
        )
    };
    let report = match early.take() {
        Some(e) if !eligible || e.synced != now => {
            *early = Some(e);
            return Ok(false);
        }
        // Nothing follows the look: its answer, as soon as it comes.
        Some(e) => match e.finish(&p.ssh, &[])? {
            Some((answer, _)) => answer,
            None => alone()?,
        },
        None => {
            if !eligible || last.map(|l| l.commit.as_str()) != Some(p.snapshot.as_str()) {
                return Ok(false);
            }
            alone()?
        }
    };
    say_lock(ctx, &report, &p.repo_path);
    if report.unchanged {
        return Ok(true);
    }
    let what = report.changed.as_deref().unwrap_or("it did not say");
    ctx.note(format!(
        "the snapshot is the one last synced, but the remote clone changed since ({what}): syncing it again"
    ));
    Ok(false)
}

/// The checked-out submodules as the last-sync record keeps them: path and commit.
fn recorded_modules(modules: &[remote::Module]) -> Vec<(String, String)> {
    modules
        .iter()
        .map(|m| (m.path.clone(), m.commit.clone()))
        .collect()
}

/// What the clone's lock did: a stale one broken, or another sync's waited for.
fn say_lock(ctx: &Context, report: &remote::Report, repo_path: &str) {
    if let Some(owner) = &report.broke_stale_lock {
        ctx.warn(format!(
            "broke a stale sync lock on {repo_path} (left by {owner})"
        ));
    }
    if let Some((secs, holder)) = &report.waited {
        ctx.note(format!(
            "waited {secs} s for the clone's lock on {repo_path}: another sync ({holder}) was using it"
        ));
    }
}

impl Prepared {
    fn plan<'a>(&'a self, roots: &'a [String], modules: &'a [remote::Module]) -> remote::Plan<'a> {
        remote::Plan {
            repo: &self.repo_path,
            url: &self.url,
            temp: &self.temp,
            work: &self.work,
            refresh: &self.refresh,
            roots,
            allow_unrelated: self.opts.allow_unrelated,
            lock_wait: self.opts.lock_wait,
            modules,
            lfs: &self.lfs_oids,
            show_progress: {
                use std::io::IsTerminal;
                std::io::stderr().is_terminal()
            },
        }
    }
}

/// Temporary branches a killed earlier run left on origin go first.
fn clean_leftovers(p: &Prepared, ctx: &Context) {
    if p.opts.via == Via::Origin {
        for leftover in pending::clean(&p.local) {
            ctx.note(format!(
                "deleted the temporary branch {leftover} left on origin by an interrupted run"
            ));
        }
    }
}

/// For a sync that runs inside another tool's ssh execution (see [`Prepared::not_fusable`]):
/// the snapshot is pushed to origin now, and the returned script is the remote part, to be run
/// with its stdin at /dev/null; its exit code, stdout and stderr go to [`finish_fused`].
pub fn push_for_fused(p: &Prepared, ctx: &Context) -> Result<crate::remote::quote::Script> {
    clean_leftovers(p, ctx);
    let roots = p.local.root_commits(&p.head_commit, 20);
    // The fused conversation keeps each part's stderr for its verdict: no progress lines in it.
    let plan = remote::Plan {
        show_progress: false,
        ..p.plan(&roots, &[])
    };
    push_to_origin(&p.local, &plan, &p.snapshot)?;
    remote::origin_script(&plan)
}

/// The end of a sync whose remote part ran inside another tool's ssh execution: the remote
/// part's report is checked and the section written, exactly as [`sync`] does, while the
/// temporary branch is deleted from origin (whatever happened) on a thread of its own, so the
/// command's output is not held behind a push to the git server. The section's
/// `temp_ref_deleted` is filled in by [`Deleting::settle`].
pub fn finish_fused(
    p: Prepared,
    ctx: &mut Context,
    code: Option<i32>,
    stdout: &str,
) -> Result<Deleting> {
    let mut deleting = Deleting::start(&p.local, &p.url, &p.temp);
    let report = remote::parse(stdout);
    if code != Some(0) {
        deleting.wait(ctx);
        return Err(remote::failure(code, &report, &p.ssh.host, &p.repo_path));
    }
    deleting.section = Some(finish(p, ctx, report, None)?);
    Ok(deleting)
}

/// The temporary branch's deletion from origin, under way. Dropped unsettled (an error on the
/// way), it is still waited for: the branch never outlives the tool for want of time.
pub struct Deleting {
    handle: Option<std::thread::JoinHandle<bool>>,
    url: String,
    temp: String,
    /// The section [`finish_fused`] wrote, to be completed.
    section: Option<SyncTracked>,
}

impl Deleting {
    pub(super) fn start(local: &LocalRepo, url: &str, temp: &str) -> Deleting {
        let at = pending::Where::of(local);
        let (u, t) = (url.to_string(), temp.to_string());
        Deleting {
            handle: Some(std::thread::spawn(move || at.delete(&u, &t))),
            url: url.to_string(),
            temp: temp.to_string(),
            section: None,
        }
    }

    /// Wait for the deletion; warn when it failed. True when the branch is gone.
    pub(super) fn wait(mut self, ctx: &Context) -> bool {
        let gone = self
            .handle
            .take()
            .is_some_and(|h| h.join().unwrap_or(false));
        if !gone {
            warn_not_deleted(ctx, &self.url, &self.temp);
        }
        gone
    }

    /// Wait for the deletion and record it in the `sync_tracked` section [`finish_fused`] wrote.
    pub fn settle(mut self, ctx: &mut Context) -> Result<()> {
        let section = self.section.take();
        let gone = self.wait(ctx);
        if let Some(mut section) = section {
            section.temp_ref_deleted = Some(Some(gone));
            ctx.doc.set_section("sync_tracked", &section);
        }
        Ok(())
    }
}

impl Drop for Deleting {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// What the cluster reported, checked and written into the section.
fn finish(
    p: Prepared,
    ctx: &mut Context,
    report: remote::Report,
    temp_ref_deleted: Option<bool>,
) -> Result<SyncTracked> {
    let synced_modules = recorded_modules(&p.modules());
    let Prepared {
        started,
        ssh,
        local,
        url,
        repo_path,
        temp,
        snapshot,
        mut section,
        mut warnings,
        derived,
        ..
    } = p;
    if let Some(other) = &report.origin_differs {
        let w = format!(
            "the remote clone's origin is {other:?}, not repo_url {url:?}; the snapshot was fetched from repo_url (the clone's origin setting is left as it is)"
        );
        warn_and_record(ctx, &mut warnings, w);
    }
    say_lock(ctx, &report, &repo_path);
    if report.head.as_deref() != Some(snapshot.as_str()) {
        return Err(ToolError::remote(format!(
            "after the checkout, the remote HEAD is {} but the snapshot is {}",
            report.head.as_deref().unwrap_or("unknown"),
            snapshot
        ))
        .with_hint("something changed the remote clone during the sync; rerun it"));
    }
    let stash = report.stash.as_ref().map(|(sha, msg)| {
        ctx.warn(format!(
            "the remote clone had cluster-side changes; they are saved in its stash as {} (`git stash list` in {repo_path})",
            short(sha)
        ));
        Stash {
            commit: sha.clone(),
            message: msg.clone(),
        }
    });
    for sub in section.submodules.iter_mut().filter(|s| s.initialised) {
        let at = report
            .module_heads
            .iter()
            .find(|(p, _)| *p == sub.path)
            .map(|(_, h)| h.as_str());
        if at != Some(sub.commit.as_str()) {
            return Err(ToolError::remote(format!(
                "after the checkout, the remote submodule {} is at {} but its snapshot is {}",
                sub.path,
                at.unwrap_or("unknown"),
                sub.commit
            ))
            .with_hint("something changed the remote clone during the sync; rerun it"));
        }
        let stash = report
            .module_stashes
            .iter()
            .find(|(p, _)| *p == sub.path)
            .map(|(_, sha)| Stash {
                commit: sha.clone(),
                message: format!("auto-stash before remote sync {temp}"),
            });
        if let Some(st) = &stash {
            ctx.warn(format!(
                "the remote submodule {} had cluster-side changes; they are saved in its stash as {} (`git stash list` in {repo_path}/{})",
                sub.path,
                short(&st.commit),
                sub.path
            ));
        }
        sub.stash = Some(stash);
    }
    ctx.note(format!("remote {repo_path} is at {}", short(&snapshot)));
    // The next sync of this same snapshot from this checkout only confirms the clone.
    last_sync::record_synced(
        &ssh.host,
        &repo_path,
        &crate::repo::manifest::checkout_source(&local.root),
        &last_sync::Synced {
            commit: snapshot.clone(),
            modules: Some(synced_modules),
        },
    );
    section.temp_ref_deleted = Some(temp_ref_deleted);
    section.refreshed = Some(report.refreshed);
    section.stash = Some(stash);
    section.created = Some(report.created);
    section.warnings = warnings;
    section.derived = derived;
    section.seconds = seconds(started);
    ctx.doc.set_section("sync_tracked", &section);
    Ok(section)
}

fn seconds(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 100.0).round() / 100.0
}

/// The first 12 characters of a commit id, for people.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// A warning for the person now, and in `sync_tracked.warnings` for the record.
fn warn_and_record(ctx: &Context, warnings: &mut Vec<String>, w: String) {
    ctx.warn(&w);
    warnings.push(w);
}

/// Each submodule's snapshot, innermost first (its HEAD when clean, else its working tree built
/// the zero-disturbance way); returned in [`crate::repo::submodules::all`]'s order.
fn snapshot_submodules(
    ctx: &Context,
    repo_label: &str,
    subs: &[crate::repo::submodules::Submodule],
    temp: &str,
    warnings: &mut Vec<String>,
) -> Result<Vec<schema::SyncedSubmodule>> {
    let mut out: Vec<Option<schema::SyncedSubmodule>> = subs.iter().map(|_| None).collect();
    for (i, m) in subs.iter().enumerate().rev() {
        let mut synced = schema::SyncedSubmodule {
            path: m.path.clone(),
            name: m.name.clone(),
            url: m.url.clone(),
            initialised: false,
            commit: m.recorded.clone(),
            head: None,
            snapshot: false,
            stash: None,
        };
        // (A submodule inside an uninitialised one is never listed: there is nothing to read.)
        match &m.repo {
            Some(repo) => {
                let head = repo.head().map_err(|e| {
                    ToolError::bad_input(format!(
                        "the submodule {} cannot be snapshotted: {}",
                        m.path, e.message
                    ))
                    .with_hint("check it out (`git submodule update --init` in the superproject), or remove it")
                })?;
                // Its own submodules' snapshots, found above (innermost first).
                let links: Vec<(String, String)> = subs
                    .iter()
                    .zip(&out)
                    .filter(|(c, _)| c.parent == m.path)
                    .filter_map(|(c, s)| {
                        s.as_ref()
                            .filter(|s| s.initialised)
                            .map(|s| (c.path_in_parent.clone(), s.commit.clone()))
                    })
                    .collect();
                let message = format!(
                    "slurm-tools snapshot {temp} of submodule {}\n\nHEAD {} plus the working tree's tracked changes.\n",
                    m.path, head.commit
                );
                let snap = snapshot::of_submodule(repo, &head.commit, &message, &links)?;
                synced.initialised = true;
                synced.snapshot = snap.commit != head.commit;
                synced.commit = snap.commit;
                synced.head = Some(head.commit);
            }
            _ => {
                // The command that works when pasted: a nested submodule is initialised from
                // inside its parent (from the top, git refuses its path).
                let fix = if m.parent.is_empty() {
                    format!(
                        "git submodule update --init -- {}",
                        crate::remote::quote::quote_for_display(&m.path)
                    )
                } else {
                    format!(
                        "git -C {} submodule update --init -- {}",
                        crate::remote::quote::quote_for_display(&m.parent),
                        crate::remote::quote::quote_for_display(&m.path_in_parent)
                    )
                };
                let w = format!(
                    "the submodule {} is not checked out locally, so it is not checked out in the remote clone either (`{fix}` in {}, then sync again, if the job needs it)",
                    m.path, repo_label
                );
                // Recorded every time; said on stderr once per repository and state.
                if crate::state::journal::first_time(&format!("{}\n{w}", m.path)) {
                    ctx.warn(&w);
                }
                warnings.push(w);
            }
        }
        out[i] = Some(synced);
    }
    let changed = out
        .iter()
        .flatten()
        .filter(|s| s.initialised && s.snapshot)
        .count();
    let initialised = out.iter().flatten().filter(|s| s.initialised).count();
    if initialised > 0 {
        ctx.note(format!(
            "{initialised} submodule(s), {changed} with local changes (snapshotted the same way)"
        ));
    }
    Ok(out.into_iter().flatten().collect())
}

/// A refusal for want of git-lfs on the cluster names the files it is about.
fn name_lfs_files(mut e: ToolError, files: &[(String, String)]) -> ToolError {
    if !files.is_empty() && e.message.contains("git-lfs is not installed") {
        let names: Vec<&str> = files.iter().take(5).map(|(_, p)| p.as_str()).collect();
        e.message.push_str(&format!(
            "; the LFS files: {}{}",
            names.join(", "),
            if files.len() > names.len() {
                format!(" and {} more", files.len() - names.len())
            } else {
                String::new()
            }
        ));
    }
    e
}

/// The LFS objects the remote clone lacks, from the local LFS store, in one ssh execution that
/// also gives the LFS files their content there. Content that is in neither store stops the
/// sync, naming the files.
fn sync_lfs(
    ctx: &Context,
    local: &LocalRepo,
    ssh: &Ssh,
    plan: &remote::Plan,
    need: &[String],
    files: &[(String, String)],
) -> Result<(u64, u64)> {
    let (have, missing): (Vec<&String>, Vec<&String>) =
        need.iter().partition(|oid| local.lfs_object(oid).is_file());
    if !missing.is_empty() {
        release_lock(ssh, plan);
        let names: Vec<&str> = files
            .iter()
            .filter(|(o, _)| missing.contains(&o))
            .map(|(_, p)| p.as_str())
            .collect();
        return Err(ToolError::remote(format!(
            "the Git LFS content of {} file(s) ({}) is neither in the local LFS store nor in the remote clone {}: they are pointer files there",
            names.len(),
            names.iter().take(5).copied().collect::<Vec<_>>().join(", "),
            plan.repo
        ))
        .with_hint("fetch the content here (`git lfs pull`, or `git lfs fetch` for this commit), then sync again"));
    }
    let bytes: u64 = have
        .iter()
        .filter_map(|oid| std::fs::metadata(local.lfs_object(oid)).ok())
        .map(|m| m.len())
        .sum();
    let items: Vec<crate::repo::archive::Item> = have
        .iter()
        .map(|oid| {
            crate::repo::archive::Item::file(
                local.lfs_object(oid),
                format!("{}/{}/{oid}", &oid[..2], &oid[2..4]),
            )
        })
        .collect();
    if !items.is_empty() {
        ctx.note(format!(
            "sending {} Git LFS object(s), {}, the remote clone lacks",
            items.len(),
            crate::support::ui::human_bytes(bytes)
        ));
    }
    let payload: Option<crate::support::process::StreamWriter> = (!items.is_empty()).then(|| {
        Box::new(move |w: &mut dyn std::io::Write| {
            let stats =
                std::sync::Arc::new(std::sync::Mutex::new(crate::repo::archive::Stats::default()));
            crate::repo::archive::write_archive(&items, w, false, &stats, None)
        }) as crate::support::process::StreamWriter
    });
    let ask = remote::StepAsk {
        plan,
        step: remote::Step::Lfs {
            payload: payload.is_some(),
        },
        host: &ssh.host,
    };
    crate::remote::run_sending::<remote::CloneStep>(ssh, &ask, payload)?;
    Ok((have.len() as u64, bytes))
}

/// Push each submodule's snapshot into its repository in the remote clone (over ssh, never
/// through the submodule's own URL, which the cluster often cannot reach), then check them all
/// out in one round trip.
/// `missing`: the submodules whose snapshot commit the clone lacks (the checkout said so); only
/// those are pushed, then every one is checked out.
fn sync_submodules(
    ctx: &Context,
    ssh: &Ssh,
    plan: &remote::Plan,
    subs: &[crate::repo::submodules::Submodule],
    missing: &[String],
) -> Result<remote::Report> {
    let git_ssh = ssh.git_ssh_command()?;
    let mut pushes = Vec::new();
    for m in plan.modules.iter().filter(|m| missing.contains(&m.path)) {
        let Some(repo) = subs
            .iter()
            .find(|s| s.path == m.path)
            .and_then(|s| s.repo.as_ref())
        else {
            continue;
        };
        let target = format!(
            "{}:{}/{}",
            ssh.host,
            plan.repo.trim_end_matches('/'),
            m.path
        );
        let refspec = format!("+{}:refs/slurm-tools/snapshot", m.commit);
        pushes.push((m.path.as_str(), repo, target, refspec));
    }
    let started = Instant::now();
    let pushed = if pushes.is_empty() {
        Ok(())
    } else if let [(path, repo, target, refspec)] = &pushes[..] {
        // One: git's own progress for a person watching.
        push_over_ssh(repo, &git_ssh, target, refspec, &pushing(path), ssh, plan)
    } else {
        let cmds = pushes
            .iter()
            .map(|(path, repo, target, refspec)| {
                let cmd = repo
                    .git()
                    .env("GIT_SSH_COMMAND", &git_ssh)
                    .args(["push", "--porcelain", "--quiet", "--", target, refspec])
                    .deadline(PUSH_DEADLINE);
                (*path, cmd)
            })
            .collect();
        let failed = push_overlapped(ctx, cmds);
        match failed {
            None => Ok(()),
            Some(e) => {
                release_lock(ssh, plan);
                Err(e)
            }
        }
    };
    pushed?;
    if !pushes.is_empty() {
        ctx.note(format!(
            "pushed {} submodule snapshot(s) into the remote clone ({:.1} s{}){}",
            pushes.len(),
            started.elapsed().as_secs_f64(),
            if pushes.len() > 1 {
                format!(", up to {} at once", pushes_at_once())
            } else {
                String::new()
            },
            match plan.modules.len() - pushes.len() {
                0 => String::new(),
                had => format!("; it had the other {had} already"),
            }
        ));
    }
    step(ssh, plan, remote::Step::Modules)
}

/// Submodule pushes in flight at once. Each is a session of its own on the master (sshd allows
/// 10 per connection by default, and other tools may hold some); at a login node's distance
/// their round trips overlap instead of adding up.
const PUSHES_AT_ONCE: usize = 4;

/// [`PUSHES_AT_ONCE`], or `SLURM_TOOLS_PUSHES_AT_ONCE` (1-10) for the benchmark that compares
/// overlapped pushes with one at a time (scripts/bench-repos).
fn pushes_at_once() -> usize {
    std::env::var("SLURM_TOOLS_PUSHES_AT_ONCE")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=10).contains(n))
        .unwrap_or(PUSHES_AT_ONCE)
}

fn pushing(path: &str) -> String {
    format!("pushing the submodule {path}'s snapshot into the remote clone")
}

/// Run the pushes, [`PUSHES_AT_ONCE`] at a time; a person watching sees a line as each ends.
/// The first failure, if any (the batch it was in finishes; no later batch starts).
fn push_overlapped(
    ctx: &Context,
    pushes: Vec<(&str, crate::support::process::Cmd)>,
) -> Option<ToolError> {
    use std::io::IsTerminal;
    let watching = std::io::stderr().is_terminal();
    if watching {
        ctx.note(format!(
            "pushing {} submodule snapshots into the remote clone, up to {} at once",
            pushes.len(),
            pushes_at_once()
        ));
    }
    let mut queue = pushes.into_iter();
    loop {
        let batch: Vec<_> = queue.by_ref().take(pushes_at_once()).collect();
        if batch.is_empty() {
            return None;
        }
        let results: Vec<(&str, Result<crate::support::process::Output>, f64)> =
            std::thread::scope(|s| {
                let running: Vec<_> = batch
                    .into_iter()
                    .map(|(path, cmd)| {
                        s.spawn(move || {
                            let t = Instant::now();
                            let r = run_git(cmd, &pushing(path), PUSH_HINT);
                            (path, r, t.elapsed().as_secs_f64())
                        })
                    })
                    .collect();
                running
                    .into_iter()
                    .map(|h| h.join().expect("a push thread never panics"))
                    .collect()
            });
        let mut failed = None;
        for (path, r, secs) in results {
            match r {
                Ok(_) if watching => ctx.note(format!("pushed submodule {path} ({secs:.1} s)")),
                Ok(_) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if failed.is_some() {
            return failed;
        }
    }
}

const PUSH_HINT: &str =
    "check the ssh connection (rerun slurm-ssh-preflight); nothing was changed locally";

/// After a failed push: the clone's sync lock goes (a direct sync holds it across pushes).
fn release_lock(ssh: &Ssh, plan: &remote::Plan) {
    let _ = step(ssh, plan, remote::Step::DirectRelease);
}

/// `repo_url` must be one of the local repository's remotes; a repository without remotes must
/// share a commit with what `repo_url` holds (one `git ls-remote`, not on a dry run, which
/// contacts nothing; an empty repository is fine).
/// A sync from another repository's directory is refused before anything is pushed.
fn check_repo_url(local: &LocalRepo, url: &str, may_ask_origin: bool) -> Result<()> {
    let remotes = local.remote_urls();
    if remotes
        .iter()
        .any(|(_, u)| crate::repo::git::same_repository(u, url))
    {
        return Ok(());
    }
    if remotes.is_empty() && !may_ask_origin {
        return Ok(());
    }
    let described = if remotes.is_empty() {
        match local.shares_a_commit_with(url) {
            Some(true) | None => return Ok(()),
            Some(false) => format!(
                "repo_url {url:?} holds commits none of which the local repository {} has, and it has no remotes: this is not the repository the document names, and nothing was pushed",
                local.root.display()
            ),
        }
    } else {
        let listed: Vec<String> = remotes.iter().map(|(n, u)| format!("{n} = {u}")).collect();
        format!(
            "repo_url {url:?} is none of the remotes of the local repository {} ({}): this is not the repository the document names, and nothing was pushed",
            local.root.display(),
            listed.join(", ")
        )
    };
    Err(
        ToolError::field(ErrorKind::BadInput, "repo_url", described).with_hint(format!(
            "run the tool inside the repository {url} belongs to (or set `repo_root` to it), or fix `repo_url`; to push {} there deliberately, rerun with --allow-unrelated",
            local.root.display()
        )),
    )
}

fn check_refresh_path(p: &str) -> Result<()> {
    let bad = p.is_empty()
        || p.starts_with('/')
        || p.starts_with('-')
        || p.split('/').any(|c| c == ".." || c == ".git")
        || p.contains('\n');
    if bad {
        return Err(crate::contract::doc::field_error(
            "refresh_paths",
            &format!("has {:?}, which is not a path inside the repository", p),
        )
        .with_hint("list relative paths such as \"cpp\"; no leading `/` or `-`, no `..`"));
    }
    Ok(())
}

/// `<user>_<model>_<YYYYmmddHHMMSS>_<8 hex>`, each part sanitised to `[A-Za-z0-9_-]`. The random
/// suffix makes it unique per sync: concurrent pipelines (two checkouts, a worktree, the same
/// checkout twice) in the same second push different snapshots, and a shared name made the second
/// push a non-fast-forward rejection.
fn temp_branch(input: &Input) -> String {
    let user = match &input.slurm_user {
        Some(u) => u.clone(),
        None => std::env::var("USER").unwrap_or_else(|_| "user".into()),
    };
    let model = match &input.model_name {
        Some(m) => m.clone(),
        None => std::env::current_dir()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "repo".into()),
    };
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!(
        "{}_{}_{}_{:08x}",
        layout::sanitize(&user, false),
        layout::sanitize(&model, false),
        crate::support::clock::utc_stamp(crate::support::clock::unix_now()),
        h.finish() as u32
    )
}

/// One step on the cluster's clone (one execution): its report, or the error its exit means.
fn step(ssh: &Ssh, plan: &remote::Plan, step: remote::Step) -> Result<remote::Report> {
    let ask = remote::StepAsk {
        plan,
        step,
        host: &ssh.host,
    };
    crate::remote::run::<remote::CloneStep>(ssh, &ask)
}

/// The largest pack a re-sync sends straight to the clone; a larger change goes through origin,
/// which is often nearer the cluster than this machine.
const DELTA_MAX_BYTES: usize = 64 << 20;

/// A re-sync in one execution, when this checkout's last sync into the clone is on record: the
/// objects of the new snapshot that the recorded one does not reach travel as one pack on
/// stdin, and the clone, still at the recorded snapshot (checked there, under its lock),
/// unpacks them and checks out as after a direct push. Nothing goes to origin, and no round
/// trip is spent on git's negotiation. `None` when it does not apply (no record, refresh paths
/// or LFS content to handle, the recorded commit gone here, a pack over [`DELTA_MAX_BYTES`]) or
/// when the clone is not at the recorded snapshot (said); the sync then goes through origin.
///
/// `early`: the unchanged look started before the snapshot; when it found the clone as the record
/// says and waits, the re-sync goes into its execution (no second execution, no second look at
/// the clone); otherwise it is closed first.
fn via_delta(
    ctx: &Context,
    p: &Prepared,
    plan: &remote::Plan,
    last: Option<&last_sync::Synced>,
    early: Option<Early>,
) -> Result<Option<remote::Report>> {
    if !p.refresh.is_empty() || !p.lfs_oids.is_empty() {
        return Ok(None);
    }
    let Some(last) = last else {
        return Ok(None);
    };
    let Some(pack) = new_objects(&p.local, &last.commit, &p.snapshot) else {
        return Ok(None);
    };
    let bytes = pack.len();
    // The look asked about the same recorded snapshot: the re-sync goes into its execution.
    let continued = match early.filter(|e| e.synced.commit == last.commit) {
        Some(e) => continued_delta(ctx, p, plan, e, &pack)?,
        None => None,
    };
    let report = match continued {
        Some(report) => report,
        None => match standalone_delta(p, plan, &last.commit, pack)? {
            Some(report) => report,
            None => return Ok(None),
        },
    };
    if let Some(why) = &report.delta_refused {
        ctx.note(format!(
            "the remote clone is not at {} as this checkout's last sync left it ({why}): syncing through origin",
            short(&last.commit)
        ));
        return Ok(None);
    }
    ctx.note(format!(
        "sent the snapshot's new objects straight to the remote clone ({}, against {}, the snapshot it was at): nothing pushed to origin",
        crate::support::ui::human_bytes(bytes as u64),
        short(&last.commit)
    ));
    Ok(Some(report))
}

/// [`via_delta`] in the look's execution: the re-sync's script and its pack sent into it as soon
/// as the snapshot is made. It runs under the look's lock, after the look; when the look found
/// the clone as the record says, what it found clean (the clone's status, the recorded
/// submodules') is not looked at again. `None`: the server refused the look's session.
fn continued_delta(
    ctx: &Context,
    p: &Prepared,
    plan: &remote::Plan,
    early: Early,
    pack: &[u8],
) -> Result<Option<remote::Report>> {
    use crate::remote::Operation;
    let clean: Vec<String> = early
        .synced
        .modules
        .iter()
        .flatten()
        .map(|(path, _)| path.clone())
        .collect();
    let base = early.synced.commit.clone();
    let ask = remote::StepAsk {
        plan,
        step: remote::Step::ContinuedDelta {
            base: &base,
            snapshot: &p.snapshot,
            clean: &clean,
        },
        host: &p.ssh.host,
    };
    let script = crate::remote::ssh::framed(&remote::CloneStep::script(&ask)?);
    let Some((answer, out)) = early.finish(&p.ssh, &[&script, pack])? else {
        return Ok(None);
    };
    say_lock(ctx, &answer, &p.repo_path);
    remote::CloneStep::reply(&ask, &out).map(Some)
}

/// [`via_delta`] in an execution of its own (`None`: the server refused the session).
fn standalone_delta(
    p: &Prepared,
    plan: &remote::Plan,
    base: &str,
    pack: Vec<u8>,
) -> Result<Option<remote::Report>> {
    let ask = remote::StepAsk {
        plan,
        step: remote::Step::Delta {
            base,
            snapshot: &p.snapshot,
        },
        host: &p.ssh.host,
    };
    let sent = crate::remote::run_sending::<remote::CloneStep>(
        &p.ssh,
        &ask,
        Some(Box::new(move |w: &mut dyn std::io::Write| {
            w.write_all(&pack)
        })),
    );
    // A session the server refused (MaxSessions: other tools on the same master) never started
    // the script; the sync through origin waits for a session and tries again.
    let refused = |e: &ToolError| {
        e.command
            .as_ref()
            .is_some_and(|c| crate::remote::ssh::SshFailure::session_refused(&c.stderr_tail))
    };
    match sent {
        Err(e) if refused(&e) => Ok(None),
        sent => sent.map(Some),
    }
}

/// One pack of the objects `snapshot` reaches and `base` does not (as `git pack-objects --revs`
/// makes it, here by libgit2: no process started), or `None` when `base` is not here or the pack would be over [`DELTA_MAX_BYTES`].
fn new_objects(local: &LocalRepo, base: &str, snapshot: &str) -> Option<Vec<u8>> {
    let (base, snapshot) = (
        git2::Oid::from_str(base).ok()?,
        git2::Oid::from_str(snapshot).ok()?,
    );
    local.repo.find_commit(base).ok()?;
    let mut walk = local.repo.revwalk().ok()?;
    walk.push(snapshot).ok()?;
    walk.hide(base).ok()?;
    let mut pack = local.repo.packbuilder().ok()?;
    pack.insert_walk(&mut walk).ok()?;
    let mut buf = git2::Buf::new();
    pack.write_buf(&mut buf).ok()?;
    (!buf.is_empty() && buf.len() <= DELTA_MAX_BYTES).then(|| buf.to_vec())
}

/// `subs`, `known`: the submodules' repositories here, whose commits the clone's execution takes
/// when it lacks them ([`super::tracked_packs`]); what this machine's records say of the clone.
fn via_origin(
    ctx: &Context,
    local: &LocalRepo,
    ssh: &Ssh,
    plan: &remote::Plan,
    sha: &str,
    subs: &[crate::repo::submodules::Submodule],
    known: super::tracked_packs::Known,
) -> Result<(remote::Report, Option<bool>)> {
    push_to_origin(local, plan, sha)?;
    // `SLURM_TOOLS_SUBMODULE_PUSHES=1`: each submodule pushed in a session of its own, then a
    // second execution, as before the packs travelled in the clone's (the benchmark's baseline,
    // scripts/bench-repos).
    let pushes = std::env::var_os("SLURM_TOOLS_SUBMODULE_PUSHES").is_some_and(|v| v == "1");
    if !plan.modules.is_empty() && plan.lfs.is_empty() && !pushes {
        let talked = super::tracked_packs::origin_with_packs(ctx, local, ssh, plan, subs, known);
        match talked {
            Ok(Some(c)) => {
                // 4f: the temporary branch goes, whatever happened remotely (its deletion started
                // once the snapshot was checked out).
                let deleted = match c.deleting {
                    Some(d) => d.wait(ctx),
                    None => delete_temp_ref(ctx, local, plan.url, plan.temp),
                };
                return Ok((c.report, Some(deleted)));
            }
            Ok(None) => {}
            Err(e) => {
                delete_temp_ref(ctx, local, plan.url, plan.temp);
                return Err(e);
            }
        }
    }
    let result = step(ssh, plan, remote::Step::Origin);
    crate::support::testhook::pause("sync-tracked:checked-out");
    // 4f: the temporary branch goes, whatever happened remotely.
    let deleted = delete_temp_ref(ctx, local, plan.url, plan.temp);
    result.map(|r| (r, Some(deleted)))
}

/// The snapshot to origin as the temporary branch (recorded first, so an interrupted run's
/// branch is found and deleted by the next sync).
/// A push that shows git's own progress (objects counted and written, bytes, speed) when a
/// person watches (stderr is a terminal: a first sync of a long history takes a while), and
/// says nothing otherwise (logs and pipelines get no carriage-return lines).
fn with_progress(push: crate::support::process::Cmd) -> crate::support::process::Cmd {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        push.arg("--progress").stderr_through()
    } else {
        push.arg("--quiet")
    }
}

fn push_to_origin(local: &LocalRepo, plan: &remote::Plan, sha: &str) -> Result<()> {
    let refspec = format!("{sha}:refs/heads/{}", plan.temp);
    pending::record(local, plan.url, plan.temp);
    let out = with_progress(local.git().args(["push", "--porcelain"]))
        .args(["--", plan.url, &refspec])
        .deadline(PUSH_DEADLINE)
        .run()
        .map_err(|e| ToolError::remote(format!("cannot run git: {e}")).with_hint("install git"));
    let failed = match out {
        Ok(o) if o.success() => None,
        Ok(o) => {
            let text = format!("{}\n{}", o.stderr_tail, String::from_utf8_lossy(&o.stdout));
            let (cause, hint) = push_failure(&text, plan.url, plan.temp, o.timed_out);
            Some(
                ToolError::remote(format!(
                    "git could not push the snapshot to origin as the temporary branch {}: {cause}",
                    plan.temp
                ))
                .with_hint(hint)
                .with_command(o.record()),
            )
        }
        Err(e) => Some(e),
    };
    if let Some(e) = failed {
        pending::forget(local, plan.url, plan.temp);
        return Err(e);
    }
    crate::support::testhook::pause("sync-tracked:pushed");
    Ok(())
}

/// What a failed push to origin means, from git's own words (stderr and `--porcelain` lines),
/// and the hint that fits that cause.
fn push_failure(git_said: &str, url: &str, temp: &str, timed_out: bool) -> (String, String) {
    let s = git_said.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| s.contains(w));
    if timed_out {
        (
            "the push did not finish in 30 minutes".into(),
            "check the network to origin; nothing was changed locally, rerun the sync".into(),
        )
    } else if has(&[
        "cannot lock ref",
        "unable to create",
        ".lock': file exists",
        "failed to lock",
        "incorrect old value",
    ]) {
        (
            "origin was busy updating the same reference (git could not lock it)".into(),
            "another push to origin was under way at that instant; rerun the sync (nothing was changed locally)".into(),
        )
    } else if has(&[
        "hook declined",
        "pre-receive hook",
        "protected branch",
        "gh006",
        "not allowed to push",
        "denied to",
    ]) {
        (
            "origin's rules refused the temporary branch (a hook or branch protection)".into(),
            "allow pushes of branches named <user>_<model>_... on origin, or sync with --via direct (nothing goes through origin)".into(),
        )
    } else if has(&[
        "non-fast-forward",
        "fetch first",
        "[rejected]",
        "stale info",
    ]) {
        (
            format!("origin already has a branch {temp} with other content (git: rejected)"),
            format!("temporary branch names are unique per sync, so something else made that branch: delete it (git push {url} --delete {temp}) and rerun"),
        )
    } else if has(&[
        "permission denied",
        "authentication failed",
        "could not read from remote",
        "could not resolve",
        "connection refused",
        "connection timed out",
        "does not appear to be a git repository",
        "repository not found",
    ]) {
        (
            "origin could not be reached or refused the credentials".into(),
            "check that `git push` to `repo_url` works from this machine (credentials, network); nothing was changed locally".into(),
        )
    } else {
        (
            "see git's words in this error".into(),
            "check that you can push to `repo_url`; nothing was changed locally".into(),
        )
    }
}

fn delete_temp_ref(ctx: &Context, local: &LocalRepo, url: &str, temp: &str) -> bool {
    let ok = pending::delete(local, url, temp);
    if !ok {
        warn_not_deleted(ctx, url, temp);
    }
    ok
}

fn warn_not_deleted(ctx: &Context, url: &str, temp: &str) {
    ctx.warn(format!(
        "could not delete the temporary branch {temp} on origin; the next sync retries, or run: git push {url} --delete {temp}"
    ));
}

/// `git push` over the ssh connection into the remote clone (or a submodule's repository in
/// it); when it fails, the clone's sync lock is released before the error is returned.
fn push_over_ssh(
    from: &LocalRepo,
    git_ssh: &str,
    target: &str,
    refspec: &str,
    what: &str,
    ssh: &Ssh,
    plan: &remote::Plan,
) -> Result<()> {
    let pushed = run_git(
        with_progress(
            from.git()
                .env("GIT_SSH_COMMAND", git_ssh)
                .args(["push", "--porcelain"]),
        )
        .args(["--", target, refspec])
        .deadline(PUSH_DEADLINE),
        what,
        PUSH_HINT,
    );
    if pushed.is_err() {
        release_lock(ssh, plan);
    }
    pushed.map(|_| ())
}

fn via_direct(
    local: &LocalRepo,
    ssh: &Ssh,
    plan: &remote::Plan,
    sha: &str,
) -> Result<remote::Report> {
    let prepared = step(ssh, plan, remote::Step::DirectPrepare)?;
    let git_ssh = ssh.git_ssh_command()?;
    let target = format!("{}:{}", ssh.host, plan.repo);
    let refspec = format!("+{sha}:refs/slurm-tools/incoming/{}", plan.temp);
    push_over_ssh(
        local,
        &git_ssh,
        &target,
        &refspec,
        "pushing the snapshot straight into the remote clone",
        ssh,
        plan,
    )?;
    let mut report = step(ssh, plan, remote::Step::DirectCheckout)?;
    report.created |= prepared.created;
    if report.broke_stale_lock.is_none() {
        report.broke_stale_lock = prepared.broke_stale_lock;
    }
    if report.waited.is_none() {
        report.waited = prepared.waited;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_failed_push_names_its_cause() {
        let cause = |said: &str| super::push_failure(said, "/o.git", "u_m_1_ab", false);
        let (c, h) =
            cause(" ! [rejected]        x -> u_m_1_ab (non-fast-forward)\nerror: failed to push");
        assert!(
            c.contains("already has a branch") && h.contains("--delete u_m_1_ab"),
            "{c} / {h}"
        );
        let (c, _) =
            cause("error: cannot lock ref 'refs/heads/u_m_1_ab': reference already exists");
        assert!(c.contains("busy"), "{c}");
        let (c, h) = cause("remote: error: GH006: Protected branch update failed\n ! [remote rejected] x (pre-receive hook declined)");
        assert!(
            c.contains("rules refused") && h.contains("--via direct"),
            "{c}"
        );
        let (c, _) = cause("git@host: Permission denied (publickey).\nfatal: Could not read from remote repository.");
        assert!(c.contains("credentials"), "{c}");
        assert!(super::push_failure("", "/o", "t", true)
            .0
            .contains("30 minutes"));
    }
}
