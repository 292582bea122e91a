//! The run ledger, slurm-runs, the event stream, slurm-notify and slurm-fetch, on the real
//! cluster (issue 23). Each test has its own state directory, so its ledger holds its runs only.

use crate::fixture::synced;
use crate::harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tool with its own state directory (its own ledger).
fn tool_in(state: &Path, name: &str) -> Command {
    let mut c = tool(name);
    c.env("SLURM_TOOLS_STATE_DIR", state);
    c
}

fn run_in(state: &Path, name: &str, args: &[&str], input: &Value) -> Run {
    ToolRun::new(name)
        .env("SLURM_TOOLS_STATE_DIR", state)
        .args(args)
        .doc(input)
        .run()
}

/// slurm-runs' output (stdout, stderr, exit code).
fn runs(state: &Path, args: &[&str], trace: Option<&Path>) -> (String, String, i32) {
    let mut c = tool_in(state, "slurm-runs");
    c.args(args);
    if let Some(t) = trace {
        c.env("SLURM_TOOLS_TRACE", t);
    }
    let out = c.stdin(Stdio::null()).output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code().unwrap_or(-1),
    )
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The ssh executions and the Slurm calls of each cluster in a trace.
fn calls(trace: &Path) -> (usize, Vec<Value>) {
    let t = trace_lines(trace);
    let ssh = connecting_ssh(&t).len();
    let slurm = t
        .into_iter()
        .filter(|e| e["event"] == "slurm-calls")
        .collect();
    (ssh, slurm)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn twenty_runs_on_two_clusters_are_listed_with_one_squeue_and_at_most_one_sacct_per_cluster() {
    crate::needs_cluster!();
    let _mfa = mfa_lock();
    let state = tempdir();
    let (_fx, base) = synced("runs-twenty");
    let cp = control_path("runs20");
    mfa_login(&cp);
    let mut ids = Vec::new();
    for i in 0..20 {
        let mut d = base.clone();
        d["recipe"] = json!("batch");
        // The last ones outlive the listings, so the watch below has runs to follow.
        let secs = if i >= 16 { 20 } else { 1 + i % 3 };
        d["command"] = json!(format!("sleep {secs}"));
        d["job_name"] = json!(format!("twenty-{i:02}"));
        if i % 2 == 1 {
            // The second catalog entry of the test bed: the MFA login host, through its master.
            d["slurm_cluster"] = json!("local-mfa");
            d["ssh_host"] = json!(testbed().s("mfa_host"));
            d["control_path"] = json!(cp.clone());
            d["mfa_style"] = json!(true);
        } else {
            d["slurm_cluster"] = json!("local");
        }
        let s = run_in(state.path(), "slurm-submit", &[], &d);
        assert_eq!(s.code, 0, "{}", s.stderr);
        ids.push(s.job_id());
    }
    let ledger = state.path().join("runs.jsonl");
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap().lines().count(),
        20,
        "one ledger line per submission"
    );

    // One listing: both clusters asked once each, one squeue each, at most one sacct each.
    let trace = state.path().join("trace.jsonl");
    let (out, err, code) = runs(state.path(), &["--json"], Some(&trace));
    assert_eq!(code, 0, "{err}");
    let listed = json_lines(&out);
    assert_eq!(listed.len(), 20, "{out}");
    for r in &listed {
        assert!(ids.contains(&r["job_id"].as_str().unwrap().to_string()));
        assert!(r["document"]
            .as_str()
            .is_some_and(|p| Path::new(p).exists()));
        assert!(r["submitted_at"].as_u64().is_some());
        assert_eq!(r["recipe"], "batch");
        assert!(r["snapshot"].as_str().is_some_and(|s| s.len() == 40), "{r}");
    }
    let clusters: std::collections::BTreeSet<_> =
        listed.iter().map(|r| r["cluster"].to_string()).collect();
    assert_eq!(clusters.len(), 2);
    let (ssh, slurm) = calls(&trace);
    assert_eq!(ssh, 2, "one ssh execution per cluster");
    assert_eq!(slurm.len(), 2, "{slurm:?}");
    for c in &slurm {
        assert_eq!(c["squeue"], 1, "{c}");
        assert!(c["sacct"].as_u64().unwrap() <= 1, "{c}");
        assert_eq!(c["jobs"], 10, "{c}");
    }

    // Any run's saved document resumes with slurm-watch.
    let mut c = tool_in(state.path(), "slurm-watch");
    c.args(["--interval", "1"])
        .arg(listed[0]["document"].as_str().unwrap());
    let w = run_raw(c, b"");
    assert_eq!(w.code, 0, "{}", w.stderr);
    assert_eq!(json!(w.report().job_id), listed[0]["job_id"]);

    // Filters.
    let (out, _, _) = runs(
        state.path(),
        &["--json", "--no-refresh", "--cluster", "local-mfa"],
        None,
    );
    assert_eq!(json_lines(&out).len(), 10);
    let (out, _, _) = runs(
        state.path(),
        &["--json", "--no-refresh", "--name", "twenty-0?"],
        None,
    );
    assert_eq!(json_lines(&out).len(), 10);
    let (out, _, _) = runs(
        state.path(),
        &["--json", "--no-refresh", "--since", "1h"],
        None,
    );
    assert_eq!(json_lines(&out).len(), 20);

    // Follow them all to their end: the same cost per poll. (Runs the listing saw end are in
    // the ledger already: they are not followed again.)
    let (out, _, _) = runs(
        state.path(),
        &["--json", "--no-refresh", "--state", "active"],
        None,
    );
    let open = json_lines(&out).len();
    assert!(open >= 4, "the long runs are still open: {out}");
    std::fs::remove_file(&trace).unwrap();
    let events = state.path().join("events.jsonl");
    let (out, err, code) = runs(
        state.path(),
        &[
            "--watch",
            "--interval",
            "1",
            "--events",
            events.to_str().unwrap(),
        ],
        Some(&trace),
    );
    mfa_logout(&cp);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("CLUSTER") && out.contains("COMPLETED"),
        "{out}"
    );
    let (ssh, slurm) = calls(&trace);
    let polls = slurm.len();
    assert!(polls >= 2, "{slurm:?}");
    assert!(
        ssh <= polls,
        "one ssh execution per cluster and poll: {ssh} for {polls}"
    );
    for c in &slurm {
        assert_eq!(c["squeue"], 1, "{c}");
        assert!(c["sacct"].as_u64().unwrap() <= 1, "{c}");
    }
    let ended: Vec<Value> = json_lines(&std::fs::read_to_string(&events).unwrap())
        .into_iter()
        .filter(|e| e["event"] == "ended")
        .collect();
    assert_eq!(ended.len(), open, "one ended event per run followed");
    assert!(ended.iter().all(|e| e["state"] == "COMPLETED"));

    // Now the ledger knows they ended: listing again asks nobody.
    std::fs::remove_file(&trace).unwrap();
    let (out, _, code) = runs(state.path(), &["--state", "completed"], Some(&trace));
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 21, "a header and 20 runs:\n{out}");
    assert_eq!(calls(&trace).0, 0, "no cluster asked about finished runs");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_ledger_survives_a_tool_killed_while_it_writes() {
    crate::needs_cluster!();
    let state = tempdir();
    let (_fx, base) = synced("runs-kill");
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 1");
    let first = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let mut killed_jobs = Vec::new();
    for step in ["ledger:mid-line", "ledger:locked"] {
        let mut d = d.clone();
        d["job_name"] = json!(format!("killed-{}", step.replace(':', "-")));
        let mut c = tool_in(state.path(), "slurm-submit");
        c.env("SLURM_TOOLS_PAUSE_AT", step)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(d.to_string().as_bytes())
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        let mut line = String::new();
        while err.read_line(&mut line).unwrap() > 0 {
            said.push_str(&line);
            if line.contains("paused at") {
                break;
            }
            line.clear();
        }
        assert!(said.contains(&format!("paused at {step}")), "{said}");
        child.kill().unwrap();
        child.wait().unwrap();
        killed_jobs.push(d["job_name"].as_str().unwrap().to_string());
    }
    // The lock died with its holder; the next writer writes on a fresh line.
    d["job_name"] = json!("after-the-kills");
    let last = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(last.code, 0, "{}", last.stderr);
    let (out, err, code) = runs(state.path(), &["--json", "--no-refresh"], None);
    assert_eq!(code, 0, "{err}");
    let listed = json_lines(&out);
    let ids: Vec<&str> = listed
        .iter()
        .map(|r| r["job_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&first.job_id().as_str()), "{out}");
    assert!(ids.contains(&last.job_id().as_str()), "{out}");
    assert!(
        err.contains("1 line(s)") && err.contains("skipped"),
        "the torn line is said: {err}"
    );
    for name in killed_jobs {
        let _ = Command::new("scancel").args(["-n", &name]).status();
    }
}

/// The job pends until the test lets it run: its time limit is over the partition's (Slurm
/// holds it, reason PartitionTimeLimit), until it is lowered.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn events_follow_a_run_from_pending_to_passed_and_a_hang_to_its_verdict() {
    crate::needs_cluster!();
    let state = tempdir();
    let (_fx, base) = synced("runs-events");
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("echo started; sleep 2; echo done");
    d["time_limit"] = json!("05:00:00");
    let s = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let events = state.path().join("events.jsonl");
    let mut c = tool_in(state.path(), "slurm-watch");
    c.args(["--interval", "1", "--events", events.to_str().unwrap()]);
    let input = s.doc.to_string();
    let watcher = std::thread::spawn(move || run_raw(c, input.as_bytes()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&events)
        .unwrap_or_default()
        .contains("\"pending\"")
    {
        assert!(Instant::now() < deadline, "no pending event");
        std::thread::sleep(Duration::from_millis(300));
    }
    let ok = Command::new("scontrol")
        .args(["update", &format!("JobId={id}"), "TimeLimit=00:05:00"])
        .status()
        .unwrap();
    assert!(ok.success());
    let w = watcher.join().unwrap();
    assert_eq!(w.code, 0, "{}", w.stderr);
    let ev = json_lines(&std::fs::read_to_string(&events).unwrap());
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{kinds:?}");
    let pos = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("{k}: {kinds:?}"))
    };
    assert!(
        pos("pending") < pos("running") && pos("running") < pos("verdict"),
        "{kinds:?}"
    );
    let pending = &ev[pos("pending")];
    // Slurm says why (PartitionTimeLimit, or PartitionConfig in some versions).
    assert!(
        pending["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("Partition")),
        "{pending}"
    );
    assert_eq!(pending["job_id"], id.as_str());
    assert_eq!(ev[pos("verdict")]["status"], "PASSED");
    assert!(ev
        .iter()
        .all(|e| e["time"].as_str().is_some_and(|t| t.ends_with('Z'))));
    // The verdict reached the ledger, and the saved document has the report.
    let (out, _, _) = runs(state.path(), &["--json", "--no-refresh"], None);
    let run = &json_lines(&out)[0];
    assert_eq!(run["status"], "PASSED");
    let saved: Value =
        serde_json::from_slice(&std::fs::read(run["document"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(report_of(&saved).status.name(), "PASSED");

    // A hang: the hang event, then the verdict.
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("echo step 1; echo 'NCCL watchdog: hang detected'; sleep 60");
    let s = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    std::fs::remove_file(&events).unwrap();
    let w = run_in(
        state.path(),
        "slurm-watch",
        &["--interval", "1", "--events", events.to_str().unwrap()],
        &s.doc,
    );
    assert_eq!(w.code, 1, "{}", w.stderr);
    let ev = json_lines(&std::fs::read_to_string(&events).unwrap());
    let kinds: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let hang = kinds
        .iter()
        .position(|k| *k == "hang")
        .expect("a hang event");
    assert_eq!(kinds.last(), Some(&"verdict"), "{kinds:?}");
    assert!(hang < kinds.len() - 1);
    assert!(ev[hang]["line"].as_str().unwrap().contains("hang detected"));
    assert_eq!(ev.last().unwrap()["status"], "HANG_DETECTED");

    // The stream into slurm-notify with a command: each state once, however often it is read.
    let got = state.path().join("notified.txt");
    for _ in 0..2 {
        let out = tool_in(state.path(), "slurm-notify")
            .arg("--command")
            .arg(format!(
                "printf '%s %s\\n' \"$SLURM_EVENT_KIND\" \"$SLURM_STATUS\" >> {}",
                got.display()
            ))
            .arg(&events)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&got).unwrap();
    let distinct: std::collections::BTreeSet<String> = ev
        .iter()
        .map(|e| {
            let detail = if e["event"] == "verdict" {
                &e["status"]
            } else {
                &e["state"]
            };
            format!("{}/{}", e["event"], detail)
        })
        .collect();
    assert_eq!(
        text.lines().count(),
        distinct.len(),
        "each state once:\n{text}"
    );
    assert!(text.contains("verdict HANG_DETECTED"), "{text}");
}

/// A local HTTP server that records each request's body and answers with `status`.
pub(crate) fn http_server(status: u16) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0u8; len];
            let _ = r.read_exact(&mut body);
            if let Ok(v) = serde_json::from_slice(&body) {
                keep.lock().unwrap().push(v);
            }
            let _ = write!(
                conn,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (port, got)
}

#[test]
fn slurm_notify_posts_each_state_once_to_a_webhook() {
    let state = tempdir();
    let events = state.path().join("events.jsonl");
    let ev = |kind: &str, extra: &str| {
        format!(
            r#"{{"event":"{kind}","at":1,"time":"x","cluster":"local","job_id":"42","job_name":"train"{extra}}}"#
        )
    };
    let stream = [
        ev("submitted", ""),
        ev("pending", r#","state":"PENDING","reason":"Priority""#),
        ev("pending", r#","state":"PENDING","reason":"Resources""#),
        ev("running", r#","state":"RUNNING""#),
        ev("running", r#","state":"RUNNING""#),
        "not json".to_string(),
        ev(
            "verdict",
            r#","status":"PASSED","state":"COMPLETED","summary":"ok""#,
        ),
    ]
    .join("\n");
    write(&events, &stream);
    let (port, got) = http_server(200);
    let url = format!("http://127.0.0.1:{port}/hook?token=secret-canary");
    // The URL is a secret: from a file the first time, from the environment the second, never
    // in argv (the trace records every command's argv).
    let url_file = state.path().join("webhook");
    write(&url_file, &format!("{url}\n"));
    let trace = state.path().join("trace.jsonl");
    for round in 0..2 {
        let mut c = tool_in(state.path(), "slurm-notify");
        if round == 0 {
            c.arg("--webhook-file").arg(&url_file);
        } else {
            c.env("SLURM_NOTIFY_WEBHOOK", &url);
        }
        let out = c
            .env("SLURM_TOOLS_TRACE", &trace)
            .arg(&events)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let traced = std::fs::read_to_string(&trace).unwrap();
    assert!(traced.contains("curl"), "{traced}");
    assert!(
        !traced.contains("secret-canary"),
        "the URL reached an argv: {traced}"
    );
    // On the command line it is refused, naming what to do instead.
    let out = tool_in(state.path(), "slurm-notify")
        .args(["--webhook", &url])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--webhook-file") && !err.contains("secret-canary"),
        "{err}"
    );
    let bodies = got.lock().unwrap().clone();
    let kinds: Vec<&str> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["submitted", "pending", "running", "verdict"],
        "each state once, across runs"
    );
    assert_eq!(bodies[3]["text"], "local job 42 (train): PASSED: ok");
    // --only, on stdin.
    let only = tempdir();
    let mut c = tool_in(only.path(), "slurm-notify");
    c.env("SLURM_NOTIFY_WEBHOOK", &url)
        .args(["--only", "verdict"]);
    let out = pipe(&mut c, stream.as_bytes());
    assert!(out.status.success());
    assert_eq!(got.lock().unwrap().len(), 5);

    // A failing webhook: said, exit 4, not remembered (the next run tries again).
    let failing = tempdir();
    let (bad_port, bad_got) = http_server(500);
    let out = tool_in(failing.path(), "slurm-notify")
        .env(
            "SLURM_NOTIFY_WEBHOOK",
            format!("http://127.0.0.1:{bad_port}/"),
        )
        .args(["--only", "verdict"])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("could not deliver"));
    assert_eq!(
        bad_got.lock().unwrap().len(),
        4,
        "tried, then retried 3 times"
    );
    // A redirect is not a delivery (curl follows none).
    let moved = tempdir();
    let (moved_port, moved_got) = http_server(301);
    let out = tool_in(moved.path(), "slurm-notify")
        .env(
            "SLURM_NOTIFY_WEBHOOK",
            format!("http://127.0.0.1:{moved_port}/"),
        )
        .args(["--only", "verdict"])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 301"));
    assert_eq!(moved_got.lock().unwrap().len(), 4);
    // Bad flags name what to do.
    let out = tool_in(failing.path(), "slurm-notify")
        .env("SLURM_NOTIFY_WEBHOOK", "ftp://x")
        .args(["--only", "verdict"])
        .arg(&events)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_fetch_brings_back_a_failed_jobs_files_incrementally_and_refuses_past_its_cap() {
    crate::needs_cluster!();
    let state = tempdir();
    let (_fx, base) = synced("runs-fetch");
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!(
        "mkdir -p out && echo partial > out/result.txt && echo two > 'out/a name.txt' && head -c 200000000 /dev/zero > big.bin && echo failing >&2 && exit 3"
    );
    let s = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run_in(state.path(), "slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "FAILED");
    let dest = tempdir();
    let to = dest.path().join("results");
    let to_s = to.to_str().unwrap();
    let f = run_in(
        state.path(),
        "slurm-fetch",
        &["-p", "out/*", "--to", to_s],
        &w.doc,
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    let sec: shared::contract::schema::Fetch = f.decoded("fetch");
    assert_eq!(sec.fetched, 4, "{sec:?}");
    assert_eq!(
        std::fs::read_to_string(to.join("tree/out/result.txt")).unwrap(),
        "partial\n"
    );
    assert!(to.join("tree/out/a name.txt").exists());
    let job = s.job_id();
    let job = job.as_str();
    let err_log = to.join("work").join(
        Path::new(s.job().stderr_path.as_deref().unwrap())
            .file_name()
            .unwrap(),
    );
    assert!(
        std::fs::read_to_string(&err_log)
            .unwrap()
            .contains("failing"),
        "{job}"
    );
    let paths: Vec<&str> = sec.files.iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"tree/out/result.txt"), "{paths:?}");
    // Again: nothing new, nothing copied.
    let again = run_in(
        state.path(),
        "slurm-fetch",
        &["-p", "out/*", "--to", to_s],
        &f.doc,
    );
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        again
            .decoded::<shared::contract::schema::Fetch>("fetch")
            .fetched,
        0
    );
    assert_eq!(
        again
            .decoded::<shared::contract::schema::Fetch>("fetch")
            .unchanged,
        4
    );
    // 200 MB with a 100 MB cap: refused, nothing copied.
    let big = run_in(
        state.path(),
        "slurm-fetch",
        &["-p", "big.bin", "--max-bytes", "100M", "--to", to_s],
        &w.doc,
    );
    assert_eq!(big.code, 2, "{}", big.stderr);
    assert_eq!(
        big.error().field.as_deref().unwrap_or_default(),
        "--max-bytes"
    );
    let msg = big.error_message();
    assert!(
        msg.contains("200.0 MB") && msg.contains("big.bin") && msg.contains("nothing was copied"),
        "{msg}"
    );
    assert!(!to.join("tree/big.bin").exists());
    // Bad patterns are refused naming the flag.
    let bad = run_in(
        state.path(),
        "slurm-fetch",
        &["-p", "../../etc/*", "--to", to_s],
        &w.doc,
    );
    assert_eq!(bad.code, 2);
    assert_eq!(
        bad.error().field.as_deref().unwrap_or_default(),
        "--pattern"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_fetch_copies_only_listed_regular_files_whatever_the_names() {
    crate::needs_cluster!();
    let state = tempdir();
    let (_fx, base) = synced("runs-fetch-hostile");
    let outside = format!(
        "{}/fetch-outside-{}",
        testbed().remote_root(),
        std::process::id()
    );
    let mut d = base.clone();
    d["recipe"] = json!("batch");
    // A directory whose name forges a listing line for s/secret, where s is an in-tree symlink
    // to a directory outside the tree; a world-writable file; a name that is not UTF-8; 100,000
    // small files; a file that will be swapped for a symlink after the listing.
    d["command"] = json!(format!(
        "mkdir -p {outside} && echo secret > {outside}/secret && ln -s {outside} s && \\
         mkdir -p \"$(printf 'd\\nT 1 1 ./s')\" && echo forged > \"$(printf 'd\\nT 1 1 ./s')/secret\" && \\
         mkdir -p out && echo ok > out/ok.txt && echo ww > out/ww.txt && chmod 666 out/ww.txt && \\
         printf x > \"$(printf 'out/\\377')\" && echo swap > out/swap.txt && \\
         mkdir many && (cd many && seq 100000 | xargs touch)"
    ));
    let s = run_in(state.path(), "slurm-submit", &[], &d);
    assert_eq!(s.code, 0, "{}", s.stderr);
    let w = run_in(state.path(), "slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.code, 0, "{}", w.stderr);
    let dest = tempdir();
    let to = dest.path().join("r");
    let to_s = to.to_str().unwrap().to_string();

    // Forged names, modes, non-UTF-8, and no symlink followed.
    let f = run_in(
        state.path(),
        "slurm-fetch",
        &[
            "-p",
            "d*",
            "-p",
            "s/*",
            "-p",
            "out/*",
            "--no-logs",
            "--to",
            &to_s,
        ],
        &w.doc,
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(
        std::fs::read_to_string(to.join("tree/d\nT 1 1 ./s/secret")).unwrap(),
        "forged\n",
        "the oddly named file arrives under its own name"
    );
    assert!(
        !to.join("tree/s").exists(),
        "nothing through the in-tree symlink, and no symlink made here"
    );
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let odd = to
        .join("tree/out")
        .join(std::ffi::OsStr::from_bytes(b"\xff"));
    assert_eq!(
        std::fs::read(&odd).unwrap(),
        b"x",
        "a name that is not UTF-8"
    );
    let mode = std::fs::metadata(to.join("tree/out/ww.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o022, 0, "no group or world write arrives: {mode:o}");

    // 100,000 files: no argument-length limit.
    let many = run_in(
        state.path(),
        "slurm-fetch",
        &["-p", "many/*", "--no-logs", "--to", &to_s],
        &w.doc,
    );
    assert_eq!(many.code, 0, "{}", many.stderr);
    assert_eq!(
        many.decoded::<shared::contract::schema::Fetch>("fetch")
            .fetched,
        100_000
    );
    assert!(to.join("tree/many/100000").is_file());

    // A listed file swapped for a symlink between the listing and the copy: refused, no link.
    let tree = s.job().tree.unwrap();
    let swap_to = tempdir();
    let mut c = tool_in(state.path(), "slurm-fetch");
    c.args([
        "-p",
        "out/swap.txt",
        "--no-logs",
        "--to",
        swap_to.path().to_str().unwrap(),
    ])
    .env("SLURM_TOOLS_PAUSE_AT", "fetch:listed")
    .env("SLURM_TOOLS_PAUSE_SECONDS", "4")
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(w.doc.to_string().as_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2500));
    let swapped = format!("{tree}/out/swap.txt");
    std::fs::remove_file(&swapped).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &swapped).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("no longer a regular file"), "{err}");
    assert!(
        std::fs::symlink_metadata(swap_to.path().join("tree/out/swap.txt")).is_err(),
        "no local symlink"
    );
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn a_hostile_ledger_runs_nothing_panics_nowhere_and_keeps_the_other_clusters() {
    // No cluster is asked here: every run below is one slurm-runs may not or cannot ask about.
    let state = tempdir();
    let canary = tempdir();
    let fired = canary.path().join("fired");
    // A document outside the state directory, and one inside it writable by others, both with a
    // ProxyCommand that would create the canary if slurm-runs ran ssh with them.
    let planted = |path: &Path| {
        let d = json!({
            "ssh_host": "h",
            "ssh_options": [format!("-oProxyCommand=touch {}", fired.display())]
        });
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        write(path, &d.to_string());
    };
    let foreign = canary.path().join("foreign.json");
    planted(&foreign);
    let open = state.path().join("runs/open.json");
    planted(&open);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    // One valid document with a bad ssh_host: its cluster is skipped, the others still listed.
    let bad_host = state.path().join("runs/bad.json");
    write(
        &bad_host,
        &json!({"ssh_host": "-oProxyCommand=x"}).to_string(),
    );
    let entry = |cluster: &str, id: &str, doc: &Path, extra: Value| {
        let mut e = json!({"event": "submitted", "at": 1, "cluster": cluster, "job_id": id,
                           "submitted_at": 1, "document": doc.display().to_string()});
        e.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        e.to_string()
    };
    let lines = [
        entry(
            "foreign",
            "11",
            &foreign,
            json!({"snapshot": "aéééééééééé"}),
        ),
        entry(
            "open",
            "12",
            &open,
            json!({"job_name": "y".repeat(1 << 20)}),
        ),
        entry("badhost", "13", &bad_host, json!({})),
    ];
    write(&state.path().join("runs.jsonl"), &(lines.join("\n") + "\n"));
    let (out, err, code) = runs(state.path(), &[], None);
    assert!(!fired.exists(), "a planted document's ssh options ran");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("not under the tools' state directory"),
        "{err}"
    );
    assert!(err.contains("writable by others"), "{err}");
    assert!(err.contains("badhost"), "{err}");
    for id in ["11", "12", "13"] {
        assert!(out.contains(id), "run {id} listed: {out}");
    }
    assert!(
        out.contains("aéééééééé"),
        "the snapshot cut by characters: {out}"
    );
    assert_ne!(code, 101, "no panic");
    // A 1 MB name against `*`: matched, no stack overflow.
    let (out, err, _) = runs(state.path(), &["--name", "*y*"], None);
    assert!(out.contains("12"), "{out}{err}");
    assert!(!fired.exists());
}

#[test]
fn slurm_notify_skips_lines_too_long_or_not_utf8_with_bounded_memory() {
    let state = tempdir();
    let events = state.path().join("events.jsonl");
    let good = r#"{"event":"verdict","at":1,"time":"x","cluster":"c","job_id":"7","status":"PASSED","state":"COMPLETED","summary":"ok"}"#;
    let mut bytes = b"\xff\xfe not utf-8\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
    bytes.push(b'\n');
    bytes.extend_from_slice(good.as_bytes());
    bytes.push(b'\n');
    std::fs::write(&events, &bytes).unwrap();
    let got = state.path().join("got");
    let out = tool_in(state.path(), "slurm-notify")
        .arg("--command")
        .arg(format!("cat >> '{}'", got.display()))
        .arg(&events)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("not UTF-8") && err.contains("longer than"),
        "{err}"
    );
    let delivered = std::fs::read_to_string(&got).unwrap();
    assert!(delivered.contains("\"job_id\":\"7\""), "{delivered}");
}
