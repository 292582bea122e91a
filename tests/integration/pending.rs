//! Pending explained (issue 36): while a job pends, slurm-watch puts Slurm's reason in a category
//! with the figure that matters and the action that would help, in its `pending` event and on
//! stderr, from facts it gathers on the cluster once per reason; slurm-runs names the category.
//! Four kinds of wait, for real on the first site: held, a time limit over the partition's, the
//! cluster user's QOS GPU cap (the test bed's QOS gpucap, MaxTRESPerUser=gres/gpu=4), and
//! resources busy.

use crate::fixture::synced;
use crate::harness::*;
use serde_json::json;

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
    let _f = CancelJobs(vec![filler.clone()]);
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
    let _f = CancelJobs(vec![filler]);
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
