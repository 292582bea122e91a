//! The README's quickstart, read from README.md and run as printed against the local cluster:
//! the job document with only the cluster's own values replaced (host, directory, account,
//! partition), and the shell block run by bash in a repository with the document beside it. An
//! example that stops working fails the build.

use crate::fixture::*;
use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;

/// The fenced blocks (language, text) of the README section titled `heading`.
fn blocks_of(readme: &str, heading: &str) -> Vec<(String, String)> {
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no section `## {heading}`"));
    let rest = &readme[start + heading.len() + 4..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out = Vec::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        if let Some(lang) = l.strip_prefix("```") {
            out.push((lang.to_string(), fenced_body(&mut lines)));
        }
    }
    out
}

/// The lines of a fenced block up to its closing fence (the opening one already read).
pub(crate) fn fenced_body<'a>(lines: &mut impl Iterator<Item = &'a str>) -> String {
    let mut body = String::new();
    for b in lines.by_ref() {
        if b.starts_with("```") {
            break;
        }
        body.push_str(b);
        body.push('\n');
    }
    body
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_readmes_quickstart_runs_as_printed_to_passed() {
    crate::needs_cluster!();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks = blocks_of(&readme, "Quickstart");
    let doc_text = &blocks
        .iter()
        .find(|(l, _)| l == "json")
        .expect("a json block")
        .1;
    let script = &blocks
        .iter()
        .find(|(l, _)| l == "sh")
        .expect("an sh block")
        .1;
    let doc = quickstart_doc(
        doc_text,
        &format!("{}/readme-{}", testbed().remote_root(), std::process::id()),
    );
    // A repository of the person's: a fixture with an origin the cluster can clone.
    let fx = Fixture::new("readme");
    write(&fx.local.join("job.json"), &doc.to_string());
    let bin = Path::new(env!("CARGO_BIN_EXE_slurm-resolve"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(&fx.local)
        .env("PATH", &path)
        .env("SLURM_TOOLS_STATE_DIR", fx.local.join(".git/test-state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the quickstart failed:\n{stderr}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(fx.local.join("report.json")).unwrap()).unwrap();
    assert_eq!(report_of(&report).status.name(), "PASSED", "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("PASSED"), "slurm-report --table: {table}");
    let log = std::fs::read_to_string(job_of(&report).stdout_path.unwrap()).unwrap();
    assert!(log.contains("Python 3"), "the README's command ran: {log}");

    // The same with both syncs inside the submission (`slurm-submit --sync`), after an edit.
    let fused = &blocks
        .iter()
        .filter(|(l, _)| l == "sh")
        .nth(1)
        .expect("the --sync block")
        .1;
    assert!(fused.contains("slurm-submit --sync"), "{fused}");
    write(&fx.local.join("README.md"), "edited for the --sync run\n");
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("set -o pipefail\n{fused}"))
        .current_dir(&fx.local)
        .env("PATH", &path)
        .env("SLURM_TOOLS_STATE_DIR", fx.local.join(".git/test-state"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the --sync quickstart failed:\n{stderr}"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(fx.local.join("report.json")).unwrap()).unwrap();
    assert_eq!(report_of(&report).status.name(), "PASSED", "{stderr}");
    let typed = typed_of(&report);
    assert!(typed.sync_untracked.is_some(), "{report}");
    assert_eq!(
        typed.job.and_then(|j| j.tree_commit),
        typed.sync_tracked.map(|t| t.commit),
        "{report}"
    );
    assert!(
        stderr.contains("synced in the command's own ssh execution"),
        "{stderr}"
    );
}

/// The README quickstart's job document (`text`) with only the local cluster's values put in:
/// its host (and the test's ssh config, since a test cannot write ~/.ssh/config), `remote_cwd`,
/// account and partition. Every other field is the README's.
pub(crate) fn quickstart_doc(text: &str, remote_cwd: &str) -> Value {
    let mut doc: Value = serde_json::from_str(text).expect("the quickstart document is JSON");
    let tb = testbed();
    let local: [(&str, Value); 4] = [
        ("ssh_host", json!(tb.s("direct_host"))),
        ("remote_cwd", json!(remote_cwd)),
        ("account", json!(tb.s("account"))),
        ("partition", json!(tb.s("partition"))),
    ];
    for (k, v) in local {
        assert!(doc.get(k).is_some(), "the quickstart document has no `{k}`");
        doc[k] = v;
    }
    doc["ssh_config_file"] = json!(tb.ssh_config());
    doc
}

/// The README quickstart's job document as printed.
pub(crate) fn quickstart_text() -> String {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    blocks_of(&readme, "Quickstart")
        .into_iter()
        .find(|(l, _)| l == "json")
        .expect("a json block")
        .1
}

/// The fenced blocks of the markdown file's section `heading` (any level).
fn blocks_in(file: &str, heading: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
    let at = text
        .lines()
        .position(|l| l.trim_start_matches('#').trim() == heading && l.starts_with('#'))
        .unwrap_or_else(|| panic!("{file} has no section {heading}"));
    let rest: String = text.lines().skip(at).collect::<Vec<_>>().join("\n");
    blocks_of(
        &format!("\n## {heading}\n{}", &rest[rest.find('\n').unwrap_or(0)..]),
        heading,
    )
}

#[test]
fn the_catalogs_worked_example_resolves_as_documented() {
    // The catalog printed in docs/catalog.md, saved where slurm-resolve looks, and the worked
    // example's command run as printed.
    let catalog = blocks_in("docs/catalog.md", "Format")
        .into_iter()
        .find(|(l, _)| l == "json")
        .expect("the catalog example")
        .1;
    let script = blocks_in("docs/catalog.md", "Worked example")
        .into_iter()
        .find(|(l, _)| l == "sh")
        .expect("the worked example")
        .1;
    let home = tempdir();
    let conf = home.path().join("config/slurm-tools");
    std::fs::create_dir_all(&conf).unwrap();
    write(&conf.join("clusters.json"), &catalog);
    let bin = Path::new(env!("CARGO_BIN_EXE_slurm-resolve"))
        .parent()
        .unwrap();
    let out = std::process::Command::new("bash")
        .args(["-o", "pipefail", "-c"])
        .arg(&script)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env_remove("SLURM_TOOLS_CATALOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (k, v) in [
        ("slurm_cluster", json!("dgx")),
        ("ssh_host", json!("ada@dgx-login.example.com")),
        ("mfa_style", json!(false)),
        ("gpus_per_node", json!(8)),
        ("node_count", json!(2)),
        ("exclusive", json!(true)),
        ("mounts", json!(["/lustre:/lustre"])),
        ("default_user_root_dir", json!("/lustre/ada")),
        ("remote_repo_path", json!("/lustre/ada/proj")),
        ("remote_work_dir", json!("/lustre/ada/proj/work_dirs/llama")),
    ] {
        assert_eq!(d[k], v, "{k} as docs/catalog.md says");
        assert!(
            // The example's jq takes `candidates` out: not the whole section, read as JSON.
            d["resolve"]["derived"]
                .as_array()
                .unwrap()
                .contains(&json!(k)),
            "{k} listed in derived"
        );
    }
}
