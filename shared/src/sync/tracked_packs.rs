//! The submodules' commits in the clone's own execution (slurm-sync-tracked through origin).
//!
//! A submodule's URL is often out of the cluster's reach, so its commits travel from here. They
//! used to travel as one `git push` over ssh per submodule, then a second execution checked the
//! submodules out: at a login node's distance each costs its round trips. Here the clone's
//! execution says which submodules lack their commit (and where their repository's HEAD is),
//! then waits under the lock (`shared/src/remote/sh/tracked-continue.sh`); each of those gets
//! one pack, made here by `git pack-objects` (the submodule's whole history, or what its HEAD
//! there does not reach), sent into that same execution behind the script that unpacks them and
//! checks every submodule out. On a first sync the whole-history packs are made while the
//! cluster clones; into a clone this machine never synced, small ones go behind the clone's
//! script without waiting for its answer (the clone drops those it has).

use super::tracked_remote as remote;
use crate::remote::ssh::{Ssh, SshFailure};
use crate::remote::Operation;
use crate::repo::submodules::Submodule;
use crate::support::process::{line_at, Output, Received, Running};
use crate::{Context, Result, ToolError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What [`origin_with_packs`] did.
pub struct Conversation {
    /// The checkout's report, with the submodules' heads when they were checked out here
    /// (`modules_done`); else the lock is kept for the pushes and [`remote::Step::Modules`].
    pub report: remote::Report,
    /// The temporary branch's deletion from origin, started once the checkout was done.
    pub deleting: Option<super::tracked::Deleting>,
}

/// What this machine's records say of the clone before it answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Known {
    /// This checkout synced into it (its last sync is on record).
    SyncedFromHere,
    /// Another checkout on this machine synced into it; this one never did.
    SyncedFromAnother,
    /// No sync from this machine on record: most likely a new clone.
    Nothing,
}

impl Known {
    pub fn of(last: Option<&super::last_sync::Synced>, host: &str, repo_path: &str) -> Known {
        if last.is_some() {
            Known::SyncedFromHere
        } else if super::last_sync::clone_synced_before(host, repo_path) {
            Known::SyncedFromAnother
        } else {
            Known::Nothing
        }
    }
}

/// The most a first sync sends without waiting for the clone's answer: what the channel takes
/// before the cluster reads it (OpenSSH's session window is 2 MiB), so the write never waits for
/// the clone; and, when the clone had the commits after all, the most it sends for nothing.
const UNASKED_MAX: u64 = 1 << 20;

/// `--via origin`'s checkout with the submodules' commits in the same execution. `None`: the
/// server refused the session (nothing ran there), or there is no place for the packs here;
/// the caller runs [`remote::Step::Origin`].
///
/// `known`: with no sync from this checkout on record, every submodule's whole history is packed
/// while the cluster clones (what a new clone lacks); with none from this machine either, those
/// packs (when small) are sent at once behind the clone's script, one round trip before its
/// answer would ask for them, and the clone drops those it has.
pub fn origin_with_packs(
    ctx: &Context,
    local: &crate::repo::git::LocalRepo,
    ssh: &Ssh,
    plan: &remote::Plan,
    subs: &[Submodule],
    known: Known,
) -> Result<Option<Conversation>> {
    let script = remote::origin_then_packs_script(plan)?;
    // Without a place for the packs, the submodules are pushed.
    let Ok(dir) = tempfile::Builder::new()
        .prefix("slurm-tools-packs-")
        .tempdir()
    else {
        return Ok(None);
    };
    let mut running = if plan.show_progress {
        ssh.start_script_showing_progress(&script)?
    } else {
        ssh.start_script(&script)?
    };
    let wanted: Vec<Wanted> = plan
        .modules
        .iter()
        .filter_map(|m| {
            let sub = subs.iter().find(|s| s.path == m.path)?;
            Some(Wanted {
                path: m.path.clone(),
                root: sub.repo.as_ref()?.root.clone(),
                commit: m.commit.clone(),
                base: None,
            })
        })
        .collect();
    // A first sync's packs, made while the cluster clones (the execution is under way).
    let whole = (known != Known::SyncedFromHere).then(|| make_packs(&wanted, dir.path(), "whole"));
    let talk = Talk {
        ctx,
        ssh,
        plan,
        deadline: Instant::now() + remote::CloneStep::DEADLINE,
    };
    let unasked = match &whole {
        Some(Ok(packs))
            if known == Known::Nothing
                && packs.len() == plan.modules.len()
                && packs.iter().map(|(_, _, n)| n).sum::<u64>() <= UNASKED_MAX =>
        {
            talk.send_packs(&mut running, packs)?;
            Some(packs.clone())
        }
        _ => None,
    };
    let ask = remote::StepAsk {
        plan,
        step: remote::Step::OriginThenPacks,
        host: &ssh.host,
    };
    let (answer, rest) = match read_answer(&mut running, talk.deadline) {
        Answer::Complete { answer, rest } => (answer, rest),
        Answer::Ended(got) => {
            // It ended without waiting: every submodule had its commit (checked out there), or
            // it failed, or the session was refused.
            let left = talk.deadline.saturating_duration_since(Instant::now());
            let out = ended(running.close_collect(left.max(Duration::from_secs(1))), got);
            return match settle(ssh, &ask, out)? {
                None => Ok(None),
                Some(report) => Ok(Some(Conversation {
                    report,
                    deleting: None,
                })),
            };
        }
    };
    crate::support::testhook::pause("sync-tracked:checked-out");
    // The snapshot is checked out: its branch on origin is no longer needed.
    let deleting = Some(super::tracked::Deleting::start(local, plan.url, plan.temp));
    let report = remote::parse(&String::from_utf8_lossy(&answer));
    let report = match unasked {
        Some(packs) => talk.finish(running, rest, report, &packs, Instant::now(), true)?,
        None => talk.second_part(running, rest, report, &wanted, subs, whole, dir.path())?,
    };
    Ok(Some(Conversation { report, deleting }))
}

/// The execution after its answer.
struct Talk<'a> {
    ctx: &'a Context,
    ssh: &'a Ssh,
    plan: &'a remote::Plan<'a>,
    deadline: Instant,
}

impl Talk<'_> {
    /// The packs the answer asks for, with the script that unpacks them and checks every
    /// submodule out; or, when they cannot be made here, the lock kept for the pushes.
    #[allow(clippy::too_many_arguments)]
    fn second_part(
        &self,
        mut running: Running,
        rest: Vec<u8>,
        mut report: remote::Report,
        wanted: &[Wanted],
        subs: &[Submodule],
        whole: Option<std::result::Result<Packs, String>>,
        dir: &Path,
    ) -> Result<remote::Report> {
        let (ctx, ssh, plan, deadline) = (self.ctx, self.ssh, self.plan, self.deadline);
        let ask = remote::StepAsk {
            plan,
            step: remote::Step::OriginThenPacks,
            host: &ssh.host,
        };
        let started = Instant::now();
        let mut missing: Vec<Wanted> = wanted
            .iter()
            .filter(|w| report.modules_missing.contains(&w.path))
            .cloned()
            .collect();
        // What a repository there has already is left out, when this one knows that commit.
        for w in &mut missing {
            let sub_repo = subs
                .iter()
                .find(|s| s.path == w.path)
                .and_then(|s| s.repo.as_ref());
            w.base = report
                .module_bases
                .iter()
                .find(|(p, _)| *p == w.path)
                .map(|(_, sha)| sha.clone())
                .filter(|sha| {
                    sub_repo.is_some_and(|r| {
                        git2::Oid::from_str(sha).is_ok_and(|o| r.repo.find_commit(o).is_ok())
                    })
                });
        }
        let packs = packs_for(&missing, report.modules_missing.len(), whole, dir);
        let packs = match packs {
            Ok(packs) => packs,
            Err(why) => {
                // The pushes and the modules step follow, as before this execution could take them.
                ctx.note(format!(
                    "could not pack the submodules' snapshots here ({why}): pushing them instead"
                ));
                running
                    .send(&crate::remote::ssh::framed(&remote::followups_kept_script()))
                    .ok();
                let left = deadline.saturating_duration_since(Instant::now());
                let out = ended(running.close_collect(left), rest);
                settle(ssh, &ask, out)?;
                report.modules_done = false;
                return Ok(report);
            }
        };
        self.send_packs(&mut running, &packs)?;
        self.finish(running, rest, report, &packs, started, false)
    }

    /// The second part's script, then each pack, in order; a person watching sees each go.
    fn send_packs(&self, running: &mut Running, packs: &Packs) -> Result<()> {
        let (ctx, plan) = (self.ctx, self.plan);
        let sizes: Vec<(&str, u64)> = packs.iter().map(|(p, _, n)| (p.as_str(), *n)).collect();
        let total: u64 = sizes.iter().map(|(_, n)| n).sum();
        let second = remote::modules_packs_script(plan, &sizes)?;
        if plan.show_progress {
            ctx.note(format!(
                "sending {} submodule snapshot(s) with the history the clone lacks ({})",
                packs.len(),
                crate::support::ui::human_bytes(total)
            ));
        }
        // A person watching sees each submodule's pack go (a long history takes a while).
        let each = |path: &str, size: u64| {
            if plan.show_progress {
                ctx.note(format!(
                    "sending the submodule {path} ({})",
                    crate::support::ui::human_bytes(size)
                ));
            }
        };
        // A write cut short (the execution failed and ended) is read from its exit and reply.
        let _ = send_all(running, &crate::remote::ssh::framed(&second), packs, each);
        Ok(())
    }

    /// The execution's end after its packs: every submodule checked out there (said with the
    /// time `since` the answer). `unasked`: the packs went before the clone's answer, so it
    /// dropped those whose commit it had.
    fn finish(
        &self,
        running: Running,
        rest: Vec<u8>,
        mut report: remote::Report,
        packs: &Packs,
        since: Instant,
        unasked: bool,
    ) -> Result<remote::Report> {
        let (ctx, ssh, plan) = (self.ctx, self.ssh, self.plan);
        let sizes: Vec<(&str, u64)> = packs.iter().map(|(p, _, n)| (p.as_str(), *n)).collect();
        let total: u64 = sizes.iter().map(|(_, n)| n).sum();
        let lacked = report.modules_missing.len();
        let left = self.deadline.saturating_duration_since(Instant::now());
        let out = ended(running.close_collect(left), rest);
        let modules_ask = remote::StepAsk {
            plan,
            step: remote::Step::ModulesPacks { packs: &sizes },
            host: &ssh.host,
        };
        let Some(done) = settle(ssh, &modules_ask, out)? else {
            return Err(ToolError::remote(format!(
                "the connection to {} refused the rest of the sync's execution",
                ssh.host
            ))
            .with_hint("rerun the sync"));
        };
        report.module_heads = done.module_heads;
        report.module_stashes = done.module_stashes;
        report.modules_done = true;
        let sent = crate::support::ui::human_bytes(total);
        let secs = since.elapsed().as_secs_f64();
        ctx.note(if unasked {
            format!(
                "sent {} submodule snapshot(s) into the remote clone in the same execution, behind its script without waiting for its answer ({sent}, {secs:.1} s){}",
                packs.len(),
                match packs.len() - lacked.min(packs.len()) {
                    0 => String::new(),
                    had => format!("; it had {had} of them already and dropped those"),
                }
            )
        } else {
            format!(
                "sent {} submodule snapshot(s) into the remote clone in the same execution ({sent}, {secs:.1} s){}",
                packs.len(),
                match plan.modules.len() - packs.len() {
                    0 => String::new(),
                    had => format!("; it had the other {had} already"),
                }
            )
        });
        Ok(report)
    }
}

/// A submodule whose commit the clone lacks: where its repository is here, and what to leave out.
#[derive(Clone)]
struct Wanted {
    path: String,
    root: PathBuf,
    commit: String,
    /// The commit its repository there is at, when this one has it.
    base: Option<String>,
}

/// (path, pack file, size) of each.
type Packs = Vec<(String, PathBuf, u64)>;

/// The pack of each of `missing`: a whole-history one made early when it fits (no base there),
/// else one made now. Every submodule the clone lacks must have one (`count`: how many it said).
fn packs_for(
    missing: &[Wanted],
    count: usize,
    whole: Option<std::result::Result<Packs, String>>,
    dir: &Path,
) -> std::result::Result<Packs, String> {
    if missing.len() != count {
        return Err("a submodule the clone lacks is not checked out here".into());
    }
    let whole = whole.and_then(|r| r.ok()).unwrap_or_default();
    let mut packs = Vec::new();
    let mut to_make = Vec::new();
    for w in missing {
        match whole.iter().find(|(p, _, _)| *p == w.path) {
            Some(made) if w.base.is_none() => packs.push(made.clone()),
            _ => to_make.push(w.clone()),
        }
    }
    packs.extend(make_packs(&to_make, dir, "thin")?);
    // In the order the clone said them (parents first).
    packs.sort_by_key(|(p, _, _)| missing.iter().position(|w| w.path == *p));
    Ok(packs)
}

/// One pack per submodule, made at the same time (`git pack-objects`: the deltas its packs
/// have already are reused), as files in `dir`.
fn make_packs(wanted: &[Wanted], dir: &Path, kind: &str) -> std::result::Result<Packs, String> {
    std::thread::scope(|s| {
        let running: Vec<_> = wanted
            .iter()
            .enumerate()
            .map(|(i, w)| s.spawn(move || make_pack(w, &dir.join(format!("{kind}-{i}")))))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("packing stopped".into())))
            .collect()
    })
}

fn make_pack(w: &Wanted, base_name: &Path) -> std::result::Result<(String, PathBuf, u64), String> {
    let mut revs = format!("{}\n", w.commit);
    if let Some(base) = &w.base {
        revs.push_str(&format!("^{base}\n"));
    }
    let out = crate::repo::git::git_in(&w.root)
        .args(["pack-objects", "--revs", "--delta-base-offset", "-q"])
        .arg(base_name.to_string_lossy())
        .input(crate::support::process::Input::Bytes(revs.into_bytes()))
        .deadline(Duration::from_secs(30 * 60))
        .run()
        .map_err(|e| format!("git pack-objects in {}: {e}", w.path))?;
    let name = out.stdout_text().trim().to_string();
    if !out.success() || name.is_empty() {
        return Err(format!(
            "git pack-objects in {} failed: {}",
            w.path,
            out.stderr_tail.trim()
        ));
    }
    let file = PathBuf::from(format!("{}-{name}.pack", base_name.to_string_lossy()));
    let size = std::fs::metadata(&file)
        .map_err(|e| format!("{}: {e}", file.display()))?
        .len();
    Ok((w.path.clone(), file, size))
}

/// The second part's script, then each pack, in order (`each` told of each as it starts).
fn send_all(
    running: &mut Running,
    script: &[u8],
    packs: &Packs,
    each: impl Fn(&str, u64),
) -> std::io::Result<()> {
    running.send(script)?;
    let mut to = crate::support::process::StdinWriter(running);
    for (path, file, size) in packs {
        each(path, *size);
        std::io::copy(&mut std::fs::File::open(file)?, &mut to)?;
    }
    std::io::Write::flush(&mut to)
}

enum Answer {
    /// The answer up to [`remote::END_OF_ANSWER`], and what came after it so far.
    Complete { answer: Vec<u8>, rest: Vec<u8> },
    /// The execution ended (or the deadline passed) before that line: all it said.
    Ended(Vec<u8>),
}

fn read_answer(running: &mut Running, deadline: Instant) -> Answer {
    let mut got = Vec::new();
    loop {
        if let Some(at) = line_at(&got, remote::END_OF_ANSWER) {
            let rest = got.split_off(at + remote::END_OF_ANSWER.len());
            got.truncate(at);
            return Answer::Complete { answer: got, rest };
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Answer::Ended(got);
        }
        match running.recv(left) {
            Received::Data(b) => got.extend_from_slice(&b),
            Received::Eof | Received::TimedOut => return Answer::Ended(got),
        }
    }
}

/// The collected output, with what was read before in front.
fn ended(mut out: Output, before: Vec<u8>) -> Output {
    let mut stdout = before;
    stdout.append(&mut out.stdout);
    out.stdout = stdout;
    crate::remote::ssh::without_client_noise(out)
}

/// The execution's report; its failure as the step's error. `None`: the session was refused.
fn settle(ssh: &Ssh, ask: &remote::StepAsk, out: Output) -> Result<Option<remote::Report>> {
    if out.code == Some(255) {
        if SshFailure::session_refused(&out.stderr_tail) && out.stdout.is_empty() {
            return Ok(None);
        }
        return Err(ssh.failure_error(&out));
    }
    if out.timed_out {
        return Err(ssh.timed_out_error(&out, remote::CloneStep::DEADLINE));
    }
    remote::CloneStep::reply(ask, &out).map(Some)
}
