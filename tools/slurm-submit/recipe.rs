//! The Slurm command lines of every recipe and of the build job (docs/migrating.md, step 5 and "Recipes"),
//! from the settings `shared::slurm::Settings` parsed (the same ones slurm-alloc uses).
//!
//! Every option takes the `--opt=value` form, so a value starting with `-` can never become an
//! option, and every argv word is quoted once when it becomes shell text.

use shared::contract::schema::Recipe;
use shared::slurm::pyxis::FIRST_HOST;
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
    allocation(&mut argv, recipe, st, token, repo, out, err);
    if recipe == Recipe::Mpi {
        argv.push("--mpi=pmix".into());
    }
    st.container(&mut argv, repo);
    argv
}

/// A sweep's sbatch argv (one job array, `--array=spec`) and, for the srun recipes, the step
/// every task runs inside its allocation (the recipe's launcher and container flags).
pub fn array_argv(
    recipe: Recipe,
    st: &Settings,
    token: &str,
    repo: &str,
    logs: (&str, &str),
    spec: &str,
) -> (Vec<String>, Option<Vec<String>>) {
    let mut argv = vec![
        "sbatch".to_string(),
        "--parsable".into(),
        format!("--array={spec}"),
    ];
    allocation(&mut argv, recipe, st, token, repo, logs.0, logs.1);
    if recipe == Recipe::Batch {
        st.container(&mut argv, repo);
        return (argv, None);
    }
    let mut step = vec!["srun".to_string()];
    if recipe == Recipe::Mpi {
        step.push("--mpi=pmix".into());
    }
    st.container(&mut step, repo);
    (argv, Some(step))
}

/// What every job of a recipe asks Slurm for: name, nodes, tasks, time, the site's options, the
/// tree, the logs and the tag.
fn allocation(
    argv: &mut Vec<String>,
    recipe: Recipe,
    st: &Settings,
    token: &str,
    repo: &str,
    out: &str,
    err: &str,
) {
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
    if let Some(t) = &st.time_limit {
        argv.push(format!("--time={t}"));
    }
    st.common(argv);
    argv.push(format!("--chdir={repo}"));
    argv.push(format!("--output={out}"));
    argv.push(format!("--error={err}"));
    argv.push(st.comment(token));
}

/// The job's own script: the document's `command` exactly as written, after a preamble that
/// records the job id (so the submitter learns it even for a job that ends at once), sets the
/// launcher variables, and runs the GPU clock pre-step on each node's first task.
/// A sweep's tasks each get their parameters first, and `{name}` in the command is the
/// parameter's variable (shared/src/slurm/sweep.rs); a sweep has no end marker (slurm-watch
/// follows its tasks through squeue and sacct).
pub fn command_file(
    recipe: Recipe,
    st: &Settings,
    command: &str,
    jobid_file: &str,
    end_marker: &str,
    sweep: Option<&shared::slurm::sweep::Plan>,
) -> Result<String> {
    let mut s = shared::remote::quote::Script::new();
    s.raw("#!/bin/bash\n# Written by slurm-submit. The job's command follows the preamble unchanged.\n");
    // An array's tasks each have their own job id: the file names the array.
    s.raw("if [ \"${SLURM_PROCID:-0}\" = 0 ]; then printf '%s\\n' \"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}\" >");
    s.arg(jobid_file)?;
    s.raw("; fi\n");
    if let Some(p) = sweep {
        p.preamble(&mut s)?;
    }
    if recipe == Recipe::Batch && sweep.is_none() {
        // The batch script's end, for slurm-watch to notice at once (squeue is the fallback
        // when the command replaces this shell or sets its own EXIT trap).
        s.assign("slurm_tools_end", end_marker)?;
        // Its first word is the script's exit code (how the command ended, should Slurm's record
        // of the job be gone), then the time.
        s.raw("trap 'printf \"%s %s\\n\" \"$?\" \"$(date +%s)\" >\"$slurm_tools_end\"' EXIT\n");
    }
    if matches!(recipe, Recipe::Distributed | Recipe::Launcher) {
        // A container image has no Slurm client: the first host comes from the node list then.
        s.raw(FIRST_HOST);
    }
    if recipe == Recipe::Distributed {
        s.raw(DISTRIBUTED_ENV);
        s.raw("export MASTER_ADDR=\"$(first_host)\" MASTER_PORT=\"${MASTER_PORT:-29500}\"\n");
    }
    if let Some(clocks) = &st.gpu_clocks {
        s.raw("if [ \"${SLURM_LOCALID:-0}\" = 0 ]; then sudo -n nvidia-smi -ac");
        s.arg(clocks)?;
        s.raw(" || echo 'slurm-submit: the GPU clock pre-step failed' >&2; fi\n");
    }
    s.raw("# --- command ---\n");
    if recipe == Recipe::Launcher {
        let gpus = st.devices_per_node();
        // The underscore spellings: every torchrun takes them (the hyphenated ones are newer).
        s.raw("exec torchrun --nnodes=\"$SLURM_NNODES\" --node_rank=\"$SLURM_NODEID\"");
        s.raw(" --rdzv_id=\"$SLURM_JOB_ID\" --rdzv_backend=c10d");
        s.raw(" --rdzv_endpoint=\"$(first_host):29500\"");
        s.raw(" --nproc_per_node=");
        s.glued(&gpus.to_string())?;
        s.raw(" ");
    }
    match sweep {
        Some(p) => s.user_shell_text(&shared::slurm::sweep::substitute(command, &p.names())),
        None => s.user_shell_text(command),
    };
    s.raw("\n");
    Ok(s.into_string())
}

/// The build job's sbatch argv (docs/migrating.md, step 5: one node, one task, 02:00:00).
pub fn build_argv(st: &Settings, token: &str, repo: &str, log: &str) -> Vec<String> {
    let mut argv = vec!["sbatch".to_string(), "--parsable".into()];
    argv.push("--nodes=1".into());
    argv.push("--ntasks=1".into());
    argv.push("--ntasks-per-node=1".into());
    let name = match &st.job_name {
        Some(n) => format!("{n}.build"),
        None => "slurm-tools.build".to_string(),
    };
    argv.push(format!("--job-name={name}"));
    argv.push("--time=02:00:00".into());
    st.common(&mut argv);
    argv.push(format!("--chdir={repo}"));
    argv.push(format!("--output={log}"));
    argv.push(st.comment(token));
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            job_name: Some("exp 1".into()),
            account: Some("acct".into()),
            partition: Some("gpu".into()),
            time_limit: Some("00:30:00".into()),
            nodes: 2,
            per_node: Some(4),
            gpus_per_node: Some(8),
            container_image: Some("reg:5000/ns/img:1".into()),
            container_runtime: Some(shared::slurm::container::Runtime::Pyxis),
            container_ref: Some("reg:5000#ns/img:1".into()),
            mounts: Some("/d:/d".into()),
            ..Settings::default()
        }
    }

    #[test]
    fn each_recipe_gets_its_launcher_nodes_and_tasks() {
        let st = settings();
        // (recipe, program, --nodes, --ntasks-per-node, extra flag present)
        let table: &[(Recipe, &str, &str, &str, Option<&str>)] = &[
            (
                Recipe::Single,
                "srun",
                "--nodes=1",
                "--ntasks-per-node=1",
                None,
            ),
            (
                Recipe::Mpi,
                "srun",
                "--nodes=2",
                "--ntasks-per-node=4",
                Some("--mpi=pmix"),
            ),
            (
                Recipe::Distributed,
                "srun",
                "--nodes=2",
                "--ntasks-per-node=4",
                None,
            ),
            (
                Recipe::Launcher,
                "srun",
                "--nodes=2",
                "--ntasks-per-node=1",
                None,
            ),
            (
                Recipe::Batch,
                "sbatch",
                "--nodes=2",
                "--ntasks-per-node=1",
                Some("--parsable"),
            ),
        ];
        for (recipe, program, nodes, tasks, extra) in table {
            let argv = run_argv(*recipe, &st, "tag", "/r", "/w/o-%j.out", "/w/o-%j.err");
            assert_eq!(argv[0], *program, "{recipe}");
            for want in [
                *nodes,
                *tasks,
                "--job-name=exp 1",
                "--time=00:30:00",
                "--account=acct",
                "--partition=gpu",
                "--gpus-per-node=8",
                "--chdir=/r",
                "--output=/w/o-%j.out",
                "--error=/w/o-%j.err",
                "--comment=tag",
                "--container-image=reg:5000#ns/img:1",
                "--container-mounts=/d:/d",
                "--container-workdir=/r",
            ] {
                assert!(
                    argv.iter().any(|a| a == want),
                    "{recipe}: {want} not in {argv:?}"
                );
            }
            if let Some(x) = extra {
                assert!(argv.iter().any(|a| a == x), "{recipe}: {x} not in {argv:?}");
            }
            // Every option is `--opt=value`: a value can never become an option of its own.
            assert!(argv[1..].iter().all(|a| a.starts_with("--")), "{argv:?}");
        }
    }

    #[test]
    fn the_build_job_is_one_node_one_task_two_hours() {
        let argv = build_argv(&settings(), "tag", "/r", "/s/log/build_%j.srun.log");
        for want in [
            "sbatch",
            "--parsable",
            "--nodes=1",
            "--ntasks=1",
            "--job-name=exp 1.build",
            "--time=02:00:00",
            "--output=/s/log/build_%j.srun.log",
        ] {
            assert!(argv.iter().any(|a| a == want), "{want} not in {argv:?}");
        }
        assert!(
            !argv.iter().any(|a| a.starts_with("--container")),
            "{argv:?}"
        );
    }

    #[test]
    fn the_job_script_keeps_the_command_and_sets_the_launcher_variables() {
        let st = settings();
        let d = command_file(
            Recipe::Distributed,
            &st,
            "python train.py 'a b'",
            "/s/t.jobid",
            "/s/t.end",
            None,
        )
        .unwrap();
        assert!(d.contains(DISTRIBUTED_ENV), "{d}");
        assert!(d.contains("MASTER_ADDR="), "{d}");
        assert!(d.ends_with("python train.py 'a b'\n"), "{d}");
        let l = command_file(
            Recipe::Launcher,
            &st,
            "train.py",
            "/s/t.jobid",
            "/s/t.end",
            None,
        )
        .unwrap();
        assert!(
            l.contains("exec torchrun --nnodes=\"$SLURM_NNODES\""),
            "{l}"
        );
        assert!(l.contains("--nproc_per_node=4"), "{l}");
        for old_torchrun_refuses in ["--nproc-per-node", "--node-rank", "--rdzv-"] {
            assert!(!l.contains(old_torchrun_refuses), "{l}");
        }
        let b = command_file(Recipe::Batch, &st, "true", "/s/t.jobid", "/s/t.end", None).unwrap();
        assert!(
            b.contains(
                "trap 'printf \"%s %s\\n\" \"$?\" \"$(date +%s)\" >\"$slurm_tools_end\"' EXIT"
            ),
            "{b}"
        );
        let s = command_file(Recipe::Single, &st, "true", "/s/t.jobid", "/s/t.end", None).unwrap();
        assert!(
            !s.contains("trap") && !s.contains("torchrun") && !s.contains("RANK"),
            "{s}"
        );
    }
}
