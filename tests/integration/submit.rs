//! slurm-submit on the real cluster: every recipe really runs, with exact command lines.

use crate::fixture::*;
use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

fn submit(doc: &Value, args: &[&str]) -> Run {
    run("slurm-submit", args, doc)
}

/// every recipe in real pyxis containers, each with the registry image (written as a person
/// writes it, `HOST:PORT/ns/name:tag`) and with the same image as a .sqsh file, `mounts` as a
/// list and as a string: the job runs in the image, starts in its own code tree and sees it, and
/// sees the mounts.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn every_recipe_runs_in_a_real_container_with_the_documents_settings() {
    crate::needs_cluster!();
    let (_fx, mut base) = synced("recipes");
    base["gpus_per_node"] = json!(4);
    let images_dir = Path::new(&testbed().s("container_image_file"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    let torchrun = TORCHRUN_MOUNT;
    let probe = RECIPE_PROBE;
    let cases = RECIPE_CASES.map(|(recipe, command, tasks)| (recipe, command, 1, tasks));
    let registry = testbed().s("container_image");
    let file = testbed().s("container_image_file");
    let mut jobs = Vec::new();
    for (image, list) in [(registry.as_str(), true), (file.as_str(), false)] {
        for (recipe, command, nodes, tasks) in cases {
            let mut d = base.clone();
            d["recipe"] = json!(recipe);
            d["command"] = json!(format!("{command}; {probe}"));
            d["container_image"] = json!(image);
            let mounts = [format!("{images_dir}:/mnt/images:ro"), torchrun.to_string()];
            d["mounts"] = if list {
                json!(mounts)
            } else {
                json!(mounts.join(","))
            };
            d["required_devices_per_node"] = json!(4);
            let r = submit(&d, &[]);
            assert_eq!(r.code, 0, "{recipe}: {}", r.stderr);
            assert_eq!(
                r.typed().container_image.as_deref(),
                Some(image),
                "the document keeps the form the person wrote"
            );
            let job = r.job();
            assert_eq!(job.kind.name(), "run");
            assert_eq!(job.recipe.map(|r| r.to_string()).as_deref(), Some(recipe));
            // pyxis gets the image file as written, and the registry image as the file the
            // login node imported it into once (the image cache).
            let runs = job.container_image.clone().unwrap();
            if list {
                let cache = job.image_cache.as_deref().unwrap();
                assert!(
                    runs.starts_with(&format!("{cache}/")) && runs.ends_with(".sqsh"),
                    "{recipe}: {job:?}"
                );
                assert_eq!(job.container_use.as_ref().unwrap().image, image, "{job:?}");
            } else {
                assert_eq!(runs, image, "{job:?}");
            }
            let argv: Vec<String> = job.argv.clone().unwrap();
            for want in [
                format!("--container-image={runs}"),
                format!("--container-mounts={}", mounts.join(",")),
                format!("--container-workdir={}", job.tree.as_deref().unwrap()),
            ] {
                assert!(argv.contains(&want), "{recipe}: {want} not in {argv:?}");
            }
            jobs.push((image, recipe, job, nodes, tasks));
        }
    }
    for (image, recipe, job, nodes, tasks) in jobs {
        let id = job.job_id.as_deref().unwrap();
        let (state, code) = wait_done(id, 300);
        let out = read(job.stdout_path.as_deref().unwrap());
        let err = std::fs::read_to_string(job.stderr_path.as_deref().unwrap()).unwrap_or_default();
        assert_eq!(
            (state.as_str(), code.as_str()),
            ("COMPLETED", "0:0"),
            "{image} {recipe}: {out}\n{err}"
        );
        let ctx = format!("{image} {recipe}: {out}\n{err}");
        assert!(
            out.contains("slurm-tools testbed image devbox"),
            "runs in the image: {ctx}"
        );
        assert!(out.contains("devbox.sqsh"), "sees the mount: {ctx}");
        if recipe != "launcher" {
            assert!(
                out.contains(&format!("pwd={}", job.tree.as_deref().unwrap())),
                "starts in its own code tree: {ctx}"
            );
            assert!(out.contains("code-visible"), "{ctx}");
        }
        assert!(
            !err.contains("pyxis: importing docker image"),
            "no node imports the image: {ctx}"
        );
        let sc = scontrol(id);
        assert_eq!(sc["JobName"], format!("st-recipes"), "{recipe}");
        assert_eq!(sc["Account"], testbed().s("account"));
        assert_eq!(sc["Partition"], testbed().s("partition"));
        assert_eq!(sc["TimeLimit"], "00:05:00");
        assert_eq!(
            sc["NumNodes"].split('-').next().unwrap(),
            nodes.to_string(),
            "{recipe}"
        );
        assert!(
            sc.get("TresPerNode").is_some_and(|t| t.contains("gpu:4")),
            "{recipe}: {sc:?}"
        );
        assert_eq!(
            sc["NumTasks"],
            (nodes * tasks).to_string(),
            "{recipe}: nodes x tasks per node"
        );
        if recipe == "mpi" {
            assert!(job.command.as_deref().unwrap().contains("--mpi=pmix"));
        }
        // No scontrol in the image: MASTER_ADDR comes from the node list itself.
        assert_recipe_output(recipe, &out, tasks, &scontrol(id)["NodeList"], &out);
    }
}

/// The image has no torchrun: the test bed's stand-in is mounted in for the launcher recipe.
pub const TORCHRUN_MOUNT: &str = "/usr/local/bin/torchrun:/usr/local/bin/torchrun:ro";

/// What a job in a container prints to show where it runs: the image's marker, its directory,
/// its code, the mounted images directory (`/mnt/images`).
pub const RECIPE_PROBE: &str = "cat /etc/slurm-tools-image; echo pwd=$(pwd); test -f README.md && echo code-visible; ls /mnt/images";

/// Each recipe with a command that shows its launch, and the tasks per node it runs.
pub const RECIPE_CASES: [(&str, &str, usize); 5] = [
    ("single", "echo task $SLURM_PROCID of $SLURM_NTASKS", 1),
    ("mpi", "echo task $SLURM_PROCID of $SLURM_NTASKS pmix=${PMIX_RANK:-none}", 4),
    ("distributed", "echo rank $RANK local $LOCAL_RANK world $WORLD_SIZE master $MASTER_ADDR", 4),
    // The launcher's command is what torchrun starts, so the probe goes inside it.
    ("launcher", "sh -c 'echo launched rank $RANK of $WORLD_SIZE; cat /etc/slurm-tools-image; ls /mnt/images'", 1),
    ("batch", "echo batch on $SLURM_JOB_NUM_NODES node", 1),
];

/// What each of [`RECIPE_CASES`] printed, on one node: every MPI task with its pmix rank, every
/// distributed rank with `master` (the node name, or its start), torchrun's processes.
pub fn assert_recipe_output(recipe: &str, out: &str, tasks: usize, master: &str, ctx: &str) {
    match recipe {
        "mpi" => {
            assert_eq!(out.matches("task ").count(), tasks, "{ctx}");
            assert!(out.contains("pmix=0") && out.contains("pmix=3"), "{ctx}");
        }
        "distributed" => {
            for r in 0..4 {
                assert!(
                    out.contains(&format!("rank {r} local {r} world 4 master {master}")),
                    "{ctx}"
                );
            }
        }
        "launcher" => {
            assert!(
                out.contains("torchrun stand-in: 4 process(es) per node"),
                "{ctx}"
            );
            assert!(out.contains("launched rank 3 of 4"), "{ctx}");
        }
        _ => assert!(
            out.contains("of 1") || out.contains("batch on 1 node"),
            "{ctx}"
        ),
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_values_reach_slurm_and_the_job_literally_and_no_canary_fires() {
    crate::needs_cluster!();
    let (_fx, base) = synced("inject");
    let canary = format!("/tmp/slurm-tools-submit-canary-{}", std::process::id());
    let _ = std::fs::remove_file(&canary);
    let hostile = [
        format!("$(touch {canary})"),
        format!("`touch {canary}`"),
        format!("; touch {canary}"),
        format!("x' ; touch {canary}; '"),
        format!("\" && touch {canary} && \""),
        "{a,b} * ~root $HOME \\ #x".to_string(),
        "--uid=0".to_string(),
    ];
    let mut jobs = Vec::new();
    for (i, h) in hostile.iter().enumerate() {
        let recipe = if i % 2 == 0 { "single" } else { "batch" };
        // The job name, in a job that runs in the real container.
        let mut d = base.clone();
        d["job_name"] = json!(h);
        d["container_image"] = json!(testbed().s("container_image_file"));
        d["command"] = json!("printf '%s\\n' \"$SLURM_JOB_NAME\"");
        d["recipe"] = json!(recipe);
        let r = submit(&d, &[]);
        assert_eq!(r.code, 0, "{h}: {}", r.stderr);
        jobs.push((h, r.job()));
        // The image and the mounts reach pyxis literally: it names them when it refuses them.
        // No `/` in the image: with one, the enroot rewrite (registry/ -> registry#) applies.
        let image = format!("img{i}:{}", h.replace('/', "_"));
        let mut d = base.clone();
        d["container_image"] = json!(image);
        d["command"] = json!("true");
        d["recipe"] = json!(recipe);
        let r = submit(&d, &[]);
        assert_eq!(r.code, 0, "{h}: {}", r.stderr);
        let id = r.job_id();
        wait_done(&id, 120);
        let err = read(r.job().stderr_path.as_deref().unwrap());
        assert!(
            err.contains(&format!("pyxis: importing docker image: {image}\n")),
            "pyxis got the image literally: {err}"
        );
        let mut d = base.clone();
        d["container_image"] = json!(testbed().s("container_image_file"));
        d["mounts"] = json!(format!("/tmp/{h}:/mnt"));
        d["command"] = json!("true");
        d["recipe"] = json!(recipe);
        let r = submit(&d, &[]);
        let said = if r.code == 0 {
            let id = r.job_id();
            wait_done(&id, 120);
            read(r.job().stderr_path.as_deref().unwrap())
                + &std::fs::read_to_string(format!(
                    "{}/{}.srun.log",
                    r.job().state_dir.unwrap(),
                    r.job().submit_tag.unwrap()
                ))
                .unwrap_or_default()
        } else {
            r.stderr.clone()
        };
        // (A comma separates mounts: pyxis names the first one.)
        let first = format!("/tmp/{h}");
        let first = first.split(',').next().unwrap();
        assert!(
            said.contains(first),
            "pyxis (or sbatch) got the mount literally: {first} in {said}"
        );
    }
    for (h, job) in jobs {
        let id = job.job_id.as_deref().unwrap();
        assert_eq!(wait_done(id, 120).0, "COMPLETED", "{h}");
        assert_eq!(
            scontrol(id)["JobName"],
            *h,
            "Slurm sees the job name literally"
        );
        let out = read(job.stdout_path.as_deref().unwrap());
        assert_eq!(out, format!("{h}\n"), "the job sees the name literally");
    }
    assert!(!std::path::Path::new(&canary).exists(), "a canary fired");
    // A newline cannot be represented in Slurm's line-based output: refused before sending.
    let mut d = base.clone();
    d["job_name"] = json!("two\nlines");
    let r = submit(&d, &[]);
    assert_eq!(r.code, 2);
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "job_name");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_command_runs_exactly_as_written() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("exact");
    let command = "echo \"double 'single' inside\" 'single \"double\" inside'\ncat <<'EOF'\nheredoc $HOME `not run`\nEOF\necho trailing \\\n  continued";
    d["command"] = json!(command);
    d["recipe"] = json!("single");
    let r = submit(&d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.job_id();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(out, "double 'single' inside single \"double\" inside\nheredoc $HOME `not run`\ntrailing continued\n");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_srun_job_outlives_the_submitting_connection_and_is_found_by_its_id() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("survive");
    d["command"] = json!("sleep 6; echo survived");
    d["recipe"] = json!("single");
    // A mark in this submission's ssh argv only (an environment variable the server ignores),
    // so its processes are told apart from those of tests running alongside.
    let mark = format!("SLURM_TOOLS_TEST_MARK=survive-{}", std::process::id());
    d["ssh_options"] = json!(["-o", format!("SetEnv={mark}")]);
    let r = submit(&d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.job_id();
    // The submitting ssh has exited; no ssh process of ours is left.
    let ours = std::process::Command::new("pgrep")
        .args(["-f", &mark])
        .output()
        .unwrap();
    assert!(
        ours.stdout.is_empty(),
        "ssh processes of the submission are left: {}",
        String::from_utf8_lossy(&ours.stdout)
    );
    // Running (or waiting for a free node) after the submitting ssh has gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sq = std::process::Command::new("squeue")
            .args(["-h", "-j", &id, "-o", "%T"])
            .output()
            .unwrap();
        let state = String::from_utf8_lossy(&sq.stdout).trim().to_string();
        assert!(state == "RUNNING" || state == "PENDING", "{state}");
        if state == "RUNNING" || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        wait_done(&id, 240),
        ("COMPLETED".to_string(), "0:0".to_string())
    );
    assert!(read(r.job().stdout_path.as_deref().unwrap()).contains("survived"));
    assert!(r.job().tmux_session.unwrap().starts_with("slurm-tools-"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_lost_reply_is_retried_with_the_same_tag_and_never_submitted_twice() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("nodup");
    d["command"] = json!("echo once");
    d["recipe"] = json!("batch");
    let state = tempdir();
    let mut cmd = tool("slurm-submit");
    cmd.env(
        "SLURM_TOOLS_SSH",
        repo_root().join("scripts/testbed/ssh-fault-dropped-reply"),
    )
    .env("SLURM_TOOLS_FAULT_STATE", state.path().join("fired"));
    let r = run_raw(cmd, d.to_string().as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("trying once more"), "{}", r.stderr);
    assert!(r.stderr.contains("not submitting again"), "{}", r.stderr);
    let token = r.job().submit_tag.unwrap();
    let token = token.as_str();
    let sq = std::process::Command::new("squeue")
        .args(["-h", "--states=all", "-o", "%i %k"])
        .output()
        .unwrap();
    let matching: Vec<String> = String::from_utf8_lossy(&sq.stdout)
        .lines()
        .filter(|l| l.contains(token))
        .map(str::to_string)
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "exactly one job carries the token: {matching:?}"
    );
    assert!(matching[0].starts_with(r.job_id().as_str()));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn dry_run_prints_the_exact_command_and_submits_nothing() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("dry");
    d["gpus_per_node"] = json!(4);
    d["recipe"] = json!("mpi");
    d["command"] = json!("./app --flag");
    d["node_count"] = json!(2);
    d["required_devices_per_node"] = json!(4);
    let r = submit(&d, &["--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job = r.job();
    assert_eq!(job.dry_run, Some(true));
    assert_schema(&r.doc);
    assert!(job.job_id.is_none());
    let argv = job.argv.clone().unwrap();
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    for want in [
        "srun",
        "--job-name=st-dry",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--mpi=pmix",
        "--time=00:05:00",
        "--account=testacct",
        "--partition=debug",
        "--gpus-per-node=4",
    ] {
        assert!(argv.contains(&want), "{want} not in {argv:?}");
    }
    assert!(!argv.iter().any(|a| a.contains("CUDA_VISIBLE_DEVICES")));
    let token = job.submit_tag.as_deref().unwrap();
    let sq = std::process::Command::new("squeue")
        .args(["-h", "--states=all", "-o", "%k"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&sq.stdout).contains(token));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_build_job_runs_the_build_command_with_the_procedures_flags() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("build");
    d["build_command"] = json!("echo '[ 50%] Building CXX object x.o'; echo '[100%] Linking CXX executable x'; echo Successfully built");
    let r = submit(&d, &["--build"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job = r.job();
    assert_eq!(job.kind.name(), "build");
    let id = job.job_id.clone().unwrap();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let sc = scontrol(&id);
    assert_eq!(
        sc["JobName"],
        format!("{}.build", d["job_name"].as_str().unwrap())
    );
    assert_eq!(sc["TimeLimit"], "02:00:00");
    let log = read(job.stdout_path.as_deref().unwrap());
    assert!(log.contains("[100%] Linking CXX executable x"), "{log}");
    let path = job.stdout_path.as_deref().unwrap();
    assert!(
        path.contains("/slurm-tools-build/log/build_")
            && path.ends_with(&format!("build_{id}.srun.log")),
        "{path}"
    );

    d["build_project"] = json!(false);
    let r = submit(&d, &["--build"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.job().skipped, Some(true));
    assert_schema(&r.doc);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_failed_build_stops_the_run_submission() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("buildfail");
    d["job"] = json!({"kind": "build", "job_id": "1"});
    d["report"] = report_section("BUILD_FAILED", "1", "build");
    d["command"] = json!("echo never");
    let r = submit(&d, &[]);
    assert_eq!(r.code, 1);
    assert_eq!(r.doc, d);
}

/// A master killed hard leaves its socket file: ssh says "Control socket connect(...): Connection
/// refused" and connects on its own. Slurm's refusal must still be read as Slurm's (found in CI:
/// a bad account reported as an unreachable controller, exit 4).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_dead_masters_socket_file_does_not_hide_what_slurm_said() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("stalesock");
    let cp = control_path("stalesock");
    d["control_path"] = json!(cp.clone());
    let expanded = cp.replace("%p", &testbed().info["direct_port"].to_string());
    let _ = std::fs::remove_file(&expanded);
    // A listening socket dropped without unlinking: the file stays, nothing answers.
    drop(std::os::unix::net::UnixListener::bind(&expanded).unwrap());
    assert!(Path::new(&expanded).exists());
    d["command"] = json!("true");
    d["account"] = json!("no-such-account");
    for recipe in ["single", "batch"] {
        d["recipe"] = json!(recipe);
        let r = submit(&d, &[]);
        assert_eq!(r.code, 2, "{recipe}: {}", r.stderr);
        assert_eq!(
            r.error().field.as_deref().unwrap_or_default(),
            "account",
            "{}",
            r.doc["error"]
        );
        assert!(!r.stderr.contains("did not answer"), "{}", r.stderr);
    }
    let _ = std::fs::remove_file(&expanded);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn bad_input_is_refused_naming_the_field() {
    crate::needs_cluster!();
    let (_fx, base) = synced("badsubmit");
    let cases: Vec<(&str, Value, &str, i32)> = vec![
        (
            "recipe",
            json!("parallel"),
            "single, mpi, distributed, launcher, batch",
            2,
        ),
        ("node_count", json!(0), "between 1", 2),
        ("time_limit", json!("1h"), "[D-]HH:MM:SS", 2),
        ("time_limit", json!("00:61:00"), "[D-]HH:MM:SS", 2),
        (
            "script_path",
            json!("/no/such/script.sh"),
            "not a readable file",
            2,
        ),
        (
            "account",
            json!("no-such-account"),
            "Slurm refused the job",
            2,
        ),
        (
            "partition",
            json!("no-such-partition"),
            "Slurm refused the job",
            2,
        ),
    ];
    for (field, value, needle, code) in cases {
        let mut d = base.clone();
        d["command"] = json!("true");
        d[field] = value.clone();
        for recipe in ["single", "batch"] {
            if d.get("recipe").is_none() || field != "recipe" {
                d["recipe"] = json!(recipe);
            }
            if field == "recipe" {
                d["recipe"] = value.clone();
            }
            let r = submit(&d, &[]);
            assert_eq!(r.code, code, "{field}={value} ({recipe}): {}", r.stderr);
            assert_eq!(
                r.error().field.as_deref().unwrap_or_default(),
                field,
                "{field}={value}: {}",
                r.doc["error"]
            );
            assert!(
                r.error_message().contains(needle),
                "{field}: {}",
                r.error_message()
            );
        }
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_file_names_partitions_and_accounts_arrive_literally_or_are_refused() {
    crate::needs_cluster!();
    let (_fx, base) = synced("inject-files");
    let canary = format!("/tmp/slurm-tools-files-canary-{}", std::process::id());
    let _ = std::fs::remove_file(&canary);
    let dir = tempdir();
    let script = dir.path().join(format!(
        "$(touch {}) it's \"x\".sh",
        canary.replace('/', "_")
    ));
    std::fs::write(
        &script,
        "echo script ran; ls -1 \"$(dirname \"$0\")\" | grep -v '^st-' | sort\n",
    )
    .unwrap();
    let extra = dir.path().join("--checkpoint-action=exec=sh x;`id`");
    std::fs::write(&extra, "data").unwrap();
    let mut d = base.clone();
    d["recipe"] = json!("single");
    d["script_path"] = json!(script);
    d["extra_files"] = json!([extra]);
    let r = submit(&d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.job_id();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert!(out.starts_with("script ran\n"), "{out}");
    assert!(out.contains("--checkpoint-action=exec=sh x;`id`"), "{out}");
    assert!(
        out.contains(&format!(
            "$(touch {}) it's \"x\".sh",
            canary.replace('/', "_")
        )),
        "{out}"
    );

    for field in ["partition", "account"] {
        let mut d = base.clone();
        d["recipe"] = json!("batch");
        d["command"] = json!("true");
        d[field] = json!(format!("x; touch {canary}"));
        let r = submit(&d, &[]);
        assert_eq!(r.code, 2, "{field}: {}", r.stderr);
        assert_eq!(r.error().field.as_deref().unwrap_or_default(), field);
    }
    assert!(!std::path::Path::new(&canary).exists(), "a canary fired");
}

/// The job's state as squeue shows it; empty once Slurm no longer lists it.
fn squeue_state(id: &str) -> String {
    let sq = std::process::Command::new("squeue")
        .args(["-h", "-j", id, "-o", "%T"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&sq.stdout).trim().to_string()
}

/// The trees of one clone's jobs (names of the folders in `.trees`).
fn trees_of(fx: &Fixture) -> Vec<String> {
    let dir = Path::new(&fx.remote_repo).join("work_dirs/.trees");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn tree_name(job: &shared::contract::schema::Job) -> String {
    job.tree
        .as_deref()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn finished_jobs_trees_are_removed_by_the_keep_policy_and_a_running_jobs_never() {
    crate::needs_cluster!();
    let (fx, mut d) = synced("trees");
    // One CPU each, no GPU: the short jobs run beside the long one.
    d.as_object_mut().unwrap().remove("gpus_per_node");
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 90");
    let long = submit(&d, &[]);
    assert_eq!(long.code, 0, "{}", long.stderr);
    d["command"] = json!("true");
    let mut finished = Vec::new();
    for _ in 0..2 {
        let r = submit(&d, &[]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let id = r.job_id();
        let id = id.as_str();
        assert_eq!(wait_done(id, 240).0, "COMPLETED");
        // Out of the queue too: a job squeue still lists (COMPLETING, its epilog running) keeps
        // its tree, as it should.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while !squeue_state(id).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "job {id} never left the queue"
            );
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        finished.push(tree_name(&r.job()));
    }
    assert_eq!(
        trees_of(&fx).len(),
        3,
        "one tree per job: {:?}",
        trees_of(&fx)
    );
    let long_id = long.job_id();
    let long_id = long_id.as_str();
    assert!(
        !squeue_state(long_id).is_empty(),
        "the long job is still queued or running"
    );

    // Keep none: the finished jobs' trees go, the running job's and the new one's stay.
    let last = submit(&d, &["--keep-trees", "0"]);
    assert_eq!(last.code, 0, "{}", last.stderr);
    let left = trees_of(&fx);
    let mut want = vec![tree_name(&long.job()), tree_name(&last.job())];
    want.sort();
    assert_eq!(left, want, "finished {finished:?} removed");
    assert!(
        last.stderr.contains("removed 2 finished job tree(s)"),
        "{}",
        last.stderr
    );
    assert!(last.job().trees_disk_kb.is_some_and(|kb| kb > 0));
    // Nothing of the removed trees is left in the clone's git metadata.
    let worktrees = git(Path::new(&fx.remote_repo), &["worktree", "list"]);
    for f in &finished {
        assert!(!worktrees.contains(f.as_str()), "{worktrees}");
    }
    // The long job was not disturbed: it runs until cancelled.
    let _ = std::process::Command::new("scancel").arg(long_id).status();
    assert_eq!(wait_done(long_id, 240).0, "CANCELLED");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_second_build_after_a_one_file_change_rebuilds_only_that_file() {
    crate::needs_cluster!();
    let fx = Fixture::new("warm");
    // A project whose build takes a few seconds: each object costs two seconds to "compile".
    let l = &fx.local;
    for i in 0..4 {
        write(
            &l.join(format!("m{i}.c")),
            &format!("int f{i}(void) {{ return {i}; }}\n"),
        );
    }
    write(
        &l.join("main.c"),
        "#include <stdio.h>\nint f0(void);int f1(void);int f2(void);int f3(void);\nint main(void){printf(\"sum %d\\n\", f0()+f1()+f2()+f3());return 0;}\n",
    );
    write(
        &l.join("Makefile"),
        "OBJ = main.o m0.o m1.o m2.o m3.o\nprog: $(OBJ)\n\tcc -o prog $(OBJ)\n%.o: %.c\n\t@echo compiling $<; sleep 2; cc -c $< -o $@\n",
    );
    write(&l.join(".gitignore"), "*.o\nprog\n");
    git(l, &["add", "."]);
    git(l, &["commit", "-q", "-m", "a project with a slow build"]);
    let mut d = fx.doc();
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["build_command"] = json!("make");
    let build = |d: &Value| {
        let t = run("slurm-sync-tracked", &[], d);
        assert_eq!(t.code, 0, "{}", t.stderr);
        let u = run("slurm-sync-untracked", &[], &t.doc);
        assert_eq!(u.code, 0, "{}", u.stderr);
        let b = submit(&u.doc, &["--build"]);
        assert_eq!(b.code, 0, "{}", b.stderr);
        let w = run("slurm-watch", &["--interval", "1"], &b.doc);
        assert_eq!(w.code, 0, "{}", w.stderr);
        assert_eq!(w.report().status.name(), "PASSED");
        let log = read(b.job().stdout_path.as_deref().unwrap());
        let secs =
            shared::slurm::parse_slurm_duration(w.report().elapsed.as_deref().unwrap()).unwrap();
        (w.doc, log, secs)
    };
    let (_, first_log, first) = build(&d);
    assert_eq!(first_log.matches("compiling").count(), 5, "{first_log}");
    write(&l.join("m2.c"), "int f2(void) { return 20; }\n");
    let (built, second_log, second) = build(&d);
    assert_eq!(
        second_log.matches("compiling").count(),
        1,
        "only the changed file: {second_log}"
    );
    assert!(second_log.contains("compiling m2.c"), "{second_log}");
    assert!(
        first >= 10,
        "the first build compiles everything: {first} s"
    );
    assert!(
        second * 2 < first,
        "second build {second} s, first {first} s"
    );

    // The run job of the same snapshot gets that build's outputs in its own tree.
    let mut r = built;
    r["command"] = json!("./prog");
    r["recipe"] = json!("single");
    let (s, out) = submitted_and_done(&r);
    assert!(s.stderr.contains("outputs of the build"), "{}", s.stderr);
    assert_eq!(out, "sum 24\n");
}

/// Submit, check Slurm accepted it, wait for COMPLETED; the run and the job's output.
fn submitted_and_done(d: &Value) -> (Run, String) {
    let r = submit(d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let id = r.job_id();
    assert_eq!(wait_done(&id, 240).0, "COMPLETED");
    let out = read(r.job().stdout_path.as_deref().unwrap());
    (r, out)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_remote_directory_that_is_not_a_git_clone_still_runs_the_job_and_says_it_has_no_snapshot() {
    crate::needs_cluster!();
    let dir = format!(
        "{}/st-nogit-{}",
        testbed().remote_root(),
        std::process::id()
    );
    let made = std::process::Command::new("runuser")
        .args(["-u", &testbed().s("cluster_user"), "--", "sh", "-c"])
        .arg(format!("mkdir -p '{dir}' && echo plain > '{dir}/f.txt'"))
        .status()
        .unwrap();
    assert!(made.success());
    let mut d = doc_for("direct_host");
    d["remote_repo_path"] = json!(dir);
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["recipe"] = json!("batch");
    d["job_name"] = json!("st-nogit");
    d["command"] = json!("cat f.txt; pwd -P");
    let (r, out) = submitted_and_done(&d);
    assert!(r.stderr.contains("not a git clone"), "{}", r.stderr);
    assert_eq!(
        out,
        format!("plain\n{dir}\n"),
        "the job ran in the directory itself"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Code on a "parallel filesystem" (outside the home directory, which pyxis mounts): the job's
/// tree must be in `mounts` at the same path. Preflight warns, submit refuses naming `mounts`
/// (not mounted, or mounted at another path), and with the mount the job runs and sees its code.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn code_outside_the_home_directory_must_be_mounted_into_the_container() {
    crate::needs_cluster!();
    let fx = crate::fixture::Fixture::new("outside-home");
    let scratch = testbed().s("scratch_dir");
    let root = format!("{scratch}/{}", fx.name);
    let _ = std::fs::remove_dir_all(&root);
    let mut d = fx.doc();
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["time_limit"] = json!("00:05:00");
    d["job_name"] = json!("st-outside-home");
    d["remote_cwd"] = json!(root);
    d["remote_repo_path"] = json!(format!("{root}/repo"));
    d["container_image"] = json!(testbed().s("container_image_file"));
    d["command"] = json!("echo pwd=$(pwd); cat README.md");
    d["recipe"] = json!("single");
    let p = run("slurm-ssh-preflight", &[], &d);
    assert_eq!(p.code, 0, "{}", p.stderr);
    assert!(
        p.stderr
            .contains("outside the home directory and not mounted"),
        "preflight says it: {}",
        p.stderr
    );
    let t = run("slurm-sync-tracked", &[], &p.doc);
    assert_eq!(t.code, 0, "{}", t.stderr);

    let r = submit(&t.doc, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let e = r.error();
    assert_eq!(e.field.as_deref(), Some("mounts"), "{e:?}");
    let msg = e.message.as_str();
    assert!(
        msg.contains(&format!("{root}/")) && msg.contains("outside the home directory"),
        "{msg}"
    );
    assert!(e.hint.contains("to `mounts`"), "{e:?}");

    let mut moved = t.doc.clone();
    moved["mounts"] = json!([format!("{scratch}:/scratch")]);
    let r = submit(&moved, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let e = r.error();
    assert!(
        e.message.contains("at another path inside the container"),
        "{e:?}"
    );

    let mut mounted = t.doc.clone();
    mounted["mounts"] = json!([format!("{scratch}:{scratch}")]);
    let r = submit(&mounted, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job = r.job();
    let id = job.job_id.as_deref().unwrap();
    let (state, _) = wait_done(id, 120);
    let out = read(job.stdout_path.as_deref().unwrap());
    assert_eq!(state, "COMPLETED", "{out}");
    assert!(
        out.contains(&format!("pwd={}", job.tree.as_deref().unwrap())) && out.contains("readme"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The build job runs in the container too (the image's compiler), with the document's mounts.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_build_job_runs_in_the_container_with_the_documents_mounts() {
    crate::needs_cluster!();
    let (_fx, mut d) = synced("build-container");
    let images = Path::new(&testbed().s("container_image_file"))
        .parent()
        .unwrap()
        .display()
        .to_string();
    d["container_image"] = json!(testbed().s("container_image_file"));
    d["mounts"] = json!([format!("{images}:/mnt/images:ro")]);
    d["build_command"] = json!("cat /etc/slurm-tools-image; ls /mnt/images; gcc --version | head -n 1; echo '[100%] Built'");
    let r = submit(&d, &["--build"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let job = r.job();
    assert_eq!(job.kind.name(), "build");
    let id = job.job_id.clone().unwrap();
    let (state, _) = wait_done(&id, 120);
    let log = read(job.stdout_path.as_deref().unwrap());
    assert_eq!(state, "COMPLETED", "{log}");
    for want in [
        "slurm-tools testbed image devbox",
        "devbox.sqsh",
        "gcc (Debian",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sites_qos_memory_cpus_and_own_options_reach_slurm_for_srun_sbatch_and_salloc() {
    crate::needs_cluster!();
    let (_fx, mut base) = synced("site-options");
    base["qos"] = json!("normal");
    base["mem"] = json!("300M");
    base["cpus_per_task"] = json!(2);
    base["slurm_options"] = json!(["--nice=7", "--overcommit"]);
    base["command"] = json!("echo cpus=$SLURM_CPUS_PER_TASK");
    let check = |job: &str, what: &str| {
        let sc = scontrol(job);
        assert_eq!(
            sc.get("QOS").map(String::as_str),
            Some("normal"),
            "{what}: {sc:?}"
        );
        assert_eq!(
            sc.get("Nice").map(String::as_str),
            Some("7"),
            "{what}: {sc:?}"
        );
        assert_eq!(
            sc.get("CPUs/Task").map(String::as_str),
            Some("2"),
            "{what}: {sc:?}"
        );
        assert_eq!(
            sc.get("MinMemoryNode").map(String::as_str),
            Some("300M"),
            "{what}: {sc:?}"
        );
    };
    for recipe in ["single", "batch"] {
        let mut d = base.clone();
        d["recipe"] = json!(recipe);
        let r = submit(&d, &[]);
        assert_eq!(r.code, 0, "{recipe}: {}", r.stderr);
        let job = r.job_id();
        check(&job, recipe);
        let w = run("slurm-watch", &["--interval", "1"], &r.doc);
        assert_eq!(w.code, 0, "{recipe}: {}", w.stderr);
    }
    // slurm-alloc: the allocation itself carries them.
    let mut a = base.clone();
    a["job_name"] = json!(format!("st-site-alloc-{}", std::process::id()));
    let up = run("slurm-alloc", &["up"], &a);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let id = up.allocation().job_id.unwrap();
    check(&id, "salloc");
    let down = run("slurm-alloc", &["down"], &up.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    // An option one of the commands does not take (--requeue is sbatch's only): Slurm's refusal
    // names the option and the field.
    let mut d = base.clone();
    d["recipe"] = json!("single");
    d["slurm_options"] = json!(["--requeue"]);
    let r = submit(&d, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.error().field.as_deref().unwrap_or_default(),
        "slurm_options"
    );
    assert!(
        r.error_message().contains("--requeue"),
        "{}",
        r.error_message()
    );
    // A malformed option, or one the tools set: exit 2 naming the field, nothing submitted.
    for bad in [
        json!(["-q normal"]),
        json!(["--output=/tmp/x"]),
        json!(["--nice=1\n--x"]),
    ] {
        let mut d = base.clone();
        d["slurm_options"] = bad.clone();
        let r = submit(&d, &[]);
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert_eq!(
            r.error().field.as_deref().unwrap_or_default(),
            "slurm_options",
            "{bad}"
        );
        assert!(r.doc.get("job").is_none_or(|j| j.get("job_id").is_none()));
    }
}

/// On pyxis a registry image is imported once per content digest, on the login node, into the
/// image cache: two submissions at once make one import (the other waits for it), their jobs
/// start from the file (no node imports), the report says which; the same tag moved to new
/// content is imported again, then hit; `image_cache_keep: 0` leaves the import to pyxis in the
/// job; an image the registry does not have is refused before anything is submitted.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn on_pyxis_a_registry_image_is_imported_once_per_digest_and_jobs_start_from_the_file() {
    crate::needs_cluster!();
    use crate::modern::apptainer::{digest_of, fresh_salt, push_salted_image};
    let (_fx, mut d) = synced("pyxis-cache");
    let salt = fresh_salt();
    let tag = format!("pyxis-{salt}");
    let reference = push_salted_image(&tag, &format!("{salt}-a"));
    let first = digest_of(&reference);
    d["container_image"] = json!(reference);
    d["recipe"] = json!("single");
    d["command"] = json!("echo \"salt=$SLURM_TOOLS_SALT\"");
    let watch = |s: &Value| run("slurm-watch", &["--interval", "1"], s);
    // Two submissions at once.
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| submit(&d, &[]));
        let b = sc.spawn(|| submit(&d, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut caches = Vec::new();
    let mut file = String::new();
    for s in [&a, &b] {
        assert_eq!(s.code, 0, "{}", s.stderr);
        let job = s.job();
        let used = job.container_use.clone().unwrap();
        assert_eq!(used.digest.as_deref(), Some(first.as_str()), "{job:?}");
        file = format!(
            "{}/{}.sqsh",
            job.image_cache.as_deref().unwrap(),
            first.trim_start_matches("sha256:")
        );
        assert_eq!(used.file.as_deref(), Some(file.as_str()), "{job:?}");
        assert_eq!(
            job.container_image.as_deref(),
            Some(file.as_str()),
            "the job runs the file: {job:?}"
        );
        caches.push(used.cache.clone());
    }
    caches.sort();
    assert!(
        caches == ["pulled", "waited"] || caches == ["hit", "pulled"],
        "one import for both: {caches:?}\n{}\n{}",
        a.stderr,
        b.stderr
    );
    let importer = if a.job().container_use.unwrap().cache == "pulled" {
        &a
    } else {
        &b
    };
    assert!(
        importer
            .stderr
            .contains(&format!("imported {reference} into {file} in ")),
        "{}",
        importer.stderr
    );
    for s in [&a, &b] {
        let w = watch(&s.doc);
        assert_eq!(w.code, 0, "{}", w.stderr);
        let r = w.report();
        assert_eq!(r.status.name(), "PASSED", "{r:?}");
        assert_eq!(r.excerpt, [format!("salt={salt}-a")], "{r:?}");
        assert_eq!(r.container, s.job().container_use, "{r:?}");
        let err =
            std::fs::read_to_string(s.job().stderr_path.as_deref().unwrap()).unwrap_or_default();
        assert!(!err.contains("importing docker image"), "{err}");
    }
    // slurm-runs says which cached image each job ran from.
    for s in [&a, &b] {
        let run = listed_run(None, s.job_id().as_str());
        assert_eq!(run["image_digest"], first, "{run}");
        assert_eq!(
            run["image"],
            s.job().container_use.unwrap().image.as_str(),
            "{run}"
        );
    }
    let text = run_raw(
        tool("slurm-report"),
        watch(&importer.doc).doc.to_string().as_bytes(),
    )
    .stderr;
    assert!(
        text.contains(&format!(
            "ran in {reference} (pyxis/enroot; imported on the login node into the image cache in "
        )) && text.contains(&first[..19]),
        "{text}"
    );
    let cache = Path::new(&file).parent().unwrap().to_path_buf();
    let ours: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(first.trim_start_matches("sha256:")))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let h = first.trim_start_matches("sha256:");
    assert_eq!(
        ours,
        [
            format!("{h}.sqsh"),
            format!("{h}.sqsh.ref"),
            format!("{h}.sqsh.users")
        ],
        "no partial import or lock left"
    );

    // The tag moves: imported again, then a hit.
    push_salted_image(&tag, &format!("{salt}-b"));
    let second = digest_of(&reference);
    assert_ne!(first, second);
    let c = submit(&d, &[]);
    assert_eq!(c.code, 0, "{}", c.stderr);
    let used = c.job().container_use.unwrap();
    assert_eq!(used.cache, "pulled", "{used:?}");
    assert_eq!(used.digest, Some(second.clone()));
    let wc = watch(&c.doc);
    let r = wc.report();
    assert_eq!(r.excerpt, [format!("salt={salt}-b")], "{r:?}");
    let again = submit(&d, &[]);
    assert_eq!(
        again.job().container_use.unwrap().cache,
        "hit",
        "{}",
        again.stderr
    );
    assert!(
        again.stderr.contains("the image cache has"),
        "{}",
        again.stderr
    );
    watch(&again.doc);

    // No cache: pyxis imports the image in the job, as written.
    let mut plain = d.clone();
    plain["image_cache_keep"] = json!(0);
    let p = submit(&plain, &[]);
    assert_eq!(p.code, 0, "{}", p.stderr);
    let job = p.job();
    assert_eq!(
        job.container_image,
        Some(shared::slurm::enroot_image(&reference))
    );
    assert!(job.container_use.is_none(), "{job:?}");
    let wp = watch(&p.doc);
    assert_eq!(wp.report().status.name(), "PASSED", "{}", wp.doc["report"]);
    let err = read(p.job().stderr_path.as_deref().unwrap());
    assert!(err.contains("pyxis: importing docker image"), "{err}");

    // An image the registry does not have: refused, nothing submitted.
    let mut missing = d.clone();
    missing["container_image"] = json!(format!(
        "{}/testbed/devbox:no-such-{salt}",
        testbed().s("registry")
    ));
    let m = submit(&missing, &[]);
    assert_ne!(m.code, 0, "{}", m.stderr);
    assert!(
        m.stderr.contains("container_image")
            && m.stderr.contains("answered 404")
            && m.stderr.contains("nothing was submitted"),
        "{}",
        m.stderr
    );
    assert!(m.doc.get("job").is_none());

    for h in [&first, &second] {
        let h = h.trim_start_matches("sha256:");
        for f in [format!("{h}.sqsh"), format!("{h}.sqsh.ref")] {
            let _ = std::fs::remove_file(cache.join(f));
        }
    }
}

/// `slurm-submit --sync` (issue 40): both syncs and the submission in one ssh execution, the
/// same sections as the three tools write, the job on exactly the synced code (a local commit,
/// an uncommitted edit, an untracked file), the person's repository untouched; a bad field
/// refused before anything is pushed; a rerun on the same input after an edit submits anew with
/// the new code; job files too large for the execution's stdin go the separate way, said so.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn submit_with_sync_syncs_and_submits_in_one_ssh_execution() {
    crate::needs_cluster!();
    let fx = Fixture::new("subsync");
    let mut d = fx.doc();
    d["account"] = json!(testbed().s("account"));
    d["partition"] = json!(testbed().s("partition"));
    d["time_limit"] = json!("00:05:00");
    d["job_name"] = json!("st-subsync");
    d["recipe"] = json!("batch");
    let work = format!("{}/work_dirs/subsync", fx.remote_repo);
    d["remote_work_dir"] = json!(work);
    // A job file, sent on the execution's stdin.
    let files = tempdir();
    let small = files.path().join("small.txt");
    std::fs::write(&small, "a job file\n").unwrap();
    d["extra_files"] = json!([small]);
    d["command"] = json!(format!(
        "cat src/a.py committed.txt notes.txt {work}/small.txt; git rev-parse HEAD"
    ));
    write(&fx.local.join("committed.txt"), "a local commit\n");
    git(&fx.local, &["add", "committed.txt"]);
    git(&fx.local, &["commit", "-q", "-m", "local only"]);
    write(&fx.local.join("src/a.py"), "print('edited')\n");
    write(&fx.local.join("notes.txt"), "untracked notes\n");
    let before = local_state(&fx.local);
    let traced = |args: &[&str], doc: &Value| {
        let dir = tempdir();
        let file = dir.path().join("trace.jsonl");
        let mut cmd = tool("slurm-submit");
        cmd.args(args).env("SLURM_TOOLS_TRACE", &file);
        let r = run_raw(cmd, doc.to_string().as_bytes());
        (r, trace_lines(&file))
    };
    let pushes = |t: &[Value]| {
        t.iter()
            .filter(|l| l["argv"].to_string().contains("\"push\""))
            .count()
    };

    // A bad field: refused before anything is pushed; the cluster has no clone yet.
    let mut bad = d.clone();
    bad["recipe"] = json!("bogus");
    let (r, t) = traced(&["--sync"], &bad);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("recipe"), "{}", r.stderr);
    assert_eq!(pushes(&t), 0, "nothing pushed: {t:?}");
    assert!(!Path::new(&fx.remote_repo).exists());
    // Flags that cannot go with it.
    for other in ["--dry-run", "--only-failed"] {
        let out = pipe(
            tool("slurm-submit").args(["--sync", other]),
            d.to_string().as_bytes(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(other), "{stderr}");
    }
    // --lock-wait is --sync's: alone it is refused, naming --sync.
    let out = pipe(
        tool("slurm-submit").args(["--lock-wait", "5"]),
        d.to_string().as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--sync"), "{stderr}");

    // Synced and submitted in one execution.
    let (r, t) = traced(&["--sync"], &d);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(connecting_ssh(&t).len(), 1, "one ssh execution: {t:?}");
    assert!(
        r.stderr
            .contains("synced in the command's own ssh execution"),
        "{}",
        r.stderr
    );
    assert_schema(&r.doc);
    let st = r.synced();
    let commit = st.commit.clone();
    assert_eq!(r.job().tree_commit, Some(st.commit.clone()), "{}", r.doc);
    assert_eq!(st.temp_ref_deleted, Some(Some(true)), "{}", r.doc);
    assert_eq!(r.untracked().files, 1, "{}", r.doc);
    let w = run("slurm-watch", &["--interval", "1"], &r.doc);
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(
        out,
        format!("print('edited')\na local commit\nuntracked notes\na job file\n{commit}\n")
    );
    assert_eq!(local_state(&fx.local), before, "the repository untouched");
    assert!(
        !fx.origin_refs().contains("slurm-tools"),
        "no temporary branch left on origin: {}",
        fx.origin_refs()
    );

    // The same input after an edit: a new job with the new code (not the last one found again).
    write(&fx.local.join("src/a.py"), "print('edited again')\n");
    let again = submit(&d, &["--sync"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_ne!(again.job_id(), r.job_id());
    assert_ne!(again.synced().commit, commit);
    let w = run("slurm-watch", &["--interval", "1"], &again.doc);
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let out = read(again.job().stdout_path.as_deref().unwrap());
    assert!(out.starts_with("print('edited again')\n"), "{out}");

    // Job files over what the execution's stdin takes: synced first on their own, said so.
    let big = tempdir();
    let data = big.path().join("big.bin");
    std::fs::write(&data, vec![7u8; 300 << 10]).unwrap();
    let mut d2 = d.clone();
    d2["extra_files"] = json!([data]);
    d2["command"] = json!(format!("wc -c < {work}/big.bin; cat src/a.py"));
    write(&fx.local.join("src/a.py"), "print('third')\n");
    let (r, t) = traced(&["--sync"], &d2);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("over 256 KiB"), "{}", r.stderr);
    assert!(connecting_ssh(&t).len() > 1, "{t:?}");
    let w = run("slurm-watch", &["--interval", "1"], &r.doc);
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let out = read(r.job().stdout_path.as_deref().unwrap());
    assert_eq!(out, format!("{}\nprint('third')\n", 300 << 10));
}
