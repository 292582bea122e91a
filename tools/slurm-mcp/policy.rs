//! The agent policy: a file in the person's configuration that slurm-mcp reads at every call
//! and no tool argument can change (docs/contract.md, "The agent policy").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use shared::contract::schema::JobDocument;
use std::path::PathBuf;

/// `policy.json` in the tools' configuration folder. Every field is optional; an absent one
/// sets no limit.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// GPU-hours one run may ask for: GPUs per node × nodes × sweep tasks × time_limit.
    pub gpu_hours_per_run: Option<f64>,
    /// GPU-hours all submissions and allocations made through slurm-mcp in the last 24 hours
    /// may ask for together, this one included.
    pub gpu_hours_per_day: Option<f64>,
    /// The only clusters (catalog names, `slurm_cluster`, or ssh hosts) the agent may use.
    pub clusters: Option<Vec<String>>,
    /// The only partitions a run may ask for (a run must then name one).
    pub partitions: Option<Vec<String>>,
    /// The most nodes one run may ask for.
    pub max_nodes: Option<u32>,
    /// The longest `time_limit` a run may ask for, `[D-]HH:MM:SS` (a run must then give one).
    pub max_time_limit: Option<String>,
    /// How many runs of the ledger may be unfinished at once (asked of the clusters with
    /// `slurm-runs` before each submission).
    pub max_concurrent_runs: Option<u32>,
    /// Every action needs the `plan_id` of a plan of the same call first.
    pub require_plan: Option<bool>,
}

/// A call refused: the refusal boxed (it is large, and rare).
pub type Refused<T> = std::result::Result<T, Box<Refusal>>;

/// A request the policy refuses: the limit, its value, what was asked, and what to do.
#[derive(Debug, Serialize)]
pub struct Refusal {
    pub limit: String,
    pub allowed: Value,
    pub requested: Value,
    pub policy_file: String,
    pub message: String,
}

/// Where the policy is: `$XDG_CONFIG_HOME/slurm-tools/policy.json`, else
/// `~/.config/slurm-tools/policy.json`.
pub fn path() -> Option<PathBuf> {
    shared::state::local_dirs::config_dir().map(|d| d.join("policy.json"))
}

/// The policy in force: none when there is no file. A file that cannot be read or parsed is a
/// refusal of every action (it names the file and the error): a broken limit is not no limit.
pub fn load() -> Refused<Policy> {
    let Some(p) = path() else {
        return Ok(Policy::default());
    };
    let text = match std::fs::read(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Policy::default()),
        Err(e) => return Err(broken(&p, &e.to_string())),
    };
    let policy: Policy = serde_json::from_slice(&text).map_err(|e| broken(&p, &e.to_string()))?;
    if let Some(t) = &policy.max_time_limit {
        if shared::slurm::parse_time_limit(t).is_none() {
            return Err(broken(
                &p,
                &format!("max_time_limit {t:?} is not [D-]HH:MM:SS"),
            ));
        }
    }
    Ok(policy)
}

fn broken(p: &std::path::Path, why: &str) -> Box<Refusal> {
    Box::new(Refusal {
        limit: "policy_file".into(),
        allowed: Value::Null,
        requested: Value::Null,
        policy_file: p.display().to_string(),
        message: format!(
            "the policy file {} cannot be used ({why}); every action is refused until the person fixes it",
            p.display()
        ),
    })
}

/// What a run asks for, as the policy counts it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub cluster: Option<String>,
    pub partition: Option<String>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub tasks: u32,
    pub time_limit: Option<(String, u64)>,
    /// An allocation: `time_limit` is the partition's maximum, not the document's.
    pub allocation: bool,
}

impl Request {
    /// The request of an allocation (`slurm-alloc up`): as a job's, but its walltime is the
    /// partition's maximum (up asks for that, and only shortens it to start sooner), from the
    /// catalog's partitions that resolve copied into the document; unknown: no time limit, so a
    /// GPU-hour or time limit refuses it.
    pub fn of_allocation(doc: &Value) -> std::result::Result<Request, String> {
        let mut req = Request::of(doc)?;
        let partitions = doc
            .pointer("/resolve/partitions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let named = |p: &&Value| match &req.partition {
            Some(name) => p.get("name").and_then(Value::as_str) == Some(name.as_str()),
            None => p.get("default").and_then(Value::as_bool) == Some(true),
        };
        req.time_limit = partitions
            .iter()
            .find(named)
            .and_then(|p| p.get("max_time").and_then(Value::as_str))
            .and_then(|t| shared::slurm::parse_time_limit(t).map(|s| (t.to_string(), s)));
        req.allocation = true;
        Ok(req)
    }

    /// The request of a job document (after slurm-resolve: its cluster, partition, nodes).
    pub fn of(doc: &Value) -> std::result::Result<Request, String> {
        let d: JobDocument = serde_json::from_value(doc.clone())
            .map_err(|e| format!("the document does not match the contract: {e}"))?;
        let gpus_per_node = d
            .gpus_per_node
            .or(d.required_devices_per_node)
            .or_else(|| d.gres.as_deref().and_then(gres_gpus))
            .unwrap_or(0);
        let nodes = d
            .node_count
            .or_else(
                || match (d.total_required_devices, d.required_devices_per_node) {
                    (Some(t), Some(p)) if p > 0 => Some(t.div_ceil(p)),
                    _ => None,
                },
            )
            .unwrap_or(1);
        let tasks = match &d.sweep {
            Some(s) => {
                let plan = shared::slurm::sweep::plan(s).map_err(|e| e.message)?;
                plan.only
                    .as_ref()
                    .map_or(plan.tasks.len(), Vec::len)
                    .try_into()
                    .unwrap_or(u32::MAX)
            }
            None => 1,
        };
        let time_limit = match d.time_limit {
            Some(t) => {
                let secs = shared::slurm::parse_time_limit(&t)
                    .ok_or_else(|| format!("time_limit {t:?} is not [D-]HH:MM:SS"))?;
                Some((t, secs))
            }
            None => None,
        };
        Ok(Request {
            cluster: d.slurm_cluster.or(d.ssh_host),
            partition: d.partition,
            nodes,
            gpus_per_node,
            tasks,
            time_limit,
            allocation: false,
        })
    }

    /// GPU-hours asked for; `None` when GPUs are asked for without a time limit.
    pub fn gpu_hours(&self) -> Option<f64> {
        let gpus = f64::from(self.gpus_per_node) * f64::from(self.nodes) * f64::from(self.tasks);
        if gpus == 0.0 {
            return Some(0.0);
        }
        self.time_limit
            .as_ref()
            .map(|(_, secs)| gpus * *secs as f64 / 3600.0)
    }

    /// What would lower the GPU-hours.
    fn ask_less(&self) -> &'static str {
        if self.allocation {
            "ask for fewer GPUs or nodes, or use a partition with a shorter maximum walltime (or submit a job with a time_limit)"
        } else {
            "ask for fewer GPUs, nodes or tasks, or a shorter time_limit"
        }
    }

    fn describe(&self) -> String {
        let time = match (&self.time_limit, self.allocation) {
            (Some((t, _)), false) => format!("time_limit {t}"),
            (Some((t, _)), true) => {
                format!("the partition's maximum walltime {t}, which an allocation holds")
            }
            (None, false) => "no time_limit".to_string(),
            (None, true) => "the partition's maximum walltime, which an allocation holds and the document's resolve section does not give".to_string(),
        };
        let tasks = if self.tasks > 1 {
            format!(" × {} sweep tasks", self.tasks)
        } else {
            String::new()
        };
        format!(
            "{} GPU{} per node × {} node{}{tasks} × {time}",
            self.gpus_per_node,
            if self.gpus_per_node == 1 { "" } else { "s" },
            self.nodes,
            if self.nodes == 1 { "" } else { "s" }
        )
    }
}

/// The GPU count of a `gres` value (`gpu:4`, `gpu:a100:2`, `gpu:2,tmp:10G`).
fn gres_gpus(gres: &str) -> Option<u32> {
    gres.split(',').find_map(|g| {
        let parts: Vec<&str> = g.split(':').collect();
        (parts.first() == Some(&"gpu"))
            .then(|| parts.last().and_then(|n| n.parse().ok()))
            .flatten()
    })
}

impl Policy {
    pub fn require_plan(&self) -> bool {
        self.require_plan == Some(true)
    }

    /// The cluster is one the policy allows (any, without a list).
    pub fn check_cluster(&self, cluster: Option<&str>) -> Refused<()> {
        let (Some(allowed), Some(c)) = (&self.clusters, cluster) else {
            return Ok(());
        };
        if allowed.iter().any(|a| a == c) {
            return Ok(());
        }
        Err(refuse(
            "clusters",
            Value::from(allowed.clone()),
            Value::from(c),
            format!(
                "cluster {c} is not in the policy's clusters ({}); use one of those",
                allowed.join(", ")
            ),
        ))
    }

    /// A run's request against every limit. `used_today`: GPU-hours of the last 24 hours'
    /// submissions; `active`: unfinished runs now (asked only when the policy limits them).
    pub fn check_run(
        &self,
        req: &Request,
        used_today: f64,
        active: impl FnOnce() -> std::result::Result<u32, String>,
    ) -> Refused<()> {
        self.check_cluster(req.cluster.as_deref())?;
        self.check_partition(req)?;
        self.check_size(req)?;
        self.check_gpu_hours(req, used_today)?;
        if let Some(max) = self.max_concurrent_runs {
            let n = active().map_err(|why| {
                refuse(
                    "max_concurrent_runs",
                    max.into(),
                    Value::Null,
                    format!("the runs now unfinished could not be counted ({why}), so max_concurrent_runs {max} cannot be kept; try again"),
                )
            })?;
            if n >= max {
                return Err(refuse(
                    "max_concurrent_runs",
                    max.into(),
                    (n + 1).into(),
                    format!(
                        "{n} runs are unfinished and max_concurrent_runs is {max}; wait for one to end (watch it), or cancel one"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_partition(&self, req: &Request) -> Refused<()> {
        if let Some(allowed) = &self.partitions {
            let ok = req
                .partition
                .as_ref()
                .is_some_and(|p| allowed.iter().any(|a| a == p));
            if !ok {
                let asked = req.partition.clone().unwrap_or_default();
                return Err(refuse(
                    "partitions",
                    Value::from(allowed.clone()),
                    Value::from(asked.clone()),
                    if asked.is_empty() {
                        format!("the run names no partition and the policy's partitions are {}; set `partition`", allowed.join(", "))
                    } else {
                        format!("partition {asked} is not in the policy's partitions ({}); set `partition` to one of those", allowed.join(", "))
                    },
                ));
            }
        }
        Ok(())
    }

    /// Nodes and walltime against max_nodes and max_time_limit.
    fn check_size(&self, req: &Request) -> Refused<()> {
        if let Some(max) = self.max_nodes {
            if req.nodes > max {
                return Err(refuse(
                    "max_nodes",
                    max.into(),
                    req.nodes.into(),
                    format!(
                        "the run asks for {} nodes, over max_nodes {max}; ask for fewer (`node_count`)",
                        req.nodes
                    ),
                ));
            }
        }
        if let Some(max) = &self.max_time_limit {
            let max_secs = shared::slurm::parse_time_limit(max).unwrap_or(0);
            match &req.time_limit {
                None => {
                    return Err(refuse(
                        "max_time_limit",
                        max.clone().into(),
                        Value::Null,
                        if req.allocation {
                            format!("an allocation holds the partition's maximum walltime, which is not known here (run resolve with a catalog whose partitions give max_time), and the policy allows at most {max}")
                        } else {
                            format!("the run has no time_limit and the policy allows at most {max}; set `time_limit`")
                        },
                    ))
                }
                Some((t, secs)) if *secs > max_secs => {
                    return Err(refuse(
                        "max_time_limit",
                        max.clone().into(),
                        t.clone().into(),
                        if req.allocation {
                            format!("an allocation holds the partition's maximum walltime {t}, over max_time_limit {max}; use a partition with a shorter maximum, or submit a job with a time_limit")
                        } else {
                            format!("time_limit {t} is over max_time_limit {max}; ask for less")
                        },
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The run's GPU-hours (bounded: a known walltime) against gpu_hours_per_run and, with the
    /// last 24 hours' (`used_today`), gpu_hours_per_day.
    fn check_gpu_hours(&self, req: &Request, used_today: f64) -> Refused<()> {
        let hours = req.gpu_hours();
        if self.gpu_hours_per_run.is_some() || self.gpu_hours_per_day.is_some() {
            let Some(h) = hours else {
                return Err(refuse(
                    "gpu_hours_per_run",
                    self.gpu_hours_per_run.into(),
                    Value::Null,
                    format!(
                        "the run asks for GPUs ({}) without a known walltime, so its GPU-hours are unbounded; {}",
                        req.describe(),
                        if req.allocation { "run resolve with a catalog whose partitions give max_time" } else { "set `time_limit`" }
                    ),
                ));
            };
            if let Some(max) = self.gpu_hours_per_run {
                if h > max {
                    return Err(refuse(
                        "gpu_hours_per_run",
                        max.into(),
                        round(h).into(),
                        format!(
                            "the run asks for {} GPU-hours ({}), over gpu_hours_per_run {max}; {}",
                            round(h),
                            req.describe(),
                            req.ask_less()
                        ),
                    ));
                }
            }
            if let Some(max) = self.gpu_hours_per_day {
                if used_today + h > max {
                    return Err(refuse(
                        "gpu_hours_per_day",
                        max.into(),
                        round(used_today + h).into(),
                        format!(
                            "the last 24 hours' runs asked for {} GPU-hours and this one asks for {} ({}): {} in all, over gpu_hours_per_day {max}; wait, or {}",
                            round(used_today),
                            round(h),
                            req.describe(),
                            round(used_today + h),
                            req.ask_less()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn round(h: f64) -> f64 {
    (h * 100.0).round() / 100.0
}

fn refuse(limit: &str, allowed: Value, requested: Value, what: String) -> Box<Refusal> {
    let file = path().map_or_else(|| "policy.json".to_string(), |p| p.display().to_string());
    Box::new(Refusal {
        limit: limit.to_string(),
        allowed,
        requested,
        message: format!("refused by the policy ({file}): {what}"),
        policy_file: file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(doc: &str) -> Request {
        Request::of(&serde_json::from_str(doc).unwrap()).unwrap()
    }

    fn limits(p: &str) -> Policy {
        serde_json::from_str(p).unwrap()
    }

    #[test]
    fn gpu_hours_count_gpus_nodes_tasks_and_time() {
        let r = req(r#"{"gpus_per_node": 4, "node_count": 2, "time_limit": "01:30:00"}"#);
        assert_eq!(r.gpu_hours(), Some(12.0));
        let r = req(r#"{"gres": "gpu:a100:2", "time_limit": "1-00:00:00",
                        "sweep": {"grid": {"lr": [1, 2, 3]}}}"#);
        assert_eq!(r.gpu_hours(), Some(144.0));
        let r = req(r#"{"required_devices_per_node": 8, "total_required_devices": 16}"#);
        assert_eq!((r.nodes, r.gpu_hours()), (2, None));
        assert_eq!(req(r#"{"command": "x"}"#).gpu_hours(), Some(0.0));
    }

    #[test]
    fn an_allocation_is_counted_at_its_partitions_maximum_not_the_documents_time_limit() {
        let doc: Value = serde_json::from_str(
            r#"{"gpus_per_node": 2, "node_count": 1, "time_limit": "00:10:00", "partition": "long",
                "resolve": {"cluster_name": "c", "selected_by": "explicit", "derived": [],
                            "catalog": null, "candidates": [], "flags": {},
                            "partitions": [{"name": "short", "max_time": "01:00:00", "default": true},
                                           {"name": "long", "max_time": "2-00:00:00"}]}}"#,
        )
        .unwrap();
        let r = Request::of_allocation(&doc).unwrap();
        assert_eq!(r.gpu_hours(), Some(96.0));
        let never = || -> std::result::Result<u32, String> { panic!("not asked") };
        let refused = limits(r#"{"gpu_hours_per_run": 8}"#)
            .check_run(&r, 0.0, never)
            .unwrap_err();
        assert!(
            refused.message.contains("maximum walltime 2-00:00:00"),
            "{}",
            refused.message
        );
        // No partition named: the default one.
        let mut d = doc.clone();
        d.as_object_mut().unwrap().remove("partition");
        assert_eq!(Request::of_allocation(&d).unwrap().gpu_hours(), Some(2.0));
        // Not known at all: unbounded, refused under a GPU-hour limit.
        d.as_object_mut().unwrap().remove("resolve");
        let r = Request::of_allocation(&d).unwrap();
        assert_eq!(r.gpu_hours(), None);
        assert!(limits(r#"{"gpu_hours_per_day": 100}"#)
            .check_run(&r, 0.0, never)
            .is_err());
        assert_eq!(
            limits(r#"{"max_time_limit": "04:00:00"}"#)
                .check_run(&r, 0.0, never)
                .unwrap_err()
                .limit,
            "max_time_limit"
        );
    }

    #[test]
    fn every_limit_refuses_naming_itself_and_none_trims() {
        let never = || -> std::result::Result<u32, String> { panic!("not asked") };
        let big = req(
            r#"{"slurm_cluster": "a", "partition": "gpu", "gpus_per_node": 8,
                          "node_count": 2, "time_limit": "04:00:00"}"#,
        );
        for (policy, limit) in [
            (r#"{"gpu_hours_per_run": 10}"#, "gpu_hours_per_run"),
            (r#"{"clusters": ["b"]}"#, "clusters"),
            (r#"{"partitions": ["cpu"]}"#, "partitions"),
            (r#"{"max_nodes": 1}"#, "max_nodes"),
            (r#"{"max_time_limit": "01:00:00"}"#, "max_time_limit"),
        ] {
            let r = limits(policy).check_run(&big, 0.0, never).unwrap_err();
            assert_eq!(r.limit, limit, "{policy}");
            assert!(r.message.contains(limit), "{}", r.message);
        }
        // 64 GPU-hours: within a day of 100 at first, not after 40 more.
        let day = limits(r#"{"gpu_hours_per_day": 100}"#);
        assert!(day.check_run(&big, 0.0, never).is_ok());
        let r = day.check_run(&big, 40.0, never).unwrap_err();
        assert_eq!(
            (r.limit.as_str(), r.requested.clone()),
            ("gpu_hours_per_day", Value::from(104.0))
        );
        let busy = limits(r#"{"max_concurrent_runs": 2}"#);
        assert!(busy.check_run(&big, 0.0, || Ok(1)).is_ok());
        assert_eq!(
            busy.check_run(&big, 0.0, || Ok(2)).unwrap_err().limit,
            "max_concurrent_runs"
        );
        // GPUs without a time limit under a GPU-hour limit: unbounded, refused.
        let open = req(r#"{"gpus_per_node": 1}"#);
        assert!(limits(r#"{"gpu_hours_per_run": 1000}"#)
            .check_run(&open, 0.0, never)
            .is_err());
    }

    #[test]
    fn the_readmes_policy_is_a_policy_and_the_contract_names_every_field() {
        let readme = include_str!("../../README.md");
        let block = readme
            .split("```json\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap())
            .find(|b| b.contains("gpu_hours_per_run"))
            .expect("README's policy example");
        let p: Policy = serde_json::from_str(block).expect("README's policy parses");
        assert_eq!(p.max_time_limit.as_deref(), Some("04:00:00"));
        let contract = include_str!("../../docs/contract.md");
        let schema = serde_json::to_value(schemars::schema_for!(Policy)).unwrap();
        for field in schema["properties"].as_object().unwrap().keys() {
            assert!(
                contract.contains(&format!("| `{field}` |")),
                "docs/contract.md's policy table has no {field}"
            );
        }
    }

    #[test]
    fn a_policy_with_an_unknown_field_is_not_a_policy() {
        assert!(serde_json::from_str::<Policy>(r#"{"gpu_hours": 5}"#).is_err());
    }
}
