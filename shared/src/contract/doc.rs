//! The job document: one JSON object that flows through the pipeline (docs/contract.md).
//!
//! The document is kept as an ordered JSON map, not as a struct, because the contract's first
//! promise is round-trip safety: every field a tool does not own, known or unknown, leaves exactly
//! as it came, in the same order. Tools read the fields of their step through the typed accessors
//! here, which turn a wrong type or range into an error that names the field, the value and what
//! to do. A `null` field counts as absent everywhere (so a derived value may fill it).

pub use crate::contract::error::field_error;
use crate::contract::error::{ErrorKind, Result, ToolError};
pub use crate::contract::schema::enum_name;
use crate::contract::text::preview;
use serde_json::{Map, Value};

/// Larger input than this is refused before parsing, so memory stays bounded.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;

/// Where the document came from, for messages.
pub fn source_name(path: Option<&std::path::Path>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "stdin".to_string(),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    fields: Map<String, Value>,
}

/// The project's secret fields (top level of the document): taken out before any tool code runs
/// and never written anywhere. Only these: a user field whose name merely looks secret
/// (`max_new_tokens`, `tokenizer_dir`, an `env` entry `HF_TOKEN`) is the user's data and passes
/// through unchanged, as the contract's round-trip promise says (docs/contract.md, "Secrets").
pub const SECRET_FIELDS: &[&str] = &["slurm_password"];

/// The secrets taken out of a document. Deliberately not `Serialize` and with a redacting
/// `Debug`, so they cannot end up in output by accident.
#[derive(Default, Clone)]
pub struct Secrets {
    pub slurm_password: Option<String>,
    /// The paths (`a.b.c`) of every secret field dropped, for the stderr note.
    pub dropped: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field(
                "slurm_password",
                &self.slurm_password.as_ref().map(|_| "<redacted>"),
            )
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl Document {
    /// Parse the bytes of a document. Every failure is a bad-input error that says where.
    pub fn parse(bytes: &[u8], source: &str) -> Result<Document> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(ToolError::bad_input(format!(
                "the job document from {source} is larger than {} MiB",
                MAX_DOCUMENT_BYTES / (1024 * 1024)
            ))
            .with_hint(
                "a job document is a small JSON object; check that the right file is piped in",
            ));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ToolError::bad_input(format!(
                "the job document from {source} is empty ({} bytes, no JSON value)",
                bytes.len()
            ))
            .with_hint(
                "pipe one JSON object into the tool (e.g. `slurm-resolve < job.json`); \
                     in a pipeline, the tool before this one printed nothing: read its error above",
            ));
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            let what = match e.classify() {
                serde_json::error::Category::Eof => "is truncated (the JSON ends early)",
                _ if e.to_string().starts_with("trailing characters") => {
                    "holds more than one JSON value"
                }
                _ => "is not valid JSON",
            };
            ToolError::bad_input(format!("the job document from {source} {what}: {e}"))
                .with_hint("give exactly one JSON object, e.g. {\"slurm_cluster\": \"mycluster\"}")
        })?;
        match value {
            Value::Object(fields) => Ok(Document { fields }),
            other => {
                let (line, column) = first_value_position(bytes);
                Err(ToolError::bad_input(format!(
                    "the job document from {source} must be a JSON object, but it is {} (at line {line} column {column})",
                    type_name(&other)
                ))
            .with_hint("wrap the settings in one object: {\"field\": value, ...}"))
            }
        }
    }

    pub fn from_map(fields: Map<String, Value>) -> Document {
        Document { fields }
    }

    pub fn as_map(&self) -> &Map<String, Value> {
        &self.fields
    }

    /// Take the project's secret fields ([`SECRET_FIELDS`]) out of the document and return them.
    pub fn take_secrets(&mut self) -> Secrets {
        let mut secrets = Secrets::default();
        if let Some(Value::String(p)) = self.fields.get("slurm_password") {
            secrets.slurm_password = Some(p.clone());
        }
        strip_secrets(&mut self.fields, &mut secrets.dropped);
        secrets
    }

    /// The compact JSON text written to stdout, with its newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(&self.fields).expect("a JSON map always serialises");
        s.push('\n');
        s
    }

    /// The value of a field, with `null` treated as absent.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// An optional string field; any other type is an error naming the field.
    pub fn str_opt(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => {
                if s.contains('\0') {
                    return Err(field_error(
                        key,
                        "contains a NUL byte, which no command can carry",
                    )
                    .with_hint(format!("remove the \\u0000 character from `{key}`")));
                }
                Ok(Some(s.as_str()))
            }
            Some(other) => Err(wrong_type(key, "a string", other)),
        }
    }

    /// A required string field. `hint` says where the person gets the value.
    pub fn str_req(&self, key: &str, hint: &str) -> Result<&str> {
        match self.str_opt(key)? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err(field_error(key, "is empty").with_hint(hint.to_string())),
            None => Err(missing(key, hint)),
        }
    }

    /// An optional whole number within `min..=max`.
    pub fn int_opt(&self, key: &str, min: i64, max: i64) -> Result<Option<i64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let n = match v {
            Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|_| i64::MAX)),
            _ => None,
        };
        let Some(n) = n else {
            let got = match v {
                Value::Number(_) => format!("the number {v}"),
                other => describe(other),
            };
            return Err(
                field_error(key, &format!("must be a whole number, but it is {got}")).with_hint(
                    format!("write `{key}` as a plain integer, e.g. \"{key}\": {min}"),
                ),
            );
        };
        if n < min || n > max {
            return Err(field_error(
                key,
                &format!("is {n}, but it must be between {min} and {max}"),
            )
            .with_hint(format!("set `{key}` to a value from {min} to {max}")));
        }
        Ok(Some(n))
    }

    pub fn bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(wrong_type(key, "true or false", other)),
        }
    }

    /// `mfa_style`: `true`, `false`, or absent/`null` (unknown); anything else is an error.
    pub fn mfa_style(&self) -> Result<Option<bool>> {
        match self.get("mfa_style") {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(field_error(
                "mfa_style",
                &format!("must be true, false or null, but it is {}", describe(other)),
            )
            .with_hint("true: the cluster needs an interactive (MFA) login; false: keys work; null: find out")),
        }
    }

    /// An optional list of strings.
    pub fn str_list_opt(&self, key: &str) -> Result<Option<Vec<String>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) if !s.contains('\0') => Ok(s.clone()),
                    Value::String(_) => Err(field_error(
                        key,
                        &format!("item {i} contains a NUL byte, which no command can carry"),
                    )),
                    other => {
                        Err(wrong_type(&format!("{key}[{i}]"), "a string", other).with_field(key))
                    }
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(other) => Err(wrong_type(key, "a list of strings", other)),
        }
    }

    /// A section added by a tool (`resolve`, `preflight`, ...), as an object.
    pub fn section(&self, name: &str) -> Option<&Map<String, Value>> {
        self.get(name).and_then(Value::as_object)
    }

    /// Set a derived flat field only when the caller did not supply it. Returns whether it was
    /// set, and records the name in `derived` when it was.
    pub fn derive(&mut self, key: &str, value: Value, derived: &mut Vec<String>) -> bool {
        if self.has(key) {
            return false;
        }
        self.fields.insert(key.to_string(), value);
        derived.push(key.to_string());
        true
    }

    /// Write a tool's own section (replacing an earlier run's section of the same tool), from
    /// its type in [`crate::contract::schema`].
    pub fn set_section<T: serde::Serialize>(&mut self, name: &str, section: &T) {
        let value = serde_json::to_value(section).expect("a schema section always serialises");
        self.fields.insert(name.to_string(), value);
    }

    /// Another tool's section, read through its type in [`crate::contract::schema`]; `None` when absent or
    /// null. A section that does not have the type's shape is a bad-input error naming it.
    pub fn section_as<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        T::deserialize(v).map(Some).map_err(|e| {
            field_error(name, &format!("is not a `{name}` section as the contract defines it: {e}"))
                .with_hint(format!(
                    "the `{name}` section is written by a slurm-tools tool: rerun that tool (of this same slurm-tools version) instead of editing the section by hand"
                ))
        })
    }

    /// The contract version this document follows: a higher one than these tools speak is
    /// refused, naming the field.
    pub fn check_contract_version(&self) -> Result<()> {
        let ours = crate::contract::schema::CONTRACT_VERSION;
        match self.get("contract_version") {
            None => Ok(()),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v <= u64::from(ours)) => Ok(()),
            Some(v) => Err(field_error(
                "contract_version",
                &format!("is {}, but these tools speak contract version {ours}", describe(v)),
            )
            .with_hint(format!(
                "use the slurm-tools version that wrote this document, or remove `contract_version` if the document was written by hand for version {ours}"
            ))),
        }
    }

    /// Record the contract version these tools wrote the document in.
    pub fn stamp_contract_version(&mut self) {
        let v = Value::from(crate::contract::schema::CONTRACT_VERSION);
        if self.fields.get("contract_version") != Some(&v) {
            self.fields.insert("contract_version".to_string(), v);
        }
    }

    /// Remove a field (a tool moving another tool's stale section aside).
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        self.fields.shift_remove(key)
    }

    /// The `error` section left by an earlier tool, with the exit code to pass on.
    pub fn upstream_error(&self) -> Option<i32> {
        let err = self.fields.get("error")?;
        if err.is_null() {
            return None;
        }
        let code = err
            .get("exit_code")
            .and_then(Value::as_i64)
            .filter(|c| (1..=125).contains(c))
            .unwrap_or(2);
        Some(code as i32)
    }
}

/// Line and column (1-based, like serde_json) of the first non-blank byte.
fn first_value_position(bytes: &[u8]) -> (usize, usize) {
    let (mut line, mut column) = (1, 0);
    for &b in bytes {
        if b == b'\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
            if !b.is_ascii_whitespace() {
                break;
            }
        }
    }
    (line, column)
}

fn strip_secrets(map: &mut Map<String, Value>, dropped: &mut Vec<String>) {
    for k in SECRET_FIELDS {
        if map.shift_remove(*k).is_some() {
            dropped.push(k.to_string());
        }
    }
}

/// "the string \"2\"", "the number 2.5", "a list", ...
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", preview(s)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

pub fn wrong_type(key: &str, expected: &str, got: &Value) -> ToolError {
    field_error(
        key,
        &format!("must be {expected}, but it is {}", describe(got)),
    )
    .with_hint(format!("fix the type of `{key}` in the job document"))
}

pub fn missing(key: &str, hint: &str) -> ToolError {
    ToolError::field(
        ErrorKind::BadInput,
        key,
        format!("field `{key}` is required but missing"),
    )
    .with_hint(hint.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(s: &str) -> Document {
        Document::parse(s.as_bytes(), "test").unwrap()
    }

    #[test]
    fn keeps_order_and_unknown_fields() {
        let d = doc(r#"{"z":1,"a":{"x":[1,2]},"m":null}"#);
        assert_eq!(d.to_line(), "{\"z\":1,\"a\":{\"x\":[1,2]},\"m\":null}\n");
    }

    #[test]
    fn only_the_projects_secret_fields_are_dropped() {
        let mut d = doc(
            r#"{"slurm_password":"pw","x":{"API_TOKEN":"t","ok":1},"l":[{"my_secret":2}],"max_new_tokens":8,"tokenizer_dir":"/t","env":{"HF_TOKEN":"h"},"x_password":1}"#,
        );
        let s = d.take_secrets();
        assert_eq!(s.slurm_password.as_deref(), Some("pw"));
        assert_eq!(s.dropped, vec!["slurm_password"]);
        assert_eq!(
            d.to_line(),
            "{\"x\":{\"API_TOKEN\":\"t\",\"ok\":1},\"l\":[{\"my_secret\":2}],\"max_new_tokens\":8,\"tokenizer_dir\":\"/t\",\"env\":{\"HF_TOKEN\":\"h\"},\"x_password\":1}\n"
        );
        assert!(!format!("{s:?}").contains("pw\""));
    }

    #[test]
    fn ints_are_checked_for_type_and_range() {
        let d = doc(r#"{"a":"2","b":2.5,"c":-1,"d":3,"e":1e30}"#);
        assert!(d
            .int_opt("a", 1, 10)
            .unwrap_err()
            .message
            .contains("the string \"2\""));
        assert!(d.int_opt("b", 1, 10).unwrap_err().message.contains("2.5"));
        assert!(d
            .int_opt("c", 1, 10)
            .unwrap_err()
            .message
            .contains("between 1 and 10"));
        assert_eq!(d.int_opt("d", 1, 10).unwrap(), Some(3));
        assert!(d.int_opt("e", 1, 10).is_err());
        assert_eq!(d.int_opt("zz", 1, 10).unwrap(), None);
    }

    #[test]
    fn derive_never_overwrites() {
        let mut d = doc(r#"{"a":"given","b":null}"#);
        let mut derived = vec![];
        assert!(!d.derive("a", "x".into(), &mut derived));
        assert!(d.derive("b", "y".into(), &mut derived));
        assert_eq!(derived, vec!["b"]);
        assert_eq!(d.str_opt("a").unwrap(), Some("given"));
    }

    #[test]
    fn parse_errors_say_where() {
        let e = Document::parse(b"{\"a\":\n 1", "stdin").unwrap_err();
        assert!(
            e.message.contains("truncated") && e.message.contains("line 2"),
            "{}",
            e.message
        );
        let e = Document::parse(b"{} {}", "stdin").unwrap_err();
        assert!(e.message.contains("more than one"), "{}", e.message);
        let e = Document::parse(b"[1]", "stdin").unwrap_err();
        assert!(e.message.contains("must be a JSON object"), "{}", e.message);
        let e = Document::parse(b"  \n", "stdin").unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
    }
}
