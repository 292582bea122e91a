//! `slurm-runs --stats NAME`: what past runs of a job used (Slurm's accounting: elapsed time,
//! peak memory, GPUs), per cluster, with the spread and the request sized from it
//! (shared/src/slurm/usage.rs). One ssh execution and one sacct per cluster.

use serde::Serialize;
use shared::slurm::format_duration;
use shared::slurm::usage::{self, Answer};
use shared::state::ledger::Run;
use shared::Result;
use std::collections::BTreeMap;

/// The report, one block per cluster (`json`: one JSON object per cluster). Exit 0, or 4 when
/// a cluster could not be asked.
pub fn stats(runs: &[Run], pattern: &str, json: bool) -> Result<(String, u8)> {
    let mut by_cluster: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    // Every run the ledger has (accounting tells which ended; only completed ones size).
    for r in runs {
        by_cluster.entry(r.cluster.as_str()).or_default().push(r);
    }
    if by_cluster.is_empty() {
        return Ok((
            format!("no run whose job name matches {pattern:?} in the ledger\n"),
            0,
        ));
    }
    let names: BTreeMap<(String, String), Option<String>> = runs
        .iter()
        .map(|r| ((r.cluster.clone(), r.job_id.clone()), r.job_name.clone()))
        .collect();
    let mut text = String::new();
    let mut code = 0;
    for (cluster, ids, reply) in super::ask_each_cluster::<shared::remote::UsageQuery>(by_cluster) {
        let answer = reply.unwrap_or_else(|e| Answer::Failed(e.message));
        let jobs = match answer {
            Answer::Jobs(j) => j,
            Answer::Disabled => {
                text.push_str(&block_without(&cluster, json, "the cluster keeps no accounting (sacct: accounting storage is disabled): no usage history there, nothing guessed"));
                continue;
            }
            Answer::Failed(why) => {
                code = 4;
                text.push_str(&block_without(
                    &cluster,
                    json,
                    &format!("could not be asked: {why}"),
                ));
                continue;
            }
        };
        let sizing = usage::size(&jobs, 1);
        let name_of = |id: &str| {
            names
                .get(&(cluster.clone(), id.to_string()))
                .cloned()
                .flatten()
        };
        text.push_str(&if json {
            json_block(&cluster, ids.len(), &jobs, sizing.as_ref(), name_of)
        } else {
            text_block(&cluster, pattern, &jobs, sizing.as_ref(), name_of)
        });
    }
    Ok((text, code))
}

/// One cluster's block in --json.
fn json_block(
    cluster: &str,
    asked: usize,
    jobs: &[usage::Usage],
    sizing: Option<&usage::Sizing>,
    name_of: impl Fn(&str) -> Option<String>,
) -> String {
    let v = ClusterStats {
        cluster: cluster.to_string(),
        asked,
        runs: jobs
            .iter()
            .map(|u| RunUse {
                job_id: u.job_id.clone(),
                job_name: name_of(&u.job_id),
                state: u.state.clone(),
                elapsed_seconds: u.elapsed_seconds,
                peak_memory_bytes: u.peak_memory_bytes,
                gpus: u.gpus,
            })
            .collect(),
        completed: sizing.map_or(0, |s| s.runs),
        elapsed_p90_seconds: sizing.map(|s| s.elapsed_p90_seconds),
        peak_memory_p90_bytes: sizing.and_then(|s| s.peak_memory_p90_bytes),
        sized: sizing.map(|s| Sized {
            time_limit: s.time_limit.clone(),
            mem: s.mem.clone(),
        }),
        unavailable: None,
    };
    let mut text = serde_json::to_string(&v).expect("stats serialise");
    text.push('\n');
    text
}

/// One cluster's block as a table, with the spread and the request sized from it.
fn text_block(
    cluster: &str,
    pattern: &str,
    jobs: &[usage::Usage],
    sizing: Option<&usage::Sizing>,
    name_of: impl Fn(&str) -> Option<String>,
) -> String {
    let mut text = format!("{cluster}: {} runs matching {pattern:?}\n", jobs.len());
    let mut rows = vec![[
        "JOB".to_string(),
        "NAME".into(),
        "STATE".into(),
        "ELAPSED".into(),
        "PEAK MEM".into(),
        "GPUS".into(),
    ]];
    for u in jobs {
        rows.push([
            u.job_id.clone(),
            name_of(&u.job_id).unwrap_or_else(|| "-".into()),
            u.state.clone(),
            format_duration(u.elapsed_seconds),
            u.peak_memory_bytes
                .map_or("-".to_string(), usage::memory_text),
            u.gpus.to_string(),
        ]);
    }
    text.push_str(&super::columns(rows));
    text.push_str(&match sizing {
        Some(s) => format!(
            "  {} completed: elapsed p90 {}, peak memory p90 {}; sized from them: time_limit {} (p90 x1.5, at least 5 min more), mem {} (p90 x1.25 per task)\n",
            s.runs,
            format_duration(s.elapsed_p90_seconds),
            s.peak_memory_p90_bytes.map_or("not sampled".to_string(), usage::memory_text),
            s.time_limit,
            s.mem.as_deref().unwrap_or("not sized (no memory sampled)"),
        ),
        None => "  no completed run: nothing to size from\n".to_string(),
    });
    text
}

/// One cluster's answer in --json: its runs' use, their spread, the request sized from them (or
/// why there is none).
#[derive(Serialize)]
struct ClusterStats {
    cluster: String,
    asked: usize,
    runs: Vec<RunUse>,
    completed: usize,
    elapsed_p90_seconds: Option<u64>,
    peak_memory_p90_bytes: Option<u64>,
    sized: Option<Sized>,
    unavailable: Option<String>,
}

#[derive(Serialize)]
struct RunUse {
    job_id: String,
    job_name: Option<String>,
    state: String,
    elapsed_seconds: u64,
    peak_memory_bytes: Option<u64>,
    gpus: u64,
}

#[derive(Serialize)]
struct Sized {
    time_limit: String,
    mem: Option<String>,
}

fn block_without(cluster: &str, json: bool, why: &str) -> String {
    if json {
        let v = ClusterStats {
            cluster: cluster.to_string(),
            asked: 0,
            runs: Vec::new(),
            completed: 0,
            elapsed_p90_seconds: None,
            peak_memory_p90_bytes: None,
            sized: None,
            unavailable: Some(why.to_string()),
        };
        format!("{}\n", serde_json::to_string(&v).expect("stats serialise"))
    } else {
        format!("{cluster}: {why}\n")
    }
}
