//! Sweeps on the real cluster (docs/contract.md, "sweep"): one job array, a verdict per task,
//! one squeue per poll however many tasks, parameters that arrive whole, `after`,
//! --only-failed, MaxArraySize.

use crate::fixture::synced;
use crate::harness::*;
use serde_json::{json, Value};
use shared::contract::schema::{Report, Status};

fn statuses(r: &Report) -> Vec<(u32, Status)> {
    r.tasks
        .as_ref()
        .expect("a sweep's report has tasks")
        .iter()
        .map(|t| (t.index, t.status))
        .collect()
}

/// A 6-task grid: one task fails, one prints the hang pattern, one falls silent
/// (`stall_seconds`), the others pass; each has its own verdict, the array's is FAILED, and
/// every poll asked squeue once for all six. Then --only-failed runs just those three again with
/// the same snapshot (they pass the second time: a marker file), and the next watch reports all
/// six, the three earlier ones from the first array.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_six_task_grid_has_a_verdict_per_task_and_one_squeue_per_poll() {
    crate::needs_cluster!();
    let (_fx, base) = synced("sweep-grid");
    let mark = format!("sweep-grid-{}", std::process::id());
    let mut d = base.clone();
    d["recipe"] = json!("single");
    d["sweep"] = json!({"grid": {"case": ["a", "b", "c"], "seed": [1, 2]}, "max_parallel": 3});
    d["stall_seconds"] = json!(10);
    // b-2 fails, c-1 hangs and c-2 falls silent, the first time only (the marker in the home
    // directory).
    d["command"] = json!(format!(
        "m=$HOME/{mark}-$SWEEP_INDEX; case {{case}}-{{seed}} in b-2) [ -e $m ] || {{ touch $m; echo boom >&2; exit 3; }} ;; c-1) [ -e $m ] || {{ touch $m; echo 'Hang detected in step'; sleep 300; }} ;; c-2) [ -e $m ] || {{ touch $m; sleep 300; }} ;; esac; echo \"ok {{case}} {{seed}} $SWEEP_INDEX/$SWEEP_COUNT $SWEEP_PARAMS\""
    ));
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let job = job_of(&s.doc);
    assert_eq!(job.array.as_deref(), Some("0-5%3"));
    assert_eq!(job.sweep_tasks.as_ref().map(Vec::len), Some(6));
    assert!(
        job.stdout_path
            .as_deref()
            .unwrap()
            .ends_with(&format!("{}_%a.out", job.job_id.as_deref().unwrap())),
        "{job:?}"
    );
    // slurm-runs shows the array as one run, its tasks counted per state.
    let listed = tool("slurm-runs")
        .args(["--json", "--name", "st-sweep-grid"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let line: Value = listed
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["job_id"] == job.job_id.as_deref().unwrap())
        .unwrap_or_else(|| panic!("the sweep in slurm-runs:\n{listed}"));
    let counted: u32 = line["tasks"]
        .as_str()
        .unwrap_or_else(|| panic!("{line}"))
        .split(", ")
        .map(|c| c.split(' ').next().unwrap().parse::<u32>().unwrap())
        .sum();
    assert!((1..=6).contains(&counted), "{line}");
    let trace = tempdir();
    let file = trace.path().join("t.jsonl");
    let mut cmd = tool("slurm-watch");
    cmd.args(["--interval", "2"])
        .env("SLURM_TOOLS_TRACE", &file);
    let w = run_raw(cmd, s.doc.to_string().as_bytes());
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_schema(&w.doc);
    let r = w.report();
    use Status::*;
    assert_eq!(
        statuses(&r),
        [
            (0, Passed),
            (1, Passed),
            (2, Passed),
            (3, Failed),
            (4, HangDetected),
            (5, HangDetected)
        ]
    );
    assert_eq!(r.status, Failed);
    assert!(
        r.summary
            .starts_with("6 tasks: 3 PASSED, 1 FAILED (task 3), 2 HANG_DETECTED (tasks 4, 5)"),
        "{}",
        r.summary
    );
    let tasks = r.tasks.as_ref().unwrap();
    assert_eq!(tasks[3].exit_code.as_deref(), Some("3:0"));
    // The task's stderr, then srun's own line about the step (it runs inside the array's batch
    // script, whose stderr is the task's).
    assert!(
        tasks[3].excerpt_err.iter().any(|l| l == "boom"),
        "{:#?}",
        tasks[3]
    );
    assert_eq!(tasks[4].hang_line.as_deref(), Some("Hang detected in step"));
    assert_eq!(tasks[4].params["case"], "c");
    assert_eq!(tasks[4].params["seed"], "1");
    assert_eq!(tasks[5].hang_line, None);
    assert!(
        tasks[5].summary.starts_with("stalled: no output for 10 s"),
        "{}",
        tasks[5].summary
    );
    assert_eq!(
        tasks[2].excerpt,
        [r#"ok b 1 2/6 {"case":"b","seed":"1"}"#],
        "each task gets its own parameters"
    );
    // One squeue for the whole array per poll, at most one sacct.
    let calls: Vec<Value> = trace_lines(&file)
        .into_iter()
        .filter(|l| l["event"] == "slurm-calls")
        .collect();
    assert_eq!(calls.len() as u64, r.polls, "a slurm-calls record per poll");
    assert!(r.polls >= 3, "{}", r.polls);
    for c in &calls {
        assert_eq!(c["squeue"], 1, "{c}");
        assert!(c["sacct"].as_u64().unwrap() <= 1, "{c}");
        assert_eq!(c["jobs"], 6, "{c}");
    }
    // The table.
    let table = pipe(
        tool("slurm-report").arg("--table"),
        w.doc.to_string().as_bytes(),
    );
    assert_eq!(table.status.code(), Some(1), "a sweep that did not pass");
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    for want in [
        "    TASK VERDICT       SLURM     EXIT ELAPSED  NODES PARAMETERS",
        "HANG_DETECTED CANCELLED",
        "case=c seed=1",
        "FAILED        FAILED    3:0",
        "case=b seed=2",
    ] {
        assert!(table.contains(want), "{want}: {table}");
    }

    // slurm-runs --tasks: a line per task under the sweep, from its watched document.
    let listed = tool("slurm-runs")
        .args(["--tasks", "--no-refresh", "--name", "st-sweep-grid"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for want in [
        "task 4",
        "case=c seed=1",
        "HANG_DETECTED",
        "task 3",
        "FAILED",
    ] {
        assert!(listed.contains(want), "{want}: {listed}");
    }
    // slurm-fetch: every task's logs, and a folder per task with its logs and parameters.
    let to = tempdir();
    let f = pipe(
        tool("slurm-fetch").arg("--to").arg(to.path()),
        w.doc.to_string().as_bytes(),
    );
    assert!(f.status.success(), "{}", String::from_utf8_lossy(&f.stderr));
    let fetched: Value = serde_json::from_slice(&f.stdout).unwrap();
    let fetch: shared::contract::schema::Fetch = section_of(&fetched, "fetch");
    assert_eq!(fetch.task_dirs.as_ref().map(Vec::len), Some(6), "{fetch:?}");
    let id = job.job_id.clone().unwrap();
    let three = to.path().join("tasks/3");
    let err = std::fs::read_to_string(three.join(format!("st-sweep-grid-{id}_3.err"))).unwrap();
    assert!(err.contains("boom"), "{err}");
    let params: Value =
        serde_json::from_str(&std::fs::read_to_string(three.join("params.json")).unwrap()).unwrap();
    assert_eq!(params, json!({"case": "b", "seed": "2"}));
    let out2 = std::fs::read_to_string(to.path().join(format!("tasks/2/st-sweep-grid-{id}_2.out")))
        .unwrap();
    assert!(out2.starts_with("ok b 1 2/6"), "{out2}");

    // --only-failed: tasks 3, 4 and 5 again, the same snapshot.
    let saved = tempdir();
    let report_file = saved.path().join("report.json");
    std::fs::write(&report_file, w.doc.to_string()).unwrap();
    let again = run_raw(
        {
            let mut c = tool("slurm-submit");
            c.arg("--only-failed").arg(&report_file);
            c
        },
        b"",
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    let job2 = job_of(&again.doc);
    assert_eq!(job2.array.as_deref(), Some("3,4,5%3"));
    assert_eq!(job2.tree_commit, job.tree_commit, "the same snapshot");
    assert_ne!(job2.job_id, job.job_id);
    let w2 = run("slurm-watch", &["--interval", "2"], &again.doc);
    assert_eq!(w2.code, 0, "{}", w2.stderr);
    let r2 = report_of(&w2.doc);
    assert_eq!(
        statuses(&r2),
        (0..6).map(|i| (i, Passed)).collect::<Vec<_>>()
    );
    let t2 = r2.tasks.unwrap();
    let first = job.job_id.clone().unwrap();
    for t in &t2 {
        let earlier = ![3, 4, 5].contains(&t.index);
        assert_eq!(
            t.from_job.as_deref() == Some(first.as_str()),
            earlier,
            "{t:?}"
        );
    }
    assert!(w2.doc.get("sweep_done").is_none(), "{}", w2.doc);
}

/// Values with spaces, quotes, `$`, backquotes and a newline arrive whole, in the batch recipe;
/// a job with `after` waits for the sweep (Slurm holds it) and sees what every task wrote.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn sweep_values_arrive_whole_and_after_waits_for_the_sweep() {
    crate::needs_cluster!();
    let (_fx, base) = synced("sweep-values");
    let dir = format!("sweep-values-{}", std::process::id());
    let tricky = "a b 'c' \"d\" $HOME `id` \\ ; e\nline2";
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["sweep"] = json!({"sets": [{"v": tricky, "n": 1}, {"v": "plain", "n": 2}]});
    d["command"] = json!(format!(
        "mkdir -p $HOME/{dir}; printf '%s' {{v}} > $HOME/{dir}/$SWEEP_INDEX; sleep 3; printf 'got<%s>\\n' {{v}}"
    ));
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let sweep_id = job_of(&s.doc).job_id.unwrap();
    let saved = tempdir();
    let sweep_file = saved.path().join("sweep.json");
    std::fs::write(&sweep_file, s.doc.to_string()).unwrap();

    let mut agg = base.clone();
    agg["recipe"] = json!("single");
    agg["job_name"] = json!("st-sweep-aggregate");
    agg["after"] = json!(sweep_file.to_str().unwrap());
    agg["command"] = json!(format!("cat $HOME/{dir}/0; echo; cat $HOME/{dir}/1; echo"));
    let a = run("slurm-submit", &[], &agg);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(
        job_of(&a.doc).dependency,
        Some(format!("afterok:{sweep_id}"))
    );

    let w = run("slurm-watch", &["--interval", "2"], &s.doc);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let r = w.report();
    let tasks = r.tasks.unwrap();
    assert_eq!(
        tasks[0].excerpt,
        ["got<a b 'c' \"d\" $HOME `id` \\ ; e", "line2>"]
    );
    assert_eq!(tasks[1].excerpt, ["got<plain>"]);
    assert_eq!(tasks[0].params["n"], "1");
    let wa = run("slurm-watch", &["--interval", "2"], &a.doc);
    assert_eq!(wa.code, 0, "{}", wa.stderr);
    assert_eq!(
        report_of(&wa.doc).excerpt,
        [tricky.lines().next().unwrap(), "line2", "plain"],
        "the aggregate ran after both tasks wrote"
    );
}

/// A sweep bigger than the cluster's MaxArraySize is refused before anything is submitted,
/// naming the limit; bad sweeps name the field.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sweep_over_max_array_size_is_refused_naming_the_limit() {
    crate::needs_cluster!();
    let (_fx, base) = synced("sweep-big");
    let max: u64 = std::process::Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("MaxArraySize")
                .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .expect("MaxArraySize in scontrol show config");
    let mut d = base.clone();
    d["sweep"] = json!({"grid": {"i": (0..=max).collect::<Vec<u64>>()}});
    d["command"] = json!("true");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 2, "{}", s.stderr);
    assert_eq!(
        s.error().field.as_deref().unwrap_or_default(),
        "sweep",
        "{}",
        s.doc
    );
    let msg = s.error_message();
    assert!(
        msg.contains(&format!("MaxArraySize is {max}"))
            && msg.contains(&format!("makes {} tasks", max + 1)),
        "{msg}"
    );
    let q = std::process::Command::new("squeue")
        .args(["-h", "-n", "st-sweep-big", "-o", "%i"])
        .output()
        .unwrap();
    assert!(q.stdout.is_empty(), "nothing was submitted");
    d["sweep"] = json!({"grid": {"lr": []}});
    let bad = run("slurm-submit", &[], &d);
    assert_eq!(bad.code, 2);
    assert!(
        bad.error_message().contains("grid.lr"),
        "{}",
        bad.error_message()
    );
}

/// A sweep cancelled from outside while most of its tasks wait: every task, the waiting ones
/// too (Slurm keeps them as one record), ends CANCELLED at once; the watch does not wait for
/// tasks that will never run.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sweep_cancelled_while_its_tasks_wait_ends_every_task_cancelled() {
    crate::needs_cluster!();
    let (_fx, base) = synced("sweep-cancel");
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["sweep"] = json!({"grid": {"i": [0, 1, 2, 3]}, "max_parallel": 1});
    d["command"] = json!("echo started {i}; sleep 120");
    let s = run("slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = job_of(&s.doc).job_id.unwrap();
    let input = s.doc.to_string();
    let watcher = std::thread::spawn(move || {
        let mut cmd = tool("slurm-watch");
        cmd.args(["--interval", "1"]);
        run_raw(cmd, input.as_bytes())
    });
    wait_running(&format!("task {id}_0"), || {
        let out = std::process::Command::new("squeue")
            .args(["-h", "-j", &format!("{id}_0"), "-o", "%T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    });
    let cancelled_at = std::time::Instant::now();
    assert!(std::process::Command::new("scancel")
        .arg(&id)
        .status()
        .unwrap()
        .success());
    let w = watcher.join().unwrap();
    assert!(
        cancelled_at.elapsed() < std::time::Duration::from_secs(60),
        "the watch ended {:?} after the cancel",
        cancelled_at.elapsed()
    );
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(r.status, Status::Cancelled);
    assert_eq!(
        statuses(&r),
        (0..4).map(|i| (i, Status::Cancelled)).collect::<Vec<_>>(),
        "{}",
        w.stderr
    );
    assert!(
        r.summary.starts_with("4 tasks: 4 CANCELLED"),
        "{}",
        r.summary
    );
}
