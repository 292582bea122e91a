//! The MCP tools: each one runs the command of its step (slurm-submit for `submit`, ...) with
//! the document on stdin, under the policy, and writes an audit line to the ledger.

use super::policy::{self, Refusal, Refused, Request};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use shared::contract::schema::JobDocument;
use shared::state::ledger;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The document argument every tool but `runs` takes.
const DOC: &str = "The job document (docs/contract.md): for the first step the person's job \
file, then the document the previous tool returned as structuredContent.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DocArgs {
    /// The job document (docs/contract.md): for the first step the person's job file, then the
    /// document the previous tool returned as structuredContent.
    #[schemars(with = "JobDocument")]
    document: Value,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ResolveArgs {
    /// The job document (docs/contract.md): the person's job file.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Ask every catalog cluster that can serve the request when it would start, and choose
    /// the earliest (`slurm-resolve --place`; the `placement` section says why).
    place: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PreflightArgs {
    /// The job document, from resolve.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Where the cluster needs a person's login (MFA) and none is open: wait up to this many
    /// seconds for the person to log in (the result of a call without it gives the command),
    /// checking every 3 seconds. Default 0: say so at once.
    wait_for_login_seconds: Option<u64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ActionArgs {
    /// The job document, from the previous step.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Change nothing: return what the call would do, with a `plan_id`.
    plan: Option<bool>,
    /// The `plan_id` of a plan of this very call (required when the policy says
    /// `require_plan`).
    plan_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WatchArgs {
    /// The job document, from submit.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Longest time between polls, in seconds (default: the document's poll_interval_seconds,
    /// else 30).
    interval_seconds: Option<f64>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunsArgs {
    /// Only this cluster's runs.
    cluster: Option<String>,
    /// Only runs in this state (pending, running, ended, or a verdict such as failed).
    state: Option<String>,
    /// Only runs submitted within this age (`2h`, `3d`).
    since: Option<String>,
    /// Only runs whose job name matches this glob.
    name: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    /// The job document, from submit or watch.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Only files matching this glob (relative to the job's work directory).
    pattern: Option<String>,
    /// At most this many bytes in all (`500M`).
    max_bytes: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AttachArgs {
    /// The job document, from submit or alloc_up.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Shell text run inside the job (its node, its container, its code tree).
    command: String,
    /// The node to run it on (default: the job's first).
    node: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExecArgs {
    /// The job document, from alloc_up.
    #[schemars(with = "JobDocument")]
    document: Value,
    /// Shell text run in the allocation.
    command: String,
    /// single (default), per-node, mpi or distributed.
    mode: Option<String>,
    /// Sync the working tree first, in the same ssh execution.
    sync: Option<bool>,
    /// Change nothing: return what the call would do, with a `plan_id`.
    plan: Option<bool>,
    /// The `plan_id` of a plan of this very call (required with `require_plan`).
    plan_id: Option<String>,
}

/// What a tool may do, for the policy and the annotations clients show.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Reads only.
    Read,
    /// Changes something on a cluster: plans, require_plan.
    Action,
}

struct Spec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    schema: fn() -> Value,
    kind: Kind,
    /// The section naming the job it touches, which must be the tools' own (the ledger).
    owned: Option<&'static str>,
}

fn schema<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).expect("a schema serialises");
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
    }
    v
}

const SPECS: &[Spec] = &[
    Spec {
        name: "resolve",
        title: "Choose the cluster (slurm-resolve)",
        description: "Fill in the cluster's values from the catalog: host, partition, account, nodes. With place: ask every fitting cluster when the job would start and choose the earliest.",
        schema: schema::<ResolveArgs>,
        kind: Kind::Read,
        owned: None,
    },
    Spec {
        name: "preflight",
        title: "Check the connection and the cluster (slurm-ssh-preflight)",
        description: "Get a working ssh connection (a login a person opened, for MFA clusters) and check the cluster's side: Slurm, git, containers. Never logs in itself: when a login is needed it returns the command for the person.",
        schema: schema::<PreflightArgs>,
        kind: Kind::Read,
        owned: None,
    },
    Spec {
        name: "sync_tracked",
        title: "Send the committed and uncommitted work (slurm-sync-tracked)",
        description: "Make the cluster's clone equal to the local working tree's tracked files (a snapshot commit; the local repository is not changed).",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: None,
    },
    Spec {
        name: "sync_untracked",
        title: "Send the untracked files (slurm-sync-untracked)",
        description: "Copy the untracked, not ignored files to the cluster's clone.",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: None,
    },
    Spec {
        name: "submit",
        title: "Submit the job (slurm-submit)",
        description: "Submit the job (sbatch) in a code tree of its own. Limited by the person's policy (GPU-hours, clusters, partitions, nodes, time, concurrent runs); plan: true shows the exact command first.",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: None,
    },
    Spec {
        name: "watch",
        title: "Watch the job to its verdict (slurm-watch)",
        description: "Follow the submitted job until it ends, cancel it on a hang, and return the report: PASSED, FAILED, HANG_DETECTED, TIMEOUT, OUT_OF_MEMORY, ...",
        schema: schema::<WatchArgs>,
        kind: Kind::Read,
        owned: Some("job"),
    },
    Spec {
        name: "cancel",
        title: "Cancel the job (slurm-watch --cancel)",
        description: "Cancel a job the tools submitted, and return its report (CANCELLED). Only the tools' own jobs.",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: Some("job"),
    },
    Spec {
        name: "report",
        title: "The verdict as a table (slurm-report)",
        description: "The report of a watched job as text: status, exit code, the log's excerpt, per sweep task.",
        schema: schema::<DocArgs>,
        kind: Kind::Read,
        owned: None,
    },
    Spec {
        name: "runs",
        title: "Every run of the tools (slurm-runs)",
        description: "The runs in the ledger, on every cluster, refreshed from the clusters.",
        schema: schema::<RunsArgs>,
        kind: Kind::Read,
        owned: None,
    },
    Spec {
        name: "fetch",
        title: "Copy the job's files here (slurm-fetch)",
        description: "Copy what the job wrote (its logs and files of its work directory) to this machine, outside the repository.",
        schema: schema::<FetchArgs>,
        kind: Kind::Read,
        owned: Some("job"),
    },
    Spec {
        name: "attach_command",
        title: "Run a command inside the job (slurm-attach --command)",
        description: "Run one command on the running job's node, in its container and code tree (nvidia-smi, py-spy, ls).",
        schema: schema::<AttachArgs>,
        kind: Kind::Read,
        owned: Some("job"),
    },
    Spec {
        name: "alloc_up",
        title: "Hold an allocation (slurm-alloc up)",
        description: "Get an allocation of nodes and keep it, for several commands. Limited by the policy as submit is.",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: None,
    },
    Spec {
        name: "alloc_exec",
        title: "Run a command in the allocation (slurm-alloc exec)",
        description: "Run a command in the held allocation, optionally syncing the working tree first.",
        schema: schema::<ExecArgs>,
        kind: Kind::Action,
        owned: Some("allocation"),
    },
    Spec {
        name: "alloc_down",
        title: "Give the allocation back (slurm-alloc down)",
        description: "End the held allocation.",
        schema: schema::<ActionArgs>,
        kind: Kind::Action,
        owned: Some("allocation"),
    },
];

#[derive(Serialize)]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    name: &'static str,
    title: &'static str,
    description: String,
    input_schema: Value,
    annotations: Annotations,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Annotations {
    title: &'static str,
    read_only_hint: bool,
    destructive_hint: bool,
    open_world_hint: bool,
}

/// Every tool, with its input schema generated from the contract's types.
pub fn list() -> Vec<ToolInfo> {
    SPECS
        .iter()
        .map(|s| ToolInfo {
            name: s.name,
            title: s.title,
            description: match s.name {
                "runs" => s.description.to_string(),
                _ => format!("{} `document`: {DOC}", s.description),
            },
            input_schema: (s.schema)(),
            annotations: Annotations {
                title: s.title,
                read_only_hint: s.kind == Kind::Read,
                destructive_hint: matches!(s.name, "cancel" | "alloc_down"),
                open_world_hint: true,
            },
        })
        .collect()
}

/// A tool call's result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallResult {
    content: Vec<Content>,
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_content: Option<Value>,
    is_error: bool,
}

#[derive(Serialize)]
struct Content {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

impl CallResult {
    fn new(text: String, structured: Option<Value>, is_error: bool) -> CallResult {
        CallResult {
            content: vec![Content { kind: "text", text }],
            structured_content: structured.map(|mut v| {
                redact(&mut v);
                v
            }),
            is_error,
        }
    }
}

/// A refusal as the agent reads it: the message, and the limit in structuredContent.
#[derive(Serialize)]
struct RefusedResult<'a> {
    refused: &'a Refusal,
}

/// A plan: what the call would do.
#[derive(Serialize)]
struct Plan {
    plan_id: String,
    tool: &'static str,
    /// The command line the call would run (the document goes on its stdin).
    would_run: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_hours: Option<f64>,
    /// What the command does on the cluster, for the actions without a dry run of their own
    /// (cancel, alloc_exec, alloc_down).
    #[serde(skip_serializing_if = "Option::is_none")]
    on_cluster: Option<String>,
    /// What the command's own dry run printed (submit, sync_tracked, sync_untracked, alloc_up):
    /// the exact command it would run on the cluster, the files it would send.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dry_run_notes: Vec<String>,
    /// The document the dry run wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_run: Option<Value>,
}

/// How one call ended, for the result and the audit line.
struct Done {
    result: CallResult,
    outcome: String,
    gpu_hours: Option<f64>,
    doc: Option<Value>,
}

impl Done {
    fn refused(r: &Refusal) -> Done {
        Done {
            result: CallResult::new(
                r.message.clone(),
                serde_json::to_value(RefusedResult { refused: r }).ok(),
                true,
            ),
            outcome: format!("refused: {}", r.limit),
            gpu_hours: None,
            doc: None,
        }
    }

    fn bad(message: String) -> Done {
        Done {
            result: CallResult::new(message.clone(), None, true),
            outcome: format!("bad input: {message}"),
            gpu_hours: None,
            doc: None,
        }
    }
}

/// What a command printed and how it ended.
struct Ran {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
    argv: Vec<String>,
}

impl Ran {
    fn doc(&self) -> Option<Value> {
        serde_json::from_slice::<Value>(&self.stdout)
            .ok()
            .filter(Value::is_object)
    }
}

pub struct Server {
    client: String,
    plans: HashSet<String>,
    seq: u64,
}

impl Server {
    pub fn new() -> Server {
        Server {
            client: "unknown".to_string(),
            plans: HashSet::new(),
            seq: 0,
        }
    }

    pub fn set_client(&mut self, name: &str) {
        self.client = name.chars().take(200).collect();
    }

    /// Run one tool call: dispatch, then the audit line.
    pub fn call(&mut self, name: &str, args: Value) -> CallResult {
        let done = match SPECS.iter().find(|s| s.name == name) {
            Some(spec) => self.dispatch(spec, &args),
            None => Done::bad(format!(
                "no tool {name:?}; the tools are {}",
                SPECS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            )),
        };
        self.audit(name, &args, &done);
        done.result
    }

    fn dispatch(&mut self, spec: &Spec, args: &Value) -> Done {
        match spec.name {
            "resolve" => self.with(args, Self::call_resolve),
            "preflight" => self.with(args, Self::call_preflight),
            "watch" => self.with(args, Self::call_watch),
            "report" => self.with(args, Self::call_report),
            "runs" => self.with(args, Self::call_runs),
            "fetch" => self.with(args, Self::call_fetch),
            "attach_command" => self.with(args, Self::call_attach_command),
            "alloc_exec" => self.with(args, |s, a| s.call_alloc_exec(spec, args, a)),
            _ => self.with(args, |s, a| s.call_action(spec, args, a)),
        }
    }

    /// resolve: the cluster it chose must be one the policy allows.
    fn call_resolve(&mut self, a: ResolveArgs) -> Done {
        let flags = if a.place == Some(true) {
            vec!["--place".to_string()]
        } else {
            vec![]
        };
        let ran = self.run("slurm-resolve", &flags, &a.document);
        let mut done = finish(ran);
        // The cluster it chose must be one the policy allows.
        if let Some(doc) = &done.doc {
            match policy::load().and_then(|p| p.check_cluster(cluster(doc).as_deref())) {
                Ok(()) => {}
                Err(r) => {
                    let mut refused = Done::refused(&r);
                    refused.doc = done.doc.take();
                    return refused;
                }
            }
        }
        done
    }

    /// preflight: never logs in; with `wait_for_login_seconds` it waits for the person's login.
    fn call_preflight(&mut self, a: PreflightArgs) -> Done {
        if let Err(r) = cluster_allowed(&a.document) {
            return Done::refused(&r);
        }
        let deadline = Instant::now() + Duration::from_secs(a.wait_for_login_seconds.unwrap_or(0));
        loop {
            let ran = self.run("slurm-ssh-preflight", &[], &a.document);
            if ran.code == 3 && Instant::now() >= deadline {
                let mut done = finish(ran);
                done.result.content[0].text.push_str(
                    "\nslurm-mcp never logs in: ask the person to run the command above in a terminal, then call preflight again (with wait_for_login_seconds it waits for their login)",
                );
                return done;
            }
            if ran.code != 3 {
                return finish(ran);
            }
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    /// watch: only a job of this server's runs.
    fn call_watch(&mut self, a: WatchArgs) -> Done {
        if let Err(r) = owned(&a.document, "job") {
            return Done::refused(&r);
        }
        let flags = match a.interval_seconds {
            Some(i) => vec!["--interval".to_string(), i.to_string()],
            None => vec![],
        };
        finish(self.run("slurm-watch", &flags, &a.document))
    }

    /// report: the table, as text.
    fn call_report(&mut self, a: DocArgs) -> Done {
        let ran = self.run("slurm-report", &["--table".to_string()], &a.document);
        let text = String::from_utf8_lossy(&ran.stdout).into_owned();
        let ok = ran.code == 0;
        Done {
            result: CallResult::new(
                if ok { text } else { ran.stderr.clone() },
                Some(a.document.clone()),
                !ok,
            ),
            outcome: outcome_of(&ran, None),
            gpu_hours: None,
            doc: None,
        }
    }

    /// runs: the ledger's runs as JSON.
    fn call_runs(&mut self, a: RunsArgs) -> Done {
        let mut flags = vec!["--json".to_string()];
        for (flag, v) in [
            ("--cluster", a.cluster),
            ("--state", a.state),
            ("--since", a.since),
            ("--name", a.name),
        ] {
            if let Some(v) = v {
                flags.extend([flag.to_string(), v]);
            }
        }
        let ran = self.run("slurm-runs", &flags, &Value::Null);
        let runs: Vec<Value> = String::from_utf8_lossy(&ran.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let mut out = Map::new();
        out.insert("runs".into(), Value::from(runs));
        Done {
            result: CallResult::new(
                notes(
                    &ran,
                    &format!("{} runs", out["runs"].as_array().map_or(0, Vec::len)),
                ),
                Some(Value::Object(out)),
                ran.code != 0,
            ),
            outcome: outcome_of(&ran, None),
            gpu_hours: None,
            doc: None,
        }
    }

    /// fetch: only a job of this server's runs.
    fn call_fetch(&mut self, a: FetchArgs) -> Done {
        if let Err(r) = owned(&a.document, "job") {
            return Done::refused(&r);
        }
        let mut flags = vec![];
        if let Some(p) = a.pattern {
            flags.extend(["--pattern".to_string(), p]);
        }
        if let Some(m) = a.max_bytes {
            flags.extend(["--max-bytes".to_string(), m]);
        }
        finish(self.run("slurm-fetch", &flags, &a.document))
    }

    /// attach_command: one command in an allocation or a job of this server's runs.
    fn call_attach_command(&mut self, a: AttachArgs) -> Done {
        let section = if a.document.get("allocation").is_some_and(|v| !v.is_null()) {
            "allocation"
        } else {
            "job"
        };
        if let Err(r) = owned(&a.document, section) {
            return Done::refused(&r);
        }
        let mut flags = vec!["--command".to_string(), a.command];
        if let Some(n) = a.node {
            flags.extend(["--node".to_string(), n]);
        }
        self.run_with_doc_file("slurm-attach", flags, &a.document)
    }

    /// alloc_exec: an action (planned, then run), with its command after `--`.
    fn call_alloc_exec(&mut self, spec: &Spec, args: &Value, a: ExecArgs) -> Done {
        let mut flags = vec!["exec".to_string()];
        if let Some(m) = &a.mode {
            flags.extend(["--mode".to_string(), m.clone()]);
        }
        if a.sync == Some(true) {
            flags.push("--sync".to_string());
        }
        let call = Action {
            tool: "slurm-alloc",
            flags,
            tail: vec!["--".to_string(), a.command.clone()],
            document: a.document,
            plan: a.plan == Some(true),
            plan_id: a.plan_id,
        };
        self.action(spec, args, call)
    }

    /// The other actions: a tool and its fixed flags (planned, then run).
    fn call_action(&mut self, spec: &Spec, args: &Value, a: ActionArgs) -> Done {
        let (tool, flags): (&str, &[&str]) = match spec.name {
            "sync_tracked" => ("slurm-sync-tracked", &[]),
            "sync_untracked" => ("slurm-sync-untracked", &[]),
            "submit" => ("slurm-submit", &[]),
            "cancel" => ("slurm-watch", &["--cancel"]),
            "alloc_up" => ("slurm-alloc", &["up"]),
            _ => ("slurm-alloc", &["down"]),
        };
        let call = Action {
            tool,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            tail: vec![],
            document: a.document,
            plan: a.plan == Some(true),
            plan_id: a.plan_id,
        };
        self.action(spec, args, call)
    }

    /// Parse the arguments as `T` (a clear error naming what is wrong), then run `f`.
    fn with<T: DeserializeOwned>(
        &mut self,
        args: &Value,
        f: impl FnOnce(&mut Self, T) -> Done,
    ) -> Done {
        let args = if args.is_null() {
            Value::Object(Map::new())
        } else {
            args.clone()
        };
        match serde_json::from_value::<T>(args) {
            Ok(a) => f(self, a),
            Err(e) => Done::bad(format!(
                "bad arguments: {e} (the tool's inputSchema lists them)"
            )),
        }
    }

    /// An action: the policy, then a plan or the run.
    fn action(&mut self, spec: &Spec, args: &Value, call: Action) -> Done {
        let policy = match policy::load() {
            Ok(p) => p,
            Err(r) => return Done::refused(&r),
        };
        if !call.document.is_object() {
            return Done::bad("`document` must be a JSON object (the job document)".into());
        }
        if let Err(r) = policy.check_cluster(cluster(&call.document).as_deref()) {
            return Done::refused(&r);
        }
        let job_id = match spec.owned {
            Some(section) => match owned(&call.document, section) {
                Ok(id) => Some(id),
                Err(r) => return Done::refused(&r),
            },
            None => None,
        };
        let starts_job = matches!(spec.name, "submit" | "alloc_up");
        let gpu_hours = if starts_job {
            match self.within_budget(spec, &policy, &call) {
                Ok(h) => h,
                Err(done) => return *done,
            }
        } else {
            None
        };
        let key = plan_key(spec.name, args);
        if call.plan {
            return self.plan(spec, &call, key, job_id, gpu_hours);
        }
        if policy.require_plan() {
            if let Err(r) = self.planned(spec, &call, &key) {
                return Done::refused(&r);
            }
        }
        let mut done = if call.tool == "slurm-alloc"
            && call.flags.first().map(String::as_str) == Some("exec")
        {
            let mut flags = call.flags.clone();
            flags.extend(call.tail.iter().cloned());
            self.run_with_doc_file(call.tool, flags, &call.document)
        } else {
            let mut flags = call.flags.clone();
            flags.extend(call.tail.iter().cloned());
            finish(self.run(call.tool, &flags, &call.document))
        };
        if starts_job {
            done.gpu_hours = gpu_hours;
        }
        done
    }

    /// A run this call would start: its request within the policy's limits (GPU hours today,
    /// unfinished runs); its GPU hours.
    fn within_budget(
        &self,
        spec: &Spec,
        policy: &policy::Policy,
        call: &Action,
    ) -> std::result::Result<Option<f64>, Box<Done>> {
        let of = if spec.name == "alloc_up" {
            Request::of_allocation
        } else {
            Request::of
        };
        let req = of(&call.document).map_err(|e| Box::new(Done::bad(e)))?;
        let checked = policy.check_run(&req, used_today(), || self.unfinished_runs());
        checked.map_err(|r| Box::new(Done::refused(&r)))?;
        Ok(req.gpu_hours())
    }

    /// `"plan": true`: what the call would run (with the tool's own dry run where it has one),
    /// remembered under its plan_id.
    fn plan(
        &mut self,
        spec: &Spec,
        call: &Action,
        key: String,
        job_id: Option<String>,
        gpu_hours: Option<f64>,
    ) -> Done {
        let mut argv = vec![call.tool.to_string()];
        argv.extend(call.flags.iter().cloned());
        argv.extend(call.tail.iter().cloned());
        let mut plan = Plan {
            plan_id: key.clone(),
            tool: spec.name,
            would_run: argv,
            on_cluster: on_cluster(spec.name, job_id.as_deref(), call),
            job_id,
            gpu_hours,
            dry_run_notes: vec![],
            dry_run: None,
        };
        if matches!(
            spec.name,
            "submit" | "sync_tracked" | "sync_untracked" | "alloc_up"
        ) {
            let mut flags = call.flags.clone();
            flags.push("--dry-run".to_string());
            let ran = self.run(call.tool, &flags, &call.document);
            plan.dry_run_notes = ran.stderr.lines().map(str::to_string).collect();
            plan.dry_run = ran.doc();
            if ran.code != 0 {
                let mut done = finish(ran);
                done.outcome = format!("plan failed: {}", done.outcome);
                return done;
            }
        }
        self.plans.insert(key);
        let text = format!(
                "plan {}: would run `{}`{}{}; call {} again with \"plan_id\": \"{}\" (and without \"plan\") to do it",
                plan.plan_id,
                shared::contract::error::render_argv(&plan.would_run),
                plan.job_id.as_ref().map_or(String::new(), |j| format!(" on job {j}")),
                plan.dry_run_notes
                    .iter()
                    .filter(|l| l.contains("dry run:"))
                    .chain(plan.on_cluster.iter())
                    .map(|l| format!("; {}", l.trim()))
                    .collect::<String>(),
                spec.name,
                plan.plan_id
            );
        Done {
            result: CallResult::new(text, serde_json::to_value(&plan).ok(), false),
            outcome: "planned".to_string(),
            gpu_hours,
            doc: None,
        }
    }

    /// `require_plan`: this very call was planned, and its plan is used once.
    fn planned(&mut self, spec: &Spec, call: &Action, key: &str) -> Refused<()> {
        if call.plan_id.as_deref() == Some(key) && self.plans.remove(key) {
            return Ok(());
        }
        Err(Box::new(Refusal {
            limit: "require_plan".into(),
            allowed: Value::Null,
            requested: call.plan_id.clone().map_or(Value::Null, Value::from),
            policy_file: policy::path().map(|p| p.display().to_string()).unwrap_or_default(),
            message: format!(
                "refused by the policy: require_plan is set, and this call has no plan_id of a plan of this very call{}; call {} with \"plan\": true first, then again with the plan_id it returns and the same arguments",
                if call.plan_id.is_some() { " (the plan_id given is for another call, or was used)" } else { "" },
                spec.name
            ),
        }))
    }

    /// Unfinished runs now, as slurm-runs sees them (refreshed from the clusters).
    fn unfinished_runs(&self) -> std::result::Result<u32, String> {
        let ran = self.run("slurm-runs", &["--json".to_string()], &Value::Null);
        if ran.code != 0 {
            return Err(format!(
                "slurm-runs exit {}: {}",
                ran.code,
                ran.stderr.trim()
            ));
        }
        let n = String::from_utf8_lossy(&ran.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| {
                r.get("status").is_none_or(Value::is_null)
                    && !r
                        .get("slurm_state")
                        .and_then(Value::as_str)
                        .is_some_and(shared::slurm::is_final)
            })
            .count();
        Ok(n.try_into().unwrap_or(u32::MAX))
    }

    /// Run `tool` with the document on stdin; its stdout and stderr kept.
    fn run(&self, tool: &str, flags: &[String], doc: &Value) -> Ran {
        let (program, mut args) = program(tool);
        args.extend(flags.iter().cloned());
        let mut argv = vec![tool.to_string()];
        argv.extend(flags.iter().cloned());
        let mut cmd = Command::new(&program);
        cmd.args(&args)
            .env_remove("SLURM_TOOLS_GENERATE")
            .env(
                "SLURM_TOOLS_CANCELLED_BY",
                format!("slurm-mcp (client {})", self.client),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Ran {
                    code: 127,
                    stdout: vec![],
                    stderr: format!("cannot run {}: {e}", program.display()),
                    argv,
                }
            }
        };
        let input = if doc.is_null() {
            Vec::new()
        } else {
            doc.to_string().into_bytes()
        };
        let mut child = child;
        if let Some(mut stdin) = child.stdin.take() {
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        match child.wait_with_output() {
            Ok(out) => Ran {
                code: out.status.code().unwrap_or(128),
                stdout: out.stdout,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                argv,
            },
            Err(e) => Ran {
                code: 128,
                stdout: vec![],
                stderr: format!("{tool}: {e}"),
                argv,
            },
        }
    }

    /// A tool whose stdout is a command's (slurm-attach --command, slurm-alloc exec): the
    /// document comes back through `--doc FILE`.
    fn run_with_doc_file(&self, tool: &str, mut flags: Vec<String>, doc: &Value) -> Done {
        let dir = match tempfile::Builder::new().prefix("slurm-mcp-").tempdir() {
            Ok(d) => d,
            Err(e) => return Done::bad(format!("cannot make a temporary folder: {e}")),
        };
        let file = dir.path().join("document.json");
        // `--doc FILE` goes before a `--` that starts the command.
        let at = flags.iter().position(|f| f == "--").unwrap_or(flags.len());
        flags.splice(at..at, ["--doc".to_string(), file.display().to_string()]);
        let ran = self.run(tool, &flags, doc);
        let out_doc = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        let text = format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            ran.code,
            tail(&String::from_utf8_lossy(&ran.stdout), 200),
            tail(&ran.stderr, 60)
        );
        Done {
            outcome: outcome_of(&ran, out_doc.as_ref()),
            result: CallResult::new(text, out_doc.clone(), ran.code != 0),
            gpu_hours: None,
            doc: out_doc,
        }
    }

    /// The audit line: who, which tool, how it ended, the job, and the arguments' copy.
    fn audit(&mut self, tool: &str, args: &Value, done: &Done) {
        let Some(path) = ledger::path() else { return };
        self.seq += 1;
        let at = shared::support::clock::unix_now();
        let input = args.get("document").filter(|d| d.is_object());
        let doc = done.doc.as_ref().or(input);
        let saved = path.with_file_name("mcp").join(format!(
            "{at}-{}-{}-{tool}.json",
            std::process::id(),
            self.seq
        ));
        let mut copy = args.clone();
        redact(&mut copy);
        let saved_ok = shared::state::private_files::own_dir(saved.parent().expect("a folder"))
            .and_then(|()| {
                shared::state::private_files::write_atomic(
                    &saved,
                    copy.to_string().as_bytes(),
                    0o600,
                )
            })
            .is_ok();
        let entry = ledger::Entry {
            event: ledger::AUDIT.to_string(),
            at,
            cluster: doc.and_then(cluster).unwrap_or_default(),
            job_id: doc.and_then(job_id_of).unwrap_or_default(),
            client: Some(self.client.clone()),
            tool: Some(tool.to_string()),
            outcome: Some(done.outcome.clone()),
            gpu_hours: done.gpu_hours.filter(|h| *h > 0.0 && done.outcome == "ok"),
            document: saved_ok.then(|| saved.display().to_string()),
            ..Default::default()
        };
        if let Err(e) = ledger::append_to(&path, &entry) {
            shared::support::ui::warn(
                super::TOOL,
                &format!("could not write the audit line to {}: {e}", path.display()),
            );
        }
    }
}

/// An action's command: `tool flags... tail...`, the document on stdin.
struct Action {
    tool: &'static str,
    flags: Vec<String>,
    tail: Vec<String>,
    document: Value,
    plan: bool,
    plan_id: Option<String>,
}

/// What an action without a dry run of its own does on the cluster, said in its plan.
fn on_cluster(tool: &str, job: Option<&str>, call: &Action) -> Option<String> {
    let job = job?;
    Some(match tool {
        "cancel" => format!(
            "on the cluster: scancel {job} (every task of a sweep), then the job is watched to its verdict"
        ),
        "alloc_down" => format!(
            "on the cluster: scancel {job} if it is still queued or running, then its containers stopped and its tmux session closed"
        ),
        "alloc_exec" => format!(
            "on the cluster: a job step in allocation {job} (srun --jobid={job}{}) running {}{}",
            call.flags
                .iter()
                .position(|f| f == "--mode")
                .and_then(|i| call.flags.get(i + 1))
                .map_or(String::new(), |m| format!(", mode {m}")),
            shared::contract::error::render_argv(&call.tail[1..]),
            if call.flags.iter().any(|f| f == "--sync") {
                ", after syncing the working tree in the same ssh execution"
            } else {
                ""
            }
        ),
        _ => return None,
    })
}

/// The program to run for `tool`: the tool beside this one (the development build), else this
/// program itself with the tool's name (the one-program build: `slurm-tools TOOL`), else PATH.
fn program(tool: &str) -> (PathBuf, Vec<String>) {
    if let Ok(exe) = std::env::current_exe() {
        let beside = exe.with_file_name(tool);
        if beside.is_file() {
            return (beside, vec![]);
        }
        if exe.file_stem().is_some_and(|n| n == "slurm-tools") {
            return (exe, vec![tool.to_string()]);
        }
    }
    (PathBuf::from(tool), vec![])
}

/// A finished command as a result: its document, its notes, and whether it failed.
fn finish(ran: Ran) -> Done {
    let doc = ran.doc();
    // A watch's verdict other than PASSED (exit 1) is an answer, not a failure of the call.
    let verdict = doc
        .as_ref()
        .and_then(|d| d.pointer("/report/status"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let failed = ran.code != 0
        && (verdict.is_none() || doc.as_ref().is_some_and(|d| d.get("error").is_some()));
    let mut head = match &verdict {
        Some(v) => format!("{}: verdict {v}", ran.argv[0]),
        None if failed => format!("{} failed (exit {})", ran.argv[0], ran.code),
        None => format!("{}: done", ran.argv[0]),
    };
    if let Some(err) = doc.as_ref().and_then(|d| d.get("error")) {
        let field = |k: &str| err.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        head.push_str(&format!(": {}", field("message")));
        if !field("hint").is_empty() {
            head.push_str(&format!("\nwhat to do: {}", field("hint")));
        }
    } else if let Some(s) = doc
        .as_ref()
        .and_then(|d| d.pointer("/report/summary"))
        .and_then(Value::as_str)
    {
        head.push_str(&format!(" ({s})"));
    }
    Done {
        outcome: outcome_of(&ran, doc.as_ref()),
        result: CallResult::new(notes(&ran, &head), doc.clone(), failed),
        gpu_hours: None,
        doc,
    }
}

/// The result's text: the headline, then what the command said on stderr (its last lines).
fn notes(ran: &Ran, head: &str) -> String {
    let said = tail(&ran.stderr, 40);
    if said.trim().is_empty() {
        head.to_string()
    } else {
        format!("{head}\n--- {} said:\n{said}", ran.argv[0])
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn outcome_of(ran: &Ran, doc: Option<&Value>) -> String {
    if ran.code == 0 {
        return "ok".to_string();
    }
    let verdict = doc
        .and_then(|d| d.pointer("/report/status"))
        .and_then(Value::as_str);
    let message = doc
        .and_then(|d| d.pointer("/error/message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    match verdict {
        Some(v) if message.is_empty() => format!("verdict {v}"),
        _ => format!("failed (exit {}): {message}", ran.code),
    }
}

/// The cluster a document names: its catalog entry, else its ssh host.
fn cluster(doc: &Value) -> Option<String> {
    let map = doc.as_object().cloned().unwrap_or_default();
    let name = ledger::ClusterName::read(&shared::Document::from_map(map)).ok()?;
    name.slurm_cluster.or(name.ssh_host)
}

/// The job a document's sections name: its allocation's, else its job's.
fn job_id_of(doc: &Value) -> Option<String> {
    ["/allocation/job_id", "/job/job_id"]
        .iter()
        .find_map(|p| doc.pointer(p).and_then(Value::as_str))
        .map(str::to_string)
}

fn cluster_allowed(doc: &Value) -> Refused<()> {
    policy::load()?.check_cluster(cluster(doc).as_deref())
}

/// The job of the document's `section` is one the tools submitted for this user: it is in the
/// ledger. Its id, else a refusal.
fn owned(doc: &Value, section: &str) -> Refused<String> {
    let id = doc
        .pointer(&format!("/{section}/job_id"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let map = doc.as_object().cloned().unwrap_or_default();
    let on = ledger::cluster_of(&shared::Document::from_map(map));
    let requested = id.clone().map_or(Value::Null, Value::from);
    let refusal = |why: String| {
        Box::new(Refusal {
            limit: "own_jobs_only".into(),
            allowed: Value::Null,
            requested: requested.clone(),
            policy_file: String::new(),
            message: why,
        })
    };
    let Some(id) = id else {
        return Err(refusal(format!(
            "the document has no {section}.job_id: run {} first and pass the document it returned",
            if section == "allocation" {
                "alloc_up"
            } else {
                "submit"
            }
        )));
    };
    let runs = ledger::path()
        .and_then(|p| ledger::read(&p).ok())
        .map(|(entries, _)| ledger::fold(&entries))
        .unwrap_or_default();
    if runs.iter().any(|r| {
        r.cluster == on && r.job_id == id && (r.submitted_at.is_some() || r.kind.is_some())
    }) {
        return Ok(id);
    }
    Err(refusal(format!(
        "job {id} on {on} is not one the tools submitted for you (it is not in your run ledger); slurm-mcp acts only on its own runs: the person can act on it with scancel or the commands"
    )))
}

/// GPU-hours asked for by this user's submissions and allocations through slurm-mcp in the last
/// 24 hours (the audit lines of calls that ran).
fn used_today() -> f64 {
    let now = shared::support::clock::unix_now();
    ledger::path()
        .and_then(|p| ledger::read(&p).ok())
        .map(|(entries, _)| {
            entries
                .iter()
                .filter(|e| e.event == ledger::AUDIT && e.at + 86_400 > now)
                .filter_map(|e| e.gpu_hours)
                .sum()
        })
        .unwrap_or(0.0)
}

/// The plan key of a call: its tool and its arguments (without `plan` and `plan_id`), keys in
/// order, hashed.
fn plan_key(tool: &str, args: &Value) -> String {
    fn canonical(v: &Value) -> String {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let parts: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{}:{}", Value::from(k.as_str()), canonical(&m[*k])))
                    .collect();
                format!("{{{}}}", parts.join(","))
            }
            Value::Array(a) => format!(
                "[{}]",
                a.iter().map(canonical).collect::<Vec<_>>().join(",")
            ),
            other => other.to_string(),
        }
    }
    let mut args = args.clone();
    if let Some(o) = args.as_object_mut() {
        o.remove("plan");
        o.remove("plan_id");
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (tool, canonical(&args)).hash(&mut h);
    format!("plan-{:016x}", h.finish())
}

/// Secrets never leave the server: the password and webhook addresses are dropped wherever
/// they are.
fn redact(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !matches!(k.as_str(), "slurm_password" | "webhook" | "webhook_url"));
            m.values_mut().for_each(redact);
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_whose_document_is_the_contracts() {
        let tools = list();
        assert_eq!(tools.len(), SPECS.len());
        for t in &tools {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            if t.name != "runs" {
                assert_eq!(
                    t.input_schema.pointer("/properties/document/$ref"),
                    Some(&Value::from("#/$defs/JobDocument")),
                    "{}",
                    t.name
                );
                assert!(t
                    .input_schema
                    .pointer("/$defs/JobDocument/properties/sweep")
                    .is_some());
            }
        }
    }

    #[test]
    fn a_plan_key_is_the_call_not_its_order_or_plan_flags() {
        let a: Value = serde_json::from_str(
            r#"{"document": {"a": 1, "b": [1, {"c": 2, "d": 3}]}, "plan": true}"#,
        )
        .unwrap();
        let b: Value = serde_json::from_str(
            r#"{"plan_id": "x", "document": {"b": [1, {"d": 3, "c": 2}], "a": 1}}"#,
        )
        .unwrap();
        assert_eq!(plan_key("submit", &a), plan_key("submit", &b));
        assert_ne!(plan_key("submit", &a), plan_key("cancel", &a));
        let c: Value = serde_json::from_str(r#"{"document": {"a": 2}}"#).unwrap();
        assert_ne!(plan_key("submit", &a), plan_key("submit", &c));
    }

    #[test]
    fn secrets_are_dropped_at_any_depth() {
        let mut v: Value = serde_json::from_str(
            r#"{"slurm_password": "p", "x": [{"webhook_url": "https://h/t"}], "notify": {"webhook": "u", "keep": 1}}"#,
        )
        .unwrap();
        redact(&mut v);
        assert_eq!(v.to_string(), r#"{"x":[{}],"notify":{"keep":1}}"#);
    }
}
