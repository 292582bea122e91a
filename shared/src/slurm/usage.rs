//! Sizing from history: what past runs of a job used, from Slurm's accounting (elapsed time, the
//! peak memory of any of its steps, the GPUs it was given), their spread, and a request sized from
//! it with a margin (`slurm-runs --stats`, slurm-resolve's `size_from_history`). A cluster without
//! accounting says so; nothing is guessed.

use crate::remote::quote::Script;
use crate::Result;

/// One past job's use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    pub job_id: String,
    pub state: String,
    pub elapsed_seconds: u64,
    /// The largest MaxRSS of its steps (one task's peak); `None` when accounting sampled none.
    pub peak_memory_bytes: Option<u64>,
    pub gpus: u64,
    pub time_limit_seconds: Option<u64>,
}

/// What a cluster said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The cluster keeps no accounting (sacct says so): no history there.
    Disabled,
    /// sacct failed: its words.
    Failed(String),
    Jobs(Vec<Usage>),
}

/// The one execution's script for `ids` (usage-query.sh).
pub fn query(ids: &[String]) -> Result<Script> {
    let mut s = Script::new();
    s.assign("ids", &ids.join(","))?;
    s.raw(crate::remote::USAGE_QUERY);
    Ok(s)
}

/// sacct's memory (`212856K`, `1.5G`, `0`) in bytes.
pub fn parse_memory(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&t[..i], &t[i..]),
        None => (t, ""),
    };
    let n: f64 = num.parse().ok()?;
    let mult = match unit.to_ascii_uppercase().as_str() {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult) as u64)
}

/// Bytes as Slurm's `--mem` takes them, rounded up: `384M`, `2G`.
pub fn memory_text(bytes: u64) -> String {
    let mib = bytes.div_ceil(1024 * 1024).max(1);
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{}G", mib / 1024)
    } else {
        format!("{mib}M")
    }
}

impl Answer {
    /// usage-query.sh's reply: one Usage per job (its steps folded in).
    pub fn parse(text: &str) -> Answer {
        if text.lines().any(|l| l == "ACCT_DISABLED") {
            return Answer::Disabled;
        }
        let code = text
            .lines()
            .find_map(|l| l.strip_prefix("SACCT "))
            .and_then(|c| c.trim().parse::<i32>().ok());
        let rows: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("U ")).collect();
        if code != Some(0) {
            return Answer::Failed(rows.join(" ").trim().to_string());
        }
        let mut jobs: Vec<Usage> = Vec::new();
        for row in rows {
            let f: Vec<&str> = row.split('|').collect();
            if f.len() < 6 {
                continue;
            }
            let (job, step) = f[0].split_once('.').unwrap_or((f[0], ""));
            if !crate::slurm::is_job_id(job) {
                continue;
            }
            let peak = parse_memory(f[3]).filter(|b| *b > 0);
            if step.is_empty() {
                let gpus = super::pending::gpus(&super::pending::tres(f[4]));
                jobs.push(Usage {
                    job_id: job.to_string(),
                    state: f[1].split_whitespace().next().unwrap_or("").to_string(),
                    elapsed_seconds: f[2].parse().unwrap_or(0),
                    peak_memory_bytes: peak,
                    gpus,
                    time_limit_seconds: f[5].parse::<u64>().ok().map(|m| m * 60),
                });
            } else if let Some(j) = jobs.iter_mut().rev().find(|j| j.job_id == job) {
                j.peak_memory_bytes = j.peak_memory_bytes.max(peak);
            }
        }
        Answer::Jobs(jobs)
    }
}

/// The nearest-rank percentile `p` (0-100) of `values`; `None` when empty.
pub fn percentile(values: &[u64], p: u32) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (u64::from(p) * v.len() as u64).div_ceil(100).max(1) as usize;
    v.get(rank - 1).copied()
}

/// What sizing took from the history and what it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizing {
    /// The completed runs it used.
    pub runs: usize,
    pub elapsed_p90_seconds: u64,
    pub peak_memory_p90_bytes: Option<u64>,
    /// `time_limit`: the 90th percentile of elapsed time x1.5, at least 5 minutes more, whole
    /// minutes.
    pub time_limit: String,
    /// `mem` (per node): the 90th percentile of the peak x1.25 x tasks per node; `None` when
    /// accounting sampled no memory.
    pub mem: Option<String>,
}

/// A request sized from the completed runs of `history` (`tasks_per_node` tasks share a node's
/// `mem`); `None` without a completed run.
pub fn size(history: &[Usage], tasks_per_node: u64) -> Option<Sizing> {
    let done: Vec<&Usage> = history.iter().filter(|u| u.state == "COMPLETED").collect();
    if done.is_empty() {
        return None;
    }
    let elapsed: Vec<u64> = done.iter().map(|u| u.elapsed_seconds).collect();
    let peaks: Vec<u64> = done.iter().filter_map(|u| u.peak_memory_bytes).collect();
    let e90 = percentile(&elapsed, 90)?;
    let limit = (e90 * 3 / 2).max(e90 + 300).div_ceil(60) * 60;
    let p90 = percentile(&peaks, 90);
    Some(Sizing {
        runs: done.len(),
        elapsed_p90_seconds: e90,
        peak_memory_p90_bytes: p90,
        time_limit: super::format_duration(limit),
        mem: p90.map(|p| memory_text(p.saturating_mul(5) / 4 * tasks_per_node.max(1))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_rows_fold_their_steps_into_each_job() {
        let a = Answer::parse(
            "SACCT 0\n\
             U 6240|COMPLETED|3||billing=1,cpu=1,node=1,gres/gpu=2|240\n\
             U 6240.batch|COMPLETED|3|10436K|cpu=1,mem=0,node=1|\n\
             U 6240.0|COMPLETED|3|212856K|cpu=1,mem=0,node=1|\n\
             U 6241|OUT_OF_MEMORY|70||cpu=1|60\n\
             U 6242|CANCELLED by 1001|1||cpu=1|60\n",
        );
        let Answer::Jobs(j) = a else { panic!("{a:?}") };
        assert_eq!(j.len(), 3);
        assert_eq!(j[0].peak_memory_bytes, Some(212_856 * 1024));
        assert_eq!(
            (j[0].gpus, j[0].elapsed_seconds, j[0].time_limit_seconds),
            (2, 3, Some(14_400))
        );
        assert_eq!(j[1].state, "OUT_OF_MEMORY");
        assert_eq!(j[1].peak_memory_bytes, None);
        assert_eq!(j[2].state, "CANCELLED");
        assert_eq!(Answer::parse("SACCT 1\nACCT_DISABLED\n"), Answer::Disabled);
        assert_eq!(
            Answer::parse("SACCT 1\nU sacct: error: x\n"),
            Answer::Failed("sacct: error: x".into())
        );
    }

    #[test]
    fn memory_reads_and_writes_in_slurms_units() {
        assert_eq!(parse_memory("212856K"), Some(212_856 * 1024));
        assert_eq!(parse_memory("1.5G"), Some(1_610_612_736));
        assert_eq!(parse_memory("0"), Some(0));
        assert_eq!(parse_memory(""), None);
        assert_eq!(parse_memory("12Q"), None);
        assert_eq!(memory_text(1), "1M");
        assert_eq!(memory_text(300 * 1024 * 1024 + 1), "301M");
        assert_eq!(memory_text(2 * 1024 * 1024 * 1024), "2G");
    }

    #[test]
    fn sizing_takes_the_90th_percentile_of_completed_runs_with_a_margin() {
        let u = |id: &str, state: &str, secs: u64, mib: Option<u64>| Usage {
            job_id: id.into(),
            state: state.into(),
            elapsed_seconds: secs,
            peak_memory_bytes: mib.map(|m| m * 1024 * 1024),
            gpus: 0,
            time_limit_seconds: None,
        };
        let h = [
            u("1", "COMPLETED", 100, Some(200)),
            u("2", "COMPLETED", 1200, Some(400)),
            u("3", "COMPLETED", 300, Some(300)),
            u("4", "FAILED", 9000, Some(9000)),
        ];
        let s = size(&h, 1).unwrap();
        assert_eq!(s.runs, 3);
        assert_eq!(s.elapsed_p90_seconds, 1200);
        assert_eq!(s.time_limit, "00:30:00");
        assert_eq!(s.mem.as_deref(), Some("500M"));
        assert_eq!(size(&h[..3], 4).unwrap().mem.as_deref(), Some("2000M"));
        // Short runs: at least five minutes more than the longest.
        assert_eq!(
            size(&[u("1", "COMPLETED", 3, None)], 1).unwrap().time_limit,
            "00:06:00"
        );
        assert_eq!(size(&[u("1", "COMPLETED", 3, None)], 1).unwrap().mem, None);
        assert_eq!(size(&[u("1", "FAILED", 3, None)], 1), None);
        assert_eq!(percentile(&[5, 1, 3], 50), Some(3));
        assert_eq!(percentile(&[], 90), None);
    }
}
