//! The remote layout of PROCEDURE 4a/4b/4f.1, derived the same way by every tool that needs it:
//! `remote_repo_path = <root>/<repo name>`, `remote_work_dir = <repo>/work_dirs/<leaf>`.

/// Join two remote path parts with exactly one `/`.
pub fn join(a: &str, b: &str) -> String {
    format!("{}/{}", a.trim_end_matches('/'), b.trim_start_matches('/'))
}

/// The last component of a path, when it is a real name.
pub fn basename(p: &str) -> Option<String> {
    p.trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty() && *s != "." && *s != "..")
        .map(str::to_string)
}

/// The repository's directory name from its URL: `git@h:org/proj.git` -> `proj`.
pub fn repo_name(url: &str) -> Option<String> {
    let tail = url.trim_end_matches('/').rsplit(['/', ':']).next()?;
    let name = tail.strip_suffix(".git").unwrap_or(tail);
    (!name.is_empty() && name != "." && name != "..").then(|| name.to_string())
}

/// Keep `[A-Za-z0-9_-]` (plus `.` when `allow_dot`); every other byte becomes `_`
/// (PROCEDURE 4c's rule for branch-name parts).
pub fn sanitize(s: &str, allow_dot: bool) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (allow_dot && b == b'.') {
                b as char
            } else {
                '_'
            }
        })
        .collect()
}

/// `<repo>/work_dirs/<leaf>`, the leaf from `work_dir`, else the job name, else `default`.
pub fn work_dir(repo: &str, work_dir: Option<&str>, job_name: Option<&str>) -> String {
    let leaf = work_dir
        .and_then(basename)
        .or_else(|| job_name.map(|j| sanitize(j, true)))
        .unwrap_or_else(|| "default".to_string());
    join(&join(repo, "work_dirs"), &leaf)
}

/// UTC `YYYYmmddHHMMSS` for a Unix time (no time-zone database needed).
pub fn utc_stamp(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names() {
        assert_eq!(
            repo_name("git@github.com:NVIDIA/TensorRT-LLM.git").as_deref(),
            Some("TensorRT-LLM")
        );
        assert_eq!(repo_name("/srv/x/sample.git/").as_deref(), Some("sample"));
        assert_eq!(repo_name("https://h/a/b").as_deref(), Some("b"));
        assert_eq!(repo_name("/"), None);
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(basename("runs/exp1/").as_deref(), Some("exp1"));
        assert_eq!(basename(".."), None);
        assert_eq!(sanitize("a b/ü.c", false), "a_b____c");
        assert_eq!(work_dir("/r/", Some("x/y"), None), "/r/work_dirs/y");
        assert_eq!(work_dir("/r", None, Some("a b")), "/r/work_dirs/a_b");
    }

    #[test]
    fn stamps() {
        assert_eq!(utc_stamp(0), "19700101000000");
        assert_eq!(utc_stamp(1_796_212_800), "20261202120000");
        assert_eq!(utc_stamp(1_709_208_000), "20240229120000");
    }
}
