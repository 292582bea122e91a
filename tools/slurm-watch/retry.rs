//! `--retry N`: a run that ended on an infrastructure failure (NODE_FAIL, PREEMPTED, BOOT_FAIL:
//! not the code's fault) is submitted again, with the nodes it ran on excluded, at most N times;
//! every attempt is in the document (`attempts`) and linked in the ledger (`retry_of`, `attempt`).
//! A FAILED run is never retried: that is the code's verdict.

use shared::contract::schema::{Attempt, Report, Sweep, TaskReport};
use shared::remote::ssh::Ssh;
use shared::support::process::{Cmd, Input};
use shared::{Context, Document, Outcome, Result, ToolError};
use std::time::Duration;

/// Slurm states that are the infrastructure's fault.
pub fn is_infrastructure(state: &str) -> bool {
    matches!(state, "NODE_FAIL" | "PREEMPTED" | "BOOT_FAIL")
}

/// What to do after a verdict.
pub enum Next {
    /// No retry: the verdict stands.
    Done,
    /// Resubmitted: watch the new job (the document now describes it).
    Watch,
    /// The resubmission failed: its document and exit code.
    Stop(Outcome),
}

/// The nodes `job` ran on (one ssh execution, shared::remote::JobNodes); none when it cannot
/// be asked.
fn nodes_of(ssh: &Ssh, job: &str) -> Option<String> {
    shared::remote::run::<shared::remote::JobNodes>(ssh, job)
        .ok()
        .flatten()
}

shared::document_input! {
    /// What --retry reads of the watched document, once its verdict is in.
    pub struct RetryInput {
        pub report: Option<Report> = section,
        /// This run's attempt number (the first run is 1).
        pub attempt: Option<i64> = int(1, 1000),
        pub attempts: Option<Vec<Attempt>> = section,
        pub exclude_nodes: Option<Vec<String>> = strings,
        pub retry_of: Option<String> = string,
        pub sweep: Option<Sweep> = section,
        pub connection: shared::remote::ssh::Connection = part,
    }
}

pub fn after_verdict(ctx: &mut Context, max: u32) -> Result<Next> {
    let input = RetryInput::read(&ctx.doc)?;
    let Some(report) = input.report.clone() else {
        return Ok(Next::Done);
    };
    if let Some(rows) = &report.tasks {
        return after_sweep(ctx, &input, max, &report, rows);
    }
    if !is_infrastructure(&report.slurm_state) {
        return Ok(Next::Done);
    }
    let Some(attempt) = attempt_left(ctx, &input, max, &report.job_id, &report.slurm_state) else {
        return Ok(Next::Done);
    };
    let ssh = Ssh::connect(&input.connection)?;
    let nodes = nodes_of(&ssh, &report.job_id);
    let attempt_record = Attempt {
        job_id: report.job_id.clone(),
        slurm_state: report.slurm_state.clone(),
        status: report.status,
        nodes: nodes.clone(),
    };
    let failed: Vec<String> = nodes.iter().cloned().collect();
    let doc = ctx.doc.clone();
    let (doc, exclude) = next_attempt(
        doc,
        &input,
        attempt_record,
        &failed,
        attempt,
        &report.job_id,
    );
    ctx.note(format!(
        "job {} ended {} ({}): not the code's fault, submitting attempt {} of at most {} with {} excluded",
        report.job_id,
        report.slurm_state,
        nodes.as_deref().unwrap_or("nodes unknown"),
        attempt + 1,
        max + 1,
        if exclude.is_empty() { "no node".to_string() } else { exclude.join(",") }
    ));
    resubmit(ctx, doc)
}

/// This run's attempt number, when another is allowed (said when not).
fn attempt_left(
    ctx: &Context,
    input: &RetryInput,
    max: u32,
    job: &str,
    state: &str,
) -> Option<u32> {
    let attempt = input.attempt.unwrap_or(1) as u32;
    if attempt > max {
        ctx.note(format!(
            "job {job} ended {state} and this was attempt {attempt}: no retries left (--retry {max})"
        ));
        return None;
    }
    Some(attempt)
}

/// The document of the next attempt: this one recorded in `attempts`, its failed nodes
/// excluded, linked to the first; returns it and the nodes now excluded.
fn next_attempt(
    mut doc: Document,
    input: &RetryInput,
    record: Attempt,
    failed_nodes: &[String],
    attempt: u32,
    job_id: &str,
) -> (Document, Vec<String>) {
    let mut attempts = input.attempts.clone().unwrap_or_default();
    attempts.push(record);
    let mut exclude = input.exclude_nodes.clone().unwrap_or_default();
    for n in failed_nodes {
        if !exclude.contains(n) {
            exclude.push(n.clone());
        }
    }
    let first = input.retry_of.clone().unwrap_or_else(|| job_id.to_string());
    doc.remove("report");
    doc.remove("job");
    doc.set_section("attempts", &attempts);
    doc.set_section("exclude_nodes", &exclude);
    doc.set_section("retry_of", &first);
    doc.set_section("attempt", &(attempt + 1));
    (doc, exclude)
}

/// A sweep: only the tasks that ended on an infrastructure failure are submitted again (an
/// array of just those indexes, their nodes excluded); the others keep their verdicts.
fn after_sweep(
    ctx: &mut Context,
    input: &RetryInput,
    max: u32,
    report: &Report,
    rows: &[TaskReport],
) -> Result<Next> {
    let (infra, rest): (Vec<&TaskReport>, Vec<&TaskReport>) =
        rows.iter().partition(|r| is_infrastructure(&r.slurm_state));
    if infra.is_empty() {
        return Ok(Next::Done);
    }
    let states: Vec<String> = infra
        .iter()
        .map(|r| format!("task {} {}", r.index, r.slurm_state))
        .collect();
    let Some(attempt) = attempt_left(ctx, input, max, &report.job_id, &states.join(", ")) else {
        return Ok(Next::Done);
    };
    let mut failed_nodes: Vec<String> = Vec::new();
    for n in infra.iter().filter_map(|r| r.nodes.clone()) {
        if !failed_nodes.contains(&n) {
            failed_nodes.push(n);
        }
    }
    let record = Attempt {
        job_id: report.job_id.clone(),
        slurm_state: infra[0].slurm_state.clone(),
        status: report.status,
        nodes: (!failed_nodes.is_empty()).then(|| failed_nodes.join(",")),
    };
    let mut doc = ctx.doc.clone();
    let sweep = input.sweep.clone().unwrap_or_default();
    let only: Vec<u32> = infra.iter().map(|r| r.index).collect();
    doc.set_section(
        "sweep",
        &Sweep {
            only: Some(only.clone()),
            ..sweep
        },
    );
    doc.set_section(
        "sweep_done",
        &rest.into_iter().cloned().collect::<Vec<TaskReport>>(),
    );
    let (doc, exclude) = next_attempt(doc, input, record, &failed_nodes, attempt, &report.job_id);
    ctx.note(format!(
        "sweep {}: {} (not the code's fault): submitting only {} again as attempt {} of at most {}, with {} excluded; the other tasks keep their verdicts",
        report.job_id,
        states.join(", "),
        if only.len() == 1 { format!("task {}", only[0]) } else { format!("tasks {}", only.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")) },
        attempt + 1,
        max + 1,
        if exclude.is_empty() { "no node".to_string() } else { exclude.join(",") }
    ));
    resubmit(ctx, doc)
}

/// slurm-submit (beside this tool) on `doc`; the watch goes on with its output.
fn resubmit(ctx: &mut Context, doc: Document) -> Result<Next> {
    let submit = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("slurm-submit")))
        .filter(|p| p.exists())
        .ok_or_else(|| {
            ToolError::bad_input("slurm-submit is not beside slurm-watch")
                .with_hint("install the tools together (they are one package), or retry by hand: slurm-submit on this document")
        })?;
    let out = Cmd::new(submit.display().to_string())
        .input(Input::Bytes(doc.to_line().into_bytes()))
        .inherit_stderr()
        .deadline(Duration::from_secs(3600))
        .run()
        .map_err(|e| shared::remote::ssh::spawn_error("slurm-submit", e))?;
    let next = Document::parse(&out.stdout, "slurm-submit's output")?;
    ctx.doc = next;
    if out.code != Some(0) {
        return Ok(Next::Stop(Outcome::Exit(
            out.code.unwrap_or(4).clamp(1, 255) as u8,
        )));
    }
    Ok(Next::Watch)
}
