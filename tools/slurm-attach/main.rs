//! slurm-attach: a shell (or one command) inside a running job or allocation, through the
//! connection the pipeline already has.

mod ide;

use clap::Parser;
use shared::contract::schema::Attach;
use shared::remote::forensics;
use shared::remote::quote::Script;
use shared::remote::running::{check_running, not_running_error, target, Target};
use shared::remote::ssh::Ssh;
use shared::slurm;
use shared::{Context, DocumentTo, InputArg, Outcome, Result, ToolCli, ToolError};
use std::io::IsTerminal;
use std::time::Duration;

/// Open a shell inside a running job or allocation: on its node, in its container, in its code.
///
/// The target is the document's held allocation (`allocation`, from slurm-alloc up) or, without
/// one, its submitted job (`job`, from slurm-submit). The shell is a job step (`srun --jobid
/// --overlap --pty`, `--overlap` where srun has it) started through the connection slurm-ssh-
/// preflight set up, so an MFA cluster asks for nothing again and compute nodes need no ssh of
/// their own. It starts in the job's own code tree (else the checkout, else remote_cwd) and, when
/// the job runs in a container, joins that container (its named container: slurm-alloc's
/// `slurm-tools-<jobid>`, slurm-submit's `slurm-tools-<tag>`; pyxis runs the step inside it).
///
/// Interactive use needs a terminal; `--command` runs one command instead and exits with its
/// exit code. The shell's or command's stdout is on stdout and its stderr on stderr, byte for
/// byte (as with ssh and slurm-alloc exec); the document (the `attach` section) goes to the file
/// named with `--doc FILE`, and is not written without it. `--ssh-config FILE` writes an ssh
/// entry that reaches the job's node for IDEs and ssh/scp/rsync instead (see the flag), and
/// `--stacks` collects what the job is doing; both write the document on stdout. A job that is
/// not running is said as such: pending (exit 3, with Slurm's estimated start), or ended (exit 4).
///
/// {reads}
/// (allocation or job name the job, with their container names; remote_repo_path or remote_cwd
/// the directory when the job names no tree; install_py_spy is for --stacks.)
///
/// {adds}
///
/// Exit: 0 when the shell or command succeeded, else its own exit code; 2 bad input (or a
/// --ssh-config FILE it may not change); 3 the job is pending or a login is needed; 4 the job
/// ended or ssh failed.
///
/// Example:
///   slurm-attach alloc.json                        # a shell in the allocation's container
///   slurm-attach --command 'nvidia-smi' run.json   # one command in the running job
///   slurm-attach --stacks run.json | jq -r '.forensics.diagnosis[]'   # what every rank is doing
#[derive(Parser, Debug)]
#[command(name = "slurm-attach", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// Run this command (shell text) instead of an interactive shell.
    #[arg(long, value_name = "SHELL TEXT")]
    command: Option<String>,

    /// The node to go to (one of the job's; default: Slurm picks the job's first).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,

    /// Stay outside the job's container (on the node itself).
    #[arg(long)]
    no_container: bool,

    /// Write an ssh `Host slurm-<cluster>-<jobid>` entry to FILE that reaches the job's node through
    /// the ControlMaster, for VS Code / PyCharm Remote-SSH, ssh, scp and rsync (`ssh -F FILE
    /// slurm-<cluster>-<jobid>`). Best a file of its own, e.g. ~/.ssh/slurm-jobs, with `Include
    /// ~/.ssh/slurm-jobs` at the top of ~/.ssh/config (before any Host or Match, or it applies only
    /// inside that block). Only this job's block is replaced; every other byte of FILE is kept, the
    /// write is atomic, a new FILE is 0600, and a FILE with unpaired markers or that cannot be read
    /// is left untouched (exit 2). It runs the OpenSSH server as a step of the job (`sshd -i`, as
    /// you, no root), which accepts only a key made for this; the nodes need the sshd binary.
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    ssh_config: Option<std::path::PathBuf>,

    /// Instead of a shell: collect what every task of the running job is doing, on every node
    /// (rank, kernel state and wait channel, sockets, WORLD_SIZE/MASTER_ADDR, each thread's Python
    /// stack where py-spy is there), with a diagnosis naming a rank that is somewhere else than
    /// all the others, into the `forensics` section (the whole collection into local_dir); at
    /// most 20 s, and the job keeps running. slurm-watch does the same before it cancels a hang.
    #[arg(long, conflicts_with_all = ["command", "ssh_config"])]
    stacks: bool,

    /// With a shell or --command: write the document (the `attach` section) to FILE when it
    /// ended, replacing FILE in one step. Without it no document is written: stdout is the
    /// shell's or the command's.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ssh_config", "stacks"])]
    doc: Option<std::path::PathBuf>,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["attach", "forensics"];

    fn reads() -> Vec<&'static str> {
        Input::reads()
    }

    /// A shell or a command has stdout; `--ssh-config` and `--stacks` write the document there.
    fn document_to(&self) -> DocumentTo {
        if self.ssh_config.is_some() || self.stacks {
            DocumentTo::Stdout
        } else {
            self.doc
                .clone()
                .map_or(DocumentTo::Nowhere, DocumentTo::File)
        }
    }
}

shared::document_input! {
    /// What slurm-attach reads.
    struct Input {
        target: shared::remote::running::TargetInput = part,
        install_py_spy: Option<bool> = flag,
        /// Where --stacks keeps the evidence.
        local: shared::state::local_dirs::LocalDirs = part,
        cluster: shared::state::ledger::ClusterName = part,
        connection: shared::remote::ssh::Connection = part,
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-attach", attach)
}

/// `--stacks`: the running job's forensics, the job untouched.
fn stacks(ctx: &mut Context, input: Input, ssh: &Ssh, job_id: &str) -> Result<Outcome> {
    let install = input.install_py_spy.unwrap_or(false);
    ctx.note(format!(
        "collecting what every task of job {job_id} is doing, on its nodes (at most {} s); the job keeps running",
        forensics::limit(install)
    ));
    let (text, secs) = forensics::collect(ssh, job_id, true, install)?;
    let mut f = forensics::parse(job_id, "requested", &text);
    f.collected_seconds = (secs * 10.0).round() / 10.0;
    let to = forensics::SaveTo {
        dirs: input.local,
        cluster: input.cluster.name(),
    };
    f.file = forensics::save(&to, job_id, &text);
    forensics::diagnose(&mut f);
    for d in &f.diagnosis {
        ctx.note(format!("forensics: {d}"));
    }
    for m in &f.missing {
        ctx.warn(format!("not collected: {m}"));
    }
    for i in &f.installed {
        ctx.note(format!("installed {i}"));
    }
    ctx.doc.set_section("forensics", &f);
    Ok(Outcome::Done)
}

/// The step script: check the job runs, then go in (without --command: `--pty` and a login shell).
fn script(t: &Target, cli: &Cli) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    check_running(&mut s, &t.job_id)?;
    s.raw(slurm::OVERLAP);
    if t.dir == "~" {
        s.raw("cd || exit 126\n");
    } else {
        s.raw("cd --")
            .arg(&t.dir)?
            .raw(" 2>/dev/null || cd || exit 126\n");
    }
    s.raw("exec srun $ov")
        .arg(&format!("--jobid={}", t.job_id))?;
    s.arg("--nodes=1")?.arg("--ntasks=1")?;
    if let Some(n) = &cli.node {
        s.arg(&format!("--nodelist={n}"))?;
    }
    if let (Some(c), false) = (&t.container, cli.no_container) {
        s.arg(&format!("--container-name={c}"))?;
        s.raw(" --container-workdir=\"$PWD\"");
    }
    if cli.command.is_none() {
        s.raw(" --pty");
    }
    // On Apptainer the shell runs through the job's container launcher (the cached image,
    // its mounts and packages), in the directory it is started in.
    if let (Some(l), false) = (&t.launcher, cli.no_container) {
        s.raw(" /bin/sh").arg(l)?;
    }
    match &cli.command {
        Some(c) => s.raw(" bash -c").arg(c)?.raw("\n"),
        None => s.raw(" bash -l\n"),
    };
    Ok(s)
}

fn attach(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let t = target(&input.target)?;
    if let Some(n) = &cli.node {
        slurm::check_slurm_value("--node", n)?;
    }
    if let Some(c) = &cli.command {
        if c.contains('\0') {
            return Err(ToolError::bad_input("--command contains a NUL byte"));
        }
    }
    if cli.stacks {
        let ssh = Ssh::connect(&input.connection)?;
        return stacks(ctx, input, &ssh, &t.job_id);
    }
    if let Some(file) = &cli.ssh_config {
        let ssh = Ssh::connect(&input.connection)?;
        let cluster = input.cluster.name();
        let e = ide::write_entry(ctx, &ssh, &cluster, &t, cli.node.as_deref(), file)?;
        ctx.doc.set_section(
            "attach",
            &Attach {
                job_id: t.job_id,
                node: Some(e.node),
                container: None,
                dir: t.dir,
                command: None,
                interactive: false,
                exit_code: 0,
                ssh_alias: Some(e.alias),
                ssh_config: Some(file.display().to_string()),
            },
        );
        return Ok(Outcome::Done);
    }
    let interactive = cli.command.is_none();
    if interactive && !std::io::stdin().is_terminal() {
        return Err(ToolError::bad_input(
            "an interactive shell needs a terminal, and stdin is not one",
        )
        .with_hint(
            "run slurm-attach from a terminal, or give --command 'CMD' to run one command",
        ));
    }
    let ssh = Ssh::connect(&input.connection)?;
    let s = script(&t, cli)?;
    ctx.note(format!(
        "attaching to job {}{}{} in {}",
        t.job_id,
        cli.node
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default(),
        match (&t.container, &t.launcher, cli.no_container) {
            (Some(c), _, false) => format!(", container {c}"),
            (None, Some(_), false) => ", in its Apptainer container".to_string(),
            _ => String::new(),
        },
        t.dir
    ));
    let out = if interactive {
        ssh.run_script_interactive(&s)?
    } else {
        ssh.run_script_through(&s, Duration::from_secs(7 * 86_400))?
    };
    if let Some(e) = not_running_error(&t.job_id, &out) {
        return Err(e);
    }
    let code = out.code.unwrap_or(255);
    ctx.doc.set_section(
        "attach",
        &Attach {
            job_id: t.job_id,
            node: cli.node.clone(),
            container: t.container.or(t.launcher).filter(|_| !cli.no_container),
            dir: t.dir,
            command: cli.command.clone(),
            interactive,
            exit_code: code,
            ssh_alias: None,
            ssh_config: None,
        },
    );
    Ok(Outcome::Exit(u8::try_from(code).unwrap_or(255)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn help_names_its_sections() {
        shared::contract::driver::assert_help_names_its_sections::<super::Cli>();
    }
}
