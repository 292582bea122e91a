//! One program for every tool, as the release files ship them (scripts/release): run by a name
//! of a tool (a link `slurm-resolve -> slurm-tools`, or a copy so named) it is that tool, exactly
//! as its own binary is; `slurm-tools TOOL ARGS...` runs TOOL with ARGS (the wheel's launchers
//! call it so). One binary instead of fifteen: the code they share is there once (sizes in
//! docs/benchmarks.md, "Start-up and size"). Built only with `--features multicall`; the
//! separate binaries stay for development and the tests.
use std::ffi::OsString;
use std::process::ExitCode;

#[path = "../slurm-alloc/main.rs"]
mod slurm_alloc;
#[path = "../slurm-attach/main.rs"]
mod slurm_attach;
#[path = "../slurm-fetch/main.rs"]
mod slurm_fetch;
#[path = "../slurm-forward/main.rs"]
mod slurm_forward;
#[path = "../slurm-init/main.rs"]
mod slurm_init;
#[path = "../slurm-mcp/main.rs"]
mod slurm_mcp;
#[path = "../slurm-notify/main.rs"]
mod slurm_notify;
#[path = "../slurm-report/main.rs"]
mod slurm_report;
#[path = "../slurm-resolve/main.rs"]
mod slurm_resolve;
#[path = "../slurm-runs/main.rs"]
mod slurm_runs;
#[path = "../slurm-ssh-preflight/main.rs"]
mod slurm_ssh_preflight;
#[path = "../slurm-submit/main.rs"]
mod slurm_submit;
#[path = "../slurm-sync-tracked/main.rs"]
mod slurm_sync_tracked;
#[path = "../slurm-sync-untracked/main.rs"]
mod slurm_sync_untracked;
#[path = "../slurm-watch/main.rs"]
mod slurm_watch;

/// A tool's own `main`.
type Main = fn() -> ExitCode;

/// Every tool, by the name it is run as.
const TOOLS: &[(&str, Main)] = &[
    ("slurm-alloc", slurm_alloc::main),
    ("slurm-attach", slurm_attach::main),
    ("slurm-fetch", slurm_fetch::main),
    ("slurm-forward", slurm_forward::main),
    ("slurm-init", slurm_init::main),
    ("slurm-mcp", slurm_mcp::main),
    ("slurm-notify", slurm_notify::main),
    ("slurm-report", slurm_report::main),
    ("slurm-resolve", slurm_resolve::main),
    ("slurm-runs", slurm_runs::main),
    ("slurm-ssh-preflight", slurm_ssh_preflight::main),
    ("slurm-submit", slurm_submit::main),
    ("slurm-sync-tracked", slurm_sync_tracked::main),
    ("slurm-sync-untracked", slurm_sync_untracked::main),
    ("slurm-watch", slurm_watch::main),
];

fn tool(name: &str) -> Option<Main> {
    TOOLS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, main)| *main)
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let called = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(main) = tool(&called) {
        return main();
    }
    if let Some(main) = args.get(1).and_then(|a| tool(&a.to_string_lossy())) {
        shared::contract::driver::set_args(args[1..].to_vec());
        return main();
    }
    // ssh starts slurm-ssh-preflight's password hand-over by the program's own path.
    if std::env::var_os("SLURM_TOOLS_ASKPASS_SOCKET").is_some() {
        return slurm_ssh_preflight::main();
    }
    let names: Vec<&str> = TOOLS.iter().map(|(n, _)| *n).collect();
    match args
        .get(1)
        .map(|a| a.to_string_lossy().into_owned())
        .as_deref()
    {
        Some("--list") => {
            for n in &names {
                #[allow(clippy::print_stdout)]
                {
                    println!("{n}");
                }
            }
            ExitCode::SUCCESS
        }
        Some("--version" | "-V") => {
            #[allow(clippy::print_stdout)]
            {
                println!("slurm-tools {}", env!("SLURM_TOOLS_LONG_VERSION"));
            }
            ExitCode::SUCCESS
        }
        other => {
            eprintln!(
                "slurm-tools: {}; run a tool by its name (the release files link each to this program), or `slurm-tools TOOL ARGS...`, or `slurm-tools --list`.\ntools: {}",
                match other {
                    Some(o) => format!("{o:?} is not one of the tools"),
                    None => "no tool named".to_string(),
                },
                names.join(" ")
            );
            ExitCode::from(2)
        }
    }
}
