//! The second, modern site of the test bed (scripts/testbed/modern-site.sh): Slurm 24.11 without
//! accounting, OpenSSH 10 asking the account's password and then a TOTP code with
//! PerSourcePenalties on as shipped, two GPU nodes of another type. The tools proven there, and
//! one person's two clusters used together: one document moved between them by changing only
//! `slurm_cluster`, `slurm-resolve` choosing each by GPU type, `slurm-runs` following both.

pub(crate) mod apptainer;
mod place;

use crate::harness::*;
use crate::watch::submit_and_watch;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Held by a test that counts the modern login node's accepted logins, and by every other
/// test while it logs in.
static LOGINS: Mutex<()> = Mutex::new(());

pub(crate) fn logins_lock() -> MutexGuard<'static, ()> {
    LOGINS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `command` (sh) on a host of the modern site, as the cluster user; its stdout.
fn on_modern(host: &str, command: &str) -> String {
    let user = testbed().s("modern_cluster_user");
    local_cluster(&[
        "modern-exec",
        host,
        "runuser",
        "-u",
        &user,
        "--",
        "sh",
        "-c",
        command,
    ])
}

/// Logins the modern login node accepted so far (its sshd's log).
fn accepted() -> usize {
    log_count(
        &testbed().s("modern_sshd_log"),
        "Accepted keyboard-interactive",
    )
}

/// The person's one login (TEST STAND-IN for typing the password and the code: the test bed's
/// askpass answers both prompts) at `control_path`.
fn login(control_path: &str) {
    local_cluster(&["modern-login", control_path]);
}

fn logout(control_path: &str) {
    master_exit("modern_host", control_path);
}

/// A person's working copy of the sample project, cloned from its network origin.
fn sample_clone(dir: &Path) -> PathBuf {
    let repo = dir.join("sample");
    let out = Command::new("git")
        .args(["clone", "-q", &testbed().s("origin_url")])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    repo
}

/// One job document for either cluster: no login host, partition, account or remote folder in
/// it (the catalog says those), so only `slurm_cluster` changes between the sites.
fn job(repo: &Path, cluster: &str, control_path: &str, name: &str) -> Value {
    let tb = testbed();
    json!({
        "slurm_cluster": cluster,
        "slurm_user": tb.s("cluster_user"),
        "ssh_config_file": tb.ssh_config(),
        "control_path": control_path,
        "repo_url": tb.s("origin_url"),
        "repo_root": repo.display().to_string(),
        "job_name": name,
        "time_limit": "00:05:00",
        "recipe": "single",
        "command": "./build/hello",
        "build_command": "./build.sh",
        "work_dir": format!("{name}-{}", std::process::id()),
        "monitor_timeout_seconds": 300,
    })
}

/// A tool with its own state directory (its own ledger and local logs).
fn step(state: &Path, tool_name: &str, args: &[&str], input: &Value) -> Run {
    let mut c = tool(tool_name);
    c.env("SLURM_TOOLS_STATE_DIR", state).args(args);
    let r = run_raw(c, input.to_string().as_bytes());
    assert_eq!(r.code, 0, "{tool_name} {args:?}: {}", r.stderr);
    r
}

/// resolve, preflight, both syncs: the document a job is submitted from.
fn synced(state: &Path, doc: &Value) -> Value {
    let catalog = testbed().s("catalog");
    let r = step(state, "slurm-resolve", &["--catalog", &catalog], doc);
    let p = step(state, "slurm-ssh-preflight", &[], &r.doc);
    let t = step(state, "slurm-sync-tracked", &[], &p.doc);
    step(state, "slurm-sync-untracked", &[], &t.doc).doc
}

/// The main job: resolve, preflight, both syncs, the build job watched, the run watched.
fn main_job(state: &Path, doc: &Value) -> Value {
    let s = synced(state, doc);
    let b = step(state, "slurm-submit", &["--build"], &s);
    let bw = step(state, "slurm-watch", &["--interval", "1"], &b.doc);
    assert_eq!(bw.report().status.name(), "PASSED", "{}", bw.stderr);
    let r = step(state, "slurm-submit", &[], &bw.doc);
    step(state, "slurm-watch", &["--interval", "1"], &r.doc).doc
}

/// A synced document on the modern site for one test, with its own login and control path.
struct ModernJob {
    _dir: tempfile::TempDir,
    state: PathBuf,
    cp: String,
    doc: Value,
    /// The remote clone this test alone syncs into ([`ModernJob::own_clone`]), removed at the end.
    own_clone: Option<String>,
}

impl ModernJob {
    /// Synced into the site's shared clone of the sample (`remote_repo_path` from the catalog),
    /// which every test's checkout syncs into: for tests whose commands run in their jobs' own
    /// code trees, as every submission's does.
    fn new(name: &str) -> ModernJob {
        ModernJob::synced_into(name, None)
    }

    /// Synced into a clone of its own: for a test whose command runs in the clone itself
    /// (`slurm-alloc exec --sync` without `--own-tree`), which another test's sync from another
    /// checkout would change under it (the untracked sync removes the files that checkout does
    /// not have: CI once saw `cat modern-note.txt` fail so).
    fn own_clone(name: &str) -> ModernJob {
        let path = format!(
            "{}/st-clones/{name}-{}/sample",
            testbed().s("modern_remote_root"),
            std::process::id()
        );
        ModernJob::synced_into(name, Some(path))
    }

    fn synced_into(name: &str, clone: Option<String>) -> ModernJob {
        let dir = tempdir();
        let repo = sample_clone(dir.path());
        let state = dir.path().join("state");
        let cp = control_path(&format!("modern-{name}"));
        {
            // Not while a test counts the logins.
            let _counting = logins_lock();
            login(&cp);
        }
        let mut d = job(&repo, "modern", &cp, name);
        if let Some(path) = &clone {
            d["remote_repo_path"] = json!(path);
        }
        let doc = synced(&state, &d);
        ModernJob {
            _dir: dir,
            state,
            cp,
            doc,
            own_clone: clone,
        }
    }
}

impl Drop for ModernJob {
    fn drop(&mut self) {
        if let Some(path) = &self.own_clone {
            let dir = Path::new(path).parent().map(|d| d.display().to_string());
            if let Some(Ok(dir)) = dir.as_deref().map(shared::remote::quote::quote) {
                on_modern("modern-login", &format!("rm -rf -- {dir}"));
            }
        }
        logout(&self.cp);
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_modern_site_is_up_as_documented() {
    crate::needs_cluster!();
    let tb = testbed();
    for key in [
        "modern_host",
        "modern_cluster_user",
        "modern_partition",
        "modern_account",
        "modern_slurm_version",
        "modern_password_file",
        "modern_totp_secret_file",
        "modern_gpu_type",
    ] {
        assert!(tb.info.get(key).is_some(), "info has no {key}");
    }
    assert!(tb.s("modern_slurm_version").starts_with("24.11"));
    assert_ne!(tb.s("modern_gpu_type"), tb.s("gpu_type"));
    let catalog: Value =
        serde_json::from_str(&std::fs::read_to_string(tb.s("catalog")).unwrap()).unwrap();
    let names: BTreeSet<String> = catalog["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster_name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains("local") && names.contains("modern"),
        "{names:?}"
    );

    let version = on_modern("modern-login", "sinfo --version");
    assert!(version.contains("24.11"), "{version}");
    let hosts: BTreeSet<String> = on_modern("modern-login", "srun -N 2 hostname")
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(hosts.len(), 2, "{hosts:?}");
    // Without accounting, Slurm 24.11's sacct says so and fails.
    let sacct = on_modern("modern-login", "sacct -n 2>&1; echo rc=$?");
    assert!(
        sacct.contains("accounting storage is disabled") && sacct.contains("rc=1"),
        "{sacct}"
    );

    // ssh asks for the password and then a code: an askpass that records the prompts answers.
    let dir = tempdir();
    let prompts = dir.path().join("prompts");
    let askpass = dir.path().join("askpass");
    write(
        &askpass,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{p}'\nexec '{real}' \"$1\"\n",
            p = prompts.display(),
            real = tb.s("modern_askpass")
        ),
    );
    std::fs::set_permissions(
        &askpass,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let _counting = logins_lock();
    let out = Command::new("ssh")
        .args(["-F", &tb.ssh_config(), "-o", "ControlPath=none"])
        .arg(tb.s("modern_host"))
        .arg("echo in")
        .env("SSH_ASKPASS", &askpass)
        .env("SSH_ASKPASS_REQUIRE", "force")
        .env("DISPLAY", "none")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let asked = std::fs::read_to_string(&prompts).unwrap();
    let asked: Vec<&str> = asked.lines().collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("Password"), "{asked:?}");
    assert!(asked[1].contains("Verification code"), "{asked:?}");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn one_document_runs_on_both_clusters_by_changing_only_slurm_cluster() {
    crate::needs_cluster!();
    let _one = logins_lock();
    let dir = tempdir();
    let repo = sample_clone(dir.path());
    let state = dir.path().join("state");
    let cp = control_path("both-%C");
    let local = job(&repo, "local", &cp, "both-sites");
    let mut modern = local.clone();
    modern["slurm_cluster"] = json!("modern");

    let before = accepted();
    login(&cp);
    let on_modern = main_job(&state, &modern);
    let on_local = main_job(&state, &local);
    for (site, d) in [("modern", &on_modern), ("local", &on_local)] {
        let r = report_of(d);
        assert_eq!(r.status.name(), "PASSED", "{site}: {r:?}");
        assert_eq!(
            r.excerpt,
            ["hello from the sample project"],
            "{site}: {r:?}"
        );
        assert_eq!(
            section_of::<shared::contract::schema::Resolve>(d, "resolve").cluster_name,
            site
        );
    }
    // What differs was learned, not assumed: the login host and the home from the catalog, the
    // partition is each site's default, the missing accounting from preflight's one round trip.
    let modern_doc = typed_of(&on_modern);
    assert_eq!(modern_doc.ssh_host, Some(testbed().s("modern_host")));
    assert_eq!(modern_doc.partition, None);
    let accounting = |d: &Value| preflight_of(d).remote.accounting;
    use shared::contract::schema::Accounting;
    assert_eq!(
        accounting(&on_modern),
        Some(Accounting::Disabled),
        "{:?}",
        preflight_of(&on_modern)
    );
    assert_eq!(report_of(&on_modern).source.to_string(), "scontrol");
    assert_ne!(accounting(&on_local), Some(Accounting::Disabled));
    assert!(modern_doc
        .remote_repo_path
        .unwrap_or_default()
        .starts_with(&testbed().s("modern_cluster_home")));
    assert_eq!(
        accepted() - before,
        1,
        "the whole modern pipeline rode on the person's one login"
    );

    // A run still going on each cluster, then both clusters in one listing: one squeue each,
    // on the masters already there.
    for d in [&on_modern, &on_local] {
        let mut d = d.clone();
        d["recipe"] = json!("batch");
        d["command"] = json!("sleep 30");
        step(&state, "slurm-submit", &[], &d);
    }
    let trace = dir.path().join("trace.jsonl");
    let out = tool("slurm-runs")
        .env("SLURM_TOOLS_STATE_DIR", &state)
        .env("SLURM_TOOLS_TRACE", &trace)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let clusters: BTreeSet<String> = listed
        .iter()
        .map(|r| r["cluster"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        clusters,
        BTreeSet::from(["local".to_string(), "modern".to_string()]),
        "{listed:?}"
    );
    let t = trace_lines(&trace);
    assert_eq!(connecting_ssh(&t).len(), 2, "one ssh execution per cluster");
    let calls: Vec<&Value> = t.iter().filter(|e| e["event"] == "slurm-calls").collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for c in calls {
        assert_eq!(c["squeue"], 1, "{c}");
    }
    assert_eq!(accepted() - before, 1, "slurm-runs logged in nowhere");
    logout(&cp);
    master_exit("direct_host", &cp);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_resolve_picks_each_cluster_by_gpu_type() {
    crate::needs_cluster!();
    let tb = testbed();
    for (gpu, cluster) in [
        (tb.s("modern_gpu_type"), "modern"),
        (tb.s("gpu_type"), "local"),
    ] {
        let r = run(
            "slurm-resolve",
            &["--catalog", &tb.s("catalog")],
            &json!({"device_type": gpu, "required_devices_per_node": 4}),
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.resolve().cluster_name, cluster, "{gpu}: {}", r.stderr);
        assert_eq!(r.typed().slurm_cluster.as_deref(), Some(cluster));
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_watch_verdicts_on_the_modern_site() {
    crate::needs_cluster!();
    let j = ModernJob::new("verdicts");
    let w = submit_and_watch(&j.doc, "single", "echo part; exit 3", &[], &[]);
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "FAILED", "{}", w.stderr);
    assert_eq!(w.report().exit_code.as_deref(), Some("3:0"));

    let w = submit_and_watch(
        &j.doc,
        "single",
        "echo working; sleep 2; echo 'NCCL watchdog: Hang Detected on rank 0'; sleep 60",
        &[],
        &[],
    );
    assert_eq!(w.report().status.name(), "HANG_DETECTED", "{}", w.stderr);

    let mut d = j.doc.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("sleep 120");
    let s = step(&j.state, "slurm-submit", &[], &d);
    let id = s.job_id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(4));
        on_modern("modern-login", &format!("scancel {id}"));
    });
    let w = run("slurm-watch", &["--interval", "2"], &s.doc);
    killer.join().unwrap();
    let r = w.report();
    assert_eq!(r.status.name(), "CANCELLED", "{}", w.stderr);
    // Who cancelled is in accounting only: without it the report does not guess.
    assert_eq!(r.cancelled_by, None);
    assert_eq!(r.summary, "the job was cancelled");
}

/// Sizing from history on a cluster without accounting: said, nothing guessed.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn sizing_from_history_on_the_modern_site_says_it_keeps_no_accounting() {
    crate::needs_cluster!();
    let j = ModernJob::new("sizing");
    let name = format!("st-sizing-modern-{}", std::process::id());
    let w = submit_and_watch(
        &j.doc,
        "single",
        "echo sized",
        &[("job_name", json!(name))],
        &[],
    );
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let mut d = j.doc.clone();
    d["job_name"] = json!(name);
    d["size_from_history"] = json!(true);
    let r = run("slurm-resolve", &["--catalog", &testbed().s("catalog")], &d);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r
        .resolve()
        .sized_from_history
        .expect("the resolve section says what sizing did");
    assert_eq!(s.runs, 1, "{s:?}");
    assert!(s.filled.is_empty(), "{s:?}");
    assert!(s.note.contains("keeps no accounting"), "{s:?}");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_walltime_ends_in_timeout_on_the_modern_site() {
    crate::needs_cluster!();
    let j = ModernJob::new("walltime");
    let w = submit_and_watch(
        &j.doc,
        "batch",
        "echo started; sleep 300",
        &[("time_limit", json!("00:01:00"))],
        &[],
    );
    assert_eq!(w.code, 1, "{}", w.stderr);
    assert_eq!(w.report().status.name(), "TIMEOUT", "{}", w.stderr);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn two_node_recipes_run_across_both_modern_nodes() {
    crate::needs_cluster!();
    let j = ModernJob::new("nodes");
    for (recipe, command) in [
        (
            "distributed",
            "sh -c 'echo rank=$RANK world=$WORLD_SIZE host=$(hostname)'",
        ),
        (
            "launcher",
            "sh -c 'echo rank=$RANK world=$WORLD_SIZE host=$(hostname)'",
        ),
        ("mpi", "sh -c 'echo pmix rank=$PMIX_RANK host=$(hostname)'"),
        (
            "batch",
            "srun --ntasks-per-node=1 sh -c 'echo host=$(hostname)'",
        ),
    ] {
        let w = submit_and_watch(
            &j.doc,
            recipe,
            command,
            &[
                ("node_count", json!(2)),
                ("required_devices_per_node", json!(2)),
            ],
            &["--interval", "1"],
        );
        let r = w.report();
        assert_eq!(r.status.name(), "PASSED", "{recipe}: {}", w.stderr);
        let out = std::fs::read_to_string(r.local_log.unwrap()).unwrap();
        let hosts: BTreeSet<&str> = testbed().info["modern_nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_str())
            .filter(|n| out.contains(n))
            .collect();
        assert_eq!(hosts.len(), 2, "{recipe} ran on both nodes: {out}");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_wrong_code_on_the_modern_site_is_said_as_such_and_never_retried() {
    crate::needs_cluster!();
    let tb = testbed();
    let dir = tempdir();
    let cp = control_path("modern-wrong");
    let mut d = doc_for("modern_host");
    d["control_path"] = json!(cp);
    d["mfa_style"] = json!(true);
    d["slurm_password"] = json!(std::fs::read_to_string(tb.s("modern_password_file"))
        .unwrap()
        .trim());
    let f = dir.path().join("doc.json");
    std::fs::write(&f, d.to_string()).unwrap();
    let log = tb.s("modern_sshd_log");
    // OpenSSH 10 logs the refused code as PAM's failure (the client leaves before a retry).
    let failed = || log_count(&log, "PAM: Authentication failure");
    let _counting = logins_lock();
    let before = (accepted(), failed());
    let pane = crate::totp::Pane::new("modern-wrong");
    pane.type_line(&format!(
        "{} --establish {} > {}; echo EXIT=$?",
        bin("slurm-ssh-preflight"),
        f.display(),
        dir.path().join("out.json").display()
    ));
    pane.wait_for("Verification code:", 30);
    let secret = std::fs::read_to_string(tb.s("modern_totp_secret_file")).unwrap();
    let right = Command::new("oathtool")
        .args(["--totp", "-b", secret.trim()])
        .output()
        .unwrap();
    let right: u32 = String::from_utf8_lossy(&right.stdout)
        .trim()
        .parse()
        .unwrap();
    pane.type_line(&format!("{:06}", (right + 500_000) % 1_000_000));
    let screen = pane.wait_for("\nEXIT=", 60);
    assert!(screen.contains("EXIT=3"), "{screen}");
    assert!(
        screen.contains("\"Verification code:\" was refused"),
        "{screen}"
    );
    assert_eq!(
        screen.matches("Verification code:").count(),
        2,
        "asked once (the error names it once more), never again:\n{screen}"
    );
    assert_eq!(accepted(), before.0);
    assert_eq!(
        failed(),
        before.1 + 1,
        "one failed attempt: OpenSSH 10's penalty for this address grows with each, so the tool never retries"
    );
    // One failure stays under the penalty's threshold: the person's next login goes through.
    login(&cp);
    logout(&cp);
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_attach_and_fetch_on_the_modern_site() {
    crate::needs_cluster!();
    let j = ModernJob::own_clone("alloc");
    let mut a = j.doc.clone();
    a["job_name"] = json!(format!("st-modern-alloc-{}", std::process::id()));
    a["node_count"] = json!(2);
    let up = step(&j.state, "slurm-alloc", &["up", "--wait"], &a);
    assert!(up.allocation().job_id.is_some(), "{}", up.doc);
    let ex = step(
        &j.state,
        "slurm-alloc",
        &["exec", "--", "echo exec-ran-on-$(hostname) in $(pwd)"],
        &up.doc,
    );
    assert!(ex.stdout.contains("exec-ran-on-gn"), "{}", ex.stderr);
    // A local change, sent with the command.
    let repo = PathBuf::from(j.doc["repo_root"].as_str().unwrap());
    std::fs::write(repo.join("modern-note.txt"), "from the laptop\n").unwrap();
    let sx = step(
        &j.state,
        "slurm-alloc",
        &["exec", "--sync", "--", "cat modern-note.txt"],
        &ex.doc,
    );
    assert_eq!(sx.stdout, "from the laptop\n", "{}", sx.stderr);
    let at = step(
        &j.state,
        "slurm-attach",
        &["--command", "echo attached-on-$(hostname)"],
        &sx.doc,
    );
    assert!(at.stdout.contains("attached-on-gn"), "{}", at.stderr);
    assert_eq!(at.attach_section().exit_code, 0, "{}", at.stderr);
    let down = step(&j.state, "slurm-alloc", &["down"], &at.doc);
    let id = down.allocation().job_id.unwrap();
    let state = on_modern("modern-login", &format!("squeue -h -j {id} -o %T"));
    assert!(
        !state.contains("RUNNING"),
        "the allocation was released: {state}"
    );

    // A finished job's outputs come home.
    let mut d = j.doc.clone();
    d["recipe"] = json!("batch");
    d["command"] = json!("mkdir -p out && echo result > out/r.txt");
    let s = step(&j.state, "slurm-submit", &[], &d);
    let w = step(&j.state, "slurm-watch", &["--interval", "1"], &s.doc);
    assert_eq!(w.report().status.name(), "PASSED");
    let dest = tempdir();
    let to = dest.path().join("results");
    let f = step(
        &j.state,
        "slurm-fetch",
        &["-p", "out/*", "--to", to.to_str().unwrap()],
        &w.doc,
    );
    assert_eq!(
        std::fs::read_to_string(to.join("tree/out/r.txt")).unwrap(),
        "result\n",
        "{:?}",
        f.decoded::<shared::contract::schema::Fetch>("fetch")
    );
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn forward_reaches_a_jobs_server_on_the_modern_site_through_the_one_login() {
    crate::needs_cluster!();
    let j = ModernJob::new("forward");
    let port_file = format!(
        "{}/st-forward-{}.port",
        testbed().s("modern_remote_root"),
        std::process::id()
    );
    let mut d = j.doc.clone();
    d["recipe"] = json!("single");
    d["command"] = json!(format!(
        "port=$((20000 + $$ % 20000)); dir=$(mktemp -d); echo hello-from-the-modern-job > $dir/index.html; cd $dir; echo $port > {port_file}; exec python3 -m http.server $port --bind 0.0.0.0"
    ));
    let sub = step(&j.state, "slurm-submit", &[], &d);
    let f = forward_when_served(&sub.doc, &port_file);
    let lp = f.forward().local_port;
    let body = http_get(lp).expect("the forward answers");
    assert!(body.contains("hello-from-the-modern-job"), "{body}");
    let c = run("slurm-forward", &["--cancel"], &f.doc);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(http_get(lp).is_none(), "gone after --cancel");
    let id = sub.job_id();
    let id = id.as_str();
    on_modern("modern-login", &format!("scancel {id}"));
}
