//! The one place where a value becomes shell text.
//!
//! Remote commands are data: a [`Script`] is built from fixed text that the project wrote
//! (`&'static str`, so a user value cannot sneak in through it) and from values, each quoted once
//! by [`quote`] into exactly one shell word. Scripts reach the remote as stdin of a fixed
//! `/bin/sh` entry (see [`crate::ssh`]), so the person's login shell (bash, zsh, even tcsh) never
//! parses them. The only shell text that is *not* quoted is the job's `command`, which the contract
//! says runs exactly as written; it goes in through [`Script::user_shell_text`], by name, so a
//! reader can find every such place.

use crate::error::{Result, ToolError};

/// Quote one value as exactly one POSIX shell word. NUL cannot be represented in an argument and
/// is refused (the caller names the field).
pub fn quote(value: &str) -> Result<String> {
    shlex::try_quote(value)
        .map(|c| c.into_owned())
        .map_err(|_| {
            ToolError::bad_input(format!(
                "the value {} contains a NUL byte, which no command argument can carry",
                preview(value)
            ))
            .with_hint("remove the NUL character (\\u0000) from the value")
        })
}

/// For messages only: how a person would type the value (never executed).
pub fn quote_for_display(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b))
        && !value.starts_with('=');
    if plain {
        return value.to_string();
    }
    shlex::try_quote(value)
        .map(|c| c.into_owned())
        .unwrap_or_else(|_| format!("{value:?}"))
}

/// A short, single-line, escaped rendering of a value for error messages.
pub fn preview(value: &str) -> String {
    const MAX: usize = 80;
    let mut s: String = value.chars().take(MAX).collect();
    if value.chars().count() > MAX {
        s.push('…');
    }
    format!("{s:?}")
}

/// Shell text for `/bin/sh`, built only from fixed text and quoted values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    text: String,
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fixed text written by the project. `'static` on purpose: a value computed at run time
    /// (and so possibly from the document) cannot be passed here.
    pub fn raw(&mut self, text: &'static str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// One value as one quoted word, preceded by a space.
    pub fn arg(&mut self, value: &str) -> Result<&mut Self> {
        self.text.push(' ');
        self.text.push_str(&quote(value)?);
        Ok(self)
    }

    /// One value as one quoted word, glued to what precedes it (e.g. after `--opt=` or `VAR=`).
    pub fn glued(&mut self, value: &str) -> Result<&mut Self> {
        self.text.push_str(&quote(value)?);
        Ok(self)
    }

    /// A whole command line: every word quoted, followed by a newline.
    pub fn command<S: AsRef<str>>(&mut self, words: &[S]) -> Result<&mut Self> {
        let mut first = true;
        for w in words {
            if !first {
                self.text.push(' ');
            }
            first = false;
            self.text.push_str(&quote(w.as_ref())?);
        }
        self.text.push('\n');
        Ok(self)
    }

    /// `NAME='value'` on a line of its own. `name` is fixed text written by the project.
    pub fn assign(&mut self, name: &'static str, value: &str) -> Result<&mut Self> {
        self.text.push_str(name);
        self.text.push('=');
        let q = quote(value)?;
        // Always quoted, also when nothing in it needs it: `name=st-run-42` reads to a reader
        // (and to shellcheck, SC2100) like arithmetic gone wrong.
        if q.starts_with('\'') || q.starts_with('"') || q.bytes().all(|b| b.is_ascii_digit()) {
            self.text.push_str(&q);
        } else {
            self.text.push('\'');
            self.text.push_str(&q);
            self.text.push('\'');
        }
        self.text.push('\n');
        Ok(self)
    }

    /// The job's `command`, which the contract says is shell text run exactly as written.
    /// This is the only way unquoted text from a document enters a script.
    pub fn user_shell_text(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Append another script.
    pub fn append(&mut self, other: &Script) -> &mut Self {
        self.text.push_str(&other.text);
        self
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_refuses_nul_and_names_the_problem() {
        let e = quote("a\0b").unwrap_err();
        assert!(e.message.contains("NUL"), "{}", e.message);
    }

    #[test]
    fn quote_wraps_braces_and_tilde() {
        assert_ne!(quote("{a,b}").unwrap(), "{a,b}");
        assert_ne!(quote("~root").unwrap(), "~root");
        assert_eq!(quote("").unwrap(), "''");
    }

    #[test]
    fn script_builds_lines() {
        let mut s = Script::new();
        s.raw("cd --").arg("a b; c").unwrap();
        s.raw("\n").assign("X", "$HOME").unwrap();
        assert_eq!(s.as_str(), "cd -- 'a b; c'\nX='$HOME'\n");
    }
}
