//! The cluster catalog: what slurm-resolve knows about each cluster (docs/catalog.md).
//!
//! A JSON file, `{"clusters": [ {entry}, ... ], "prefer": [names]}`. Entries are checked field by
//! field when the file is read, and every error names the file and the entry, so a typo in the
//! catalog is found before it picks the wrong cluster.

use serde_json::{Map, Value};
use shared::contract::doc::describe;
use shared::{ErrorKind, Result, ToolError};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Catalog {
    pub path: PathBuf,
    pub clusters: Vec<Entry>,
    /// Preference order used when several clusters match.
    pub prefer: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub cluster_name: String,
    pub device_types: Vec<String>,
    pub gpus_per_node: Option<i64>,
    /// How many nodes the cluster has (for `total_required_devices`); `None` when unknown.
    pub nodes: Option<i64>,
    /// `Some(None)` is an explicit `null` (unknown); `None` means the catalog does not say.
    pub mfa_style: Option<Option<bool>>,
    pub ssh_host: Option<String>,
    pub default_user_root_dir: Option<String>,
    pub default_models_repo: Option<String>,
    pub partitions: Vec<Value>,
    pub flags: Map<String, Value>,
    /// Per-cluster defaults of job fields ([`DEFAULTABLE`]), filled in when the document lacks
    /// them.
    pub defaults: Map<String, Value>,
}

/// The job fields a catalog entry may give defaults for: what a site requires of every job.
pub const DEFAULTABLE: &[&str] = &[
    "account",
    "partition",
    "time_limit",
    "mounts",
    "qos",
    "mem",
    "mem_per_gpu",
    "cpus_per_task",
    "gres",
    "reservation",
    "exclusive",
    "slurm_options",
];

/// Where the catalog is: `--catalog`, else `SLURM_TOOLS_CATALOG`, else the XDG default. The
/// first two must exist; the default may be absent (no catalog).
pub fn locate(flag: Option<&Path>) -> Result<Option<PathBuf>> {
    if let Some(p) = flag {
        return must_exist(p, "--catalog").map(Some);
    }
    if let Some(p) = std::env::var_os("SLURM_TOOLS_CATALOG").filter(|p| !p.is_empty()) {
        return must_exist(Path::new(&p), "SLURM_TOOLS_CATALOG").map(Some);
    }
    Ok(shared::state::local_dirs::config_dir()
        .map(|d| d.join("clusters.json"))
        .filter(|p| p.exists()))
}

fn must_exist(p: &Path, via: &str) -> Result<PathBuf> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(ToolError::bad_input(format!(
            "the catalog {} (from {via}) does not exist or is not a file",
            p.display()
        ))
        .with_hint("fix the path, or leave out --catalog/SLURM_TOOLS_CATALOG to run from the document alone"))
    }
}

impl Catalog {
    pub fn load(path: &Path) -> Result<Catalog> {
        let bad = |msg: String| {
            ToolError::new(
                ErrorKind::BadInput,
                format!("catalog {}: {msg}", path.display()),
            )
            .with_hint("fix the catalog file (format: docs/catalog.md)")
        };
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!(
                "not valid JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        let Value::Object(top) = value else {
            return Err(bad(format!(
                "the top level must be an object, not {}",
                describe(&value)
            )));
        };
        let Some(Value::Array(list)) = top.get("clusters") else {
            return Err(bad("it needs a `clusters` list".into()));
        };
        let mut clusters = Vec::new();
        for (i, item) in list.iter().enumerate() {
            let Value::Object(m) = item else {
                return Err(bad(format!("clusters[{i}] must be an object")));
            };
            clusters.push(Entry::parse(m).map_err(|msg| bad(format!("clusters[{i}]: {msg}")))?);
        }
        let prefer = match top.get("prefer") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("`prefer` must be a list of cluster names".into()))?,
            Some(_) => return Err(bad("`prefer` must be a list of cluster names".into())),
        };
        Ok(Catalog {
            path: path.to_path_buf(),
            clusters,
            prefer,
        })
    }

    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.clusters.iter().find(|c| c.cluster_name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.clusters
            .iter()
            .map(|c| c.cluster_name.as_str())
            .collect()
    }
}

impl Entry {
    fn parse(m: &Map<String, Value>) -> std::result::Result<Entry, String> {
        let s = |k: &str| -> std::result::Result<Option<String>, String> {
            match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(v) => Err(format!("`{k}` must be a string, not {}", describe(v))),
            }
        };
        let n = |k: &str| -> std::result::Result<Option<i64>, String> {
            match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => match v.as_i64() {
                    Some(x) if x >= 1 => Ok(Some(x)),
                    _ => Err(format!(
                        "`{k}` must be a whole number of at least 1, not {}",
                        describe(v)
                    )),
                },
            }
        };
        let cluster_name = s("cluster_name")?.ok_or("`cluster_name` is missing")?;
        let mut device_types = Vec::new();
        if let Some(d) = s("device_type")? {
            device_types.push(d);
        }
        match m.get("device_types") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                for v in a {
                    device_types.push(
                        v.as_str()
                            .ok_or("`device_types` must be a list of strings")?
                            .to_string(),
                    );
                }
            }
            Some(_) => return Err("`device_types` must be a list of strings".into()),
        }
        let mfa_style = match m.get("mfa_style") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(Value::Bool(b)) => Some(Some(*b)),
            Some(v) => {
                return Err(format!(
                    "`mfa_style` must be true, false or null, not {}",
                    describe(v)
                ))
            }
        };
        let partitions = match m.get("partitions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => {
                for p in a {
                    if p.get("name").and_then(Value::as_str).is_none() {
                        return Err("each of `partitions` needs a `name`".into());
                    }
                }
                a.clone()
            }
            Some(_) => return Err("`partitions` must be a list".into()),
        };
        let flags = match m.get("flags") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(f)) => f.clone(),
            Some(_) => return Err("`flags` must be an object".into()),
        };
        let defaults = match m.get("defaults") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(d)) => {
                if let Some(k) = d.keys().find(|k| !DEFAULTABLE.contains(&k.as_str())) {
                    return Err(format!(
                        "`defaults` has `{k}`, which is not a field a catalog can default (it can: {})",
                        DEFAULTABLE.join(", ")
                    ));
                }
                // Checked as a job document's own fields would be, so a bad default is found
                // here, naming the catalog, not later at submission.
                let doc = shared::Document::from_map(d.clone());
                shared::slurm::Settings::from_doc(&doc)
                    .map_err(|e| format!("`defaults`: {}", e.message))?;
                d.clone()
            }
            Some(_) => return Err("`defaults` must be an object of job fields".into()),
        };
        Ok(Entry {
            defaults,
            gpus_per_node: n("gpus_per_node")?,
            nodes: n("nodes")?,
            ssh_host: s("ssh_host")?,
            default_user_root_dir: s("default_user_root_dir")?,
            default_models_repo: s("default_models_repo")?,
            cluster_name,
            device_types,
            mfa_style,
            partitions,
            flags,
        })
    }

    /// Why this cluster cannot take the job, or `None` when it can. Without a `device` any type
    /// does; without `per_node` (no GPUs asked for) neither GPUs nor size are checked.
    pub fn rejection(
        &self,
        device: Option<&str>,
        per_node: Option<i64>,
        total: Option<i64>,
    ) -> Option<String> {
        if let Some(device) =
            device.filter(|d| !self.device_types.iter().any(|t| t.eq_ignore_ascii_case(d)))
        {
            return Some(format!(
                "device type {device} not offered (it has: {})",
                if self.device_types.is_empty() {
                    "none listed".to_string()
                } else {
                    self.device_types.join(", ")
                }
            ));
        }
        let per_node = per_node?;
        let Some(gpn) = self.gpus_per_node else {
            return Some("the catalog does not say its gpus_per_node".into());
        };
        if gpn < per_node {
            return Some(format!(
                "{gpn} GPUs per node < required_devices_per_node {per_node}"
            ));
        }
        if let (Some(total), Some(nodes)) = (total, self.nodes) {
            if nodes.saturating_mul(gpn) < total {
                return Some(format!(
                    "{nodes} nodes x {gpn} GPUs = {} < total_required_devices {total}",
                    nodes * gpn
                ));
            }
        }
        None
    }
}

/// Fill `{slurm_user}` and `{cluster_name}` in a catalog pattern. Returns the name of a
/// placeholder that has no value, if any.
pub fn apply_pattern(
    pattern: &str,
    user: Option<&str>,
    cluster: &str,
) -> std::result::Result<String, &'static str> {
    if pattern.contains("{slurm_user}") && user.is_none() {
        return Err("slurm_user");
    }
    Ok(pattern
        .replace("{slurm_user}", user.unwrap_or(""))
        .replace("{cluster_name}", cluster))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(text: &str) -> Result<Catalog> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("clusters.json");
        std::fs::write(&p, text).unwrap();
        Catalog::load(&p)
    }

    #[test]
    fn the_catalog_match_takes_device_gpus_and_size_into_account() {
        let cat = catalog(
            r#"{"clusters": [
                {"cluster_name": "a", "device_types": ["H100"], "gpus_per_node": 8, "nodes": 2},
                {"cluster_name": "b", "device_types": ["A100", "h100"], "gpus_per_node": 4},
                {"cluster_name": "c", "device_types": ["H100"]}
            ]}"#,
        )
        .unwrap();
        let e = |n: &str| cat.find(n).unwrap();
        // (cluster, device, per node, total, rejected because)
        type Row<'a> = (&'a str, &'a str, i64, Option<i64>, Option<&'a str>);
        let table: &[Row] = &[
            ("a", "h100", 8, None, None),
            ("a", "H100", 8, Some(16), None),
            (
                "a",
                "H100",
                8,
                Some(17),
                Some("2 nodes x 8 GPUs = 16 < total_required_devices 17"),
            ),
            (
                "a",
                "B200",
                1,
                None,
                Some("device type B200 not offered (it has: H100)"),
            ),
            (
                "b",
                "H100",
                8,
                None,
                Some("4 GPUs per node < required_devices_per_node 8"),
            ),
            ("b", "H100", 4, Some(1000), None),
            (
                "c",
                "H100",
                1,
                None,
                Some("the catalog does not say its gpus_per_node"),
            ),
        ];
        for (name, device, per_node, total, why) in table {
            assert_eq!(
                e(name)
                    .rejection(Some(device), Some(*per_node), *total)
                    .as_deref(),
                *why,
                "{name} {device} {per_node} {total:?}"
            );
        }
        // Without a device type any type does (--place); without GPUs asked, nothing is checked.
        assert_eq!(e("b").rejection(None, Some(4), None), None);
        assert_eq!(
            e("b").rejection(None, Some(8), None).as_deref(),
            Some("4 GPUs per node < required_devices_per_node 8")
        );
        assert_eq!(e("c").rejection(None, None, Some(1000)), None);
        assert_eq!(cat.names(), ["a", "b", "c"]);
    }

    #[test]
    fn a_bad_catalog_entry_is_named_with_its_field() {
        let e =
            catalog(r#"{"clusters": [{"cluster_name": "a", "gpus_per_node": "8"}]}"#).unwrap_err();
        assert!(e.message.contains("gpus_per_node"), "{}", e.message);
        assert!(e.message.contains('a'), "{}", e.message);
        let e = catalog("{").unwrap_err();
        assert!(e.message.contains("line"), "{}", e.message);
    }
}
