//! A tool's input: the document fields it reads, as one typed value made at the boundary.
//!
//! Each tool (and each shared part that needs fields of its own: the connection, the remote
//! layout, the Slurm settings) declares its input with [`document_input!`]: a struct whose
//! fields are named exactly as the document's, each with the reader that checks it (type, range,
//! NUL bytes) and says what is wrong, naming the field. The tool reads it once, before its step
//! does anything (ripgrep's LowArgs, made from the arguments before any search), and passes the
//! typed values on: nothing downstream reads the document by string key (a test in this module
//! scans the sources for it). The `Reads:` line of the tool's `--help` is generated from the same
//! declaration ([`crate::contract::driver::READS_MARKER`]), so the help names exactly the fields
//! the tool reads.

/// Declare a tool's input: a struct whose fields are document fields, each `name: Type =
/// reader` or `name: Type = reader(args)` with a reader of [`read`] (`string`, `strings`,
/// `flag`, `int(min, max)`, `section`, `mfa`, `label`, `label_int`, `label_section`, `value`), or `part` for another input
/// declared this way, whose fields it includes. The struct gets `read(&Document)` and
/// `reads()`, the names of every field it reads, parts included, in order.
#[macro_export]
macro_rules! document_input {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $fvis:vis $field:ident : $ty:ty = $reader:ident $( ( $($arg:expr),* ) )?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default)]
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field: $ty, )*
        }

        impl $name {
            /// Every document field and section this input reads, in declaration order.
            pub fn reads() -> Vec<&'static str> {
                let mut names: Vec<&'static str> = Vec::new();
                $( $crate::document_input!(@name names, $field, $ty, $reader); )*
                names
            }

            /// The input, read from the document; the first field that is not as the contract
            /// says is the error, named.
            pub fn read(doc: &$crate::Document) -> $crate::Result<$name> {
                Ok($name {
                    $( $field: $crate::document_input!(@read doc, $field, $ty, $reader $( ( $($arg),* ) )?), )*
                })
            }
        }
    };
    (@name $names:ident, $field:ident, $ty:ty, part) => {
        for n in <$ty>::reads() {
            if !$names.contains(&n) {
                $names.push(n);
            }
        }
    };
    (@name $names:ident, $field:ident, $ty:ty, $reader:ident) => {
        if !$names.contains(&stringify!($field)) {
            $names.push(stringify!($field));
        }
    };
    (@read $doc:ident, $field:ident, $ty:ty, part) => { <$ty>::read($doc)? };
    (@read $doc:ident, $field:ident, $ty:ty, $reader:ident $( ( $($arg:expr),* ) )?) => {
        $crate::contract::input::read::$reader($doc, stringify!($field) $(, $($arg),*)?)?
    };
}

/// The readers [`document_input!`] declarations name. Used only through that macro.
pub mod read {
    use crate::contract::doc::Document;
    use crate::contract::error::Result;

    /// A string (no NUL byte); absent or null: `None`.
    pub fn string(doc: &Document, key: &str) -> Result<Option<String>> {
        Ok(doc.str_opt(key)?.map(str::to_string))
    }

    /// A list of strings.
    pub fn strings(doc: &Document, key: &str) -> Result<Option<Vec<String>>> {
        doc.str_list_opt(key)
    }

    /// `true` or `false`.
    pub fn flag(doc: &Document, key: &str) -> Result<Option<bool>> {
        doc.bool_opt(key)
    }

    /// A whole number within `min..=max`.
    pub fn int(doc: &Document, key: &str, min: i64, max: i64) -> Result<Option<i64>> {
        doc.int_opt(key, min, max)
    }

    /// A section another tool wrote, through its schema type.
    pub fn section<T: serde::de::DeserializeOwned>(doc: &Document, key: &str) -> Result<Option<T>> {
        doc.section_as(key)
    }

    /// `mfa_style`: true, false, or null (find out).
    pub fn mfa(doc: &Document, _key: &str) -> Result<Option<bool>> {
        doc.mfa_style()
    }

    /// A whole number used only as a label (the ledger's `attempt`): any other type is none.
    pub fn label_int(doc: &Document, key: &str) -> Result<Option<i64>> {
        Ok(doc.get(key).and_then(serde_json::Value::as_i64))
    }

    /// A section used only for labels (the ledger's row of a run): one not of its type is none.
    pub fn label_section<T: serde::de::DeserializeOwned>(
        doc: &Document,
        key: &str,
    ) -> Result<Option<T>> {
        Ok(doc.section_as(key).ok().flatten())
    }

    /// The value as it came (null: `None`), for a field of more than one form that its own
    /// parser checks (`mounts`: a string or a list).
    pub fn value(doc: &Document, key: &str) -> Result<Option<serde_json::Value>> {
        Ok(doc.get(key).cloned())
    }

    /// A string used only as a label (a ledger row, a report line): any other type is no label,
    /// not an error, so a label never stops a tool that has a verdict to give.
    pub fn label(doc: &Document, key: &str) -> Result<Option<String>> {
        Ok(doc.str_opt(key).ok().flatten().map(str::to_string))
    }
}

#[cfg(test)]
mod tests {
    use crate::contract::schema::Job;
    use crate::Document;

    crate::document_input! {
        /// A part.
        struct Part {
            ssh_host: Option<String> = string,
        }
    }

    crate::document_input! {
        struct Whole {
            job_name: Option<String> = string,
            nodes: Option<i64> = int(1, 8),
            fast: Option<bool> = flag,
            files: Option<Vec<String>> = strings,
            job: Option<Job> = section,
            conn: Part = part,
            again: Option<String> = label,
        }
    }

    fn doc(text: &str) -> Document {
        Document::parse(text.as_bytes(), "test").unwrap()
    }

    #[test]
    fn reads_names_every_field_and_each_part_field_once_in_order() {
        assert_eq!(
            Whole::reads(),
            ["job_name", "nodes", "fast", "files", "job", "ssh_host", "again"]
        );
    }

    #[test]
    fn each_field_is_checked_and_named_and_labels_never_fail() {
        let w = Whole::read(&doc(
            r#"{"job_name":"a","nodes":3,"fast":true,"files":["x"],"ssh_host":"h","again":5}"#,
        ))
        .unwrap();
        assert_eq!(w.job_name.as_deref(), Some("a"));
        assert_eq!(w.nodes, Some(3));
        assert_eq!(w.fast, Some(true));
        assert_eq!(w.files, Some(vec!["x".to_string()]));
        assert_eq!(w.conn.ssh_host.as_deref(), Some("h"));
        assert_eq!(w.again, None);
        assert!(w.job.is_none());
        for (text, field) in [
            (r#"{"nodes":9}"#, "nodes"),
            (r#"{"fast":"yes"}"#, "fast"),
            (r#"{"files":"x"}"#, "files"),
            (r#"{"job":{"nope":1}}"#, "job"),
            (r#"{"ssh_host":3}"#, "ssh_host"),
        ] {
            let e = Whole::read(&doc(text)).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{text}: {e:?}");
        }
    }

    /// Outside the contract's own files (shared/src/contract/), nothing reads the document by string key: a tool or a
    /// shared part declares its input with `document_input!` and reads it once.
    #[test]
    fn no_document_field_is_read_by_key_outside_an_input_declaration() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = Vec::new();
        for top in ["tools", "shared/src"] {
            scan(&root.join(top), &root, &mut found);
        }
        assert!(
            found.is_empty(),
            "the document is read by key outside an input declaration (declare the field in the \
             tool's document_input! and read the typed value):\n{}",
            found.join("\n")
        );
    }

    const READS: &[&str] = &[
        ".str_opt(",
        ".str_req(",
        ".int_opt(",
        ".bool_opt(",
        ".str_list_opt(",
        ".mfa_style(",
        ".section_as(",
        ".section_as::<",
        "doc.section(",
        "doc.has(",
        "doc.get(",
        "input::read::",
    ];

    fn scan(dir: &std::path::Path, root: &std::path::Path, found: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                scan(&p, root, found);
                continue;
            }
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if !rel.ends_with(".rs") || rel.starts_with("shared/src/contract/") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            // A file's unit tests build documents to test with; only the code above them counts.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                if READS.iter().any(|r| line.contains(r)) && !line.trim_start().starts_with("//") {
                    found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
}
