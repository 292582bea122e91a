//! slurm-report: the final document as a short table for people.

use clap::Parser;
use shared::contract::schema::{
    Build, ErrorSection, Job, Preflight, Report, Resolve, Status, SyncTracked, SyncUntracked,
};
use shared::{Context, InputArg, Outcome, Result, ToolCli};

/// Show what happened, as a short table, so nobody has to read the JSON.
///
/// Reads any document of the pipeline (usually slurm-watch's output) and renders: the verdict
/// and Slurm's state, the summary, where it ran and with which commit, the build, the log paths
/// and the excerpt, or the error and its hint when a step failed. A sweep's report gets a row per
/// task (verdict, Slurm's state, exit code, elapsed time, nodes, parameters) and what each task
/// that did not pass said. By default the table goes to
/// stderr and the document passes on unchanged on stdout, so it can sit at the end of a
/// pipeline; with --table the table goes to stdout instead of the document.
///
/// {reads}
///
/// Exit code: 0 when the job PASSED (or no job ran yet and nothing failed), 1 for any other
/// verdict, the error's code when the document carries an error.
///
/// Example:
///   slurm-watch < submitted.json | slurm-report > report.json
///   slurm-report --table report.json
#[derive(Parser, Debug)]
#[command(name = "slurm-report", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
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
    fn reads() -> Vec<&'static str> {
        Input::reads()
    }

    fn input(&self) -> &InputArg {
        &self.input
    }

    fn handles_upstream_error(&self) -> bool {
        true
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-report", report)
}

fn row(t: &mut String, k: &str, v: String) {
    t.push_str(&format!("  {k:<12} {v}\n"));
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

shared::document_input! {
    /// What slurm-report shows. Every section is read through its type, and one that does not
    /// parse is shown as missing (a report shows what it can rather than fail on the document
    /// it was asked to show).
    struct Input {
        error: Option<ErrorSection> = label_section,
        report: Option<Report> = label_section,
        job: Option<Job> = label_section,
        resolve: Option<Resolve> = label_section,
        ssh_host: Option<String> = label,
        preflight: Option<Preflight> = label_section,
        sync_tracked: Option<SyncTracked> = label_section,
        sync_untracked: Option<SyncUntracked> = label_section,
        build: Option<Build> = label_section,
    }
}

/// The last `n` lines of an excerpt, indented.
fn excerpt(t: &mut String, title: &str, lines: &[String], n: usize) {
    if lines.is_empty() {
        return;
    }
    t.push_str(&format!("  {title} (last lines):\n"));
    for l in &lines[lines.len().saturating_sub(n)..] {
        t.push_str(&format!("    | {l}\n"));
    }
}

/// The first line (the error, the verdict, or how far the run got) and its rows: the exit code.
fn headline(t: &mut String, input: &Input) -> u8 {
    let code: u8;
    if let Some(e) = &input.error {
        t.push_str(&format!("FAILED in {}\n", e.tool));
        row(t, "error", e.message.clone());
        if let Some(f) = &e.field {
            row(t, "field", f.clone());
        }
        row(t, "what to do", e.hint.clone());
        code = e.exit_code;
    } else if let Some(r) = &input.report {
        t.push_str(&format!("{}  job {} ({})\n", r.status, r.job_id, r.kind));
        row(t, "summary", r.summary.clone());
        row(
            t,
            "slurm",
            format!(
                "{} exit {} elapsed {}",
                r.slurm_state,
                r.exit_code.as_deref().unwrap_or("-"),
                r.elapsed.as_deref().unwrap_or("-")
            ),
        );
        code = u8::from(r.status != Status::Passed);
    } else if let Some(j) = &input.job {
        t.push_str(&format!(
            "SUBMITTED  job {} ({})\n",
            j.job_id.as_deref().unwrap_or("-"),
            j.kind
        ));
        row(
            t,
            "command",
            j.command.clone().unwrap_or_else(|| "-".into()),
        );
        code = 0;
    } else {
        t.push_str("NOT SUBMITTED YET\n");
        code = 0;
    }
    code
}

/// Where it ran: the container, the cluster, the checkout, the build.
fn where_rows(t: &mut String, input: &Input) {
    if let Some(job) = input.job.as_ref().filter(|j| j.container_image.is_some()) {
        let used = input.report.as_ref().and_then(|r| r.container.as_ref());
        row(t, "container", container_row(job, used));
    }
    if let Some(res) = &input.resolve {
        row(
            t,
            "cluster",
            format!(
                "{} via {} ({})",
                res.cluster_name,
                input.ssh_host.as_deref().unwrap_or("-"),
                input
                    .preflight
                    .as_ref()
                    .map_or("no preflight".to_string(), |p| p.ssh_path.to_string())
            ),
        );
    }
    if let Some(st) = &input.sync_tracked {
        let untracked = input.sync_untracked.as_ref().map(|u| u.files);
        row(
            t,
            "checkout",
            format!(
                "{} at {} (HEAD {} + {} changed){}",
                st.remote_repo_path,
                short(&st.commit),
                short(&st.base_commit),
                st.changed_paths,
                untracked
                    .map(|n| format!(", {n} untracked file(s)"))
                    .unwrap_or_default()
            ),
        );
    }
    if let Some(b) = &input.build {
        row(
            t,
            "build",
            format!(
                "job {}: {}",
                b.job.job_id.as_deref().unwrap_or("-"),
                b.report
                    .as_ref()
                    .map_or("-".to_string(), |r| r.status.to_string())
            ),
        );
    }
}

fn report(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let mut t = String::new();
    let code = headline(&mut t, &input);
    where_rows(&mut t, &input);
    if let Some(tasks) = input.report.as_ref().and_then(|r| r.tasks.as_ref()) {
        task_table(&mut t, tasks);
    }
    if let Some(r) = &input.report {
        row(&mut t, "remote log", r.remote_log.clone());
        if let Some(l) = &r.local_log {
            row(&mut t, "local copy", l.clone());
        }
        excerpt(&mut t, "log", &r.excerpt, cli.lines);
        excerpt(&mut t, "stderr", &r.excerpt_err, cli.lines);
    }
    if cli.table {
        return Ok(Outcome::Text(t, code));
    }
    eprint!("{t}");
    Ok(match code {
        0 => Outcome::Done,
        // The document carries an error: pass it on exactly as it came, with its code.
        _ if input.error.is_some() => Outcome::Text(ctx.doc.to_line(), code),
        _ => Outcome::JobNotPassed,
    })
}

/// A sweep's tasks: one row each (index, verdict, Slurm's state, exit, elapsed, nodes,
/// parameters), then what each task that did not pass said.
fn task_table(t: &mut String, tasks: &[shared::contract::schema::TaskReport]) {
    let params = |r: &shared::contract::schema::TaskReport| {
        r.params
            .iter()
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                format!("{k}={}", shared::remote::quote::quote_for_display(&v))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let rows: Vec<[String; 7]> = tasks
        .iter()
        .map(|r| {
            [
                r.index.to_string(),
                r.status.to_string(),
                r.slurm_state.clone(),
                r.exit_code.clone().unwrap_or_else(|| "-".into()),
                r.elapsed.clone().unwrap_or_else(|| "-".into()),
                r.nodes.clone().unwrap_or_else(|| "-".into()),
                params(r),
            ]
        })
        .collect();
    let head = [
        "TASK",
        "VERDICT",
        "SLURM",
        "EXIT",
        "ELAPSED",
        "NODES",
        "PARAMETERS",
    ];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    t.push_str("  tasks:\n");
    for cells in std::iter::once(head.map(str::to_string)).chain(rows) {
        let mut line = String::from("   ");
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(&format!(" {c}"));
            } else {
                line.push_str(&format!(" {c:<w$}", w = width[i]));
            }
        }
        t.push_str(line.trim_end());
        t.push('\n');
    }
    for r in tasks.iter().filter(|r| r.status != Status::Passed) {
        let from = r
            .from_job
            .as_deref()
            .map(|j| format!(" (from job {j})"))
            .unwrap_or_default();
        t.push_str(&format!("    task {}{from}: {}\n", r.index, r.summary));
        for l in r.excerpt_err.iter().rev().take(3).rev() {
            t.push_str(&format!("      | {l}\n"));
        }
    }
}

/// "ran in IMAGE (apptainer; cached sha256:8c89fd10dff8 pulled for this job in 22 s)".
fn container_row(job: &Job, used: Option<&shared::contract::schema::ContainerUse>) -> String {
    // The image as written when it ran from the cache (the job section has the cached file).
    let image = used
        .filter(|u| u.file.is_some())
        .map(|u| u.image.as_str())
        .or(job.container_image.as_deref())
        .unwrap_or_default();
    let pyxis = matches!(job.container_runtime.as_deref(), None | Some("pyxis"));
    let runtime = match job.container_runtime.as_deref() {
        None | Some("pyxis") => "pyxis/enroot",
        Some(other) => other,
    };
    let pulled = if pyxis {
        "imported on the login node into the image cache"
    } else {
        "pulled into the image cache"
    };
    let cache = used.map(|u| {
        let digest = u
            .digest
            .as_deref()
            .map(|d| d.get(..19).unwrap_or(d))
            .unwrap_or("");
        let secs = u
            .pull_seconds
            .map(|s| format!(" in {s} s"))
            .unwrap_or_default();
        match u.cache.as_str() {
            "hit" => format!("; image cache hit, {digest}"),
            "pulled" => format!("; {pulled}{secs}, {digest}"),
            "waited" => {
                format!("; waited{secs} for another job's pull into the image cache, {digest}")
            }
            _ => "; not cached (no digest from the registry)".to_string(),
        }
    });
    format!("ran in {image} ({runtime}{})", cache.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::contract::schema::TaskReport;

    #[test]
    fn a_sweep_has_a_row_per_task_and_says_why_a_task_did_not_pass() {
        let task = |index: u32, status: Status, state: &str, v: &str| TaskReport {
            index,
            job_id: format!("9_{index}"),
            params: [("lr".to_string(), serde_json::Value::String(v.into()))]
                .into_iter()
                .collect(),
            status,
            slurm_state: state.into(),
            exit_code: Some("0:0".into()),
            elapsed: Some("00:00:03".into()),
            summary: format!("summary {index}"),
            nodes: Some("mn1".into()),
            remote_log: String::new(),
            hang_line: None,
            excerpt: Vec::new(),
            excerpt_err: vec!["boom".into()],
            from_job: (index == 0).then(|| "7".into()),
        };
        let mut t = String::new();
        task_table(
            &mut t,
            &[
                task(0, Status::Passed, "COMPLETED", "0.1"),
                task(1, Status::HangDetected, "CANCELLED", "a b"),
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "  tasks:");
        assert_eq!(
            lines[1],
            "    TASK VERDICT       SLURM     EXIT ELAPSED  NODES PARAMETERS"
        );
        assert_eq!(
            lines[2],
            "    0    PASSED        COMPLETED 0:0  00:00:03 mn1   lr=0.1"
        );
        assert_eq!(
            lines[3],
            "    1    HANG_DETECTED CANCELLED 0:0  00:00:03 mn1   lr='a b'"
        );
        assert_eq!(lines[4], "    task 1: summary 1");
        assert_eq!(lines[5], "      | boom");
        assert_eq!(lines.len(), 6);
    }
}
