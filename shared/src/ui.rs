//! Messages for people, on stderr only (stdout is the document's).
//!
//! Plain text, no colour (so `NO_COLOR` holds trivially), one line per message prefixed with the
//! tool's name, so in a pipeline of six tools the person knows which one is talking.

use crate::error::ToolError;
use std::io::Write;

pub fn note(tool: &str, msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{tool}: {msg}");
}

pub fn warn(tool: &str, msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{tool}: warning: {msg}");
}

pub fn error(tool: &str, e: &ToolError) {
    let mut err = std::io::stderr().lock();
    for line in e.to_string().lines() {
        let _ = writeln!(err, "{tool}: {line}");
    }
}
