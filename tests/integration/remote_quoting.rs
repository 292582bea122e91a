//! Every value reaches the remote program as exactly one literal argument: through the real sshd,
//! the cluster user's real login shell, and `/bin/sh` (docs/reliability.md promise 2).

use crate::harness::*;
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use std::time::Duration;

fn hostile_corpus(canary: &str) -> Vec<String> {
    let c = canary;
    let mut v: Vec<String> = vec![
        format!("$(touch {c}/dollar-paren)"),
        format!("`touch {c}/backtick`"),
        format!("; touch {c}/semicolon"),
        format!("| touch {c}/pipe"),
        format!("&& touch {c}/and"),
        format!("|| touch {c}/or"),
        format!("x & touch {c}/background"),
        format!("'; touch {c}/single-quote; '"),
        format!("\"; touch {c}/double-quote; \""),
        format!("\\\"$(touch {c}/escaped)"),
        format!("a\ntouch {c}/newline"),
        format!("a\rtouch {c}/cr"),
        format!("> {c}/redirect"),
        format!("< /etc/passwd > {c}/redirect2"),
        format!("$({{touch,{c}/brace-cmd}})"),
        format!("${{IFS}}touch${{IFS}}{c}/ifs"),
        "*".into(),
        "/etc/*".into(),
        "{a,b}".into(),
        "~root".into(),
        "~".into(),
        "$HOME".into(),
        "${HOME}".into(),
        "$0 $1 $@ $$ $?".into(),
        "-n".into(),
        "--help".into(),
        "-e \\n".into(),
        "# not a comment".into(),
        "!!".into(),
        "!$".into(),
        "back\\slash\\".into(),
        "\\".into(),
        "'".into(),
        "\"".into(),
        "''".into(),
        "".into(),
        " leading and trailing spaces ".into(),
        "tab\there".into(),
        "ünïcödé ✓ 日本語".into(),
        "%s %n %d".into(),
        "a=b".into(),
        "\u{7f}\u{1b}[31mescape".into(),
        format!("x; touch {c}/{}", "y".repeat(4096)),
        "z".repeat(4096),
    ];
    v.push(format!(
        "$(touch {c}/a)`touch {c}/b`;touch {c}/c|touch {c}/d"
    ));
    // Values that shlex 1.3 quoted in pieces (a quote in the middle of a word), which `assign`
    // then wrapped again: part of each was outside any quotes and ran (security review
    // 2026-12-05, finding 1).
    v.push(format!("a'$(touch {c}/piece-dollar)'b"));
    v.push(format!("x\"'`touch {c}/piece-backtick`'\"y"));
    v.push(format!("p'; touch {c}/piece-semicolon; 'q"));
    v.push(format!("it's\"$(touch {c}/piece-mixed)\""));
    v
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ssh_for(host_key: &str, control_path: Option<&str>) -> Ssh {
    let mut d = doc_for(host_key);
    if let Some(cp) = control_path {
        d["control_path"] = cp.into();
    }
    crate::harness::ssh_of(&d)
}

/// Every value written with each of the other writers, `assign` (`V='...'`) and `glued` (after
/// fixed text, as in `--opt=VALUE`): the remote prints the hex of what it got, one line each.
fn round_trip_assign_and_glued(ssh: &Ssh, values: &[String]) -> Vec<(String, String)> {
    let mut s = Script::new();
    s.raw("h() { printf '%s' \"$1\" | od -An -v -tx1 | tr -d ' \\n'; echo; }\n");
    for v in values {
        s.assign("V", v).unwrap();
        s.raw("h \"$V\"\nh --opt=").glued(v).unwrap().raw("\n");
    }
    let out = ssh.run_script(&s, None, Duration::from_secs(120)).unwrap();
    assert!(out.success(), "remote script failed: {}", out.stderr_tail);
    let text = out.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2 * values.len(),
        "one line per value and writer"
    );
    lines
        .chunks(2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

fn assert_every_writer_literal(ssh: &Ssh, corpus: &[String]) {
    let got = round_trip(ssh, corpus);
    for (value, got) in corpus.iter().zip(&got) {
        assert_eq!(
            &hex(value.as_bytes()),
            got,
            "arg: value {value:?} changed on the way"
        );
    }
    let got = round_trip_assign_and_glued(ssh, corpus);
    for (value, (assigned, glued)) in corpus.iter().zip(&got) {
        assert_eq!(
            &hex(value.as_bytes()),
            assigned,
            "assign: value {value:?} changed on the way"
        );
        assert_eq!(
            &hex(format!("--opt={value}").as_bytes()),
            glued,
            "glued: value {value:?} changed on the way"
        );
    }
}

/// Send every value as an argument of `set --` and have the remote print each argument's hex.
fn round_trip(ssh: &Ssh, values: &[String]) -> Vec<String> {
    let mut s = Script::new();
    s.raw("set --");
    for v in values {
        s.arg(v).unwrap();
    }
    s.raw(
        "\necho \"$#\"\nfor a do printf '%s' \"$a\" | od -An -v -tx1 | tr -d ' \\n'; echo; done\n",
    );
    let out = ssh.run_script(&s, None, Duration::from_secs(60)).unwrap();
    assert!(out.success(), "remote script failed: {}", out.stderr_tail);
    let text = out.stdout_text();
    let mut lines = text.lines();
    let count: usize = lines.next().unwrap().trim().parse().unwrap();
    assert_eq!(
        count,
        values.len(),
        "each value must arrive as exactly one argument"
    );
    lines.map(str::to_string).collect()
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_values_arrive_literally_through_the_key_based_sshd() {
    crate::needs_cluster!();
    let canary = canary_dir("direct");
    let corpus = hostile_corpus(canary.to_str().unwrap());
    assert!(corpus.len() >= 30);
    assert_every_writer_literal(&ssh_for("direct_host", None), &corpus);
    assert_no_canary(&canary);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn hostile_values_arrive_literally_through_the_mfa_sshd_master() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let cp = control_path("quoting");
    mfa_login(&cp);
    let canary = canary_dir("mfa");
    let corpus = hostile_corpus(canary.to_str().unwrap());
    assert_every_writer_literal(&ssh_for("mfa_host", Some(&cp)), &corpus);
    mfa_logout(&cp);
    assert_no_canary(&canary);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_payload_after_the_script_reaches_the_scripts_last_command_intact() {
    crate::needs_cluster!();
    // dash's `sh -s` reads ahead 8 KiB and would swallow the start of a payload; the entry's
    // length prefix must not.
    let ssh = ssh_for("direct_host", None);
    let mut s = Script::new();
    s.raw("echo before\nexec od -An -v -tx1\n");
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let p = payload.clone();
    let out = ssh
        .run_script(
            &s,
            Some(Box::new(move |w: &mut dyn std::io::Write| w.write_all(&p))),
            Duration::from_secs(60),
        )
        .unwrap();
    assert!(out.success());
    let text = out.stdout_text();
    let (first, rest) = text.split_once('\n').unwrap();
    assert_eq!(first, "before");
    let got: String = rest.split_whitespace().collect();
    assert_eq!(got, hex(&payload));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn nul_is_refused_before_anything_is_sent() {
    crate::needs_cluster!();
    let mut s = Script::new();
    let e = s.arg("a\0b").unwrap_err();
    assert!(e.message.contains("NUL"), "{}", e.message);
    assert_eq!(e.kind, shared::ErrorKind::BadInput);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_login_shell_never_sees_the_values() {
    crate::needs_cluster!();
    // A value that would break a login shell parsing a joined command line arrives intact even
    // when it is the whole script's only content.
    let ssh = ssh_for("direct_host", None);
    let mut s = Script::new();
    s.raw("printf '%s' ")
        .arg("it's \"quoted\" $(and) `more`")
        .unwrap();
    let out = ssh.run_script(&s, None, Duration::from_secs(30)).unwrap();
    assert_eq!(out.stdout_text(), "it's \"quoted\" $(and) `more`");
}
