//! The job document as Rust types: the one definition of every section a tool writes.
//!
//! The tools keep the document itself as an ordered map (round-trip safety: fields a tool does not
//! own leave exactly as they came), but every section is written and read through these types
//! ([`crate::Document::set_section`], [`crate::Document::section_as`]): no tool builds a section
//! by hand. Vocabularies (status, kind, recipe, ssh path, ...) are enums serialised as the
//! contract spells them. Every section type denies unknown fields; the integration tests
//! deserialize real pipeline outputs into [`JobDocument`]; each tool's `--help` "Adds" line is
//! generated from [`section_fields`], and a test checks docs/contract.md names every field, so
//! the types, the help, the JSON Schema (`docs/job-document.schema.json`) and the contract cannot
//! drift apart.

use schemars::JsonSchema;
pub use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One job document: the input fields (all optional; each tool needs only those of its step),
/// the sections the tools add, and any other field, kept as it came.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct JobDocument {
    /// The contract version the document follows ([`CONTRACT_VERSION`]); every tool writes it.
    pub contract_version: Option<u32>,
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
    /// Quality of service (`--qos`), where the site requires one.
    pub qos: Option<String>,
    /// Memory per node (`--mem`), e.g. `64G`; not with `mem_per_gpu`.
    pub mem: Option<String>,
    /// Memory per GPU (`--mem-per-gpu`), e.g. `80G`; not with `mem`.
    pub mem_per_gpu: Option<String>,
    /// CPUs per task (`--cpus-per-task`).
    pub cpus_per_task: Option<u32>,
    /// Generic resources (`--gres`), e.g. `gpu:a100:2` for GPUs of a type; not a GPU gres with
    /// `gpus_per_node`.
    pub gres: Option<String>,
    /// A reservation to run in (`--reservation`).
    pub reservation: Option<String>,
    /// Whole nodes (`--exclusive`).
    pub exclusive: Option<bool>,
    /// Further long Slurm options, each `--name` or `--name=value`, passed as exact words to
    /// sbatch, srun and salloc; an option the tools set (or a field above owns) is refused.
    pub slurm_options: Option<Vec<String>>,
    /// Container mounts, `src:dst[,src:dst]` or a list of `src:dst`.
    pub mounts: Option<Mounts>,
    /// The container image, in any form either runtime takes: a registry reference
    /// (`host/path:tag`, `docker://…`, enroot's `host#path`), an image file (`.sqsh`, `.sif`);
    /// translated for the runtime in use when the job is submitted.
    pub container_image: Option<String>,
    /// `auto` (default: pyxis where srun has it, else Apptainer), `pyxis`, or `apptainer`.
    pub container_runtime: Option<String>,
    /// Where registry images are kept once per content digest on the cluster (Apptainer's SIF
    /// files, enroot's squashfs files for pyxis); default
    /// `<default_user_root_dir>/slurm-tools-images`. A shared filesystem every node sees.
    pub image_cache_dir: Option<String>,
    /// How many images of each runtime the cache keeps (the least recently used beyond it are
    /// removed, never one a queued or running job uses); default 8; 0: no cache (each job
    /// imports or pulls its image itself).
    pub image_cache_keep: Option<i64>,
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
    /// Its basename names remote_work_dir's leaf (the remote work directory of the job).
    pub work_dir: Option<String>,
    /// The local folder for copies of what a job produced: slurm-watch's copy of the log, and
    /// slurm-fetch's `fetched/<job id>/`. Default: none for logs, the state directory for
    /// fetches; never the repository (a folder inside it is left out of the untracked sync).
    pub local_dir: Option<String>,
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
    /// ControlMaster socket (default `~/.ssh/slurm-tools/%C`, a directory of your own).
    pub control_path: Option<String>,
    pub ssh_config_file: Option<String>,
    /// Extra local ssh arguments, e.g. ["-o", "Port=2222"].
    pub ssh_options: Option<Vec<String>>,
    /// false: on a direct (key-based) host, preflight opens no ControlMaster and every tool
    /// makes its own connection (default true: one master with a 10-minute ControlPersist).
    pub ssh_multiplex: Option<bool>,
    pub recipe: Option<Recipe>,
    /// Shell text the job runs, exactly as written.
    pub command: Option<String>,
    pub refresh_paths: Option<Vec<String>>,
    /// Default `hang detected`, case-insensitive.
    pub hang_pattern: Option<String>,
    /// slurm-resolve: fill in `mem` and `time_limit` from past runs of the same `job_name` on the
    /// chosen cluster (its accounting), where the document does not give them.
    pub size_from_history: Option<bool>,
    /// slurm-watch: a running job whose log gains nothing for this many seconds (or, where its
    /// lines name their rank, one rank silent that long while others go on) is a hang, decided
    /// `stalled`; off when absent (10 to 86400; 600 suits most training jobs).
    pub stall_seconds: Option<i64>,
    /// slurm-watch: before a hung job is cancelled, collect its evidence (every task's state and
    /// Python stacks, per node) into the `forensics` section; default true.
    pub collect_forensics: Option<bool>,
    /// Forensics: where py-spy is missing, install it first from the login node (pip --target
    /// into `~/.cache/slurm-tools/py-spy`, which the nodes see on a shared home); default false.
    pub install_py_spy: Option<bool>,
    pub poll_interval_seconds: Option<u64>,
    /// slurm-alloc: how long the work needs, `[D-]HH:MM:SS`.
    pub expected_duration: Option<String>,
    /// slurm-alloc: profiling, development or training.
    pub purpose: Option<String>,
    /// Nodes the job must not run on (`--exclude`); slurm-watch --retry adds failed ones.
    pub exclude_nodes: Option<Vec<String>>,
    /// slurm-watch --retry: the job id of the first attempt this run retries.
    pub retry_of: Option<String>,
    /// slurm-watch --retry: this run's attempt number (the first run is 1).
    pub attempt: Option<u32>,
    /// slurm-watch --retry: the earlier attempts, oldest first.
    pub attempts: Option<Vec<Attempt>>,
    /// slurm-fetch: globs of files to bring back, relative to the job's tree (`work:GLOB`: to
    /// its work directory).
    pub fetch_patterns: Option<Vec<String>>,
    /// slurm-submit: run the job once per parameter set, as one Slurm job array (a grid crossed,
    /// or a list of sets; `max_parallel` at once).
    pub sweep: Option<Sweep>,
    /// slurm-submit: jobs this run waits for (Slurm holds it): each a job id or a saved job
    /// document, optionally prefixed `afterany:`, `afternotok:`, `aftercorr:` (default
    /// `afterok:`); a string or a list.
    pub after: Option<Mounts>,
    /// A sweep run again in part (`sweep.only`): the verdicts of the tasks not run again, from
    /// the earlier report; slurm-watch puts them back in the report's `tasks`.
    pub sweep_done: Option<Vec<TaskReport>>,

    pub resolve: Option<Resolve>,
    pub placement: Option<Placement>,
    pub preflight: Option<Preflight>,
    pub sync_tracked: Option<SyncTracked>,
    pub sync_untracked: Option<SyncUntracked>,
    pub job: Option<Job>,
    pub build: Option<Build>,
    pub report: Option<Report>,
    pub allocation: Option<Allocation>,
    pub attach: Option<Attach>,
    pub forward: Option<Forward>,
    pub fetch: Option<Fetch>,
    pub forensics: Option<Forensics>,
    pub race: Option<Race>,
    pub error: Option<ErrorSection>,

    /// Any other field: kept exactly as it came.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The version of docs/contract.md the tools speak. A document that says a higher one is refused
/// (its sections may mean something these tools do not know).
pub const CONTRACT_VERSION: u32 = 1;

/// `Option<Option<T>>` that keeps "absent" (outer `None`) apart from "null" (`Some(None)`), for
/// the few fields whose null means something (e.g. "probed, nothing found").
fn double_option<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A sweep (docs/contract.md, "sweep"): one job array, a task per parameter set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Each parameter with its list of values, crossed (the first parameter varies slowest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<Map<String, Value>>,
    /// The parameter sets, each an object of name to value (a string, number or boolean); every
    /// set names the same parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sets: Option<Vec<Map<String, Value>>>,
    /// How many tasks run at once at most (`--array=0-N%max_parallel`); default: as many as
    /// Slurm starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// Run only these tasks (by index), e.g. those that failed (`slurm-submit --only-failed`,
    /// `slurm-watch --retry`); the others keep their verdicts in `sweep_done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<u32>>,
}

/// One task of a submitted sweep: its array index and its parameters (as strings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SweepTask {
    pub index: u32,
    pub params: Map<String, Value>,
}

/// One task's verdict in a sweep's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskReport {
    pub index: u32,
    /// `<array job id>_<index>`.
    pub job_id: String,
    pub params: Map<String, Value>,
    pub status: Status,
    pub slurm_state: String,
    pub exit_code: Option<String>,
    pub elapsed: Option<String>,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    pub remote_log: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_line: Option<String>,
    /// The last lines of the task's log (more for a task that did not pass).
    pub excerpt: Vec<String>,
    /// The last lines of its stderr (when it has a file of its own).
    pub excerpt_err: Vec<String>,
    /// The job array the verdict came from, when it is not this report's (an earlier attempt
    /// of a sweep whose other tasks were run again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_job: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Mounts {
    Joined(String),
    List(Vec<String>),
}

/// How the job is launched (docs/migrating.md, "Recipes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Recipe {
    /// srun, one node, one task.
    Single,
    /// srun --mpi=pmix, a task per GPU.
    Mpi,
    /// srun, a task per GPU, RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR set.
    Distributed,
    /// srun, one torchrun per node.
    Launcher,
    /// sbatch.
    Batch,
}

impl Recipe {
    pub const ALL: [Recipe; 5] = [
        Recipe::Single,
        Recipe::Mpi,
        Recipe::Distributed,
        Recipe::Launcher,
        Recipe::Batch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Recipe::Single => "single",
            Recipe::Mpi => "mpi",
            Recipe::Distributed => "distributed",
            Recipe::Launcher => "launcher",
            Recipe::Batch => "batch",
        }
    }

    /// The `recipe` field's value; anything else is an error naming the field and the choices.
    pub fn parse(s: &str) -> crate::Result<Recipe> {
        Recipe::ALL.into_iter().find(|r| r.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Recipe::ALL.iter().map(|r| r.name()).collect();
            crate::contract::error::field_error(
                "recipe",
                &format!(
                    "is {s:?}, which is not a recipe; the recipes are {}",
                    names.join(", ")
                ),
            )
            .with_hint("single: one task; mpi: srun --mpi=pmix, a task per GPU; distributed: a task per GPU; launcher: one torchrun per node; batch: sbatch")
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SelectedBy {
    Explicit,
    Auto,
    /// `slurm-resolve --place`: the cluster where the request would start first.
    Placement,
    /// Neither `slurm_cluster` nor `device_type`: the document's `ssh_host` is the cluster.
    #[serde(rename = "ssh_host")]
    SshHost,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolve {
    pub cluster_name: String,
    pub selected_by: SelectedBy,
    /// The flat fields slurm-resolve filled in.
    pub derived: Vec<String>,
    pub catalog: Option<String>,
    /// The person's defaults file it read (`defaults.json`), and the fields it filled from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults_file: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_defaults: Vec<String>,
    pub candidates: Vec<Candidate>,
    pub partitions: Vec<Value>,
    pub flags: Map<String, Value>,
    /// `size_from_history`: what was sized, from which runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sized_from_history: Option<HistorySizing>,
}

/// slurm-watch --race: the same job submitted to several clusters (or partitions); the first to
/// start was kept and watched, the others cancelled.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Race {
    /// The entrant kept (this document's job).
    pub winner_cluster: String,
    pub winner_job_id: String,
    /// From the race's start until the winner was seen started.
    pub waited_seconds: f64,
    pub entrants: Vec<RaceEntrant>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RaceEntrant {
    pub cluster: String,
    pub job_id: String,
    /// Where its document came from: `stdin` or the file given.
    pub source: String,
    /// Slurm's state when the race ended (for a cancelled one, after the cancel).
    pub state: String,
    pub won: bool,
    /// Cancelled by the race (only jobs in the race's own documents ever are).
    pub cancelled: bool,
}

/// slurm-resolve's `size_from_history`: past runs of the job on the cluster, and what was filled.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistorySizing {
    pub job_name: String,
    pub cluster: String,
    /// Past runs of that name on that cluster in the ledger, and the completed ones sized from.
    pub runs: usize,
    pub completed: usize,
    pub elapsed_p90_seconds: Option<u64>,
    pub peak_memory_p90_bytes: Option<u64>,
    /// The values sized from them (null: not sized), and the fields actually filled (the
    /// document's own values are kept).
    pub time_limit: Option<String>,
    pub mem: Option<String>,
    pub filled: Vec<String>,
    /// What was done, in words (also when nothing could be: no accounting, no login, no run).
    pub note: String,
}

/// slurm-resolve --place: where the request would start first, every candidate with its figures.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// How the cluster was chosen: `earliest_start` (Slurm's estimate for exactly this request;
    /// a tie goes to more free GPUs, then to the catalog's `prefer` order and its own order).
    pub policy: String,
    /// The chosen cluster; null when none could take it now.
    pub chosen: Option<String>,
    /// When it was asked, Unix time.
    pub asked_at: u64,
    pub candidates: Vec<PlacementCandidate>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacementCandidate {
    pub cluster_name: String,
    /// The partition asked (the document's, else the cluster's default).
    pub partition: Option<String>,
    /// `answered`, `login_needed` (no master and no key login: `login_command` opens one), or
    /// `unreachable`.
    pub state: String,
    /// Slurm's estimated start for exactly this request (`sbatch --test-only`), Unix time.
    pub estimated_start: Option<u64>,
    /// The estimate counted from `asked_at` (0: now).
    pub starts_in_seconds: Option<u64>,
    /// GPUs free now on the partition's usable nodes, and all its GPUs.
    pub free_gpus: Option<u64>,
    pub total_gpus: Option<u64>,
    /// The partition's idle nodes now.
    pub idle_nodes: Option<u64>,
    /// Your own pending jobs in that partition.
    pub your_pending_jobs: Option<u64>,
    /// The partition's MaxTime and MaxNodes.
    pub max_time: Option<String>,
    pub max_nodes: Option<String>,
    /// A limit that would keep the request from ever starting there now (the partition's
    /// MaxTime or MaxNodes, your QOS's GPU cap with your running jobs), or Slurm's refusal.
    pub blocked_by: Option<String>,
    pub chosen: bool,
    /// Why it was chosen, or why it lost.
    pub reason: String,
    /// For `login_needed`: the command that opens the master.
    pub login_command: Option<String>,
    /// How long asking it took.
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub cluster_name: String,
    pub accepted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SshPath {
    /// Keys work: a BatchMode login.
    Direct,
    /// An interactive (MFA) login: everything rides a ControlMaster.
    Mfa,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Master {
    /// The person's own ControlMaster (from their ssh config).
    User,
    /// The tools' ControlMaster at `control_path`.
    Managed,
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Preflight {
    pub ssh_path: SshPath,
    pub master: Master,
    /// The expanded ControlMaster socket every later tool uses.
    pub control_path: Option<String>,
    pub mfa_style: bool,
    pub mfa_style_discovered: bool,
    pub remote: RemoteCheck,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Accounting {
    Enabled,
    Disabled,
    Unreachable,
    Missing,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteCheck {
    /// The remote working directory, `~/` expanded against `home`.
    pub remote_cwd: String,
    pub remote_cwd_exists: bool,
    pub remote_cwd_created: bool,
    pub remote_cwd_writable: bool,
    pub user: Option<String>,
    /// The cluster user's home directory: a `~/` path in any later field expands against it.
    pub home: Option<String>,
    pub login_host: Option<String>,
    pub tmux: Option<String>,
    pub slurm_version: Option<String>,
    pub git: Option<String>,
    pub tar: Option<String>,
    pub accounting: Option<Accounting>,
    pub container_flags: bool,
    /// srun takes `--container-writable` (pyxis 0.9 and later); absent from older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_writable: Option<bool>,
    /// pyxis's version from the plugin srun loads (`present` when its version is not readable),
    /// null without pyxis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pyxis: Option<String>,
    /// `enroot version` on the login node, when enroot is there (often only on compute nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enroot: Option<String>,
    /// `apptainer --version` (or `singularity --version`) from the PATH jobs get, when there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apptainer: Option<String>,
    /// The MPI plugin types srun offers (`srun --mpi=list`), e.g. ["none", "pmi2", "pmix"];
    /// absent when srun could not be asked. The mpi recipe needs `pmix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_plugins: Option<Vec<String>>,
}

impl RemoteCheck {
    /// Refuse the mpi recipe (or an mpi step) before anything is submitted when preflight saw
    /// that srun has no `pmix` plugin; nothing to say when it was not asked. `what` is the
    /// request in the person's words (`field `recipe` is "mpi"`, `--mode mpi`).
    pub fn require_pmix(&self, field: &str, what: &str) -> crate::Result<()> {
        match &self.mpi_plugins {
            Some(list) if !list.iter().any(|p| p == "pmix") => Err(crate::ToolError::field(
                crate::ErrorKind::BadInput,
                field,
                format!(
                    "{what} starts its tasks with srun --mpi=pmix, but Slurm on {} has no mpi/pmix plugin (srun --mpi=list offers: {})",
                    self.login_host.as_deref().unwrap_or("the login node"),
                    if list.is_empty() { "nothing".to_string() } else { list.join(", ") }
                ),
            )
            .with_hint("use the distributed recipe (one task per GPU with RANK, LOCAL_RANK and WORLD_SIZE set, no PMIx), or ask the site for Slurm with PMIx; nothing was submitted")),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Through origin, as a temporary branch deleted afterwards.
    Origin,
    /// Straight into the remote clone over ssh; origin untouched.
    Direct,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncTracked {
    /// `--dry-run`: the snapshot was built, nothing was pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    pub temp_branch: String,
    /// The snapshot commit, now the remote HEAD.
    pub commit: String,
    /// Local HEAD, the snapshot's parent.
    pub base_commit: String,
    pub branch: Option<String>,
    pub remote_repo_path: String,
    pub remote_work_dir: String,
    pub via: Via,
    /// true/false; null with `--via direct` (origin is never touched); absent on a dry run.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<bool>")]
    pub temp_ref_deleted: Option<Option<bool>>,
    pub changed_paths: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed: Option<Vec<String>>,
    /// On a dry run: the paths that would be re-checked-out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_paths: Option<Vec<String>>,
    /// Cluster-side changes stashed in the remote clone (null when there were none).
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<Stash>")]
    pub stash: Option<Option<Stash>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// true: the remote clone was at this snapshot already, as this machine's last sync from
    /// this checkout left it, and one execution confirmed it: nothing was pushed or checked out
    /// (`temp_ref_deleted` null: no temporary branch was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<bool>,
    /// The submodules, nested ones too, parents first (absent when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodules: Vec<SyncedSubmodule>,
    /// The snapshot's Git LFS files (absent when the repository does not use LFS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lfs: Option<SyncedLfs>,
    pub warnings: Vec<String>,
    pub derived: Vec<String>,
    pub seconds: f64,
}

/// The Git LFS files of the snapshot: they arrive with their content, not as pointer files.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncedLfs {
    /// LFS files in the snapshot.
    pub files: u64,
    /// LFS objects the remote clone lacked, sent from the local LFS store.
    pub objects_sent: u64,
    /// Their bytes.
    pub bytes_sent: u64,
}

/// One submodule of the synced tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyncedSubmodule {
    /// Its path from the repository's top level.
    pub path: String,
    /// Its name in `.gitmodules`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Checked out locally; when false it is not checked out in the remote clone either.
    pub initialised: bool,
    /// The commit the remote submodule is checked out at: the local HEAD when the submodule is
    /// clean, else a snapshot of its working tree (built like the superproject's). The
    /// superproject's snapshot records this commit.
    pub commit: String,
    /// The local submodule's HEAD (null when it is not initialised).
    pub head: Option<String>,
    /// `commit` is a snapshot of local changes (tracked edits, or a nested submodule's).
    pub snapshot: bool,
    /// Cluster-side edits in the remote submodule, stashed there (null when there were none).
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<Stash>")]
    pub stash: Option<Option<Stash>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stash {
    pub commit: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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
    /// A manifest of the last sync was found: only new and changed files were sent.
    #[serde(default)]
    pub incremental: bool,
    /// Files left as they were (unchanged since the last sync), and their bytes.
    #[serde(default)]
    pub unchanged_files: u64,
    #[serde(default)]
    pub unchanged_bytes: u64,
    /// Deleted in the remote checkout because they were deleted locally.
    #[serde(default)]
    pub deleted: Vec<String>,
}

/// A path not sent, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    Build,
    #[default]
    Run,
}

impl JobKind {
    pub fn name(self) -> &'static str {
        match self {
            JobKind::Build => "build",
            JobKind::Run => "run",
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    pub kind: JobKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<Recipe>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_path: Option<String>,
    /// The exact remote command, shell-quoted for reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// The unique --comment value the job id is learned by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux_session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_repo_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploads: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// A file that appears when the job's command ends (the batch script's EXIT trap, or the
    /// srun exit file); slurm-watch ends a wait early when it appears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_marker: Option<String>,
    /// The job's own code tree: the snapshot it was submitted with and its untracked files,
    /// which no later sync changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    /// The snapshot commit the tree holds (absent: the clone's HEAD at submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_commit: Option<String>,
    /// Disk used by all job trees of this clone after old ones were removed, in KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trees_disk_kb: Option<u64>,
    /// The container image the job runs in, as its runtime gets it (pyxis: enroot's
    /// `HOST#path` form or a squashfs file; apptainer: `docker://HOST/path:tag` or a file);
    /// absent without `container_image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// `pyxis` or `apptainer`: the runtime the job's container runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_runtime: Option<String>,
    /// Where a registry image is kept once per content digest on the cluster (Apptainer: SIF
    /// files; pyxis: squashfs files enroot imported on the login node), shared by every later
    /// job of this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_cache: Option<String>,
    /// On pyxis: the cached image the job runs from, as slurm-submit found or imported it
    /// before submitting (copied to the report's `container`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_use: Option<ContainerUse>,
    /// On Apptainer: the job's container launcher on the cluster, which slurm-attach runs its
    /// shell through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_launcher: Option<String>,
    /// The job's named container (`slurm-tools-<submit_tag>`), which slurm-attach joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// A sweep: the job is a Slurm job array, a task per parameter set (`stdout_path` and
    /// `stderr_path` then hold `%a`, the task's index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_tasks: Option<Vec<SweepTask>>,
    /// A sweep's `--array` value, e.g. `0-5%2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// `--dependency`, from `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    /// `slurm-submit --race N`: the same job submitted to the next best clusters of the
    /// placement, each one's submitted document (a file in the state directory); slurm-watch
    /// races them with this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub race_entrants: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Build {
    pub job: Job,
    pub report: Option<Report>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::Failed => "FAILED",
            Status::Timeout => "TIMEOUT",
            Status::HangDetected => "HANG_DETECTED",
            Status::OutOfMemory => "OUT_OF_MEMORY",
            Status::Cancelled => "CANCELLED",
            Status::Error => "ERROR",
            Status::BuildFailed => "BUILD_FAILED",
        }
    }
}

/// Every vocabulary prints as the document spells it.
macro_rules! display_as_serialised {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&enum_name(self))
            }
        }
    )*};
}
display_as_serialised!(
    Status,
    Recipe,
    SelectedBy,
    SshPath,
    Master,
    Accounting,
    Via,
    JobKind,
    Source,
    AllocationState,
    ExecMode
);

/// Where a verdict came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Sacct,
    /// Accounting is disabled on the cluster.
    Scontrol,
    /// The watch itself decided: a hang, or monitor_timeout_seconds.
    Watch,
    /// Accounting is disabled and Slurm no longer has the job's record (it ended more than
    /// MinJobAge ago): the job's own end marker (its exit code) and its logs.
    #[serde(rename = "end_marker")]
    EndMarker,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub status: Status,
    pub job_id: String,
    pub kind: JobKind,
    pub slurm_state: String,
    /// `exit:signal`.
    pub exit_code: Option<String>,
    pub elapsed: Option<String>,
    pub summary: String,
    pub source: Source,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_patterns_missing: Option<Vec<String>>,
    pub failure_patterns_found: Vec<String>,
    pub hang_line: Option<String>,
    /// How a hang was decided: `pattern` (`hang_pattern` in a line) or `stalled`
    /// (`stall_seconds` without output); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt_lines: Option<u32>,
    pub remote_log: String,
    pub remote_err_log: String,
    pub local_log: Option<String>,
    pub local_log_complete: bool,
    /// false when the log never appeared (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_seen: Option<bool>,
    pub excerpt: Vec<String>,
    pub excerpt_err: Vec<String>,
    pub polls: u64,
    pub bytes_scanned: u64,
    pub watch_seconds: f64,
    /// The image the job's container ran from: on Apptainer as the job's log says, on pyxis as
    /// slurm-submit's import says (the image cache); absent for jobs without a container, and
    /// for an image file given as such.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerUse>,
    /// A sweep: one row per task, by index (the report's `status` is PASSED only when every
    /// task passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskReport>>,
}

/// Hang forensics (slurm-watch): what every task of a hung job was doing, per node, collected
/// before the cancel, and what it says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Forensics {
    pub job_id: String,
    /// Why it was collected: `pattern` or `stalled` (the hang's reason).
    pub reason: String,
    /// Seconds the collection took (bounded; the cancel follows it).
    pub collected_seconds: f64,
    /// The collection hit its time limit: what it had then is here.
    pub cut: bool,
    /// Ranks whose output stopped while other ranks went on (from lines that name their rank:
    /// srun's `--label` form `N: `, or `[rankN]:`), with the seconds since each one's last line.
    pub silent_ranks: Vec<SilentRank>,
    /// Each rank's last line (from lines that name their rank) and the seconds since it came.
    pub rank_output: Vec<RankOutput>,
    /// The rank that stopped making progress first, as the evidence says, and its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled_node: Option<String>,
    /// The diagnosis, in sentences: the stalled rank and where it is, what the others wait in,
    /// and the classic multi-node mistakes found (ranks that disagree on the world size or the
    /// master address, a master address a node cannot resolve).
    pub diagnosis: Vec<String>,
    /// What could not be collected, and where (`py-spy on mn1`).
    pub missing: Vec<String>,
    /// What was installed for the collection (`install_py_spy`), and where.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed: Vec<String>,
    pub nodes: Vec<ForensicsNode>,
    /// The whole collection as the nodes printed it, in the local folder (`local_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SilentRank {
    pub rank: u32,
    pub silent_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RankOutput {
    pub rank: u32,
    pub last_line: String,
    pub seconds_ago: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForensicsNode {
    pub node: String,
    /// nvidia-smi's index, utilization and memory used per GPU, where it exists.
    pub gpus: Vec<String>,
    /// Each master address the node's tasks were given, and whether it resolves there.
    pub master_resolves: BTreeMap<String, bool>,
    pub processes: Vec<ForensicsProcess>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForensicsProcess {
    pub pid: u32,
    /// `RANK`, else `SLURM_PROCID`, from the process's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    pub command: String,
    /// The kernel's state letter (`R`, `S`, `D`, `Z`, ...).
    pub state: String,
    /// The kernel function it sleeps in (`/proc/PID/wchan`).
    pub wchan: String,
    pub sockets: u32,
    /// `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, `SLURM_NTASKS` as the process got them.
    pub env: BTreeMap<String, String>,
    /// py-spy's frames of each thread, innermost first: `Thread N (state): "name"` then
    /// `function (file:line)` lines; empty where the process is not Python or py-spy is missing.
    pub python_stack: Vec<String>,
}

/// Which cached image a job used and whether it was pulled for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerUse {
    /// The image as the runtime got it.
    pub image: String,
    /// The registry's content digest the cached file holds (`sha256:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The cached image file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// `hit` (the file was there), `pulled` (this job pulled it), `waited` (another job was
    /// pulling it; this one waited), `uncached` (no digest could be learned: pulled by the
    /// runtime for this job only).
    pub cache: String,
    /// Seconds the pull (or the wait for another job's pull) took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AllocationState {
    Running,
    Pending,
    Released,
}

/// What `slurm-attach` did: where it ran a shell or a command inside a running job.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attach {
    /// The job or allocation it went into.
    pub job_id: String,
    /// The node (`--node`), absent when Slurm picked the job's first one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The job's named container it joined, absent outside a container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The directory it started in (the job's code tree, else its checkout).
    pub dir: String,
    /// `--command`; absent for an interactive shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub interactive: bool,
    pub exit_code: i32,
    /// `--ssh-config`: the `Host` alias written (`slurm-<cluster>-<jobid>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_alias: Option<String>,
    /// `--ssh-config`: the file it was written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_config: Option<String>,
}

/// A local port forwarded by `slurm-forward` to a port of a running job's node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Forward {
    pub job_id: String,
    /// The node the port is on.
    pub node: String,
    pub remote_port: u16,
    /// On the loopback address only.
    pub local_port: u16,
    /// `http://127.0.0.1:<local_port>/`.
    pub local_url: String,
    /// `active`, or `cancelled` after `--cancel`.
    pub state: String,
    /// The ControlMaster the forward lives in (it ends with the master, the job, or --cancel).
    pub control_path: String,
}

/// An attempt that ended on an infrastructure failure and was retried (slurm-watch --retry).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attempt {
    pub job_id: String,
    /// NODE_FAIL, PREEMPTED or BOOT_FAIL.
    pub slurm_state: String,
    pub status: Status,
    /// The nodes it ran on (excluded from the next attempts).
    pub nodes: Option<String>,
}

/// What `slurm-fetch` brought back from a job's tree and work directory.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fetch {
    pub job_id: String,
    /// The local directory the files are in (`tree/` and `work/` under it).
    pub destination: String,
    /// The patterns asked for (`work:` ones are relative to the job's work directory).
    pub patterns: Vec<String>,
    /// The manifest: every file that matched, as it is now locally.
    pub files: Vec<FetchedFile>,
    /// Files copied by this run (new or changed since the last fetch).
    pub fetched: u64,
    /// Files already here with the same size and time (not copied again).
    pub unchanged: u64,
    /// Bytes copied by this run.
    pub bytes: u64,
    /// The size cap this run had (`--max-bytes`).
    pub max_bytes: u64,
    /// A sweep: a folder per task (`tasks/<index>/`, relative to `destination`) holding its
    /// logs and its parameters (`params.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_dirs: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchedFile {
    /// Relative to `destination`: `tree/<path>` or `work/<path>`.
    pub path: String,
    pub size: u64,
    /// Modification time on the cluster, Unix seconds (the local copy has the same).
    pub mtime: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Allocation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmux_session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused: Option<bool>,
    /// The partition's maximum walltime, as first requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_requested: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub negotiation: Option<Negotiation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<AllocationState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// On Apptainer: the allocation's container launcher on the cluster (every `exec` and
    /// slurm-attach run their command through it: the cached image, `mounts`, `packages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_launcher: Option<String>,
    /// On Apptainer: the allocation's instance, `slurm-tools-<jobid>` on every node (a writable
    /// overlay in the node's temporary directory keeps what commands change in it until `down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_instance: Option<String>,
    /// On Apptainer: where `packages` are installed (pip --target, on the shared filesystem,
    /// one install for every node); removed by `down`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_dir: Option<String>,
    /// On pyxis: the image cache's file the per-node containers were created from (a registry
    /// image imported once per digest on the login node), as `job.container_use`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_use: Option<ContainerUse>,
    /// GPUs per node as `nvidia-smi -L` counted them; null: probed, no nvidia-smi.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<u64>")]
    pub gpus_per_node_probed: Option<Option<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exec: Option<LastExec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<Vec<String>>,
    /// The login node whose tmux holds the allocation's salloc (`hostname` there). Behind a
    /// round-robin alias a later connection may reach another login node, which does not see
    /// that session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_host: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Negotiation {
    pub reduced_from: String,
    pub reduced_to: String,
    pub estimated_start_before: Option<u64>,
    pub message: String,
}

/// How `slurm-alloc exec` spread a command over the allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    Single,
    /// One task per node (`--mode per-node`).
    #[serde(rename = "pernode")]
    PerNode,
    Mpi,
    Distributed,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LastExec {
    pub command: String,
    pub mode: ExecMode,
    pub exit_code: i32,
    /// With `--own-tree`: the code tree it ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorSection {
    pub tool: String,
    pub kind: crate::contract::error::ErrorKind,
    pub message: String,
    pub hint: String,
    pub exit_code: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<FailedCommand>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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

/// Check every section of `doc` against its type, unknown fields denied. With `input`, only the
/// sections that differ from the input's (the ones a tool wrote) are checked; sections passed on
/// untouched (even malformed ones a test fed in) are not the tool's.
pub fn check_sections(doc: &Value, input: Option<&Value>) -> Result<(), String> {
    fn one<T: DeserializeOwned>(name: &str, v: &Value) -> Result<(), String> {
        T::deserialize(v)
            .map(|_| ())
            .map_err(|e| format!("section `{name}`: {e}"))
    }
    for name in SECTION_NAMES {
        let Some(v) = doc.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        if input.and_then(|i| i.get(name)) == Some(v) {
            continue;
        }
        match name {
            "resolve" => one::<Resolve>(name, v),
            "placement" => one::<Placement>(name, v),
            "preflight" => one::<Preflight>(name, v),
            "sync_tracked" => one::<SyncTracked>(name, v),
            "sync_untracked" => one::<SyncUntracked>(name, v),
            "job" => one::<Job>(name, v),
            "build" => one::<Build>(name, v),
            "report" => one::<Report>(name, v),
            "allocation" => one::<Allocation>(name, v),
            "attach" => one::<Attach>(name, v),
            "forward" => one::<Forward>(name, v),
            "fetch" => one::<Fetch>(name, v),
            "forensics" => one::<Forensics>(name, v),
            "race" => one::<Race>(name, v),
            "error" => one::<ErrorSection>(name, v),
            _ => unreachable!("every section name has its type"),
        }?;
    }
    match doc.get("contract_version") {
        None => Ok(()),
        Some(v) if v == &Value::from(CONTRACT_VERSION) => Ok(()),
        Some(v) if input.and_then(|i| i.get("contract_version")) == Some(v) => Ok(()),
        Some(v) => Err(format!("contract_version is {v}, not {CONTRACT_VERSION}")),
    }
}

/// The sections the tools write.
pub const SECTION_NAMES: [&str; 15] = [
    "resolve",
    "placement",
    "preflight",
    "sync_tracked",
    "sync_untracked",
    "job",
    "build",
    "report",
    "allocation",
    "attach",
    "forward",
    "fetch",
    "forensics",
    "race",
    "error",
];

/// A section's field names, in the order the type declares them (for the tools' `--help` and the
/// contract check).
pub fn section_fields<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    schema
        .as_value()
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every top-level name of the job document: the input fields and the sections (what a tool's
/// input may read).
pub fn document_fields() -> Vec<&'static str> {
    static FIELDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    FIELDS
        .get_or_init(|| {
            section_fields::<JobDocument>()
                .into_iter()
                .map(|f| &*Box::leak(f.into_boxed_str()))
                .collect()
        })
        .clone()
}

/// The sections, by name, with their fields: what each tool adds.
pub fn sections() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("resolve", section_fields::<Resolve>()),
        ("placement", section_fields::<Placement>()),
        ("preflight", section_fields::<Preflight>()),
        ("sync_tracked", section_fields::<SyncTracked>()),
        ("sync_untracked", section_fields::<SyncUntracked>()),
        ("job", section_fields::<Job>()),
        ("build", section_fields::<Build>()),
        ("report", section_fields::<Report>()),
        ("allocation", section_fields::<Allocation>()),
        ("attach", section_fields::<Attach>()),
        ("forward", section_fields::<Forward>()),
        ("fetch", section_fields::<Fetch>()),
        ("forensics", section_fields::<Forensics>()),
        ("race", section_fields::<Race>()),
        ("error", section_fields::<ErrorSection>()),
    ]
}

/// The generated "Adds" paragraph of a tool's `--help`.
pub fn adds_text(section: &str) -> String {
    let fields = sections()
        .into_iter()
        .find(|(n, _)| *n == section)
        .map(|(_, f)| f)
        .unwrap_or_default();
    format!(
        "Adds the `{section}` section (docs/contract.md): {}.",
        fields.join(", ")
    )
}

/// How a vocabulary enum of this module is spelled in the document (`mfa`, `PASSED`, ...),
/// for messages.
pub fn enum_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => "?".to_string(),
    }
}

impl crate::contract::error::ToolError {
    /// The document's `error` section (docs/contract.md): `tool`, `kind`, `message`, `hint`,
    /// `exit_code`, and `field` / `command` when known.
    pub fn to_section(&self, tool: &str) -> ErrorSection {
        ErrorSection {
            tool: tool.to_string(),
            kind: self.kind,
            message: self.message.clone(),
            hint: self.hint.clone().unwrap_or_default(),
            exit_code: self.kind.exit_code() as u8,
            field: self.field.clone(),
            command: self.command.as_ref().map(|c| FailedCommand {
                argv: c.argv.clone(),
                exit_code: c.exit_code,
                stderr: c.stderr_tail.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabularies_serialise_as_the_contract_spells_them() {
        let v = |x: &dyn erased::Ser| x.json();
        assert_eq!(v(&Status::HangDetected), "\"HANG_DETECTED\"");
        assert_eq!(v(&Status::BuildFailed), "\"BUILD_FAILED\"");
        assert_eq!(v(&Recipe::Launcher), "\"launcher\"");
        assert_eq!(v(&SshPath::Mfa), "\"mfa\"");
        assert_eq!(v(&Master::None), "\"none\"");
        assert_eq!(v(&Via::Direct), "\"direct\"");
        assert_eq!(v(&JobKind::Build), "\"build\"");
        assert_eq!(v(&Source::Scontrol), "\"scontrol\"");
        assert_eq!(v(&Source::EndMarker), "\"end_marker\"");
        assert_eq!(v(&AllocationState::Released), "\"RELEASED\"");
        assert_eq!(v(&ExecMode::PerNode), "\"pernode\"");
        assert_eq!(v(&Accounting::Unreachable), "\"unreachable\"");
        assert_eq!(
            v(&crate::contract::error::ErrorKind::NeedsPerson),
            "\"needs_person\""
        );
        for r in Recipe::ALL {
            assert_eq!(v(&r), format!("\"{}\"", r.name()));
            assert_eq!(Recipe::parse(r.name()).unwrap(), r);
        }
        let e = Recipe::parse("mpirun").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("recipe"));
        assert!(e
            .message
            .contains("single, mpi, distributed, launcher, batch"));
    }

    mod erased {
        pub trait Ser {
            fn json(&self) -> String;
        }
        impl<T: serde::Serialize> Ser for T {
            fn json(&self) -> String {
                serde_json::to_string(self).unwrap()
            }
        }
    }

    #[test]
    fn null_and_absent_stay_apart_where_null_means_something() {
        let a: Allocation = serde_json::from_str(r#"{"gpus_per_node_probed": null}"#).unwrap();
        assert_eq!(a.gpus_per_node_probed, Some(None));
        let a: Allocation = serde_json::from_str("{}").unwrap();
        assert_eq!(a.gpus_per_node_probed, None);
        assert_eq!(serde_json::to_string(&a).unwrap(), "{}");
        let a = Allocation {
            gpus_per_node_probed: Some(None),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"gpus_per_node_probed":null}"#
        );
    }

    #[test]
    fn unknown_fields_in_a_section_are_refused() {
        let e = serde_json::from_str::<Stash>(r#"{"commit":"a","message":"b","extra":1}"#);
        assert!(e.unwrap_err().to_string().contains("extra"));
    }

    fn tree() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn no_tool_builds_json_by_hand() {
        // Sections go through these types; `json!` in a tool would bypass them.
        let mut files = Vec::new();
        rust_files(&tree().join("tools"), &mut files);
        assert!(files.len() >= 8, "found the tools' sources");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("json!"),
                "{} builds JSON with json!: write the section through shared::contract::schema",
                f.display()
            );
        }
    }

    #[test]
    fn the_contract_names_every_field_of_every_section() {
        let contract = std::fs::read_to_string(tree().join("docs/contract.md")).unwrap();
        for (name, fields) in sections() {
            // `build` is described with `job`, whose two sections it holds.
            let heading = if name == "build" { "job" } else { name };
            let start = contract
                .find(&format!("### `{heading}`"))
                .unwrap_or_else(|| panic!("docs/contract.md has no section `{heading}`"));
            let rest = &contract[start + 4..];
            let end = rest.find("\n#").unwrap_or(rest.len());
            let text = &rest[..end];
            for f in fields {
                assert!(
                    text.contains(&format!("`{f}`")),
                    "docs/contract.md's `{heading}` section does not name `{f}`"
                );
            }
        }
        assert!(contract.contains(&format!("(version {CONTRACT_VERSION})")));
        assert!(contract.contains("`contract_version`"));
    }

    #[test]
    fn section_fields_follow_the_declaration_order() {
        let f = section_fields::<Stash>();
        assert_eq!(f, ["commit", "message"]);
        assert!(adds_text("report")
            .starts_with("Adds the `report` section (docs/contract.md): status, job_id, kind,"));
    }
}
