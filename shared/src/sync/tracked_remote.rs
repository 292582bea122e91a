//! The remote side of the tracked sync, as `/bin/sh` scripts (docs/migrating.md, step 4a, 4b, 4e, 4f.1).
//!
//! The remote clone is guarded by a lock directory beside it (`<repo>.slurm-tools-sync.lock`,
//! `mkdir` is atomic; `shared/src/remote/sh/lock.sh`), so concurrent syncs into the same
//! clone take turns (a second one waits up to [`LOCK_WAIT_SECS`], and says for how long and
//! behind whom), never interleave. A lock older than 30 minutes is taken to be left by a killed
//! run and is broken, and said so.
//! Scripts report with tagged lines (`STASHED <sha>`, `HEAD <sha>`, ...) and fail with distinct
//! exit codes, mapped to messages by [`failure`].

use crate::remote::exit::{self, ExitCodes, SyncTracked as Exit};
use crate::remote::quote::Script;
use crate::{Result, ToolError};

/// How long a sync waits for another run's lock on the clone before it gives up.
pub const LOCK_WAIT_SECS: u64 = 600;

pub struct Plan<'a> {
    pub repo: &'a str,
    pub url: &'a str,
    pub temp: &'a str,
    pub work: &'a str,
    pub refresh: &'a [String],
    /// The local repository's root commits: a clone that has none of them holds another
    /// repository, and is never checked out over (unless `allow_unrelated`).
    pub roots: &'a [String],
    pub allow_unrelated: bool,
    /// Seconds to wait for another run's lock on the clone ([`LOCK_WAIT_SECS`] by default).
    pub lock_wait: u64,
    /// The checked-out submodules, parents first: each gets a repository in the remote clone
    /// (git's layout: `.git/<module_dir>`) before their snapshots are pushed into it.
    pub modules: &'a [Module],
    /// The Git LFS objects the snapshot's LFS files point at (their oids).
    pub lfs: &'a [String],
    /// A person watches (our stderr is a terminal): a first clone says how far it got
    /// (`shared/src/remote/sh/clone-progress.sh`).
    pub show_progress: bool,
}

/// A submodule as the remote side needs it.
pub struct Module {
    pub path: String,
    pub module_dir: String,
    pub commit: String,
    pub name: String,
    pub url: String,
    pub parent: String,
}

fn header(p: &Plan) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    exit::assign::<Exit>(&mut s)?;
    s.assign("repo", p.repo)?;
    s.assign("url", p.url)?;
    s.assign("temp", p.temp)?;
    s.assign("work", p.work)?;
    s.assign("ours", crate::repo::manifest::MANIFEST)?;
    s.assign("ours_exclude", crate::repo::manifest::EXCLUDE)?;
    s.assign("ours_aside", crate::repo::manifest::UNEXCLUDABLE)?;
    s.assign("roots", &p.roots.join(" "))?;
    s.assign("lfs_oids", &p.lfs.join(" "))?;
    s.assign(
        "allow_unrelated",
        if p.allow_unrelated { "yes" } else { "no" },
    )?;
    s.assign("progress", if p.show_progress { "yes" } else { "no" })?;
    // yes only in a re-sync that follows the unchanged look ([`continued_delta_script`]).
    s.assign("clean_known", "no")?;
    s.raw(crate::remote::CLONE_PROGRESS);
    s.raw("set --");
    for r in p.refresh {
        s.arg(r)?;
    }
    s.raw("\n");
    s.raw(crate::remote::TRACKED_SETUP);
    s.raw(crate::remote::HEAD_OF);
    // The lock is taken in the name of this sync's snapshot branch.
    crate::remote::Lock::of_clone(
        p.repo,
        p.temp,
        p.lock_wait,
        Exit::Locked.code(),
        Exit::Mkdir.code(),
    )
    .define(&mut s)?;
    // The clone's parent, made when missing (its name computed here: no process there).
    s.assign("repo_parent", &parent_dir(p.repo))?;
    s.raw("[ -d \"$repo_parent\" ] || mkdir -p -- \"$repo_parent\" || exit \"$E_MKDIR\"\n");
    Ok(s)
}

/// The directory holding `path`, as `dirname` says it: trailing slashes left out, `.` for a bare
/// name, `/` at the top.
fn parent_dir(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    match trimmed.rfind('/') {
        None => ".".into(),
        Some(i) => match trimmed[..i].trim_end_matches('/') {
            "" => "/".into(),
            parent => parent.into(),
        },
    }
}

/// `--via origin`: one round trip after the push to origin.
pub fn origin_script(p: &Plan) -> Result<Script> {
    origin_script_then(p, Followups::Kept)
}

/// [`origin_script`] whose submodules' commits, when the clone lacks some, come in the same
/// execution: the answer (`SUB_MISSING`, `SUB_BASE`) ends with [`END_OF_ANSWER`], and the
/// execution waits under the lock for [`modules_packs_script`] (or [`followups_kept_script`])
/// (`shared/src/remote/sh/tracked-continue.sh`). Without submodules, or with LFS content to
/// send first, it is [`origin_script`].
pub fn origin_then_packs_script(p: &Plan) -> Result<Script> {
    origin_script_then(p, Followups::Continued)
}

fn origin_script_then(p: &Plan, then: Followups) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("via=origin\ntake_lock\ntrap release_lock EXIT\n");
    s.raw(crate::remote::TRACKED_CLONE);
    s.raw(crate::remote::CLONE_CHANGES);
    s.raw(crate::remote::TRACKED_CHECKOUT);
    prepare_modules(&mut s, p, &[], then)?;
    Ok(s)
}

/// What a script whose submodules lack their commits does after saying which.
#[derive(Clone, Copy, PartialEq)]
enum Followups {
    /// It ends, the lock kept for the steps that follow (pushes, [`modules_script`]).
    Kept,
    /// It waits for its second part in the same execution (only without LFS content).
    Continued,
}

/// After the checkout: the LFS objects the clone lacks (said, to be sent), and a repository for
/// each checked-out submodule, with the submodules whose snapshot commit it lacks said
/// (`SUB_MISSING`: only those are pushed); the lock stays taken for [`lfs_script`] and
/// [`modules_script`], which finish the job. When every submodule's commit is there already
/// (a re-sync that changed none of them) and no LFS content follows, the submodules are checked
/// out here, in the same execution (`MODULES_DONE`): nothing is pushed and no step follows.
///
/// `clean`: the submodules the look just before found at their commit with no edit (each
/// checked out without a second look).
fn prepare_modules(s: &mut Script, p: &Plan, clean: &[String], then: Followups) -> Result<()> {
    if p.modules.is_empty() && p.lfs.is_empty() {
        return Ok(());
    }
    if !p.lfs.is_empty() {
        s.raw(crate::remote::TRACKED_LFS);
        s.raw("lfs_need\n");
    }
    if !p.modules.is_empty() {
        s.raw(crate::remote::TRACKED_MODULES);
        s.raw("modules_have=yes\n");
        for m in p.modules {
            s.raw("ensure_module");
            s.arg(&m.path)?;
            s.arg(&m.module_dir)?;
            s.raw("\nhas_commit");
            s.arg(&m.path)?;
            s.arg(&m.commit)?;
            s.raw(" || modules_have=no\n");
        }
        if p.lfs.is_empty() {
            s.raw("if [ \"$modules_have\" = yes ]; then\n");
            checkout_modules(s, p, clean)?;
            s.raw("echo MODULES_DONE\nexit 0\nfi\n");
        }
    }
    if then == Followups::Continued && p.lfs.is_empty() && !p.modules.is_empty() {
        s.raw(crate::remote::TRACKED_CONTINUE);
    } else {
        s.raw(FOLLOWUPS_KEPT);
    }
    Ok(())
}

/// The lock kept for the steps that follow; said.
const FOLLOWUPS_KEPT: &str = "trap - EXIT\necho FOLLOWUPS_READY\n";

/// The second part of [`origin_then_packs_script`]'s execution: the packs of the submodules in
/// `packs` (path, size in bytes) follow it on stdin, in that order; each goes into its
/// repository (unless that has the commit already), then every submodule is checked out,
/// parents first, and the lock given back.
pub fn modules_packs_script(p: &Plan, packs: &[(&str, u64)]) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("trap release_lock EXIT\n");
    s.raw(crate::remote::TRACKED_MODULES);
    for (path, size) in packs {
        // Its commit: a pack sent before the clone said what it lacks is dropped where the
        // repository has it already.
        let commit = p
            .modules
            .iter()
            .find(|m| m.path == *path)
            .map_or("", |m| m.commit.as_str());
        s.raw("sub_unpack");
        s.arg(path)?;
        s.arg(&size.to_string())?;
        s.arg(commit)?;
        s.raw("\n");
    }
    checkout_modules(&mut s, p, &[])?;
    Ok(s)
}

/// The second part of [`origin_then_packs_script`]'s execution when the packs cannot be made
/// here: the lock kept for the pushes and [`modules_script`], as after [`origin_script`].
pub fn followups_kept_script() -> Script {
    let mut s = Script::new();
    s.raw(FOLLOWUPS_KEPT);
    s
}

/// Each submodule checked out at its snapshot commit, parents first ([`modules_script`]);
/// those in `clean` without a look for cluster-side edits.
fn checkout_modules(s: &mut Script, p: &Plan, clean: &[String]) -> Result<()> {
    for m in p.modules {
        s.raw("sub_checkout");
        s.arg(&m.path)?;
        s.arg(&m.commit)?;
        s.arg(&m.name)?;
        s.arg(&m.url)?;
        s.arg(&m.parent)?;
        if clean.contains(&m.path) {
            s.raw(" clean");
        }
        s.raw("\n");
    }
    Ok(())
}

/// The LFS objects the clone lacked arrive (a tar stream on stdin, when `payload`), the clone is
/// set up for LFS (`git lfs install --local`: its status then sees content, not pointers), and
/// the LFS files get their content. Keeps the lock when submodules follow.
pub fn lfs_script(p: &Plan, payload: bool) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("keep_lock \"$E_LOST_LOCK\"\n");
    if p.modules.is_empty() {
        s.raw("trap release_lock EXIT\n");
    } else {
        // Submodules follow and need the lock: given back here only when this step fails.
        s.raw("trap release_on_failure EXIT\n");
    }
    s.raw(crate::remote::TRACKED_LFS);
    s.raw(if payload {
        "lfs_checkout yes\n"
    } else {
        "lfs_checkout no\n"
    });
    Ok(s)
}

/// After the submodules' snapshots were pushed: check each out, parents first, under the lock
/// the checkout kept; then release it.
pub fn modules_script(p: &Plan) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("keep_lock \"$E_LOST_LOCK\"\ntrap release_lock EXIT\n");
    s.raw(crate::remote::TRACKED_MODULES);
    checkout_modules(&mut s, p, &[])?;
    Ok(s)
}

/// `--via direct`, before the push: take the lock (kept until the checkout) and make sure a
/// repository is there to push into.
pub fn direct_prepare_script(p: &Plan) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("via=direct\ntake_lock\ntrap release_lock EXIT\n");
    s.raw(crate::remote::TRACKED_CLONE);
    s.raw("trap - EXIT\necho READY\n");
    Ok(s)
}

/// `--via direct`, after the push: check out under the lock taken before, then release it.
pub fn direct_checkout_script(p: &Plan) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("via=direct\nkeep_lock \"$E_LOST_LOCK\"\ntrap release_lock EXIT\n");
    s.raw(crate::remote::CLONE_CHANGES);
    s.raw(crate::remote::TRACKED_CHECKOUT);
    prepare_modules(&mut s, p, &[], Followups::Kept)?;
    Ok(s)
}

/// A re-sync in one execution: under the clone's lock, when it is at `base` (else
/// `DELTA_REFUSED`), the pack on stdin unpacked and `snapshot` checked out as after a direct
/// push, with the submodules ([`prepare_modules`]).
pub fn delta_script(p: &Plan, base: &str, snapshot: &str) -> Result<Script> {
    delta_script_after(p, base, snapshot, None)
}

/// [`delta_script`] as the second part of [`unchanged_script`]'s execution when the snapshot
/// turned out new (`shared/src/remote/sh/tracked-continue.sh`): the lock is the look's, already
/// taken, and what the look found clean (the clone, the submodules in `clean`) is not looked at
/// again.
pub fn continued_delta_script(
    p: &Plan,
    base: &str,
    snapshot: &str,
    clean: &[String],
) -> Result<Script> {
    delta_script_after(p, base, snapshot, Some(clean))
}

/// [`delta_script`] on its own (`look`: `None`), or after the look that found `look`'s
/// submodules clean.
fn delta_script_after(
    p: &Plan,
    base: &str,
    snapshot: &str,
    look: Option<&[String]>,
) -> Result<Script> {
    let mut s = header(p)?;
    match look {
        None => s.raw("via='delta'\ntake_lock\ntrap release_lock EXIT\n"),
        // The look's lock, already taken; what it found clean is not looked at again.
        Some(_) => s
            .raw("via='delta'\ntrap release_lock EXIT\n")
            .raw(crate::remote::TRACKED_AFTER_LOOK),
    };
    s.assign("base", base)?;
    s.assign("snapshot", snapshot)?;
    s.raw(crate::remote::TRACKED_DELTA);
    s.raw(crate::remote::CLONE_CHANGES);
    s.raw(crate::remote::TRACKED_CHECKOUT);
    prepare_modules(&mut s, p, look.unwrap_or_default(), Followups::Kept)?;
    Ok(s)
}

/// An unchanged re-sync: under the clone's lock, is the clone as this machine's last sync of
/// `snapshot` left it (`UNCHANGED`, else `CHANGED <what>`)? `modules`: each initialised
/// submodule's path and snapshot commit.
pub fn unchanged_script(p: &Plan, snapshot: &str) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("take_lock\ntrap release_lock EXIT\n");
    s.assign("snapshot", snapshot)?;
    s.raw(crate::remote::CLONE_CHANGES);
    s.raw("set --");
    for m in p.modules {
        s.arg(&m.path)?;
        s.arg(&m.commit)?;
    }
    s.raw("\n");
    s.raw(crate::remote::TRACKED_UNCHANGED);
    Ok(s)
}

/// [`unchanged_script`], started before the snapshot is made, then waiting for a second part
/// (`shared/src/remote/sh/tracked-continue.sh`): its answer ends with [`END_OF_ANSWER`]; a
/// closed stdin ends it (the lock given back), a framed [`continued_delta_script`] with its pack
/// makes the re-sync in the same execution.
pub fn unchanged_then_script(p: &Plan, snapshot: &str) -> Result<Script> {
    let mut s = unchanged_script(p, snapshot)?;
    s.raw(crate::remote::TRACKED_CONTINUE);
    Ok(s)
}

/// The line that ends [`unchanged_then_script`]'s answer (no tagged line starts with `-`).
pub const END_OF_ANSWER: &[u8] = b"--end-of-answer--\n";

/// `--via direct`, after a failed push: give the lock back.
pub fn direct_release_script(p: &Plan) -> Result<Script> {
    let mut s = header(p)?;
    s.raw("release_lock\n");
    Ok(s)
}

/// One step of the tracked sync on the cluster's clone: which script it runs.
#[derive(Clone, Copy)]
pub enum Step<'s> {
    /// `--via origin`: fetch, stash, check out ([`origin_script`]).
    Origin,
    /// [`Step::Origin`] that waits for its submodules' packs ([`origin_then_packs_script`]).
    OriginThenPacks,
    /// Its second part: the packs on stdin, every submodule checked out
    /// ([`modules_packs_script`]).
    ModulesPacks { packs: &'s [(&'s str, u64)] },
    /// `--via direct`, before the push ([`direct_prepare_script`]).
    DirectPrepare,
    /// `--via direct`, after the push ([`direct_checkout_script`]).
    DirectCheckout,
    /// After a failed push: the lock given back ([`direct_release_script`]).
    DirectRelease,
    /// The LFS content, with the objects on stdin when there are any ([`lfs_script`]).
    Lfs { payload: bool },
    /// The submodules checked out ([`modules_script`]).
    Modules,
    /// Is the clone as the last sync of this snapshot left it ([`unchanged_script`])?
    Unchanged { snapshot: &'s str },
    /// A re-sync against the snapshot the clone is at, its objects on stdin ([`delta_script`]).
    Delta { base: &'s str, snapshot: &'s str },
    /// [`Step::Delta`] as the second part of the unchanged look's execution
    /// ([`continued_delta_script`]).
    ContinuedDelta {
        base: &'s str,
        snapshot: &'s str,
        clean: &'s [String],
    },
}

/// What [`CloneStep`] is given: the plan, the step, and the host, for what a failure names.
pub struct StepAsk<'a> {
    pub plan: &'a Plan<'a>,
    pub step: Step<'a>,
    pub host: &'a str,
}

/// One execution of the tracked sync on the cluster: its step's script, and its tagged lines
/// read into a [`Report`]; a non-zero exit is the error [`failure`] names (with the command).
pub struct CloneStep<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> crate::remote::Operation for CloneStep<'a> {
    type Params = StepAsk<'a>;
    type Reply = Report;
    /// A first clone of a large repository: as long as it takes, within half an hour.
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

    fn deadline(a: &StepAsk<'a>) -> std::time::Duration {
        match a.step {
            Step::DirectRelease => std::time::Duration::from_secs(60),
            _ => Self::DEADLINE,
        }
    }

    /// A first clone says how far it got where a person watches; the LFS step's objects and
    /// an unchanged re-sync's look say nothing on the way.
    fn shows_progress(a: &StepAsk<'a>) -> bool {
        a.plan.show_progress
            && matches!(
                a.step,
                Step::Origin
                    | Step::OriginThenPacks
                    | Step::DirectPrepare
                    | Step::DirectCheckout
                    | Step::Modules
            )
    }

    fn script(a: &StepAsk<'a>) -> Result<Script> {
        let p = a.plan;
        match a.step {
            Step::Origin => origin_script(p),
            Step::OriginThenPacks => origin_then_packs_script(p),
            Step::ModulesPacks { packs } => modules_packs_script(p, packs),
            Step::DirectPrepare => direct_prepare_script(p),
            Step::DirectCheckout => direct_checkout_script(p),
            Step::DirectRelease => direct_release_script(p),
            Step::Lfs { payload } => lfs_script(p, payload),
            Step::Modules => modules_script(p),
            Step::Unchanged { snapshot } => unchanged_script(p, snapshot),
            Step::Delta { base, snapshot } => delta_script(p, base, snapshot),
            Step::ContinuedDelta {
                base,
                snapshot,
                clean,
            } => continued_delta_script(p, base, snapshot, clean),
        }
    }

    fn reply(a: &StepAsk<'a>, out: &crate::support::process::Output) -> Result<Report> {
        let report = parse(&out.stdout_text());
        if !out.success() {
            return Err(failure(out.code, &report, a.host, a.plan.repo).with_command(out.record()));
        }
        Ok(report)
    }
}

/// What the tagged lines said.
#[derive(Debug, Default)]
pub struct Report {
    pub head: Option<String>,
    pub stash: Option<(String, String)>,
    pub refreshed: Vec<String>,
    pub created: bool,
    pub broke_stale_lock: Option<String>,
    /// (seconds waited, holder) when the lock was still held after the wait.
    pub locked_by: Option<(u64, String)>,
    /// (seconds waited, holder) when another run held the lock and this one waited for it.
    pub waited: Option<(u64, String)>,
    pub origin_differs: Option<String>,
    /// The remote clone's HEAD and origin, when it holds another repository.
    pub unrelated: Option<String>,
    /// Submodules given a repository now (path).
    pub modules_created: Vec<String>,
    /// (path, HEAD) of each submodule checked out.
    pub module_heads: Vec<(String, String)>,
    /// (path, stash commit) of each submodule whose cluster-side edits were stashed.
    pub module_stashes: Vec<(String, String)>,
    /// The submodule the script failed on.
    pub module_failed: Option<String>,
    /// LFS objects the clone lacks.
    pub lfs_need: Vec<String>,
    /// The cluster has no git-lfs.
    pub lfs_no_tool: bool,
    /// Submodules whose snapshot commit the clone lacks (to be pushed).
    pub modules_missing: Vec<String>,
    /// (path, HEAD) of those among them whose repository there has a HEAD.
    pub module_bases: Vec<(String, String)>,
    /// Every submodule was checked out in the same execution (their commits were there).
    pub modules_done: bool,
    /// A re-sync's pack was not taken: the clone is not at the snapshot it was made against.
    pub delta_refused: Option<String>,
    /// An unchanged re-sync's look: the clone is as the last sync left it.
    pub unchanged: bool,
    /// ... or what changed in it since.
    pub changed: Option<String>,
}

/// `<seconds> <holder>` of the lock's WAITED and LOCKED lines.
pub fn waited_behind(rest: &str) -> (u64, String) {
    let (secs, holder) = rest.split_once(' ').unwrap_or((rest, ""));
    (secs.trim().parse().unwrap_or(0), holder.trim().to_string())
}

pub fn parse(text: &str) -> Report {
    let mut r = Report::default();
    for line in text.lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        match tag {
            "HEAD" => r.head = Some(rest.trim().to_string()),
            "STASHED" => {
                let (sha, msg) = rest.split_once(' ').unwrap_or((rest, ""));
                r.stash = Some((sha.to_string(), msg.to_string()));
            }
            "REFRESHED" => r.refreshed.push(rest.to_string()),
            "CREATED" => r.created = true,
            "BROKE_STALE_LOCK" => r.broke_stale_lock = Some(rest.to_string()),
            "LOCKED" => r.locked_by = Some(waited_behind(rest)),
            "WAITED" => r.waited = Some(waited_behind(rest)),
            "ORIGIN_DIFFERS" => r.origin_differs = Some(rest.to_string()),
            "UNRELATED" => r.unrelated = Some(rest.to_string()),
            "SUB_CREATED" => r.modules_created.push(rest.to_string()),
            "SUB_HEAD" => {
                let (sha, path) = rest.split_once(' ').unwrap_or((rest, ""));
                r.module_heads.push((path.to_string(), sha.to_string()));
            }
            "SUB_STASHED" => {
                let (sha, path) = rest.split_once(' ').unwrap_or((rest, ""));
                r.module_stashes.push((path.to_string(), sha.to_string()));
            }
            "SUB_FAILED" => r.module_failed = Some(rest.to_string()),
            "SUB_MISSING" => r.modules_missing.push(rest.to_string()),
            "SUB_BASE" => {
                let (sha, path) = rest.split_once(' ').unwrap_or((rest, ""));
                r.module_bases.push((path.to_string(), sha.to_string()));
            }
            "MODULES_DONE" => r.modules_done = true,
            "DELTA_REFUSED" => r.delta_refused = Some(rest.to_string()),
            "LFS_NEED" => r.lfs_need.push(rest.trim().to_string()),
            "LFS_NO_TOOL" => r.lfs_no_tool = true,
            "UNCHANGED" => r.unchanged = true,
            "CHANGED" => r.changed = Some(rest.to_string()),
            _ => {}
        }
    }
    r
}

/// The error for a script's non-zero exit.
pub fn failure(code: Option<i32>, report: &Report, host: &str, repo: &str) -> ToolError {
    let (msg, hint) = match Exit::from_status(code) {
        Some(Exit::Locked) => {
            let (secs, holder) = report.locked_by.clone().unwrap_or_default();
            (
                format!(
                    "another sync into {repo} on {host} held the clone's lock for the whole {secs} s this one waited (held by {})",
                    if holder.is_empty() { "an unknown run" } else { &holder }
                ),
                format!("wait for it to finish and rerun; a lock left by a killed run ({repo}.slurm-tools-sync.lock) is broken automatically after 30 minutes, or remove it by hand"),
            )
        }
        Some(Exit::Clone) => (
            format!("could not create the remote clone {repo} on {host}"),
            "check that the cluster can reach `repo_url` with your credentials there (git's stderr is in this error)".to_string(),
        ),
        Some(Exit::Fetch) => (
            format!("git fetch in {repo} on {host} failed"),
            "check that the cluster can reach origin (git's stderr is in this error)".to_string(),
        ),
        Some(Exit::Checkout) => (
            format!("git checkout of the snapshot in {repo} on {host} failed"),
            "see git's stderr in this error; the remote clone's edits, if any, were stashed first".to_string(),
        ),
        Some(Exit::Refresh) => (
            format!("re-checking out a refresh path in {repo} on {host} failed"),
            "check `refresh_paths`".to_string(),
        ),
        Some(Exit::Mkdir) => (
            format!("could not create the directories for {repo} on {host}"),
            "check `default_user_root_dir`/`remote_repo_path`/`remote_work_dir` and the remote disk".to_string(),
        ),
        Some(Exit::Enter) => (format!("cannot enter {repo} on {host}"), "check `remote_repo_path`".to_string()),
        Some(Exit::Stash) => (
            format!("could not stash the cluster-side changes in {repo} on {host}"),
            "resolve the state of the remote clone by hand (`git status` there); nothing was checked out".to_string(),
        ),
        Some(Exit::NotARepo) => (
            format!("{repo} on {host} exists, is not empty, and is not a git repository"),
            "move it away or set `remote_repo_path` to another directory".to_string(),
        ),
        Some(Exit::Unrelated) => {
            let said = report.unrelated.as_deref().unwrap_or("");
            let (head, origin) = said.split_once(' ').unwrap_or((said, ""));
            (
                format!(
                    "the remote clone {repo} on {host} holds another repository (HEAD {}{}): it shares no commit with your local repository, so the sync refused to check your code out over it; nothing was pushed into it or changed there",
                    &head[..head.len().min(12)],
                    if origin.is_empty() { String::new() } else { format!(", origin {origin}") }
                ),
                "point `remote_repo_path` at a clone of this repository (or at a new directory: it is cloned from `repo_url`), or set `repo_root` to the repository that clone belongs to; to replace its content with this repository deliberately, rerun with --allow-unrelated".to_string(),
            )
        }
        Some(Exit::Submodule) => (
            format!(
                "checking out the submodule {} in {repo} on {host} failed",
                report.module_failed.as_deref().unwrap_or("(unknown)")
            ),
            "see git's stderr in this error; the superproject is checked out, the submodule named there is not".to_string(),
        ),
        Some(Exit::Lfs) if report.lfs_no_tool => (
            format!("the repository uses Git LFS, but git-lfs is not installed on {host} (for {repo}): the LFS files would arrive as pointer files, so nothing was checked out"),
            "install git-lfs on the cluster (a module, conda, or the static binary from https://github.com/git-lfs/git-lfs/releases in ~/bin), then sync again".to_string(),
        ),
        Some(Exit::Lfs) => (
            format!("bringing the Git LFS content into {repo} on {host} failed"),
            "see git-lfs's stderr in this error; the LFS files there may still be pointer files".to_string(),
        ),
        Some(Exit::LostLock) => (
            format!("the sync lock for {repo} on {host} was taken over by another run"),
            "rerun the sync".to_string(),
        ),
        None => (
            format!(
                "the remote checkout in {repo} on {host} failed ({})",
                crate::support::process::describe_exit(code)
            ),
            "see the command's stderr in this error".to_string(),
        ),
    };
    ToolError::remote(msg).with_hint(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clone_parent_is_what_dirname_says() {
        for path in [
            "/h/u/work/repo",
            "/h/u/work/repo/",
            "/h/u/work//repo",
            "repo",
            "work/repo",
            "/repo",
            "/",
            "//x",
            "a dir/with space/",
        ] {
            let out = std::process::Command::new("dirname")
                .args(["--", path])
                .output()
                .expect("dirname");
            let said = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
            assert_eq!(parent_dir(path), said, "{path}");
        }
    }

    #[test]
    fn every_script_passes_the_static_checks() {
        let refresh = ["cpp".to_string(), "a dir/with space".to_string()];
        let p = Plan {
            repo: "/h/u/work/repo",
            url: "/srv/origin.git",
            temp: "slurm-tools/tmp-1",
            work: "/h/u/work/repo/work_dirs",
            refresh: &refresh,
            roots: &["a".repeat(40)],
            allow_unrelated: false,
            lock_wait: 5,
            modules: &[
                lib_module(),
                Module {
                    path: "third party/lib/inner".into(),
                    module_dir: "modules/third party/lib/modules/inner".into(),
                    commit: "c".repeat(40),
                    name: "inner".into(),
                    url: "../inner.git".into(),
                    parent: "third party/lib".into(),
                },
            ],
            lfs: &["d".repeat(64)],
            show_progress: true,
        };
        // Each step of the operation runs its own script; the unchanged look is clean too.
        use crate::remote::Operation;
        for step in [
            Step::Origin,
            Step::DirectPrepare,
            Step::DirectCheckout,
            Step::DirectRelease,
            Step::Lfs { payload: false },
            Step::Modules,
            Step::Unchanged {
                snapshot: "slurm-tools/snap-it's",
            },
            Step::Delta {
                base: "base-it's",
                snapshot: "snap $(x)",
            },
            Step::ContinuedDelta {
                base: "base-it's",
                snapshot: "snap $(x)",
                clean: &["third party/lib".to_string()],
            },
        ] {
            let ask = StepAsk {
                plan: &p,
                step,
                host: "h",
            };
            let progress = CloneStep::shows_progress(&ask);
            assert_eq!(
                progress,
                !matches!(
                    step,
                    Step::DirectRelease
                        | Step::Lfs { .. }
                        | Step::Unchanged { .. }
                        | Step::Delta { .. }
                        | Step::ContinuedDelta { .. }
                )
            );
            crate::remote::script_check::assert_clean(
                "sync-tracked-step",
                CloneStep::script(&ask).unwrap().as_str(),
            );
        }
        for (name, s) in [
            ("sync-tracked-origin", origin_script(&p)),
            ("sync-tracked-direct-prepare", direct_prepare_script(&p)),
            ("sync-tracked-direct-checkout", direct_checkout_script(&p)),
            ("sync-tracked-direct-release", direct_release_script(&p)),
            ("sync-tracked-modules", modules_script(&p)),
            ("sync-tracked-lfs", lfs_script(&p, true)),
            ("sync-tracked-look", unchanged_then_script(&p, "s")),
        ] {
            crate::remote::script_check::assert_clean(name, s.unwrap().as_str());
        }
        // Without LFS content, the submodules are checked out in the same execution when the
        // clone has their commits.
        let no_lfs = Plan { lfs: &[], ..p };
        for (name, s) in [
            ("sync-tracked-origin-modules", origin_script(&no_lfs)),
            (
                "sync-tracked-origin-then-packs",
                origin_then_packs_script(&no_lfs),
            ),
            ("sync-tracked-delta", delta_script(&no_lfs, "b", "s")),
        ] {
            let s = s.unwrap();
            assert!(s.as_str().contains("MODULES_DONE"), "{name}");
            crate::remote::script_check::assert_clean(name, s.as_str());
        }
    }

    /// Without every submodule's commit there, the clone's execution through origin waits for
    /// their packs under its lock (not kept for steps of their own), and its second part unpacks
    /// each in order, then checks them all out; with LFS content, the lock is kept as before.
    #[test]
    fn the_clones_execution_waits_for_the_packs_and_its_second_part_unpacks_them_in_order() {
        let modules = [lib_module()];
        let no_lfs = bare_plan(&modules);
        let lfs = ["d".repeat(64)];
        let p = Plan {
            lfs: &lfs,
            ..bare_plan(&modules)
        };
        let waits = origin_then_packs_script(&no_lfs).unwrap();
        assert!(waits.as_str().contains("--end-of-answer--"));
        assert!(!waits.as_str().contains("FOLLOWUPS_READY"));
        assert!(origin_then_packs_script(&p)
            .unwrap()
            .as_str()
            .contains("FOLLOWUPS_READY"));
        // The clone's progress shows where a person watches; the packs' part says its own.
        use crate::remote::Operation;
        let packs = [("third party/lib", 1234), ("it's $(x)", 7)];
        for (step, progress) in [
            (Step::OriginThenPacks, true),
            (Step::ModulesPacks { packs: &packs }, false),
        ] {
            let watched = Plan {
                show_progress: true,
                ..bare_plan(&modules)
            };
            let ask = StepAsk {
                plan: &watched,
                step,
                host: "h",
            };
            assert_eq!(CloneStep::shows_progress(&ask), progress);
            crate::remote::script_check::assert_clean(
                "sync-tracked-step",
                CloneStep::script(&ask).unwrap().as_str(),
            );
        }
        let second = modules_packs_script(&no_lfs, &[("third party/lib", 1234)]).unwrap();
        let second = second.as_str();
        let unpack = second
            .find(&format!(
                "sub_unpack 'third party/lib' 1234 {}",
                "b".repeat(40)
            ))
            .unwrap();
        assert!(unpack < second.find("sub_checkout 'third party/lib' ").unwrap());
        assert!(second.contains("trap release_lock EXIT"));
        crate::remote::script_check::assert_clean("sync-tracked-modules-packs", second);
    }

    /// A top-level submodule whose path has a space in it.
    fn lib_module() -> Module {
        Module {
            path: "third party/lib".into(),
            module_dir: "modules/third party/lib".into(),
            commit: "b".repeat(40),
            name: "third party/lib".into(),
            url: "git@host:org/lib.git".into(),
            parent: String::new(),
        }
    }

    /// A plan of a clone at /r with the `modules` and nothing else.
    fn bare_plan(modules: &[Module]) -> Plan<'_> {
        Plan {
            repo: "/r",
            url: "u",
            temp: "t",
            work: "/r/w",
            refresh: &[],
            roots: &[],
            allow_unrelated: false,
            lock_wait: LOCK_WAIT_SECS,
            modules,
            lfs: &[],
            show_progress: false,
        }
    }

    /// The re-sync that follows the unchanged look in its execution: under the look's lock (not
    /// taken again: that would wait for itself), with what the look found clean not looked at
    /// again, and the lock kept for the submodules' pushes when their commits are missing.
    #[test]
    fn the_resync_after_the_look_takes_no_second_lock_and_skips_what_the_look_found_clean() {
        let modules = [
            Module {
                path: "a lib".into(),
                module_dir: "modules/a lib".into(),
                commit: "b".repeat(40),
                name: "a lib".into(),
                url: "u".into(),
                parent: String::new(),
            },
            Module {
                path: "new".into(),
                module_dir: "modules/new".into(),
                commit: "c".repeat(40),
                name: "new".into(),
                url: "u".into(),
                parent: String::new(),
            },
        ];
        let p = bare_plan(&modules);
        let look = unchanged_then_script(&p, "s").unwrap();
        let look = look.as_str();
        assert!(look.lines().any(|l| l == "take_lock"), "{look}");
        assert!(look
            .trim_end()
            .ends_with(crate::remote::TRACKED_CONTINUE.trim_end()));
        assert!(crate::remote::TRACKED_CONTINUE
            .contains(std::str::from_utf8(END_OF_ANSWER).unwrap().trim_end()));
        let after = continued_delta_script(&p, "b", "s", &["a lib".to_string()]).unwrap();
        let after = after.as_str();
        assert!(!after.lines().any(|l| l.trim() == "take_lock"), "{after}");
        assert!(after.contains(&format!(
            "via='delta'\ntrap release_lock EXIT\n{}",
            crate::remote::TRACKED_AFTER_LOOK
        )));
        assert!(after.contains("sub_checkout 'a lib' "), "{after}");
        let checkouts: Vec<&str> = after
            .lines()
            .filter(|l| l.starts_with("sub_checkout "))
            .collect();
        assert_eq!(checkouts.len(), 2, "{after}");
        assert!(checkouts[0].ends_with(" clean"), "{}", checkouts[0]);
        assert!(!checkouts[1].ends_with(" clean"), "{}", checkouts[1]);
        assert!(after.contains("echo FOLLOWUPS_READY"));
        // Every other script looks for itself.
        let alone = delta_script(&p, "b", "s").unwrap();
        assert!(alone.as_str().lines().any(|l| l == "take_lock"));
        assert!(!alone.as_str().contains(" clean\n"));
        assert!(!alone.as_str().contains(crate::remote::TRACKED_AFTER_LOOK));
    }

    #[test]
    fn a_reply_says_which_submodules_lack_their_commit_and_whether_a_pack_was_taken() {
        let r =
            parse("SUB_MISSING third_party/lib\nSUB_MISSING a b\nSUB_BASE c0ffee a b\nHEAD abc\n");
        assert_eq!(r.modules_missing, ["third_party/lib", "a b"]);
        assert_eq!(r.module_bases, [("a b".to_string(), "c0ffee".to_string())]);
        assert!(!r.modules_done);
        assert!(r.delta_refused.is_none());
        let r = parse("HEAD abc\nSUB_HEAD c1 x\nMODULES_DONE\n");
        assert!(r.modules_done);
        assert_eq!(r.module_heads, [("x".to_string(), "c1".to_string())]);
        let r = parse("DELTA_REFUSED HEAD 0123\n");
        assert_eq!(r.delta_refused.as_deref(), Some("HEAD 0123"));
        assert!(r.head.is_none());
    }

    #[test]
    fn the_clone_progress_lines_carry_the_marker_the_tools_show() {
        let marked = crate::remote::CLONE_PROGRESS
            .lines()
            .filter(|l| l.contains("printf '@@"))
            .collect::<Vec<_>>();
        assert_eq!(marked.len(), 3, "{marked:?}");
        for l in marked {
            assert!(
                l.contains(&format!("printf '{}", crate::support::process::PROGRESS)),
                "{l}"
            );
        }
    }

    #[test]
    fn the_tagged_lines_become_the_report() {
        let m = parse("SUB_CREATED a b\nSUB_STASHED 5a a b\nSUB_HEAD 99 a b\nSUB_FAILED a b/c\n");
        assert_eq!(m.modules_created, ["a b"]);
        assert_eq!(m.module_stashes, [("a b".to_string(), "5a".to_string())]);
        assert_eq!(m.module_heads, [("a b".to_string(), "99".to_string())]);
        assert_eq!(m.module_failed.as_deref(), Some("a b/c"));
        let w = parse("WAITED 12 alice_repo_20261205_ab12\nLOCKED 600 x y\n");
        assert_eq!(w.waited, Some((12, "alice_repo_20261205_ab12".into())));
        assert_eq!(w.locked_by, Some((600, "x y".into())));
        let r = parse("CREATED\nSTASHED abc123 auto-stash before remote sync t\nREFRESHED cpp\nORIGIN_DIFFERS /o.git\nBROKE_STALE_LOCK old\nHEAD def456\nnoise\n");
        assert!(r.created);
        assert_eq!(
            r.stash,
            Some(("abc123".into(), "auto-stash before remote sync t".into()))
        );
        assert_eq!(r.refreshed, ["cpp"]);
        assert_eq!(r.origin_differs.as_deref(), Some("/o.git"));
        assert_eq!(r.broke_stale_lock.as_deref(), Some("old"));
        assert_eq!(r.head.as_deref(), Some("def456"));
        assert!(parse("UNCHANGED\n").unchanged);
        let c = parse("CHANGED submodule a b edited\n");
        assert!(!c.unchanged);
        assert_eq!(c.changed.as_deref(), Some("submodule a b edited"));
    }

    #[test]
    fn each_exit_code_is_one_message_and_the_script_knows_every_name() {
        let p = bare_plan(&[]);
        let script = origin_script(&p).unwrap();
        let locked = Report {
            locked_by: Some((600, "t2".into())),
            ..Report::default()
        };
        let mut messages = std::collections::BTreeSet::new();
        for c in Exit::ALL {
            assert!(
                script
                    .as_str()
                    .contains(&format!("{}={}", c.var(), c.code())),
                "{c:?}"
            );
            let e = failure(Some(c.code()), &locked, "h", "/r");
            assert!(
                messages.insert(e.message.clone()),
                "{c:?} repeats a message"
            );
        }
        assert!(failure(Some(10), &locked, "h", "/r")
            .message
            .contains("600 s this one waited (held by t2)"));
        assert!(failure(Some(99), &locked, "h", "/r")
            .message
            .contains("exit 99"));
    }
}
