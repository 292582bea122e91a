//! `slurm-watch --race OTHER.json...`: the same job submitted to several clusters (or
//! partitions), each document from its own slurm-submit; the first to start is kept and watched
//! to its verdict, the others are cancelled (only the jobs these documents name: nothing else of
//! the person's is touched), and each cancel is recorded in the ledger as the race's. One ssh
//! execution per entrant per poll (shared/src/remote/sh/race.sh).

use shared::contract::schema::{self, Race, RaceEntrant};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::{Context, Document, Result, ToolError};
use std::time::{Duration, Instant};

struct Entrant {
    doc: Document,
    source: String,
    cluster: String,
    job_name: Option<String>,
    job_id: String,
    ssh: Ssh,
    state: String,
    reason: String,
}

/// Slurm states that mean the job started (or already ran and ended).
fn started(state: &str) -> bool {
    !matches!(
        state,
        "" | "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "CANCELLED" | "SPECIAL_EXIT"
    ) && !state.starts_with("CANCELLED")
}

shared::document_input! {
    /// What the race reads of each entrant's document.
    struct EntrantInput {
        job: Option<schema::Job> = section,
        job_name: Option<String> = label,
        cluster: shared::state::ledger::ClusterName = part,
        connection: shared::remote::ssh::Connection = part,
    }
}

fn entrant(doc: Document, source: &str) -> Result<Entrant> {
    let input = EntrantInput::read(&doc)?;
    let job = input.job.ok_or_else(|| {
        ToolError::bad_input(format!(
            "--race: {source} has no `job` section (run slurm-submit on it first)"
        ))
        .with_field("job")
    })?;
    let Some(job_id) = job.job_id.filter(|id| !id.is_empty()) else {
        return Err(ToolError::bad_input(format!(
            "--race: {source}'s job has no job id (was it submitted?)"
        ))
        .with_field("job"));
    };
    shared::slurm::check_job_id("job.job_id", &job_id)?;
    let ssh = Ssh::connect(&input.connection)?;
    Ok(Entrant {
        cluster: input.cluster.name(),
        job_name: input.job_name,
        job_id,
        source: source.to_string(),
        ssh,
        doc,
        state: String::new(),
        reason: String::new(),
    })
}

/// One entrant's state and reason (race.sh's `race_state`): Slurm's state word ("" when none
/// knows the job) and squeue's reason ("" once it left the queue).
struct RaceState;

impl shared::remote::Operation for RaceState {
    /// The job id.
    type Params = str;
    type Reply = (String, String);
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(job: &str) -> Result<Script> {
        race_script(job, "race_state \"$job\"\n")
    }

    fn reply(_: &str, out: &shared::support::process::Output) -> Result<(String, String)> {
        let text = out.stdout_text();
        let line = shared::remote::Tagged::of(&text)
            .first("STATE")
            .unwrap_or("");
        let (state, reason) = line.split_once('|').unwrap_or((line, ""));
        let state = state.split_whitespace().next().unwrap_or("").to_string();
        Ok((state, reason.to_string()))
    }
}

/// The cancel of an entrant that lost (race.sh's `race_cancel`): its state once Slurm let go of
/// it ("CANCELLED" when the queue no longer has it).
struct RaceCancel;

impl shared::remote::Operation for RaceCancel {
    /// The job id.
    type Params = str;
    type Reply = String;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(job: &str) -> Result<Script> {
        race_script(job, "race_cancel \"$job\"\n")
    }

    fn reply(_: &str, out: &shared::support::process::Output) -> Result<String> {
        let text = out.stdout_text();
        let after = shared::remote::Tagged::of(&text)
            .first("CANCELLED")
            .unwrap_or("")
            .trim();
        Ok(if after.is_empty() { "CANCELLED" } else { after }.to_string())
    }
}

fn race_script(job: &str, call: &'static str) -> Result<Script> {
    let mut s = Script::new();
    s.assign("job", job)?;
    s.raw(shared::remote::RACE);
    s.raw(call);
    Ok(s)
}

/// Race the document on stdin against `others`; on return `ctx.doc` is the winner's document
/// with the `race` section. Exit 3 when the MFA master of an entrant died (rerun after login).
pub fn run(ctx: &mut Context, others: &[std::path::PathBuf], interval: f64) -> Result<()> {
    let mut entrants = entrants_of(&ctx.doc, others)?;
    ctx.note(format!(
        "racing {} submissions: {}; the first to start is kept, the others are cancelled",
        entrants.len(),
        entrants
            .iter()
            .map(|e| format!("{} job {}", e.cluster, e.job_id))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let begun = Instant::now();
    let winner = first_to_start(ctx, &mut entrants, interval)?;
    let waited = (begun.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let (wc, wj) = (
        entrants[winner].cluster.clone(),
        entrants[winner].job_id.clone(),
    );
    ctx.note(format!(
        "race: {wc} job {wj} started first ({}, after {waited} s); cancelling the others",
        entrants[winner].state
    ));
    let cancelled = cancel_the_others(ctx, &mut entrants, winner)?;
    let section = Race {
        winner_cluster: wc,
        winner_job_id: wj,
        waited_seconds: waited,
        entrants: entrants
            .iter()
            .enumerate()
            .map(|(i, e)| RaceEntrant {
                cluster: e.cluster.clone(),
                job_id: e.job_id.clone(),
                source: e.source.clone(),
                state: e.state.clone(),
                won: i == winner,
                cancelled: cancelled.contains(&i),
            })
            .collect(),
    };
    let mut doc = entrants.swap_remove(winner).doc;
    doc.set_section("race", &section);
    ctx.doc = doc;
    Ok(())
}

/// The document on stdin and the others' files, each naming a job no other names.
fn entrants_of(doc: &Document, others: &[std::path::PathBuf]) -> Result<Vec<Entrant>> {
    let mut entrants = vec![entrant(doc.clone(), "stdin")?];
    for p in others {
        let bytes = std::fs::read(p).map_err(|e| {
            ToolError::bad_input(format!("--race {}: cannot read it: {e}", p.display()))
                .with_hint("give the documents slurm-submit wrote for the other clusters")
        })?;
        let name = p.display().to_string();
        entrants.push(entrant(Document::parse(&bytes, &name)?, &name)?);
    }
    for (i, a) in entrants.iter().enumerate() {
        if entrants[..i]
            .iter()
            .any(|b| b.cluster == a.cluster && b.job_id == a.job_id)
        {
            return Err(ToolError::bad_input(format!(
                "--race: {} and an earlier document name the same job ({} job {})",
                a.source, a.cluster, a.job_id
            )));
        }
    }
    Ok(entrants)
}

/// Poll every entrant (at once) until one has started: its index. Said whenever a state changes.
fn first_to_start(ctx: &mut Context, entrants: &mut [Entrant], interval: f64) -> Result<usize> {
    let mut wait = 1.0_f64;
    loop {
        let changed = poll_all(entrants)?;
        if let Some(i) = entrants.iter().position(|e| started(&e.state)) {
            return Ok(i);
        }
        if entrants
            .iter()
            .all(|e| e.state.is_empty() || e.state.starts_with("CANCELLED"))
        {
            return Err(ToolError::remote(
                "--race: every entrant left the queue without starting (cancelled from outside?)",
            )
            .with_hint("check them with slurm-runs; submit again"));
        }
        if changed {
            ctx.note(format!("race: {}", standings(entrants)));
        }
        std::thread::sleep(Duration::from_secs_f64(wait));
        wait = (wait * 1.5).min(interval);
    }
}

/// Every entrant's state and reason, asked at once (one thread and one ssh execution each);
/// true when any changed.
fn poll_all(entrants: &mut [Entrant]) -> Result<bool> {
    let answers: Vec<Result<(String, String)>> = std::thread::scope(|s| {
        let handles: Vec<_> = entrants
            .iter()
            .map(|e| s.spawn(move || shared::remote::run::<RaceState>(&e.ssh, &e.job_id)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a race poll"))
            .collect()
    });
    let mut changed = false;
    for (e, a) in entrants.iter_mut().zip(answers) {
        let (state, reason) = a?;
        if state != e.state || reason != e.reason {
            changed = true;
            e.state = state;
            e.reason = reason;
        }
    }
    Ok(changed)
}

/// `cluster job id STATE (reason), ...`
fn standings(entrants: &[Entrant]) -> String {
    entrants
        .iter()
        .map(|e| {
            format!(
                "{} job {} {}{}",
                e.cluster,
                e.job_id,
                if e.state.is_empty() { "?" } else { &e.state },
                if e.reason.is_empty() || e.reason == "None" {
                    String::new()
                } else {
                    format!(" ({})", e.reason)
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Cancel every entrant but the winner, recorded in the ledger as the race's: their indexes.
fn cancel_the_others(
    ctx: &mut Context,
    entrants: &mut [Entrant],
    winner: usize,
) -> Result<Vec<usize>> {
    let (wc, wj) = (
        entrants[winner].cluster.clone(),
        entrants[winner].job_id.clone(),
    );
    let mut cancelled = Vec::new();
    for (i, e) in entrants.iter_mut().enumerate() {
        if i == winner {
            continue;
        }
        e.state = shared::remote::run::<RaceCancel>(&e.ssh, &e.job_id)?;
        cancelled.push(i);
        shared::state::ledger::record_cancel(
            ctx,
            &e.cluster,
            &e.job_id,
            e.job_name.clone(),
            format!("the race: {wc} job {wj} started first"),
        );
        ctx.note(format!(
            "race: cancelled {} job {} ({})",
            e.cluster, e.job_id, e.source
        ));
    }
    Ok(cancelled)
}

#[cfg(test)]
mod tests {
    use shared::remote::Operation;
    use shared::support::process::Output;

    #[test]
    fn the_race_replies_are_read_into_state_and_reason_and_the_state_after_a_cancel() {
        let state =
            |out: &str| super::RaceState::reply("7", &Output::of(Some(0), out, "")).unwrap();
        assert_eq!(
            state("STATE PENDING|Priority\n"),
            ("PENDING".into(), "Priority".into())
        );
        assert_eq!(
            state("STATE COMPLETED\n"),
            ("COMPLETED".into(), String::new())
        );
        assert_eq!(state("STATE \n"), (String::new(), String::new()));
        assert_eq!(state(""), (String::new(), String::new()));
        let after =
            |out: &str| super::RaceCancel::reply("7", &Output::of(Some(0), out, "")).unwrap();
        assert_eq!(after("CANCELLED \n"), "CANCELLED");
        assert_eq!(after("CANCELLED COMPLETING\n"), "COMPLETING");
        for s in [
            super::RaceState::script("7_1").unwrap(),
            super::RaceCancel::script("7").unwrap(),
        ] {
            shared::remote::script_check::assert_clean("race", s.as_str());
        }
    }

    #[test]
    fn a_job_has_started_once_slurm_says_anything_but_pending_or_cancelled() {
        for s in [
            "RUNNING",
            "COMPLETING",
            "COMPLETED",
            "FAILED",
            "TIMEOUT",
            "CONFIGURING",
        ] {
            assert!(super::started(s), "{s}");
        }
        for s in ["", "PENDING", "REQUEUED", "CANCELLED", "CANCELLED+"] {
            assert!(!super::started(s), "{s}");
        }
    }
}
