//! slurm-fetch: bring a job's results back (logs, profiles, checkpoints), only what is new or
//! changed, within a size cap, whatever the verdict.

use clap::Parser;
use shared::contract::schema::{Fetch, FetchedFile, Job};
use shared::remote::quote::Script;
use shared::remote::ssh::Ssh;
use shared::support::process::Received;
use shared::{Context, InputArg, Outcome, Result, ToolCli, ToolError};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Copy a job's results to this machine: its logs, and the files matching the patterns.
///
/// Patterns (--pattern, repeatable, and the document's `fetch_patterns`) are globs relative to
/// the job's own code tree on the cluster (job.tree, where it ran), or, prefixed `work:`, to its
/// work directory (where its logs are); `*` and `?` match across directories, as in
/// `find -path` (`*.pt` finds every .pt file below). The job's .out and .err logs always come (a
/// sweep's: every task's, and a folder per task, `tasks/<index>/`, with its logs and its
/// `params.json`; files the tasks write in their tree come back once, under `tree/`: have each
/// task write under its own path, e.g. `out/$SWEEP_INDEX/`).
/// Works on any verdict (failed, cancelled, timed out) and on a running job (what exists now).
///
/// Incremental: a file already here with the same size and modification time is not copied
/// again (copies keep the cluster's time). Bounded: when what would be copied is more than
/// --max-bytes, nothing is copied and the error names the largest files. Everything comes in at
/// most two ssh executions per run (one listing, one tar stream per directory), through the
/// pipeline's connection.
///
/// {reads}
/// (job from slurm-submit; slurm-watch's output works too. The default destination is
/// <local_dir>/fetched/<job id>, else the state directory's fetched/<cluster>-<job id>: never
/// the repository.)
///
/// {adds}
///
/// Exit: 0 copied (or nothing new); 2 bad input, or more than --max-bytes (nothing copied); 3 a
/// login is needed; 4 the listing or the copy failed, or the cluster sent what was not listed.
///
/// Example:
///   slurm-fetch -p 'profiles/*.nsys-rep' -p 'work:*.json' report.json > fetched.json
///   slurm-runs --json | jq -r 'select(.status=="FAILED") | .document' \
///     | xargs -n1 slurm-fetch >/dev/null
#[derive(Parser, Debug)]
#[command(name = "slurm-fetch", version, long_version = env!("SLURM_TOOLS_LONG_VERSION"), verbatim_doc_comment)]
struct Cli {
    #[command(flatten)]
    input: InputArg,

    /// A glob relative to the job's tree (`work:GLOB`: relative to its work directory); repeatable.
    #[arg(short = 'p', long = "pattern", value_name = "GLOB")]
    patterns: Vec<String>,

    /// The local directory (default: <local_dir>/fetched/<job id>, else
    /// ~/.local/state/slurm-tools/fetched/<cluster>-<job id>).
    #[arg(long, value_name = "DIR")]
    to: Option<PathBuf>,

    /// Copy at most this much in one run: bytes, or with K, M, G (powers of 1000) or KiB, MiB,
    /// GiB.
    #[arg(long, default_value = "1G", value_name = "SIZE")]
    max_bytes: String,

    /// Leave the job's logs out.
    #[arg(long)]
    no_logs: bool,
}

impl ToolCli for Cli {
    fn input(&self) -> &InputArg {
        &self.input
    }
    const SECTIONS: &'static [&'static str] = &["fetch"];

    fn reads() -> Vec<&'static str> {
        Input::reads()
    }
}

pub fn main() -> std::process::ExitCode {
    shared::contract::driver::run::<Cli>("slurm-fetch", fetch)
}

/// Where a file comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Base {
    Tree,
    Work,
}

impl Base {
    fn dir(self) -> &'static str {
        match self {
            Base::Tree => "tree",
            Base::Work => "work",
        }
    }
}

#[derive(Debug, Clone)]
struct Remote {
    base: Base,
    /// Relative to its base, no `./`: the name's bytes as the cluster has them (not always UTF-8).
    path: Vec<u8>,
    size: u64,
    mtime: u64,
}

fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" | "k" | "KB" | "kB" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => -1.0,
    };
    match num.parse::<f64>() {
        Ok(n) if mult > 0.0 && n >= 0.0 => Ok((n * mult) as u64),
        _ => Err(
            ToolError::bad_input(format!("--max-bytes {s:?} is not a size"))
                .with_field("--max-bytes")
                .with_hint("give bytes, or a number with K, M, G (e.g. 500M) or KiB, MiB, GiB"),
        ),
    }
}

/// A pattern a person gave: relative, no `..`, one line.
fn check_pattern(field: &str, p: &str) -> Result<(Base, String)> {
    let (base, glob) = match p.strip_prefix("work:") {
        Some(rest) => (Base::Work, rest),
        None => (Base::Tree, p),
    };
    let glob = glob.trim_start_matches("./");
    if glob.is_empty()
        || glob.starts_with('/')
        || glob.split('/').any(|c| c == "..")
        || glob.chars().any(|c| c.is_control())
    {
        return Err(ToolError::bad_input(format!(
            "{field} {} is not a relative glob",
            shared::remote::quote::preview(p)
        ))
        .with_field(field)
        .with_hint("give a glob relative to the job's tree (e.g. `outputs/*.json`) or `work:GLOB` for its work directory; no `..`, no absolute paths"));
    }
    Ok((base, glob.to_string()))
}

fn parent(p: &str) -> String {
    match p.rfind('/') {
        Some(0) => "/".into(),
        Some(i) => p[..i].to_string(),
        None => ".".into(),
    }
}

fn basename(p: &str) -> String {
    p.rsplit('/').next().unwrap_or(p).to_string()
}

/// The submitted job whose files are fetched, and its directories on the cluster.
struct Target {
    job: Job,
    id: String,
    out_log: String,
    /// Its work directory (its logs) and its own code tree.
    work: String,
    tree: String,
}

shared::document_input! {
    /// What slurm-fetch reads.
    struct Input {
        job: Option<Job> = section,
        fetch_patterns: Option<Vec<String>> = strings,
        local: shared::state::local_dirs::LocalDirs = part,
        cluster: shared::state::ledger::ClusterName = part,
        connection: shared::remote::ssh::Connection = part,
    }
}

impl Target {
    fn of(job: Option<Job>) -> Result<Target> {
        let job = job.ok_or_else(|| {
            shared::contract::doc::missing(
                "job",
                "run slurm-submit first: slurm-fetch copies a submitted job's files",
            )
        })?;
        let id = job.job_id.clone().ok_or_else(|| {
            shared::contract::doc::missing(
                "job",
                "the job section has no job_id (a dry run?); run slurm-submit",
            )
        })?;
        shared::slurm::check_job_id("job", &id)?;
        let out_log = job.stdout_path.clone().ok_or_else(|| {
            shared::contract::doc::missing("job", "the job section has no stdout_path")
        })?;
        let work = parent(&out_log);
        let tree = job.tree.clone().unwrap_or_else(|| {
            job.remote_repo_path
                .clone()
                .unwrap_or_else(|| parent(&work))
        });
        Ok(Target {
            job,
            id,
            out_log,
            work,
            tree,
        })
    }

    fn dir(&self, base: Base) -> &str {
        if base == Base::Tree {
            &self.tree
        } else {
            &self.work
        }
    }
}

fn fetch(cli: &Cli, ctx: &mut Context) -> Result<Outcome> {
    let input = Input::read(&ctx.doc)?;
    let t = Target::of(input.job)?;
    let max = parse_size(&cli.max_bytes)?;
    let (globs, patterns) = globs_of(cli, input.fetch_patterns, &t)?;
    let dest = match &cli.to {
        Some(d) => d.clone(),
        None => shared::state::local_dirs::fetch_dir(&input.local, &input.cluster.name(), &t.id),
    };
    let ssh = Ssh::connect(&input.connection)?;
    // 1. What is there; 2. what is new or changed.
    let remote = list_remote(ctx, &ssh, &t, &globs)?;
    let wanted = to_copy(&remote, &dest);
    check_size(&t.id, &wanted, max, &cli.max_bytes)?;
    // 3. Copy them: one tar stream per directory.
    let mut bytes = 0u64;
    for base in [Base::Tree, Base::Work] {
        let files: Vec<&Remote> = wanted.iter().copied().filter(|r| r.base == base).collect();
        if !files.is_empty() {
            bytes += copy_from(
                ctx,
                &ssh,
                &t,
                base,
                &files,
                &dest,
                max.saturating_sub(bytes),
            )?;
        }
    }
    let files = remote
        .iter()
        .map(|r| FetchedFile {
            path: format!("{}/{}", r.base.dir(), String::from_utf8_lossy(&r.path)),
            size: r.size,
            mtime: r.mtime,
        })
        .collect();
    ctx.note(format!(
        "job {}: {} file(s) copied ({}), {} already here, in {}",
        t.id,
        wanted.len(),
        shared::support::ui::human_bytes(bytes),
        remote.len() - wanted.len(),
        dest.display()
    ));
    let task_dirs = t
        .job
        .sweep_tasks
        .as_ref()
        .map(|tasks| task_folders(ctx, &dest, &t.job, tasks));
    let section = Fetch {
        task_dirs,
        job_id: t.id,
        destination: dest.display().to_string(),
        patterns,
        files,
        fetched: wanted.len() as u64,
        unchanged: (remote.len() - wanted.len()) as u64,
        bytes,
        max_bytes: max,
    };
    ctx.doc.set_section("fetch", &section);
    Ok(Outcome::Done)
}

/// Where to look (the job's tree or its work directory) and what for.
type Globs = Vec<(Base, String)>;

/// What to look for (checked: --pattern, then `fetch_patterns`, then the job's logs unless
/// --no-logs), and the patterns as given.
fn globs_of(cli: &Cli, from_doc: Option<Vec<String>>, t: &Target) -> Result<(Globs, Vec<String>)> {
    let from_doc = from_doc.unwrap_or_default();
    let mut globs = Vec::new();
    for p in &cli.patterns {
        globs.push(check_pattern("--pattern", p)?);
    }
    for p in &from_doc {
        globs.push(check_pattern("fetch_patterns", p)?);
    }
    let patterns: Vec<String> = cli.patterns.iter().cloned().chain(from_doc).collect();
    if !cli.no_logs {
        // A sweep's logs hold `%a` (the task's index): every task's logs, each named by its task.
        let every_task = |name: String| name.replace("%a", "*");
        globs.push((Base::Work, every_task(basename(&t.out_log))));
        if let Some(err) = &t.job.stderr_path {
            if parent(err) == t.work && *err != t.out_log {
                globs.push((Base::Work, every_task(basename(err))));
            }
        }
    }
    if globs.is_empty() {
        return Err(ToolError::bad_input(
            "nothing to fetch: no --pattern, no fetch_patterns, and --no-logs",
        )
        .with_hint("give --pattern GLOB (relative to the job's tree, or work:GLOB)"));
    }
    Ok((globs, patterns))
}

/// The files on the cluster that match: NUL-terminated records, so no name can forge an entry.
/// A missing directory or no match at all is said.
fn list_remote(
    ctx: &mut Context,
    ssh: &Ssh,
    t: &Target,
    globs: &[(Base, String)],
) -> Result<Vec<Remote>> {
    let params = Listing {
        id: t.id.clone(),
        tree: t.tree.clone(),
        work: t.work.clone(),
        globs: globs.to_vec(),
    };
    let (remote, missing) = shared::remote::run::<FetchList>(ssh, &params)?;
    shared::support::testhook::pause("fetch:listed");
    for b in missing {
        ctx.warn(format!(
            "the job's {} directory {} is not on the cluster (removed by the keep policy?)",
            b.dir(),
            t.dir(b)
        ));
    }
    if remote.is_empty() {
        ctx.warn(format!(
            "no file of job {} matched ({})",
            t.id,
            patterns_text(globs)
        ));
    }
    Ok(remote)
}

/// What `FetchList` lists: the job's directories and the globs under each.
struct Listing {
    id: String,
    tree: String,
    work: String,
    globs: Vec<(Base, String)>,
}

/// The files on the cluster that match (fetch-list.sh): NUL-terminated records, so no name can
/// forge an entry; and the job's directories that are not there.
struct FetchList;

impl shared::remote::Operation for FetchList {
    type Params = Listing;
    type Reply = (Vec<Remote>, Vec<Base>);
    const DEADLINE: Duration = Duration::from_secs(300);

    fn script(l: &Listing) -> Result<Script> {
        let mut s = Script::new();
        s.assign("tree", &l.tree)?;
        s.assign("work", &l.work)?;
        s.raw(shared::remote::FETCH_LIST);
        for (base, glob) in &l.globs {
            s.raw("list ")
                .arg(match base {
                    Base::Tree => "T",
                    Base::Work => "W",
                })?
                .raw(match base {
                    Base::Tree => " \"$tree\" ",
                    Base::Work => " \"$work\" ",
                })
                .arg(glob)?
                .raw("\n");
        }
        Ok(s)
    }

    fn reply(l: &Listing, out: &shared::support::process::Output) -> Result<Self::Reply> {
        if !out.success() {
            return Err(ToolError::remote(format!(
                "listing job {}'s files on the cluster failed ({})",
                l.id,
                out.exit_text()
            ))
            .with_command(out.record()));
        }
        Ok(parse_listing(&out.stdout))
    }
}

/// The files not already in `dest` with the same size and modification time.
fn to_copy<'a>(remote: &'a [Remote], dest: &Path) -> Vec<&'a Remote> {
    let unchanged = |r: &Remote| {
        std::fs::metadata(dest.join(r.base.dir()).join(os_path(&r.path))).is_ok_and(|m| {
            m.len() == r.size
                && m.modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .is_some_and(|d| d.as_secs() == r.mtime)
        })
    };
    remote.iter().filter(|r| !unchanged(r)).collect()
}

/// Nothing is copied when the files to copy make more than --max-bytes: the largest are named.
fn check_size(id: &str, wanted: &[&Remote], max: u64, max_text: &str) -> Result<()> {
    let total: u64 = wanted.iter().map(|r| r.size).sum();
    if total <= max {
        return Ok(());
    }
    let mut big = wanted.to_vec();
    big.sort_by_key(|r| std::cmp::Reverse(r.size));
    let list: Vec<String> = big
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "{}:{} ({})",
                r.base.dir(),
                String::from_utf8_lossy(&r.path),
                shared::support::ui::human_bytes(r.size)
            )
        })
        .collect();
    Err(ToolError::bad_input(format!(
        "job {id}: {} file(s) to copy make {}, more than --max-bytes {} ({}); nothing was copied. Largest: {}",
        wanted.len(),
        shared::support::ui::human_bytes(total),
        max_text,
        shared::support::ui::human_bytes(max),
        list.join(", ")
    ))
    .with_field("--max-bytes")
    .with_hint("raise --max-bytes if you want all of it, or narrow --pattern to the files you need"))
}

/// Copy `files` of one of the job's directories into `dest/<dir>/` in one tar stream, at most
/// `budget` bytes: the bytes copied.
fn copy_from(
    ctx: &mut Context,
    ssh: &Ssh,
    t: &Target,
    base: Base,
    files: &[&Remote],
    dest: &Path,
    budget: u64,
) -> Result<u64> {
    let id = &t.id;
    let into = dest.join(base.dir());
    std::fs::create_dir_all(&into).map_err(|e| {
        ToolError::bad_input(format!("cannot create {}: {e}", into.display()))
            .with_hint("choose a writable destination with --to DIR")
    })?;
    let mut s = Script::new();
    s.assign("dir", t.dir(base))?;
    s.raw(shared::remote::FETCH_COPY);
    ctx.note(format!(
        "copying {} file(s), {}, from the job's {} to {}",
        files.len(),
        shared::support::ui::human_bytes(files.iter().map(|f| f.size).sum()),
        base.dir(),
        into.display()
    ));
    // The names go on stdin, NUL-separated: no argument-length limit, any byte but NUL.
    let mut list = Vec::new();
    for f in files {
        list.extend_from_slice(&f.path);
        list.push(0);
    }
    let mut running = ssh.start_script(&s)?;
    let sent = running.send(&list);
    running.close_stdin();
    let mut reader = Stream {
        running: Some(running),
        buf: Vec::new(),
        at: 0,
    };
    let listed: std::collections::HashSet<&[u8]> =
        files.iter().map(|f| f.path.as_slice()).collect();
    let mut got = 0u64;
    let result = sent.and_then(|()| unpack(&mut reader, &into, &listed, budget, &mut got));
    let out = reader.finish();
    if let Err(e) = result {
        return Err(ToolError::remote(format!(
            "copying job {id}'s files from its {}: {e}",
            base.dir()
        ))
        .with_hint("the connection or the cluster's disk may have failed; rerun: files already copied are not copied again")
        .with_command(out.record()));
    }
    // GNU tar exits 1 when a file changed while it was read (a job still writing): the copy
    // is what the file held then.
    match out.code {
        Some(0) => {}
        Some(1) => ctx.warn(format!(
            "a file changed on the cluster while it was copied (the job still writes it?): {}",
            out.stderr_tail.trim()
        )),
        _ => {
            return Err(ToolError::remote(format!(
                "tar on the cluster failed ({}) while copying job {id}'s files",
                out.exit_text()
            ))
            .with_command(out.record()))
        }
    }
    Ok(got)
}

/// A sweep: a folder per task, `tasks/<index>/`, with that task's logs (linked to the copies in
/// `work/`, else copied) and its parameters (`params.json`). The folders, relative to `dest`.
fn task_folders(
    ctx: &Context,
    dest: &Path,
    job: &Job,
    tasks: &[shared::contract::schema::SweepTask],
) -> Vec<String> {
    let logs: Vec<String> = [job.stdout_path.as_deref(), job.stderr_path.as_deref()]
        .into_iter()
        .flatten()
        .map(basename)
        .collect();
    let mut dirs = Vec::new();
    for t in tasks {
        let rel = format!("tasks/{}", t.index);
        let dir = dest.join(&rel);
        let made = std::fs::create_dir_all(&dir).and_then(|()| {
            let params = serde_json::Value::Object(t.params.clone()).to_string();
            std::fs::write(dir.join("params.json"), params + "\n")?;
            for name in &logs {
                let name = name.replace("%a", &t.index.to_string());
                let from = dest.join("work").join(&name);
                if !from.is_file() {
                    continue;
                }
                let to = dir.join(&name);
                let _ = std::fs::remove_file(&to);
                if std::fs::hard_link(&from, &to).is_err() {
                    std::fs::copy(&from, &to)?;
                }
            }
            Ok(())
        });
        match made {
            Ok(()) => dirs.push(rel),
            Err(e) => ctx.warn(format!(
                "could not make the folder of task {} ({}): {e}",
                t.index,
                dir.display()
            )),
        }
    }
    dirs
}

fn patterns_text(globs: &[(Base, String)]) -> String {
    globs
        .iter()
        .map(|(b, g)| format!("{}:{g}", b.dir()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The remote tar's stdout as a reader.
/// The listing's records: the files (each once), and the bases whose directory is missing.
fn parse_listing(stdout: &[u8]) -> (Vec<Remote>, Vec<Base>) {
    let mut remote: Vec<Remote> = Vec::new();
    let mut seen: std::collections::HashSet<(Base, Vec<u8>)> = std::collections::HashSet::new();
    let mut missing = Vec::new();
    for rec in stdout.split(|b| *b == 0) {
        let base_of = |b: &[u8]| match b {
            b"T" => Some(Base::Tree),
            b"W" => Some(Base::Work),
            _ => None,
        };
        if let Some(b) = rec.strip_prefix(b"NODIR ").and_then(base_of) {
            missing.push(b);
            continue;
        }
        let mut f = rec.splitn(4, |b| *b == b' ');
        let (Some(b), Some(size), Some(mtime), Some(name)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let num = |t: &[u8]| -> Option<u64> {
            let t = std::str::from_utf8(t).ok()?;
            // GNU find's %T@ has a fraction; stat's %Y has none.
            t.split('.').next()?.parse().ok()
        };
        let (Some(base), Some(size), Some(mtime), Some(path)) =
            (base_of(b), num(size), num(mtime), name.strip_prefix(b"./"))
        else {
            continue;
        };
        // Relative, below the base: no `..` component, not empty.
        if path.is_empty()
            || path
                .split(|b| *b == b'/')
                .any(|c| c == b".." || c.is_empty())
        {
            continue;
        }
        if seen.insert((base, path.to_vec())) {
            remote.push(Remote {
                base,
                path: path.to_vec(),
                size,
                mtime,
            });
        }
    }
    (remote, missing)
}

/// A cluster path's bytes as a local relative path.
fn os_path(p: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(std::ffi::OsStr::from_bytes(p))
}

/// Unpack the tar stream into `into`, taking only what was listed: regular files whose path is
/// in `listed`; anything else (a symlink or a directory swapped in since the listing, a name not
/// asked for) is refused and stops the copy. At most `room` bytes: the cap is counted on the bytes
/// actually streamed, not on the listing. Modes arrive without group or other write.
fn unpack(
    reader: &mut Stream,
    into: &std::path::Path,
    listed: &std::collections::HashSet<&[u8]>,
    room: u64,
    got: &mut u64,
) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_mtime(true);
    archive.set_mask(0o022);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path_bytes().into_owned();
        if !listed.contains(path.as_slice()) {
            return Err(std::io::Error::other(format!(
                "refused {}: not one of the listed files",
                String::from_utf8_lossy(&path)
            )));
        }
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(std::io::Error::other(format!(
                "refused {}: it is no longer a regular file on the cluster (a {:?} now)",
                String::from_utf8_lossy(&path),
                entry.header().entry_type()
            )));
        }
        *got += entry.header().size()?;
        if *got > room {
            return Err(std::io::Error::other(format!(
                "the files grew on the cluster past --max-bytes while they were copied (at {})",
                std::ffi::OsStr::from_bytes(&path).to_string_lossy()
            )));
        }
        if !entry.unpack_in(into)? {
            return Err(std::io::Error::other(format!(
                "refused an entry outside the destination: {}",
                String::from_utf8_lossy(&path)
            )));
        }
    }
    Ok(())
}

struct Stream {
    running: Option<shared::support::process::Running>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.buf.len() {
            let Some(r) = self.running.as_mut() else {
                return Ok(0);
            };
            match r.recv(Duration::from_secs(600)) {
                Received::Data(b) => {
                    self.buf = b;
                    self.at = 0;
                }
                Received::Eof => return Ok(0),
                Received::TimedOut => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no data from the cluster for 600 s",
                    ))
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Stream {
    fn finish(mut self) -> shared::support::process::Output {
        let r = self.running.take().expect("finished once");
        r.close_collect(Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_is_nul_separated_so_no_name_forges_an_entry() {
        // A directory named "x\nT 1 1 ." holding "s/id_rsa": one record, its real path.
        let out = b"T 5 1700000000.5 ./x\nT 1 1 ./s/id_rsa\0W 3 17 ./a b\0NODIR T\0T 1 1 ./../up\0T 2 2 ./\xff\0T 5 1 ./x\nT 1 1 ./s/id_rsa\0";
        let (r, missing) = parse_listing(out);
        assert_eq!(missing, vec![Base::Tree]);
        let paths: Vec<&[u8]> = r.iter().map(|x| x.path.as_slice()).collect();
        assert_eq!(
            paths,
            vec![&b"x\nT 1 1 ./s/id_rsa"[..], &b"a b"[..], &b"\xff"[..]]
        );
        assert_eq!(r[0].size, 5);
        assert_eq!(r[0].mtime, 1_700_000_000);
    }

    #[test]
    fn sizes_and_patterns() {
        assert_eq!(parse_size("100M").unwrap(), 100_000_000);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert!(parse_size("lots").is_err());
        assert!(check_pattern("--pattern", "../x").is_err());
        assert!(check_pattern("--pattern", "/etc/passwd").is_err());
        assert_eq!(
            check_pattern("--pattern", "work:*.log").unwrap(),
            (Base::Work, "*.log".into())
        );
    }
}
