//! Sizing from history (issue 36): three past runs of one job name on the first site (real
//! accounting, usage sampled every second), `slurm-runs --stats` showing what each used, and
//! slurm-resolve's `size_from_history` filling `mem` and `time_limit` from them.

use crate::fixture::synced;
use crate::harness::*;
use crate::watch::submit_and_watch;
use serde_json::json;
use std::process::Stdio;

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn three_past_runs_size_mem_and_time_limit_and_stats_show_their_use() {
    crate::needs_cluster!();
    let (_fx, base) = synced("history");
    let name = format!("st-history-{}", std::process::id());
    // Each run holds 150 MiB for two seconds.
    let command = "python3 -c 'x = bytearray(150 * 1024 * 1024); import time; time.sleep(2)'";
    for _ in 0..3 {
        let w = submit_and_watch(&base, "single", command, &[("job_name", json!(name))], &[]);
        assert_eq!(w.report().status.name(), "PASSED", "{}", w.stderr);
    }

    let out = tool("slurm-runs")
        .args(["--stats", &name])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&name) && l.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows.iter().all(|r| r.contains("COMPLETED")), "{text}");
    assert!(text.contains("3 completed: elapsed p90 "), "{text}");
    let json_out = tool("slurm-runs")
        .args(["--stats", &name, "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let j: serde_json::Value =
        serde_json::from_slice(json_out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let peak = j["peak_memory_p90_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{j}"));
    assert!(
        (150 * 1024 * 1024..400 * 1024 * 1024).contains(&peak),
        "peak {peak}: {j}"
    );

    // The next run's document asks to be sized: both fields filled, said, and recorded.
    let mut d = base.clone();
    d["job_name"] = json!(name);
    d["size_from_history"] = json!(true);
    d.as_object_mut().unwrap().remove("mem");
    d.as_object_mut().unwrap().remove("time_limit");
    let r = run("slurm-resolve", &["--catalog", &testbed().s("catalog")], &d);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s = r.resolve().sized_from_history.unwrap();
    assert_eq!(s.runs, 3, "{s:?}");
    assert_eq!(s.completed, 3, "{s:?}");
    assert_eq!(s.filled, ["time_limit", "mem"], "{s:?}");
    // Short runs: five minutes more than the longest, in whole minutes.
    let sized = r.typed();
    assert_eq!(sized.time_limit.as_deref(), Some("00:06:00"), "{s:?}");
    let mem = sized.mem.unwrap();
    let mib: u64 = mem
        .trim_end_matches('M')
        .parse()
        .unwrap_or_else(|_| panic!("{mem}"));
    assert!(
        mib * 1024 * 1024 >= peak * 5 / 4,
        "{mem} against the peak {peak}"
    );
    assert!(
        r.stderr.contains("sized from 3 completed past runs"),
        "{}",
        r.stderr
    );

    // A value the document gives is kept.
    let mut own = d.clone();
    own["mem"] = json!("4G");
    let r = run(
        "slurm-resolve",
        &["--catalog", &testbed().s("catalog")],
        &own,
    );
    assert_eq!(r.typed().mem.as_deref(), Some("4G"));
    assert_eq!(
        r.resolve().sized_from_history.unwrap().filled,
        ["time_limit"]
    );

    // A job name with no past run: nothing sized, said.
    let mut none = d.clone();
    none["job_name"] = json!(format!("{name}-never-ran"));
    let r = run(
        "slurm-resolve",
        &["--catalog", &testbed().s("catalog")],
        &none,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.typed().mem.is_none(), "{}", r.doc);
    let s = r.resolve().sized_from_history.unwrap();
    assert!(s.note.starts_with("no past run of"), "{s:?}");
}
