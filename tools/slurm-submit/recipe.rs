//! The Slurm command lines of Recipes 1-5 and of the build job (PROCEDURE step 5 and "Recipes"),
//! from the settings `shared::slurm::Settings` parsed (the same ones slurm-alloc uses).
//!
//! Every option takes the `--opt=value` form, so a value starting with `-` can never become an
//! option, and every argv word is quoted once when it becomes shell text.

use shared::schema::Recipe;
use shared::slurm::{Settings, DISTRIBUTED_ENV};
use shared::Result;

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
        s.raw(DISTRIBUTED_ENV);
        s.raw("export MASTER_ADDR=\"$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\" MASTER_PORT=\"${MASTER_PORT:-29500}\"\n");
    }
    if let Some(clocks) = &st.gpu_clocks {
        s.raw("if [ \"${SLURM_LOCALID:-0}\" = 0 ]; then sudo -n nvidia-smi -ac");
        s.arg(clocks)?;
        s.raw(" || echo 'slurm-submit: the GPU clock pre-step failed' >&2; fi\n");
    }
    s.raw("# --- command ---\n");
    if recipe == Recipe::Launcher {
        let gpus = st.devices_per_node();
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
