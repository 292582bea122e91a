//! slurm-forward: a local port to a port of a running job's node, through the ControlMaster the
//! pipeline already has (no new login), ended with the job or on `--cancel`.

use clap::Parser;
use shared::contract::schema::{Forward, SshPath};
use shared::remote::quote::Script;
use shared::remote::running::{check_running, pick_node, target, StillRunning};
use shared::remote::ssh::{ssh_program, Ssh};
use shared::support::process::Cmd;
use shared::{Context, Document, ErrorKind, InputArg, Outcome, Result, ToolCli, ToolError};
use std::time::Duration;

/// Forward a local port to a port of a running job or allocation (a notebook, TensorBoard, a
/// Ray dashboard, a debugger), through the connection slurm-ssh-preflight set up.
///
/// The forward is added to the ControlMaster (`ssh -O forward`), so an MFA cluster asks for
/// nothing again; on a key-based cluster without a master, one is opened (key login, no prompt).
/// On this machine it listens on 127.0.0.1 only (and the port must be free on ::1 too, so
/// `localhost` cannot reach someone else's listener). What it exposes: on the cluster, the
/// forward reaches the server from the login node, so the server must listen on an address the
/// login node can reach (the node's own name), and every user and job on the cluster network can
/// reach it there too; on this machine, every local user (and, through DNS rebinding, a web
/// page in your browser) can reach 127.0.0.1. Protect the server with its own token or password
/// (Jupyter's token, TensorBoard behind one, Ray's dashboard never open to others: its job API
/// runs code as you). The remote port is
/// `--port`, or the number a job wrote to `--port-file` (a path on the cluster, for a server that
/// picks a random port); the node is the job's first unless `--node`. Before forwarding it checks
/// the job runs (pending: exit 3 with Slurm's estimate; ended: exit 4), that the node is one of
/// the job's, that the port answers from the login node, and that the local port is free.
///
/// The forward ends when the job ends (a small watcher started in the background cancels it), when
/// the master ends, or with `slurm-forward --cancel` on the document this run wrote.
///
/// {reads}
/// (allocation or job name the job; forward is --cancel's: the section an earlier run wrote.)
///
/// {adds}
///
/// Exit: 0 forwarding (or cancelled); 2 bad input or the local port is taken; 3 the job is
/// pending or a login is needed; 4 the job ended, nothing answers on the port, or ssh failed.
///
/// Example:
///   slurm-forward --port-file ~/work/port.txt job.json > fwd.json   # then open forward.local_url
///   slurm-forward --cancel fwd.json
#[derive(Parser, Debug)]
#[command(name = "slurm-forward", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// The port on the node.
    #[arg(long, value_name = "PORT", conflicts_with = "port_file")]
    port: Option<u16>,

    /// A file on the cluster holding the port (first number in it), written by the job.
    #[arg(long, value_name = "PATH")]
    port_file: Option<String>,

    /// The local port (default: the remote port; 0: any free port).
    #[arg(long, value_name = "PORT")]
    local_port: Option<u16>,

    /// The node (one of the job's; default: its first).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,

    /// Remove the forward the document's `forward` section describes.
    #[arg(long)]
    cancel: bool,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["forward"];

    fn reads() -> Vec<&'static str> {
        Input::reads()
    }
}

/// The hidden mode of the background watcher: `slurm-forward --watch-forward FILE`.
const WATCH_FLAG: &str = "--watch-forward";

pub fn main() -> std::process::ExitCode {
    let args: Vec<String> = shared::contract::driver::args_os()
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.len() == 3 && args[1] == WATCH_FLAG {
        watch(&args[2]);
        return std::process::ExitCode::SUCCESS;
    }
    shared::contract::driver::run::<Cli>("slurm-forward", forward)
}

fn spec(f: &Forward) -> String {
    format!("127.0.0.1:{}:{}:{}", f.local_port, f.node, f.remote_port)
}

/// `ssh -O forward|cancel -L spec` on the master.
fn control_forward(ssh: &Ssh, op: &str, f: &Forward) -> shared::support::process::Output {
    Cmd::new(ssh_program())
        .args(ssh.via_control_path(Some(&f.control_path)).base_args())
        .args(["-O", op, "-L", &spec(f), "--", &ssh.host])
        .deadline(Duration::from_secs(20))
        .run()
        .unwrap_or_else(|e| shared::support::process::Output {
            code: None,
            stdout: Vec::new(),
            stderr_tail: e.to_string(),
            timed_out: false,
            elapsed: Duration::ZERO,
            argv: Vec::new(),
        })
}

shared::document_input! {
    /// What slurm-forward reads.
    struct Input {
        target: shared::remote::running::TargetInput = part,
        forward: Option<Forward> = section,
        connection: shared::remote::ssh::Connection = part,
    }
}

/// A master at `cp`, opening one on a key-based cluster when there is none. `direct`: preflight found the host takes keys (a master may be opened here).
fn ensure_master(ctx: &Context, ssh: &Ssh, cp: &str, direct: bool) -> Result<()> {
    let alive = |s: &Ssh| {
        s.control("check", Some(cp))
            .run()
            .map(|o| o.success())
            .unwrap_or(false)
    };
    if alive(ssh) {
        return Ok(());
    }
    if direct {
        ctx.note(format!(
            "no ControlMaster at {cp}: opening one (key login) to carry the forward"
        ));
        // `auto`, as slurm-ssh-preflight: a socket a killed master left behind is replaced
        // (`yes` would refuse it: "ControlSocket ... already exists, disabling multiplexing"),
        // and a master another run opened a moment ago is used, not fought over.
        let out = Cmd::new(ssh_program())
            .args(ssh.via_control_path(Some(cp)).base_args())
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "ControlMaster=auto",
                "-o",
                "ControlPersist=24h",
                "-fN",
                "--",
                &ssh.host,
            ])
            .deadline(Duration::from_secs(30))
            .run()
            .map_err(|e| shared::remote::ssh::spawn_error(&ssh_program(), e))?;
        if alive(ssh) {
            return Ok(());
        }
        return Err(ssh.failure_error(&shared::remote::ssh::without_client_noise(out)));
    }
    Err(ToolError::new(
        ErrorKind::NeedsPerson,
        format!("no live ControlMaster at {cp} to carry the forward"),
    )
    .with_hint("log in once with `slurm-ssh-preflight --establish` (or the login command it prints), then rerun slurm-forward"))
}

fn forward(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let ssh = Ssh::connect(&input.connection)?;
    if cli.cancel {
        return cancel(ctx, &ssh, input.forward);
    }
    if let Some(n) = &cli.node {
        shared::slurm::check_slurm_value("--node", n)?;
    }
    if cli.port.is_none() && cli.port_file.is_none() {
        return Err(
            ToolError::bad_input("which port? give --port PORT or --port-file PATH").with_hint(
                "--port 8888 for a fixed port; --port-file for a port the job writes to a file",
            ),
        );
    }
    if cli.port == Some(0) {
        return Err(ToolError::bad_input(
            "--port 0 is not a port a job listens on",
        ));
    }
    let t = target(&input.target)?;
    let direct = input
        .connection
        .preflight
        .as_ref()
        .is_some_and(|p| p.ssh_path == SshPath::Direct);
    let cp = ssh
        .control_path
        .clone()
        .ok_or_else(|| ToolError::bad_input("no control path: run slurm-ssh-preflight first"))?;

    let (node, remote_port) = job_port(cli, &ssh, &t)?;
    let local_port = local_port_for(cli, remote_port)?;
    ensure_master(ctx, &ssh, &cp, direct)?;
    let f = Forward {
        job_id: t.job_id.clone(),
        node,
        remote_port,
        local_port,
        local_url: format!("http://127.0.0.1:{local_port}/"),
        state: "active".into(),
        control_path: cp,
    };
    let out = control_forward(&ssh, "forward", &f);
    if !out.success() {
        return Err(ToolError::remote(format!(
            "the ControlMaster refused the forward {}: {}",
            spec(&f),
            out.stderr_tail.trim()
        ))
        .with_command(out.record()));
    }
    ctx.note(format!(
        "{} -> {}:{} in job {} (ends with the job, or `slurm-forward --cancel` on this output)",
        f.local_url, f.node, f.remote_port, f.job_id
    ));
    ctx.doc.set_section("forward", &f);
    start_watcher(ctx);
    Ok(Outcome::Done)
}

/// What `ForwardPort` is given: the job, the node asked for, the port or the file it is in.
struct PortAsk {
    job_id: String,
    node: Option<String>,
    port: Option<u16>,
    port_file: Option<String>,
}

/// What the cluster said about the port.
enum PortAnswer {
    /// The port file is not there, or holds no number yet.
    NoPortFile,
    /// The job's node, the port there (as written), and whether it answers from the login node.
    Port {
        node: String,
        port: String,
        reachable: bool,
    },
}

/// The job runs, its node, its port (given, or read from the port file), and whether the port
/// answers there from the login node (job-running.sh, forward-port.sh): one execution.
struct ForwardPort;

impl shared::remote::Operation for ForwardPort {
    type Params = PortAsk;
    type Reply = PortAnswer;
    const DEADLINE: Duration = Duration::from_secs(60);

    fn script(p: &PortAsk) -> Result<Script> {
        let mut s = Script::new();
        // A literal ~/ in --port-file (quoted, as every value is) is the home, expanded there.
        s.raw("# shellcheck disable=SC2088\nset -u\n");
        check_running(&mut s, &p.job_id)?;
        pick_node(&mut s, p.node.as_deref())?;
        s.assign("port", &p.port.map(|p| p.to_string()).unwrap_or_default())?;
        s.assign("port_file", p.port_file.as_deref().unwrap_or(""))?;
        s.raw(shared::remote::FORWARD_PORT);
        Ok(s)
    }

    fn reply(p: &PortAsk, out: &shared::support::process::Output) -> Result<PortAnswer> {
        let reply = shared::remote::running::on_job(&p.job_id, p.node.as_deref(), out)?;
        if reply.says("NO_PORT_FILE") || reply.says("NO_PORT_IN_FILE") {
            return Ok(PortAnswer::NoPortFile);
        }
        let (Some(node), Some(port)) = (reply.field("NODE"), reply.field("PORT")) else {
            return Err(ToolError::remote(format!(
                "could not learn the job's node and port ({})",
                out.exit_text()
            ))
            .with_command(out.record()));
        };
        Ok(PortAnswer::Port {
            node,
            port,
            reachable: reply.field("REACH").as_deref() != Some("no"),
        })
    }
}

/// One round trip: the job runs, its node, the port (given, or from the job's port file), and
/// that the port answers there from the login node.
fn job_port(cli: &Cli, ssh: &Ssh, t: &shared::remote::running::Target) -> Result<(String, u16)> {
    let params = PortAsk {
        job_id: t.job_id.clone(),
        node: cli.node.clone(),
        port: cli.port,
        port_file: cli.port_file.clone(),
    };
    let (node, port, reachable) = match shared::remote::run::<ForwardPort>(ssh, &params)? {
        PortAnswer::NoPortFile => {
            return Err(ToolError::new(
                ErrorKind::NeedsPerson,
                format!(
                    "{} has no port number on the cluster yet",
                    cli.port_file.as_deref().unwrap_or_default()
                ),
            )
            .with_hint(
                "the job writes it when its server starts: wait, then rerun; or give --port",
            ))
        }
        PortAnswer::Port {
            node,
            port,
            reachable,
        } => (node, port, reachable),
    };
    let remote_port: u16 = port.parse().map_err(|_| {
        ToolError::bad_input(format!("the port file holds {port:?}, which is not a port"))
    })?;
    if !reachable {
        return Err(ToolError::remote(format!(
            "nothing answers on {node}:{remote_port} from the login node"
        ))
        .with_hint(format!("the server must listen on {node}'s own name or cluster address (loopback is not reachable from the login node), which every user on the cluster network can reach: give it a token or password; then rerun")));
    }
    Ok((node, remote_port))
}

/// The local side: loopback only, a port that is free now (on [::1] too).
fn local_port_for(cli: &Cli, remote_port: u16) -> Result<u16> {
    Ok(match cli.local_port.unwrap_or(remote_port) {
        0 => (0..20)
            .filter_map(|_| {
                std::net::TcpListener::bind(("127.0.0.1", 0))
                    .and_then(|l| l.local_addr())
                    .ok()
                    .map(|a| a.port())
            })
            .find(|p| !taken_on_v6(*p))
            .ok_or_else(|| ToolError::remote("no free local port on 127.0.0.1 and [::1]"))?,
        p => {
            // IPv6 loopback too: `http://localhost:P` may go to [::1]:P first, where another
            // local user's listener would get the connection.
            if taken_on_v6(p) {
                return Err(ToolError::bad_input(format!(
                    "local port {p} is taken on [::1]: `localhost:{p}` could reach another program"
                ))
                .with_hint(
                    "pick another with --local-port N, or --local-port 0 for any free port",
                ));
            }
            if let Err(e) = std::net::TcpListener::bind(("127.0.0.1", p)) {
                return Err(
                    ToolError::bad_input(format!("local port {p} cannot be used ({e})")).with_hint(
                        "pick another with --local-port N, or --local-port 0 for any free port",
                    ),
                );
            }
            p
        }
    })
}

fn cancel(ctx: &mut Context, ssh: &Ssh, forward: Option<Forward>) -> Result<Outcome> {
    let Some(mut f) = forward else {
        return Err(shared::contract::doc::missing(
            "forward",
            "--cancel removes the forward a slurm-forward run wrote: give its output",
        ));
    };
    let out = control_forward(ssh, "cancel", &f);
    if out.success() {
        ctx.note(format!("forward {} removed", f.local_url));
    } else {
        // The master (and with it the forward) is gone already: nothing is left to remove.
        ctx.note(format!(
            "forward {} was not there any more ({})",
            f.local_url,
            out.stderr_tail.trim()
        ));
    }
    f.state = "cancelled".into();
    ctx.doc.set_section("forward", &f);
    Ok(Outcome::Done)
}

/// Start the background watcher that cancels the forward when the job ends. It gets the
/// document through a private temporary file (removed once read).
fn start_watcher(ctx: &Context) {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let Ok(dir) = shared::state::tempdir::create("slurm-forward-") else {
        return;
    };
    let file = dir.join("doc.json");
    if std::fs::write(&file, ctx.doc.to_line()).is_err() {
        return;
    }
    let _ = std::process::Command::new(exe)
        // The one-program build tells its tools apart by this name.
        .arg0("slurm-forward")
        .arg(WATCH_FLAG)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}

/// The watcher: every 10 s, ask (through the master) whether the job still runs; when it does
/// not, or the master is gone, remove the forward and end.
fn watch(file: &str) {
    let text = std::fs::read(file).unwrap_or_default();
    let _ = std::fs::remove_file(file);
    if let Some(d) = std::path::Path::new(file).parent() {
        let _ = std::fs::remove_dir(d);
    }
    let Ok(doc) = Document::parse(&text, "watch") else {
        return;
    };
    let Ok(input) = Input::read(&doc) else {
        return;
    };
    let (Ok(ssh), Some(f)) = (Ssh::connect(&input.connection), input.forward) else {
        return;
    };
    let ssh = ssh.via_control_path(Some(&f.control_path));
    loop {
        std::thread::sleep(Duration::from_secs(10));
        let alive = ssh
            .control("check", Some(&f.control_path))
            .run()
            .map(|o| o.success())
            .unwrap_or(false);
        if !alive {
            return;
        }
        let Ok(not_running) = shared::remote::run::<StillRunning>(&ssh, &f.job_id) else {
            continue;
        };
        if not_running.is_some() {
            let _ = control_forward(&ssh, "cancel", &f);
            return;
        }
    }
}

/// Someone listens on `[::1]:port` (a machine without IPv6 has nobody there).
fn taken_on_v6(port: u16) -> bool {
    matches!(
        std::net::TcpListener::bind(("::1", port)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn help_names_its_sections() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
