//! What every test needs: the testbed's facts, the tools as processes, and a hermetic env.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The facts `scripts/local-cluster info` prints.
pub struct Testbed {
    pub info: Value,
}

impl Testbed {
    pub fn s(&self, key: &str) -> String {
        self.info[key]
            .as_str()
            .unwrap_or_else(|| panic!("info.json has no `{key}`"))
            .to_string()
    }
    pub fn ssh_config(&self) -> String {
        self.s("ssh_config_file")
    }
    pub fn remote_root(&self) -> String {
        self.s("remote_root")
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether this process runs as root (the local cluster, its daemons and its fault injection
/// need it).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Whether a test that needs the local cluster can run here. As a normal user it cannot: the test
/// says so on stderr and is skipped (it returns at once). As root the cluster must be up, and a
/// test fails loudly when it is not (`scripts/test`, which CI runs, brings it up).
pub fn cluster_available() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    if *ROOT.get_or_init(is_root) {
        watch_failures();
        return true;
    }
    let name = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    // Written to the stderr handle itself, not through eprintln!: the test harness captures the
    // macros' output of a passing test, and this must be seen.
    use std::io::Write;
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "note: not root: the tests that need root and the local cluster are skipped (run `sudo scripts/test`, which brings the cluster up; `cargo test --workspace --lib --bins` is the quick tier that needs neither)"
        );
    });
    let _ = writeln!(
        std::io::stderr(),
        "skipped {name}: needs root and the local cluster"
    );
    false
}

/// The first line of a test that needs the local cluster: skips it, saying so, for a normal user.
#[macro_export]
macro_rules! needs_cluster {
    () => {
        if !$crate::harness::cluster_available() {
            return;
        }
    };
}

static TB: OnceLock<Testbed> = OnceLock::new();

std::thread_local! {
    /// The jobs and allocations the tools started in this test's thread: (the login host the
    /// tool reached, the job id), read from each document a tool wrote.
    static STARTED: std::cell::RefCell<Vec<(String, String)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Remembers the job or allocation a tool's document names (`job.job_id`, `allocation.job_id`),
/// so that the test's failure cancels it (see [`watch_failures`]).
fn note_started(doc: &Value) {
    let host = doc
        .get("ssh_host")
        .and_then(Value::as_str)
        .unwrap_or_default();
    for section in ["job", "allocation"] {
        if let Some(id) = doc
            .get(section)
            .and_then(|s| s.get("job_id"))
            .and_then(Value::as_str)
        {
            let entry = (host.to_string(), id.to_string());
            let _ = STARTED.try_with(|s| {
                let mut s = s.borrow_mut();
                if !s.contains(&entry) {
                    s.push(entry);
                }
            });
        }
    }
}

/// The start of the name of a thread a test makes fail on purpose: its panic is not a failure of
/// the run (it still cancels what it started).
pub const DELIBERATE: &str = "deliberately failing";

/// Once per test process: a failing test (its panic) cancels the jobs and allocations the tools
/// started for it, and its message is also appended to `$SLURM_TOOLS_TEST_FAILURES` as it happens.
/// Without the first, a test that fails between `slurm-alloc up` and `down` leaves an allocation
/// holding the nodes, and every test after it waits on the queue (CI once ran out of time so: the
/// modern site's two nodes held by a failed test for the 22 tests after it). Without the second,
/// a run cut short by scripts/test's bound would lose every failure's message, which libtest
/// prints only at its end.
fn watch_failures() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let name = std::thread::current()
                .name()
                .unwrap_or("a test")
                .to_string();
            if let Some(path) = std::env::var_os("SLURM_TOOLS_TEST_FAILURES")
                .filter(|_| !name.starts_with(DELIBERATE))
            {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                {
                    let _ = writeln!(f, "---- {name} failed: {info}");
                }
            }
            let started = STARTED
                .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
                .unwrap_or_default();
            if !started.is_empty() {
                cancel_started(&name, &started);
            }
        }));
    });
}

/// `scancel` of each job on the site its tool reached (the modern site's through its login node).
fn cancel_started(test: &str, started: &[(String, String)]) {
    let Some(tb) = TB.get() else { return };
    let modern = tb
        .info
        .get("modern_host")
        .and_then(Value::as_str)
        .unwrap_or("-");
    for (host, id) in started {
        let status = if host == modern {
            Command::new(repo_root().join("scripts/local-cluster"))
                .args(["modern-exec", "modern-login", "scancel", id])
                .output()
        } else {
            Command::new("scancel").arg(id).output()
        };
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!(
                "{test} failed: cancelled job {id} it started on {host} ({})\n",
                match status {
                    Ok(o) if o.status.success() => "done".to_string(),
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                }
            )
            .as_bytes(),
        );
    }
}

/// The running local cluster. Panics (the test fails, it is not skipped) when it is not up.
pub fn testbed() -> &'static Testbed {
    TB.get_or_init(|| {
        let out = Command::new(repo_root().join("scripts/local-cluster"))
            .arg("info")
            .output()
            .expect("run scripts/local-cluster info");
        assert!(
            out.status.success(),
            "the local cluster is not set up: run `scripts/local-cluster up` (scripts/test does it)\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info: Value = serde_json::from_slice(&out.stdout).expect("info is JSON");
        Testbed { info }
    })
}

/// Tests that log in to the MFA host or count its authentications take this lock, so the
/// counts of one are not disturbed by another running in parallel.
pub fn mfa_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every tool of the project.
pub const TOOLS: [&str; 15] = [
    "slurm-resolve",
    "slurm-ssh-preflight",
    "slurm-sync-tracked",
    "slurm-sync-untracked",
    "slurm-submit",
    "slurm-watch",
    "slurm-report",
    "slurm-alloc",
    "slurm-attach",
    "slurm-forward",
    "slurm-runs",
    "slurm-notify",
    "slurm-fetch",
    "slurm-init",
    "slurm-mcp",
];

pub fn bin(tool: &str) -> &'static str {
    match tool {
        "slurm-resolve" => env!("CARGO_BIN_EXE_slurm-resolve"),
        "slurm-ssh-preflight" => env!("CARGO_BIN_EXE_slurm-ssh-preflight"),
        "slurm-sync-tracked" => env!("CARGO_BIN_EXE_slurm-sync-tracked"),
        "slurm-sync-untracked" => env!("CARGO_BIN_EXE_slurm-sync-untracked"),
        "slurm-submit" => env!("CARGO_BIN_EXE_slurm-submit"),
        "slurm-watch" => env!("CARGO_BIN_EXE_slurm-watch"),
        "slurm-report" => env!("CARGO_BIN_EXE_slurm-report"),
        "slurm-alloc" => env!("CARGO_BIN_EXE_slurm-alloc"),
        "slurm-attach" => env!("CARGO_BIN_EXE_slurm-attach"),
        "slurm-forward" => env!("CARGO_BIN_EXE_slurm-forward"),
        "slurm-runs" => env!("CARGO_BIN_EXE_slurm-runs"),
        "slurm-notify" => env!("CARGO_BIN_EXE_slurm-notify"),
        "slurm-fetch" => env!("CARGO_BIN_EXE_slurm-fetch"),
        "slurm-init" => env!("CARGO_BIN_EXE_slurm-init"),
        "slurm-mcp" => env!("CARGO_BIN_EXE_slurm-mcp"),
        other => panic!("unknown tool {other}"),
    }
}

/// This test process's own home: a temporary directory standing in for `HOME` and the XDG
/// directories, so the developer's own state, catalog and git config cannot change a result.
/// One per test process (a resumed submission must find the record the interrupted one left).
pub fn test_home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("st-home-")
            .tempdir()
            .unwrap()
    })
    .path()
}

/// A tool as a process with a hermetic environment: a cleared environment plus `PATH`, `USER`,
/// `LANG`/`TZ` as fixed values, a temporary `HOME` and XDG directories, `GIT_CONFIG_GLOBAL` and
/// `GIT_CONFIG_SYSTEM` off. What a test needs beyond that, it sets itself.
pub fn tool(tool: &str) -> Command {
    let mut c = Command::new(bin(tool));
    let home = test_home();
    c.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("USER", "slurm-tools-test")
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    if let Some(tmp) = std::env::var_os("TMPDIR") {
        c.env("TMPDIR", tmp);
    }
    // scripts/test collects every remote script for its static checks.
    if let Some(dir) = std::env::var_os("SLURM_TOOLS_SCRIPT_DUMP") {
        c.env("SLURM_TOOLS_SCRIPT_DUMP", dir);
    }
    c
}

pub struct Run {
    pub code: i32,
    pub doc: Value,
    pub stdout: String,
    pub stderr: String,
    /// The process's output as it came, for assert_cmd's assertions ([`Run::assert`]).
    pub output: Output,
}

/// One run of a tool, set up the way a test reads (just's `Test`, jj's `TestEnvironment`): the
/// tool in its hermetic environment ([`tool`]), then its flags, environment and input document,
/// then [`ToolRun::run`].
///
/// ```ignore
/// let w = ToolRun::new("slurm-watch").args(&["--interval", "2"]).doc(&submitted).run();
/// w.assert().code(0).stderr(predicates::str::contains("PASSED"));
/// assert_eq!(w.report().status, Status::Passed);
/// ```
pub struct ToolRun {
    cmd: Command,
    input: Vec<u8>,
}

impl ToolRun {
    pub fn new(tool_name: &str) -> ToolRun {
        ToolRun {
            cmd: tool(tool_name),
            input: Vec::new(),
        }
    }

    pub fn args(mut self, args: &[&str]) -> ToolRun {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> ToolRun {
        self.cmd.env(key, value);
        self
    }

    /// The job document on stdin.
    pub fn doc(mut self, doc: &Value) -> ToolRun {
        self.input = doc.to_string().into_bytes();
        self
    }

    /// Bytes on stdin as they are (a document that is not JSON, say).
    pub fn stdin(mut self, bytes: &[u8]) -> ToolRun {
        self.input = bytes.to_vec();
        self
    }

    /// Run it: stdout must be one JSON object and a newline, every section the tool wrote of its
    /// schema type ([`run_raw`]).
    pub fn run(self) -> Run {
        run_raw(self.cmd, &self.input)
    }
}

impl Run {
    /// assert_cmd's assertions on the run (exit code, stdout, stderr with `predicates`).
    pub fn assert(&self) -> assert_cmd::assert::Assert {
        use assert_cmd::assert::OutputAssertExt;
        self.output.clone().assert()
    }

    /// The output document decoded into the schema's types (every section typed, unknown fields
    /// refused): what the assertions read instead of indexing JSON by hand. Panics (the test
    /// fails) naming what does not decode, with the tool's stderr.
    pub fn typed(&self) -> shared::contract::schema::JobDocument {
        shared::contract::schema::check(&self.doc).unwrap_or_else(|e| {
            panic!(
                "the output is not a job document as shared::contract::schema types it: {e}\n{:#}\nstderr:\n{}",
                self.doc, self.stderr
            )
        })
    }

    /// One section the run must have written, decoded into its type alone (so an input field
    /// the tool refused, still in the document, does not stand in the way); the test fails
    /// naming the section when it is absent or not of its type.
    pub fn decoded<T: serde::de::DeserializeOwned>(&self, name: &str) -> T {
        let value = self
            .doc
            .get(name)
            .filter(|v| !v.is_null())
            .unwrap_or_else(|| {
                panic!(
                    "no `{name}` section in the output\nstderr:\n{}",
                    self.stderr
                )
            });
        serde_json::from_value(value.clone()).unwrap_or_else(|e| {
            panic!(
                "the `{name}` section does not decode: {e}\n{value:#}\nstderr:\n{}",
                self.stderr
            )
        })
    }

    /// The `report` section (slurm-watch's verdict).
    pub fn report(&self) -> shared::contract::schema::Report {
        self.decoded("report")
    }

    /// The `job` section (slurm-submit's).
    pub fn job(&self) -> shared::contract::schema::Job {
        self.decoded("job")
    }

    /// The `allocation` section (slurm-alloc's).
    pub fn allocation(&self) -> shared::contract::schema::Allocation {
        self.decoded("allocation")
    }

    /// The `attach` section (slurm-attach's).
    pub fn attach_section(&self) -> shared::contract::schema::Attach {
        self.decoded("attach")
    }

    /// The `forward` section (slurm-forward's).
    pub fn forward(&self) -> shared::contract::schema::Forward {
        self.decoded("forward")
    }

    /// The `sync_tracked` section (slurm-sync-tracked's).
    pub fn synced(&self) -> shared::contract::schema::SyncTracked {
        self.decoded("sync_tracked")
    }

    /// The `sync_untracked` section (slurm-sync-untracked's).
    pub fn untracked(&self) -> shared::contract::schema::SyncUntracked {
        self.decoded("sync_untracked")
    }

    /// The `resolve` section (slurm-resolve's).
    pub fn resolve(&self) -> shared::contract::schema::Resolve {
        self.decoded("resolve")
    }

    /// The `preflight` section (slurm-ssh-preflight's).
    pub fn preflight(&self) -> shared::contract::schema::Preflight {
        self.decoded("preflight")
    }

    /// The submitted job's id (`job.job_id`).
    pub fn job_id(&self) -> String {
        self.job()
            .job_id
            .unwrap_or_else(|| panic!("the job section has no job_id\nstderr:\n{}", self.stderr))
    }

    /// The `error` section (a tool that failed).
    pub fn error(&self) -> shared::contract::schema::ErrorSection {
        self.decoded("error")
    }

    pub fn error_message(&self) -> String {
        self.doc["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// A section of a document read from a file (a pipeline's saved output), decoded into its type;
/// the test fails naming the section when it is absent or not of its type.
pub fn section_of<T: serde::de::DeserializeOwned>(doc: &Value, name: &str) -> T {
    let value = doc
        .get(name)
        .filter(|v| !v.is_null())
        .unwrap_or_else(|| panic!("no `{name}` section in {doc:#}"));
    serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("the `{name}` section does not decode: {e}\n{value:#}"))
}

/// A saved document (a pipeline's output read from a file) decoded whole into the schema's
/// types; the test fails naming what does not decode.
pub fn typed_of(doc: &Value) -> shared::contract::schema::JobDocument {
    shared::contract::schema::check(doc)
        .unwrap_or_else(|e| panic!("not a job document as the schema types it: {e}\n{doc:#}"))
}

/// The `preflight` section of a saved document.
pub fn preflight_of(doc: &Value) -> shared::contract::schema::Preflight {
    section_of(doc, "preflight")
}

/// The `report` section of a saved document.
pub fn report_of(doc: &Value) -> shared::contract::schema::Report {
    section_of(doc, "report")
}

/// The `job` section of a saved document.
pub fn job_of(doc: &Value) -> shared::contract::schema::Job {
    section_of(doc, "job")
}

/// Every section a tool wrote (one that differs from the input's) has its shared::contract::schema type,
/// unknown fields denied: so no tool can write a field the contract does not declare.
pub fn assert_own_sections(input: &[u8], output: &Value) {
    let input: Value = serde_json::from_slice(input).unwrap_or(Value::Null);
    if let Err(e) = shared::contract::schema::check_sections(output, Some(&input)) {
        panic!(
            "a section this tool wrote does not match shared::contract::schema: {e}\n{output:#}"
        );
    }
}

/// Run with `input` on stdin; stdout must be exactly one JSON object and a newline, and every
/// section the tool wrote must match its type.
pub fn run_raw(cmd: Command, input: &[u8]) -> Run {
    if let Some((cmd, doc_file)) = with_doc_file(&cmd) {
        return run_with_doc_file(cmd, input, &doc_file);
    }
    let mut cmd = cmd;
    let out = pipe(&mut cmd, input);
    let stdout = String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = one_document(input, &stdout, "stdout", &stderr);
    Run {
        code: out.status.code().expect("exited"),
        doc,
        stdout,
        stderr,
        output: out,
    }
}

/// `text` (a tool's output from `input`, read from `what`) as the one-line JSON object the
/// contract asks for, with only the tool's own sections changed.
fn one_document(input: &[u8], text: &str, what: &str, stderr: &str) -> Value {
    assert!(
        text.ends_with('\n') && text.matches('\n').count() == 1,
        "{what} must be one line:\n{text}\nstderr:\n{stderr}"
    );
    let doc: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON ({e}):\n{text}"));
    note_started(&doc);
    assert!(doc.is_object());
    assert_own_sections(input, &doc);
    doc
}

/// A tool that runs a person's command (`slurm-alloc exec`, slurm-attach with a shell or
/// `--command`) gives the command's output on stdout and stderr and writes its document only to
/// `--doc FILE`: the same command with a `--doc` file of its own (unless it names one), and the
/// file. `None` for every other tool.
fn with_doc_file(cmd: &Command) -> Option<(Command, PathBuf)> {
    let program = Path::new(cmd.get_program())
        .file_name()?
        .to_str()?
        .to_string();
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let before_dashes = |flag: &str| args.iter().take_while(|a| *a != "--").any(|a| a == flag);
    let at = match program.as_str() {
        "slurm-alloc" if args.first().map(String::as_str) == Some("exec") => 1,
        "slurm-attach" if !before_dashes("--stacks") && !before_dashes("--ssh-config") => 0,
        _ => return None,
    };
    if before_dashes("--doc") {
        return None;
    }
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let file = std::env::temp_dir().join(format!(
        "st-doc-{}-{}.json",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    let mut c = Command::new(cmd.get_program());
    c.args(&args[..at])
        .arg("--doc")
        .arg(&file)
        .args(&args[at..]);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    Some((c, file))
}

/// [`run_raw`] for a tool that writes its document to `doc_file`: `stdout` is the command's.
pub fn run_with_doc_file(mut cmd: Command, input: &[u8], doc_file: &Path) -> Run {
    let out = pipe(&mut cmd, input);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = std::fs::read_to_string(doc_file).unwrap_or_else(|e| {
        panic!(
            "no document in {} ({e})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            doc_file.display()
        )
    });
    let _ = std::fs::remove_file(doc_file);
    let doc = one_document(input, &text, "the --doc file", &stderr);
    Run {
        code: out.status.code().expect("exited"),
        doc,
        stdout,
        stderr,
        output: out,
    }
}

pub fn run(tool_name: &str, args: &[&str], input: &Value) -> Run {
    ToolRun::new(tool_name).args(args).doc(input).run()
}

pub fn pipe(cmd: &mut Command, input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap();
    out
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("st-test-")
        .tempdir()
        .unwrap()
}

pub fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Count of sshd log lines matching `needle`.
pub fn log_count(path: &str, needle: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// slurm-runs' `--json --no-refresh` entry for job `id`, from the ledger in `state` (else the
/// tests' own state directory).
pub fn listed_run(state: Option<&Path>, id: &str) -> Value {
    let mut c = tool("slurm-runs");
    if let Some(s) = state {
        c.env("SLURM_TOOLS_STATE_DIR", s);
    }
    let out = c
        .args(["--json", "--no-refresh"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    listed
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["job_id"] == id)
        .unwrap_or_else(|| panic!("job {id} in slurm-runs:\n{listed}"))
}

/// The trace lines (one per external program run) written through SLURM_TOOLS_TRACE.
pub fn trace_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// ssh executions that talk to the network (`ssh -G` only reads the config).
pub fn connecting_ssh(trace: &[Value]) -> Vec<Vec<String>> {
    trace
        .iter()
        .filter(|t| t.get("event").is_none())
        .map(|t| serde_json::from_value::<Vec<String>>(t["argv"].clone()).unwrap())
        .filter(|argv| argv[0].ends_with("ssh") && !argv.iter().any(|a| a == "-G"))
        .collect()
}

/// Open the MFA master at `control_path` the way a person would (test stand-in).
pub fn mfa_login(control_path: &str) {
    let out = Command::new(repo_root().join("scripts/local-cluster"))
        .args(["mfa-login", control_path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mfa-login failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn mfa_logout(control_path: &str) {
    master_exit("mfa_host", control_path);
}

/// Close the master at `control_path` to the testbed host named by `host_key` in `info`.
pub fn master_exit(host_key: &str, control_path: &str) {
    let _ = Command::new("ssh")
        .args([
            "-F",
            &testbed().ssh_config(),
            "-o",
            &format!("ControlPath={control_path}"),
            "-O",
            "exit",
            &testbed().s(host_key),
        ])
        .output();
}

/// A base document for the local cluster through one of its hosts.
pub fn doc_for(host_key: &str) -> Value {
    let tb = testbed();
    serde_json::json!({
        "ssh_host": tb.s(host_key),
        "ssh_config_file": tb.ssh_config(),
        "slurm_user": tb.s("cluster_user"),
        "remote_cwd": tb.remote_root(),
        // Tests share the default control path: no test's master (ControlPersist) may carry
        // another's connections, or survive into a test that stops sshd. The master a direct
        // host gets by default is tested on its own (preflight.rs).
        "ssh_multiplex": false,
    })
}

/// The connection a document describes, as every tool makes it.
pub fn ssh_of(doc: &Value) -> shared::remote::ssh::Ssh {
    let doc = shared::Document::parse(doc.to_string().as_bytes(), "test").unwrap();
    let conn = shared::remote::ssh::Connection::read(&doc).unwrap();
    shared::remote::ssh::Ssh::connect(&conn).unwrap()
}

/// A short control path unique to a test, so tests do not share masters.
pub fn control_path(test: &str) -> String {
    format!("/tmp/st-{}-{}-%p", test, std::process::id())
}

/// The document matches the schema's types (every section field declared, every type right).
pub fn assert_schema(doc: &Value) {
    if let Err(e) = shared::contract::schema::check(doc) {
        panic!("the document does not match shared::contract::schema (docs/job-document.schema.json): {e}\n{doc:#}");
    }
}

/// An empty directory the cluster user may write to: an injected `touch` would leave a file here.
pub fn canary_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(format!(
        "/tmp/slurm-tools-canary-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The cluster user must be able to create files here, or a canary could not fire.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// No injected command ran: the canary directory is still empty (then it is removed).
pub fn assert_no_canary(dir: &std::path::Path) {
    let fired: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        fired.is_empty(),
        "injection: canary files were created: {fired:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A `report` section as slurm-watch writes it (every field), for tests that start from a verdict.
pub fn report_section(status: &str, job_id: &str, kind: &str) -> Value {
    serde_json::json!({
        "status": status, "job_id": job_id, "kind": kind, "slurm_state": "FAILED",
        "exit_code": "3:0", "elapsed": "00:00:05", "summary": "the job failed with exit code 3:0",
        "source": "sacct", "failure_patterns_found": [], "hang_line": null,
        "remote_log": "/r/x-42.out", "remote_err_log": "/r/x-42.err", "local_log": null,
        "local_log_complete": false, "excerpt": ["line a", "line b"], "excerpt_err": ["boom"],
        "polls": 3, "bytes_scanned": 100, "watch_seconds": 5.0
    })
}

/// `scripts/local-cluster ARGS` (the test bed's own commands: modern-exec, modern-login, up);
/// its stdout. Fails the test when it fails.
pub fn local_cluster(args: &[&str]) -> String {
    let out = Command::new(repo_root().join("scripts/local-cluster"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "local-cluster {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The body of http://127.0.0.1:PORT/, if anything answers there.
pub fn http_get(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    c.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    c.read_to_string(&mut body).ok()?;
    Some(body).filter(|b| !b.is_empty())
}

/// `slurm-forward --port-file FILE --local-port 0` on a submitted job's document, again each
/// second until the job's server answers (two minutes at most): the run that forwarded.
pub fn forward_when_served(submitted: &Value, port_file: &str) -> Run {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let r = run(
            "slurm-forward",
            &["--port-file", port_file, "--local-port", "0"],
            submitted,
        );
        if r.code == 0 {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job's server never became reachable: {}",
            r.stderr
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Wait at most 180 s until `state()` (Slurm's state of job `what`) says RUNNING.
pub fn wait_running(what: &str, state: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let now = state();
        if now.trim() == "RUNNING" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not start within 180 s: {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// A job of the cluster user's own on the first site, submitted outside the tools (a test's
/// filler, sleeping 15 minutes within a 30-minute limit); its id, once it runs.
pub fn first_site_filler(args: &[&str]) -> String {
    let out = Command::new("runuser")
        .args([
            "-u",
            &testbed().s("cluster_user"),
            "--",
            "sbatch",
            "--parsable",
        ])
        .args([
            "-A",
            &testbed().s("account"),
            "-o",
            "/dev/null",
            "-J",
            "st-filler",
        ])
        .args(["--time=00:30:00"])
        .args(args)
        .args(["--wrap", "sleep 900"])
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    wait_running(&format!("the filler {args:?}"), || {
        let out = Command::new("squeue")
            .args(["-h", "-j", &id, "-o", "%T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    });
    id
}

/// Cancels the jobs it names when dropped (a failed assertion leaves nothing queued).
pub struct CancelJobs(pub Vec<String>);

impl Drop for CancelJobs {
    fn drop(&mut self) {
        for id in &self.0 {
            let _ = Command::new("scancel").arg(id).status();
        }
    }
}

/// Pending explained (issue 36): `d` submitted and watched until slurm-watch says the job pends for a reason of `category`;
/// then the job is cancelled and the watch ends by itself. That pending event, the watch's
/// stderr, and the job id.
pub fn explained(state: &Path, d: &Value, category: &str) -> (Value, String, String) {
    explained_as(state, d, &[category])
}

/// [`explained`] for the first of several categories Slurm may give the same wait.
pub fn explained_as(state: &Path, d: &Value, categories: &[&str]) -> (Value, String, String) {
    let category = categories.join(" or ");
    let mut c = tool("slurm-submit");
    c.env("SLURM_TOOLS_STATE_DIR", state);
    let s = run_raw(c, d.to_string().as_bytes());
    assert_eq!(s.code, 0, "{}", s.stderr);
    let id = s.job_id();
    let _cancel = CancelJobs(vec![id.clone()]);
    let events = state.join(format!("events-{id}.jsonl"));
    let err = state.join(format!("watch-{id}.err"));
    let mut w = tool("slurm-watch");
    w.env("SLURM_TOOLS_STATE_DIR", state)
        .args(["--interval", "1", "--events", events.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = w.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(s.doc.to_string().as_bytes()).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let event = loop {
        let text = std::fs::read_to_string(&events).unwrap_or_default();
        if let Some(e) = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["event"] == "pending" && categories.iter().any(|c| e["category"] == *c))
        {
            break e;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "no pending event of category {category} within 90 s: {text}\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    // slurm-runs names the same category beside Slurm's reason.
    let listed = tool("slurm-runs")
        .env("SLURM_TOOLS_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let row = listed
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id.as_str()))
        .unwrap_or_else(|| panic!("job {id} in slurm-runs: {listed}"));
    assert!(
        categories.iter().any(|c| row.contains(&format!(": {c})"))),
        "{row}"
    );
    let _ = Command::new("scancel").arg(&id).status();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(1),
        "the cancelled job's verdict: {stderr}"
    );
    (event, stderr, id)
}
