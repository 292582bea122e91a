//! slurm-mcp driven by a real MCP client (the official MCP Python SDK, `scripts/mcp-client`)
//! against the local cluster: the tools and their schemas, the pipeline to PASSED through MCP
//! calls with every action planned first, the policy's refusals, a foreign job left alone, MFA
//! left to the person, and the audit lines in the ledger.

use crate::fixture::Fixture;
use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;

fn calls_named<'a>(out: &'a Value, tool: &str) -> Vec<&'a Value> {
    out["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["tool"] == tool)
        .collect()
}

#[test]
#[ignore = "needs root, the local cluster and the MCP Python SDK (scripts/mcp-client installs it): scripts/test runs it"]
fn an_agent_runs_the_pipeline_through_mcp_within_the_policy_and_every_call_is_audited() {
    crate::needs_cluster!();
    let _mfa = mfa_lock();
    let tb = testbed();
    let fx = Fixture::new("mcp");
    let home = tempdir();
    let config = home.path().join("config/slurm-tools");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::copy(tb.s("catalog"), config.join("clusters.json")).unwrap();
    // The person's policy: the agent cannot change it.
    write(
        &config.join("policy.json"),
        &json!({
            "gpu_hours_per_run": 1,
            "gpu_hours_per_day": 2,
            "clusters": ["local", tb.s("mfa_host")],
            "max_nodes": 2,
            "max_time_limit": "04:00:00",
            "require_plan": true
        })
        .to_string(),
    );
    let secret = "hunter2-never-shown";
    let mut doc = fx.doc();
    for k in ["ssh_host", "remote_cwd"] {
        doc.as_object_mut().unwrap().remove(k);
    }
    doc["slurm_cluster"] = json!("local");
    doc["ssh_config_file"] = json!(tb.ssh_config());
    doc["remote_cwd"] = json!(format!("{}/mcp-{}", tb.remote_root(), std::process::id()));
    doc["job_name"] = json!("st-mcp");
    doc["time_limit"] = json!("00:05:00");
    doc["recipe"] = json!("single");
    doc["gpus_per_node"] = json!(1);
    doc["command"] = json!("hostname && python3 --version && nvidia-smi -L 2>/dev/null; echo done");
    doc["slurm_password"] = json!(secret);
    // A job the tools did not submit: the agent may not cancel it.
    let foreign = Command::new("ssh")
        .args(["-F", &tb.ssh_config(), &tb.s("direct_host")])
        .arg(format!(
            "sbatch --parsable -A {} -p {} -t 00:03:00 -J st-mcp-foreign --wrap 'sleep 170'",
            tb.s("account"),
            tb.s("partition")
        ))
        .output()
        .unwrap();
    let foreign_id = String::from_utf8_lossy(&foreign.stdout).trim().to_string();
    assert!(
        foreign.status.success() && !foreign_id.is_empty(),
        "{}",
        String::from_utf8_lossy(&foreign.stderr)
    );
    let cp = control_path("mcp");
    mfa_logout(&cp);
    let mut mfa = doc_for("mfa_host");
    mfa["mfa_style"] = json!(true);
    mfa["control_path"] = json!(cp);
    let state = home.path().join("state");
    let env = json!({
        "PATH": std::env::var("PATH").unwrap_or_default(),
        "HOME": home.path(),
        "USER": "slurm-tools-test",
        "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": home.path().join("config"),
        "XDG_STATE_HOME": state,
        "XDG_CACHE_HOME": home.path().join("cache"),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
    });
    let mut env = env;
    // scripts/test collects every remote script for its static checks.
    if let Ok(dump) = std::env::var("SLURM_TOOLS_SCRIPT_DUMP") {
        env["SLURM_TOOLS_SCRIPT_DUMP"] = json!(dump);
    }
    let agent_config = home.path().join("agent.json");
    write(
        &agent_config,
        &json!({
            "server": env!("CARGO_BIN_EXE_slurm-mcp"),
            "env": env,
            "cwd": fx.local,
            "document": doc,
            "mfa_document": mfa,
            "foreign_job_id": foreign_id,
            "login_command": [repo_root().join("scripts/local-cluster"), "mfa-login", cp],
        })
        .to_string(),
    );
    let results = home.path().join("calls.json");
    let ran = Command::new(repo_root().join("scripts/mcp-client"))
        .arg(repo_root().join("tests/integration/mcp/agent.py"))
        .arg(&agent_config)
        .arg(&results)
        .output()
        .unwrap();
    mfa_logout(&cp);
    let still_queued = Command::new("squeue")
        .args(["-h", "-j", &foreign_id, "-o", "%T"])
        .output()
        .unwrap();
    let _ = Command::new("scancel").arg(&foreign_id).status();
    assert!(
        ran.status.success(),
        "the MCP client failed:\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let text = std::fs::read_to_string(&results).unwrap();
    if let Some(keep) = std::env::var_os("SLURM_TOOLS_KEEP_MCP_CALLS") {
        std::fs::write(keep, &text).unwrap();
    }
    let out: Value = serde_json::from_str(&text).unwrap();

    // The tools, their schemas valid and the sample document valid against them; a document
    // of the wrong type is not.
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for t in [
        "resolve",
        "preflight",
        "sync_tracked",
        "sync_untracked",
        "submit",
        "watch",
        "cancel",
        "report",
        "runs",
        "fetch",
        "attach_command",
        "alloc_up",
        "alloc_exec",
        "alloc_down",
    ] {
        assert!(tools.contains(&t), "{t} in {tools:?}");
    }
    assert_eq!(out["bad_document_accepted"], false);

    // The pipeline, every action planned first, to PASSED.
    for t in [
        "resolve",
        "sync_tracked",
        "sync_untracked",
        "submit",
        "watch",
    ] {
        let c = calls_named(&out, t);
        assert!(
            c.iter()
                .any(|c| c["is_error"] == false && c["args"].get("plan").is_none()),
            "{t}: {c:#?}"
        );
    }
    let submit_plan = calls_named(&out, "submit")[0];
    assert_eq!(submit_plan["args"]["plan"], true);
    assert!(
        submit_plan["text"]
            .as_str()
            .unwrap()
            .contains("would run on the cluster: srun --job-name=st-mcp"),
        "the plan shows the exact command: {submit_plan:#}"
    );
    let watched = calls_named(&out, "watch")[0];
    assert_eq!(
        watched["structured"]["report"]["status"], "PASSED",
        "{watched:#}"
    );
    let job_id = watched["structured"]["job"]["job_id"].as_str().unwrap();
    let report = calls_named(&out, "report")[0];
    assert!(
        report["text"].as_str().unwrap().contains("PASSED"),
        "{report:#}"
    );
    let runs = calls_named(&out, "runs")[0];
    assert!(
        runs["structured"]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["job_id"] == job_id),
        "{runs:#}"
    );

    // Refusals: each names its limit, and nothing ran.
    let submits = calls_named(&out, "submit");
    let unplanned = submits
        .iter()
        .find(|c| c["args"].get("plan").is_none() && c["args"].get("plan_id").is_none())
        .unwrap();
    assert_eq!(unplanned["is_error"], true);
    assert_eq!(
        unplanned["structured"]["refused"]["limit"], "require_plan",
        "{unplanned:#}"
    );
    let big = submits
        .iter()
        .find(|c| c["args"]["document"]["node_count"] == 2)
        .unwrap();
    assert_eq!(big["is_error"], true);
    assert_eq!(big["structured"]["refused"]["limit"], "gpu_hours_per_run");
    assert_eq!(big["structured"]["refused"]["requested"], 8.0);
    let big_text = big["text"].as_str().unwrap();
    assert!(
        big_text.contains("8 GPU-hours") && big_text.contains("gpu_hours_per_run 1"),
        "{big_text}"
    );
    let cancels = calls_named(&out, "cancel");
    let own_cancel = cancels
        .iter()
        .find(|c| c["args"]["document"]["job"]["job_id"] == job_id)
        .unwrap();
    assert_eq!(own_cancel["is_error"], false, "{own_cancel:#}");
    assert!(
        own_cancel["text"]
            .as_str()
            .unwrap()
            .contains(&format!("scancel {job_id}")),
        "{own_cancel:#}"
    );
    // Plans that run the command's own dry run: the files sync_untracked would send, the salloc
    // alloc_up would run (nothing allocated), and an allocation counted at its partition's
    // maximum walltime.
    let untracked_plan = calls_named(&out, "sync_untracked")[0];
    assert!(
        untracked_plan["text"]
            .as_str()
            .unwrap()
            .contains("dry run: would send to"),
        "{untracked_plan:#}"
    );
    let allocs = calls_named(&out, "alloc_up");
    assert_eq!(
        allocs[0]["structured"]["refused"]["limit"],
        "gpu_hours_per_run"
    );
    assert!(
        allocs[0]["text"]
            .as_str()
            .unwrap()
            .contains("maximum walltime 04:00:00"),
        "{:#}",
        allocs[0]
    );
    assert_eq!(allocs[1]["is_error"], false, "{:#}", allocs[1]);
    let alloc_text = allocs[1]["text"].as_str().unwrap();
    assert!(alloc_text.contains("salloc --job-name="), "{alloc_text}");
    let alloc_name = alloc_text
        .split("salloc --job-name=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let queued = Command::new("squeue")
        .args(["-h", "-n", alloc_name, "-o", "%i"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&queued.stdout).trim().is_empty(),
        "a plan allocates nothing: {alloc_name}"
    );
    let foreign_cancels: Vec<_> = cancels
        .iter()
        .filter(|c| c["args"]["document"]["job"]["job_id"] == foreign_id.as_str())
        .collect();
    assert_eq!(foreign_cancels.len(), 2);
    for c in foreign_cancels {
        assert_eq!(c["is_error"], true);
        assert_eq!(
            c["structured"]["refused"]["limit"], "own_jobs_only",
            "{c:#}"
        );
        assert!(c["text"].as_str().unwrap().contains(&foreign_id));
    }
    assert!(
        !String::from_utf8_lossy(&still_queued.stdout)
            .trim()
            .is_empty(),
        "the foreign job {foreign_id} was left alone"
    );
    assert_eq!(calls_named(&out, "nonexistent_tool")[0]["is_error"], true);

    // MFA: the command for the person; then the wait while they log in.
    let mfa_calls: Vec<&Value> = calls_named(&out, "preflight")
        .into_iter()
        .filter(|c| c["args"]["document"]["mfa_style"] == true)
        .collect();
    assert_eq!(mfa_calls.len(), 2);
    assert_eq!(mfa_calls[0]["is_error"], true);
    let said = mfa_calls[0]["text"].as_str().unwrap();
    assert!(
        said.contains("-fNM") && said.contains(&tb.s("mfa_host")),
        "{said}"
    );
    assert_eq!(mfa_calls[1]["is_error"], false, "{:#}", mfa_calls[1]);
    assert!(mfa_calls[1]["structured"]["preflight"].is_object());

    // Secrets never in a result (the arguments the agent sent carry it; no result does).
    for c in out["calls"].as_array().unwrap() {
        assert!(
            !c["text"].to_string().contains(secret)
                && !c["structured"].to_string().contains(secret),
            "{c:#}"
        );
    }

    // The audit: a ledger line per call, with the client, the tool, the outcome, and a copy of
    // the arguments without the secret.
    let ledger = std::fs::read_to_string(state.join("slurm-tools/runs.jsonl")).unwrap();
    let audit: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "mcp")
        .collect();
    assert_eq!(
        audit.len(),
        out["calls"].as_array().unwrap().len(),
        "{ledger}"
    );
    for e in &audit {
        assert_eq!(e["client"], "slurm-tools-test-agent", "{e}");
        let saved = std::fs::read_to_string(e["document"].as_str().unwrap()).unwrap();
        assert!(!saved.contains(secret), "{saved}");
    }
    let outcome = |tool: &str| -> Vec<String> {
        audit
            .iter()
            .filter(|e| e["tool"] == tool)
            .map(|e| e["outcome"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        outcome("submit"),
        [
            "planned",
            "ok",
            "refused: require_plan",
            "refused: gpu_hours_per_run"
        ]
    );
    assert_eq!(
        outcome("cancel"),
        [
            "refused: own_jobs_only",
            "refused: own_jobs_only",
            "planned"
        ]
    );
    assert_eq!(
        outcome("alloc_up"),
        ["refused: gpu_hours_per_run", "planned"]
    );
    let ok_submit = audit
        .iter()
        .find(|e| e["tool"] == "submit" && e["outcome"] == "ok")
        .unwrap();
    assert_eq!(ok_submit["job_id"], job_id);
    assert_eq!(ok_submit["cluster"], "local");
    // 1 GPU for 5 minutes.
    let hours = ok_submit["gpu_hours"].as_f64().unwrap();
    assert!((hours - 1.0 / 12.0).abs() < 1e-9, "{ok_submit}");
    // slurm-runs does not list the audit lines as runs, and reads every line.
    let listed = tool("slurm-runs")
        .args(["--json", "--no-refresh"])
        .env("XDG_STATE_HOME", &state)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let listed_text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed_text.lines().count(), 1, "{listed_text}");
    assert!(
        !String::from_utf8_lossy(&listed.stderr).contains("did not parse"),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
}
