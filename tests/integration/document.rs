//! The job document contract (docs/contract.md), through a real tool process.
//! slurm-resolve stands in for every tool here: the behaviour under test is the shared driver.

use crate::harness::*;
use serde_json::{json, Value};

fn minimal() -> Value {
    json!({"slurm_cluster": "c1", "ssh_host": "login.example.org"})
}

#[test]
fn unknown_fields_round_trip_byte_for_byte() {
    let input = r#"{"slurm_cluster":"c1","ssh_host":"h","zeta":{"deep":[1,{"x":null}],"e":1.25},"big":123456789012345678901234567890,"neg":-0.0,"text":"ü\n\"q\"\u0007","empty":{},"list":[]}"#;
    let r = ToolRun::new("slurm-resolve").stdin(input.as_bytes()).run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Every input field comes out with exactly its input text, in order, before the new section.
    let expected_prefix = &input[..input.len() - 1];
    assert!(
        r.stdout.starts_with(expected_prefix),
        "\n{}\nvs\n{}",
        r.stdout,
        input
    );
    // (Its 30-digit integer is more than the whole document's type holds: the section alone.)
    let _: shared::contract::schema::Resolve = r.decoded("resolve");

    // Exponent forms keep their value (serde_json may write `1e5` as `1e+5`).
    let r = ToolRun::new("slurm-resolve")
        .stdin(br#"{"slurm_cluster":"c1","ssh_host":"h","e":1e5,"f":-2.5E-3}"#)
        .run();
    assert_eq!(r.doc["e"].as_f64(), Some(1e5));
    assert_eq!(r.doc["f"].as_f64(), Some(-2.5e-3));
}

#[test]
fn an_upstream_error_passes_through_untouched_with_its_exit_code() {
    let input = json!({
        "slurm_cluster": "c1",
        "slurm_password": "hunter2-canary",
        "error": {"tool": "slurm-x", "kind": "needs_person", "message": "m", "hint": "h", "exit_code": 3}
    });
    let r = run("slurm-resolve", &[], &input);
    assert_eq!(r.code, 3);
    let mut expected = input.clone();
    expected.as_object_mut().unwrap().remove("slurm_password");
    assert_eq!(r.doc, expected);
    assert!(r.stderr.contains("slurm-x"), "{}", r.stderr);
    assert!(!r.stdout.contains("hunter2") && !r.stderr.contains("hunter2"));
}

#[test]
fn secrets_are_dropped_from_output_and_never_printed() {
    let mut input = minimal();
    let o = input.as_object_mut().unwrap();
    o.insert("slurm_password".into(), json!("pw-canary-1"));
    // User fields whose names merely look secret are the user's data: kept exactly.
    let extra = json!({"api_token": "user-1", "keep": 1, "list": [{"MY_SECRET": "user-2"}]});
    o.insert("extra".into(), extra.clone());
    o.insert("max_new_tokens".into(), json!(128));
    o.insert("tokenizer_dir".into(), json!("/models/tok"));
    o.insert(
        "env".into(),
        json!({"TOKENIZERS_PARALLELISM": "false", "HF_TOKEN": "hf"}),
    );
    let r = run("slurm-resolve", &[], &input);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stdout.contains("pw-canary-1") && !r.stderr.contains("pw-canary-1"),
        "slurm_password leaked"
    );
    assert_eq!(r.doc["extra"], extra);
    assert_eq!(r.doc["max_new_tokens"], 128);
    assert_eq!(r.doc["tokenizer_dir"], "/models/tok");
    assert_eq!(r.doc["env"]["HF_TOKEN"], "hf");
    assert_eq!(r.doc["env"]["TOKENIZERS_PARALLELISM"], "false");
    assert!(r.doc.get("slurm_password").is_none());
    assert!(r
        .stderr
        .contains("dropped the secret field `slurm_password`"));
}

#[test]
fn secrets_are_dropped_from_error_documents_too() {
    let input = json!({"slurm_password": "pw-canary-5", "node_count": "two"});
    let r = run("slurm-resolve", &[], &input);
    assert_eq!(r.code, 2);
    assert!(!r.stdout.contains("pw-canary-5") && !r.stderr.contains("pw-canary-5"));
}

fn assert_bad_input(input: &[u8], needles: &[&str]) {
    let r = ToolRun::new("slurm-resolve").stdin(input).run();
    assert_eq!(r.code, 2, "{}", r.stderr);
    let e = r.error();
    assert_eq!(e.exit_code, 2);
    assert_eq!(e.kind, shared::ErrorKind::BadInput);
    let msg = r.error_message();
    for n in needles {
        assert!(msg.contains(n), "`{n}` not in: {msg}");
        assert!(r.stderr.contains(n), "`{n}` not on stderr: {}", r.stderr);
    }
}

#[test]
fn truncated_json_exits_2_with_line_and_column() {
    assert_bad_input(
        b"{\"slurm_cluster\": \"c1\",\n  \"node_count\": ",
        &["truncated", "line 2 column"],
    );
}

#[test]
fn two_documents_exit_2_with_line_and_column() {
    assert_bad_input(
        b"{\"a\": 1}\n{\"b\": 2}\n",
        &["more than one", "line 2 column 1"],
    );
}

#[test]
fn a_top_level_that_is_not_an_object_exits_2_with_line_and_column() {
    assert_bad_input(
        b"\n  [1, 2]",
        &["must be a JSON object", "a list", "line 2 column 3"],
    );
    assert_bad_input(
        b"\"text\"",
        &["must be a JSON object", "a string", "line 1 column 1"],
    );
    assert_bad_input(b"42", &["must be a JSON object", "a number"]);
}

#[test]
fn invalid_json_exits_2_with_line_and_column() {
    assert_bad_input(
        b"{\"a\": 1,\n \"b\": tru }",
        &["not valid JSON", "line 2 column"],
    );
}

#[test]
fn empty_stdin_exits_2_and_says_the_previous_tool_printed_nothing() {
    let r = ToolRun::new("slurm-resolve").run();
    r.assert()
        .code(2)
        .stderr(predicates::str::contains("empty"));
    assert!(r.error_message().contains("empty"));
    assert!(r.error().hint.contains("printed nothing"));
}

#[test]
fn deep_nesting_is_refused_not_crashed() {
    let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert_bad_input(deep.as_bytes(), &["recursion limit"]);
}

#[test]
fn huge_stdin_is_refused_quickly_with_bounded_memory() {
    let big = vec![b' '; 17 * 1024 * 1024];
    let started = std::time::Instant::now();
    assert_bad_input(&big, &["larger than 16 MiB"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn the_document_can_come_from_a_file_argument_or_dash() {
    let dir = tempdir();
    let path = dir.path().join("job.json");
    write(&path, &minimal().to_string());
    let r = ToolRun::new("slurm-resolve")
        .args(&[path.to_str().unwrap()])
        .run();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.typed().slurm_cluster.as_deref(), Some("c1"));
    let r = ToolRun::new("slurm-resolve")
        .args(&["-"])
        .doc(&minimal())
        .run();
    assert_eq!(r.code, 0);
    let missing = dir.path().join("missing.json");
    let r = ToolRun::new("slurm-resolve")
        .args(&[missing.to_str().unwrap()])
        .run();
    assert_eq!(r.code, 2);
    assert!(r.error_message().contains("missing.json"));
}

#[test]
fn bad_flags_exit_2_and_help_and_version_exit_0() {
    for t in TOOLS {
        let out = tool(t)
            .arg("--no-such-flag")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{t}");
        let out = tool(t).arg("--help").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            (help.contains("Reads") || t == "slurm-report")
                && (help.contains("Example:") || help.contains("Examples:")),
            "{t} --help teaches:\n{help}"
        );
        assert!(!help.contains("{adds}"), "{t}: the Adds text is generated");
        assert!(
            help.contains("Exit: 0") || help.contains("Exit code: 0") || help.contains("Exit 0"),
            "{t} --help states its exit codes:\n{help}"
        );
        assert!(
            !help.to_ascii_lowercase().contains("trtllm"),
            "{t} --help shows no internal default:\n{help}"
        );
        // Examples stay whole as printed: every line starts a command, or continues one whose
        // line ends in `\` (a line wrapped by the help's width would start mid-command).
        let examples = help
            .split_once("Example")
            .map(|(_, rest)| rest.split("\nUsage:").next().unwrap_or(rest))
            .unwrap_or("");
        let mut continued = false;
        for line in examples.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            let starts_command = ["slurm-", "echo ", "jq ", "cat ", "make ", "printf "]
                .iter()
                .any(|w| line.trim_start().starts_with(w));
            assert!(
                starts_command || continued,
                "{t} --help: an example line that is not a whole command (wrapped?): {line:?}\n{help}"
            );
            continued = line.trim_end().ends_with('\\');
        }
        let out = tool(t).arg("--version").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with(t));
    }
}

#[test]
fn a_nul_in_a_field_is_refused_naming_the_field() {
    let r = run(
        "slurm-resolve",
        &[],
        &json!({"slurm_cluster": "c1", "ssh_host": "a\u{0}b"}),
    );
    assert_eq!(r.code, 2);
    assert_eq!(r.error().field.as_deref(), Some("ssh_host"));
    assert!(r.error_message().contains("NUL"));
}
