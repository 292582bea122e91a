//! The local cluster itself works as TESTBED.md says, through each sshd, as the cluster user.

use crate::harness::*;
use serde_json::json;
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use std::time::{Duration, Instant};

fn ssh(host_key: &str, cp: Option<&str>) -> Ssh {
    let mut d = doc_for(host_key);
    if let Some(cp) = cp {
        d["control_path"] = cp.into();
    }
    crate::harness::ssh_of(&d)
}

fn remote(ssh: &Ssh, text: &'static str) -> String {
    let mut s = Script::new();
    s.raw(text);
    let out = ssh.run_script(&s, None, Duration::from_secs(120)).unwrap();
    assert!(
        out.success(),
        "remote failed ({:?}): {}\n{}",
        out.code,
        out.stdout_text(),
        out.stderr_tail
    );
    out.stdout_text()
}

fn check_cluster_through(ssh: &Ssh) {
    let tb = testbed();
    // Runs as the cluster user, not as the local user.
    assert_eq!(remote(ssh, "id -un\n").trim(), tb.s("cluster_user"));
    let sinfo = remote(ssh, "sinfo -h -o '%t %G'\n");
    assert!(
        // A node finishing another test's job shows `comp` (completing) for a moment.
        ["idle", "mix", "alloc", "comp", "plnd"]
            .iter()
            .any(|st| sinfo.contains(st)),
        "{sinfo}"
    );
    assert!(sinfo.contains("gpu:4"), "{sinfo}");

    // A passing and a failing job, their State and ExitCode from sacct.
    let ids = remote(
        ssh,
        "a=$(sbatch --parsable -A testacct -t 1 -o /dev/null --wrap true)\n\
         b=$(sbatch --parsable -A testacct -t 1 -o /dev/null --wrap 'exit 3')\n\
         echo \"$a $b\"\n",
    );
    let ids: Vec<&str> = ids.split_whitespace().collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = String::new();
    while Instant::now() < deadline {
        let mut s = Script::new();
        s.raw("sacct -X -n -P --format=JobID,State,ExitCode -j ")
            .glued(&format!("{},{}", ids[0], ids[1]))
            .unwrap()
            .raw("\n");
        seen = ssh
            .run_script(&s, None, Duration::from_secs(30))
            .unwrap()
            .stdout_text();
        if seen.contains(&format!("{}|COMPLETED|0:0", ids[0]))
            && seen.contains(&format!("{}|FAILED|3:0", ids[1]))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        seen.contains(&format!("{}|COMPLETED|0:0", ids[0])),
        "sacct: {seen}"
    );
    assert!(
        seen.contains(&format!("{}|FAILED|3:0", ids[1])),
        "sacct: {seen}"
    );
}

fn remote_owned(ssh: &Ssh, text: &str) -> (bool, String) {
    let mut s = Script::new();
    s.user_shell_text(text);
    let out = ssh.run_script(&s, None, Duration::from_secs(300)).unwrap();
    (
        out.success(),
        format!("{}{}", out.stdout_text(), out.stderr_tail),
    )
}

/// Real pyxis and enroot (no stand-in plugin): an image from the local registry in the form
/// enroot takes, the same image as a .sqsh file, mounts, workdir, a named container reused by a
/// later step with what a writable step installed in it.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn real_pyxis_and_enroot_run_the_registry_image_and_the_sqsh_file() {
    crate::needs_cluster!();
    let plugstack = std::fs::read_to_string("/etc/slurm/plugstack.conf.d/pyxis.conf").unwrap();
    assert!(plugstack.contains("spank_pyxis.so"), "{plugstack}");
    assert!(
        !std::path::Path::new("/etc/slurm/plugstack.conf.d/container-standin.conf").exists(),
        "no stand-in plugin is installed"
    );
    let ssh = ssh("direct_host", None);
    let image = shared::slurm::enroot_image(&testbed().s("container_image"));
    let file = testbed().s("container_image_file");
    let images = std::path::Path::new(&file)
        .parent()
        .unwrap()
        .display()
        .to_string();
    let (ok, out) = remote_owned(
        &ssh,
        &format!(
            "srun -A testacct -t 5 --container-image={image} --container-mounts={images}:/mnt/images:ro \
             --container-workdir=/mnt/images sh -c 'cat /etc/slurm-tools-image; pwd; ls; python3 --version'\n"
        ),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("pyxis: importing docker image: {image}")),
        "{out}"
    );
    assert!(out.contains("slurm-tools testbed image devbox"), "{out}");
    assert!(out.contains("/mnt/images\n"), "--container-workdir: {out}");
    assert!(out.contains("devbox.sqsh"), "--container-mounts: {out}");
    assert!(out.contains("Python 3"), "{out}");
    // The .sqsh file, a named container, a writable step that changes it, a later step that
    // sees the change, in one allocation; enroot lists it under pyxis's name for it.
    let (ok, out) = remote_owned(
        &ssh,
        &format!(
            "salloc -A testacct -t 5 sh -c 'srun --container-image={file} --container-name=probe --container-writable sh -c \"echo changed > /etc/probe-mark\" && srun --container-name=probe cat /etc/probe-mark && srun --container-name=probe sh -c \"echo uid=\\$(id -u)\" && srun enroot list && echo job=$SLURM_JOB_ID'\n"
        ),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("changed"),
        "the named container was reused: {out}"
    );
    let job = out
        .lines()
        .find_map(|l| l.strip_prefix("job="))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        out.contains(&format!("pyxis_{job}_probe")),
        "pyxis names it pyxis_<jobid>_<name>: {out}"
    );
    let (_, home) = remote_owned(&ssh, "id -u\n");
    assert!(
        out.contains(&format!("uid={}", home.trim())),
        "the job runs as the cluster user in the container: {out}"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_cluster_works_through_the_key_based_sshd() {
    crate::needs_cluster!();
    check_cluster_through(&ssh("direct_host", None));
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_cluster_works_through_the_mfa_sshd_with_one_authentication() {
    crate::needs_cluster!();
    let _guard = mfa_lock();
    let tb = testbed();
    let cp = control_path("testbed");
    let log = tb.s("mfa_sshd_log");
    let before = log_count(&log, "Accepted keyboard-interactive");
    mfa_login(&cp);
    check_cluster_through(&ssh("mfa_host", Some(&cp)));
    mfa_logout(&cp);
    assert_eq!(
        log_count(&log, "Accepted keyboard-interactive") - before,
        1,
        "only the master authenticates"
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_mfa_sshd_refuses_batch_logins_without_a_master() {
    crate::needs_cluster!();
    let tb = testbed();
    let out = std::process::Command::new("ssh")
        .args([
            "-F",
            &tb.ssh_config(),
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlPath=none",
            &tb.s("mfa_host"),
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied (keyboard-interactive)")
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn status_reports_every_part_running() {
    crate::needs_cluster!();
    let out = std::process::Command::new(repo_root().join("scripts/local-cluster"))
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for part in [
        "munged",
        "mariadb",
        "slurmdbd",
        "slurmctld",
        "slurmd",
        "sshd-direct",
        "sshd-mfa",
        "sshd-old",
        "sshd-totp",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(part) && l.contains("running")),
            "{part} not running:\n{text}"
        );
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_second_up_changes_nothing() {
    crate::needs_cluster!();
    let out = std::process::Command::new(repo_root().join("scripts/local-cluster"))
        .arg("up")
        .output()
        .unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    for word in [
        "starting",
        "restarting",
        "creating",
        "installing",
        "building",
    ] {
        assert!(
            !log.contains(word),
            "a second `up` did something ({word}):\n{log}"
        );
    }
}

/// The stand-ins refuse what the old tools they stand for refuse, and pass the rest to the real
/// tool: torchrun (hyphenated spellings are newer), git 2.6 (`stash push`, `remote get-url`),
/// without git-lfs, tmux 1.8 (`=name` targets), flock on a filesystem without it, sleep without fractions.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_stand_ins_refuse_what_the_old_tools_refuse() {
    crate::needs_cluster!();
    let sh = |cmd: &str| {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) = sh("torchrun --nproc-per-node=2 --nnodes=1 true");
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("unrecognized arguments: --nproc-per-node=2"),
        "{text}"
    );
    let (code, text) = sh("torchrun --nproc_per_node=2 --nnodes=1 --node_rank=0 --rdzv_id=1 --rdzv_backend=c10d --rdzv_endpoint=h:1 sh -c 'echo rank=$RANK'");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("rank=0") && text.contains("rank=1"), "{text}");

    let bin = format!("{}/bin", testbed().s("old_userland_dir"));
    let dir = tempdir();
    let d = dir.path().display();
    let old = |cmd: &str| sh(&format!("cd {d} && PATH={bin}:$PATH && {cmd}"));
    assert_eq!(
        old("git init -q . && git --version")
            .1
            .trim_start()
            .get(..17),
        Some("git version 2.6.6")
    );
    let (code, text) = old("git stash push -u -q -m x");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("usage: git stash"), "{text}");
    let (code, text) = old("git -c user.name=t -c user.email=t@l commit -q --allow-empty -m i && echo x >f && git -c user.name=t -c user.email=t@l stash save -u -q x && git stash list");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("On master: x") || text.contains(": x"),
        "{text}"
    );
    let (code, text) = old("git remote get-url origin");
    assert_eq!(code, Some(129), "{text}");
    assert_eq!(old("git config --get remote.origin.url").0, Some(1));
    // No git-lfs there (the real git-lfs is installed on this machine: `git lfs` works outside).
    let (code, text) = old("git lfs version");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("'lfs' is not a git command"), "{text}");
    assert_eq!(sh("git lfs version").0, Some(0));
    let (code, text) = old("tmux has-session -t =nosuch");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("can't find session"), "{text}");
    assert_eq!(old("tmux -V").1.trim(), "tmux 1.8");
    let (code, text) = old("flock -w 1 9 9>lock");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("Function not implemented"), "{text}");
    assert_eq!(old("sleep 0.1").0, Some(1));
    assert_eq!(old("sleep 0").0, Some(0));
    assert!(old("tar --version").1.contains("bsdtar"));
}

/// The suite's own safety net (harness.rs `watch_failures`): a test that fails after a tool
/// started a job cancels that job, so it never holds the nodes the tests after it wait for.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_failing_test_cancels_the_job_its_tools_started() {
    crate::needs_cluster!();
    let (_fx, mut d) = crate::fixture::synced("failing-cancels");
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 600");
    let failed = std::thread::Builder::new()
        .name(format!("{DELIBERATE}: submits, then fails"))
        .spawn(move || {
            let s = run("slurm-submit", &[], &d);
            assert_eq!(s.code, 0, "{}", s.stderr);
            panic!("job {} submitted", s.job_id());
        })
        .unwrap()
        .join()
        .expect_err("the thread failed");
    let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
    let id = message
        .strip_prefix("job ")
        .and_then(|m| m.strip_suffix(" submitted"))
        .unwrap_or_else(|| panic!("{message}"));
    let (state, _) = crate::fixture::finished_by(id, 60)
        .unwrap_or_else(|last| panic!("job {id} still there 60 s after its test failed: {last}"));
    assert_eq!(state, "CANCELLED", "job {id}");
}
