//! slurm-notify: turn the event stream of slurm-watch or slurm-runs into a command or a webhook
//! POST, once per job and state.

use clap::Parser;
use serde_json::Value;
use shared::support::process::{Cmd, Input};
use shared::{ErrorKind, Result, ToolError};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Tell someone when a run changes state: run a command or POST to a webhook, once per event.
///
/// Reads events (JSON lines from `slurm-watch --events` or `slurm-runs --watch --events`) from
/// FILE or stdin, and for each one not delivered before (one per job and state: cluster, job id,
/// event, state or verdict) either runs --command with the event on stdin and in the
/// environment (SLURM_EVENT the JSON line, SLURM_EVENT_KIND, SLURM_CLUSTER, SLURM_JOB_ID,
/// SLURM_JOB_NAME, SLURM_STATUS), or POSTs it as JSON to a webhook (with curl), adding a `text`
/// field with one line for people (what chat webhooks show). Only a 2xx answer counts as
/// delivered. The webhook URL is a secret (chat webhooks carry their token in it), so it never
/// goes on a command line, where every local user could read it: give it in a file
/// (--webhook-file, best 0600) or in the environment (SLURM_NOTIFY_WEBHOOK); curl gets it
/// through a private config file. What was delivered is remembered in the state directory
/// (notify-sent.jsonl), so a restarted notifier does not repeat itself. A delivery that fails is
/// retried 3 times, then said on stderr and not remembered (the next run of the stream tries it
/// again).
///
/// Reads no job document. Exit 0 when the stream ended (with --follow: never on its own); 2 for
/// bad flags; 4 when some event could not be delivered.
///
/// Example:
///   slurm-runs --watch --events - | slurm-notify --webhook-file ~/.config/slurm-tools/webhook
///   slurm-notify --follow --only running,verdict \
///     --command 'notify-send "$SLURM_JOB_NAME" "$SLURM_EVENT_KIND $SLURM_STATUS"' events.jsonl
#[derive(Parser, Debug)]
#[command(name = "slurm-notify", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    /// The events, one JSON object per line (absent or `-`: stdin).
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,

    /// Run this shell command for each event (`sh -c`).
    #[arg(long, value_name = "COMMAND", conflicts_with = "webhook_file")]
    command: Option<String>,

    /// POST each event as JSON to the http:// or https:// URL in this file (its first line).
    /// Without it, the URL in the environment variable SLURM_NOTIFY_WEBHOOK, if set.
    #[arg(long, value_name = "FILE")]
    webhook_file: Option<PathBuf>,

    /// Refused: a URL on the command line is readable by every local user. Use --webhook-file or
    /// SLURM_NOTIFY_WEBHOOK.
    #[arg(long, value_name = "URL", hide = true)]
    webhook: Option<String>,

    /// Only these events (comma-separated): submitted, pending, running, importing, progress,
    /// hang, ended, verdict.
    #[arg(long, value_name = "EVENTS", value_delimiter = ',')]
    only: Vec<String>,

    /// Keep reading FILE as it grows (like `tail -f`), until killed.
    #[arg(long, requires = "file")]
    follow: bool,

    /// Where delivered events are remembered (default: <state dir>/notify-sent.jsonl).
    #[arg(long, value_name = "FILE")]
    sent_file: Option<PathBuf>,
}

const TOOL: &str = "slurm-notify";
/// The longest event line read; a longer one is skipped with a warning (bounded memory).
const MAX_LINE: usize = 1 << 20;
const KINDS: [&str; 8] = [
    "submitted",
    "pending",
    "running",
    "importing",
    "progress",
    "hang",
    "ended",
    "verdict",
];

pub fn main() -> ExitCode {
    shared::contract::driver::run_plain::<Cli>(TOOL, notify)
}

/// The key an event is delivered once under: (cluster, job, event, state or verdict or percent).
fn key_of(e: &Value) -> String {
    let s = |k: &str| match &e[k] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    };
    let detail = match s("event").as_str() {
        "verdict" => s("status"),
        "progress" => s("percent"),
        "importing" => s("image"),
        _ => s("state"),
    };
    format!(
        "{}\t{}\t{}\t{}",
        s("cluster"),
        s("job_id"),
        s("event"),
        detail
    )
}

/// Where the webhook URL comes from, and the URL: --webhook-file, else SLURM_NOTIFY_WEBHOOK.
fn webhook_url(cli: &Cli) -> Result<Option<(String, String)>> {
    if cli.webhook.is_some() {
        return Err(ToolError::bad_input(
            "--webhook URL puts the webhook's secret on the command line, where every local user can read it",
        )
        .with_field("--webhook")
        .with_hint("put the URL in a file of your own (chmod 600) and give --webhook-file FILE, or set SLURM_NOTIFY_WEBHOOK"));
    }
    let (from, url) = match &cli.webhook_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| {
                ToolError::bad_input(format!(
                    "--webhook-file {}: cannot read it ({e})",
                    f.display()
                ))
                .with_hint("give a file holding the webhook URL on its first line")
            })?;
            let first = text.lines().next().unwrap_or("").trim().to_string();
            (format!("--webhook-file {}", f.display()), first)
        }
        None => match std::env::var("SLURM_NOTIFY_WEBHOOK") {
            Ok(u) if !u.is_empty() => ("SLURM_NOTIFY_WEBHOOK".to_string(), u.trim().to_string()),
            _ => return Ok(None),
        },
    };
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if !ok {
        // The URL is a secret: say what is wrong with it without printing it.
        return Err(ToolError::bad_input(format!(
            "{from}: does not hold an http:// or https:// URL ({} characters, starting {:?})",
            url.chars().count(),
            url.chars().take(8).collect::<String>()
        ))
        .with_hint("give the webhook's full URL, e.g. https://hooks.example.org/T0, on one line"));
    }
    Ok(Some((from, url)))
}

/// curl's private config file holding the URL (in a 0700 directory of this process, swept when
/// the process has died), so the URL is in no process's argv.
fn curl_config(url: &str) -> Result<PathBuf> {
    let dir = shared::state::tempdir::create("slurm-notify").map_err(|e| {
        ToolError::bad_input(format!("cannot make a private temporary directory: {e}"))
    })?;
    let file = dir.join("curl.conf");
    let escaped = url.replace('\\', "\\\\").replace('"', "\\\"");
    shared::state::private_files::write_atomic(
        &file,
        format!("url = \"{escaped}\"\n").as_bytes(),
        0o600,
    )
    .map_err(|e| ToolError::bad_input(format!("cannot write {}: {e}", file.display())))?;
    Ok(file)
}

fn notify(cli: &Cli) -> Result<u8> {
    let webhook = match webhook_url(cli)? {
        Some((_, url)) => Some(curl_config(&url)?),
        None => None,
    };
    if webhook.is_none() && cli.command.is_none() {
        return Err(ToolError::bad_input(
            "nothing to do: no --command, no --webhook-file, and SLURM_NOTIFY_WEBHOOK is not set",
        )
        .with_hint("give --command 'notify-send ...' or --webhook-file FILE"));
    }
    let result = notify_with(cli, webhook.as_deref());
    if let Some(conf) = &webhook {
        if let Some(dir) = conf.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    result
}

/// The keys of the events sent before (the sent file's lines).
fn already_sent(path: Option<&std::path::Path>) -> HashSet<String> {
    let mut sent = HashSet::new();
    if let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) {
        for line in text.lines() {
            if let Ok(Value::String(k)) = serde_json::from_str::<Value>(line) {
                sent.insert(k);
            }
        }
    }
    sent
}

/// One whole line as an event (an empty line: none; anything else that is not one is said and
/// skipped).
fn event_of(whole: &[u8]) -> Option<Value> {
    let Ok(text) = std::str::from_utf8(whole) else {
        shared::support::ui::warn(TOOL, "an event line that is not UTF-8 (skipped)");
        return None;
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let event = serde_json::from_str::<Value>(text);
    if event.is_err() {
        shared::support::ui::warn(
            TOOL,
            &format!(
                "not an event (skipped): {}",
                shared::remote::quote::preview(text)
            ),
        );
    }
    event.ok()
}

fn notify_with(cli: &Cli, webhook: Option<&std::path::Path>) -> Result<u8> {
    if let Some(bad) = cli.only.iter().find(|k| !KINDS.contains(&k.as_str())) {
        return Err(ToolError::bad_input(format!("--only {bad}: not an event"))
            .with_hint(format!("events are: {}", KINDS.join(", "))));
    }
    let sent_path = cli
        .sent_file
        .clone()
        .or_else(|| shared::state::journal::state_dir().map(|d| d.join("notify-sent.jsonl")));
    let mut sent = already_sent(sent_path.as_deref());
    let input: Box<dyn Read> = match cli.file.as_deref().filter(|p| p.as_os_str() != "-") {
        Some(p) => Box::new(std::fs::File::open(p).map_err(|e| {
            ToolError::bad_input(format!("cannot read the events {}: {e}", p.display()))
                .with_hint("name the file slurm-watch --events or slurm-runs --events writes")
        })?),
        None => Box::new(std::io::stdin()),
    };
    let mut reader = BufReader::new(input);
    let mut failed = 0u32;
    let mut line: Vec<u8> = Vec::new();
    let mut partial: Vec<u8> = Vec::new();
    let mut skipping = false;
    loop {
        line.clear();
        // At most MAX_LINE bytes at a time: a huge line never holds more memory than that.
        let n = (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| ToolError::new(ErrorKind::Remote, format!("reading the events: {e}")))?;
        if n == 0 {
            if cli.follow {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            break;
        }
        let ended = line.ends_with(b"\n");
        if skipping {
            // The rest of a line that was too long: dropped up to its end.
            skipping = !ended;
            continue;
        }
        if partial.len() + line.len() > MAX_LINE {
            shared::support::ui::warn(
                TOOL,
                &format!("an event line longer than {MAX_LINE} bytes (skipped)"),
            );
            partial.clear();
            skipping = !ended;
            continue;
        }
        partial.extend_from_slice(&line);
        if !ended && (cli.follow || n == MAX_LINE) {
            // A line still being written (or read in pieces): wait for its end.
            continue;
        }
        let Some(event) = event_of(&std::mem::take(&mut partial)) else {
            continue;
        };
        let kind = event["event"].as_str().unwrap_or("").to_string();
        if !cli.only.is_empty() && !cli.only.contains(&kind) {
            continue;
        }
        let key = key_of(&event);
        if sent.contains(&key) {
            continue;
        }
        if deliver(cli, webhook, &event) {
            if let Some(p) = &sent_path {
                let _ = shared::state::ledger::append_line(
                    p,
                    Value::String(key.clone()).to_string().into_bytes(),
                );
            }
            sent.insert(key);
        } else {
            failed += 1;
        }
    }
    Ok(if failed > 0 { 4 } else { 0 })
}

/// One line for people: "mycluster job 123 (train): RUNNING".
fn text_of(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
    let name = e["job_name"]
        .as_str()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    let what = match s("event").as_str() {
        "verdict" => format!("{}: {}", s("status"), s("summary")),
        "pending" => format!("PENDING ({})", s("reason")),
        "hang" => format!("hang detected: {}", s("line")),
        "importing" => format!("importing {}", s("image")),
        "progress" => format!("{}%", e["percent"]),
        "submitted" => "submitted".into(),
        _ => s("state"),
    };
    format!("{} job {}{name}: {what}", s("cluster"), s("job_id"))
}

fn deliver(cli: &Cli, webhook: Option<&std::path::Path>, event: &Value) -> bool {
    let mut last = String::new();
    for (attempt, wait) in [0u64, 1, 2, 4].into_iter().enumerate() {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(wait));
        }
        let out = if let Some(conf) = webhook {
            let mut body = event.clone();
            body["text"] = Value::String(text_of(event));
            // -q first: no ~/.curlrc. The URL is in the private config, the body on stdin; the
            // answer's status on stdout: only 2xx is delivered (a 3xx is not followed, not
            // counted).
            Cmd::new("curl")
                .args([
                    "-q",
                    "-sS",
                    "-m",
                    "20",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "-X",
                    "POST",
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    "@-",
                    "--config",
                ])
                .arg(conf.display().to_string())
                .input(Input::Bytes(body.to_string().into_bytes()))
                .deadline(Duration::from_secs(30))
                .run()
                .map(|mut o| {
                    let status = String::from_utf8_lossy(&o.stdout).trim().to_string();
                    if o.success() && !status.starts_with('2') {
                        o.code = Some(22);
                        o.stderr_tail = format!("the webhook answered HTTP {status}");
                    }
                    o
                })
        } else {
            let s = |k: &str| match &event[k] {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                v => v.to_string(),
            };
            Cmd::new("sh")
                .args(["-c", cli.command.as_deref().unwrap_or("true")])
                .env("SLURM_EVENT", event.to_string())
                .env("SLURM_EVENT_KIND", s("event"))
                .env("SLURM_CLUSTER", s("cluster"))
                .env("SLURM_JOB_ID", s("job_id"))
                .env("SLURM_JOB_NAME", s("job_name"))
                .env("SLURM_STATUS", s("status"))
                .input(Input::Bytes(format!("{event}\n").into_bytes()))
                .deadline(Duration::from_secs(60))
                .run()
        };
        match out {
            Ok(o) if o.success() => return true,
            Ok(o) => last = format!("{}: {}", o.exit_text(), o.stderr_tail.trim()),
            Err(e) => {
                last = e.to_string();
                if e.kind() == std::io::ErrorKind::NotFound {
                    break;
                }
            }
        }
    }
    shared::support::ui::warn(
        TOOL,
        &format!(
            "could not deliver \"{}\" ({last}); it is not remembered, so the next run tries again",
            text_of(event)
        ),
    );
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_per_job_and_state() {
        let a: Value = serde_json::from_str(r#"{"event":"pending","cluster":"c","job_id":"1","state":"PENDING","reason":"Priority"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"event":"pending","cluster":"c","job_id":"1","state":"PENDING","reason":"Resources"}"#).unwrap();
        let v: Value = serde_json::from_str(r#"{"event":"verdict","cluster":"c","job_id":"1","status":"PASSED","state":"COMPLETED"}"#).unwrap();
        assert_eq!(key_of(&a), key_of(&b));
        assert_ne!(key_of(&a), key_of(&v));
        assert!(text_of(&v).starts_with("c job 1: PASSED"));
    }
}
