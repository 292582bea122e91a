//! The job document as Rust types, for its JSON Schema (`docs/job-document.schema.json`).
//!
//! The tools keep the document as an ordered map (round-trip safety); these types describe it.
//! Every section type denies unknown fields, and the integration tests deserialize real pipeline
//! outputs into [`JobDocument`], so a field a tool writes but the schema does not declare fails a
//! test; the checked-in schema is compared with the generated one. Together they keep the schema,
//! the tools and docs/contract.md in step.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One job document: the input fields (all optional; each tool needs only those of its step),
/// the sections the tools add, and any other field, kept as it came.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobDocument {
    /// Explicit cluster name (skips auto-select).
    pub slurm_cluster: Option<String>,
    /// GPU model for auto-select, e.g. H100 (case-insensitive).
    pub device_type: Option<String>,
    /// GPUs per node the job uses; `--ntasks-per-node` for mpi and distributed.
    pub required_devices_per_node: Option<u32>,
    /// GPUs in total; with required_devices_per_node gives node_count.
    pub total_required_devices: Option<u32>,
    /// Nodes (`--nodes`); derived only when absent.
    pub node_count: Option<u32>,
    /// ssh destination (an alias of your ssh config works); never starts with `-`.
    pub ssh_host: Option<String>,
    /// Cluster user name.
    pub slurm_user: Option<String>,
    /// true: interactive (MFA) login; false: keys work; null: find out.
    pub mfa_style: Option<bool>,
    /// Remote working directory (created by preflight when absent).
    pub remote_cwd: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub gpus_per_node: Option<u32>,
    /// Container mounts, `src:dst[,src:dst]` or a list of `src:dst`.
    pub mounts: Option<Mounts>,
    /// Canonical image URI (the enroot `#` form is made at use time).
    pub container_image: Option<String>,
    /// Packages installed in the allocation's container (slurm-alloc), exact names.
    pub packages: Option<Vec<String>>,
    /// Passed verbatim as the Slurm job name.
    pub job_name: Option<String>,
    /// Walltime, `[D-]HH:MM:SS`.
    pub time_limit: Option<String>,
    pub repo_url: Option<String>,
    /// Informational: the local branch.
    pub repo_branch: Option<String>,
    pub model_name: Option<String>,
    pub default_user_root_dir: Option<String>,
    pub default_models_repo: Option<String>,
    pub remote_repo_path: Option<String>,
    pub remote_work_dir: Option<String>,
    /// Its basename names remote_work_dir; locally, where slurm-watch copies the log.
    pub work_dir: Option<String>,
    pub script_path: Option<String>,
    pub script_name: Option<String>,
    pub extra_files: Option<Vec<String>>,
    /// Run the build job (false skips it).
    pub build_project: Option<bool>,
    /// Replaces TensorRT-LLM's build_wheel.py in the build job.
    pub build_command: Option<String>,
    pub monitor_timeout_seconds: Option<u64>,
    pub success_patterns: Option<Vec<String>>,
    pub failure_patterns: Option<Vec<String>>,
    pub log_file_pattern: Option<String>,
    /// Secret: read by the tool that needs it, dropped from every output.
    pub slurm_password: Option<String>,
    /// Local repository (default: the git top level of the current directory).
    pub repo_root: Option<String>,
    /// ControlMaster socket (default `/tmp/ssh-trtllm-%r@%h:%p`).
    pub control_path: Option<String>,
    pub ssh_config_file: Option<String>,
    /// Extra local ssh arguments, e.g. ["-o", "Port=2222"].
    pub ssh_options: Option<Vec<String>>,
    pub recipe: Option<RecipeName>,
    /// Shell text the job runs, exactly as written.
    pub command: Option<String>,
    pub refresh_paths: Option<Vec<String>>,
    /// Default `hang detected`, case-insensitive.
    pub hang_pattern: Option<String>,
    pub poll_interval_seconds: Option<u64>,
    /// slurm-alloc: how long the work needs, `[D-]HH:MM:SS`.
    pub expected_duration: Option<String>,
    /// slurm-alloc: profiling, development or training.
    pub purpose: Option<String>,

    pub resolve: Option<Resolve>,
    pub preflight: Option<Preflight>,
    pub sync_tracked: Option<SyncTracked>,
    pub sync_untracked: Option<SyncUntracked>,
    pub job: Option<Job>,
    pub build: Option<Build>,
    pub report: Option<Report>,
    pub allocation: Option<Allocation>,
    pub error: Option<ErrorSection>,

    /// Any other field: kept exactly as it came.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Mounts {
    Joined(String),
    List(Vec<String>),
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RecipeName {
    Single,
    Mpi,
    Distributed,
    Launcher,
    Batch,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolve {
    pub cluster_name: String,
    /// `explicit` or `auto`.
    pub selected_by: String,
    /// The flat fields slurm-resolve filled in.
    pub derived: Vec<String>,
    pub catalog: Option<String>,
    pub candidates: Vec<Candidate>,
    pub partitions: Vec<Value>,
    pub flags: Map<String, Value>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub cluster_name: String,
    pub accepted: bool,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Preflight {
    /// `direct` or `mfa`.
    pub ssh_path: String,
    /// `user`, `managed` or `none`.
    pub master: String,
    /// The expanded ControlMaster socket every later tool uses.
    pub control_path: Option<String>,
    pub mfa_style: bool,
    pub mfa_style_discovered: bool,
    pub remote: RemoteCheck,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteCheck {
    pub remote_cwd: String,
    pub remote_cwd_exists: bool,
    pub remote_cwd_created: bool,
    pub remote_cwd_writable: bool,
    pub user: Option<String>,
    pub home: Option<String>,
    pub login_host: Option<String>,
    pub tmux: Option<String>,
    pub slurm_version: Option<String>,
    pub git: Option<String>,
    pub tar: Option<String>,
    /// `enabled`, `disabled`, `unreachable` or `missing`.
    pub accounting: Option<String>,
    pub container_flags: bool,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncTracked {
    pub temp_branch: String,
    /// The snapshot commit, now the remote HEAD.
    pub commit: String,
    /// Local HEAD, the snapshot's parent.
    pub base_commit: String,
    pub branch: Option<String>,
    pub remote_repo_path: String,
    pub remote_work_dir: String,
    /// `origin` or `direct`.
    pub via: String,
    pub temp_ref_deleted: Option<bool>,
    pub changed_paths: u64,
    pub refreshed: Option<Vec<String>>,
    pub refresh_paths: Option<Vec<String>>,
    pub stash: Option<Stash>,
    pub created: Option<bool>,
    pub warnings: Vec<String>,
    pub derived: Vec<String>,
    pub seconds: f64,
    pub dry_run: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stash {
    pub commit: String,
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncUntracked {
    pub files: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub skipped: Vec<Skipped>,
    pub changed_while_reading: Vec<String>,
    pub compressed: bool,
    pub remote_repo_path: String,
    pub unlinked: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// `build` or `run`.
    pub kind: String,
    pub job_id: Option<String>,
    pub recipe: Option<RecipeName>,
    pub stdout_path: Option<String>,
    pub stderr_path: Option<String>,
    /// The exact remote command, shell-quoted for reading.
    pub command: Option<String>,
    pub argv: Option<Vec<String>>,
    /// The unique --comment value the job id is learned by.
    pub submit_tag: Option<String>,
    pub tmux_session: Option<String>,
    pub remote_repo_path: Option<String>,
    pub upload_dir: Option<String>,
    pub uploads: Option<Vec<String>>,
    pub submitted_at: Option<u64>,
    pub state_dir: Option<String>,
    /// A file that appears when the job's command ends (the batch script's EXIT trap, or the
    /// srun exit file); slurm-watch ends a wait early when it appears.
    pub end_marker: Option<String>,
    pub dry_run: Option<bool>,
    pub remote_script: Option<String>,
    pub skipped: Option<bool>,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Build {
    pub job: Job,
    pub report: Option<Report>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Passed,
    Failed,
    Timeout,
    HangDetected,
    OutOfMemory,
    Cancelled,
    Error,
    BuildFailed,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub status: Status,
    pub job_id: String,
    pub kind: String,
    pub slurm_state: String,
    /// `exit:signal`.
    pub exit_code: Option<String>,
    pub elapsed: Option<String>,
    pub summary: String,
    /// `sacct`, `scontrol` or `watch`.
    pub source: String,
    pub cancelled_by: Option<String>,
    pub success_patterns_missing: Option<Vec<String>>,
    pub failure_patterns_found: Vec<String>,
    pub hang_line: Option<String>,
    pub excerpt_lines: Option<u32>,
    pub remote_log: String,
    pub remote_err_log: String,
    pub local_log: Option<String>,
    pub local_log_complete: bool,
    pub log_seen: Option<bool>,
    pub excerpt: Vec<String>,
    pub excerpt_err: Vec<String>,
    pub polls: u64,
    pub bytes_scanned: u64,
    pub watch_seconds: f64,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    pub job_id: Option<String>,
    pub job_name: Option<String>,
    pub tmux_session: Option<String>,
    pub reused: Option<bool>,
    pub time_limit_requested: Option<String>,
    pub time_limit: Option<String>,
    pub negotiation: Option<Negotiation>,
    /// `RUNNING`, `PENDING` or `RELEASED`.
    pub state: Option<String>,
    pub estimated_start: Option<u64>,
    pub container_name: Option<String>,
    pub gpus_per_node_probed: Option<u64>,
    pub last_exec: Option<LastExec>,
    pub released: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Negotiation {
    pub reduced_from: String,
    pub reduced_to: String,
    pub estimated_start_before: Option<u64>,
    pub message: String,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LastExec {
    pub command: String,
    pub mode: String,
    pub exit_code: i32,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorSection {
    pub tool: String,
    /// `bad_input`, `needs_person` or `remote`.
    pub kind: String,
    pub message: String,
    pub hint: String,
    pub exit_code: u8,
    pub field: Option<String>,
    pub command: Option<FailedCommand>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailedCommand {
    pub argv: Vec<String>,
    pub exit_code: Option<i32>,
    pub stderr: String,
}

/// The schema, as written to docs/job-document.schema.json.
pub fn schema_json() -> String {
    let schema = schemars::schema_for!(JobDocument);
    let mut s = serde_json::to_string_pretty(&schema).expect("a schema serialises");
    s.push('\n');
    s
}

/// Check a document strictly against the types (every section field declared).
pub fn check(doc: &Value) -> Result<JobDocument, String> {
    serde_json::from_value(doc.clone()).map_err(|e| e.to_string())
}
