//! slurm-ssh-preflight against the real sshd instances and the real cluster.

use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;

fn preflight(input: Value, extra: &[&str]) -> Run {
    run("slurm-ssh-preflight", extra, &input)
}

fn with(mut d: Value, k: &str, v: Value) -> Value {
    d[k] = v;
    d
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_direct_host_passes_and_reports_the_remote() {
    crate::needs_cluster!();
    let d = with(doc_for("direct_host"), "mfa_style", json!(false));
    let r = preflight(d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = r.preflight();
    assert_eq!(p.ssh_path.to_string(), "direct");
    let remote = &p.remote;
    assert_eq!(remote.user, Some(testbed().s("cluster_user")));
    assert!(remote.tmux.as_deref().unwrap().starts_with("tmux"));
    assert!(remote.slurm_version.as_deref().unwrap().contains("22.05"));
    assert_eq!(
        remote.accounting.map(|a| a.to_string()).as_deref(),
        Some("enabled")
    );
    assert!(remote.container_flags);
    // The real stack's versions, as the testbed built them.
    assert_eq!(remote.pyxis, Some(testbed().s("pyxis_version")));
    assert_eq!(remote.enroot, Some(testbed().s("enroot_version")));
    assert_eq!(remote.container_writable, Some(true));
    assert!(remote.git.as_deref().unwrap().starts_with("git version"));
    assert!(remote.tar.as_deref().unwrap().contains("tar"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_missing_remote_cwd_is_created() {
    crate::needs_cluster!();
    let dir = format!(
        "{}/preflight-created-{}",
        testbed().remote_root(),
        std::process::id()
    );
    let d = with(
        with(doc_for("direct_host"), "mfa_style", json!(false)),
        "remote_cwd",
        json!(dir.clone()),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.preflight().remote.remote_cwd_created);
    assert!(std::path::Path::new(&dir).is_dir());
    let _ = std::fs::remove_dir(&dir);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_remote_cwd_that_used_to_escape_its_quotes_is_one_literal_directory() {
    crate::needs_cluster!();
    // shlex quoted this shape in pieces and `assign` wrapped the pieces again, so the command
    // substitution ran on the cluster during preflight (security review 2026-12-05, finding 1).
    let canary = canary_dir("preflight-cwd");
    let c = canary.to_str().unwrap();
    let dir = format!(
        "{}/cwd-{}-a'$(touch {c}/dollar)'b`touch {c}/tick`",
        testbed().remote_root(),
        std::process::id()
    );
    let d = with(
        with(doc_for("direct_host"), "mfa_style", json!(false)),
        "remote_cwd",
        json!(dir.clone()),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.preflight().remote.remote_cwd, dir.as_str());
    assert!(r.preflight().remote.remote_cwd_created);
    // The directory exists with exactly that name: the value arrived as one word.
    assert!(
        std::path::Path::new(&dir).is_dir(),
        "{dir} was not created as named"
    );
    let _ = std::fs::remove_dir(&dir);
    assert_no_canary(&canary);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_wrong_port_exits_4_and_does_not_mention_mfa() {
    crate::needs_cluster!();
    let d = with(
        with(doc_for("direct_host"), "mfa_style", json!(false)),
        "ssh_options",
        json!(["-o", "Port=1"]),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.error_message().contains("Connection refused"),
        "{}",
        r.error_message()
    );
    let all = format!("{}{}", r.doc["error"], r.stderr).to_lowercase();
    assert!(
        !all.contains("mfa") && !all.contains("interactive"),
        "{all}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_wrong_host_exits_4_and_does_not_mention_mfa() {
    crate::needs_cluster!();
    let d = with(
        with(doc_for("direct_host"), "mfa_style", json!(false)),
        "ssh_host",
        json!("no-such-host.invalid"),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(
        r.error_message().contains("cannot reach"),
        "{}",
        r.error_message()
    );
    let all = format!("{}{}", r.doc["error"], r.stderr).to_lowercase();
    assert!(
        !all.contains("mfa") && !all.contains("interactive"),
        "{all}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_mfa_host_with_mfa_style_false_is_a_configuration_problem_not_a_prompt() {
    crate::needs_cluster!();
    let d = with(doc_for("mfa_host"), "mfa_style", json!(false));
    let d = with(d, "control_path", json!(control_path("cfgprob")));
    let r = preflight(d, &[]);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert!(r.error_message().contains("refused the key-based login"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_mfa_host_without_a_master_exits_3_with_the_command_then_passes_after_login() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let tb = testbed();
    let cp = control_path("mfa");
    mfa_logout(&cp);
    let d = with(
        with(doc_for("mfa_host"), "mfa_style", json!(true)),
        "control_path",
        json!(cp.clone()),
    );
    let r = preflight(d.clone(), &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert_schema(&r.doc);
    let hint = r.error().hint;
    let hint = hint.as_str();
    let expanded_cp = cp.replace("%p", &tb.info["mfa_port"].to_string());
    for part in [
        "ssh ",
        "-fNM",
        "-o ControlMaster=auto",
        &format!("-o ControlPath={expanded_cp}"),
        "-o ControlPersist=24h",
        &tb.s("mfa_host"),
    ] {
        assert!(hint.contains(part), "`{part}` not in hint: {hint}");
        assert!(r.stderr.contains(part), "`{part}` not on stderr");
    }

    // The person logs in (the test stand-in does it), and the same run passes.
    mfa_login(&cp);
    let log = tb.s("mfa_sshd_log");
    let before = log_count(&log, "Accepted keyboard-interactive");
    let trace = tempdir();
    let trace_file = trace.path().join("trace.jsonl");
    let mut cmd = tool("slurm-ssh-preflight");
    cmd.env("SLURM_TOOLS_TRACE", &trace_file);
    let r = run_raw(cmd, d.to_string().as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.preflight().ssh_path.to_string(), "mfa");
    assert_eq!(r.preflight().master.to_string(), "managed");
    assert_eq!(r.preflight().control_path.unwrap_or_default(), expanded_cp);
    let after = log_count(&log, "Accepted keyboard-interactive");
    assert_eq!(after, before, "no authentication beyond the master's");
    let ssh_runs = connecting_ssh(&trace_lines(&trace_file));
    assert!(
        ssh_runs.len() <= 2,
        "a preflight with a live master uses at most 2 ssh executions: {ssh_runs:#?}"
    );
    mfa_logout(&cp);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn mfa_style_null_takes_the_mfa_path_on_the_mfa_host_and_records_it() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let cp = control_path("null");
    mfa_login(&cp);
    let d = with(
        with(doc_for("mfa_host"), "mfa_style", Value::Null),
        "control_path",
        json!(cp.clone()),
    );
    let r = preflight(d, &[]);
    mfa_logout(&cp);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.preflight().ssh_path.to_string(), "mfa");
    assert!(r.preflight().mfa_style);
    assert!(r.preflight().mfa_style_discovered);
    assert!(r.stderr.contains("\"mfa_style\": true"), "{}", r.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn mfa_style_null_takes_the_direct_path_on_the_direct_host() {
    crate::needs_cluster!();
    let r = preflight(doc_for("direct_host"), &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.preflight().ssh_path.to_string(), "direct");
    assert!(!r.preflight().mfa_style);
    assert!(r.preflight().mfa_style_discovered);
    assert!(r.stderr.contains("\"mfa_style\": false"), "{}", r.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn mfa_style_null_without_a_master_ends_on_the_mfa_path_asking_for_login() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let cp = control_path("nullnomaster");
    mfa_logout(&cp);
    let d = with(doc_for("mfa_host"), "control_path", json!(cp));
    let r = preflight(d, &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.error().hint.as_str().contains("-fNM"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn establish_never_gives_the_password_to_a_jump_hosts_prompt() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let tb = testbed();
    // The cluster behind a ProxyJump bastion that asks for a password of its own (the MFA sshd,
    // as `clusteruser@127.0.0.1`); the cluster itself is known by its HostKeyAlias, so its
    // prompt reads `(clusteruser@cluster-behind-gw)`.
    let dir = tempdir();
    let cfg = dir.path().join("ssh_config");
    let base = std::fs::read_to_string(tb.s("ssh_config_file")).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "Host cluster-behind-gw\n    HostName 127.0.0.1\n    Port {}\n    User clusteruser\n    HostKeyAlias cluster-behind-gw\n    ProxyJump slurm-mfa\n    PubkeyAuthentication no\n    PreferredAuthentications keyboard-interactive\n    UserKnownHostsFile {}\n    StrictHostKeyChecking accept-new\n    LogLevel ERROR\n\n{base}",
            tb.info["mfa_port"],
            dir.path().join("known_hosts").display()
        ),
    )
    .unwrap();
    let password = std::fs::read_to_string(tb.s("mfa_password_file"))
        .unwrap()
        .trim()
        .to_string();
    let cp = control_path("jump");
    let log = tb.s("mfa_sshd_log");
    let accepted = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("Accepted keyboard-interactive")
            .count()
    };
    let before = accepted();
    let mut d = doc_for("mfa_host");
    d["ssh_host"] = json!("cluster-behind-gw");
    d["ssh_config_file"] = json!(cfg.display().to_string());
    d["mfa_style"] = json!(true);
    d["control_path"] = json!(cp.clone());
    d["slurm_password"] = json!(password.clone());
    let mut cmd = tool("slurm-ssh-preflight");
    cmd.arg("--establish").arg("--establish-timeout").arg("20");
    let r = run_raw(cmd, d.to_string().as_bytes());
    mfa_logout(&cp);
    // No terminal here: the bastion's prompt went to the person, who did not answer.
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("`slurm_password` was refused"),
        "the password was handed to the jump host: {}",
        r.stderr
    );
    assert_eq!(
        accepted(),
        before,
        "the bastion accepted a login: it got the password"
    );
    assert!(!r.stderr.contains(&password) && !r.stdout.contains(&password));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn establish_opens_the_master_with_the_password_through_askpass_never_argv() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let tb = testbed();
    let cp = control_path("establish");
    mfa_logout(&cp);
    let password = std::fs::read_to_string(tb.s("mfa_password_file"))
        .unwrap()
        .trim()
        .to_string();
    let d = with(
        with(
            with(doc_for("mfa_host"), "mfa_style", json!(true)),
            "control_path",
            json!(cp.clone()),
        ),
        "slurm_password",
        json!(password.clone()),
    );
    let trace = tempdir();
    let trace_file = trace.path().join("trace.jsonl");
    let mut cmd = tool("slurm-ssh-preflight");
    cmd.arg("--establish").env("SLURM_TOOLS_TRACE", &trace_file);
    let r = run_raw(cmd, d.to_string().as_bytes());
    mfa_logout(&cp);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.preflight().master.to_string(), "managed");
    let trace_text = std::fs::read_to_string(&trace_file).unwrap();
    let ssh = connecting_ssh(&trace_lines(&trace_file));
    assert_eq!(
        ssh.len(),
        1,
        "one ssh execution logs in, opens the master and runs the check: {ssh:?}"
    );
    assert!(
        ssh[0].iter().any(|a| a == "ControlPersist=24h"),
        "the login leaves the master running: {:?}",
        ssh[0]
    );
    for text in [&trace_text, &r.stdout, &r.stderr] {
        assert!(!text.contains(&password), "the password leaked");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_control_path_longer_than_a_socket_allows_is_a_clear_error() {
    crate::needs_cluster!();
    let long = format!("/tmp/{}-%r@%h:%p", "x".repeat(90));
    let d = with(doc_for("direct_host"), "control_path", json!(long));
    let r = preflight(d, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.error().field.as_deref().unwrap_or_default(),
        "control_path"
    );
    assert!(
        r.error_message().contains("bytes long"),
        "{}",
        r.error_message()
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_control_directory_writable_by_others_is_refused() {
    crate::needs_cluster!();
    use std::os::unix::fs::PermissionsExt;
    let dir = tempdir();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = with(
        doc_for("direct_host"),
        "control_path",
        json!(format!("{}/s-%p", open.display())),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.error_message().contains("writable by others"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_control_directory_owned_by_someone_else_is_refused() {
    crate::needs_cluster!();
    let tb = testbed();
    let dir = tempdir();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let status = std::process::Command::new("chown")
        .arg(tb.s("cluster_user"))
        .arg(&theirs)
        .status()
        .unwrap();
    assert!(status.success());
    let d = with(
        doc_for("direct_host"),
        "control_path",
        json!(format!("{}/s-%p", theirs.display())),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.error_message().contains("not to you"),
        "{}",
        r.error_message()
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_symlinked_socket_path_is_refused() {
    crate::needs_cluster!();
    let dir = tempdir();
    let link = dir.path().join("sock-2222");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let d = with(
        doc_for("direct_host"),
        "control_path",
        json!(format!("{}/sock-%p", dir.path().display())),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.error_message().contains("symbolic link"));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_missing_remote_cwd_field_names_it() {
    crate::needs_cluster!();
    let mut d = doc_for("direct_host");
    d.as_object_mut().unwrap().remove("remote_cwd");
    let r = preflight(d, &[]);
    assert_eq!(r.code, 2);
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "remote_cwd");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_container_image_needs_container_flags_on_srun_which_the_testbed_has() {
    crate::needs_cluster!();
    let d = with(
        doc_for("direct_host"),
        "container_image",
        json!("nvcr.io/nvidia/pytorch:24.01"),
    );
    let r = preflight(d, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.preflight().remote.container_flags);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn resolve_then_preflight_on_the_sample_job() {
    crate::needs_cluster!();
    let tb = testbed();
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(tb.s("sample_job")).unwrap()).unwrap();
    let r = run("slurm-resolve", &["--catalog", &tb.s("catalog")], &input);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r2 = run("slurm-ssh-preflight", &[], &r.doc);
    assert_eq!(r2.code, 0, "{}", r2.stderr);
    assert_eq!(r2.doc["resolve"], r.doc["resolve"]);
    assert_eq!(r2.preflight().ssh_path.to_string(), "direct");
    assert_schema(&r2.doc);
}

/// A private copy of the direct (key-based) sshd on its own port and log, so the logins a test
/// counts are its own; stopped on drop.
struct PrivateSshd {
    dir: tempfile::TempDir,
    port: u16,
}

impl PrivateSshd {
    fn start(port: u16) -> PrivateSshd {
        let tb = testbed();
        let state = tb.s("state_dir");
        let dir = tempdir();
        let d = dir.path();
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let conf = std::fs::read_to_string(format!("{state}/sshd_direct.conf"))
            .unwrap()
            .replace(
                &format!("Port {}", tb.info["direct_port"]),
                &format!("Port {port}"),
            )
            .replace(
                &format!("PidFile {state}/sshd_direct.pid"),
                &format!("PidFile {}/sshd.pid", d.display()),
            );
        std::fs::write(d.join("sshd.conf"), conf).unwrap();
        let ok = std::process::Command::new("/usr/sbin/sshd")
            .arg("-f")
            .arg(d.join("sshd.conf"))
            .arg("-E")
            .arg(d.join("sshd.log"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "the private sshd did not start");
        let key: Vec<String> = std::fs::read_to_string(format!("{state}/ssh_host_ed25519_key.pub"))
            .unwrap()
            .split_whitespace()
            .take(2)
            .map(str::to_string)
            .collect();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {}\n", key.join(" ")),
        )
        .unwrap();
        std::fs::write(
            d.join("ssh_config"),
            format!(
                "Host private-direct\n  HostName 127.0.0.1\n  Port {port}\n  User {}\n  IdentityFile {state}/id_ed25519\n  IdentitiesOnly yes\n  UserKnownHostsFile {}/known_hosts\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n",
                tb.s("cluster_user"),
                d.display()
            ),
        )
        .unwrap();
        PrivateSshd { dir, port }
    }

    fn logins(&self) -> usize {
        log_count(
            self.dir.path().join("sshd.log").to_str().unwrap(),
            "Accepted publickey",
        )
    }

    fn doc(&self, control_path: &str) -> Value {
        json!({
            "ssh_host": "private-direct",
            "ssh_config_file": self.dir.path().join("ssh_config"),
            "slurm_user": testbed().s("cluster_user"),
            "remote_cwd": testbed().remote_root(),
            "control_path": control_path,
        })
    }
}

impl Drop for PrivateSshd {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("sshd.pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
        let _ = self.port;
    }
}

/// On a direct host the pipeline logs in once: preflight's check opens a managed master
/// (ControlPersist) that both syncs ride; `mfa_style: null` (discovered) does the same; with
/// `ssh_multiplex: false` no master is opened and every tool logs in itself.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_direct_host_gets_one_master_that_every_later_tool_rides_unless_opted_out() {
    crate::needs_cluster!();
    let sshd = PrivateSshd::start(2241);
    for (mfa_style, multiplex) in [
        (json!(false), None),
        (Value::Null, None),
        (json!(false), Some(false)),
    ] {
        let cp = control_path("dm");
        let expanded = cp.replace("%p", &sshd.port.to_string());
        let fx = crate::fixture::Fixture::new("direct-master");
        let mut d = sshd.doc(&cp);
        d["mfa_style"] = mfa_style.clone();
        if let Some(m) = multiplex {
            d["ssh_multiplex"] = json!(m);
        }
        d["repo_root"] = json!(fx.local);
        d["repo_url"] = json!(fx.origin);
        d["remote_repo_path"] = json!(fx.remote_repo);
        write(&fx.local.join("README.md"), "edited\n");
        write(&fx.local.join("untracked.txt"), "untracked\n");
        let before = sshd.logins();
        let p = run("slurm-ssh-preflight", &[], &d);
        assert_eq!(p.code, 0, "{}", p.stderr);
        let t = run("slurm-sync-tracked", &["--via", "direct"], &p.doc);
        assert_eq!(t.code, 0, "{}", t.stderr);
        let u = run("slurm-sync-untracked", &[], &t.doc);
        assert_eq!(u.code, 0, "{}", u.stderr);
        let logins = sshd.logins() - before;
        let label = format!("mfa_style {mfa_style}, ssh_multiplex {multiplex:?}");
        if multiplex == Some(false) {
            assert_eq!(p.preflight().master.to_string(), "none", "{label}");
            assert!(!Path::new(&expanded).exists(), "{label}: a socket appeared");
            assert!(logins >= 3, "{label}: each tool logs in itself: {logins}");
        } else {
            assert_eq!(p.preflight().master.to_string(), "managed", "{label}");
            assert!(p.stderr.contains("opened a ControlMaster"), "{}", p.stderr);
            assert!(Path::new(&expanded).exists(), "{label}");
            assert_eq!(logins, 1, "{label}: one login for preflight and both syncs");
            // A second preflight rides it (no new login).
            let again = run("slurm-ssh-preflight", &[], &d);
            assert_eq!(again.code, 0, "{}", again.stderr);
            assert_eq!(again.preflight().master.to_string(), "managed");
            // With mfa_style null the probe logs in itself again: behind a master it could not
            // tell a key login from an MFA one.
            if mfa_style == json!(false) {
                assert_eq!(
                    sshd.logins() - before,
                    1,
                    "{label}: the second preflight rode it"
                );
            }
            let _ = std::process::Command::new("ssh")
                .arg("-F")
                .arg(sshd.dir.path().join("ssh_config"))
                .args([
                    "-o",
                    &format!("ControlPath={expanded}"),
                    "-O",
                    "exit",
                    "private-direct",
                ])
                .output();
        }
    }
}

/// Two runs needing the same MFA login at once (two pipelines started together): the logins
/// take turns, the second rides the master the first opened, so the site sees one login.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn two_runs_needing_one_login_at_once_log_in_once_and_never_prompt_together() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let tb = testbed();
    let cp = control_path("turns");
    mfa_logout(&cp);
    let state = tempdir();
    let password = std::fs::read_to_string(tb.s("mfa_password_file"))
        .unwrap()
        .trim()
        .to_string();
    let d = with(
        with(
            with(doc_for("mfa_host"), "mfa_style", json!(true)),
            "control_path",
            json!(cp.clone()),
        ),
        "slurm_password",
        json!(password),
    );
    let log = tb.s("mfa_sshd_log");
    let before = log_count(&log, "Accepted keyboard-interactive");
    let runs: Vec<Run> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let d = d.clone();
                let state = state.path().to_path_buf();
                s.spawn(move || {
                    let mut cmd = tool("slurm-ssh-preflight");
                    cmd.arg("--establish").env("SLURM_TOOLS_STATE_DIR", &state);
                    run_raw(cmd, d.to_string().as_bytes())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    mfa_logout(&cp);
    for r in &runs {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.preflight().master.to_string(), "managed");
    }
    assert_eq!(
        log_count(&log, "Accepted keyboard-interactive") - before,
        1,
        "one login for both runs"
    );
    // (Which run waited depends on scheduling; when the second started after the first's
    // login had finished, it rode the master from the start. Either way: one login.)
}
