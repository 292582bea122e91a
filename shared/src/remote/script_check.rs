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

    /// The operations several tools share, as their scripts are assembled (a value with a quote
    /// in it where one is given).
    #[test]
    fn the_shared_operations_scripts_are_clean_as_assembled() {
        use crate::remote::forensics::{Collect, Collection};
        use crate::remote::running::StillRunning;
        use crate::remote::{JobNodes, Operation, Scancel, UsageQuery};
        let ids = ["12".to_string(), "13_[1-3]".to_string()];
        assert_clean("job-nodes", JobNodes::script("42").unwrap().as_str());
        assert_clean("scancel", Scancel::script(&ids).unwrap().as_str());
        assert_clean("usage-query", UsageQuery::script(&ids).unwrap().as_str());
        assert_clean(
            "still-running",
            StillRunning::script("42").unwrap().as_str(),
        );
        for check in [false, true] {
            let p = Collection {
                job_id: "42".into(),
                check,
                install: !check,
            };
            let s = Collect::script(&p).unwrap();
            assert_clean("forensics", s.as_str());
            // The collector runs inside the job's step: it is clean on its own too.
            let mut collector = crate::remote::quote::Script::new();
            collector.assign("job", "42").unwrap();
            collector.assign("pyspy_timeout", "8").unwrap();
            collector.raw(crate::remote::FORENSICS_COLLECT);
            assert_clean("forensics-collect", collector.as_str());
        }
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
