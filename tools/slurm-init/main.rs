//! slurm-init: a stranger's first step. From the login host alone, one login learns what the
//! cluster's catalog entry and a first job need, writes the entry (merged into the catalog) and
//! prints a small job document.

use clap::Parser;
use serde::Serialize;
use serde_json::{Map, Value};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::{Document, ErrorKind, Result, ToolError};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Start using a cluster: write its catalog entry and print a first job document.
///
/// Give the login host (an alias from your ssh config works). In one ssh execution it learns
/// your user, home and scratch directory, the Slurm version, your accounts, partitions and QoS
/// (sacctmgr, sinfo), and the GPU types the partitions offer; then it writes (or replaces) the
/// cluster's entry in the catalog (`~/.config/slurm-tools/clusters.json`, or --catalog;
/// every other entry kept, written atomically, 0600 when new) with the login host, the root
/// directory for clones and the site's defaults (account, partition, QoS), and prints a small
/// job document on stdout that resolves through that entry: the rest comes from the catalog.
/// --account, --partition, --qos and --root choose where there are several or override what
/// was found.
///
/// Behind MFA the login must already be open: run `slurm-ssh-preflight --establish` on
/// {"ssh_host": HOST, "mfa_style": true, "remote_cwd": "~"} first (exit 3 says so), then
/// slurm-init rides that connection.
///
/// Reads no job document. Exit: 0 written; 2 bad flags, or a catalog that cannot be read or
/// changed (it is left as it was); 3 a login is needed, or several accounts and no --account;
/// 4 ssh failed.
///
/// Example:
///   slurm-init login.hpc.example.edu > job.json     # then edit job.json's command
///   slurm-init --cluster uni --qos normal --root /scratch/alice/st uni-login > job.json
#[derive(Parser, Debug)]
#[command(name = "slurm-init", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    /// The login host, or an alias of your ssh config.
    #[arg(value_name = "HOST")]
    host: String,

    /// The cluster's name in the catalog (default: the host's first label).
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,

    /// The catalog to write (default: $XDG_CONFIG_HOME/slurm-tools/clusters.json, else
    /// ~/.config/slurm-tools/clusters.json).
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,

    /// The account to use (default: your only one; several: exit 3 listing them).
    #[arg(long, value_name = "ACCOUNT")]
    account: Option<String>,

    /// The partition (default: the cluster's default partition).
    #[arg(long, value_name = "PARTITION")]
    partition: Option<String>,

    /// The QoS (default: the only one your association lists, else its DefaultQOS, else none).
    #[arg(long, value_name = "QOS")]
    qos: Option<String>,

    /// Where clones go on the cluster (default: <scratch or home>/slurm-tools).
    #[arg(long, value_name = "DIR")]
    root: Option<String>,

    /// The ssh config file to use (`ssh -F`).
    #[arg(long, value_name = "FILE")]
    ssh_config: Option<String>,
}

const TOOL: &str = "slurm-init";

pub fn main() -> ExitCode {
    shared::contract::driver::run_plain::<Cli>(TOOL, init)
}

/// What the probe said.
#[derive(Debug, Default, PartialEq)]
struct Probe {
    user: String,
    home: String,
    scratch: Option<String>,
    slurm: Option<String>,
    /// (account, partition, QoS list)
    assoc: Vec<(String, String, String)>,
    /// An association's default QoS (sacctmgr's DefaultQOS), by account, where it has one.
    default_qos: Vec<(String, String)>,
    /// (name, max time, gres, default)
    parts: Vec<(String, String, String, bool)>,
}

fn parse_probe(text: &str) -> Probe {
    let mut p = Probe::default();
    for line in text.lines() {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        match tag {
            "USER" => p.user = rest.to_string(),
            "HOME" => p.home = rest.to_string(),
            "SCRATCH" => p.scratch = Some(rest.to_string()),
            "SLURM" => p.slurm = Some(rest.to_string()),
            "ASSOC" => {
                let f: Vec<&str> = rest.split('|').collect();
                if let [a, part, q, more @ ..] = f.as_slice() {
                    if !a.is_empty() && !p.assoc.iter().any(|(x, _, _)| x == a) {
                        p.assoc
                            .push((a.to_string(), part.to_string(), q.to_string()));
                        if let Some(d) = more.first().filter(|d| !d.is_empty()) {
                            p.default_qos.push((a.to_string(), d.to_string()));
                        }
                    }
                }
            }
            "PART" => {
                let f: Vec<&str> = rest.split('|').collect();
                if let [name, max, gres] = f.as_slice() {
                    let default = name.ends_with('*');
                    let name = name.trim_end_matches('*').to_string();
                    if !p.parts.iter().any(|(n, ..)| *n == name) {
                        p.parts
                            .push((name, max.to_string(), gres.to_string(), default));
                    }
                }
            }
            _ => {}
        }
    }
    p
}

/// Slurm's `%l` as the catalog's `max_time` (`[D-]HH:MM:SS`), or none (`infinite`).
fn max_time(l: &str) -> Option<String> {
    shared::slurm::parse_slurm_duration(l).map(shared::slurm::format_duration)
}

/// GPU types from `%G` values like `gpu:a100:4(S:0-1)`, and the GPU count per node.
fn gpus(gres: &str) -> (Vec<String>, Option<i64>) {
    let mut types = Vec::new();
    let mut count = None;
    for item in gres.split(',') {
        let item = item.split('(').next().unwrap_or(item);
        let f: Vec<&str> = item.split(':').collect();
        if f.first() != Some(&"gpu") {
            continue;
        }
        let (t, n) = match f.as_slice() {
            [_, t, n] => (Some(t.to_string()), n.parse().ok()),
            [_, n] => (None, n.parse().ok()),
            _ => (None, None),
        };
        if let Some(t) = t.filter(|t| !types.contains(t)) {
            types.push(t);
        }
        count = count.max(n);
    }
    (types, count)
}

/// A partition as the catalog writes it.
#[derive(Debug, Serialize, PartialEq)]
struct Partition {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_time: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    default: bool,
}

/// The catalog entry slurm-init writes (docs/catalog.md).
#[derive(Debug, Serialize)]
struct CatalogEntry {
    cluster_name: String,
    ssh_host: String,
    /// null: preflight finds out, and records it.
    mfa_style: Option<bool>,
    default_user_root_dir: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    device_types: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpus_per_node: Option<i64>,
    partitions: Vec<Partition>,
    defaults: Map<String, Value>,
}

/// The small job document printed: it resolves through the entry.
#[derive(Debug, Serialize)]
struct FirstJob {
    slurm_cluster: String,
    time_limit: &'static str,
    command: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ssh_config_file: Option<String>,
}

/// The entry and the defaults chosen from the probe and the flags.
fn entry_for(cli: &Cli, name: &str, p: &Probe) -> Result<CatalogEntry> {
    let account = match (&cli.account, p.assoc.as_slice()) {
        (Some(a), _) => Some(a.clone()),
        (None, []) => None,
        (None, [(a, _, _)]) => Some(a.clone()),
        (None, many) => {
            let names: Vec<&str> = many.iter().map(|(a, _, _)| a.as_str()).collect();
            return Err(ToolError::needs_person(format!(
                "you have several accounts on {}: {}",
                cli.host,
                names.join(", ")
            ))
            .with_hint(format!("choose one: rerun with --account {}", names[0])));
        }
    };
    let partition = cli
        .partition
        .clone()
        .or_else(|| p.parts.iter().find(|(.., d)| *d).map(|(n, ..)| n.clone()));
    let qos = cli.qos.clone().or_else(|| {
        let of_account = p
            .assoc
            .iter()
            .find(|(a, _, _)| Some(a) == account.as_ref())
            .map(|(_, _, q)| q.as_str())
            .unwrap_or("");
        let list: Vec<&str> = of_account.split(',').filter(|q| !q.is_empty()).collect();
        // Several: the association's own default, where the site set one.
        let default = p
            .default_qos
            .iter()
            .find(|(a, _)| Some(a) == account.as_ref())
            .map(|(_, d)| d.clone());
        (list.len() == 1).then(|| list[0].to_string()).or(default)
    });
    let base = p.scratch.clone().unwrap_or_else(|| p.home.clone());
    let root = cli
        .root
        .clone()
        .unwrap_or_else(|| format!("{}/slurm-tools", base.trim_end_matches('/')));
    let mut device_types = Vec::new();
    let mut gpus_per_node = None;
    for (.., gres, _) in &p.parts {
        let (t, n) = gpus(gres);
        for x in t {
            if !device_types.contains(&x) {
                device_types.push(x);
            }
        }
        gpus_per_node = gpus_per_node.max(n);
    }
    let mut defaults = Map::new();
    for (k, v) in [("account", account), ("partition", partition), ("qos", qos)] {
        if let Some(v) = v {
            defaults.insert(k.into(), Value::String(v));
        }
    }
    // Checked as the catalog's reader will check it.
    shared::slurm::Settings::from_doc(&Document::from_map(defaults.clone()))?;
    Ok(CatalogEntry {
        cluster_name: name.to_string(),
        ssh_host: cli.host.clone(),
        mfa_style: None,
        default_user_root_dir: root,
        device_types,
        gpus_per_node,
        partitions: p
            .parts
            .iter()
            .map(|(n, l, _, d)| Partition {
                name: n.clone(),
                max_time: max_time(l),
                default: *d,
            })
            .collect(),
        defaults,
    })
}

/// The catalog with `entry` in it (replacing an entry of the same name), every other byte of
/// meaning kept.
fn merged(existing: Option<&[u8]>, path: &Path, entry: Value) -> Result<Value> {
    let mut cat = match existing {
        None => {
            let mut m = Map::new();
            m.insert("clusters".into(), Value::Array(Vec::new()));
            Value::Object(m)
        }
        Some(b) => serde_json::from_slice::<Value>(b).map_err(|e| {
            ToolError::bad_input(format!(
                "the catalog {} is not valid JSON ({e}); it was left as it is",
                path.display()
            ))
            .with_hint("fix it, or give another file with --catalog")
        })?,
    };
    let Some(list) = cat.get_mut("clusters").and_then(Value::as_array_mut) else {
        return Err(ToolError::bad_input(format!(
            "the catalog {} has no `clusters` list; it was left as it is",
            path.display()
        ))
        .with_hint("fix it (docs/catalog.md), or give another file with --catalog"));
    };
    let name = entry["cluster_name"].clone();
    match list.iter_mut().find(|e| e["cluster_name"] == name) {
        Some(old) => *old = entry,
        None => list.push(entry),
    }
    Ok(cat)
}

fn catalog_path(cli: &Cli) -> Result<PathBuf> {
    if let Some(p) = &cli.catalog {
        return Ok(p.clone());
    }
    shared::state::local_dirs::config_dir()
        .map(|d| d.join("clusters.json"))
        .ok_or_else(|| {
            ToolError::bad_input("neither XDG_CONFIG_HOME nor HOME is set")
                .with_hint("give --catalog FILE")
        })
}

/// One login to the host: who we are there and what its Slurm offers.
fn probe(cli: &Cli) -> Result<Probe> {
    let mut conn = Map::new();
    conn.insert("ssh_host".into(), Value::String(cli.host.clone()));
    if let Some(f) = &cli.ssh_config {
        conn.insert("ssh_config_file".into(), Value::String(f.clone()));
    }
    let doc = Document::from_map(conn);
    let ssh = Ssh::for_preflight(&shared::remote::ssh::Connection::read(&doc)?)?;
    shared::remote::run::<InitProbe>(&ssh, &cli.host).map_err(|e| {
        if e.kind == ErrorKind::NeedsPerson {
            e.with_hint(format!(
                "log in once: echo '{{\"ssh_host\": \"{}\", \"mfa_style\": true, \"remote_cwd\": \"~\"}}' | slurm-ssh-preflight --establish, then rerun slurm-init",
                cli.host
            ))
        } else {
            e
        }
    })
}

/// Who we are on the login and what its Slurm offers (init-probe.sh); an answer without a user
/// is no answer.
struct InitProbe;

impl shared::remote::Operation for InitProbe {
    /// The host, for what an error names.
    type Params = str;
    type Reply = Probe;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(_: &str) -> Result<Script> {
        let mut s = Script::new();
        s.raw(shared::remote::INIT_PROBE);
        Ok(s)
    }

    fn reply(host: &str, out: &shared::support::process::Output) -> Result<Probe> {
        let probe = parse_probe(&out.stdout_text());
        if probe.user.is_empty() {
            return Err(ToolError::remote(format!(
                "the login on {host} answered nothing slurm-init understands ({})",
                out.exit_text()
            ))
            .with_command(out.record()));
        }
        Ok(probe)
    }
}

/// The entry merged into the catalog (written privately, in one step): the catalog's path.
fn write_entry(cli: &Cli, entry: &CatalogEntry) -> Result<std::path::PathBuf> {
    let path = catalog_path(cli)?;
    let existing = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(ToolError::bad_input(format!(
                "cannot read the catalog {} ({e})",
                path.display()
            ))
            .with_hint("fix its permissions, or give another file with --catalog"))
        }
    };
    let entry_value =
        serde_json::to_value(entry).map_err(|e| ToolError::bad_input(e.to_string()))?;
    let cat = merged(existing.as_deref(), &path, entry_value)?;
    if let Some(dir) = path.parent() {
        shared::state::private_files::create_dir(dir)
            .map_err(|e| ToolError::bad_input(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut text = serde_json::to_string_pretty(&cat).unwrap_or_default();
    text.push('\n');
    shared::state::private_files::write_atomic(&path, text.as_bytes(), 0o600).map_err(|e| {
        ToolError::bad_input(format!("cannot write the catalog {}: {e}", path.display()))
    })?;
    Ok(path)
}

fn init(cli: &Cli) -> Result<u8> {
    shared::remote::ssh::check_host(&cli.host)?;
    let name = match &cli.cluster {
        Some(n) => n.clone(),
        None => cli
            .host
            .rsplit('@')
            .next()
            .and_then(|h| h.split('.').next())
            .unwrap_or(&cli.host)
            .to_string(),
    };
    shared::slurm::check_slurm_value("--cluster", &name)?;
    let probe = probe(cli)?;
    if probe.slurm.is_none() {
        shared::support::ui::warn(
            TOOL,
            &format!(
                "no Slurm client (sinfo) on {}: is this a Slurm login node?",
                cli.host
            ),
        );
    }
    // Whether the login needs MFA is left to preflight to find out (null), which records it.
    let entry = entry_for(cli, &name, &probe)?;
    let path = write_entry(cli, &entry)?;
    let defaults = &entry.defaults;
    shared::support::ui::note(
        TOOL,
        &format!(
            "{} on {} ({}): wrote cluster {name} to {} (root {}, defaults: {})",
            probe.user,
            cli.host,
            probe.slurm.as_deref().unwrap_or("no Slurm client found"),
            path.display(),
            entry.default_user_root_dir,
            if defaults.is_empty() {
                "none found".to_string()
            } else {
                defaults
                    .iter()
                    .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    );
    let job = FirstJob {
        slurm_cluster: name,
        time_limit: "00:30:00",
        command: "hostname && nvidia-smi -L || true",
        ssh_config_file: cli.ssh_config.clone(),
    };
    let line = format!(
        "{}\n",
        serde_json::to_string(&job).map_err(|e| ToolError::bad_input(e.to_string()))?
    );
    use std::io::Write;
    std::io::stdout()
        .write_all(line.as_bytes())
        .map_err(|e| ToolError::new(ErrorKind::Remote, format!("writing stdout: {e}")))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_probe_becomes_an_entry_with_the_sites_defaults() {
        let p = parse_probe(
            "USER alice\nHOME /home/alice\nSCRATCH /scratch/alice\nSLURM slurm 24.11.5\nASSOC lab||normal\nPART gpu*|2-00:00:00|gpu:a100:4(S:0-1)\nPART short|4:00:00|gpu:h100:8\nPART cpu|infinite|(null)\nTOOLS yes yes yes\n",
        );
        assert_eq!(p.user, "alice");
        assert_eq!(p.assoc, [("lab".into(), "".into(), "normal".into())]);
        let cli = Cli::parse_from(["slurm-init", "login.hpc.example.edu"]);
        let e = serde_json::to_value(entry_for(&cli, "login", &p).unwrap()).unwrap();
        assert_eq!(e["default_user_root_dir"], "/scratch/alice/slurm-tools");
        assert_eq!(
            e["defaults"],
            value(r#"{"account": "lab", "partition": "gpu", "qos": "normal"}"#)
        );
        assert_eq!(e["device_types"], value(r#"["a100", "h100"]"#));
        assert_eq!(e["gpus_per_node"], 8);
        assert_eq!(e["mfa_style"], Value::Null);
        assert_eq!(
            e["partitions"][0],
            value(r#"{"name": "gpu", "max_time": "2-00:00:00", "default": true}"#)
        );
        assert_eq!(e["partitions"][2], value(r#"{"name": "cpu"}"#));
        // Several QoS: the association's DefaultQOS, where the site set one; else none.
        let several = parse_probe("USER a\nHOME /h\nASSOC lab||gpucap,normal|normal\n");
        let e = serde_json::to_value(entry_for(&cli, "x", &several).unwrap()).unwrap();
        assert_eq!(e["defaults"]["qos"], "normal");
        let none = parse_probe("USER a\nHOME /h\nASSOC lab||gpucap,normal|\n");
        let e = serde_json::to_value(entry_for(&cli, "x", &none).unwrap()).unwrap();
        assert_eq!(e["defaults"].get("qos"), None);
        // Several accounts: the person chooses.
        let mut two = p;
        two.assoc.push(("other".into(), "".into(), "".into()));
        let e = entry_for(&cli, "x", &two).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NeedsPerson);
        assert!(e.hint.unwrap().contains("--account lab"));
    }

    #[test]
    fn the_catalog_keeps_other_entries_and_replaces_this_one() {
        let old =
            br#"{"prefer":["a"],"clusters":[{"cluster_name":"a","x":1},{"cluster_name":"b"}]}"#;
        let cat = merged(
            Some(old),
            Path::new("c.json"),
            value(r#"{"cluster_name": "b", "new": true}"#),
        )
        .unwrap();
        assert_eq!(cat["prefer"], value(r#"["a"]"#));
        assert_eq!(
            cat["clusters"][0],
            value(r#"{"cluster_name": "a", "x": 1}"#)
        );
        assert_eq!(
            cat["clusters"][1],
            value(r#"{"cluster_name": "b", "new": true}"#)
        );
        assert!(merged(Some(b"{"), Path::new("c.json"), Value::Null).is_err());
        assert!(merged(Some(b"{}"), Path::new("c.json"), Value::Null).is_err());
    }
}
