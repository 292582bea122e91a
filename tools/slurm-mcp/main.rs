//! slurm-mcp: the tools as a Model Context Protocol server over stdio, so a coding agent drives
//! the same steps a person pipes together, under a policy the agent cannot change, with every
//! call in the ledger.
//!
//! The protocol part is here (JSON-RPC 2.0, one message per line); what each MCP tool runs is in
//! `calls.rs`, the policy file in `policy.rs`.

use clap::Parser;
use serde::Serialize;
use serde_json::Value;
use shared::Result;
use std::io::{BufRead, Write};
use std::process::ExitCode;

mod calls;
mod policy;

const TOOL: &str = "slurm-mcp";

/// The MCP protocol versions this server speaks, newest first.
const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// Serve the tools to a coding agent: a Model Context Protocol (MCP) server over stdio.
///
/// An MCP client (a coding agent, an editor) starts `slurm-mcp` and calls its tools: resolve,
/// preflight, sync_tracked, sync_untracked, submit, watch, cancel, report, runs, fetch,
/// attach_command, alloc_up, alloc_exec, alloc_down. Each takes the job document (its input
/// schema is the contract's own, docs/job-document.schema.json) and returns the document the
/// step wrote, exactly as the command does: every call runs the command itself (slurm-submit
/// for submit, and so on), in the server's current directory (the repository).
///
/// Plans before actions: sync_tracked, sync_untracked, submit, cancel, alloc_up, alloc_exec and
/// alloc_down take `"plan": true` and then change nothing: submit, sync_tracked, sync_untracked
/// and alloc_up return their command's `--dry-run` (the exact srun, sbatch or salloc command, what
/// would be pushed, the files that would be sent); cancel, alloc_exec and alloc_down what they
/// run on the cluster and on which job; every plan the command line, the job and the GPU-hours. The plan has a `plan_id`; with
/// `require_plan` in the policy, an action runs only with the `plan_id` of a plan of the very
/// same call.
///
/// The policy is a file the agent cannot change: `~/.config/slurm-tools/policy.json`
/// (`$XDG_CONFIG_HOME/slurm-tools/policy.json`), read at every call. It limits GPU-hours per run
/// and per day (the last 24 hours of this server's submissions and allocations), clusters,
/// partitions, nodes, the time limit, and concurrent runs (docs/contract.md, "The agent
/// policy"). A request over a limit is refused with the limit named, never trimmed. Without the
/// file there are no limits, but the rest holds: the server cancels, watches, fetches from and
/// attaches to only jobs the tools submitted for this user (the ledger), never returns secrets
/// (slurm_password, webhook URLs), and never logs in: where a cluster needs a login (MFA),
/// preflight says so with the command for the person, and waits for the master when asked to
/// (`wait_for_login_seconds`).
///
/// Every call is a line in the run ledger (`event: "mcp"`: the client's name, the tool, how it
/// ended, the job, and a copy of the document it was given, secrets removed, under `mcp/` in the
/// state directory): `jq 'select(.event == "mcp")' ~/.local/state/slurm-tools/runs.jsonl`.
///
/// Calls are served one at a time, in order (a watch holds the server until its verdict).
///
/// Reads no job document of its own: stdin and stdout are the MCP session (JSON-RPC 2.0, one
/// message per line); each tool call carries its document. The README's "From an agent" has a
/// client's configuration.
///
/// Exit 0 when the client closes stdin; 2 for bad flags.
///
/// Example:
///   slurm-mcp
///   echo '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' | slurm-mcp | jq -r '.result.tools[].name'
#[derive(Parser, Debug)]
#[command(name = "slurm-mcp", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {}

pub fn main() -> ExitCode {
    shared::contract::driver::run_plain::<Cli>(TOOL, serve)
}

fn serve(_cli: &Cli) -> Result<u8> {
    let mut server = calls::Server::new();
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(reply) = handle(&mut server, &line) {
            let text = serde_json::to_string(&reply).expect("a reply serialises");
            if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                break;
            }
        }
    }
    Ok(0)
}

/// A JSON-RPC reply: a result or an error, never both.
#[derive(Serialize)]
struct Reply {
    jsonrpc: &'static str,
    id: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<RpcError>,
}

#[derive(Serialize)]
struct RpcError {
    code: i64,
    message: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    capabilities: Capabilities,
    server_info: ServerInfo,
    instructions: &'static str,
}

#[derive(Serialize)]
struct Capabilities {
    tools: ToolsCapability,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolsCapability {
    list_changed: bool,
}

#[derive(Serialize)]
struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

const INSTRUCTIONS: &str = "Run jobs on Slurm clusters from this repository. The pipeline is \
resolve -> preflight -> sync_tracked -> sync_untracked -> submit -> watch -> report; each tool \
takes the job document the previous one returned (structuredContent) as `document`. Actions \
take \"plan\": true first to see what they would do. Limits come from the person's policy file; \
a refusal names the limit. When preflight says a login is needed, ask the person to run the \
command it gives, then call preflight again (or with wait_for_login_seconds).";

/// One message in, at most one reply out (notifications get none).
fn handle(server: &mut calls::Server, line: &str) -> Option<Reply> {
    let msg: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Some(error(Value::Null, -32700, format!("parse error: {e}"))),
    };
    let id = msg.get("id").cloned()?;
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let result = match msg.get("method").and_then(Value::as_str).unwrap_or("") {
        "initialize" => {
            server.set_client(
                params
                    .pointer("/clientInfo/name")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown"),
            );
            let asked = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let version = PROTOCOL_VERSIONS
                .iter()
                .find(|v| **v == asked)
                .unwrap_or(&PROTOCOL_VERSIONS[0]);
            to_value(InitializeResult {
                protocol_version: version.to_string(),
                capabilities: Capabilities {
                    tools: ToolsCapability {
                        list_changed: false,
                    },
                },
                server_info: ServerInfo {
                    name: TOOL,
                    version: env!("CARGO_PKG_VERSION"),
                },
                instructions: INSTRUCTIONS,
            })
        }
        "ping" => Ok(Value::Object(Default::default())),
        "tools/list" => to_value(calls::ToolList {
            tools: calls::list(),
        }),
        "tools/call" => match params.get("name").and_then(Value::as_str) {
            Some(name) => {
                let args = params.get("arguments").cloned().unwrap_or(Value::Null);
                to_value(server.call(name, args))
            }
            None => Err((-32602, "tools/call needs `name`".to_string())),
        },
        other => Err((-32601, format!("method not found: {other}"))),
    };
    Some(match result {
        Ok(v) => Reply {
            jsonrpc: "2.0",
            id,
            result: Some(v),
            error: None,
        },
        Err((code, message)) => error(id, code, message),
    })
}

fn to_value(v: impl Serialize) -> std::result::Result<Value, (i64, String)> {
    serde_json::to_value(v).map_err(|e| (-32603, e.to_string()))
}

fn error(id: Value, code: i64, message: String) -> Reply {
    Reply {
        jsonrpc: "2.0",
        id,
        result: None,
        error: Some(RpcError { code, message }),
    }
}
