//! slurm-attach against the real cluster: into a held allocation and into a running job (on the
//! node, in the job's named container, in its code), a shell with a real terminal, an IDE's ssh
//! entry, through the MFA master with no second authentication; a pending or ended job said as
//! such.

use crate::fixture::{self, synced, wait_done};
use crate::harness::*;
use crate::{alloc, alloc_doc, fill_node, one_at_a_time};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

fn attach(args: &[&str], doc: &serde_json::Value) -> Run {
    run("slurm-attach", args, doc)
}

/// slurm-attach goes into a held allocation and into a running job: on the node, in the job's
/// named container, in its code; a shell with a terminal too; through the MFA master with no
/// second authentication; a pending or ended job is said as such.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn attach_goes_into_an_allocation_and_a_running_job_in_their_container_and_code() {
    crate::needs_cluster!();
    let _one = one_at_a_time();
    let _mfa = mfa_lock();
    let cp = control_path("attach");
    let log = testbed().s("mfa_sshd_log");
    let before = log_count(&log, "Accepted keyboard-interactive");
    mfa_login(&cp);
    let name = format!("st-attach-{}", std::process::id());
    let mut d = alloc_doc("mfa_host", &name);
    d["control_path"] = json!(cp);
    let up = alloc(&["up"], &d);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let job = up.allocation().job_id.unwrap();
    let nodes = testbed().info["nodes"].clone();

    let a = attach(
        &[
            "--command",
            "echo host=$(hostname); echo pwd=$(pwd); echo to-stderr >&2; cat /etc/slurm-tools-image; exit 7",
        ],
        &up.doc,
    );
    assert_eq!(a.code, 7, "exits with the command's code: {}", a.stderr);
    // The command's stdout on stdout, its stderr on stderr, as ssh gives them.
    assert!(!a.stdout.contains("to-stderr"), "{}", a.stdout);
    assert!(a.stderr.contains("to-stderr\n"), "{}", a.stderr);
    assert!(
        !a.stdout.contains('{') && a.stdout.lines().count() == 3,
        "only the command's lines: {}",
        a.stdout
    );
    assert!(
        a.stdout.contains("slurm-tools testbed image devbox"),
        "in the allocation's container: {}",
        a.stderr
    );
    assert!(
        a.stdout
            .contains(&format!("pwd={}", d["remote_cwd"].as_str().unwrap())),
        "{}",
        a.stderr
    );
    assert!(
        nodes
            .as_array()
            .unwrap()
            .iter()
            .any(|n| a.stdout.contains(&format!("host={}", n.as_str().unwrap()))),
        "on a compute node: {}",
        a.stderr
    );
    let s = a.attach_section();
    assert_eq!(s.job_id, job);
    assert_eq!(s.container, Some(format!("slurm-tools-{job}")));
    assert_eq!(s.exit_code, 7);
    assert!(!s.interactive);
    assert_schema(&a.doc);

    // An interactive shell, with a terminal (script(1) gives it one).
    let file = std::env::temp_dir().join(format!("st-attach-{}.json", std::process::id()));
    std::fs::write(&file, up.doc.to_string()).unwrap();
    let mut sh = Command::new("script");
    sh.args([
        "-qec",
        &format!("{} {}", bin("slurm-attach"), file.display()),
        "/dev/null",
    ]);
    let t = pipe(
        &mut sh,
        b"echo tty=$(tty | cut -c1-8) answer=$((6*7)); cat /etc/slurm-tools-image; exit 3\n",
    );
    let _ = std::fs::remove_file(&file);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&t.stdout),
        String::from_utf8_lossy(&t.stderr)
    );
    assert_eq!(t.status.code(), Some(3), "the shell's exit code: {said}");
    assert!(said.contains("answer=42"), "{said}");
    assert!(said.contains("tty=/dev/pts"), "a real pty: {said}");
    assert!(said.contains("slurm-tools testbed image devbox"), "{said}");

    // An IDE-style ssh entry: plain ssh and scp reach the node inside the allocation, through
    // the master (no new login).
    let cfg = std::env::temp_dir().join(format!("st-attach-ssh-{}.conf", std::process::id()));
    // The person's own lines, not all UTF-8 and with CRLF: kept byte for byte.
    let own: &[u8] =
        b"# the person's own lines stay (caf\xe9)\r\nHost keep-me\r\n    HostName example.invalid\n";
    std::fs::write(&cfg, own).unwrap();
    let e = attach(&["--ssh-config", &cfg.display().to_string()], &up.doc);
    assert_eq!(e.code, 0, "{}", e.stderr);
    // The alias names the cluster as well as the job.
    let held = up.typed();
    let cluster = held.slurm_cluster.or(held.ssh_host).unwrap();
    let alias = format!(
        "slurm-{}-{job}",
        shared::remote::layout::sanitize(&cluster, false)
    );
    assert_eq!(e.attach_section().ssh_alias, Some(alias.clone()));
    let bytes = std::fs::read(&cfg).unwrap();
    assert!(bytes.starts_with(own), "the person's bytes are kept");
    let written = String::from_utf8_lossy(&bytes).into_owned();
    assert!(written.contains("Host keep-me"), "{written}");
    assert!(written.contains(&format!("Host {alias}")), "{written}");
    // Written twice: still one entry.
    let again = attach(&["--ssh-config", &cfg.display().to_string()], &up.doc);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        String::from_utf8_lossy(&std::fs::read(&cfg).unwrap())
            .matches(&format!("Host {alias}"))
            .count(),
        1
    );
    let node = e.attach_section().node.unwrap();
    let via = Command::new("ssh")
        .args(["-F", &cfg.display().to_string(), &alias, "hostname; id -un"])
        .env("HOME", test_home())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&via.stdout).into_owned();
    assert!(
        via.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&via.stderr)
    );
    assert!(
        said.starts_with(&format!("{node}\n")),
        "the job's node: {said}"
    );
    assert!(said.contains(&testbed().s("cluster_user")), "{said}");
    let local = std::env::temp_dir().join(format!("st-attach-scp-{}", std::process::id()));
    std::fs::write(&local, "copied by scp\n").unwrap();
    let remote_file = format!(
        "{}/st-attach-scp-{}",
        testbed().remote_root(),
        std::process::id()
    );
    let scp = Command::new("scp")
        .args([
            "-q",
            "-F",
            &cfg.display().to_string(),
            &local.display().to_string(),
            &format!("{alias}:{remote_file}"),
        ])
        .env("HOME", test_home())
        .output()
        .unwrap();
    assert!(
        scp.status.success(),
        "{}",
        String::from_utf8_lossy(&scp.stderr)
    );
    assert_eq!(fixture::read(&remote_file), "copied by scp\n");
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&remote_file);
    let _ = std::fs::remove_file(&cfg);

    // A running job of slurm-submit, in its container and its own code tree.
    let (_fx, mut sd) = synced("attach-job");
    sd["ssh_host"] = json!(testbed().s("mfa_host"));
    sd["control_path"] = json!(cp);
    sd["recipe"] = json!("single");
    sd["container_image"] = json!(testbed().s("container_image_file"));
    sd["command"] = json!("echo job started; sleep 120");
    let sub = run("slurm-submit", &[], &sd);
    assert_eq!(sub.code, 0, "{}", sub.stderr);
    let submitted = sub.job();
    let jid = submitted.job_id.clone().unwrap();
    let tree = submitted.tree.clone().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !std::fs::read_to_string(submitted.stdout_path.as_deref().unwrap_or_default())
        .unwrap_or_default()
        .contains("job started")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not start"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let j = attach(
        &[
            "--command",
            "echo pwd=$(pwd); cat /etc/slurm-tools-image; echo job=$SLURM_JOB_ID",
        ],
        &sub.doc,
    );
    assert_eq!(j.code, 0, "{}", j.stderr);
    assert!(
        j.stdout.contains(&format!("pwd={tree}")),
        "the job's own tree: {}",
        j.stderr
    );
    assert!(
        j.stdout.contains("slurm-tools testbed image devbox"),
        "{}",
        j.stderr
    );
    assert!(j.stdout.contains(&format!("job={jid}")), "{}", j.stderr);
    assert_eq!(
        j.attach_section().container,
        submitted.container_name,
        "the job's named container"
    );
    let _ = Command::new("scancel").arg(&jid).status();
    wait_done(&jid, 60);
    let gone = attach(&["--command", "true"], &sub.doc);
    assert_eq!(gone.code, 4, "{}", gone.stderr);
    assert!(gone.stderr.contains("has ended"), "{}", gone.stderr);

    let down = alloc(&["down"], &up.doc);
    assert_eq!(down.code, 0, "{}", down.stderr);
    std::thread::sleep(Duration::from_secs(1));
    // A pending job: said, with nothing started.
    let filler = fill_node();
    let pend = run("slurm-submit", &[], &sd);
    assert_eq!(pend.code, 0, "{}", pend.stderr);
    let p = attach(&["--command", "true"], &pend.doc);
    let _ = Command::new("scancel").arg(&filler).status();
    let _ = Command::new("scancel").arg(pend.job_id()).status();
    assert_eq!(p.code, 3, "{}", p.stderr);
    assert!(p.stderr.contains("still pending"), "{}", p.stderr);

    mfa_logout(&cp);
    assert_eq!(
        log_count(&log, "Accepted keyboard-interactive") - before,
        1,
        "one authentication for everything"
    );
}
