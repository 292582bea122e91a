//! The Slurm command lines of Recipes 1-5 and of the build job (PROCEDURE step 5 and "Recipes").
//!
//! Every option takes the `--opt=value` form, so a value starting with `-` can never become an
//! option, and every argv word is quoted once when it becomes shell text.

use serde_json::Value;
use shared::doc::field_error;
use shared::slurm::{check_slurm_value, check_time_limit, enroot_image};
use shared::{Document, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    Single,
    Mpi,
    Distributed,
    Launcher,
    Batch,
}

pub const RECIPES: &str = "single, mpi, distributed, launcher, batch";

impl Recipe {
    pub fn parse(s: &str) -> Result<Recipe> {
        Ok(match s {
            "single" => Recipe::Single,
            "mpi" => Recipe::Mpi,
            "distributed" => Recipe::Distributed,
            "launcher" => Recipe::Launcher,
            "batch" => Recipe::Batch,
            other => {
                return Err(field_error("recipe", &format!("is {other:?}, which is not a recipe; the recipes are {RECIPES}"))
                    .with_hint("single: one task; mpi: srun --mpi=pmix, a task per GPU; distributed: a task per GPU; launcher: one torchrun per node; batch: sbatch"))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Recipe::Single => "single",
            Recipe::Mpi => "mpi",
            Recipe::Distributed => "distributed",
            Recipe::Launcher => "launcher",
            Recipe::Batch => "batch",
        }
    }
}

/// The Slurm settings shared by every job, read and checked from the document.
#[derive(Debug, Clone)]
pub struct Settings {
    pub job_name: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub time_limit: Option<String>,
    pub nodes: i64,
    pub per_node: Option<i64>,
    pub gpus_per_node: Option<i64>,
    pub container_image: Option<String>,
    pub mounts: Option<String>,
    pub network: Option<String>,
    pub constraint: Option<String>,
    pub comment: Option<String>,
    pub gpu_clocks: Option<String>,
}

impl Settings {
    pub fn from_doc(doc: &Document) -> Result<Settings> {
        let s = |k: &str| -> Result<Option<String>> {
            let v = doc.str_opt(k)?.map(str::to_string);
            if let Some(v) = &v {
                check_slurm_value(k, v)?;
            }
            Ok(v)
        };
        let time_limit = match doc.str_opt("time_limit")? {
            Some(t) => Some(check_time_limit(t)?.to_string()),
            None => None,
        };
        let mounts = match doc.get("mounts") {
            None => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(Value::Array(_)) => {
                Some(doc.str_list_opt("mounts")?.unwrap_or_default().join(","))
            }
            Some(other) => {
                return Err(shared::doc::wrong_type(
                    "mounts",
                    "a string or a list of strings",
                    other,
                ))
            }
        };
        if let Some(m) = &mounts {
            check_slurm_value("mounts", m)?;
        }
        let flags = doc
            .section("resolve")
            .and_then(|r| r.get("flags"))
            .and_then(Value::as_object);
        let flag = |k: &str| -> Result<Option<String>> {
            let v = match flags.and_then(|f| f.get(k)) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => None,
                Some(Value::Bool(true)) if k == "network" || k == "sharp" => {
                    Some("sharp".to_string())
                }
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            if let Some(v) = &v {
                check_slurm_value(&format!("resolve.flags.{k}"), v)?;
            }
            Ok(v)
        };
        Ok(Settings {
            job_name: s("job_name")?,
            account: s("account")?,
            partition: s("partition")?,
            time_limit,
            nodes: doc.int_opt("node_count", 1, 100_000)?.unwrap_or(1),
            per_node: doc.int_opt("required_devices_per_node", 1, 4096)?,
            gpus_per_node: doc.int_opt("gpus_per_node", 1, 4096)?,
            container_image: s("container_image")?,
            mounts,
            network: flag("network")?.or(flag("sharp")?),
            constraint: flag("constraint")?,
            comment: flag("comment")?,
            gpu_clocks: flag("gpu_clocks")?,
        })
    }

    /// `--account`, `--partition`, `--gpus-per-node` and the catalog's cluster flags.
    fn common(&self, argv: &mut Vec<String>) {
        if let Some(a) = &self.account {
            argv.push(format!("--account={a}"));
        }
        if let Some(p) = &self.partition {
            argv.push(format!("--partition={p}"));
        }
        if let Some(g) = self.gpus_per_node {
            argv.push(format!("--gpus-per-node={g}"));
        }
        if let Some(n) = &self.network {
            argv.push(format!("--network={n}"));
        }
        if let Some(c) = &self.constraint {
            argv.push(format!("--constraint={c}"));
        }
    }

    /// `--comment`: the catalog's comment (e.g. `metrics`) and our lookup token.
    fn comment(&self, token: &str) -> String {
        match &self.comment {
            Some(c) => format!("--comment={c};{token}"),
            None => format!("--comment={token}"),
        }
    }

    fn container(&self, argv: &mut Vec<String>) {
        if let Some(i) = &self.container_image {
            argv.push(format!("--container-image={}", enroot_image(i)));
            if let Some(m) = &self.mounts {
                argv.push(format!("--container-mounts={m}"));
            }
        }
    }

    /// Tasks per node for a recipe: `required_devices_per_node`, else `gpus_per_node`, else 1.
    pub fn tasks_per_node(&self, recipe: Recipe) -> i64 {
        match recipe {
            Recipe::Single | Recipe::Launcher | Recipe::Batch => 1,
            Recipe::Mpi | Recipe::Distributed => self.per_node.or(self.gpus_per_node).unwrap_or(1),
        }
    }
}

/// The srun or sbatch argv (without the program's own arguments).
pub fn run_argv(
    recipe: Recipe,
    st: &Settings,
    token: &str,
    repo: &str,
    out: &str,
    err: &str,
) -> Vec<String> {
    let mut argv = vec![if recipe == Recipe::Batch {
        "sbatch"
    } else {
        "srun"
    }
    .to_string()];
    if recipe == Recipe::Batch {
        argv.push("--parsable".into());
    }
    if let Some(n) = &st.job_name {
        argv.push(format!("--job-name={n}"));
    }
    let nodes = if recipe == Recipe::Single {
        1
    } else {
        st.nodes
    };
    argv.push(format!("--nodes={nodes}"));
    argv.push(format!("--ntasks-per-node={}", st.tasks_per_node(recipe)));
    if recipe == Recipe::Mpi {
        argv.push("--mpi=pmix".into());
    }
    if let Some(t) = &st.time_limit {
        argv.push(format!("--time={t}"));
    }
    st.common(&mut argv);
    argv.push(format!("--chdir={repo}"));
    argv.push(format!("--output={out}"));
    argv.push(format!("--error={err}"));
    argv.push(st.comment(token));
    st.container(&mut argv);
    argv
}

/// The job's own script: the document's `command` exactly as written, after a preamble that
/// records the job id (so the submitter learns it even for a job that ends at once), sets the
/// launcher variables, and runs the GPU clock pre-step on each node's first task.
pub fn command_file(
    recipe: Recipe,
    st: &Settings,
    command: &str,
    jobid_file: &str,
    end_marker: &str,
) -> Result<String> {
    let mut s = shared::quote::Script::new();
    s.raw("#!/bin/bash\n# Written by slurm-submit. The job's command follows the preamble unchanged.\n");
    s.raw("if [ \"${SLURM_PROCID:-0}\" = 0 ]; then printf '%s\\n' \"$SLURM_JOB_ID\" >");
    s.arg(jobid_file)?;
    s.raw("; fi\n");
    if recipe == Recipe::Batch {
        // The batch script's end, for slurm-watch to notice at once (squeue is the fallback
        // when the command replaces this shell or sets its own EXIT trap).
        s.assign("slurm_tools_end", end_marker)?;
        s.raw("trap 'date +%s >\"$slurm_tools_end\"' EXIT\n");
    }
    if recipe == Recipe::Distributed {
        s.raw("export RANK=\"$SLURM_PROCID\" LOCAL_RANK=\"$SLURM_LOCALID\" WORLD_SIZE=\"$SLURM_NTASKS\"\n");
        s.raw("export MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\" MASTER_PORT=\"${MASTER_PORT:-29500}\"\n");
    }
    if let Some(clocks) = &st.gpu_clocks {
        s.raw("if [ \"${SLURM_LOCALID:-0}\" = 0 ]; then sudo -n nvidia-smi -ac");
        s.arg(clocks)?;
        s.raw(" || echo 'slurm-submit: the GPU clock pre-step failed' >&2; fi\n");
    }
    s.raw("# --- command ---\n");
    if recipe == Recipe::Launcher {
        let gpus = st.per_node.or(st.gpus_per_node).unwrap_or(1);
        s.raw("exec torchrun --nnodes=\"$SLURM_NNODES\" --node-rank=\"$SLURM_NODEID\"");
        s.raw(" --rdzv-id=\"$SLURM_JOB_ID\" --rdzv-backend=c10d");
        s.raw(" --rdzv-endpoint=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1):29500\"");
        s.raw(" --nproc-per-node=");
        s.glued(&gpus.to_string())?;
        s.raw(" ");
    }
    s.user_shell_text(command);
    s.raw("\n");
    Ok(s.into_string())
}

/// The build job's sbatch argv (PROCEDURE step 5: one node, one task, 02:00:00).
pub fn build_argv(st: &Settings, token: &str, repo: &str, log: &str) -> Vec<String> {
    let mut argv = vec!["sbatch".to_string(), "--parsable".into()];
    argv.push("--nodes=1".into());
    argv.push("--ntasks=1".into());
    argv.push("--ntasks-per-node=1".into());
    let name = match &st.account {
        Some(a) => format!("{a}-trtllm.build"),
        None => "trtllm.build".to_string(),
    };
    argv.push(format!("--job-name={name}"));
    argv.push("--time=02:00:00".into());
    st.common(&mut argv);
    argv.push(format!("--chdir={repo}"));
    argv.push(format!("--output={log}"));
    argv.push(st.comment(token));
    argv
}
