//! The one way the project talks to the cluster: the system `ssh`, with the person's own config.
//!
//! [`Ssh`] builds every ssh argv (so `-F ssh_config_file`, `ssh_options`, the shared ControlPath,
//! `ConnectTimeout` and keepalives are never forgotten), and [`Ssh::run_script`] is the only way a
//! remote command runs: the remote side is always the same fixed entry,
//! [`REMOTE_ENTRY`], and the script travels on stdin, length-prefixed, optionally followed by a
//! payload (a tar stream) that the script's last command reads. ssh joins its arguments into one
//! string for the remote *login* shell, which might be tcsh; a fixed entry with no user value in
//! it means that shell never sees one. `/bin/sh` then runs the script, whose values were quoted by
//! [`crate::remote::quote`].
//!
//! ssh's exit code 255 means "ssh failed" (or, rarely, the remote shell died of a signal); our
//! scripts never exit 255 on purpose, so 255 is classified from stderr into [`SshFailure`].

use crate::contract::error::{ErrorKind, Result, ToolError};
use crate::remote::quote::{preview, Script};
use crate::support::process::{Cmd, Input, Output, StreamWriter};
use std::io::Write;
use std::time::Duration;

/// The contract's default ControlMaster socket, shared by every tool: in a directory of the
/// person's own (made 0700 by the first check), not in /tmp where another local user could take
/// the name once the master has gone. `%C` is ssh's hash of local host, host, port and user:
/// fixed length, so the expanded path stays under the socket length limit.
pub const DEFAULT_CONTROL_PATH: &str = "~/.ssh/slurm-tools/%C";

/// The fixed remote command. Reads a byte count line, then exactly that many bytes of script,
/// and runs it in `/bin/sh`. Whatever follows on stdin is left for the script's commands: dd
/// never asks for more than a block (unlike `sh -s`, which in dash reads ahead in 8 KiB blocks
/// and would swallow a payload); one block of the script's size, filled over as many reads as
/// the pipe needs (`iflag=fullblock`: GNU and busybox dd), else, where dd refuses that flag
/// (before reading anything), a byte at a time (a 12 KB script: 5 ms more here). Only
/// `'`-quoting is used, so csh-family login shells pass it through untouched.
pub const REMOTE_ENTRY: &str = "/bin/sh -c 'IFS= read -r n && eval \"$(dd bs=\"$n\" count=1 iflag=fullblock 2>/dev/null || dd bs=1 count=\"$n\" 2>/dev/null)\"'";

/// `Some(version)` when this machine's ssh is older than OpenSSH 8.4, which ignores
/// `SSH_ASKPASS_REQUIRE` (it then prompts on the terminal itself).
pub fn askpass_require_ignored() -> Option<String> {
    let out = std::process::Command::new(ssh_program())
        .arg("-V")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let (major, minor) = openssh_version(&text)?;
    ((major, minor) < (8, 4)).then(|| text.split([',', ' ']).next().unwrap_or("").to_string())
}

/// `OpenSSH_9.2p1 Debian-2, OpenSSL 3.0.11` -> (9, 2).
pub fn openssh_version(v: &str) -> Option<(u32, u32)> {
    let rest = v.trim_start().strip_prefix("OpenSSH_")?;
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// A script as [`REMOTE_ENTRY`] reads it: its length in bytes on a line, then the script.
pub fn framed(script: &Script) -> Vec<u8> {
    let text = script.as_str().as_bytes();
    dump_for_static_checks(text);
    let mut framed = format!("{}\n", text.len()).into_bytes();
    framed.extend_from_slice(text);
    framed
}

/// With `SLURM_TOOLS_SCRIPT_DUMP=DIR` (the test suite sets it), every script sent to a cluster is
/// also written to DIR as `<tool>-<hash>.sh`, once per distinct text, for the static checks of
/// `scripts/check-remote-scripts` (shellcheck, and `sh -n` under dash, bash --posix, busybox sh
/// and posh). Best effort: a dump that cannot be written changes nothing.
fn dump_for_static_checks(text: &[u8]) {
    // Set but empty is unset (never the current directory: that is the person's repository).
    let Some(dir) = std::env::var_os("SLURM_TOOLS_SCRIPT_DUMP").filter(|d| !d.is_empty()) else {
        return;
    };
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    let tool = std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "tool".into());
    let dir = std::path::PathBuf::from(dir);
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{tool}-{:016x}.sh", h.finish()));
    if !path.exists() {
        let _ = std::fs::write(&path, text);
    }
}

crate::document_input! {
    /// How to reach the cluster, as the document says: what [`Ssh`] is made from.
    pub struct Connection {
        pub ssh_host: Option<String> = string,
        pub ssh_config_file: Option<String> = string,
        pub ssh_options: Option<Vec<String>> = strings,
        pub control_path: Option<String> = string,
        /// The control path preflight settled on (`preflight.control_path`).
        pub preflight: Option<crate::contract::schema::Preflight> = section,
    }
}

impl Connection {
    /// The ControlPath every tool after preflight uses, decided here only: the one preflight
    /// settled on (`preflight.control_path`), else [`Connection::requested_control_path`]. To
    /// change it, rerun slurm-ssh-preflight: a `control_path` edited after preflight is not what
    /// the master listens on.
    pub fn control_path(&self) -> String {
        self.settled_control_path()
            .unwrap_or_else(|| self.requested_control_path())
    }

    /// The control path preflight settled on, if it ran.
    pub fn settled_control_path(&self) -> Option<String> {
        self.preflight.as_ref().and_then(|p| p.control_path.clone())
    }

    /// The ControlPath the document asks for: `control_path`, else [`DEFAULT_CONTROL_PATH`].
    pub fn requested_control_path(&self) -> String {
        self.control_path
            .clone()
            .unwrap_or_else(|| DEFAULT_CONTROL_PATH.to_string())
    }
}

/// The ssh program; `SLURM_TOOLS_SSH` overrides it (e.g. a wrapper that logs, in benchmarks).
pub fn ssh_program() -> String {
    std::env::var("SLURM_TOOLS_SSH").unwrap_or_else(|_| "ssh".to_string())
}

/// `ssh_options` may not add port forwardings (or open them to other machines): they would be
/// added to the shared ControlMaster, which every tool's connection rides, and outlive the
/// tool (security review 2026-12-05, finding 17). slurm-forward is the way to forward a port.
fn check_options(options: &[String]) -> Result<()> {
    const FORWARDING: &[&str] = &[
        "localforward",
        "remoteforward",
        "dynamicforward",
        "gatewayports",
        "permitremoteopen",
    ];
    let mut after_o = false;
    for o in options {
        let lower = o.to_ascii_lowercase();
        let key = if after_o {
            after_o = false;
            lower.as_str()
        } else if let Some(rest) = lower.strip_prefix("-o") {
            if rest.is_empty() {
                after_o = true;
                continue;
            }
            rest
        } else {
            if ["-L", "-R", "-D", "-W"].iter().any(|f| o.starts_with(f)) {
                return Err(ToolError::field(
                    ErrorKind::BadInput,
                    "ssh_options",
                    format!("holds {}, a port forwarding, which would be added to the shared ControlMaster every tool rides", preview(o)),
                )
                .with_hint("remove it from `ssh_options`; forward a job's port with slurm-forward"));
            }
            continue;
        };
        let name = key.split(['=', ' ', '\t']).next().unwrap_or("");
        if FORWARDING.contains(&name) {
            return Err(ToolError::field(
                ErrorKind::BadInput,
                "ssh_options",
                format!("holds {}, a port-forwarding setting, which would be added to the shared ControlMaster every tool rides", preview(o)),
            )
            .with_hint("remove it from `ssh_options`; forward a job's port with slurm-forward"));
        }
    }
    Ok(())
}

/// How to reach the cluster, from the document.
#[derive(Debug, Clone)]
pub struct Ssh {
    pub host: String,
    /// The ControlPath passed with `-o`; `None` leaves it to the person's ssh config.
    pub control_path: Option<String>,
    pub config_file: Option<String>,
    pub options: Vec<String>,
    pub connect_timeout: u32,
}

impl Ssh {
    /// From the connection fields: `ssh_host`, `ssh_config_file`, `ssh_options`, and the control
    /// path every tool after preflight uses ([`Connection::control_path`]).
    ///
    /// The socket preflight settled on (`preflight.control_path`, expanded) is checked again
    /// here, before any ssh uses it (one `lstat` or two): still a socket, ours, not a symlink, in a
    /// directory others cannot write. After a master exits another local user could otherwise
    /// bind a socket at the same path and receive every later tool's scripts and forwards.
    pub fn connect(conn: &Connection) -> Result<Ssh> {
        // The path [`Connection::control_path`] decides: preflight's (expanded) is checked; the
        // requested pattern is checked by preflight itself once it has expanded it.
        let path = match conn.settled_control_path() {
            Some(settled) => {
                crate::remote::control_socket::check(&settled)?;
                settled
            }
            None => conn.requested_control_path(),
        };
        Self::with_control_path(conn, path)
    }

    /// For slurm-ssh-preflight, which settles the control path itself: the one the document asks
    /// for ([`Connection::requested_control_path`]), never an earlier preflight's choice.
    pub fn for_preflight(conn: &Connection) -> Result<Ssh> {
        Self::with_control_path(conn, conn.requested_control_path())
    }

    fn with_control_path(conn: &Connection, control_path: String) -> Result<Ssh> {
        let hint = "set `ssh_host` to the login host (an alias from your ssh config works), \
                    or run slurm-resolve with a catalog that has an ssh_host pattern";
        let host = match conn.ssh_host.as_deref() {
            Some("") => {
                return Err(
                    crate::contract::doc::field_error("ssh_host", "is empty").with_hint(hint)
                )
            }
            Some(h) => h.to_string(),
            None => return Err(crate::contract::doc::missing("ssh_host", hint)),
        };
        check_host(&host)?;
        let options = conn.ssh_options.clone().unwrap_or_default();
        check_options(&options)?;
        Ok(Ssh {
            host,
            control_path: Some(control_path),
            config_file: conn.ssh_config_file.clone(),
            options,
            connect_timeout: 10,
        })
    }

    /// The same connection through another ControlPath (`None`: the person's ssh config decides).
    pub fn via_control_path(&self, control_path: Option<&str>) -> Ssh {
        let mut s = self.clone();
        s.control_path = control_path.map(str::to_string);
        s
    }

    /// The exact command a person runs to open the managed master at `control_path`.
    pub fn master_command(&self, control_path: &str) -> Vec<String> {
        let mut argv = vec!["ssh".to_string()];
        if let Some(f) = &self.config_file {
            argv.push("-F".into());
            argv.push(f.clone());
        }
        argv.extend(self.options.iter().cloned());
        argv.extend([
            "-fNM".to_string(),
            "-o".into(),
            "ControlMaster=auto".into(),
            "-o".into(),
            format!("ControlPath={control_path}"),
            "-o".into(),
            "ControlPersist=24h".into(),
            self.host.clone(),
        ]);
        argv
    }

    /// One login that opens the managed master at `control_path` (ssh backgrounds it after the
    /// login, ControlPersist=24h) and runs [`REMOTE_ENTRY`] through it: `--establish`.
    pub fn establish_command(&self, control_path: &str, connect_timeout: u32) -> Cmd {
        let mut riding = self.via_control_path(Some(control_path));
        riding.connect_timeout = connect_timeout;
        Cmd::new(ssh_program()).args(riding.base_args()).args([
            "-o",
            "ControlMaster=auto",
            "-o",
            "ControlPersist=24h",
            // One try at the prompts: a wrong answer is not typed again into a lockout.
            "-o",
            "NumberOfPasswordPrompts=1",
            "-T",
            "--",
            &self.host,
            REMOTE_ENTRY,
        ])
    }

    /// `GIT_SSH_COMMAND` for a git push over this connection (BatchMode: never prompts), as shell
    /// text git runs: every word quoted.
    pub fn git_ssh_command(&self) -> Result<String> {
        let mut words = vec![ssh_program()];
        words.extend(self.base_args());
        words.extend(["-o".to_string(), "BatchMode=yes".to_string()]);
        Ok(words
            .iter()
            .map(|w| crate::remote::quote::quote(w))
            .collect::<Result<Vec<_>>>()?
            .join(" "))
    }

    /// The options every ssh call carries, in the order that lets the person's `ssh_options`
    /// win (ssh takes the first value it sees for an option).
    pub fn base_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(f) = &self.config_file {
            a.push("-F".to_string());
            a.push(f.clone());
        }
        a.extend(self.options.iter().cloned());
        if let Some(cp) = &self.control_path {
            a.push("-o".into());
            a.push(format!("ControlPath={cp}"));
        }
        a.push("-o".into());
        a.push(format!("ConnectTimeout={}", self.connect_timeout));
        a.push("-o".into());
        a.push("ServerAliveInterval=15".into());
        a.push("-o".into());
        a.push("ServerAliveCountMax=4".into());
        a
    }

    /// A non-interactive ssh: `BatchMode=yes`, so a missing master fails at once instead of
    /// prompting, and no pseudo-terminal. `remote` is fixed text written by the project.
    pub fn batch(&self, remote: &'static str) -> Cmd {
        Cmd::new(ssh_program()).args(self.base_args()).args([
            "-o",
            "BatchMode=yes",
            "-T",
            "--",
            &self.host,
            remote,
        ])
    }

    /// A control command (`-O check`, `-O exit`) against a given control path.
    pub fn control(&self, op: &str, control_path: Option<&str>) -> Cmd {
        let s = self.via_control_path(control_path);
        Cmd::new(ssh_program())
            .args(s.base_args())
            .args(["-O", op, "--", &self.host])
            .deadline(Duration::from_secs(10))
    }

    /// Run a script on the cluster through [`REMOTE_ENTRY`]. With `payload`, its bytes follow
    /// the script on the remote's stdin. Transport failures become a classified error; the
    /// script's own exit code is left to the caller.
    pub fn run_script(
        &self,
        script: &Script,
        payload: Option<StreamWriter>,
        deadline: Duration,
    ) -> Result<Output> {
        self.run_script_with(script, payload, deadline, false)
    }

    /// [`Ssh::run_script`] for a long step a person watches: the script's progress lines
    /// ([`crate::support::process::PROGRESS`] on its stderr) reach our stderr as they come.
    pub fn run_script_showing_progress(
        &self,
        script: &Script,
        deadline: Duration,
    ) -> Result<Output> {
        self.run_script_with(script, None, deadline, true)
    }

    fn run_script_with(
        &self,
        script: &Script,
        payload: Option<StreamWriter>,
        deadline: Duration,
        progress: bool,
    ) -> Result<Output> {
        let batch = |input: Input| {
            let cmd = self.batch(REMOTE_ENTRY).input(input).deadline(deadline);
            if progress {
                cmd.progress_lines()
            } else {
                cmd
            }
        };
        let framed = framed(script);
        let replayable = payload.is_none().then(|| framed.clone());
        let input = match payload {
            None => Input::Bytes(framed),
            Some(p) => Input::Stream(Box::new(move |w: &mut dyn Write| {
                w.write_all(&framed)?;
                p(w)
            })),
        };
        let mut out = batch(input)
            .run()
            .map_err(|e| spawn_error(&ssh_program(), e))?;
        // A server with MaxSessions refuses a session while another tool holds one on the same
        // master: wait for it a little (one at a time), then say so. The refused session never
        // started the script, so running it again is safe.
        if let Some(bytes) = replayable {
            for wait in [1, 2, 4] {
                if !(out.code == Some(255) && SshFailure::session_refused(&out.stderr_tail)) {
                    break;
                }
                std::thread::sleep(Duration::from_secs(wait));
                out = batch(Input::Bytes(bytes.clone()))
                    .run()
                    .map_err(|e| spawn_error(&ssh_program(), e))?;
            }
        }
        let out = without_client_noise(out);
        if out.timed_out {
            return Err(self.timed_out_error(&out, deadline));
        }
        if out.code == Some(255) {
            return Err(self.failure_error(&out));
        }
        Ok(out)
    }

    /// The error for an execution cut at its `deadline`.
    pub fn timed_out_error(&self, out: &Output, deadline: Duration) -> ToolError {
        ToolError::remote(format!(
            "ssh to {} did not finish within {} s",
            self.host,
            deadline.as_secs()
        ))
        .with_hint("the cluster or the network is slow or stuck; try again, and check `ssh <host> true` by hand")
        .with_command(out.record())
    }

    /// Like [`Ssh::run_script`], for a person's command: the remote's stdout and stderr arrive
    /// on ours as they come, byte for byte (as with ssh, srun or docker exec), and the tail of
    /// stderr is kept, so a failed login is still classified.
    pub fn run_script_through(&self, script: &Script, deadline: Duration) -> Result<Output> {
        let framed = framed(script);
        let out = self
            .batch(REMOTE_ENTRY)
            .input(Input::Bytes(framed))
            .output_through()
            .deadline(deadline)
            .run()
            .map_err(|e| spawn_error(&ssh_program(), e))?;
        let out = without_client_noise(out);
        if out.code == Some(255) {
            return Err(self.failure_error(&out));
        }
        Ok(out)
    }

    /// Run a script with the person's terminal attached (a remote pty, `ssh -tt`): for an
    /// interactive shell. The script cannot travel on stdin (the terminal is there), so it is
    /// first written to a private file in the remote home (one round trip), which the login
    /// shell runs by a fixed name and which removes itself as it starts.
    pub fn run_script_interactive(&self, script: &Script) -> Result<Output> {
        let name = format!(
            ".slurm-tools-{}.sh",
            crate::state::journal::unique_tag("tty")
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "-")
        );
        let mut body = Script::new();
        body.raw("rm -f -- \"$0\"\n");
        body.user_shell_text(script.as_str());
        let text = body.as_str().as_bytes().to_vec();
        let mut up = Script::new();
        up.assign("f", &name)?;
        up.raw("umask 077 && cat >\"$HOME/$f\" && echo WRITTEN\n");
        let out = self.run_script(
            &up,
            Some(Box::new(move |w: &mut dyn Write| w.write_all(&text))),
            Duration::from_secs(60),
        )?;
        if !out.stdout_text().contains("WRITTEN") {
            return Err(ToolError::remote(format!(
                "could not write the session script to the home directory on {} ({})",
                self.host,
                out.exit_text()
            ))
            .with_hint("check the home directory there is writable (quota?)")
            .with_command(out.record()));
        }
        let out = Cmd::new(ssh_program())
            .args(self.base_args())
            .args(["-o", "BatchMode=yes", "-tt", "--", &self.host])
            .arg(format!("/bin/sh ~/{name}"))
            .input(Input::Inherit)
            .output_through()
            .inherit_stderr()
            .deadline(Duration::from_secs(30 * 86_400))
            .run()
            .map_err(|e| spawn_error(&ssh_program(), e))?;
        Ok(out)
    }

    /// Start a script that stays up and serves requests: after the framed script, stdin stays
    /// open, so the script reads requests from it and ends when we close it (one ssh execution
    /// for a whole conversation, e.g. every poll of a watch).
    pub fn start_script(&self, script: &Script) -> Result<crate::support::process::Running> {
        let framed = framed(script);
        self.batch(REMOTE_ENTRY)
            .input(Input::Bytes(framed))
            .start()
            .map_err(|e| spawn_error(&ssh_program(), e))
    }

    /// [`Ssh::start_script`] for a long step a person watches: the script's progress lines
    /// ([`crate::support::process::PROGRESS`] on its stderr) reach our stderr as they come.
    pub fn start_script_showing_progress(
        &self,
        script: &Script,
    ) -> Result<crate::support::process::Running> {
        self.batch(REMOTE_ENTRY)
            .input(Input::Bytes(framed(script)))
            .progress_lines()
            .start()
            .map_err(|e| spawn_error(&ssh_program(), e))
    }

    /// [`Ssh::start_script`] for a conversation that ends in a person's command: the remote's
    /// stderr arrives on ours as it comes (its stdout is read by the caller, which hands the
    /// command's part on to ours).
    pub fn start_script_through(
        &self,
        script: &Script,
    ) -> Result<crate::support::process::Running> {
        let framed = framed(script);
        self.batch(REMOTE_ENTRY)
            .input(Input::Bytes(framed))
            .output_through()
            .start()
            .map_err(|e| spawn_error(&ssh_program(), e))
    }

    /// Whether a ControlMaster's socket is visibly there for this connection (one `stat`): the
    /// control path is a plain path (preflight's, expanded, or one with no `%` token), and a
    /// socket is at it. An execution then opens a session on the master, not a new connection.
    pub fn master_socket_present(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        let Some(path) = self.control_path.as_deref().filter(|p| !p.contains('%')) else {
            return false;
        };
        let path = match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
            (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
            (Some(_), None) => return false,
            (None, _) => std::path::PathBuf::from(path),
        };
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
    }

    /// Turn an ssh exit 255 into an error a person can act on.
    pub fn failure_error(&self, out: &Output) -> ToolError {
        let failure = SshFailure::classify(&out.stderr_tail);
        let (kind, message, hint) = failure.explain(&self.host);
        ToolError::new(kind, message)
            .with_hint(hint)
            .with_command(out.record())
    }

    /// `ssh -G`: the configuration ssh would use for this host (no network). Used to expand the
    /// ControlPath and to find the person's own ControlPath.
    pub fn resolved_config(&self, with_our_control_path: bool) -> Result<ResolvedConfig> {
        let s = if with_our_control_path {
            self.clone()
        } else {
            self.via_control_path(None)
        };
        let out = Cmd::new(ssh_program())
            .args(s.base_args())
            .args(["-G", "--", &self.host])
            .deadline(Duration::from_secs(10))
            .run()
            .map_err(|e| spawn_error(&ssh_program(), e))?;
        if !out.success() {
            return Err(ToolError::field(
                ErrorKind::BadInput,
                "ssh_options",
                format!("ssh rejects the configuration for host {}", preview(&self.host)),
            )
            .with_hint("check `ssh_options`, `ssh_config_file` and `ssh_host`; the stderr in this error is ssh's own")
            .with_command(out.record()));
        }
        Ok(ResolvedConfig::parse(&out.stdout_text()))
    }
}

/// What `ssh -G` says, for the keys the project uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedConfig {
    pub user: String,
    pub hostname: String,
    pub port: String,
    /// Expanded; `None` when it is `none`.
    pub control_path: Option<String>,
    pub control_master: String,
    /// `hostkeyalias`, when set: the name ssh shows in prompts instead of the hostname.
    pub host_key_alias: Option<String>,
    /// A `ProxyJump` or `ProxyCommand` stands before the host.
    pub proxied: bool,
}

impl ResolvedConfig {
    pub fn parse(text: &str) -> ResolvedConfig {
        let mut c = ResolvedConfig::default();
        for line in text.lines() {
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            match k {
                "user" => c.user = v.to_string(),
                "hostname" => c.hostname = v.to_string(),
                "port" => c.port = v.to_string(),
                "controlpath" if v != "none" && !v.is_empty() => c.control_path = Some(v.into()),
                "controlmaster" => c.control_master = v.to_string(),
                "hostkeyalias" if v != "none" && !v.is_empty() => c.host_key_alias = Some(v.into()),
                "proxyjump" | "proxycommand" if v != "none" && !v.is_empty() => c.proxied = true,
                _ => {}
            }
        }
        c
    }
}

/// `out` without the lines ssh itself prints about a control socket it could not use
/// ("Control socket connect(`<path>`): Connection refused" when a killed master left its socket
/// file): ssh then connects on its own, so the line is noise, and left in it would reach the
/// classifiers of the remote command's stderr (a Slurm refusal read as "connection refused").
pub fn without_client_noise(mut out: Output) -> Output {
    if out.stderr_tail.contains("Control socket connect(") {
        out.stderr_tail = out
            .stderr_tail
            .split_inclusive('\n')
            .filter(|l| !l.starts_with("Control socket connect("))
            .collect();
    }
    out
}

/// Why an ssh call failed, from its stderr (OpenSSH 9.2 wording, see research/ecosystem.md §3.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SshFailure {
    /// `Permission denied (methods)`; the methods the server offered.
    AuthDenied {
        methods: String,
    },
    Unreachable {
        detail: String,
    },
    HostKey,
    ControlPathTooLong,
    ConnectionLost {
        detail: String,
    },
    /// The server closed the connection before any login: a source it penalises after failed
    /// logins (OpenSSH 9.8+ `PerSourcePenalties`) or too many logins at once (`MaxStartups`).
    ClosedBeforeLogin {
        detail: String,
    },
    /// The master is fine but the server refused another session on it (`MaxSessions`).
    SessionRefused {
        detail: String,
    },
    Config {
        detail: String,
    },
    Other {
        detail: String,
    },
}

impl SshFailure {
    /// Whether ssh's stderr (with exit 255) says the server refused another session on the open
    /// connection (MaxSessions): the script never started, so running it again is safe.
    pub fn session_refused(stderr: &str) -> bool {
        matches!(Self::classify(stderr), SshFailure::SessionRefused { .. })
    }

    pub fn classify(stderr: &str) -> SshFailure {
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty() && !l.starts_with("Warning: Permanently added"))
            .unwrap_or("")
            .trim()
            .to_string();
        if let Some(i) = stderr.find("Permission denied (") {
            let rest = &stderr[i + "Permission denied (".len()..];
            let methods = rest.split(')').next().unwrap_or("").to_string();
            return SshFailure::AuthDenied { methods };
        }
        if stderr.contains("Host key verification failed")
            || stderr.contains("REMOTE HOST IDENTIFICATION HAS CHANGED")
        {
            return SshFailure::HostKey;
        }
        if stderr.contains("ControlPath too long")
            || stderr.contains("too long for Unix domain socket")
        {
            return SshFailure::ControlPathTooLong;
        }
        for p in [
            "Connection refused",
            "Could not resolve hostname",
            "Connection timed out",
            "No route to host",
            "Network is unreachable",
            "Operation timed out",
            "Name or service not known",
        ] {
            if stderr.contains(p) && !stderr.contains("Control socket connect") || last.contains(p)
            {
                return SshFailure::Unreachable { detail: last };
            }
        }
        if stderr.contains("administratively prohibited")
            || stderr.contains("Session open refused by peer")
        {
            return SshFailure::SessionRefused { detail: last };
        }
        if stderr.contains("kex_exchange_identification")
            && (stderr.contains("Connection closed") || stderr.contains("Connection reset"))
        {
            return SshFailure::ClosedBeforeLogin { detail: last };
        }
        for p in [
            "not responding",
            "closed by remote host",
            "Connection reset",
            "Broken pipe",
            "Connection closed by",
            "kex_exchange_identification",
        ] {
            if stderr.contains(p) {
                return SshFailure::ConnectionLost { detail: last };
            }
        }
        for p in [
            "Bad configuration option",
            "Bad port",
            "bad port",
            "Can't open user config file",
            "unknown option",
            "usage: ssh",
            "Invalid",
            "terminating",
        ] {
            if stderr.contains(p) {
                return SshFailure::Config { detail: last };
            }
        }
        SshFailure::Other { detail: last }
    }

    /// (exit kind, message, hint) for a person.
    pub fn explain(&self, host: &str) -> (ErrorKind, String, String) {
        match self {
            SshFailure::AuthDenied { methods } if methods.contains("keyboard-interactive") => (
                ErrorKind::NeedsPerson,
                format!("{host} wants an interactive (MFA) login and no ControlMaster is running"),
                "run `slurm-ssh-preflight --establish` on this document (or the ssh -fNM command \
                 preflight prints), complete the login, then rerun this step"
                    .into(),
            ),
            SshFailure::AuthDenied { methods } => (
                ErrorKind::Remote,
                format!("{host} refused the login (it offered: {methods})"),
                "check the user name and that your key is in the cluster's authorized_keys \
                 (`ssh -v <host> true` shows which keys are tried)"
                    .into(),
            ),
            SshFailure::Unreachable { detail } => (
                ErrorKind::Remote,
                format!("cannot reach {host}: {detail}"),
                "check `ssh_host` (and the port in your ssh config or `ssh_options`), and that \
                 you are on the network or VPN the cluster needs"
                    .into(),
            ),
            SshFailure::HostKey => (
                ErrorKind::Remote,
                format!("the host key of {host} could not be verified"),
                "connect once by hand (`ssh <host> true`) to check and accept the key".into(),
            ),
            SshFailure::ControlPathTooLong => (
                ErrorKind::BadInput,
                "the ControlMaster socket path is too long for a Unix socket".into(),
                "set `control_path` to a short path such as /tmp/ssh-%C (at most 90 bytes once expanded)".into(),
            ),
            SshFailure::ConnectionLost { detail } => (
                ErrorKind::Remote,
                format!("the connection to {host} was lost: {detail}"),
                "rerun this step; if it keeps happening, rerun slurm-ssh-preflight".into(),
            ),
            SshFailure::ClosedBeforeLogin { detail } => (
                ErrorKind::Remote,
                format!("{host} closed the connection before the login started ({detail})"),
                "the server may be refusing this address for a while after failed logins \
                 (OpenSSH 9.8+ PerSourcePenalties; behind a NAT, others' failures count too) or \
                 be busy (MaxStartups): wait a few minutes before trying again, since every \
                 attempt meanwhile prolongs the penalty; nothing was retried"
                    .into(),
            ),
            SshFailure::SessionRefused { detail } => (
                ErrorKind::Remote,
                format!("{host} refused another session on the open connection ({detail}): the server allows few sessions per connection (MaxSessions)"),
                "another tool holds a session on this connection (a running slurm-watch, say): \
                 run the tools on this cluster one at a time, or ask the site to raise MaxSessions; \
                 this step changed nothing"
                    .into(),
            ),
            SshFailure::Config { detail } => (
                ErrorKind::BadInput,
                format!("ssh rejected its options: {detail}"),
                "check `ssh_options` and `ssh_config_file` in the job document".into(),
            ),
            SshFailure::Other { detail } if detail.trim().is_empty() => (
                ErrorKind::Remote,
                format!("ssh to {host} failed without a message: the connection was closed (the server went away, or dropped it)"),
                "check that the host is up (`ssh -v <host> true`), then rerun this step; nothing is left half-done by a dropped connection".into(),
            ),
            SshFailure::Other { detail } => (
                ErrorKind::Remote,
                format!("ssh to {host} failed: {detail}"),
                "see ssh's stderr in this error; `ssh -v <host> true` shows more".into(),
            ),
        }
    }
}

/// A host must be one ssh destination word: no leading `-` (it would be an ssh option, e.g.
/// `-oProxyCommand=...`), no whitespace, control characters or shell metacharacters.
pub fn check_host(host: &str) -> Result<()> {
    let bad = host.starts_with('-')
        || host.chars().any(|c| {
            c.is_whitespace()
                || c.is_control()
                || matches!(
                    c,
                    ';' | '|'
                        | '&'
                        | '$'
                        | '`'
                        | '\''
                        | '"'
                        | '<'
                        | '>'
                        | '('
                        | ')'
                        | '{'
                        | '}'
                        | '*'
                        | '?'
                        | '!'
                        | '\\'
                )
        });
    if bad {
        return Err(ToolError::field(
            ErrorKind::BadInput,
            "ssh_host",
            format!("field `ssh_host` is {}, which is not a host name or ssh alias", preview(host)),
        )
        .with_hint("use a plain host name, user@host, or an alias from your ssh config; it may not start with `-`"));
    }
    Ok(())
}

pub fn spawn_error(program: &str, e: std::io::Error) -> ToolError {
    ToolError::remote(format!("cannot run `{program}`: {e}"))
        .with_hint(format!("install {program} or put it on PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn_with_socket(path: &str) -> Connection {
        let text = format!(
            r#"{{"ssh_host":"h","preflight":{{"ssh_path":"mfa","master":"managed","control_path":{path:?},"mfa_style":true,"mfa_style_discovered":false,"remote":{{"remote_cwd":"/h/u","remote_cwd_exists":true,"remote_cwd_created":false,"remote_cwd_writable":true,"user":"u","home":"/h/u","login_host":null,"tmux":null,"slurm_version":null,"git":null,"tar":null,"accounting":null,"container_flags":false}}}}}}"#
        );
        Connection::read(&crate::Document::parse(text.as_bytes(), "test").unwrap()).unwrap()
    }

    #[test]
    fn ssh_options_may_not_add_forwardings_to_the_shared_master() {
        let ok = |o: &[&str]| check_options(&o.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(ok(&[
            "-o",
            "Port=2222",
            "-oServerAliveInterval=5",
            "-v",
            "-4",
            "-l",
            "alice"
        ])
        .is_ok());
        for bad in [
            &["-L", "8888:localhost:8888"][..],
            &["-L8888:localhost:8888"][..],
            &["-R", "9000:localhost:22"][..],
            &["-D", "1080"][..],
            &["-o", "LocalForward 8888 localhost:8888"][..],
            &["-oGatewayPorts=yes"][..],
            &["-o", "dynamicforward=1080"][..],
        ] {
            let e = ok(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("ssh_options"), "{bad:?}");
        }
    }

    #[test]
    fn every_tool_checks_the_settled_socket_before_using_it() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("cm");
        crate::state::private_files::create_dir(&dir).unwrap();
        let sock = dir.join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let p = sock.to_str().unwrap();
        assert!(Ssh::connect(&conn_with_socket(p)).is_ok());
        // Taken over by another uid (as root, where the test can chown).
        if crate::remote::control_socket::Platform::this_machine().uid == 0 {
            std::os::unix::fs::chown(&sock, Some(65534), None).unwrap();
            let e = Ssh::connect(&conn_with_socket(p)).unwrap_err();
            assert!(e.message.contains("belongs to uid 65534"), "{}", e.message);
            std::os::unix::fs::chown(&sock, Some(0), None).unwrap();
        }
        // A symlink in its place.
        let link = dir.join("l");
        std::os::unix::fs::symlink(&sock, &link).unwrap();
        let e = Ssh::connect(&conn_with_socket(link.to_str().unwrap())).unwrap_err();
        assert!(e.message.contains("symbolic link"), "{}", e.message);
        // Its directory opened to others.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Ssh::connect(&conn_with_socket(p)).unwrap_err();
        assert!(e.message.contains("writable by others"), "{}", e.message);
        assert_eq!(e.field.as_deref(), Some("control_path"));
    }

    #[test]
    fn login_node_sshd_refusals_are_told_apart() {
        // OpenSSH 9.8+ PerSourcePenalties (and MaxStartups): closed before any login.
        let penalised = "kex_exchange_identification: Connection closed by remote host\r\nConnection closed by 10.0.0.5 port 22\r\n";
        assert!(matches!(
            SshFailure::classify(&penalised.replace('\r', "")),
            SshFailure::ClosedBeforeLogin { .. }
        ));
        let (_, msg, hint) = SshFailure::classify(penalised).explain("login1");
        assert!(msg.contains("before the login started"), "{msg}");
        assert!(
            hint.contains("PerSourcePenalties") && hint.contains("nothing was retried"),
            "{hint}"
        );
        // MaxSessions reached on a multiplexed connection.
        for refused in [
            "channel 2: open failed: administratively prohibited: open failed\n",
            "Session open refused by peer\n",
        ] {
            let f = SshFailure::classify(refused);
            assert!(matches!(f, SshFailure::SessionRefused { .. }), "{refused}");
            let (_, msg, hint) = f.explain("login1");
            assert!(
                msg.contains("MaxSessions") && hint.contains("one at a time"),
                "{msg} {hint}"
            );
        }
        // A plain dropped connection is still just that.
        assert!(matches!(
            SshFailure::classify("Connection to login1 closed by remote host.\n"),
            SshFailure::ConnectionLost { .. }
        ));
    }

    #[test]
    fn openssh_versions_are_read_from_ssh_v() {
        assert_eq!(
            openssh_version("OpenSSH_9.2p1 Debian-2+deb12u3, OpenSSL 3.0.15"),
            Some((9, 2))
        );
        assert_eq!(
            openssh_version("OpenSSH_8.0p1, OpenSSL 1.1.1k  FIPS 25 Mar 2021"),
            Some((8, 0))
        );
        assert_eq!(
            openssh_version("OpenSSH_10.0p2, LibreSSL 3.3.6"),
            Some((10, 0))
        );
        assert_eq!(openssh_version("OpenSSH_8.4"), Some((8, 4)));
        assert_eq!(openssh_version("Sun_SSH_1.1"), None);
        // This machine's ssh (9.2) honours SSH_ASKPASS_REQUIRE.
        assert_eq!(askpass_require_ignored(), None);
    }

    #[test]
    fn classifies_openssh_messages() {
        assert_eq!(
            SshFailure::classify(
                "clusteruser@127.0.0.1: Permission denied (keyboard-interactive).\n"
            ),
            SshFailure::AuthDenied {
                methods: "keyboard-interactive".into()
            }
        );
        assert!(matches!(
            SshFailure::classify("ssh: connect to host 127.0.0.1 port 1: Connection refused\n"),
            SshFailure::Unreachable { .. }
        ));
        assert!(matches!(
            SshFailure::classify("Timeout, server 127.0.0.1 not responding.\n"),
            SshFailure::ConnectionLost { .. }
        ));
    }

    #[test]
    fn a_dead_masters_socket_line_is_dropped_and_the_remote_stderr_kept() {
        let out = Output {
            code: Some(1),
            stdout: Vec::new(),
            stderr_tail: "Control socket connect(/tmp/ssh-x-u@h:22): Connection refused\n\
                          sbatch: error: Batch job submission failed: Invalid partition name specified\n"
                .into(),
            timed_out: false,
            elapsed: Duration::from_millis(1),
            argv: Vec::new(),
        };
        let out = without_client_noise(out);
        assert_eq!(
            out.stderr_tail,
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
        );
        let e = crate::slurm::submission_error(&out.stderr_tail);
        assert_eq!(e.field.as_deref(), Some("partition"), "{e:?}");
    }

    #[test]
    fn hosts_that_would_be_options_are_refused() {
        assert!(check_host("-oProxyCommand=id").is_err());
        assert!(check_host("a b").is_err());
        assert!(check_host("h;id").is_err());
        assert!(check_host("user@login-01.example.org").is_ok());
        assert!(check_host("mycluster").is_ok());
    }

    #[test]
    fn resolved_config_parses_ssh_g() {
        let c =
            ResolvedConfig::parse("user bob\nhostname 127.0.0.1\nport 2222\ncontrolpath none\n");
        assert_eq!(c.user, "bob");
        assert_eq!(c.control_path, None);
    }
}
