//! Unit tests' door to `scripts/check-remote-scripts`: write a generated remote script out and
//! run the static checks on it (shellcheck -s sh; sh -n under dash, bash --posix, busybox sh and
//! posh). The same checks run over every script the integration and fault tests send
//! (`SLURM_TOOLS_SCRIPT_DUMP`, collected by scripts/test).

use std::path::PathBuf;
use std::process::Command;

/// The repository's checker script.
fn checker() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("scripts/check-remote-scripts")
}

/// Panics with the findings when `text` (a whole remote script, named `name` in the report) is
/// not clean. Checkers that are not installed are skipped with a note, except under CI=true.
pub fn assert_clean(name: &str, text: &str) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join(format!("{name}.sh"));
    std::fs::write(&file, text).expect("writing the script out");
    let out = Command::new("bash")
        .arg(checker())
        .arg(&file)
        .output()
        .expect("running scripts/check-remote-scripts");
    assert!(
        out.status.success(),
        "the remote script {name} does not pass the static checks:\n{}{}\n--- the script:\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checker_finds_what_a_posix_shell_refuses() {
        // The checks must be able to fail: a bashism and a syntax error.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.sh");
        std::fs::write(&file, "if [[ -n $x ]]; then echo ${x:1}; fi\ncase x in\n").unwrap();
        let out = Command::new("bash")
            .arg(checker())
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success());
    }

    #[test]
    fn the_shared_shell_fragments_are_clean() {
        let mut s = crate::remote::quote::Script::new();
        s.raw("set -u\n");
        s.raw(crate::slurm::NAP);
        s.raw(crate::slurm::OVERLAP);
        s.raw(crate::slurm::pyxis::FIRST_HOST);
        s.raw("nap 0.1\necho \"$ov\"\nfirst_host\n");
        // The job's code tree: made and pruned at every submission.
        let doc = crate::Document::parse(
            br#"{"remote_cwd":"/h/u/work","remote_repo_path":"/h/u/work/repo"}"#,
            "test",
        )
        .unwrap();
        let layout = crate::remote::layout::LayoutInput::read(&doc).unwrap();
        let trees =
            crate::remote::trees::Trees::of(&layout, "/h/u/work/repo", "slurm-tools-abc", 10, None)
                .unwrap();
        trees.assign(&mut s, true).unwrap();
        s.raw("make_tree && prune_trees\n");
        // The running-job check and node choice of slurm-attach and slurm-forward.
        crate::remote::running::check_running(&mut s, "42").unwrap();
        crate::remote::running::pick_node(&mut s, Some("mn2")).unwrap();
        assert_clean("shared-fragments", s.as_str());
    }
}
