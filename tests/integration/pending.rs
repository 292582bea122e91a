//! Pending explained (issue 36): while a job pends, slurm-watch puts Slurm's reason in a category
//! with the figure that matters and the action that would help, in its `pending` event and on
//! stderr, from facts it gathers on the cluster once per reason; slurm-runs names the category.
//! Four kinds of wait, for real on the first site: held, a time limit over the partition's, the
//! cluster user's QOS GPU cap (the test bed's QOS gpucap, MaxTRESPerUser=gres/gpu=4), and
//! resources busy.

use crate::fixture::synced;
use crate::harness::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Cancels the jobs it names when dropped (a failed assertion leaves nothing queued).
struct Cancel(Vec<String>);

impl Drop for Cancel {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

/// `d` submitted and watched until slurm-watch says the job pends for a reason of `category`;
/// then the job is cancelled and the watch ends by itself. That pending event, the watch's
/// stderr, and the job id.
fn explained(state: &Path, d: &Value, category: &str) -> (Value, String, String) {
    explained_as(state, d, &[category])
}

/// [`explained`] for the first of several categories Slurm may give the same wait.
fn explained_as(state: &Path, d: &Value, categories: &[&str]) -> (Value, String, String) {
    let category = categories.join(" or ");
    let mut c = tool("slurm-submit");
    c.env("SLURM_TOOLS_STATE_DIR", state);
    let s = run_raw(c, d.to_string().as_bytes());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let _cancel = Cancel(vec![id.clone()]);
    let events = state.join(format!("events-{id}.jsonl"));
    let err = state.join(format!("watch-{id}.err"));
    let mut w = tool("slurm-watch");
    w.env("SLURM_TOOLS_STATE_DIR", state)
        .args(["--interval", "1", "--events", events.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = w.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(s.doc.to_string().as_bytes()).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let event = loop {
        let text = std::fs::read_to_string(&events).unwrap_or_default();
        if let Some(e) = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["event"] == "pending" && categories.iter().any(|c| e["category"] == *c))
        {
            break e;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "no pending event of category {category} within 90 s: {text}\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    // slurm-runs names the same category beside Slurm's reason.
    let listed = tool("slurm-runs")
        .env("SLURM_TOOLS_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let row = listed
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id.as_str()))
        .unwrap_or_else(|| panic!("job {id} in slurm-runs: {listed}"));
    assert!(
        categories.iter().any(|c| row.contains(&format!(": {c})"))),
        "{row}"
    );
    let _ = Command::new("scancel").arg(&id).status();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(1),
        "the cancelled job's verdict: {stderr}"
    );
    (event, stderr, id)
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_pending_job_is_explained_with_the_limit_and_the_action_for_each_kind_of_wait() {
    crate::needs_cluster!();
    let state = tempdir();
    let (_fx, mut base) = synced("pending-explained");
    base["recipe"] = json!("batch");
    base["command"] = json!("echo ran");

    // Held by its owner.
    let mut d = base.clone();
    d["slurm_options"] = json!(["--hold"]);
    let (e, stderr, id) = explained(state.path(), &d, "held");
    assert_eq!(e["reason"], "JobHeldUser", "{e}");
    assert_eq!(
        e["action"],
        format!("release it with `scontrol release {id}`"),
        "{e}"
    );
    assert!(
        stderr.contains(&format!(
            "job {id} is pending (JobHeldUser, held): held by its owner"
        )),
        "{stderr}"
    );

    // A time limit over the partition's MaxTime (04:00:00 in the test bed).
    let mut d = base.clone();
    d["time_limit"] = json!("06:00:00");
    let (e, _, _) = explained(state.path(), &d, "partition_limit");
    // Slurm 22.05 says PartitionConfig first, PartitionTimeLimit once the scheduler looked.
    assert!(
        e["reason"] == "PartitionTimeLimit" || e["reason"] == "PartitionConfig",
        "{e}"
    );
    assert_eq!(
        e["explanation"],
        "time_limit 06:00:00 is over partition debug's MaxTime 04:00:00: it will never start there",
        "{e}"
    );
    assert_eq!(e["action"], "lower `time_limit` to 04:00:00 or less", "{e}");

    // The QOS's per-user GPU cap, used up by a running job of the same user.
    let qos = testbed().s("capped_qos");
    let filler = first_site_filler(&[&format!("--qos={qos}"), "--gpus-per-node=4"]);
    let _f = Cancel(vec![filler.clone()]);
    let mut d = base.clone();
    d["qos"] = json!(qos);
    d["gpus_per_node"] = json!(1);
    let (e, _, _) = explained(state.path(), &d, "your_limit");
    assert_eq!(e["reason"], "QOSMaxGRESPerUser", "{e}");
    assert_eq!(
        e["explanation"],
        format!("your QOS {qos} allows 4 GPUs per user and your running job {filler} uses 4; this job asks for 1"),
        "{e}"
    );
    assert!(
        e["action"] == "wait for it to end (or `scancel` it), or use another QOS (`qos`)",
        "{e}"
    );
    drop(_f);

    // Resources: every GPU of one node taken, the job asks for one there.
    let node = testbed().s("node");
    let filler = first_site_filler(&[&format!("--nodelist={node}"), "--gpus-per-node=4"]);
    let _f = Cancel(vec![filler]);
    let mut d = base.clone();
    d["gpus_per_node"] = json!(1);
    d["slurm_options"] = json!([format!("--nodelist={node}")]);
    // Resources; Priority when other tests' jobs wait for that node too (a busy cluster).
    let (e, _, _) = explained_as(state.path(), &d, &["resources", "priority"]);
    let why = e["explanation"].as_str().unwrap();
    let opening = if e["reason"] == "Resources" {
        "waiting for resources in partition debug (it asks for "
    } else {
        "other jobs in partition debug are ahead of it (priority) (it asks for "
    };
    assert!(
        why.starts_with(opening) && why.contains("gres/gpu=1"),
        "{e}"
    );
    assert!(
        e["action"]
            .as_str()
            .unwrap()
            .starts_with("wait, or ask for less"),
        "{e}"
    );
}
