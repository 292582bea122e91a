//! slurm-report: the final document as a short table for people.

use clap::Parser;
use serde_json::Value;
use shared::{Context, InputArg, Outcome, Result, ToolCli};

/// Show what happened, as a short table, so nobody has to read the JSON.
///
/// Reads any document of the pipeline (usually slurm-watch's output) and renders: the verdict
/// and Slurm's state, the summary, where it ran and with which commit, the build, the log paths
/// and the excerpt, or the error and its hint when a step failed. By default the table goes to
/// stderr and the document passes on unchanged on stdout, so it can sit at the end of a
/// pipeline; with --table the table goes to stdout instead of the document.
///
/// Exit code: 0 when the job PASSED (or no job ran yet and nothing failed), 1 for any other
/// verdict, the error's code when the document carries an error.
///
/// Example:
///   slurm-watch < submitted.json | slurm-report > report.json
///   slurm-report --table report.json
#[derive(Parser, Debug)]
#[command(name = "slurm-report", version, verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Print the table on stdout instead of the document.
    #[arg(long)]
    table: bool,

    /// How many excerpt lines to show.
    #[arg(long, default_value_t = 15, value_name = "N")]
    lines: usize,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }

    fn handles_upstream_error(&self) -> bool {
        true
    }
}

fn main() -> std::process::ExitCode {
    shared::driver::run::<Cli>("slurm-report", report)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("-")
}

fn row(t: &mut String, k: &str, v: String) {
    t.push_str(&format!("  {k:<12} {v}\n"));
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

fn report(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let d = Value::Object(ctx.doc.as_map().clone());
    let mut t = String::new();
    let code: u8;
    if let Some(e) = d.get("error").filter(|e| e.is_object()) {
        t.insert_str(0, &format!("FAILED in {}\n", s(e, "tool")));
        row(&mut t, "error", s(e, "message").to_string());
        if e.get("field").is_some() {
            row(&mut t, "field", s(e, "field").to_string());
        }
        row(&mut t, "what to do", s(e, "hint").to_string());
        code = e.get("exit_code").and_then(Value::as_u64).unwrap_or(2) as u8;
    } else if let Some(r) = d.get("report").filter(|r| r.is_object()) {
        let status = s(r, "status");
        t.insert_str(
            0,
            &format!("{status}  job {} ({})\n", s(r, "job_id"), s(r, "kind")),
        );
        row(&mut t, "summary", s(r, "summary").to_string());
        row(
            &mut t,
            "slurm",
            format!(
                "{} exit {} elapsed {}",
                s(r, "slurm_state"),
                r.get("exit_code").and_then(Value::as_str).unwrap_or("-"),
                r.get("elapsed").and_then(Value::as_str).unwrap_or("-")
            ),
        );
        code = u8::from(status != "PASSED");
    } else if let Some(j) = d.get("job").filter(|j| j.is_object()) {
        t.insert_str(
            0,
            &format!("SUBMITTED  job {} ({})\n", s(j, "job_id"), s(j, "kind")),
        );
        row(&mut t, "command", s(j, "command").to_string());
        code = 0;
    } else {
        t.insert_str(0, "NOT SUBMITTED YET\n");
        code = 0;
    }
    if let Some(res) = d.get("resolve") {
        row(
            &mut t,
            "cluster",
            format!(
                "{} via {} ({})",
                s(res, "cluster_name"),
                s(&d, "ssh_host"),
                d.get("preflight")
                    .map_or("no preflight", |p| s(p, "ssh_path"))
            ),
        );
    }
    if let Some(st) = d.get("sync_tracked") {
        let untracked = d
            .get("sync_untracked")
            .and_then(|u| u.get("files"))
            .and_then(Value::as_u64);
        row(
            &mut t,
            "checkout",
            format!(
                "{} at {} (HEAD {} + {} changed){}",
                s(st, "remote_repo_path"),
                short(s(st, "commit")),
                short(s(st, "base_commit")),
                st.get("changed_paths").and_then(Value::as_u64).unwrap_or(0),
                untracked
                    .map(|n| format!(", {n} untracked file(s)"))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(b) = d.get("build") {
        row(
            &mut t,
            "build",
            format!(
                "job {}: {}",
                s(&b["job"], "job_id"),
                b.get("report").map_or("-", |r| s(r, "status"))
            ),
        );
    }
    if let Some(r) = d.get("report") {
        row(&mut t, "remote log", s(r, "remote_log").to_string());
        if let Some(l) = r.get("local_log").and_then(Value::as_str) {
            row(&mut t, "local copy", l.to_string());
        }
        let excerpt: Vec<&str> = r
            .get("excerpt")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !excerpt.is_empty() {
            t.push_str("  log (last lines):\n");
            for l in &excerpt[excerpt.len().saturating_sub(cli.lines)..] {
                t.push_str(&format!("    | {l}\n"));
            }
        }
        let err: Vec<&str> = r
            .get("excerpt_err")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !err.is_empty() {
            t.push_str("  stderr (last lines):\n");
            for l in &err[err.len().saturating_sub(cli.lines)..] {
                t.push_str(&format!("    | {l}\n"));
            }
        }
    }
    if cli.table {
        return Ok(Outcome::Text(t, code));
    }
    eprint!("{t}");
    Ok(match code {
        0 => Outcome::Done,
        _ if d.get("error").is_some() => Outcome::Text(ctx.doc.to_line(), code),
        _ => Outcome::JobNotPassed,
    })
}
