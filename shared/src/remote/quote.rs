//! The one place where a value becomes shell text.
//!
//! Remote commands are data: a [`Script`] is built from fixed text that the project wrote
//! (`&'static str`, so a user value cannot sneak in through it) and from values, each quoted once
//! by [`quote`] into exactly one shell word. Scripts reach the remote as stdin of a fixed
//! `/bin/sh` entry (see [`crate::remote::ssh`]), so the person's login shell (bash, zsh, even tcsh) never
//! parses them. The only shell text that is *not* quoted is the job's `command`, which the contract
//! says runs exactly as written; it goes in through [`Script::user_shell_text`], by name, so a
//! reader can find every such place.

use crate::contract::error::{Result, ToolError};
use crate::contract::text::{is_plain, single_quoted};
pub use crate::contract::text::{preview, quote_for_display};

/// Refuse NUL, naming the problem (the caller names the field).
fn check_no_nul(value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(ToolError::bad_input(format!(
            "the value {} contains a NUL byte, which no command argument can carry",
            preview(value)
        ))
        .with_hint("remove the NUL character (\\u0000) from the value"));
    }
    Ok(())
}

/// Quote one value as exactly one POSIX shell word: bare when every byte is plain, otherwise in
/// single quotes. NUL cannot be represented in an argument and is refused.
pub fn quote(value: &str) -> Result<String> {
    check_no_nul(value)?;
    if is_plain(value) {
        Ok(value.to_string())
    } else {
        Ok(single_quoted(value))
    }
}

/// Like [`quote`], but always in single quotes unless the value is all digits: for assignments,
/// where `name=st-run-42` reads (to a reader and to shellcheck, SC2100) like arithmetic gone
/// wrong. Written directly, never by touching up another writer's output.
pub fn quote_always(value: &str) -> Result<String> {
    check_no_nul(value)?;
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        Ok(value.to_string())
    } else {
        Ok(single_quoted(value))
    }
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
        self.text.push_str(&quote_always(value)?);
        self.text.push('\n');
        Ok(self)
    }

    /// `export NAME='value'` on a line of its own, for a name computed at run time (a sweep's
    /// parameter): refused unless it is a shell identifier, so nothing but a name enters.
    pub fn export_env(&mut self, name: &str, value: &str) -> Result<&mut Self> {
        let identifier = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !identifier {
            return Err(crate::ToolError::bad_input(format!(
                "{} is not a shell variable name",
                preview(name)
            )));
        }
        self.text.push_str("export ");
        self.text.push_str(name);
        self.text.push('=');
        self.text.push_str(&quote_always(value)?);
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
    /// Random strings over everything a document value can hold but NUL: printable ASCII with
    /// every quote and backslash, whitespace and control characters, non-ASCII, and the empty
    /// string. Deterministic (xorshift) so a failure repeats.
    fn corpus() -> Vec<String> {
        const PIECES: &[&str] = &[
            "'", "\"", "\\", "$", "`", "$(", ")", "${", "}", "{", ";", "&", "|", "<", ">", "*",
            "?", "[", "]", "~", "#", "!", "=", "%", "^", " ", "\t", "\n", "\r", "\u{1}", "\u{1b}",
            "\u{7f}", "é", "日本", "✓", "🦀", "a", "Z", "0", "-", "_", ".", "/", ":", "@", "+",
            ",",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut out: Vec<String> = vec![String::new(), "'".into(), "a'b".into(), "x=y".into()];
        // Every printable ASCII character alone and between letters.
        for b in 0x20u8..0x7f {
            out.push((b as char).to_string());
            out.push(format!("a{}b", b as char));
        }
        // Values shlex 1.3 quoted in pieces (a quote in the middle of a word): the shape that
        // escaped `assign` (security review 2026-12-05, finding 1).
        out.push("a'$(touch canary)'b".into());
        out.push("x\"'`touch canary`'\"y".into());
        for _ in 0..600 {
            let len = (next() % 24) as usize;
            let mut v = String::new();
            for _ in 0..len {
                v.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            out.push(v);
        }
        out
    }

    /// A script that writes every value with every writer and prints, per value, the number of
    /// words `arg` made and then what the shell made of each writer's text, each between `<` and
    /// `>` (builtins only, so hundreds of values cost no process each).
    fn script_for(values: &[String]) -> Script {
        let mut s = Script::new();
        s.raw("p() { printf '<%s>\\n' \"$1\"; }\n");
        s.raw("n() { printf '%s\\n' \"$#\"; }\n");
        for v in values {
            // arg: exactly one word, and it reads back as the value.
            s.raw("n").arg(v).unwrap().raw("\n");
            s.raw("p").arg(v).unwrap().raw("\n");
            // glued after fixed text, as in `--opt=VALUE`.
            s.raw("p --opt=").glued(v).unwrap().raw("\n");
            // assign, then read back.
            s.assign("V", v).unwrap();
            s.raw("p \"$V\"\n");
            // command: each word quoted.
            s.command(&["p", v.as_str()]).unwrap();
        }
        s
    }

    fn expected_for(values: &[String]) -> String {
        let mut out = String::new();
        for v in values {
            out.push_str(&format!("1\n<{v}>\n<--opt={v}>\n<{v}>\n<{v}>\n"));
        }
        out
    }

    /// Every writer's text parses back to exactly the value, in every POSIX shell there is here
    /// (dash, bash --posix, busybox sh, posh). Under CI=true a missing shell is a failure.
    #[test]
    fn every_writer_reads_back_as_the_value_in_every_posix_shell() {
        let values = corpus();
        let script = script_for(&values);
        let expected = expected_for(&values);
        let shells: &[(&str, &[&str])] = &[
            ("dash", &[]),
            ("bash", &["--posix"]),
            ("busybox", &["sh"]),
            ("posh", &[]),
        ];
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let mut ran = 0;
        for (shell, pre) in shells {
            let out = std::process::Command::new(shell)
                .args(*pre)
                .arg("-c")
                .arg(script.as_str())
                .current_dir(std::env::temp_dir())
                .output();
            let out = match out {
                Ok(o) => o,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !ci => {
                    eprintln!("note: {shell} is not installed; not checked here");
                    continue;
                }
                Err(e) => panic!("running {shell}: {e}"),
            };
            ran += 1;
            let got = String::from_utf8_lossy(&out.stdout);
            if got != expected {
                let at = got
                    .bytes()
                    .zip(expected.bytes())
                    .position(|(g, e)| g != e)
                    .unwrap_or(got.len().min(expected.len()));
                let from = at.saturating_sub(60);
                panic!(
                    "{shell}: the values did not read back as written, from byte {at}:\n got: {:?}\nwant: {:?}\nstderr: {}",
                    got.get(from..(at + 60).min(got.len())),
                    expected.get(from..(at + 60).min(expected.len())),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        assert!(ran >= 1, "no POSIX shell found to check the writers with");
        assert!(
            !std::env::temp_dir().join("canary").exists(),
            "a value ran as a command"
        );
    }

    #[test]
    fn quoted_text_passes_shellcheck_whatever_the_value() {
        // A backslash before a closing single quote reads to shellcheck like an attempted
        // escape (SC1003): backslashes are written outside the quotes.
        let mut s = Script::new();
        for v in ["back\\slash\\", "\\", "a'b", "x\"'`y`'\"z", "$(id)", "a\nb"] {
            s.assign("V", v).unwrap();
            s.raw("printf '%s\\n' \"$V\"").arg(v).unwrap().raw("\n");
        }
        crate::remote::script_check::assert_clean("quoted-values", s.as_str());
    }

    #[test]
    fn no_writer_post_processes_another_writers_output() {
        // The value that escaped before: shlex quoted it in pieces and assign wrapped the pieces.
        let mut s = Script::new();
        s.assign("X", "a'$(id)'b").unwrap();
        assert_eq!(s.as_str(), "X='a'\\''$(id)'\\''b'\n");
        assert_eq!(quote("--partition=debug").unwrap(), "--partition=debug");
        assert_eq!(quote("A=b").unwrap(), "'A=b'");
        assert_eq!(quote_always("st-run-42").unwrap(), "'st-run-42'");
        assert_eq!(quote_always("42").unwrap(), "42");
    }
}
