//! Every shell example of README.md and docs/cookbook.md, run as printed against the local
//! cluster, in the order printed, in one person's repository and home, the way cargo and trycmd
//! check their documentation: an example that stops working fails the build.
//!
//! What differs from a person's machine, and only that:
//! - `job.json` is the README quickstart's document with the local cluster's values
//!   (`readme::quickstart_doc`); where an example needs a document of its own (a job that serves
//!   a port, a hang), the test writes it with the real tools before the example, as the person
//!   would have;
//! - a value that names another site (an image on a public registry, a site's file systems) is
//!   replaced by the local one: `SUBSTITUTIONS`, each of which must still occur in the file;
//! - each example runs under bash with `set -o pipefail` and an ERR trap that records every
//!   command that failed: a failure must be one the example's table expects (with its reason),
//!   and an expected one must happen;
//! - where an example opens a shell, it runs in a real terminal (tmux) and a person stand-in types
//!   in it; a `--follow` that by design never ends is ended by the test once it delivered;
//! - `notify-send` (a desktop's notifier; there is no desktop here) is a TEST STAND-IN that
//!   records its arguments.
//!
//! Examples not run here name the test that runs their commands (`ELSEWHERE`); an example in
//! neither list fails the test, so a new one cannot be added unrun.

use crate::fixture::*;
use crate::harness::*;
use crate::totp::Pane;
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One ```sh block: the heading it is under and its place among that heading's sh blocks.
#[derive(Clone)]
struct Block {
    file: &'static str,
    heading: String,
    nth: usize,
    text: String,
}

impl Block {
    fn name(&self) -> String {
        format!("{} § {} #{}", self.file, self.heading, self.nth)
    }
}

fn sh_blocks(file: &'static str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut nth = 0;
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l.starts_with('#') {
            heading = l.trim_start_matches('#').trim().to_string();
            nth = 0;
        } else if let Some(lang) = l.strip_prefix("```") {
            let body = crate::readme::fenced_body(&mut lines);
            if lang == "sh" {
                out.push(Block {
                    file,
                    heading: heading.clone(),
                    nth,
                    text: body,
                });
                nth += 1;
            }
        }
    }
    out
}

/// Examples whose commands another test (or a script) runs: (file, heading, nth, that test or
/// script, why not here).
const ELSEWHERE: &[(&str, &str, usize, &str, &str)] = &[
    (
        "README.md",
        "More than one job",
        4,
        "the_cookbooks_examples_run_as_printed",
        "the cookbook's sweep example runs the same commands (a jq-made sweep, slurm-submit, \
         slurm-watch, slurm-report --table, slurm-submit --only-failed) on its own pipeline; \
         train.py is the reader's",
    ),
    (
        "README.md",
        "Install",
        2,
        "scripts/install-check",
        "`make install` builds the whole workspace in release mode (six minutes on this \
         machine's two cores), so scripts/test does not run it; scripts/install-check follows it \
         literally in a fresh Debian 12 root, run by hand",
    ),
    (
        "docs/cookbook.md",
        "Several clusters: where it starts first, and why it waits",
        0,
        "modern::place::placement_asks_each_cluster_once_and_the_busy_site_loses_either_way",
        "placement needs both sites and the modern site's login, with a filler job making one \
         site busy (the pipeline after it is the whole flow every other example runs)",
    ),
    (
        "docs/cookbook.md",
        "Several clusters: where it starts first, and why it waits",
        1,
        "pending::a_pending_job_is_explained_with_the_limit_and_the_action_for_each_kind_of_wait",
        "a job that pends needs a limit it is over, a hold or a busy cluster, which that test \
         makes and then cancels",
    ),
    (
        "docs/cookbook.md",
        "Several clusters: where it starts first, and why it waits",
        2,
        "history::three_past_runs_size_mem_and_time_limit_and_stats_show_their_use",
        "sizing needs past runs of one name that completed with accounting, which that test \
         makes (three jobs) before it runs `slurm-runs --stats` and slurm-resolve",
    ),
    (
        "docs/cookbook.md",
        "Several clusters: where it starts first, and why it waits",
        3,
        "modern::place::submit_race_two_enters_the_next_best_cluster_and_the_watch_keeps_the_first_to_start",
        "a race needs both sites and a busy one, which that test makes (a filler job), before it \
         runs this pipeline with `slurm-submit --race 2`",
    ),
    (
        "README.md",
        "Quickstart",
        0,
        "readme::the_readmes_quickstart_runs_as_printed_to_passed",
        "its own test, with the quickstart's document",
    ),
    (
        "README.md",
        "Quickstart",
        1,
        "readme::the_readmes_quickstart_runs_as_printed_to_passed",
        "the same test runs the `slurm-submit --sync` pipeline after the first, on the same repository",
    ),
];

/// Values that name another site, as printed: (file, the printed value). The local cluster's
/// value for each is [`local_value`].
const SUBSTITUTIONS: [(&str, &str); 3] = [
    ("docs/cookbook.md", "nvcr.io/nvidia/pytorch:24.01-py3"),
    ("docs/cookbook.md", "/lustre/fsw/me:/lustre/fsw/me"),
    ("docs/cookbook.md", "/datasets:/datasets:ro"),
];

/// The local cluster's value for a printed one of [`SUBSTITUTIONS`].
fn local_value(printed: &str) -> String {
    let tb = testbed();
    match printed {
        "nvcr.io/nvidia/pytorch:24.01-py3" => tb.s("container_image"),
        "/lustre/fsw/me:/lustre/fsw/me" => format!("{0}:{0}", tb.s("scratch_dir")),
        "/datasets:/datasets:ro" => "/usr/share/doc:/datasets:ro".to_string(),
        other => panic!("no local value for {other}"),
    }
}

/// What a finished example left: its stdout and its stderr.
struct Outcome {
    out: String,
    err: String,
}

impl Outcome {
    fn both(&self) -> String {
        format!("{}\n{}", self.out, self.err)
    }
}

/// A word for the launcher's shell, quoted by the project's one quoting writer.
fn q(word: &str) -> String {
    shared::remote::quote::quote(word).expect("a path or variable the shell can take")
}

/// A person's repository (a fixture with an origin the cluster clones) and home directory.
struct Session {
    fx: Fixture,
    home: tempfile::TempDir,
    remote: String,
}

impl Session {
    fn new(name: &str) -> Session {
        let fx = Fixture::new(name);
        let home = tempdir();
        let remote = format!(
            "{}/examples-{name}-{}",
            testbed().remote_root(),
            std::process::id()
        );
        let s = Session { fx, home, remote };
        for d in [".config/slurm-tools", "stand-ins", "examples", ".ssh"] {
            std::fs::create_dir_all(s.home().join(d)).unwrap();
        }
        // TEST STAND-IN for a desktop's notifier: records its arguments.
        let stand_in = s.home().join("stand-ins/notify-send");
        write(
            &stand_in,
            "#!/bin/sh\n# TEST STAND-IN for notify-send (no desktop here): records its arguments.\n\
             printf '%s\\n' \"$*\" >> \"$HOME/notify-send.calls\"\n",
        );
        chmod_x(&stand_in);
        let doc = crate::readme::quickstart_doc(&crate::readme::quickstart_text(), &s.remote);
        s.write_doc("job.json", &doc);
        s
    }

    /// A local webhook receiver, its URL in the file the examples name
    /// (`~/.config/slurm-tools/webhook`, mode 0600); what it received.
    fn webhook(&self) -> std::sync::Arc<std::sync::Mutex<Vec<Value>>> {
        let (port, got) = crate::runs::http_server(200);
        let hook = self.home().join(".config/slurm-tools/webhook");
        write(&hook, &format!("http://127.0.0.1:{port}/hook\n"));
        let private = std::os::unix::fs::PermissionsExt::from_mode(0o600);
        std::fs::set_permissions(&hook, private).unwrap();
        got
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    fn dir(&self) -> &Path {
        &self.fx.local
    }

    fn write_doc(&self, name: &str, doc: &Value) {
        write(&self.dir().join(name), &doc.to_string());
    }

    fn read_doc(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.dir().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
    }

    fn job_doc(&self) -> Value {
        self.read_doc("job.json")
    }

    /// The person's environment: the tools and the stand-ins on PATH, this home (and no XDG
    /// variables: the tools' defaults under it, `~/.config`, `~/.local/state`).
    fn env(&self) -> Vec<(String, String)> {
        let bin = Path::new(bin("slurm-resolve")).parent().unwrap();
        let h = self.home().display().to_string();
        let mut env = vec![
            (
                "PATH".to_string(),
                format!(
                    "{}:{h}/stand-ins:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
                ),
            ),
            ("HOME".into(), h.clone()),
            ("USER".into(), "slurm-tools-test".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("TZ".into(), "UTC".into()),
            ("TERM".into(), "xterm".into()),
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ];
        for k in ["TMPDIR", "SLURM_TOOLS_SCRIPT_DUMP"] {
            if let Ok(v) = std::env::var(k) {
                env.push((k.to_string(), v));
            }
        }
        env
    }

    /// A tool run by the test in the person's environment (what the person did before an
    /// example), with the document on stdin; its stdout as a document.
    fn tool(&self, name: &str, args: &[&str], input: &Value) -> Value {
        let mut c = Command::new(bin(name));
        c.env_clear()
            .envs(self.env())
            .current_dir(self.dir())
            .args(args);
        let out = pipe(&mut c, input.to_string().as_bytes());
        assert!(
            out.status.success(),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// resolve, preflight and both syncs of `doc`: the document after the syncs.
    fn synced(&self, doc: &Value) -> Value {
        let mut d = doc.clone();
        for t in [
            "slurm-resolve",
            "slurm-ssh-preflight",
            "slurm-sync-tracked",
            "slurm-sync-untracked",
        ] {
            d = self.tool(t, &[], &d);
        }
        d
    }

    /// The example as a script: the substitutions made, pipefail on, each failure recorded.
    /// Returns the launcher, which runs it in the repository with the person's environment
    /// and writes its output and exit status beside it.
    fn launcher(&self, b: &Block) -> (PathBuf, PathBuf) {
        self.launcher_in(b, self.dir(), &[])
    }

    /// [`Session::launcher`] in another directory, with more environment.
    fn launcher_in(&self, b: &Block, dir: &Path, more: &[(&str, String)]) -> (PathBuf, PathBuf) {
        let mut text = b.text.clone();
        for (file, printed) in SUBSTITUTIONS {
            if file == b.file {
                text = text.replace(printed, &local_value(printed));
            }
        }
        let slug: String = b
            .name()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let base = self.home().join("examples").join(&slug);
        let script = base.with_extension("sh");
        write(
            &script,
            &format!(
                "set -o pipefail\n\
                 trap 'printf \"%s\\t%s\\t%s\\n\" \"$?\" \"$((LINENO - 2))\" \"$BASH_COMMAND\" >> \"{b}.failures\"' ERR\n\
                 {text}",
                b = base.display()
            ),
        );
        let _ = std::fs::remove_file(base.with_extension("exit"));
        let _ = std::fs::remove_file(format!("{}.failures", base.display()));
        let env: String = self
            .env()
            .into_iter()
            .chain(more.iter().map(|(k, v)| (k.to_string(), v.clone())))
            .map(|(k, v)| format!(" {}", q(&format!("{k}={v}"))))
            .collect();
        let launcher = base.with_extension("run");
        write(
            &launcher,
            &format!(
                "exec > {own} 2>&1\ncd {dir} || exit 99\nenv -i{env} bash --norc --noprofile {script} > {out} 2> {err}\necho $? > {exit}\n",
                own = q(&format!("{}.launcher", base.display())),
                dir = q(&dir.display().to_string()),
                script = q(&script.display().to_string()),
                out = q(&format!("{}.out", base.display())),
                err = q(&format!("{}.err", base.display())),
                exit = q(&format!("{}.exit", base.display())),
            ),
        );
        (launcher, base)
    }

    /// Start the example with no terminal (stdin empty), in a process group of its own.
    fn spawn(&self, b: &Block) -> Spawned {
        eprintln!("example: {}", b.name());
        let (launcher, base) = self.launcher(b);
        let child = Command::new("sh")
            .arg(&launcher)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        Spawned { child, base }
    }

    /// The example run in `dir` with more environment, no terminal.
    fn run_in(
        &self,
        b: &Block,
        dir: &Path,
        more: &[(&str, String)],
        expected: &[(&str, i32, &str)],
    ) -> Outcome {
        eprintln!("example: {} (in {})", b.name(), dir.display());
        let (launcher, base) = self.launcher_in(b, dir, more);
        let ok = Command::new("sh")
            .arg(&launcher)
            .stdin(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success());
        finish(b, &base, expected)
    }

    fn run(&self, b: &Block, expected: &[(&str, i32, &str)]) -> Outcome {
        let mut started = self.spawn(b);
        started.wait();
        finish(b, &started.base, expected)
    }

    /// The example in a real terminal; `person` acts on it (reads `base.out`/`.err`, types).
    fn run_in_terminal(
        &self,
        b: &Block,
        expected: &[(&str, i32, &str)],
        person: impl FnOnce(&Pane, &Path),
    ) -> Outcome {
        eprintln!("example (in a terminal): {}", b.name());
        let (launcher, base) = self.launcher(b);
        let pane = Pane::running(
            &format!("ex-{}", b.nth),
            &format!("sh '{}'; sleep 3600", launcher.display()),
        );
        person(&pane, &base);
        wait_for_file(&base.with_extension("exit"), 600);
        drop(pane);
        finish(b, &base, expected)
    }
}

/// An example running in the background in a process group of its own. Dropped unfinished (the
/// test failed on the way), the whole group is killed: no example outlives its test, holding a
/// node or the test run's output (the full run once waited 22 minutes on a `--follow`).
struct Spawned {
    child: Child,
    base: PathBuf,
}

impl Spawned {
    fn id(&self) -> u32 {
        self.child.id()
    }

    fn wait(&mut self) {
        self.child.wait().unwrap();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .status();
            let _ = self.child.wait();
        }
    }
}

/// The session's jobs and allocations still in the queue are cancelled when it ends, so a failed
/// example leaves no job behind to hold a node until its time limit.
impl Drop for Session {
    fn drop(&mut self) {
        let user = testbed().s("cluster_user");
        let Ok(out) = Command::new("squeue")
            .args(["-h", "-u", &user, "-o", "%i|%Z"])
            .output()
        else {
            return;
        };
        let ours: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('|'))
            .filter(|(_, dir)| dir.starts_with(&self.remote))
            .map(|(id, _)| id.to_string())
            .collect();
        if !ours.is_empty() {
            eprintln!("cancelling the example session's jobs: {ours:?}");
            let _ = Command::new("scancel").args(&ours).status();
        }
    }
}

fn chmod_x(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Poll `f` (every 200 ms) until it gives a value; fails naming `what` after `secs`.
fn wait_until<T>(what: &dyn Fn() -> String, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{} (after {secs} s)", what());
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn wait_for_file(p: &Path, secs: u64) {
    wait_until(&|| format!("{} never appeared", p.display()), secs, || {
        p.exists().then_some(())
    })
}

/// Wait until the file at `p` contains `needle`; its text then.
fn wait_for_text(p: &Path, needle: &str, secs: u64) -> String {
    let read = || std::fs::read_to_string(p).unwrap_or_default();
    wait_until(
        &|| format!("{} never showed {needle:?}:\n{}", p.display(), read()),
        secs,
        || Some(read()).filter(|t| t.contains(needle)),
    )
}

/// The example's output, and its failures checked against the expected ones
/// (a substring of the command, its exit status, why).
fn finish(b: &Block, base: &Path, expected: &[(&str, i32, &str)]) -> Outcome {
    let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", base.display()));
    let o = Outcome {
        out: read("out").unwrap_or_default(),
        err: read("err").unwrap_or_default(),
    };
    let failures: Vec<(i32, String, String)> = read("failures")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            Some((
                f.next()?.parse().ok()?,
                f.next()?.to_string(),
                f.next()?.to_string(),
            ))
        })
        .collect();
    for (code, line, cmd) in &failures {
        assert!(
            expected
                .iter()
                .any(|(needle, c, _)| cmd.contains(needle) && c == code),
            "{}: line {line} `{cmd}` exited {code}\nstdout:\n{}\nstderr:\n{}",
            b.name(),
            o.out,
            o.err
        );
    }
    for (needle, c, why) in expected {
        assert!(
            failures
                .iter()
                .any(|(code, _, cmd)| cmd.contains(needle) && code == c),
            "{}: `{needle}` was expected to exit {c} ({why}); failures: {failures:?}\nstderr:\n{}",
            b.name(),
            o.err
        );
    }
    o
}

/// The job of a submitted document serves on `port` of its node: wait until it answers there.
fn wait_serving(doc: &Value, port: u16) {
    let id = job_of(doc).job_id.expect("a submitted document");
    let serving = || {
        let sc = scontrol(&id);
        let node = sc.get("BatchHost").or_else(|| sc.get("NodeList"))?;
        let ip = testbed().info["node_addresses"][node].as_str()?.to_string();
        (sc.get("JobState").map(String::as_str) == Some("RUNNING")
            && std::net::TcpStream::connect((ip.as_str(), port)).is_ok())
        .then_some(())
    };
    wait_until(
        &|| format!("job {id} never served port {port}: {:?}", scontrol(&id)),
        180,
        serving,
    )
}

/// A command for a job that serves `port` until `stop` exists, then ends with 0.
fn serving_command(port: u16, stop: &str) -> String {
    format!(
        "python3 -m http.server {port} >/dev/null 2>&1 & until [ -e {stop} ]; do sleep 1; done; kill $!"
    )
}

fn stop_file(s: &Session, what: &str) -> String {
    format!("{}/stop-{what}", s.remote)
}

/// The stop file a serving job waits for (the test writes it; the job only looks for it).
fn touch_stop_file(path: &str) {
    std::fs::create_dir_all(Path::new(path).parent().unwrap()).unwrap();
    write(Path::new(path), "");
}

/// The release file names an install example uses (`./NAME.whl`, `NAME.tar.gz`), full names
/// only (the `...` of a comment is not one).
fn release_files_named_in(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| c.is_whitespace())
        .map(|w| w.trim_start_matches("./"))
        .filter(|w| (w.ends_with(".whl") || w.ends_with(".tar.gz")) && !w.contains("..."))
        .map(str::to_string)
        .collect();
    names.dedup();
    assert!(!names.is_empty(), "no release file named in:\n{text}");
    names
}

/// Every tool is in `home`/.local/bin and runs there (`--version` names the version).
fn installed_tools_work(home: &Path, o: &Outcome) {
    for t in ["slurm-resolve", "slurm-watch", "slurm-alloc", "slurm-init"] {
        let exe = home.join(".local/bin").join(t);
        let out = Command::new(&exe)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", exe.display(), o.both()));
        assert!(out.status.success(), "{}", exe.display());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(t),
            "{}",
            exe.display()
        );
    }
}

/// A person in front of the terminal: once slurm-attach says it is attaching, types a line in
/// the shell it opens, sees it run there, and leaves with `exit`.
fn person_leaves_the_shell(pane: &Pane, base: &Path) {
    let err = PathBuf::from(format!("{}.err", base.display()));
    wait_for_text(&err, "attaching to job", 300);
    pane.type_line("echo ATTACHED-$((6*7)) in $PWD; exit");
    // The shell's output comes on slurm-attach's stdout, as ssh's would.
    wait_for_text(&base.with_extension("out"), "ATTACHED-42", 60);
}

fn covered_elsewhere(b: &Block) -> bool {
    ELSEWHERE
        .iter()
        .any(|(f, h, n, _, _)| *f == b.file && *h == b.heading && *n == b.nth)
}

/// Every substitution still occurs in its file, every test ELSEWHERE names exists, and every
/// example there still exists.
#[test]
fn every_example_is_run_here_or_by_a_named_test() {
    for (file, printed) in SUBSTITUTIONS {
        let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
        assert!(
            text.contains(printed),
            "{file} no longer shows {printed}: update SUBSTITUTIONS"
        );
    }
    let mut sources = String::new();
    for dir in ["tests/integration", "tests/integration/modern"] {
        for e in std::fs::read_dir(repo_root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                sources.push_str(&std::fs::read_to_string(p).unwrap());
            }
        }
    }
    for (file, heading, nth, test, _) in ELSEWHERE {
        let name = test.rsplit("::").next().unwrap();
        assert!(
            sources.contains(&format!("fn {name}()")) || repo_root().join(test).is_file(),
            "{file} § {heading} #{nth} names {test}, which does not exist"
        );
        assert!(
            sh_blocks(file)
                .iter()
                .any(|b| b.heading == *heading && b.nth == *nth),
            "{file} § {heading} #{nth} is listed in ELSEWHERE but is not there"
        );
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_readmes_examples_run_as_printed() {
    crate::needs_cluster!();
    let s = Session::new("readme-ex");
    for b in sh_blocks("README.md") {
        if covered_elsewhere(&b) {
            continue;
        }
        match (b.heading.as_str(), b.nth) {
            ("Install", 0) | ("Install", 1) => {
                // In a folder holding the release's files (scripts/release's, as scripts/test
                // builds them), under the names the README prints; a fresh home each, so
                // nothing the other install left can help. uv and pipx from the test bed.
                let files = tempdir();
                for name in release_files_named_in(&b.text) {
                    let from = crate::install::dist().join(&name);
                    assert!(from.is_file(), "{}: the release has no {name}", b.name());
                    std::os::unix::fs::symlink(&from, files.path().join(&name)).unwrap();
                }
                let home = tempdir();
                let path = format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    testbed().s("installers_bin")
                );
                let more = [
                    ("HOME", home.path().display().to_string()),
                    ("PATH", path.clone()),
                ];
                let o = s.run_in(&b, files.path(), &more, &[]);
                installed_tools_work(home.path(), &o);
                if b.nth == 0 {
                    // The comment's alternative: pipx, the same wheel, another fresh home.
                    let wheel = release_files_named_in(&b.text).into_iter().next().unwrap();
                    let home = tempdir();
                    let out = Command::new("pipx")
                        .args(["install", &format!("./{wheel}")])
                        .current_dir(files.path())
                        .env_clear()
                        .env("HOME", home.path())
                        .env("PATH", &path)
                        .output()
                        .unwrap();
                    let o = Outcome {
                        out: String::from_utf8_lossy(&out.stdout).into_owned(),
                        err: String::from_utf8_lossy(&out.stderr).into_owned(),
                    };
                    assert!(out.status.success(), "pipx install: {}", o.both());
                    installed_tools_work(home.path(), &o);
                }
            }
            ("More than one job", 0) => {
                // The project's own test target, as `make test` in a repository.
                write(
                    &s.dir().join("Makefile"),
                    "test:\n\t@echo tests-ran-$$((6 * 7)) on $$(hostname)\n",
                );
                let o = s.run_in_terminal(&b, &[], person_leaves_the_shell);
                assert!(
                    o.out.contains("tests-ran-42"),
                    "make test ran in the allocation, its output on stdout:\n{}",
                    o.both()
                );
                let alloc = s.read_doc("alloc.json");
                let id = section_of::<shared::contract::schema::Allocation>(&alloc, "allocation")
                    .job_id
                    .unwrap();
                let cfg = std::fs::read_to_string(s.home().join(".ssh/slurm-jobs")).unwrap();
                assert!(cfg.contains("Host slurm-"), "{cfg}");
                let (state, _) = wait_done(&id, 60);
                assert!(
                    state.starts_with("CANCELLED") || state == "COMPLETED",
                    "down released it: {state}"
                );
            }
            ("More than one job", 1) => {
                let stop = stop_file(&s, "8888");
                let mut d = s.job_doc();
                d["command"] = json!(serving_command(8888, &stop));
                let synced = s.synced(&d);
                s.write_doc("synced.json", &synced);
                let submitted = s.tool("slurm-submit", &[], &synced);
                s.write_doc("submitted.json", &submitted);
                wait_serving(&submitted, 8888);
                let o = s.run(&b, &[]);
                let fwd = s.read_doc("fwd.json");
                assert_eq!(
                    section_of::<shared::contract::schema::Forward>(&fwd, "forward").local_port,
                    8888,
                    "{}",
                    o.err
                );
                assert!(
                    o.out.contains("\"forensics\""),
                    "the stacks document: {}",
                    o.out
                );
                touch_stop_file(&stop);
                let id = job_of(&submitted).job_id.unwrap();
                assert_eq!(wait_done(&id, 120).0, "COMPLETED");
            }
            ("More than one job", 2) => {
                let got = s.webhook();
                let o = s.run(&b, &[]);
                let report = s.read_doc("report.json");
                assert_eq!(report_of(&report).status.name(), "PASSED", "{}", o.err);
                let events = std::fs::read_to_string(s.dir().join("events.jsonl")).unwrap();
                assert!(events.contains("\"verdict\""), "{events}");
                assert!(
                    s.read_doc("fetched.json").get("fetch").is_some(),
                    "{}",
                    o.err
                );
                let served = s.read_doc("submitted.json");
                let id = job_of(&served).job_id.unwrap();
                assert!(
                    o.out.contains(&id),
                    "slurm-runs lists the earlier job {id}:\n{}",
                    o.out
                );
                drop(got);
            }
            ("More than one job", 3) => {
                let o = s.run(&b, &[]);
                let report = s.read_doc("report.json");
                assert_eq!(report_of(&report).status.name(), "PASSED", "{}", o.err);
                assert!(
                    o.err.contains("build_command"),
                    "--build says why it submits nothing:\n{}",
                    o.err
                );
                assert_eq!(job_of(&report).kind.name(), "run", "{report}");
            }
            ("Step by step with make", 0) => {
                // make runs in this checkout: a directory standing for it, with its Makefile,
                // scripts and test bed state (the default job, the test cluster's sample, comes
                // from scripts/local-cluster info), the tools already built (TOOLS, as the
                // Makefile's header says), so the example's files stay out of the checkout.
                let checkout = s.home().join("checkout");
                std::fs::create_dir_all(&checkout).unwrap();
                for f in ["Makefile", "scripts", ".testbed"] {
                    std::os::unix::fs::symlink(repo_root().join(f), checkout.join(f)).unwrap();
                }
                // my-job.json: this person's repository (no build script, nothing about builds
                // in the document), repo_root set; the catalog where the example says.
                let mut mine = s.job_doc();
                mine["repo_root"] = json!(s.dir());
                write(&checkout.join("my-job.json"), &mine.to_string());
                std::fs::copy(
                    testbed().s("catalog"),
                    s.home().join(".config/slurm-tools/clusters.json"),
                )
                .unwrap();
                std::fs::create_dir_all(s.dir().join("tests")).unwrap();
                write(
                    &s.dir().join("tests/test_model.py"),
                    "def test_model():\n    assert 6 * 7 == 42\n",
                );
                let tools = Path::new(bin("slurm-resolve")).parent().unwrap();
                let o = s.run_in(
                    &b,
                    &checkout,
                    &[("TOOLS", tools.display().to_string())],
                    &[],
                );
                let docs = checkout.join(".slurm-tools");
                let read = |f: &str| -> Value {
                    serde_json::from_slice(&std::fs::read(docs.join(f)).unwrap()).unwrap()
                };
                let report = read("report.json");
                assert_eq!(report_of(&report).status.name(), "PASSED", "{}", o.err);
                assert_eq!(
                    report["repo_root"],
                    json!(s.dir()),
                    "the last `all` ran my-job.json"
                );
                assert_eq!(job_of(&report).kind.name(), "run");
                assert!(o.out.contains("PASSED"), "make report:\n{}", o.out);
                assert!(
                    o.err.contains("no build job"),
                    "my-job.json builds nothing, said:\n{}",
                    o.err
                );
                assert_eq!(
                    section_of::<shared::contract::schema::Allocation>(
                        &read("loop.json"),
                        "allocation"
                    )
                    .last_exec
                    .unwrap()
                    .exit_code,
                    0,
                    "{}",
                    o.err
                );
                assert!(
                    o.out.contains("1 passed"),
                    "pytest -x ran in the allocation, its output on make's stdout:\n{}",
                    o.both()
                );
                assert_eq!(
                    section_of::<shared::contract::schema::Allocation>(
                        &read("released.json"),
                        "allocation"
                    )
                    .state
                    .map(|s| s.to_string())
                    .as_deref(),
                    Some("RELEASED")
                );
            }
            ("One tool inside an existing script", 0) => {
                let o = s.run(&b, &[]);
                assert!(
                    o.out.contains("JOBID"),
                    "squeue's table through the master:\n{}\n{}",
                    o.out,
                    o.err
                );
            }
            _ => panic!(
                "{} is neither run here nor listed in ELSEWHERE with the test that runs it:\n{}",
                b.name(),
                b.text
            ),
        }
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_cookbooks_examples_run_as_printed() {
    crate::needs_cluster!();
    let s = Session::new("cookbook-ex");
    // `slurm-runs --name 'train-*'` below finds this job's runs.
    let mut job = s.job_doc();
    job["job_name"] = json!(format!("train-cookbook-{}", std::process::id()));
    s.write_doc("job.json", &job);
    let mut container_job: Option<(Spawned, Block)> = None;
    for b in sh_blocks("docs/cookbook.md") {
        if covered_elsewhere(&b) {
            continue;
        }
        match (b.heading.as_str(), b.nth) {
            ("The whole flow in one pipeline", 0) => {
                let o = s.run(&b, &[]);
                assert_eq!(
                    report_of(&s.read_doc("report.json")).status.name(),
                    "PASSED",
                    "{}",
                    o.err
                );
            }
            ("The inner loop: edit, run again in a held allocation", 0) => {
                std::fs::create_dir_all(s.dir().join("tests")).unwrap();
                write(
                    &s.dir().join("tests/test_model.py"),
                    "def test_model():\n    assert 6 * 7 == 42\n",
                );
                let o = s.run(&b, &[]);
                assert!(
                    o.out.contains("1 passed"),
                    "pytest ran in the allocation, its output on stdout:\n{}",
                    o.both()
                );
                // The command's stdout alone in the file; the document where --doc said.
                assert_eq!(
                    std::fs::read_to_string(s.dir().join("answer.txt")).unwrap(),
                    "42\n",
                    "{}",
                    o.err
                );
                let ran = s.read_doc("ran.json");
                assert_eq!(
                    section_of::<shared::contract::schema::Allocation>(&ran, "allocation")
                        .last_exec
                        .unwrap()
                        .exit_code,
                    0,
                    "{ran}"
                );
                // Not part of the example: release the allocation.
                s.tool("slurm-alloc", &["down"], &s.read_doc("alloc.json"));
            }
            ("Containers, code outside the home directory, and getting into a running job", 0) => {
                // The job serves TensorBoard's port until told to stop, so the next example finds it running.
                let stop = stop_file(&s, "6006");
                let mut d = s.job_doc();
                d["command"] = json!(serving_command(6006, &stop));
                s.write_doc("job.json", &d);
                let started = s.spawn(&b);
                wait_for_file(&s.dir().join("submitted.json"), 300);
                let submitted = wait_for_doc(&s.dir().join("submitted.json"));
                wait_serving(&submitted, 6006);
                container_job = Some((started, b.clone()));
                s.write_doc("job.json", &job);
            }
            ("Containers, code outside the home directory, and getting into a running job", 1) => {
                let o = s.run_in_terminal(
                    &b,
                    &[("nvidia-smi", 127, "no GPU driver on the test nodes")],
                    person_leaves_the_shell,
                );
                let tb = s.read_doc("tb.json");
                assert_eq!(
                    section_of::<shared::contract::schema::Forward>(&tb, "forward").local_port,
                    6006,
                    "{}",
                    o.err
                );
                let cfg = std::fs::read_to_string(s.home().join(".ssh/slurm-jobs")).unwrap();
                assert!(cfg.contains("Host slurm-"), "{cfg}");
                assert!(o.out.contains("ATTACHED-42"), "{}", o.both());
                // The job is told to stop; the first example's watch then gives its verdict.
                touch_stop_file(&stop_file(&s, "6006"));
                let (mut first, block) = container_job.take().expect("the container job");
                first.wait();
                let o = finish(&block, &first.base, &[]);
                let report = s.read_doc("report.json");
                assert_eq!(report_of(&report).status.name(), "PASSED", "{}", o.err);
                assert!(
                    report_of(&report).container.is_some(),
                    "the image the job ran in: {report}"
                );
            }
            ("Dropping one tool into an existing script", 0) => {
                let tb = testbed();
                write(
                    &s.dir().join("my-existing-job.slurm"),
                    &format!(
                        "#!/bin/sh\n#SBATCH --account={} --partition={} --time=1 --output=/dev/null\nhostname\n",
                        tb.s("account"),
                        tb.s("partition")
                    ),
                );
                let o = s.run(&b, &[]);
                assert!(
                    o.out.contains("Submitted batch job"),
                    "{}\n{}",
                    o.out,
                    o.err
                );
            }
            ("A sweep: one document, many runs, one verdict table", 0) => {
                let o = s.run(&b, &[]);
                let swept = s.read_doc("swept.json");
                assert_eq!(report_of(&swept).status.name(), "PASSED", "{}", o.err);
                let tasks = report_of(&swept).tasks.unwrap_or_default();
                assert_eq!(tasks.len(), 4, "{swept}");
                assert_eq!(
                    tasks[3].excerpt,
                    ["training with lr=0.01 seed=2 as task 3 of 4"],
                    "{swept}"
                );
                assert!(o.out.contains("lr=0.01 seed=2"), "the table:\n{}", o.both());
                assert!(
                    o.err.contains("every task of the sweep passed"),
                    "{}",
                    o.err
                );
            }
            ("A sweep: one document, many runs, one verdict table", 1) => {
                let o = s.run(&b, &[]);
                let agg = s.read_doc("aggregated.json");
                let sweep_id = job_of(&s.read_doc("submitted.json")).job_id.unwrap();
                assert_eq!(
                    job_of(&agg).dependency,
                    Some(format!("afterok:{sweep_id}")),
                    "{}",
                    o.err
                );
                assert_eq!(report_of(&agg).status.name(), "PASSED", "{}", o.err);
            }
            (
                "Many runs on many clusters: the ledger, events, notifications, retries, results",
                0,
            ) => {
                let o = s.run(&b, &[]);
                assert!(
                    o.out.contains("train-cookbook"),
                    "the table lists the runs:\n{}",
                    o.out
                );
                let resumed: Value =
                    serde_json::from_str(o.out.lines().last().unwrap_or("{}")).unwrap_or(json!({}));
                assert_eq!(
                    report_of(&resumed).status.name(),
                    "PASSED",
                    "the resumed watch:\n{}",
                    o.out
                );
            }
            (
                "Many runs on many clusters: the ledger, events, notifications, retries, results",
                1,
            ) => {
                // A run still going when the example starts, and this person's other terminal
                // writing its events to events.jsonl.
                let got = s.webhook();
                let mut d = s.job_doc();
                d["command"] = json!("sleep 8");
                let submitted = s.tool("slurm-submit", &[], &s.synced(&d));
                s.write_doc("short.json", &submitted);
                let mut watch = Command::new(bin("slurm-watch"));
                watch
                    .env_clear()
                    .envs(s.env())
                    .current_dir(s.dir())
                    .args(["--events", "events.jsonl", "short.json"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                let mut watch = watch.spawn().unwrap();
                let mut started = s.spawn(&b);
                let calls = s.home().join("notify-send.calls");
                wait_for_text(&calls, "PASSED", 300);
                // --follow never ends on its own: the person ends it.
                let _ = Command::new("pkill")
                    .args([
                        "-TERM",
                        "-g",
                        &started.id().to_string(),
                        "-f",
                        "slurm-notify --follow",
                    ])
                    .status();
                started.wait();
                watch.wait().unwrap();
                finish(
                    &b,
                    &started.base,
                    &[("--follow", 143, "ended by the person: --follow never ends")],
                );
                let posted = got.lock().unwrap().clone();
                let id = job_of(&submitted).job_id.unwrap();
                assert!(
                    posted.iter().any(|e| e["job_id"] == id.as_str()),
                    "the webhook got the run's events: {posted:?}"
                );
            }
            ("My multi-node job hangs", 0) => {
                // Two nodes, four ranks; rank 3 stops at its step 3 while the others go on, and
                // rank 0's step 6 stands for the line a hung collective prints (a pattern
                // decides at once: the example's 600 s of silence would take 600 s here).
                let _stacks = crate::forensics::py_spy_in_place();
                let mut d = s.job_doc();
                crate::forensics::four_ranks(&mut d, "free", "");
                d["hang_pattern"] = json!("0: step 6");
                s.write_doc("run.json", &s.synced(&d));
                let o = s.run(
                    &b,
                    &[("slurm-watch", 1, "the job hung: HANG_DETECTED is exit 1")],
                );
                let report = s.read_doc("report.json");
                assert_eq!(
                    report_of(&report).status.name(),
                    "HANG_DETECTED",
                    "{}",
                    o.err
                );
                assert!(
                    o.out.contains("rank 3"),
                    "the diagnosis names the stopped rank:\n{}",
                    o.out
                );
                assert!(o.out.contains("\"node\""), "the nodes' table:\n{}", o.out);
                assert!(
                    o.out.contains("block_forever"),
                    "less showed the evidence file:\n{}",
                    o.out
                );
                assert!(
                    o.out.contains("\"top\": \"    "),
                    "the top frame of each rank:\n{}",
                    o.out
                );
            }
            ("My multi-node job hangs", 1) => {
                // A job that is still running: the same four ranks, rank 3 stopped, no pattern.
                let _stacks = crate::forensics::py_spy_in_place();
                let mut d = s.job_doc();
                crate::forensics::four_ranks(&mut d, "free", "");
                let submitted = s.tool("slurm-submit", &[], &s.synced(&d));
                s.write_doc("submitted.json", &submitted);
                let submitted_job = job_of(&submitted);
                let id = submitted_job.job_id.unwrap();
                let log = submitted_job.stdout_path.unwrap();
                // Rank 3 has stopped once the others are past their step 3.
                wait_for_text(Path::new(&log), "0: step 5", 180);
                let o = s.run(&b, &[]);
                assert!(
                    o.out.contains("rank 3"),
                    "the diagnosis names the stopped rank:\n{}\n{}",
                    o.out,
                    o.err
                );
                assert_eq!(
                    scontrol(&id).get("JobState").map(String::as_str),
                    Some("RUNNING"),
                    "untouched"
                );
                let _ = Command::new("scancel").arg(&id).status();
                wait_done(&id, 120);
            }
            ("Logging in behind two-factor MFA", 0) => {
                let o = s.run(&b, &[]);
                assert!(
                    typed_of(&s.read_doc("ready.json")).preflight.is_some(),
                    "{}",
                    o.err
                );
            }
            _ => panic!(
                "{} is neither run here nor listed in ELSEWHERE with the test that runs it:\n{}",
                b.name(),
                b.text
            ),
        }
    }
    assert!(
        container_job.is_none(),
        "the container example's job was never stopped"
    );
}

/// A document file another process is writing: once it parses with a job.
fn wait_for_doc(p: &Path) -> Value {
    wait_until(
        &|| format!("{} never held a submitted job", p.display()),
        300,
        || {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            serde_json::from_str::<Value>(text.trim())
                .ok()
                .filter(|v| v["job"]["job_id"].is_string())
        },
    )
}
