//! The event stream: one JSON line per state change of a run (slurm-watch `--events`,
//! slurm-runs `--watch --events`), for `jq`, slurm-notify or a retry script.
//!
//! Each line: `{"event", "at", "time", "cluster", "job_id", ...}` with `event` one of
//! `submitted`, `pending` (with `reason`, `estimated_start`), `running`, `importing` (with
//! `image`), `progress` (with `percent`), `hang` (with `line`), `ended` (Slurm's final state, seen
//! by slurm-runs), `verdict` (with `status`, `summary`). docs/contract.md lists the fields.

use serde::Serialize;
use std::io::Write;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Event {
    pub event: &'static str,
    pub at: u64,
    /// `at` as a UTC stamp, for people reading the stream.
    pub time: String,
    pub cluster: String,
    pub job_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// A sweep: the task (its array index) the event is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
    /// Slurm's state when the event is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While pending: the reason's category (shared/src/slurm/pending.rs: resources, priority,
    /// your_limit, partition_limit, held, dependency, begin_time, nodes_unavailable, other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// While pending: what holds the job, with the figure that matters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// While pending: what would help.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The scheduler's estimate while pending, Unix time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The run's saved document (the ledger's), for a notifier or a retry script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
}

impl Event {
    pub fn new(event: &'static str, cluster: &str, job_id: &str) -> Event {
        let at = crate::support::clock::unix_now();
        Event {
            event,
            at,
            time: crate::support::clock::iso_utc(at),
            cluster: cluster.to_string(),
            job_id: job_id.to_string(),
            ..Event::default()
        }
    }
}

/// Where events go: a file appended to (`/dev/fd/3`, `/dev/stderr` and named pipes work too),
/// or stdout for a tool whose stdout is not a document (`-`).
pub struct Sink {
    out: Box<dyn Write>,
    target: String,
    broken: bool,
}

impl Sink {
    /// Open `target` for appending; `-` is stdout (only where stdout is not the document).
    pub fn open(target: &str) -> crate::Result<Sink> {
        let out: Box<dyn Write> = if target == "-" {
            Box::new(std::io::stdout())
        } else {
            Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)
                    .map_err(|e| {
                        crate::ToolError::bad_input(format!("--events {target}: cannot open it for writing ({e})"))
                            .with_hint("give a file to append to, a named pipe, or /dev/fd/N for a descriptor the shell opened (`3>events.jsonl`)")
                    })?,
            )
        };
        Ok(Sink {
            out,
            target: target.to_string(),
            broken: false,
        })
    }

    /// Write one event as one line, flushed. A reader that went away is said once, then ignored:
    /// the watch goes on.
    pub fn send(&mut self, tool: &str, e: &Event) {
        if self.broken {
            return;
        }
        let Ok(mut line) = serde_json::to_vec(e) else {
            return;
        };
        line.push(b'\n');
        if let Err(err) = self.out.write_all(&line).and_then(|()| self.out.flush()) {
            self.broken = true;
            crate::support::ui::warn(
                tool,
                &format!(
                    "could not write an event to {} ({err}); no more events are written",
                    self.target
                ),
            );
        }
    }
}
