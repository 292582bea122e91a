//! The one error type every tool returns, and how it maps to the exit codes of the contract.
//!
//! A `ToolError` is what a tired person reads at 2 a.m.: *what* went wrong (`message`), *what to do*
//! (`hint`), the field at fault when there is one, and, for a failed external command, the exact
//! argv, its exit code and the tail of its stderr. The driver turns it into both the stderr text
//! and the document's `error` section, so the two always say the same thing.

use std::fmt;

/// The contract's exit codes (docs/contract.md, "Exit codes"); serialised as `error.kind`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 2: unparsable JSON, not an object, a missing or invalid field, bad flags.
    BadInput,
    /// 3: a person must act: MFA login needed, several clusters match, a value only they know.
    NeedsPerson,
    /// 4: ssh, git, tar or a Slurm command failed or is missing.
    Remote,
}

impl ErrorKind {
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::BadInput => 2,
            ErrorKind::NeedsPerson => 3,
            ErrorKind::Remote => 4,
        }
    }

    /// The stable name written to `error.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadInput => "bad_input",
            ErrorKind::NeedsPerson => "needs_person",
            ErrorKind::Remote => "remote",
        }
    }
}

/// An external command that failed, as recorded by [`crate::support::process`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRecord {
    pub argv: Vec<String>,
    /// `None` when the process was killed (deadline) or could not be started.
    pub exit_code: Option<i32>,
    /// The last few KiB of its stderr, lossily decoded.
    pub stderr_tail: String,
}

#[derive(Debug, Clone)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    pub hint: Option<String>,
    pub field: Option<String>,
    pub command: Option<Box<CommandRecord>>,
}

pub type Result<T, E = ToolError> = std::result::Result<T, E>;

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
            hint: None,
            field: None,
            command: None,
        }
    }

    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadInput, message)
    }

    pub fn needs_person(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NeedsPerson, message)
    }

    pub fn remote(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Remote, message)
    }

    /// A field of the document at fault: the message names it, and `error.field` carries it.
    pub fn field(kind: ErrorKind, field: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(kind, message);
        e.field = Some(field.to_string());
        e
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_field(mut self, field: &str) -> Self {
        self.field = Some(field.to_string());
        self
    }

    pub fn with_command(mut self, record: CommandRecord) -> Self {
        self.command = Some(Box::new(record));
        self
    }
}

impl fmt::Display for ToolError {
    /// The stderr rendering: `error:` line, then the command, then `hint:`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)?;
        if let Some(c) = &self.command {
            let code = c
                .exit_code
                .map_or_else(|| "killed or not started".to_string(), |c| c.to_string());
            write!(
                f,
                "\n  command: {}\n  exit code: {code}",
                render_argv(&c.argv)
            )?;
            let tail = c.stderr_tail.trim_end();
            if !tail.is_empty() {
                write!(f, "\n  stderr:")?;
                for line in tail.lines() {
                    write!(f, "\n    {line}")?;
                }
            }
        }
        if let Some(h) = &self.hint {
            write!(f, "\nhint: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ToolError {}

/// An argv as a person could paste it into a shell (for messages only, never executed).
pub fn render_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| crate::contract::text::quote_for_display(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A document field's value is wrong: `field `KEY` WHAT`, naming the field.
pub fn field_error(key: &str, what: &str) -> ToolError {
    ToolError::field(ErrorKind::BadInput, key, format!("field `{key}` {what}"))
}
