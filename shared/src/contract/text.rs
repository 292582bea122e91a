//! Values as text for people and for shells, with no dependency on the rest of the crate (the
//! error type and the job document use it; `shared::remote::quote` builds scripts on it).

/// Bytes that mean nothing to a POSIX shell anywhere in a word, so a value made only of them is
/// written bare. Not among them: `~` (tilde expansion), `{`/`}` (brace expansion in bash), `#`,
/// `!`, `^`, `[`, `*`, `?`, quotes, blanks, and anything non-ASCII.
pub(crate) fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_@%+:,./=-".contains(&b)
}

/// A value written bare reads back as itself: every byte plain, not empty, and not `NAME=...`
/// (a first word of that shape would be an assignment, not an argument).
pub(crate) fn is_plain(value: &str) -> bool {
    let first = value.bytes().next();
    value.bytes().all(is_plain_byte)
        && match first {
            None => false,
            Some(b) => !(value.contains('=') && (b.is_ascii_alphabetic() || b == b'_')),
        }
}

/// The value in single quotes, each `'` in it written as `'\''` and each `\` as `'\\'` (outside
/// the quotes, escaped: inside them it would be literal too, but shellcheck reads a backslash
/// before a closing quote as an attempted escape). Inside single quotes a POSIX shell treats
/// every byte but `'` literally (newlines and non-ASCII included), so this is one word that
/// reads back as exactly the value, in every POSIX shell, whatever the value holds.
pub(crate) fn single_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\\' => out.push_str("'\\\\'"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// For messages only: how a person would type the value (never executed). An argument like
/// `ControlMaster=auto` is shown bare (it is never a command's first word in a message).
pub fn quote_for_display(value: &str) -> String {
    let bare = !value.is_empty() && value.bytes().all(is_plain_byte) && !value.starts_with('=');
    if bare {
        return value.to_string();
    }
    // As `quote` writes it; NUL, which no argument can carry, as Rust escapes it.
    if value.contains('\0') {
        return format!("{value:?}");
    }
    if is_plain(value) {
        value.to_string()
    } else {
        single_quoted(value)
    }
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
