//! A person's own defaults: job document fields in `$XDG_CONFIG_HOME/slurm-tools/defaults.json`
//! (else `~/.config/slurm-tools/defaults.json`; `SLURM_TOOLS_DEFAULTS` names another file, which
//! must exist), filled in by slurm-resolve where the document is silent, so that a job document
//! can be a handful of lines. The document always wins; a catalog entry's per-cluster
//! `defaults` win over these (a site's rule over a habit); the fields that choose the cluster
//! ([`SELECTION`], and `slurm_user` for the catalog's patterns) are taken before the cluster is
//! chosen, every other one after.

use serde_json::{Map, Value};
use shared::{Result, ToolError};
use std::path::PathBuf;

pub struct UserDefaults {
    pub path: PathBuf,
    pub fields: Map<String, Value>,
}

/// The fields that choose the cluster, and the user name its catalog patterns use.
pub const SELECTION: &[&str] = &[
    "slurm_cluster",
    "device_type",
    "required_devices_per_node",
    "total_required_devices",
    "slurm_user",
];

/// The defaults file, read and checked; `None` when there is none.
pub fn load() -> Result<Option<UserDefaults>> {
    let path = match std::env::var_os("SLURM_TOOLS_DEFAULTS").filter(|p| !p.is_empty()) {
        Some(p) => {
            let p = PathBuf::from(p);
            if !p.is_file() {
                return Err(ToolError::bad_input(format!(
                    "the defaults file {} (from SLURM_TOOLS_DEFAULTS) does not exist or is not a file",
                    p.display()
                ))
                .with_hint("fix the path, or unset SLURM_TOOLS_DEFAULTS"));
            }
            p
        }
        None => match shared::state::local_dirs::config_dir()
            .map(|d| d.join("defaults.json"))
            .filter(|p| p.exists())
        {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    let bad = |what: String| {
        ToolError::bad_input(format!("your defaults file {}: {what}", path.display())).with_hint(
            "it is one JSON object of job document fields (docs/contract.md), e.g. {\"slurm_cluster\": \"uni\", \"account\": \"proj\", \"time_limit\": \"01:00:00\"}; fix or remove it",
        )
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("cannot be read ({e})")))?;
    let fields = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return Err(bad("is not a JSON object".into())),
        Err(e) => return Err(bad(format!("is not valid JSON ({e})"))),
    };
    let known = shared::contract::schema::section_fields::<shared::contract::schema::JobDocument>();
    for k in fields.keys() {
        if shared::contract::schema::SECTION_NAMES.contains(&k.as_str()) || k == "contract_version"
        {
            return Err(bad(format!(
                "has `{k}`, which a tool writes; only the fields a person sets can have defaults"
            )));
        }
        if !known.contains(k) {
            return Err(bad(format!("has `{k}`, which is not a job document field")));
        }
    }
    // Checked as a document's own fields are, one by one so the message names the field, and
    // here, with its file, rather than at a later tool.
    for (k, v) in &fields {
        let mut one = Map::new();
        one.insert(k.clone(), v.clone());
        serde_json::from_value::<shared::contract::schema::JobDocument>(Value::Object(one))
            .map_err(|e| bad(format!("`{k}` is {v}: {e}")))?;
    }
    let doc = shared::Document::from_map(fields.clone());
    shared::slurm::Settings::from_doc(&doc).map_err(|e| bad(e.message))?;
    Ok(Some(UserDefaults { path, fields }))
}

impl UserDefaults {
    /// Fill in `which` fields (the cluster's choosers, or every other) where the document is
    /// silent.
    pub fn apply(
        &self,
        doc: &mut shared::Document,
        selection: bool,
        derived: &mut Vec<String>,
    ) -> Vec<String> {
        let mut filled = Vec::new();
        for (k, v) in &self.fields {
            if SELECTION.contains(&k.as_str()) == selection && doc.derive(k, v.clone(), derived) {
                filled.push(k.clone());
            }
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(text: &str) -> Result<Option<UserDefaults>> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.json");
        std::fs::write(&p, text).unwrap();
        std::env::set_var("SLURM_TOOLS_DEFAULTS", &p);
        let r = load();
        std::env::remove_var("SLURM_TOOLS_DEFAULTS");
        r
    }

    #[test]
    fn a_defaults_file_is_checked_field_by_field() {
        // One test: the environment variable is process-wide.
        let ok = with_file(r#"{"slurm_cluster": "uni", "account": "p", "stall_seconds": 600}"#)
            .unwrap()
            .unwrap();
        assert_eq!(ok.fields.len(), 3);
        for (text, said) in [
            ("[1]", "is not a JSON object"),
            ("{", "is not valid JSON"),
            (r#"{"report": {}}"#, "which a tool writes"),
            (
                r#"{"acount": "p"}"#,
                "`acount`, which is not a job document field",
            ),
            (r#"{"stall_seconds": "soon"}"#, "stall_seconds"),
            (r#"{"qos": "a b"}"#, "qos"),
        ] {
            let e = with_file(text)
                .err()
                .unwrap_or_else(|| panic!("{text} accepted"));
            assert!(e.message.contains(said), "{text}: {}", e.message);
            assert!(e.message.contains("your defaults file"), "{}", e.message);
        }
        std::env::set_var("SLURM_TOOLS_DEFAULTS", "/nonexistent/defaults.json");
        let e = load().err().unwrap();
        std::env::remove_var("SLURM_TOOLS_DEFAULTS");
        assert!(e.message.contains("does not exist"), "{}", e.message);
    }
}
