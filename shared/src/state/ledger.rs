//! The run ledger: one local JSON-lines file that remembers every submission, on every cluster,
//! across laptop restarts, without a server (`<state dir>/runs.jsonl`, see [`state_dir`]).
//!
//! The file is append-only. slurm-submit and `slurm-alloc up` append a `submitted` entry (and save
//! the document they wrote under `runs/`, so any run can be handed to slurm-watch again);
//! slurm-watch appends a `verdict`; slurm-runs appends `state` entries for runs it saw end.
//! A run's current view is the fold of its entries in file order ([`fold`]).
//!
//! Safe under concurrent tools and kills: each entry is one `write` of one whole line under an
//! exclusive lock of the file (released by the kernel if the writer dies), and a writer that
//! finds the file not ending in a newline (a writer killed mid-line, a full disk) starts on a
//! fresh line, so a torn line can only ever lose itself. Readers skip lines that do not parse
//! and say how many.
//!
//! [`state_dir`]: crate::state::journal::state_dir

use crate::contract::doc::Document;
use crate::contract::schema::{Job, Report};
use serde::{Deserialize, Serialize};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The ledger's file name in the state directory.
pub const FILE: &str = "runs.jsonl";

/// One line of the ledger.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `submitted`, `verdict`, `state` (Slurm's state, seen by slurm-runs) or `retry`.
    pub event: String,
    /// Unix time the line was written.
    pub at: u64,
    /// The catalog entry (`slurm_cluster`), else the ssh host.
    pub cluster: String,
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// `run`, `build` or `allocation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// The snapshot commit the job's tree holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<u64>,
    /// The saved document: `slurm-watch <document>` resumes the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// The verdict (slurm-watch's report status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Slurm's state (COMPLETED, NODE_FAIL, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_state: Option<String>,
    /// Nodes the job ran on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    /// A retry: the job id this one retries, and its attempt number (the first run is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The container image the job (or allocation) ran from, as the runtime got it, and the
    /// registry content digest of the image cache's file when it came from the cache
    /// (`job.container_use`, `allocation.container_use`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// Who cancelled it, when the tools did: `the race: <cluster> job <id> started first`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    /// A sweep: its `--array` value (`0-5%2`; `3,4` for a rerun of some tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// A sweep's verdict: its tasks counted per verdict (`4 PASSED, 1 FAILED (task 3)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<String>,
    /// An audit line (`event: "mcp"`, written by slurm-mcp for every tool call): the MCP
    /// client's name, the tool it called, and how the call ended (`ok`, `planned`, `failed (exit
    /// N): ...`, `refused: ...`). Not a run: [`fold`] leaves these lines out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The GPU-hours an audited submission asked for (GPUs × nodes × tasks × time limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<f64>,
}

/// The ledger's `event` for slurm-mcp's audit lines.
pub const AUDIT: &str = "mcp";

/// The ledger's path, when there is a state directory.
pub fn path() -> Option<PathBuf> {
    crate::state::journal::state_dir().map(|d| d.join(FILE))
}

/// Append one entry as one line: under an exclusive lock, in one write, on a fresh line.
pub fn append_to(path: &Path, entry: &Entry) -> std::io::Result<()> {
    append_line(
        path,
        serde_json::to_vec(entry).map_err(std::io::Error::other)?,
    )
}

/// Append `line` (a newline is added) to the JSON-lines file at `path` the ledger's way: under
/// an exclusive lock, in one write, on a fresh line.
pub fn append_line(path: &Path, mut line: Vec<u8>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::state::private_files::own_dir(dir)?;
    }
    line.push(b'\n');
    let mut f = crate::state::private_files::open_append(path)?;
    f.lock()?;
    let len = f.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            line.insert(0, b'\n');
        }
    }
    crate::support::testhook::pause("ledger:locked");
    if std::env::var("SLURM_TOOLS_PAUSE_AT").as_deref() == Ok("ledger:mid-line") {
        // Test hook: half a line written, then the writer is killed.
        f.write_all(&line[..line.len() / 2])?;
        f.flush()?;
        crate::support::testhook::pause("ledger:mid-line");
        f.write_all(&line[line.len() / 2..])?;
    } else {
        f.write_all(&line)?;
    }
    f.flush()
}

/// Every entry of the ledger at `path`, in order, and how many lines did not parse.
pub fn read(path: &Path) -> std::io::Result<(Vec<Entry>, usize)> {
    let text = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::new();
    let mut bad = 0;
    for line in text.split(|b| *b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Entry>(line) {
            Ok(e) if e.event == AUDIT || !e.job_id.is_empty() && !e.cluster.is_empty() => {
                entries.push(e)
            }
            _ => bad += 1,
        }
    }
    Ok((entries, bad))
}

/// One run: all of its entries folded, later ones filling in and overriding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Run {
    pub cluster: String,
    pub job_id: String,
    pub job_name: Option<String>,
    pub kind: Option<String>,
    pub recipe: Option<String>,
    pub snapshot: Option<String>,
    pub submitted_at: Option<u64>,
    pub document: Option<String>,
    pub status: Option<String>,
    pub slurm_state: Option<String>,
    pub nodes: Option<String>,
    pub retry_of: Option<String>,
    pub attempt: Option<u32>,
    pub image: Option<String>,
    pub image_digest: Option<String>,
    pub cancelled_by: Option<String>,
    pub array: Option<String>,
    pub tasks: Option<String>,
    /// Unix time of the run's last entry.
    pub updated_at: u64,
}

impl Run {
    /// The run has ended: a verdict, or a final Slurm state.
    pub fn finished(&self) -> bool {
        self.status.is_some()
            || self
                .slurm_state
                .as_deref()
                .is_some_and(crate::slurm::is_final)
    }
}

/// The runs of `entries`, in the order they were first seen (one per cluster and job id).
pub fn fold(entries: &[Entry]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for e in entries.iter().filter(|e| e.event != AUDIT) {
        let key = (e.cluster.clone(), e.job_id.clone());
        let i = *index.entry(key).or_insert_with(|| {
            runs.push(Run {
                cluster: e.cluster.clone(),
                job_id: e.job_id.clone(),
                ..Run::default()
            });
            runs.len() - 1
        });
        let r = &mut runs[i];
        macro_rules! fill {
            ($($f:ident),*) => {$( if e.$f.is_some() { r.$f = e.$f.clone(); } )*};
        }
        fill!(
            job_name,
            kind,
            recipe,
            snapshot,
            submitted_at,
            document,
            status,
            slurm_state,
            nodes,
            retry_of,
            attempt,
            image,
            image_digest,
            cancelled_by,
            array,
            tasks
        );
        r.updated_at = r.updated_at.max(e.at);
    }
    runs
}

crate::document_input! {
    /// What the ledger takes from a run's document: labels, never a reason to fail a step (a
    /// field not of its type is no label).
    pub struct RunLabels {
        pub cluster: ClusterName = part,
        pub job_name: Option<String> = label,
        pub retry_of: Option<String> = label,
        pub attempt: Option<i64> = label_int,
        pub job: Option<Job> = label_section,
        pub allocation: Option<crate::contract::schema::Allocation> = label_section,
        pub sync_tracked: Option<crate::contract::schema::SyncTracked> = label_section,
    }
}

crate::document_input! {
    /// The name of the cluster a run belongs to, as a label: its catalog entry, else its ssh
    /// host.
    pub struct ClusterName {
        pub slurm_cluster: Option<String> = label,
        pub ssh_host: Option<String> = label,
    }
}

impl ClusterName {
    /// The catalog entry, else the ssh host, else `unknown`.
    pub fn name(&self) -> String {
        self.slurm_cluster
            .as_deref()
            .or(self.ssh_host.as_deref())
            .unwrap_or("unknown")
            .to_string()
    }
}

impl RunLabels {
    /// The labels of `doc` (every reader is lenient: this never fails).
    pub fn of(doc: &Document) -> RunLabels {
        RunLabels::read(doc).unwrap_or_default()
    }

    /// The cluster the run belongs to: its catalog entry, else its ssh host.
    pub fn cluster(&self) -> String {
        self.cluster.name()
    }
}

/// The cluster a document's run belongs to: its catalog entry, else its ssh host.
pub fn cluster_of(doc: &Document) -> String {
    ClusterName::read(doc).unwrap_or_default().name()
}

/// A file-name-safe form of `s`.
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Where the run's document is saved: `runs/<cluster>-<job id>.json` beside the ledger.
pub fn document_path(ledger: &Path, cluster: &str, job_id: &str) -> PathBuf {
    ledger
        .with_file_name("runs")
        .join(format!("{}-{}.json", file_safe(cluster), file_safe(job_id)))
}

/// Save `doc` as the run's document (`runs/<cluster>-<job id>.json` beside the ledger), written
/// aside and renamed so a reader never sees half of it.
pub fn save_document(
    ledger: &Path,
    cluster: &str,
    job_id: &str,
    doc: &Document,
) -> std::io::Result<PathBuf> {
    let path = document_path(ledger, cluster, job_id);
    let dir = path.parent().expect("runs/").to_path_buf();
    if let Some(state) = dir.parent() {
        crate::state::private_files::own_dir(state)?;
    }
    crate::state::private_files::own_dir(&dir)?;
    crate::state::private_files::write_atomic(&path, doc.to_line().as_bytes(), 0o600)?;
    Ok(path)
}

/// Record that this run cancelled a job, and who did (`slurm-watch --cancel`, a race): a `state`
/// entry, CANCELLED, with `cancelled_by`. The ledger is a convenience: a failure is a warning.
pub fn record_cancel(
    ctx: &crate::Context,
    cluster: &str,
    job_id: &str,
    job_name: Option<String>,
    by: String,
) {
    let Some(path) = path() else {
        return;
    };
    let entry = Entry {
        event: "state".to_string(),
        at: crate::support::clock::unix_now(),
        cluster: cluster.to_string(),
        job_id: job_id.to_string(),
        job_name,
        slurm_state: Some("CANCELLED".to_string()),
        cancelled_by: Some(by),
        ..Default::default()
    };
    if let Err(err) = append_to(&path, &entry) {
        ctx.warn(format!(
            "could not record the cancel of {cluster} job {job_id} in the ledger {}: {err}",
            path.display()
        ));
    }
}

/// Record a submission (slurm-submit, `slurm-alloc up`): save the document and append a
/// `submitted` entry. The ledger is a convenience: a failure is a warning, never the step's end.
pub fn record_submission(ctx: &crate::Context, kind: &str, job_id: &str) {
    let Some(path) = path() else {
        return;
    };
    let doc = &ctx.doc;
    let labels = RunLabels::of(doc);
    let cluster = labels.cluster();
    let job = labels.job;
    // The image the run started from: the job's, or the held allocation's.
    let container = match kind {
        "allocation" => labels.allocation.and_then(|a| a.container_use),
        _ => job.as_ref().and_then(|j| j.container_use.clone()),
    };
    let mut saved = doc.clone();
    saved.stamp_contract_version();
    let document = save_document(&path, &cluster, job_id, &saved)
        .map(|p| p.display().to_string())
        .map_err(|e| ctx.warn(format!("could not save the run's document beside the ledger {} ({e}); slurm-runs lists the run without it", path.display())))
        .ok();
    let entry = Entry {
        event: "submitted".into(),
        at: crate::support::clock::unix_now(),
        cluster,
        job_id: job_id.to_string(),
        job_name: labels.job_name,
        kind: Some(kind.to_string()),
        recipe: job
            .as_ref()
            .and_then(|j| j.recipe)
            .map(|r| crate::contract::doc::enum_name(&r)),
        snapshot: job
            .as_ref()
            .and_then(|j| j.tree_commit.clone())
            .or_else(|| labels.sync_tracked.map(|s| s.commit)),
        submitted_at: Some(
            job.as_ref()
                .and_then(|j| j.submitted_at)
                .unwrap_or_else(crate::support::clock::unix_now),
        ),
        document,
        retry_of: labels.retry_of,
        attempt: labels.attempt.and_then(|a| u32::try_from(a).ok()),
        image: container.as_ref().map(|c| c.image.clone()),
        image_digest: container.and_then(|c| c.digest),
        array: job.as_ref().and_then(|j| j.array.clone()),
        ..Entry::default()
    };
    if let Err(e) = append_to(&path, &entry) {
        ctx.warn(format!(
            "could not add the run to the ledger {} ({e}); slurm-runs will not list it",
            path.display()
        ));
    }
}

/// Record a verdict (slurm-watch): append a `verdict` entry and save the final document over the
/// submitted one, so the run's document has its report.
pub fn record_verdict(ctx: &crate::Context, report: &Report) {
    let Some(path) = path() else {
        return;
    };
    let cluster = cluster_of(&ctx.doc);
    let mut saved = ctx.doc.clone();
    saved.stamp_contract_version();
    let document = save_document(&path, &cluster, &report.job_id, &saved)
        .ok()
        .map(|p| p.display().to_string());
    let entry = Entry {
        event: "verdict".into(),
        at: crate::support::clock::unix_now(),
        cluster,
        job_id: report.job_id.clone(),
        status: Some(report.status.name().to_string()),
        slurm_state: Some(report.slurm_state.clone()).filter(|s| !s.is_empty()),
        document,
        // On Apptainer the job pulls (or finds) its image itself: the watch learned which.
        image: report.container.as_ref().map(|c| c.image.clone()),
        image_digest: report.container.as_ref().and_then(|c| c.digest.clone()),
        // A sweep's summary starts with its counts: "6 tasks: 4 PASSED, 1 FAILED (task 3)".
        tasks: report.tasks.as_ref().map(|_| {
            report
                .summary
                .split_once(": ")
                .map_or(report.summary.as_str(), |(_, c)| c)
                .to_string()
        }),
        ..Entry::default()
    };
    if let Err(e) = append_to(&path, &entry) {
        ctx.warn(format!(
            "could not record the verdict in the ledger {} ({e})",
            path.display()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_image_is_the_submissions_or_what_the_watch_learned() {
        let mut submitted = entry("7", "submitted");
        submitted.image = Some("/cache/abc.sqsh".into());
        submitted.image_digest = Some("sha256:abc".into());
        let verdict = entry("7", "verdict");
        let runs = fold(&[submitted, verdict]);
        assert_eq!(runs[0].image_digest.as_deref(), Some("sha256:abc"));
        // On Apptainer the submission knows no digest; the verdict brings it.
        let mut learned = entry("8", "verdict");
        learned.image = Some("/cache/def.sif".into());
        learned.image_digest = Some("sha256:def".into());
        let runs = fold(&[entry("8", "submitted"), learned]);
        assert_eq!(runs[0].image.as_deref(), Some("/cache/def.sif"));
        assert_eq!(runs[0].image_digest.as_deref(), Some("sha256:def"));
    }

    fn entry(job: &str, event: &str) -> Entry {
        Entry {
            event: event.into(),
            at: 1,
            cluster: "c".into(),
            job_id: job.into(),
            ..Entry::default()
        }
    }

    #[test]
    fn a_torn_line_loses_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE);
        append_to(&p, &entry("1", "submitted")).unwrap();
        // A writer killed mid-line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"event\":\"submitted\",\"at\":2,\"clus")
            .unwrap();
        drop(f);
        append_to(&p, &entry("3", "submitted")).unwrap();
        let (entries, bad) = read(&p).unwrap();
        assert_eq!(bad, 1);
        assert_eq!(
            entries
                .iter()
                .map(|e| e.job_id.as_str())
                .collect::<Vec<_>>(),
            ["1", "3"]
        );
    }

    #[test]
    fn concurrent_writers_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let mut e = entry(&format!("{t}{i:03}"), "submitted");
                        e.job_name = Some("x".repeat(3000));
                        append_to(&p, &e).unwrap();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let (entries, bad) = read(&p).unwrap();
        assert_eq!((entries.len(), bad), (400, 0));
    }

    #[test]
    fn later_entries_complete_a_run() {
        let mut v = entry("7", "verdict");
        v.status = Some("PASSED".into());
        let mut s = entry("7", "submitted");
        s.job_name = Some("n".into());
        let runs = fold(&[s, entry("8", "submitted"), v]);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].status.as_deref(), Some("PASSED"));
        assert_eq!(runs[0].job_name.as_deref(), Some("n"));
        assert!(runs[0].finished());
        assert!(!runs[1].finished());
    }

    #[test]
    fn audit_lines_are_read_but_are_no_runs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(FILE);
        append_to(&p, &entry("1", "submitted")).unwrap();
        // A call with no job (resolve, runs): no cluster, no job id, still a good line.
        let audit = Entry {
            event: AUDIT.into(),
            at: 2,
            client: Some("agent".into()),
            tool: Some("resolve".into()),
            outcome: Some("ok".into()),
            ..Entry::default()
        };
        append_to(&p, &audit).unwrap();
        let mut submit = audit.clone();
        submit.tool = Some("submit".into());
        submit.cluster = "c".into();
        submit.job_id = "1".into();
        submit.gpu_hours = Some(1.5);
        append_to(&p, &submit).unwrap();
        let (entries, bad) = read(&p).unwrap();
        assert_eq!((entries.len(), bad), (3, 0));
        assert_eq!(entries[2].gpu_hours, Some(1.5));
        let runs = fold(&entries);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].job_id, "1");
    }
}
