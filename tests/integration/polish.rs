//! The parts people see first: slurm-report, the generated docs, the Makefile steps.

use crate::harness::*;
use serde_json::json;

#[test]
fn slurm_report_renders_a_verdict_and_passes_the_document_on() {
    let doc = json!({
        "ssh_host": "h",
        "resolve": {"cluster_name": "c", "selected_by": "explicit", "derived": [], "catalog": null,
                    "candidates": [], "partitions": [], "flags": {}},
        "report": report_section("FAILED", "42", "run"),
    });
    let r = run("slurm-report", &[], &doc);
    assert_eq!(r.code, 1, "not PASSED");
    assert_eq!(r.doc, doc, "the document passes on unchanged");
    for want in [
        "FAILED  job 42 (run)",
        "the job failed with exit code 3:0",
        "| line b",
        "| boom",
        "/r/x-42.out",
        "c via h (no preflight)",
    ] {
        assert!(r.stderr.contains(want), "{want} not in:\n{}", r.stderr);
    }
    let out = tool("slurm-report")
        .arg("--table")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = {
        use std::io::Write;
        let mut out = out;
        out.stdin
            .take()
            .unwrap()
            .write_all(doc.to_string().as_bytes())
            .unwrap();
        out.wait_with_output().unwrap()
    };
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("FAILED  job 42"));
}

#[test]
fn slurm_report_shows_an_upstream_error_with_its_hint_and_code() {
    let doc = json!({"error": {"tool": "slurm-ssh-preflight", "kind": "needs_person", "message": "log in first",
                               "hint": "run ssh -fNM ...", "exit_code": 3}});
    let r = run("slurm-report", &[], &doc);
    assert_eq!(r.code, 3);
    assert_eq!(r.doc, doc);
    assert!(
        r.stderr.contains("FAILED in slurm-ssh-preflight") && r.stderr.contains("run ssh -fNM"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_checked_in_man_pages_and_tool_pages_match_the_clap_definitions() {
    for t in TOOLS {
        let out = tool(t).env("SLURM_TOOLS_GENERATE", "man").output().unwrap();
        assert!(out.status.success());
        let checked_in = std::fs::read(repo_root().join(format!("docs/man/{t}.1"))).unwrap();
        assert!(
            out.stdout == checked_in,
            "docs/man/{t}.1 is stale: run scripts/gen-docs"
        );
        let help = tool(t).arg("--help").output().unwrap();
        let page = std::fs::read_to_string(repo_root().join(format!("docs/tools/{t}.md"))).unwrap();
        assert!(
            page.contains(String::from_utf8_lossy(&help.stdout).trim()),
            "docs/tools/{t}.md is stale: run scripts/gen-docs"
        );
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn make_targets_run_and_rerun_single_steps_on_the_saved_document() {
    crate::needs_cluster!();
    let dir = tempdir();
    let d = dir.path().display().to_string();
    let make = |target: &str| {
        std::process::Command::new("make")
            .args(["-s", "-C"])
            .arg(repo_root())
            .arg(format!("DIR={d}"))
            .arg(format!(
                "TOOLS={}",
                std::path::Path::new(bin("slurm-resolve"))
                    .parent()
                    .unwrap()
                    .display()
            ))
            .arg(target)
            .output()
            .unwrap()
    };
    let o = make("preflight");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("preflight.json")).unwrap()).unwrap();
    assert_eq!(
        section_of::<shared::contract::schema::Preflight>(&first, "preflight")
            .ssh_path
            .to_string(),
        "direct"
    );
    std::fs::remove_file(dir.path().join("preflight.json")).unwrap();
    let o = make("preflight-again");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        dir.path().join("preflight.json").exists(),
        "the step reran on the saved resolved.json"
    );
}

#[test]
fn the_checked_in_json_schema_is_the_one_the_types_generate() {
    let out = tool("slurm-resolve")
        .env("SLURM_TOOLS_GENERATE", "schema")
        .output()
        .unwrap();
    assert!(out.status.success());
    let checked_in = std::fs::read(repo_root().join("docs/job-document.schema.json")).unwrap();
    assert!(
        out.stdout == checked_in,
        "docs/job-document.schema.json is stale: run scripts/gen-docs"
    );
    let schema: serde_json::Value = serde_json::from_slice(&checked_in).unwrap();
    for section in [
        "resolve",
        "preflight",
        "sync_tracked",
        "sync_untracked",
        "job",
        "report",
        "allocation",
        "error",
    ] {
        assert!(
            schema["properties"].get(section).is_some(),
            "{section} missing from the schema"
        );
    }
}

#[test]
fn a_section_field_the_schema_does_not_declare_is_caught() {
    // The check the other tests rely on can fail.
    let doc = json!({"report": {"status": "PASSED", "unexpected": 1}});
    assert!(shared::contract::schema::check(&doc).is_err());
    let doc = json!({"anything": {"at": "all"}, "slurm_cluster": "c"});
    assert!(
        shared::contract::schema::check(&doc).is_ok(),
        "unknown top-level fields are allowed"
    );
}

/// macOS's make is GNU make 3.81, which ignores `.SHELLFLAGS`: every recipe line with a pipe sets
/// `pipefail` itself, so a failing first tool fails the step there too.
#[test]
fn every_piped_make_recipe_sets_pipefail_itself() {
    let text = std::fs::read_to_string(repo_root().join("Makefile")).unwrap();
    // Recipe lines, with their backslash continuations joined.
    let joined = text.replace("\\\n", " ");
    let piped: Vec<&str> = joined
        .lines()
        .filter(|l| l.starts_with('\t'))
        .filter(|l| l.contains(" | "))
        .collect();
    assert!(!piped.is_empty());
    for l in piped {
        assert!(l.contains("set -o pipefail"), "no pipefail of its own: {l}");
    }
}

/// `make loop CMD='...'` hands CMD to slurm-alloc as one argument, exactly as written: quotes,
/// `;` and `$` are for the cluster's shell, not make's or the local one's (checked with a stand-in
/// slurm-alloc that records its arguments; no cluster needed).
#[test]
fn make_loop_hands_cmd_over_as_written() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempdir();
    let stub = tmp.path().join("slurm-alloc");
    std::fs::write(
        &stub,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$ARGS_OUT\"\necho '{}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args_out = tmp.path().join("args");
    let dir = tmp.path().join("docs");
    std::fs::create_dir_all(&dir).unwrap();
    let make = |cmd: Option<&str>| {
        let mut c = std::process::Command::new("make");
        c.current_dir(repo_root())
            .arg("-s")
            .arg("loop")
            .arg(format!("TOOLS={}", tmp.path().display()))
            .arg(format!("DIR={}", dir.display()))
            .env("ARGS_OUT", &args_out);
        if let Some(cmd) = cmd {
            c.arg(format!("CMD={cmd}"));
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&args_out).unwrap()
    };
    let alloc = dir.join("alloc.json").display().to_string();
    // The document goes to loop.json with --doc: stdout is the command's.
    let doc = dir.join("loop.json").display().to_string();
    let cmd = r#"echo "it's $HOME"; ls $(pwd) | wc -l"#;
    assert_eq!(
        make(Some(cmd)),
        format!("exec\n--sync\n--doc\n{doc}\n{alloc}\n--\n{cmd}\n")
    );
    // Without CMD: the document's `command`.
    assert_eq!(
        make(None),
        format!("exec\n--sync\n--doc\n{doc}\n{alloc}\n--\n")
    );
}
