//! slurm-ssh-preflight: a working ssh connection and a checked remote (docs/migrating.md, steps 2-3).

mod askpass;
mod remote_check;

use clap::Parser;
use remote_check::{RemoteEnv, Require};
use shared::contract::schema::{Accounting, Master, Preflight, SshPath};
use shared::remote::control_socket::{self, SocketState};
use shared::remote::quote::quote_for_display;
use shared::remote::ssh::{spawn_error, ssh_program, Ssh, SshFailure};
use shared::remote::Operation;
use shared::slurm::container;
use shared::{Context, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::time::Duration;

/// Get a working ssh connection to the cluster and check the remote side, in one round trip.
///
/// `mfa_style` decides the path. false: a direct BatchMode login (ConnectTimeout=5); a failure
/// is a configuration problem (exit 4). true: find a live ControlMaster, first the one your own
/// ssh config names, then the managed socket (`control_path`, default
/// ~/.ssh/slurm-tools/%C); with none, exit 3 and print the exact `ssh -fNM ...` command to
/// run in a terminal (or pass --establish to log in now). null: try direct; only a
/// `Permission denied (keyboard-interactive)` switches to the MFA path, and the value found is
/// recorded so you can put it in the catalog.
///
/// The remote check runs once: `remote_cwd` exists (created if absent), tmux, Slurm
/// (squeue --version), accounting (sacct), git, tar, and the container runtimes: whether srun
/// takes pyxis's container flags, and apptainer or singularity on the PATH jobs inherit. A
/// missing piece a later step needs is exit 4 naming it; with `container_image`, a
/// `container_runtime` the cluster lacks (or an image form its runtime cannot run) is exit 2
/// naming the field and what the cluster has.
///
/// On a direct host the check itself opens a managed ControlMaster (ControlPersist=10m) that
/// every later tool rides, so the pipeline logs in once at any distance; `ssh_multiplex: false`
/// opts out (then each tool makes its own connection), and a live master of your own ssh
/// config's is ridden instead.
///
/// {reads}
/// (remote_cwd, else default_user_root_dir, is the directory checked; slurm_password, a secret,
/// only with --establish.)
///
/// {adds}
/// `control_path` is expanded, and every later tool uses it; `remote.home` is what later tools
/// expand a `~/` remote path against.
///
/// Exit: 0 connected and checked; 2 bad input (an unsafe or too long control_path included); 3
/// a login is needed (the command is printed) or it was refused at a prompt; 4 ssh failed or a
/// piece a later step needs is missing on the cluster.
///
/// Example:
///   slurm-resolve < job.json | slurm-ssh-preflight > job.ready.json
#[derive(Parser, Debug)]
#[command(name = "slurm-ssh-preflight", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// When an MFA login is needed, log in now, attached to your terminal (ssh prompts on the
    /// tty although stdin carries the document): that one ssh opens the managed ControlMaster
    /// (ControlPersist=24h) and runs the remote check through it. With `slurm_password` in the
    /// document, the password prompt gets it (through SSH_ASKPASS, never argv), once; every
    /// other prompt (a one-time code, "Passcode or option", "press ENTER after approving") shows
    /// on your terminal for you to answer. A refused answer is never retried (no lockouts):
    /// the login stops and says which prompt failed. The terminal is restored however it ends.
    /// Logins take turns (a lock in the state directory): a second run that needs a login waits
    /// while another asks, then rides the master that login opened when it is the one it needs.
    #[arg(long)]
    establish: bool,

    /// Seconds to wait for the interactive login with --establish. The default stays below the
    /// 120 s most sshd allow for a login (LoginGraceTime), after which the server hangs up anyway.
    #[arg(long, default_value_t = 110, value_name = "SECONDS")]
    establish_timeout: u64,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["preflight"];

    fn reads() -> Vec<&'static str> {
        Input::reads()
    }
}

pub fn main() -> std::process::ExitCode {
    if let Some(code) = askpass::answer_if_asked() {
        return code;
    }
    shared::contract::driver::run::<Cli>("slurm-ssh-preflight", preflight)
}

/// The connection preflight settled on.
struct Connection {
    ssh_path: SshPath,
    master: Master,
    control_path: Option<String>,
    mfa_style: bool,
    discovered: bool,
}

shared::document_input! {
    /// What slurm-ssh-preflight reads.
    struct Input {
        connection: shared::remote::ssh::Connection = part,
        mfa_style: Option<bool> = mfa,
        ssh_multiplex: Option<bool> = flag,
        remote_cwd: Option<String> = string,
        default_user_root_dir: Option<String> = string,
        container_image: Option<String> = string,
        container_runtime: Option<String> = string,
        /// Checked against remote_cwd when a container runs.
        mounts: Option<serde_json::Value> = value,
    }
}

fn preflight(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let mfa_style = input.mfa_style;
    let multiplex = input.ssh_multiplex.unwrap_or(true);
    let Some((remote_cwd, _)) = shared::remote::layout::preflight_cwd(
        input.remote_cwd.as_deref(),
        input.default_user_root_dir.as_deref(),
    )?
    else {
        return Err(shared::contract::doc::missing(
            "remote_cwd",
            "set `remote_cwd` (the remote working directory), or `default_user_root_dir`",
        ));
    };
    let image = input.container_image.clone();
    let wants_container = image.is_some();
    // Preflight settles the control path itself: an earlier run's choice is not reused.
    let mut ssh = Ssh::for_preflight(&input.connection)?;
    ssh.connect_timeout = 5;
    let script = RemoteEnv::script(&remote_cwd)?;

    let ours = ssh.resolved_config(true)?.control_path.ok_or_else(|| {
        ToolError::field(
            ErrorKind::BadInput,
            "control_path",
            "`control_path` is none, but every tool needs the shared ControlMaster socket",
        )
        .with_hint("leave `control_path` out to use the default")
    })?;
    let socket = control_socket::check(&ours)?;

    shared::support::testhook::pause("preflight:before-check");
    let (path, out) = match mfa_style {
        Some(false) => direct(ctx, &ssh, &ours, socket, &script, multiplex)
            .map_err(|e| as_config_problem(e, &ssh.host))?,
        Some(true) => mfa_path(cli, ctx, &ssh, &ours, socket, &script, false)?,
        None => probe(cli, ctx, &ssh, &ours, socket, &script, multiplex)?,
    };

    let remote = RemoteEnv::reply(&remote_cwd, &out)?;
    remote.require(&ssh.host)?;
    // The container runtime the job will use: one the cluster has, and an image form it runs.
    let runtime = match &image {
        Some(image) => Some(runtime_for(
            input.container_runtime.as_deref(),
            image,
            &remote,
        )?),
        None => None,
    };
    let accounting = remote.accounting.unwrap_or(Accounting::Missing);
    if accounting != Accounting::Enabled {
        ctx.warn(format!(
            "sacct on {} reports accounting as {}: slurm-watch will fall back to scontrol",
            ssh.host, accounting
        ));
    }
    let cwd = &remote.remote_cwd;
    if remote.remote_cwd_created {
        ctx.note(format!("created the remote working directory {cwd}"));
    }
    ctx.note(ready_text(&ssh.host, &path, &remote, runtime));
    if wants_container {
        // The code lives under remote_cwd: inside the container it must be at the same path.
        let mounts = shared::slurm::mounts(input.mounts.as_ref())?;
        if let shared::slurm::pyxis::Visibility::Hidden
        | shared::slurm::pyxis::Visibility::Moved { .. } =
            shared::slurm::pyxis::visibility(cwd, remote.home.as_deref(), mounts.as_deref())
        {
            ctx.warn(format!(
                "{cwd} is outside the home directory and not mounted at the same path by `mounts`: a job in the container would not see its code there; add \"{cwd}:{cwd}\" to `mounts` (slurm-submit refuses such a job)"
            ));
        }
    }
    ctx.doc.set_section(
        "preflight",
        &Preflight {
            ssh_path: path.ssh_path,
            master: path.master,
            control_path: path.control_path,
            mfa_style: path.mfa_style,
            mfa_style_discovered: path.discovered,
            remote,
        },
    );
    Ok(Outcome::Done)
}

/// `mfa_style` unknown: a BatchMode login. Where it gets in, it can be the direct host's master
/// at once (no second login); where MFA refuses it, no master comes up and the MFA path follows.
fn probe(
    cli: &Cli,
    ctx: &Context,
    ssh: &Ssh,
    ours: &str,
    socket: SocketState,
    script: &shared::remote::quote::Script,
    multiplex: bool,
) -> Result<(Connection, shared::support::process::Output)> {
    let opens = multiplex && socket != SocketState::Present;
    let probe = if opens {
        opening_master(ssh, ours)
    } else {
        ssh.via_control_path(Some("none"))
    };
    match run_check(&probe, script) {
        Ok(out) => {
            ctx.note(format!(
                    "{} logs in directly: record \"mfa_style\": false for this cluster (catalog or job document) to skip the probe",
                    ssh.host
                ));
            let mut path = direct_path(ours, socket, true);
            if opens && std::path::Path::new(ours).exists() {
                path.master = Master::Managed;
                note_opened(ctx, &ssh.host, ours);
            }
            Ok((path, out))
        }
        Err(e) if is_kbd_interactive_denial(&e) => {
            ctx.note(format!(
                    "{} wants a keyboard-interactive (MFA) login: record \"mfa_style\": true for this cluster (catalog or job document) to skip the probe",
                    ssh.host
                ));
            mfa_path(cli, ctx, ssh, ours, socket, script, true)
        }
        Err(e) => Err(e),
    }
}

/// `HOST ready: ... login, master ..., slurm ..., containers ..., remote_cwd ...`
fn ready_text(
    host: &str,
    path: &Connection,
    remote: &shared::contract::schema::RemoteCheck,
    runtime: Option<container::Runtime>,
) -> String {
    let cwd = &remote.remote_cwd;
    let mut containers = if remote.container_flags {
        format!(
            ", pyxis {}{}, enroot {}",
            remote.pyxis.as_deref().unwrap_or("(version unknown)"),
            if remote.container_writable == Some(false) {
                " without --container-writable"
            } else {
                ""
            },
            remote
                .enroot
                .as_deref()
                .unwrap_or("not on the login node (usually only on compute nodes)")
        )
    } else {
        String::new()
    };
    if let Some(a) = &remote.apptainer {
        containers.push_str(&format!(", {a}"));
    }
    if let Some(r) = runtime {
        containers.push_str(&format!(" (the job's container runs on {r})"));
    }
    format!(
        "{} ready: {} login, master {}, {}{containers}, remote_cwd {cwd}",
        host,
        path.ssh_path,
        path.master,
        remote.slurm_version.as_deref().unwrap_or("slurm ?"),
    )
}

/// The container runtime for `image` on this cluster, with an image form it runs.
fn runtime_for(
    asked: Option<&str>,
    image: &str,
    remote: &shared::contract::schema::RemoteCheck,
) -> Result<container::Runtime> {
    let r = container::runtime(asked, image, Some(remote))?;
    container::Image::parse(image).for_runtime(r, image)?;
    Ok(r)
}

/// How long a master opened on a direct host outlives the last session riding it.
const DIRECT_PERSIST: &str = "10m";

/// A key-based login. Every later tool would otherwise make its own connection (a full
/// handshake each: several round trips to a login node 10-150 ms away), so preflight's own
/// check opens a managed master with a short ControlPersist that they all ride, unless one is
/// there already (ours, or the person's own ssh config's), or `ssh_multiplex` is false. A
/// deliberate deviation from the manual procedure's (docs/migrating.md) "no managed master on direct hosts": measured in
/// docs/benchmarks.md ("At a distance").
fn direct(
    ctx: &Context,
    ssh: &Ssh,
    ours: &str,
    socket: SocketState,
    script: &shared::remote::quote::Script,
    multiplex: bool,
) -> Result<(Connection, shared::support::process::Output)> {
    let mut path = direct_path(ours, socket, false);
    if socket == SocketState::Present || !multiplex {
        return Ok((path, run_check(ssh, script)?));
    }
    // The person's own multiplexing, when their ssh config has a live master for this host.
    if let Some(theirs) = ssh
        .resolved_config(false)?
        .control_path
        .filter(|p| p != ours && std::path::Path::new(p).exists())
    {
        if control_socket::check(&theirs).is_ok() && master_alive(ssh, &theirs)? {
            path.master = Master::User;
            path.control_path = Some(theirs.clone());
            let riding = ssh.via_control_path(Some(&theirs));
            return Ok((path, run_check(&riding, script)?));
        }
    }
    let out = run_check(&opening_master(ssh, ours), script)?;
    if std::path::Path::new(ours).exists() {
        path.master = Master::Managed;
        note_opened(ctx, &ssh.host, ours);
    }
    Ok((path, out))
}

/// The same ssh, asked to become the master at `ours` and stay `DIRECT_PERSIST` after its last
/// session (ssh puts it in the background once this execution ends).
fn opening_master(ssh: &Ssh, ours: &str) -> Ssh {
    let mut opening = ssh.via_control_path(Some(ours));
    opening.options.extend([
        "-o".to_string(),
        "ControlMaster=auto".to_string(),
        "-o".to_string(),
        format!("ControlPersist={DIRECT_PERSIST}"),
    ]);
    opening
}

fn note_opened(ctx: &Context, host: &str, ours: &str) {
    ctx.note(format!(
        "opened a ControlMaster to {host} at {ours}: the later tools share this one login (it closes {DIRECT_PERSIST} after the last one; \"ssh_multiplex\": false opts out)"
    ));
}

fn direct_path(ours: &str, socket: SocketState, discovered: bool) -> Connection {
    Connection {
        ssh_path: SshPath::Direct,
        // A socket at our path means a master (ours) is there for later calls to ride.
        master: if socket == SocketState::Present {
            Master::Managed
        } else {
            Master::None
        },
        control_path: Some(ours.to_string()),
        mfa_style: false,
        discovered,
    }
}

fn run_check(
    ssh: &Ssh,
    script: &shared::remote::quote::Script,
) -> Result<shared::support::process::Output> {
    let out = ssh.run_script(script, None, Duration::from_secs(60))?;
    if !out.success() {
        return Err(check_failed(ssh, &out));
    }
    Ok(out)
}

fn check_failed(ssh: &Ssh, out: &shared::support::process::Output) -> ToolError {
    ToolError::remote(format!(
        "the remote check on {} failed ({})",
        ssh.host,
        out.exit_text()
    ))
    .with_hint("run `ssh <host> sh` by hand to see what the login environment does")
    .with_command(out.record())
}

fn is_kbd_interactive_denial(e: &ToolError) -> bool {
    e.command.as_ref().is_some_and(|c| {
        matches!(SshFailure::classify(&c.stderr_tail), SshFailure::AuthDenied { ref methods } if methods.contains("keyboard-interactive"))
    })
}

/// With `mfa_style: false`, a failed login is a configuration problem, never an MFA prompt.
fn as_config_problem(e: ToolError, host: &str) -> ToolError {
    if e.kind != ErrorKind::NeedsPerson {
        return e;
    }
    let mut e = e;
    e.kind = ErrorKind::Remote;
    e.message = format!("{host} refused the key-based login");
    e.hint = Some(
        "check the user name and your key (`ssh -v <host> true`); if this cluster does need an \
         interactive login, set \"mfa_style\": true"
            .into(),
    );
    e
}

/// ssh's warning when a ControlPath socket is there but no master answers on it (ssh then goes
/// around it with a login of its own).
fn went_around_a_dead_master(stderr: &str) -> bool {
    stderr.contains("Control socket connect")
}

fn master_alive(ssh: &Ssh, control_path: &str) -> Result<bool> {
    let out = ssh
        .control("check", Some(control_path))
        .run()
        .map_err(|e| spawn_error(&ssh_program(), e))?;
    Ok(out.success())
}

fn mfa_path(
    cli: &Cli,
    ctx: &Context,
    ssh: &Ssh,
    ours: &str,
    socket: SocketState,
    script: &shared::remote::quote::Script,
    discovered: bool,
) -> Result<(Connection, shared::support::process::Output)> {
    let mut path = Connection {
        ssh_path: SshPath::Mfa,
        master: Master::None,
        control_path: Some(ours.to_string()),
        mfa_style: true,
        discovered,
    };
    // 1. The person's own master, from their ssh config.
    let theirs = ssh
        .resolved_config(false)?
        .control_path
        .filter(|p| p != ours);
    if let Some(p) = theirs.filter(|p| std::path::Path::new(p).exists()) {
        if control_socket::check(&p).is_ok() && master_alive(ssh, &p)? {
            path.master = Master::User;
            path.control_path = Some(p);
        }
    }
    // 2. The managed socket: ride it at once, so the check itself proves the master works (one
    //    ssh execution, no separate `-O check`). A dead master behind a stale socket shows as
    //    ssh's "Control socket connect" warning, then a login BatchMode refuses.
    if path.master == Master::None && socket == SocketState::Present {
        let riding = ssh.via_control_path(Some(ours));
        match run_check(&riding, script) {
            Ok(out) if !went_around_a_dead_master(&out.stderr_tail) => {
                path.master = Master::Managed;
                return Ok((path, out));
            }
            // The master is dead and a non-interactive login got in around it: still no master.
            Ok(_) => {}
            Err(e)
                if e.kind == ErrorKind::NeedsPerson
                    || e.command
                        .as_ref()
                        .is_some_and(|c| went_around_a_dead_master(&c.stderr_tail)) => {}
            Err(e) => return Err(e),
        }
    }
    if path.master == Master::None {
        let argv = ssh.master_command(ours);
        let printable = argv
            .iter()
            .map(|a| quote_for_display(a))
            .collect::<Vec<_>>()
            .join(" ");
        if !cli.establish {
            ctx.note(format!("no live ControlMaster for {}; log in once in a terminal with:\n\n    {printable}\n", ssh.host));
            return Err(ToolError::needs_person(format!(
                "{} needs an interactive (MFA) login and no ControlMaster is running",
                ssh.host
            ))
            .with_hint(format!(
                "run in a terminal: {printable}   then rerun this step (or rerun with --establish)"
            )));
        }
        // One prompt on the person's terminal at a time; a run that waited for another's login
        // first looks whether that login opened the master it needs (two pipelines started at
        // once for one cluster: one login).
        let turn = LoginTurn::take(ctx, &ssh.host, cli.establish_timeout)?;
        if turn.as_ref().is_some_and(|t| t.waited)
            && std::path::Path::new(ours).exists()
            && master_alive(ssh, ours)?
        {
            ctx.note(format!(
                "the ControlMaster to {} came up while this run waited: riding it, no second login",
                ssh.host
            ));
            let out = run_check(&ssh.via_control_path(Some(ours)), script)?;
            path.master = Master::Managed;
            return Ok((path, out));
        }
        let out = establish(cli, ctx, ssh, ours, script)?;
        drop(turn);
        path.master = Master::Managed;
        return Ok((path, out));
    }
    let riding = ssh.via_control_path(path.control_path.as_deref());
    let out = run_check(&riding, script)?;
    Ok((path, out))
}

/// The person's turn at the terminal: an exclusive lock on `<state dir>/login.lock`, held while
/// ssh prompts, so two runs that need a login (two clusters, or two pipelines for one) never ask
/// at the same time, each prompt mixed into the other. The kernel drops the lock when its
/// process ends, so a killed run leaves no stale turn. A file system without locks goes on
/// without one (said once).
struct LoginTurn {
    _file: std::fs::File,
    waited: bool,
}

impl LoginTurn {
    fn take(ctx: &Context, host: &str, timeout_secs: u64) -> Result<Option<LoginTurn>> {
        use std::fs::TryLockError;
        use std::io::Write;
        let Some(dir) = shared::state::journal::state_dir() else {
            return Ok(None);
        };
        let path = dir.join("login.lock");
        let file = shared::state::private_files::create_dir(&dir).and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
        });
        let mut file = match file {
            Ok(f) => f,
            Err(e) => {
                ctx.warn(format!(
                    "cannot open {} ({e}): logins are not taken in turn",
                    path.display()
                ));
                return Ok(None);
            }
        };
        let started = std::time::Instant::now();
        let mut waited = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    if !waited {
                        let holder = std::fs::read_to_string(&path).unwrap_or_default();
                        ctx.note(format!(
                            "another login is asking on this terminal ({}): waiting for it to finish before logging in to {host}",
                            holder.trim()
                        ));
                        waited = true;
                    }
                    if started.elapsed() > Duration::from_secs(timeout_secs) {
                        return Err(ToolError::needs_person(format!(
                            "waited {timeout_secs} s for another login on this terminal to finish ({})",
                            std::fs::read_to_string(&path).unwrap_or_default().trim()
                        ))
                        .with_hint("finish or cancel that login, then rerun this step".to_string()));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(TryLockError::Error(e)) => {
                    ctx.warn(format!(
                        "cannot lock {} ({e}): logins are not taken in turn",
                        path.display()
                    ));
                    return Ok(None);
                }
            }
        }
        let _ = file.set_len(0);
        let _ = write!(file, "the login to {host}, pid {}", std::process::id());
        Ok(Some(LoginTurn {
            _file: file,
            waited,
        }))
    }
}

/// Log in once, attached to the person's terminal for the prompts, and in that same ssh
/// execution open the managed master (`ControlMaster=auto` with `ControlPersist=24h`: ssh moves
/// the master to the background right after the login) and run the remote check through it.
/// One login, one ssh execution; the master stays for every later tool.
fn establish(
    cli: &Cli,
    ctx: &Context,
    ssh: &Ssh,
    control_path: &str,
    script: &shared::remote::quote::Script,
) -> Result<shared::support::process::Output> {
    ctx.note(format!(
        "opening a ControlMaster to {}: complete the login prompts",
        ssh.host
    ));
    let mut cmd = ssh
        .establish_command(control_path, ssh.connect_timeout.max(10))
        .input(shared::support::process::Input::Bytes(
            shared::remote::ssh::framed(script),
        ))
        .inherit_stderr()
        .deadline(Duration::from_secs(cli.establish_timeout));
    let mut server = None;
    if let Some(pw) = ctx.secrets.slurm_password.clone() {
        if let Some(old) = shared::remote::ssh::askpass_require_ignored() {
            ctx.warn(format!("this ssh ({old}) is older than OpenSSH 8.4 and ignores SSH_ASKPASS_REQUIRE: it asks for the password on the terminal itself, and `slurm_password` goes unused"));
        }
        // The password answers only the cluster's own prompt (a jump host's goes to the person).
        let rc = ssh.resolved_config(false)?;
        // ssh names the host in its prompts by its HostKeyAlias when one is set, else HostName.
        let hosts = vec![rc.host_key_alias.clone().unwrap_or(rc.hostname.clone())];
        let expected = askpass::Expected {
            user: rc.user.clone(),
            hosts,
            proxied: rc.proxied,
        };
        let s = askpass::Server::start(pw, expected)
            .map_err(|e| ToolError::remote(format!("cannot set up the password hand-over: {e}")))?;
        let me = std::env::current_exe()
            .map_err(|e| ToolError::remote(format!("cannot find this program's path: {e}")))?;
        cmd = cmd
            .env("SSH_ASKPASS", me.display().to_string())
            .env("SSH_ASKPASS_REQUIRE", "force")
            .env(askpass::SOCKET_ENV, s.socket.display().to_string());
        server = Some(s);
    }
    // The terminal as it was: restored however the login ends (a timeout kills ssh mid-prompt,
    // with echo off), and the error then starts on a line of its own.
    let terminal = shared::support::ui::Terminal::save();
    let out = cmd.run().map_err(|e| spawn_error(&ssh_program(), e));
    let prompts = server.as_ref().map(|s| s.state()).unwrap_or_default();
    drop(server);
    let failed =
        !matches!(&out, Ok(o) if o.success() && std::path::Path::new(control_path).exists());
    if let Some(t) = &terminal {
        t.restore(failed);
    }
    let out = out?;
    if out.code == Some(255) || out.timed_out || !std::path::Path::new(control_path).exists() {
        let at = prompts
            .waiting_at()
            .map(|p| format!(" at the prompt {p:?}"))
            .unwrap_or_default();
        let (what, hint) = if out.timed_out {
            (
                format!(
                    "the interactive login to {} timed out after {} s{at}",
                    ssh.host, cli.establish_timeout
                ),
                "rerun and answer the prompts in time (--establish-timeout gives more time, up to the server's own login limit, usually 120 s)".to_string(),
            )
        } else if let Some(why) = &prompts.refused {
            (
                format!("the interactive login to {} failed: {why}; nothing was retried (repeated failures lock accounts on many sites)", ssh.host),
                "check `slurm_password` (or drop it and type the password yourself), then rerun once".to_string(),
            )
        } else if !prompts.prompts.is_empty() || out.stderr_tail.contains("Permission denied") {
            (
                format!(
                    "the interactive login to {} was refused: {}; ssh tried once (no lockout)",
                    ssh.host,
                    refused_answer(&prompts)
                ),
                "rerun and answer again (a one-time code must be the current one), or check `slurm_password`".to_string(),
            )
        } else {
            (
                format!("the interactive login to {} did not succeed (ssh's own message is above): no ControlMaster is running", ssh.host),
                "rerun once and answer the prompts again, or run the ssh -fNM command from `slurm-ssh-preflight` (without --establish) yourself in a terminal".to_string(),
            )
        };
        return Err(ToolError::needs_person(what)
            .with_hint(hint)
            .with_command(out.record()));
    }
    if !out.success() {
        return Err(check_failed(ssh, &out));
    }
    ctx.note(format!("ControlMaster running at {control_path}"));
    Ok(out)
}

/// Which answer the server refused, as far as the prompts tell (the last one answered).
fn refused_answer(p: &askpass::State) -> String {
    match p.prompts.last() {
        None => "an answer at the terminal was wrong".to_string(),
        Some(last) if askpass::is_password_prompt(last) && p.password_given => {
            "the password in `slurm_password` was refused".to_string()
        }
        Some(last) if askpass::is_password_prompt(last) => "the password was refused".to_string(),
        Some(last) => {
            format!("the answer to {last:?} was refused (a wrong or expired one-time code?)")
        }
    }
}

#[cfg(test)]
mod refusals {
    use super::*;

    #[test]
    fn the_refused_answer_is_named_from_the_prompts() {
        let mut p = askpass::State::default();
        assert_eq!(refused_answer(&p), "an answer at the terminal was wrong");
        p.decide("Password: ", true);
        assert_eq!(
            refused_answer(&p),
            "the password in `slurm_password` was refused"
        );
        p.decide("Verification code: ", true);
        assert!(refused_answer(&p).contains("\"Verification code:\" was refused"));
        let mut q = askpass::State::default();
        q.decide("Password: ", false);
        assert_eq!(refused_answer(&q), "the password was refused");
    }
}

#[cfg(test)]
mod help {
    #[test]
    fn help_names_every_field_of_the_sections_it_writes() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
