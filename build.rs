//! Names the commit the tools were built from in their long `--version`
//! (`slurm-resolve 0.1.0 (commit 0123456789ab)`; `-V` keeps the short form, which the man pages
//! carry). The commit is `SLURM_TOOLS_COMMIT` when set (a build from a source archive), else
//! `git rev-parse HEAD` of this checkout, else "unknown".
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_TOOLS_COMMIT");
    let commit = std::env::var("SLURM_TOOLS_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    // Built again when HEAD moves (a commit, a checkout), not on every file change.
    // (`--git-path` names each file where git keeps it, in a linked worktree too.)
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        // (A path that does not exist would make cargo run this script on every build.)
        if let Some(path) =
            git(&["rev-parse", "--git-path", &name]).filter(|p| std::path::Path::new(p).exists())
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!(
        "cargo:rustc-env=SLURM_TOOLS_LONG_VERSION={} (commit {commit})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
}
