//! The remote environment check (docs/migrating.md, step 3), in one round trip.
//!
//! One script prints `key=value` lines (each value reduced to its first line), which become the
//! `preflight.remote` report ([`RemoteCheck`]). The only value in it from the document is
//! `remote_cwd`, quoted; a leading `~/` is expanded there, against the home the check reports.

use shared::contract::schema::{Accounting, RemoteCheck};
use shared::remote::quote::Script;
use shared::{Result, ToolError};

/// The check as an operation: given `remote_cwd`, it answers the `preflight.remote` report.
/// slurm-ssh-preflight runs its script over each connection it tries while it decides the path
/// (the direct host, a master, a login), so it calls `script` and `reply` itself around those
/// tries instead of `shared::remote::run`; a failed execution is the connection's error there.
pub struct RemoteEnv;

impl shared::remote::Operation for RemoteEnv {
    /// `remote_cwd`, as given.
    type Params = str;
    type Reply = RemoteCheck;
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

    fn script(remote_cwd: &str) -> Result<Script> {
        script(remote_cwd)
    }

    fn reply(remote_cwd: &str, out: &shared::support::process::Output) -> Result<RemoteCheck> {
        Ok(parse(&out.stdout_text(), remote_cwd))
    }
}

fn script(remote_cwd: &str) -> Result<Script> {
    let mut s = Script::new();
    // A literal ~ (quoted, as every value is) is the home, expanded below where it is known.
    s.raw("# shellcheck disable=SC2088\n");
    s.assign("cwd", remote_cwd)?;
    s.raw(shared::remote::PREFLIGHT_CHECK);
    Ok(s)
}

/// The check's `key=value` lines as the `preflight.remote` report. `remote_cwd` is the
/// directory as the cluster sees it (`~/` expanded there), else as given.
pub fn parse(text: &str, remote_cwd: &str) -> RemoteCheck {
    let mut r = RemoteCheck {
        remote_cwd: remote_cwd.to_string(),
        ..Default::default()
    };
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let opt = || (!v.trim().is_empty()).then(|| v.trim().to_string());
        match k {
            "cwd" => r.remote_cwd = opt().unwrap_or(r.remote_cwd),
            "cwd_exists" => r.remote_cwd_exists = v == "1",
            "cwd_writable" => r.remote_cwd_writable = v == "1",
            "cwd_created" => r.remote_cwd_created = v == "1",
            "user" => r.user = opt(),
            "home" => r.home = opt(),
            "login_host" => r.login_host = opt(),
            "tmux" => r.tmux = opt(),
            "slurm" => r.slurm_version = opt(),
            "git" => r.git = opt(),
            "tar" => r.tar = opt(),
            "accounting" => {
                r.accounting = match v {
                    "enabled" => Some(Accounting::Enabled),
                    "disabled" => Some(Accounting::Disabled),
                    "unreachable" => Some(Accounting::Unreachable),
                    "missing" => Some(Accounting::Missing),
                    _ => None,
                }
            }
            "container_flags" => r.container_flags = v == "1",
            "container_writable" => r.container_writable = Some(v == "1"),
            "pyxis" => r.pyxis = opt(),
            "enroot" => r.enroot = opt(),
            "apptainer" => r.apptainer = opt(),
            "mpi" => {
                r.mpi_plugins = Some(
                    v.split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(|p| p.strip_prefix("mpi/").unwrap_or(p).to_string())
                        .collect(),
                )
            }
            _ => {}
        }
    }
    r
}

/// What a later step needs from the remote side.
pub trait Require {
    fn require(&self, host: &str) -> Result<()>;
}

impl Require for RemoteCheck {
    /// Exit 4 naming the first missing piece a later step needs.
    fn require(&self, host: &str) -> Result<()> {
        let missing = |what: &str, hint: &str| {
            Err(ToolError::remote(format!("{host}: {what}")).with_hint(hint.to_string()))
        };
        if !self.remote_cwd_exists {
            return missing(
                &format!(
                    "remote_cwd {} does not exist and could not be created",
                    self.remote_cwd
                ),
                "create it on the cluster, or set `remote_cwd` to a directory you can write",
            )
            .map_err(|e: ToolError| e.with_field("remote_cwd"));
        }
        if !self.remote_cwd_writable {
            return missing(
                &format!("remote_cwd {} is not writable", self.remote_cwd),
                "set `remote_cwd` to a directory you can write",
            )
            .map_err(|e: ToolError| e.with_field("remote_cwd"));
        }
        if self.slurm_version.is_none() {
            return missing("Slurm's squeue is not on PATH for non-interactive logins", "load Slurm in your shell startup file that non-interactive shells read (e.g. ~/.bashrc), or check you reached a login node");
        }
        if self.tmux.is_none() {
            return missing(
                "tmux is not on PATH (jobs and allocations are held in tmux on the login node)",
                "ask the cluster admins for tmux, or put a tmux binary on your PATH",
            );
        }
        if self.git.is_none() {
            return missing(
                "git is not on PATH (the remote checkout needs it)",
                "load a git module in your shell startup file",
            );
        }
        if self.tar.is_none() {
            return missing(
                "tar is not on PATH (untracked files travel as a tar stream)",
                "put tar on PATH",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_passes_the_static_checks() {
        for cwd in ["~/work", "/h/u/it's here"] {
            shared::remote::script_check::assert_clean(
                "preflight-check",
                script(cwd).unwrap().as_str(),
            );
        }
    }

    #[test]
    fn the_check_lines_become_the_report() {
        let text = "cwd=/home/u/work\ncwd_exists=1\ncwd_writable=1\ncwd_created=0\nuser=u\nhome=/home/u\nlogin_host=login1\ntmux=tmux 3.3a\nslurm=slurm 22.05.8\ngit=git version 2.39.5\ntar=tar (GNU tar) 1.34\naccounting=disabled\ncontainer_flags=1\ncontainer_writable=1\npyxis=0.24.0\nenroot=4.1.2\nmpi=none,cray_shasta,pmi2,pmix\n";
        let r = parse(text, "~/work");
        assert_eq!(r.container_writable, Some(true));
        assert_eq!(r.pyxis.as_deref(), Some("0.24.0"));
        assert_eq!(r.enroot.as_deref(), Some("4.1.2"));
        assert_eq!(
            r.mpi_plugins.as_deref(),
            Some(&["none", "cray_shasta", "pmi2", "pmix"].map(String::from)[..])
        );
        assert!(r.require_pmix("recipe", "the mpi recipe").is_ok());
        let without = parse("login_host=login1\nmpi=none,pmi2\n", "~/work");
        let e = without
            .require_pmix("recipe", "the mpi recipe")
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("recipe"));
        assert!(
            e.message.contains("no mpi/pmix plugin") && e.message.contains("none, pmi2"),
            "{}",
            e.message
        );
        // Not asked (an older document, or no srun): nothing to refuse.
        assert!(parse("", "~/work")
            .require_pmix("recipe", "the mpi recipe")
            .is_ok());
        assert_eq!(r.remote_cwd, "/home/u/work");
        assert!(r.remote_cwd_exists && r.remote_cwd_writable && !r.remote_cwd_created);
        assert_eq!(r.home.as_deref(), Some("/home/u"));
        assert_eq!(r.accounting, Some(Accounting::Disabled));
        assert!(r.container_flags);
        assert!(r.require("h").is_ok());
        let mut no_tmux = r.clone();
        no_tmux.tmux = None;
        assert!(no_tmux.require("h").unwrap_err().message.contains("tmux"));
        let bare = parse("cwd_exists=0\n", "/x");
        assert_eq!(bare.remote_cwd, "/x");
        assert_eq!(
            bare.require("h").unwrap_err().field.as_deref(),
            Some("remote_cwd")
        );
    }
}
