//! The untracked sync (slurm-sync-untracked; `slurm-alloc exec --sync` runs it inside its own
//! ssh execution): the untracked, non-ignored files of the working tree, as one tar stream into
//! the remote checkout (docs/migrating.md, step 4e.1), incremental against the manifest the last sync left.

use crate::contract::schema::{Skipped, SyncTracked, SyncUntracked};
use crate::remote::exit::{ExitCodes, SyncUntracked as UntrackedExit};
use crate::remote::quote::Script;
use crate::remote::ssh::Ssh;
use crate::repo::archive::{self, Item, Stats};
use crate::repo::git::{run_git, LocalRepo};
use crate::repo::manifest::{self, Entry, Manifest};
use crate::support::ui::{human_bytes, Progress};
use crate::{Context, Outcome, Result, ToolError};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the tool's flags decide.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub gzip: bool,
    pub full: bool,
    /// Seconds to wait for another run's lock on the remote clone.
    pub lock_wait: u64,
    /// Say what would be sent, and send nothing (no ssh connection at all).
    pub dry_run: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            gzip: false,
            full: false,
            lock_wait: crate::sync::tracked::LOCK_WAIT_SECS,
            dry_run: false,
        }
    }
}

crate::document_input! {
    /// What slurm-sync-untracked reads.
    pub struct Input {
        pub connection: crate::remote::ssh::Connection = part,
        pub repo_root: Option<String> = string,
        /// The remote clone (`remote_repo_path`, or derived as slurm-sync-tracked does).
        pub layout: crate::remote::layout::LayoutInput = part,
        /// The snapshot the tracked sync checked out (`sync_tracked.commit`).
        pub sync_tracked: Option<SyncTracked> = section,
        /// The local folder for log copies, left out when it is inside the repository.
        pub local: crate::state::local_dirs::LocalDirs = part,
    }
}

/// The sync: one ssh execution, two parts: the remote side first says what the last sync sent,
/// then (only when there is something to do) takes the deletions and the tar stream.
pub fn sync(cli: &Options, ctx: &mut Context) -> Result<Outcome> {
    let started = Instant::now();
    let input = Input::read(&ctx.doc)?;
    let ssh = Ssh::connect(&input.connection)?;
    if cli.dry_run {
        Local::of(ctx, &input)?.say_dry_run(ctx, &ssh.host);
        return Ok(Outcome::Done);
    }
    let repo_path = Local::repo_path_of(&input)?;
    // A clone the tracked sync made in this pipeline has no manifest yet: the files go without
    // waiting for the cluster to say so (one round trip fewer). Checked there: a manifest there
    // after all (an earlier run's document) means the sync as usual.
    let fresh = input.sync_tracked.as_ref().is_some_and(|t| {
        t.created == Some(true) && t.dry_run != Some(true) && t.remote_repo_path == repo_path
    });
    if fresh {
        if let Some(done) = attempt(cli, ctx, &input, &ssh, &repo_path, true, started)? {
            return Ok(done);
        }
        ctx.note(format!(
            "{repo_path} has the untracked files of an earlier sync already (the document is an earlier run's, or another sync got in between): syncing against them"
        ));
    }
    Ok(attempt(cli, ctx, &input, &ssh, &repo_path, false, started)?
        .expect("a sync that read the manifest ends"))
}

/// One execution of [`sync`]; `fresh`: its second part sent without waiting for the manifest.
/// `None`: a manifest was there after all (nothing changed; sync again).
fn attempt(
    cli: &Options,
    ctx: &mut Context,
    input: &Input,
    ssh: &Ssh,
    repo_path: &str,
    fresh: bool,
    started: Instant,
) -> Result<Option<Outcome>> {
    // The cluster takes the lock and reads its manifest while the untracked files are listed
    // here: the round trip overlaps the listing (a failed listing closes the execution, which
    // gives the lock back).
    let conversation = ssh.start_script(&manifest_script(repo_path, cli.full, cli.lock_wait)?)?;
    let local = Local::of(ctx, input)?;
    let (mut conversation, previous) = if fresh {
        (conversation, None)
    } else {
        read_manifest(conversation, ssh, &local.repo_path)?
    };
    let plan = Plan::make(cli, ctx, &ssh.host, local, previous, started);
    let (unlinked, deleted) = if plan.nothing_to_send() {
        let out = if fresh {
            conversation.close_collect(Duration::from_secs(60))
        } else {
            conversation.close(Duration::from_secs(60))
        };
        if out.code == Some(255) {
            return Err(ssh.failure_error(&out));
        }
        if fresh {
            // Unread until now, the first part's answer: a manifest there after all may name
            // files to delete.
            match manifest_end(&out.stdout) {
                Some(end) if end > END_OF_MANIFEST.len() => return Ok(None),
                Some(_) => {}
                None => return Err(first_part_failed(&out, ssh, &plan.repo_path)),
            }
        }
        note_lock_wait(ctx, &out.stderr_tail, &plan.repo_path);
        (Vec::new(), Vec::new())
    } else {
        let script = if fresh {
            unless_manifest(repo_path, &plan.script()?)?
        } else {
            plan.script()?
        };
        let payload = plan.payload(ctx);
        let sent = conversation
            .send(&crate::remote::ssh::framed(&script))
            .and_then(|()| payload(&mut crate::support::process::StdinWriter(&mut conversation)));
        if let Err(e) = &sent {
            plan.stats.lock().unwrap().write_error = Some(e.to_string());
        }
        let mut out = conversation.close_collect(Duration::from_secs(6 * 3600));
        if out.code == Some(255) {
            return Err(ssh.failure_error(&out));
        }
        if fresh {
            // The first part's answer was not waited for: it is in front of the second's.
            match manifest_end(&out.stdout) {
                Some(end) => drop(out.stdout.drain(..end)),
                None => return Err(first_part_failed(&out, ssh, &plan.repo_path)),
            }
            if out.stdout_text().lines().any(|l| l == "NOT_FRESH") {
                return Ok(None);
            }
        }
        note_lock_wait(ctx, &out.stderr_tail, &plan.repo_path);
        plan.outcome(out.code, &out.stdout_text())
            .map_err(|e| e.with_command(out.record()))?
    };
    plan.finish(ctx, unlinked, deleted)?;
    Ok(Some(Outcome::Done))
}

/// The local side, listed before anything is asked of the cluster.
pub struct Local {
    repo_path: String,
    snapshot: Option<String>,
    root: std::path::PathBuf,
    items: Vec<Item>,
    unopened: Vec<Skipped>,
}

impl Local {
    /// The remote checkout, the tracked sync's snapshot (from the document), and the untracked
    /// files to consider.
    pub fn of(ctx: &Context, input: &Input) -> Result<Local> {
        let repo_path = Local::repo_path_of(input)?;
        let snapshot = input.sync_tracked.as_ref().map(|t| t.commit.clone());
        let local = LocalRepo::open(input.repo_root.as_deref())?;
        let (mut items, unopened) = untracked(&local)?;
        // The tools' own local folder (log copies, fetched files), when the person put it inside
        // the repository: never uploaded back to the cluster.
        if let Some(rel) = crate::state::local_dirs::local_dir(&input.local)
            .and_then(|d| crate::state::local_dirs::inside_repository(&local.root, &d))
        {
            use std::os::unix::ffi::OsStrExt;
            let prefix = rel.as_os_str().as_bytes();
            let before = items.len();
            items.retain(|it| {
                let n = it.name.as_bytes();
                !(n.starts_with(prefix) && n.get(prefix.len()) == Some(&b'/'))
            });
            if before != items.len() || !prefix.is_empty() {
                ctx.note(format!(
                    "{} (the local folder for log copies and fetched files) is inside the repository: left out of the untracked sync ({} file(s))",
                    rel.display(),
                    before - items.len()
                ));
            }
        }
        Ok(Local {
            repo_path,
            snapshot,
            root: local.root.clone(),
            items,
            unopened,
        })
    }

    /// The remote checkout the files go to.
    fn repo_path_of(input: &Input) -> Result<String> {
        Ok(crate::remote::layout::Layout::of(&input.layout)
            .repo_path_req()?
            .path)
    }

    /// `--dry-run`: the files a sync would consider sending, with their sizes, said on stderr;
    /// which of them travel is decided by the cluster's manifest, which only a real sync reads.
    fn say_dry_run(&self, ctx: &Context, host: &str) {
        use crate::repo::archive::Source;
        let size = |it: &Item| match &it.source {
            Source::File(p) => std::fs::symlink_metadata(p).map_or(0, |m| m.len()),
            Source::Bytes { data, .. } => data.len() as u64,
        };
        let total: u64 = self.items.iter().map(size).sum();
        let shown = 50;
        let mut names: Vec<String> = self
            .items
            .iter()
            .take(shown)
            .map(|it| {
                format!(
                    "{} ({})",
                    it.name.to_string_lossy(),
                    crate::support::ui::human_bytes(size(it))
                )
            })
            .collect();
        if self.items.len() > shown {
            names.push(format!("and {} more", self.items.len() - shown));
        }
        ctx.note(format!(
            "dry run: would send to {host}:{} at most {} untracked file(s), {} in all (those the cluster's copy already has unchanged are skipped: its manifest, read by a real sync, decides; files removed here since the last sync are deleted there), in one ssh execution: {}",
            self.repo_path,
            self.items.len(),
            crate::support::ui::human_bytes(total),
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        ));
        if !self.unopened.is_empty() {
            ctx.note(format!(
                "dry run: {} untracked path(s) could not be read and would be skipped",
                self.unopened.len()
            ));
        }
    }

    /// With the snapshot the tracked sync is about to check out (when both run in one go).
    pub fn with_snapshot(mut self, snapshot: &str) -> Local {
        self.snapshot = Some(snapshot.to_string());
        self
    }

    pub fn repo_path(&self) -> &str {
        &self.repo_path
    }
}

/// What to send and delete, against what the last sync recorded.
pub struct Plan {
    gzip: bool,
    host: String,
    repo_path: String,
    started: Instant,
    previous: Option<Manifest>,
    now: BTreeMap<Vec<u8>, Entry>,
    unchanged: Vec<Vec<u8>>,
    unchanged_bytes: u64,
    to_send: Vec<Item>,
    delete: Vec<String>,
    snapshot: Option<String>,
    /// This checkout ([`manifest::checkout_source`]), written into the new manifest.
    source: String,
    snapshot_moved: bool,
    stats: Arc<Mutex<Stats>>,
    /// The new manifest's tag, and the manifest as the stream wrote it (kept locally when the
    /// cluster took it).
    id: String,
    written: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Plan {
    /// Compare the local files with the manifest the cluster sent (`previous`).
    pub fn make(
        cli: &Options,
        ctx: &Context,
        host: &str,
        local: Local,
        previous: Option<Manifest>,
        started: Instant,
    ) -> Plan {
        let Local {
            repo_path,
            snapshot,
            root,
            items,
            unopened,
        } = local;
        let now: BTreeMap<Vec<u8>, Entry> = items
            .iter()
            .filter_map(|it| {
                let meta = std::fs::symlink_metadata(root.join(&it.name)).ok()?;
                Some((it.name.as_bytes().to_vec(), Entry::of(&meta)?))
            })
            .collect();
        let source = manifest::checkout_source(&root);
        if previous
            .as_ref()
            .is_some_and(|p| p.source.as_deref() != Some(source.as_str()) && !p.entries.is_empty())
        {
            ctx.note(
                "the untracked files in the remote clone were synced from another checkout (or an older version): sending every untracked file",
            );
        }
        let delta = manifest::delta(previous.as_ref(), &now, &source);
        let unchanged_bytes: u64 = delta
            .unchanged
            .iter()
            .filter_map(|p| now.get(p))
            .filter(|e| e.kind == 'f')
            .map(|e| e.size)
            .sum();
        // Files that are not files or symlinks (FIFOs, nested repositories...) go to the archive,
        // which skips them with their reason.
        let unchanged: std::collections::HashSet<&[u8]> =
            delta.unchanged.iter().map(Vec::as_slice).collect();
        let to_send: Vec<Item> = items
            .into_iter()
            .filter(|it| !unchanged.contains(it.name.as_bytes()))
            .collect();
        let mut delete = Vec::new();
        for p in &delta.delete {
            match String::from_utf8(p.clone()) {
                Ok(s) => delete.push(s),
                Err(_) => ctx.warn(format!(
                    "{:?} was deleted locally, but its name is not UTF-8 and cannot be deleted on the cluster by name; remove it there by hand",
                    String::from_utf8_lossy(p)
                )),
            }
        }
        // The manifest is rewritten when it would say something new: another snapshot, unless
        // there is nothing to record at all (no untracked files, and no manifest to empty).
        let snapshot_moved = previous.as_ref().map(|m| &m.snapshot) != Some(&snapshot)
            && !(previous.is_none() && now.is_empty());
        Plan {
            gzip: cli.gzip,
            host: host.to_string(),
            repo_path,
            started,
            previous,
            now,
            unchanged: delta.unchanged,
            unchanged_bytes,
            to_send,
            delete,
            snapshot,
            source,
            snapshot_moved,
            stats: Arc::new(Mutex::new(Stats {
                skipped: unopened,
                ..Stats::default()
            })),
            id: crate::state::journal::unique_tag("m"),
            written: Arc::new(Mutex::new(None)),
        }
    }

    /// Nothing new, changed or deleted, and the manifest already says it all.
    pub fn nothing_to_send(&self) -> bool {
        self.to_send.is_empty() && self.delete.is_empty() && !self.snapshot_moved
    }

    /// The remote part: deletions, then extraction of the stream on its stdin, then the
    /// snapshot's set kept (it exits with tar's status: run it in a subshell when something
    /// follows).
    pub fn script(&self) -> Result<Script> {
        extract_script(&self.repo_path, &self.to_send, &self.delete, self.gzip)
    }

    /// The stream [`Plan::script`] reads: the archive of what is sent, with progress, and the
    /// new manifest written last (the unchanged entries as they were, and what was really sent
    /// now: a file that changed while it was read is recorded so that the next sync sends it
    /// again; a skipped one is not recorded). A broken stream is recorded for [`Plan::finish`].
    pub fn payload(&self, ctx: &Context) -> impl FnOnce(&mut dyn Write) -> std::io::Result<()> {
        let (unchanged_n, delete_n) = (self.unchanged.len(), self.delete.len());
        let (n, host, repo) = (self.to_send.len(), &self.host, &self.repo_path);
        let entries = if n == 1 { "y" } else { "ies" };
        if unchanged_n > 0 || delete_n > 0 {
            ctx.note(format!(
                "sending {n} new or changed untracked entr{entries} to {host}:{repo} ({unchanged_n} unchanged, {} not sent; {delete_n} to delete there)",
                human_bytes(self.unchanged_bytes),
            ));
        } else {
            ctx.note(format!(
                "sending {n} untracked entr{entries} to {host}:{repo}"
            ));
        }
        let total = n as u64;
        let progress_started = Instant::now();
        let mut progress = Progress::new(ctx.tool);
        let progress_fn: archive::ProgressFn = Box::new(move |files, bytes| {
            progress.update(|| {
                let secs = progress_started.elapsed().as_secs_f64().max(0.001);
                format!(
                    "{files}/{total} files, {} ({}/s)",
                    human_bytes(bytes),
                    human_bytes((bytes as f64 / secs) as u64)
                )
            });
            if files == total {
                progress.finish();
            }
        });
        let tail: archive::TailFn = {
            let (previous, now, snapshot, source) = (
                self.previous.clone(),
                self.now.clone(),
                self.snapshot.clone(),
                self.source.clone(),
            );
            let unchanged: BTreeSet<Vec<u8>> = self.unchanged.iter().cloned().collect();
            let (id, written) = (self.id.clone(), self.written.clone());
            Box::new(move |st: &Stats| {
                let skipped: BTreeSet<&str> = st.skipped.iter().map(|k| k.path.as_str()).collect();
                let changed: BTreeSet<&str> = st
                    .changed_while_reading
                    .iter()
                    .map(String::as_str)
                    .collect();
                let mut m = Manifest {
                    source: Some(source),
                    snapshot,
                    entries: BTreeMap::new(),
                };
                for (path, e) in now {
                    let shown = String::from_utf8_lossy(&path).into_owned();
                    if unchanged.contains(&path) {
                        let old = previous.as_ref().and_then(|p| p.entries.get(&path));
                        m.entries.insert(path, old.cloned().unwrap_or(e));
                    } else if skipped.contains(shown.as_str()) {
                        continue;
                    } else if changed.contains(shown.as_str()) {
                        m.entries.insert(path, Entry { mtime_s: -1, ..e });
                    } else {
                        m.entries.insert(path, e);
                    }
                }
                let rendered = m.render();
                *written.lock().unwrap() = Some(rendered.clone());
                vec![
                    // The tag first: a stream cut short leaves a tag no local copy has.
                    (manifest::MANIFEST_ID.into(), format!("{id}\n").into_bytes()),
                    (manifest::EXCLUDE.into(), m.exclude_patterns()),
                    (
                        manifest::UNEXCLUDABLE.into(),
                        m.unexcludable().unwrap_or_else(|_| b"set --\n".to_vec()),
                    ),
                    (manifest::PATHS0.into(), m.paths0()),
                    (manifest::MANIFEST.into(), rendered),
                ]
            })
        };
        let (items, gzip, stats) = (self.to_send.clone(), self.gzip, self.stats.clone());
        move |w: &mut dyn Write| {
            crate::support::testhook::pause("sync-untracked:streaming");
            let r =
                archive::write_archive_then(&items, w, gzip, &stats, Some(progress_fn), Some(tail));
            if let Err(e) = &r {
                stats.lock().unwrap().write_error = Some(e.to_string());
            }
            r
        }
    }

    /// What the remote part said (`code`, its stdout): the entries it unlinked and deleted, or
    /// why it failed.
    pub fn outcome(&self, code: Option<i32>, stdout: &str) -> Result<(Vec<String>, Vec<String>)> {
        let unlinked: Vec<String> = stdout
            .lines()
            .filter_map(|l| {
                l.strip_prefix("UNLINKED ")
                    .or_else(|| l.strip_prefix("REPLACED "))
            })
            .map(str::to_string)
            .collect();
        let deleted = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("DELETED "))
            .map(str::to_string)
            .collect();
        if code != Some(0) {
            let s = self.stats.lock().unwrap();
            let (repo_path, host) = (&self.repo_path, &self.host);
            let (msg, hint) = match UntrackedExit::from_status(code) {
                Some(UntrackedExit::NoCheckout) => (format!("the remote checkout {repo_path} does not exist on {host}"), "run slurm-sync-tracked first (it creates the checkout)".to_string()),
                _ => (
                    format!("extracting the untracked files on {host} failed (remote tar: {}) after {} file(s), {}", crate::support::process::describe_exit(code), s.files, human_bytes(s.bytes)),
                    "see tar's stderr in this error: a full remote disk or quota is the usual cause; rerun the sync once fixed (what did not arrive is sent again)".to_string(),
                ),
            };
            return Err(ToolError::remote(msg).with_hint(hint));
        }
        Ok((unlinked, deleted))
    }

    /// The warnings and the section.
    pub fn finish(
        self,
        ctx: &mut Context,
        unlinked: Vec<String>,
        deleted: Vec<String>,
    ) -> Result<()> {
        if self.nothing_to_send() {
            if self.now.is_empty() {
                ctx.note("no untracked files to send");
            } else {
                ctx.note(format!(
                    "{} untracked file(s), {}, unchanged since the last sync: nothing to send",
                    self.unchanged.len(),
                    human_bytes(self.unchanged_bytes)
                ));
            }
        }
        let s = self.stats.lock().unwrap().clone();
        if let Some(e) = &s.write_error {
            return Err(
                ToolError::remote(format!("the tar stream to {} broke: {e}", self.host))
                    .with_hint("rerun the sync"),
            );
        }
        for k in &s.skipped {
            ctx.warn(format!("skipped {:?}: {}", k.path, k.reason));
        }
        for p in &s.changed_while_reading {
            ctx.warn(format!(
                "{p:?} changed while it was read; the remote copy may be inconsistent, rerun the sync"
            ));
        }
        for p in &unlinked {
            ctx.note(format!(
                "removed the stale remote entry {p:?} where a directory now goes"
            ));
        }
        if let Some(m) = self.written.lock().unwrap().take() {
            keep_copy(&self.host, &self.repo_path, &self.id, &m);
        }
        let secs = self.started.elapsed().as_secs_f64();
        ctx.note(format!(
            "sent {} file(s), {} symlink(s), {}; {} unchanged, {} deleted there; in {:.1} s",
            s.files,
            s.symlinks,
            human_bytes(s.bytes),
            self.unchanged.len(),
            deleted.len(),
            secs
        ));
        ctx.doc.set_section(
            "sync_untracked",
            &SyncUntracked {
                files: s.files,
                symlinks: s.symlinks,
                bytes: s.bytes,
                seconds: (secs * 100.0).round() / 100.0,
                skipped: s.skipped,
                changed_while_reading: s.changed_while_reading,
                compressed: self.gzip,
                remote_repo_path: self.repo_path,
                unlinked,
                incremental: self.previous.is_some(),
                unchanged_files: self.unchanged.len() as u64,
                unchanged_bytes: self.unchanged_bytes,
                deleted,
            },
        );
        Ok(())
    }
}

/// Where this machine keeps its copy of the manifest it last wrote into `repo` on `host`.
fn copy_path(host: &str, repo: &str) -> Option<std::path::PathBuf> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (host, repo).hash(&mut h);
    Some(
        crate::state::journal::state_dir()?
            .join("manifests")
            .join(format!("{:016x}", h.finish())),
    )
}

/// Keep the manifest just written (best effort: without the copy, the cluster is asked).
fn keep_copy(host: &str, repo: &str, id: &str, manifest: &[u8]) {
    let Some(path) = copy_path(host, repo) else {
        return;
    };
    let Some(dir) = path.parent() else {
        return;
    };
    let mut bytes = format!("{id}\n{host}\n{repo}\n").into_bytes();
    bytes.extend_from_slice(manifest);
    let _ = crate::state::private_files::own_dir(dir)
        .and_then(|()| crate::state::private_files::write_atomic(&path, &bytes, 0o600));
}

/// The manifest this machine last wrote into `repo` on `host`, with its tag: the cluster's own
/// while its tag is the same (the caller checks that there).
pub fn kept_copy(host: &str, repo: &str) -> Option<(String, Manifest)> {
    let bytes = std::fs::read(copy_path(host, repo)?).ok()?;
    let mut parts = bytes.splitn(4, |b| *b == b'\n');
    let id = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let (h, r) = (parts.next()?, parts.next()?);
    if h != host.as_bytes() || r != repo.as_bytes() || id.is_empty() {
        return None;
    }
    Some((id, Manifest::parse(parts.next()?)?))
}

/// The line that ends the manifest in the conversation (no manifest line starts with `-`).
const END_OF_MANIFEST: &[u8] = b"--end-of-manifest--\n";

/// Say so when the clone's lock was held by another sync and this one waited for it.
fn note_lock_wait(ctx: &Context, stderr: &str, repo: &str) {
    if let Some((secs, holder)) = stderr
        .lines()
        .find_map(|l| l.strip_prefix("WAITED "))
        .map(crate::sync::tracked_remote::waited_behind)
    {
        ctx.note(format!(
            "waited {secs} s for the clone's lock on {repo}: another sync ({holder}) was using it"
        ));
    }
}

/// The conversation's first part: take the clone's lock (concurrent syncs into one clone take
/// turns; its lines go to stderr, not into the manifest), the manifest (unless `full`), then wait
/// for the second part (deletions and extraction, framed like every script, run in a subshell so
/// the lock is released after it); a closed stdin means nothing to do.
pub fn manifest_script(repo: &str, full: bool, lock_wait: u64) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    crate::remote::exit::assign::<UntrackedExit>(&mut s)?;
    s.assign("repo", repo)?;
    s.assign("manifest", manifest::MANIFEST)?;
    s.assign("full", if full { "yes" } else { "no" })?;
    let token = crate::state::journal::unique_tag("untracked");
    let locked = UntrackedExit::Locked.code();
    crate::remote::Lock::of_clone(repo, &token, lock_wait, locked, locked).define(&mut s)?;
    s.raw(crate::remote::UNTRACKED_MANIFEST);
    Ok(s)
}

/// The manifest the last sync left in the remote checkout (`None`: none, or not readable as
/// one; then everything is sent).
pub fn read_manifest(
    mut conversation: crate::support::process::Running,
    ssh: &Ssh,
    repo: &str,
) -> Result<(crate::support::process::Running, Option<Manifest>)> {
    use crate::support::process::Received;
    let mut buf = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        // Only the end is looked at: a manifest of many files arrives in many chunks.
        if crate::support::process::ends_with_line(&buf, END_OF_MANIFEST) {
            buf.truncate(buf.len() - END_OF_MANIFEST.len());
            return Ok((conversation, Manifest::parse(&buf)));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match conversation.recv(left) {
            Received::Data(b) => buf.extend_from_slice(&b),
            Received::Eof | Received::TimedOut => break,
        }
    }
    // The remote side ended (or went quiet) before the manifest was through.
    let out = conversation.close(Duration::from_secs(10));
    if out.code == Some(255) {
        return Err(ssh.failure_error(&out));
    }
    Err(first_part_failed(&out, ssh, repo))
}

/// `second`, sent without waiting for the manifest: a manifest there after all stops it
/// (`NOT_FRESH`, its stdin read to the end and nothing changed).
fn unless_manifest(repo: &str, second: &Script) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    crate::remote::exit::assign::<UntrackedExit>(&mut s)?;
    s.assign("repo", repo)?;
    s.assign("manifest", manifest::MANIFEST)?;
    s.raw(crate::remote::UNTRACKED_FRESH);
    s.append(second);
    Ok(s)
}

/// Where what follows the manifest starts: after its [`END_OF_MANIFEST`] line.
fn manifest_end(stdout: &[u8]) -> Option<usize> {
    crate::support::process::line_at(stdout, END_OF_MANIFEST).map(|i| i + END_OF_MANIFEST.len())
}

/// Why the first part (the lock, the manifest) ended before its answer was through.
fn first_part_failed(out: &crate::support::process::Output, ssh: &Ssh, repo: &str) -> ToolError {
    if UntrackedExit::from_status(out.code) == Some(UntrackedExit::NoCheckout) {
        return ToolError::remote(format!(
            "the remote checkout {repo} does not exist on {}",
            ssh.host
        ))
        .with_hint("run slurm-sync-tracked first (it creates the checkout)");
    }
    if UntrackedExit::from_status(out.code) == Some(UntrackedExit::Locked) {
        let (secs, holder) = out
            .stderr_tail
            .lines()
            .find_map(|l| l.strip_prefix("LOCKED "))
            .map(crate::sync::tracked_remote::waited_behind)
            .unwrap_or_default();
        return ToolError::remote(format!(
            "another sync into {repo} on {} held the clone's lock for the whole {secs} s this one waited (held by {})",
            ssh.host,
            if holder.is_empty() { "an unknown run" } else { &holder }
        ))
        .with_hint(format!("wait for it to finish and rerun (or give --lock-wait SECONDS); a lock left by a killed run ({repo}.slurm-tools-sync.lock) is broken automatically after 30 minutes"))
        .with_command(out.record());
    }
    ToolError::remote(format!(
        "reading the last sync's manifest in {repo} on {} failed ({})",
        ssh.host,
        out.exit_text()
    ))
    .with_hint("rerun the sync; `--full` sends everything without reading it")
    .with_command(out.record())
}

/// The untracked, non-ignored files and symlinks (listed NUL-separated, so every name survives),
/// and the directories git could not look into, each with git's reason: those are reported as
/// skipped rather than silently missing on the cluster.
fn untracked(local: &LocalRepo) -> Result<(Vec<Item>, Vec<Skipped>)> {
    // Each checked-out submodule's own (nested ones too), under its path: listed beside the
    // superproject's, a few gits at a time.
    let subs: Vec<_> = crate::repo::submodules::all(local)
        .into_iter()
        .filter_map(|sub| Some((sub.repo?.root, sub.path)))
        .collect();
    let (top, listed) = std::thread::scope(|scope| {
        let others = scope.spawn(|| {
            subs.chunks(LISTINGS_AT_ONCE)
                .flat_map(|chunk| {
                    let running: Vec<_> = chunk
                        .iter()
                        .map(|(root, path)| scope.spawn(move || untracked_in(root, path)))
                        .collect();
                    running
                        .into_iter()
                        .map(|h| h.join().expect("a listing thread"))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        });
        (
            untracked_in(&local.root, ""),
            others.join().expect("the listing threads"),
        )
    });
    let (mut items, mut skipped) = top?;
    for ((_, path), listed) in subs.iter().zip(listed) {
        let (i, s) = listed?;
        items.extend(i.into_iter().map(|it| {
            let mut name = OsString::from(format!("{path}/"));
            name.push(&it.name);
            Item::file(local.root.join(&name), name)
        }));
        skipped.extend(s.into_iter().map(|mut k| {
            k.path = format!("{path}/{}", k.path);
            k
        }));
    }
    Ok((items, skipped))
}

/// How many submodules' untracked files are listed at once (each by its own git).
const LISTINGS_AT_ONCE: usize = 4;

/// The untracked files of one repository (names relative to its top level).
fn untracked_in(root: &std::path::Path, under: &str) -> Result<(Vec<Item>, Vec<Skipped>)> {
    let out = run_git(
        crate::repo::git::git_in(root)
            .env("LC_ALL", "C")
            .args([
                "ls-files",
                "--others",
                "--exclude-standard",
                "-z",
                "--full-name",
                "--",
                ".",
            ])
            .deadline(Duration::from_secs(600)),
        &if under.is_empty() {
            "listing the untracked files".to_string()
        } else {
            format!("listing the untracked files of the submodule {under}")
        },
        "check the repository (`git status` should work)",
    )?;
    let items = out
        .stdout
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| {
            // A nested repository is listed as `dir/`; keep the name without the slash.
            let name = n.strip_suffix(b"/").unwrap_or(n);
            let name = OsString::from(std::ffi::OsStr::from_bytes(name));
            Item::file(root.join(&name), name)
        })
        .collect();
    Ok((items, unopened_dirs(&out.stderr_tail)))
}

/// git's "warning: could not open directory 'd/': Permission denied" lines, as (d, reason).
fn unopened_dirs(stderr: &str) -> Vec<Skipped> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: could not open directory '"))
        .filter_map(|rest| rest.rsplit_once("': "))
        .map(|(dir, why)| Skipped {
            path: dir.trim_end_matches('/').to_string(),
            reason: format!("a directory git could not look into ({why}); nothing in it is sent"),
        })
        .collect()
}

/// The remote side: delete what was deleted locally (never through a symlink), remove what
/// would make tar write outside the checkout, extract (the manifest files come last), then keep
/// the synced files for the jobs of this snapshot (`keep_untracked`).
pub(super) fn extract_script(
    repo: &str,
    items: &[Item],
    delete: &[String],
    gzip: bool,
) -> Result<Script> {
    // Every directory that will hold a file, shallowest first (the manifest's own directory too).
    let mut dirs: BTreeSet<Vec<u8>> = BTreeSet::new();
    let names = items
        .iter()
        .map(|it| it.name.as_bytes())
        .chain([manifest::MANIFEST.as_bytes()]);
    for name in names {
        for (i, b) in name.iter().enumerate() {
            if *b == b'/' {
                dirs.insert(name[..i].to_vec());
            }
        }
    }
    let mut dirs: Vec<Vec<u8>> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| d.iter().filter(|b| **b == b'/').count());
    let mut s = Script::new();
    s.raw("set -u\n");
    crate::remote::exit::assign::<UntrackedExit>(&mut s)?;
    s.assign("repo", repo)?;
    s.raw("cd -- \"$repo\" 2>/dev/null || exit \"$E_NO_CHECKOUT\"\n");
    s.raw(crate::remote::UNTRACKED_APPLY);
    if !delete.is_empty() {
        s.raw("delete_gone");
        for p in delete {
            s.arg(p)?;
        }
        s.raw("\n");
    }
    s.raw("make_dirs_way");
    for d in &dirs {
        let d = std::str::from_utf8(d).map_err(|_| {
            ToolError::bad_input("an untracked directory name is not valid UTF-8 and cannot be checked on the remote side")
                .with_hint("rename the directory to a UTF-8 name")
        })?;
        s.arg(d)?;
    }
    s.raw(if gzip {
        "\nextract_untracked gzip\n"
    } else {
        "\nextract_untracked plain\n"
    });
    // The files of this sync, kept for the jobs of its snapshot (another checkout's sync may
    // replace them in the clone before this one's job is submitted).
    s.assign("manifest", manifest::MANIFEST)?;
    s.assign("paths0", manifest::PATHS0)?;
    s.raw(crate::remote::UNTRACKED_STORE);
    s.raw(crate::remote::UNTRACKED_KEEP);
    s.raw("keep_untracked\n");
    Ok(s)
}

#[cfg(test)]
mod scripts {
    use super::*;

    #[test]
    fn every_script_passes_the_static_checks() {
        for full in [false, true] {
            crate::remote::script_check::assert_clean(
                "sync-untracked-manifest",
                manifest_script("/h/u/work/repo", full, 600)
                    .unwrap()
                    .as_str(),
            );
        }
        let items = vec![Item {
            source: crate::repo::archive::Source::File("/dev/null".into()),
            name: "data/nested/u.bin".into(),
        }];
        for gzip in [false, true] {
            let s = extract_script("/h/u/work/repo", &items, &["gone.txt".to_string()], gzip);
            crate::remote::script_check::assert_clean(
                "sync-untracked-extract",
                s.unwrap().as_str(),
            );
        }
        let second = extract_script("/h/u/it's", &items, &[], false).unwrap();
        let fresh = unless_manifest("/h/u/it's", &second).unwrap();
        assert!(fresh.as_str().ends_with(second.as_str()));
        crate::remote::script_check::assert_clean("sync-untracked-fresh", fresh.as_str());
    }
}
