//! Placement across the two sites (issue 36): `slurm-resolve --place` asks every catalog cluster
//! that can serve the request, one ssh execution each, when Slurm would start exactly this
//! request, and takes the earliest; a busy site loses and says why, a cluster without a master is
//! listed with the command that opens one.

use super::*;
use shared::contract::schema::{Placement, PlacementCandidate};
use std::collections::BTreeMap;

/// Held by a test of this file for its whole run: each makes a site busy with a filler job and
/// reads the other's figures, so two at once would see each other's fillers.
static BUSY_SITES: Mutex<()> = Mutex::new(());

fn busy_sites() -> MutexGuard<'static, ()> {
    BUSY_SITES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Cancels the job it names on the site it names when dropped.
struct Cancel(&'static str, String);

impl Drop for Cancel {
    fn drop(&mut self) {
        if self.0 == "modern" {
            on_modern("modern-login", &format!("scancel {}", self.1));
        } else {
            let _ = Command::new("scancel").arg(&self.1).status();
        }
    }
}

/// A filler job of the cluster user's own on `site` ("modern" or "first"), once it runs.
fn filler(site: &'static str, args: &str) -> Cancel {
    if site != "modern" {
        let words: Vec<&str> = args.split_whitespace().collect();
        return Cancel(site, first_site_filler(&words));
    }
    let id = on_modern(
        "modern-login",
        &format!("cd /tmp && sbatch --parsable -o /dev/null -J st-filler --time=00:30:00 {args} --wrap 'sleep 900'"),
    )
    .trim()
    .to_string();
    let c = Cancel(site, id.clone());
    wait_running(&format!("the filler {args} on {site}"), || {
        on_modern("modern-login", &format!("squeue -h -j {id} -o %T"))
    });
    c
}

/// `slurm-resolve --place` on the test bed's catalog (local by key, local-mfa and modern behind
/// logins); its run and the ssh executions it made, per login host.
fn place(doc: &Value, trace: &Path) -> (Run, BTreeMap<String, usize>) {
    place_with(doc, trace, &[])
}

/// [`place`] with more flags.
fn place_with(doc: &Value, trace: &Path, flags: &[&str]) -> (Run, BTreeMap<String, usize>) {
    let _ = std::fs::remove_file(trace);
    let mut c = tool("slurm-resolve");
    c.env("SLURM_TOOLS_TRACE", trace)
        .args(["--catalog", &testbed().s("catalog"), "--place"])
        .args(flags);
    let r = run_raw(c, doc.to_string().as_bytes());
    let mut per_host = BTreeMap::new();
    for argv in connecting_ssh(&trace_lines(trace)) {
        let host = argv
            .iter()
            .position(|a| a == "--")
            .and_then(|i| argv.get(i + 1))
            .cloned()
            .unwrap_or_default();
        *per_host.entry(host).or_insert(0) += 1;
    }
    (r, per_host)
}

fn placement(r: &Run) -> Placement {
    r.decoded("placement")
}

fn candidate(r: &Run, name: &str) -> PlacementCandidate {
    let p = placement(r);
    p.candidates
        .iter()
        .find(|c| c.cluster_name == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name}: {p:?}"))
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn placement_asks_each_cluster_once_and_the_busy_site_loses_either_way() {
    crate::needs_cluster!();
    let _sites = busy_sites();
    let dir = tempdir();
    let trace = dir.path().join("trace.jsonl");
    let cp = control_path("place");
    {
        let _counting = logins_lock();
        login(&cp);
    }
    let tb = testbed();
    let doc = json!({
        "required_devices_per_node": 1,
        "slurm_user": tb.s("cluster_user"),
        "ssh_config_file": tb.ssh_config(),
        "control_path": cp,
        "command": "true",
    });

    // The modern site's GPUs all taken: the first site starts it now.
    let busy = filler("modern", "-N 2 --gpus-per-node=4");
    let (r, per_host) = place(&doc, &trace);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = placement(&r);
    assert_eq!(p.policy, "earliest_start", "{p:?}");
    assert_eq!(p.chosen.as_deref(), Some("local"), "{p:?}");
    assert_eq!(r.typed().slurm_cluster.as_deref(), Some("local"));
    assert_eq!(
        r.resolve().selected_by,
        shared::contract::schema::SelectedBy::Placement
    );
    let local = candidate(&r, "local");
    assert!(local.chosen, "{local:?}");
    assert_eq!(local.state, "answered", "{local:?}");
    assert!(local.free_gpus.unwrap() >= 1, "{local:?}");
    assert!(
        local.reason.starts_with("earliest estimated start"),
        "{local:?}"
    );
    let modern = candidate(&r, "modern");
    assert_eq!(modern.state, "answered", "{modern:?}");
    assert_eq!(modern.free_gpus, Some(0), "{modern:?}");
    assert_eq!(modern.total_gpus, Some(8), "{modern:?}");
    assert!(modern.starts_in_seconds.unwrap() > 600, "{modern:?}");
    // Against the first site's own estimate: "now", or a minute or so when a job of an earlier
    // test is still ending there (Slurm's estimate, not a free-GPU count).
    assert!(
        modern.reason.starts_with("starts later: in ")
            && modern.reason.contains("(0 GPUs free now), against ")
            && modern.reason.ends_with(" on local"),
        "{modern:?}"
    );
    assert!(
        local.starts_in_seconds.unwrap_or(0) < modern.starts_in_seconds.unwrap(),
        "{local:?} {modern:?}"
    );
    let mfa = candidate(&r, "local-mfa");
    assert_eq!(mfa.state, "login_needed", "{mfa:?}");
    assert!(
        mfa.login_command.unwrap().contains("slurm-mfa"),
        "{:?}",
        candidate(&r, "local-mfa")
    );
    // One ssh execution per cluster (the one without a master: one refused attempt).
    assert_eq!(
        per_host,
        BTreeMap::from([
            ("slurm-direct".to_string(), 1),
            ("slurm-mfa".to_string(), 1),
            ("slurm-modern".to_string(), 1)
        ]),
        "{}",
        r.stderr
    );

    // --wait-login: the person opens the MFA cluster's master while placement waits; that
    // cluster is then asked too.
    let waiting = {
        let (doc, trace) = (doc.clone(), dir.path().join("trace-wait.jsonl"));
        std::thread::spawn(move || place_with(&doc, &trace, &["--wait-login", "60"]).0)
    };
    std::thread::sleep(Duration::from_secs(2));
    let r = {
        // Not while a test counts the MFA host's logins.
        let _counting = mfa_lock();
        mfa_login(&cp);
        let r = waiting.join().unwrap();
        mfa_logout(&cp);
        r
    };
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mfa = candidate(&r, "local-mfa");
    assert_eq!(mfa.state, "answered", "{mfa:?}: {}", r.stderr);
    assert!(mfa.free_gpus.is_some(), "{mfa:?}");
    assert!(
        r.stderr.contains("placement: waiting up to"),
        "{}",
        r.stderr
    );
    drop(busy);

    // The first site blocked for this request: its QOS gpucap's per-user GPU cap (4) used up by a
    // running job of the same user. The modern site (no accounting, no such cap) takes it,
    // whatever its estimate; the first site says what blocks it.
    let qos = tb.s("capped_qos");
    let _capped = filler("first", &format!("--qos={qos} --gpus-per-node=4"));
    let mut capped = doc.clone();
    capped["qos"] = json!(qos);
    let (r, _) = place(&capped, &trace);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        placement(&r).chosen.as_deref(),
        Some("modern"),
        "{:?}",
        placement(&r)
    );
    assert_eq!(r.typed().slurm_cluster.as_deref(), Some("modern"));
    let local = candidate(&r, "local");
    let blocked = local
        .blocked_by
        .clone()
        .unwrap_or_else(|| panic!("{local:?}"));
    assert!(
        blocked.starts_with(&format!(
            "your QOS {qos} allows 4 GPUs per user and your running jobs "
        )),
        "{local:?}"
    );
    assert!(local.reason.starts_with("blocked: your QOS"), "{local:?}");
    logout(&cp);

    // One literal control path would be one socket for every cluster: refused, nothing asked.
    let mut literal = doc.clone();
    literal["control_path"] = json!("/tmp/st-place-one-socket");
    let (r, per_host) = place(&literal, &trace);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.error().field.as_deref(),
        Some("control_path"),
        "{:?}",
        r.error()
    );
    assert!(per_host.is_empty(), "{per_host:?}");
}

/// A race on both sites (issue 36): the same job submitted to the first site (free) and to the
/// modern one (its GPUs taken), `slurm-watch --race`: the one that starts first is kept and
/// watched to its verdict, the other is cancelled, recorded in the ledger as the race's, and no
/// job of this run is left queued on either site.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_race_on_both_sites_keeps_the_first_to_start_and_cancels_the_other() {
    crate::needs_cluster!();
    let _sites = busy_sites();
    let modern = ModernJob::new("race");
    let (_fx, first) = crate::fixture::synced("race");
    let name = format!("st-race-{}", std::process::id());
    let set = |d: &Value| {
        let mut d = d.clone();
        d["job_name"] = json!(name);
        d["recipe"] = json!("batch");
        d["command"] = json!("echo raced on $(hostname); sleep 10");
        d["gpus_per_node"] = json!(1);
        d
    };
    let _busy = filler("modern", "-N 2 --gpus-per-node=4");
    let m = run("slurm-submit", &[], &set(&modern.doc));
    assert_eq!(m.code, 0, "{}", m.stderr);
    let m_id = m.job_id();
    let _m_cancel = Cancel("modern", m_id.clone());
    let f = run("slurm-submit", &[], &set(&first));
    assert_eq!(f.code, 0, "{}", f.stderr);
    let f_id = f.job_id();
    let dir = tempdir();
    let other = dir.path().join("modern.json");
    std::fs::write(&other, m.doc.to_string()).unwrap();

    let watching = {
        let (other, input) = (other.clone(), f.doc.clone());
        std::thread::spawn(move || {
            run(
                "slurm-watch",
                &["--interval", "2", "--race", other.to_str().unwrap()],
                &input,
            )
        })
    };
    // While the winner runs: exactly one job of this run on the two sites, and it is running.
    let queued = |site: &str| -> String {
        let q = format!("squeue -h -t PENDING,RUNNING -n {name} -o %i:%T");
        if site == "modern" {
            on_modern("modern-login", &q)
        } else {
            let out = Command::new("sh").args(["-c", &q]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (m_q, f_q) = (queued("modern"), queued("first"));
        if m_q.trim().is_empty() && f_q.trim() == format!("{f_id}:RUNNING") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && !watching.is_finished(),
            "never exactly the winner running: modern {m_q:?}, first {f_q:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let w = watching.join().unwrap();
    assert_eq!(w.code, 0, "{}", w.stderr);
    let race: shared::contract::schema::Race = w.decoded("race");
    assert_eq!(race.winner_job_id, f_id, "{race:?}");
    assert_eq!(w.job_id(), f_id, "the winner's document");
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    assert_eq!(race.entrants.len(), 2, "{race:?}");
    let lost = race.entrants.iter().find(|e| e.job_id == m_id).unwrap();
    assert!(lost.cancelled, "{race:?}");
    assert!(!lost.won, "{race:?}");
    assert!(
        w.stderr
            .contains(&format!("race: cancelled modern job {m_id}")),
        "{}",
        w.stderr
    );

    // Nothing of this run is left queued on either site.
    let modern_left = on_modern(
        "modern-login",
        &format!("squeue -h -t PENDING,RUNNING -n {name} -o %i"),
    );
    assert_eq!(modern_left.trim(), "", "modern");
    let first_left = Command::new("squeue")
        .args(["-h", "-t", "PENDING,RUNNING", "-n", &name, "-o", "%i"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&first_left.stdout).trim(),
        "",
        "first site"
    );

    // The ledger says who cancelled it.
    let listed = tool("slurm-runs")
        .args(["--json", "--no-refresh", "--name", &name])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let runs: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let m_run = runs.iter().find(|r| r["job_id"] == json!(m_id)).unwrap();
    assert_eq!(m_run["slurm_state"], "CANCELLED", "{m_run}");
    assert!(
        m_run["cancelled_by"]
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "the race: {} job {f_id} started first",
                race.winner_cluster
            )),
        "{m_run}"
    );
}

/// `slurm-submit --race 2` after placement (issue 36): the job submitted where placement chose
/// (the first site; the modern one's GPUs are taken) and, through its own whole pipeline, to the
/// next best cluster (the modern site); slurm-watch, with no flag, races them from the document,
/// keeps the one that started and cancels the other, and nothing of this run stays queued.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn submit_race_two_enters_the_next_best_cluster_and_the_watch_keeps_the_first_to_start() {
    crate::needs_cluster!();
    let _sites = busy_sites();
    let dir = tempdir();
    let state = dir.path().join("state");
    let repo = sample_clone(dir.path());
    let cp = control_path("race-n");
    {
        let _counting = logins_lock();
        login(&cp);
    }
    let name = format!("st-race-n-{}", std::process::id());
    let mut doc = job(&repo, "local", &cp, &name);
    doc.as_object_mut().unwrap().remove("slurm_cluster");
    doc["required_devices_per_node"] = json!(1);
    doc["recipe"] = json!("batch");
    doc["command"] = json!("echo raced on $(hostname); sleep 10");
    let _busy = filler("modern", "-N 2 --gpus-per-node=4");

    let r = step(
        &state,
        "slurm-resolve",
        &["--catalog", &testbed().s("catalog"), "--place"],
        &doc,
    );
    assert_eq!(
        placement(&r).chosen.as_deref(),
        Some("local"),
        "{}",
        r.stderr
    );
    let p = step(&state, "slurm-ssh-preflight", &[], &r.doc);
    let t = step(&state, "slurm-sync-tracked", &[], &p.doc);
    let u = step(&state, "slurm-sync-untracked", &[], &t.doc);
    let s = step(&state, "slurm-submit", &["--race", "2"], &u.doc);
    let local_id = s.job_id();
    let _l_cancel = Cancel("first", local_id.clone());
    assert!(
        s.stderr
            .contains("race: submitting the same job to modern too"),
        "{}",
        s.stderr
    );
    let entrants = s.job().race_entrants.unwrap_or_default();
    assert_eq!(entrants.len(), 1, "{}", s.stderr);
    let other: Value =
        serde_json::from_str(&std::fs::read_to_string(&entrants[0]).unwrap()).unwrap();
    assert_eq!(typed_of(&other).slurm_cluster.as_deref(), Some("modern"));
    let modern_id = job_of(&other).job_id.unwrap();
    let _m_cancel = Cancel("modern", modern_id.clone());

    let w = step(&state, "slurm-watch", &["--interval", "2"], &s.doc);
    let race: shared::contract::schema::Race = w.decoded("race");
    assert_eq!(race.winner_cluster, "local", "{race:?}");
    assert_eq!(race.winner_job_id, local_id, "{race:?}");
    assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    let lost = race
        .entrants
        .iter()
        .find(|e| e.job_id == modern_id)
        .unwrap_or_else(|| panic!("{race:?}"));
    assert!(lost.cancelled && !lost.won, "{race:?}");
    let modern_left = on_modern(
        "modern-login",
        &format!("squeue -h -t PENDING,RUNNING -n {name} -o %i"),
    );
    assert_eq!(
        modern_left.trim(),
        "",
        "nothing of this run queued on modern"
    );
    {
        let _counting = logins_lock();
        logout(&cp);
    }
}
