//! The remote side: everything that reaches the cluster or is decided about it.
//!
//! - [`ssh`]: the ssh argv builder (the only one) and the one way to run a remote script.
//! - [`control_socket`]: checks of the ControlMaster socket path (length, owner).
//! - [`quote`]: the only place a value becomes shell text ([`quote::Script`]).
//! - [`exit`]: the remote scripts' exit codes, named once for the shell and the Rust.
//! - [`layout`]: the remote layout (root, `remote_repo_path`, `remote_work_dir`), decided once.
//! - [`operation`]: one remote execution as types (its params, its reply) and [`run`].
//! - [`running`]: the running-job check and node choice attach, forward and exec share.
//! - [`trees`]: each job's own code tree on the cluster (made and pruned at submission).
//! - [`forensics`]: a hung job's evidence, collected per node.
//! - [`script_check`]: the static checks of every generated remote script (shellcheck, sh -n).
//!
//! This file itself: the shell the tools send to the cluster, kept as real `.sh` files in `sh/` (pulled in with
//! `include_str!`, the way ripgrep keeps its completion scripts), so shellcheck and four shells'
//! `sh -n` check them in the quick tier without a cluster. Each file starts with a header: the
//! variables it expects (assigned before it with [`crate::remote::quote::Script::assign`], quoted once),
//! what it reads, and the reply lines it prints.
//!
//! Every script lives here: the Rust side only assigns values (each quoted once) and adds
//! one-line calls of the functions the files define (a test keeps it so).

pub mod control_socket;
pub mod exit;
pub mod forensics;
pub mod layout;
pub mod operation;
pub mod quote;
pub mod running;
pub mod script_check;
pub mod ssh;
pub mod trees;

pub use operation::{execute, run, run_sending, JobNodes, Operation, Scancel, UsageQuery};

/// The reply lines a remote script prints, `TAG value` (a bare `TAG` has the value ""): the one
/// reader of them. A tag matches the whole first word only (`CREATED` never matches
/// `CREATEDX 1`).
#[derive(Clone, Copy)]
pub struct Tagged<'a> {
    text: &'a str,
}

impl<'a> Tagged<'a> {
    pub fn of(text: &'a str) -> Tagged<'a> {
        Tagged { text }
    }

    /// The value of every line tagged `tag`, in order.
    pub fn all(self, tag: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.text.lines().filter_map(move |l| {
            if l == tag {
                Some("")
            } else {
                l.strip_prefix(tag)?.strip_prefix(' ')
            }
        })
    }

    /// The value of the first line tagged `tag`.
    pub fn first(self, tag: &'a str) -> Option<&'a str> {
        self.all(tag).next()
    }

    /// Whether some line is tagged `tag`.
    pub fn has(self, tag: &'a str) -> bool {
        self.first(tag).is_some()
    }
}

/// The one lock of the remote steps that run one at a time (set up with [`Lock::define`]).
const LOCK: &str = include_str!("sh/lock.sh");

/// A remote lock and its policy (`sh/lock.sh`): `take_lock`, `release_lock`, `keep_lock`,
/// `release_on_failure`.
pub struct Lock<'a> {
    /// The lock directory (its parent must exist when `take_lock` runs).
    pub dir: String,
    /// This run's own name: the lock is ours while its owner file starts with it.
    pub token: &'a str,
    /// How long `take_lock` waits for another run's lock.
    pub wait_secs: u64,
    /// After how many minutes a lock is taken to be a killed run's and broken.
    pub stale_minutes: u32,
    /// A lock whose owner process is gone from this host is broken at once; only for a lock
    /// that never outlives the execution that took it.
    pub by_pid: bool,
    /// The exit code when the lock is still held after the wait, and when it cannot be made.
    pub exit_wait: i32,
    pub exit_failed: i32,
}

impl<'a> Lock<'a> {
    /// The remote clone's lock, beside it: held across the executions of one sync (never by
    /// pid), broken after 30 minutes.
    pub fn of_clone(
        repo: &str,
        token: &'a str,
        wait_secs: u64,
        exit_wait: i32,
        exit_failed: i32,
    ) -> Lock<'a> {
        Lock {
            dir: format!(
                "{}.slurm-tools-sync.lock",
                repo.strip_suffix('/').unwrap_or(repo)
            ),
            token,
            wait_secs,
            stale_minutes: 30,
            by_pid: false,
            exit_wait,
            exit_failed,
        }
    }

    /// Assign the policy and define the lock's functions.
    pub fn define(&self, s: &mut crate::remote::quote::Script) -> crate::Result<()> {
        s.assign("lock", &self.dir)?;
        s.assign("token", self.token)?;
        s.assign("lock_wait", &self.wait_secs.to_string())?;
        s.assign("lock_stale", &self.stale_minutes.to_string())?;
        s.assign("lock_by_pid", if self.by_pid { "yes" } else { "no" })?;
        s.assign("lock_exit_wait", &self.exit_wait.to_string())?;
        s.assign("lock_exit_failed", &self.exit_failed.to_string())?;
        s.raw(LOCK);
        Ok(())
    }
}

/// slurm-init's probe: user, home, scratch, Slurm version, associations, partitions.
pub const INIT_PROBE: &str = include_str!("sh/init-probe.sh");

/// slurm-fetch's listing: `list BASE DIR GLOB`, NUL-terminated records.
pub const FETCH_LIST: &str = include_str!("sh/fetch-list.sh");

/// slurm-fetch's copy: the NUL-separated paths on stdin, a tar stream on stdout.
pub const FETCH_COPY: &str = include_str!("sh/fetch-copy.sh");

/// The image cache of both runtimes: `resolve_digest`, `fill_cache`, `mark_use`, `prune_images`.
pub const IMAGE_CACHE: &str = include_str!("sh/image-cache.sh");

/// A job's container on Apptainer: the image cache (one SIF per content digest, pulled under a
/// lock), then `apptainer exec` of the arguments. Sent after [`IMAGE_CACHE`].
pub const APPTAINER_RUN: &str = include_str!("sh/apptainer-run.sh");

/// slurm-submit on pyxis: a registry image imported with enroot on the login node once per
/// content digest into the image cache. Sent after [`IMAGE_CACHE`].
pub const PYXIS_IMPORT: &str = include_str!("sh/pyxis-import.sh");

/// slurm-alloc up on Apptainer: the launcher written, the image checked on every node, the
/// allocation's instance started and held on every node, the packages installed once (the
/// packages are the script's arguments).
pub const ALLOC_APPTAINER_UP: &str = include_str!("sh/alloc-apptainer-up.sh");

/// slurm-alloc down on Apptainer: `stop_instances JOB NODES INSTANCE`.
pub const ALLOC_INSTANCE_STOP: &str = include_str!("sh/alloc-instance-stop.sh");

/// tmux on the login node: `tmux_start SESSION COMMAND` (tried again when it meets a tmux
/// server that is exiting), `has_session SESSION` and `kill_session SESSION` (exact names).
pub const TMUX: &str = include_str!("sh/tmux.sh");

/// Hang forensics on one node of a running job: its task processes, their stacks.
pub const FORENSICS_COLLECT: &str = include_str!("sh/forensics-collect.sh");

/// Hang forensics from the login node: the collector on every node of the job, bounded.
pub const FORENSICS_RUN: &str = include_str!("sh/forensics-run.sh");

/// Each job's own code tree: `make_tree`, `prune_trees` (needs [`UNTRACKED_STORE`]).
pub const JOB_TREE: &str = include_str!("sh/job-tree.sh");

/// Each snapshot's own untracked files, kept for its jobs' trees: where they are
/// (`untracked_store`) and `copy_listed0 FROM TO`.
pub const UNTRACKED_STORE: &str = include_str!("sh/untracked-store.sh");

/// After an untracked sync: `keep_untracked` (needs [`UNTRACKED_STORE`] first).
pub const UNTRACKED_KEEP: &str = include_str!("sh/untracked-keep.sh");

/// slurm-watch: `pending_facts JOB REASON`, what decides why a pending job waits.
pub const PENDING_FACTS: &str = include_str!("sh/pending-facts.sh");

/// slurm-resolve --place: one cluster's estimate, limits and free GPUs for a request (its sbatch
/// arguments are the script's). Sent after [`PENDING_FACTS`] (its `qos_facts`).
pub const PLACE_PROBE: &str = include_str!("sh/place-probe.sh");

/// Past jobs' usage from accounting (sacct, steps included), for sizing from history.
pub const USAGE_QUERY: &str = include_str!("sh/usage-query.sh");

/// slurm-watch --race: `race_state JOB`, `race_cancel JOB`.
pub const RACE: &str = include_str!("sh/race.sh");

/// A first sync's clone for a person watching: `clone_progress_start DIR`, `clone_progress_stop
/// DIR` (progress lines behind [`crate::support::process::PROGRESS`]).
pub const CLONE_PROGRESS: &str = include_str!("sh/clone-progress.sh");

/// Cluster-side changes in the remote clone: `cluster_changes`.
pub const CLONE_CHANGES: &str = include_str!("sh/clone-changes.sh");

/// `commit_of DIR`: the commit a checkout has, read from its files where that is enough.
pub const HEAD_OF: &str = include_str!("sh/head-of.sh");

/// A re-sync's one execution: the snapshot's new objects unpacked from stdin, against the
/// snapshot the clone is at (needs the clone's lock; [`TRACKED_CHECKOUT`] follows).
pub const TRACKED_DELTA: &str = include_str!("sh/tracked-delta.sh");

/// An unchanged re-sync's one execution: is the clone as this machine's last sync left it?
/// (needs [`CLONE_CHANGES`] and the clone's lock).
pub const TRACKED_UNCHANGED: &str = include_str!("sh/tracked-unchanged.sh");

/// The unchanged look's second part: the re-sync in the same execution, or nothing (needs the
/// clone's lock taken; [`TRACKED_UNCHANGED`] before it).
pub const TRACKED_CONTINUE: &str = include_str!("sh/tracked-continue.sh");

/// The re-sync in the unchanged look's execution: what the look found clean is not looked at
/// again (`clean_known`).
pub const TRACKED_AFTER_LOOK: &str = include_str!("sh/tracked-after-look.sh");

/// slurm-watch --retry: the node list of `job`, from accounting, else scontrol.
pub const JOB_NODES: &str = include_str!("sh/job-nodes.sh");

/// slurm-watch on a sweep: the serving loop of a whole job array's polls.
pub const ARRAY_POLL: &str = include_str!("sh/array-poll.sh");

/// slurm-submit's sweep: the array's last index against the cluster's MaxArraySize.
pub const ARRAY_SIZE: &str = include_str!("sh/array-size.sh");

/// The tracked sync's common start: LFS pointers only, the lock's token.
pub const TRACKED_SETUP: &str = include_str!("sh/tracked-setup.sh");

/// The tracked sync's remote clone: made when missing, refused when it holds another repository.
pub const TRACKED_CLONE: &str = include_str!("sh/tracked-clone.sh");

/// The tracked sync's checkout: cluster-side changes stashed, the snapshot checked out.
pub const TRACKED_CHECKOUT: &str = include_str!("sh/tracked-checkout.sh");

/// The tracked sync's submodules: `ensure_module`, `sub_checkout`.
pub const TRACKED_MODULES: &str = include_str!("sh/tracked-modules.sh");

/// The tracked sync's Git LFS content: `lfs_need`, `lfs_checkout`.
pub const TRACKED_LFS: &str = include_str!("sh/tracked-lfs.sh");

/// The untracked sync's first part: the manifest under the clone's lock, then the second part.
pub const UNTRACKED_MANIFEST: &str = include_str!("sh/untracked-manifest.sh");

/// In front of the untracked sync's second part when it is sent without waiting for the
/// manifest: a manifest there after all stops it (`NOT_FRESH`).
pub const UNTRACKED_FRESH: &str = include_str!("sh/untracked-fresh.sh");

/// The untracked sync's second part: `delete_gone`, `make_dirs_way`, `extract_untracked`.
pub const UNTRACKED_APPLY: &str = include_str!("sh/untracked-apply.sh");

/// A fused conversation's opening: the manifest when asked for, then the framed rest.
pub const FUSED_OPENING: &str = include_str!("sh/fused-opening.sh");

/// A fused conversation's parts: `fused_check_kept`, `fused_part`, `fused_hand_over`.
pub const FUSED_PARTS: &str = include_str!("sh/fused-parts.sh");

/// slurm-alloc up: reuse an allocation of this name, else salloc held in tmux.
pub const ALLOC_UP: &str = include_str!("sh/alloc-up.sh");

/// slurm-alloc down: instances, containers, files, session and the job released.
pub const ALLOC_DOWN: &str = include_str!("sh/alloc-down.sh");

/// slurm-submit's upload and submission, idempotent per tag: `find_job`, `submit_prepare`,
/// `submit_batch`, `submit_in_tmux`.
pub const SUBMIT: &str = include_str!("sh/submit.sh");

/// slurm-ssh-preflight's look at the login node: key=value lines.
pub const PREFLIGHT_CHECK: &str = include_str!("sh/preflight-check.sh");

/// slurm-watch's serving loop: request lines in, one poll's reply each.
pub const WATCH_POLL: &str = include_str!("sh/watch-poll.sh");

/// slurm-runs' look at one cluster: squeue for every id, sacct for the rest.
pub const RUNS_QUERY: &str = include_str!("sh/runs-query.sh");

/// Before reaching into a job: `check_running`, `pick_node [NODE]`.
pub const JOB_RUNNING: &str = include_str!("sh/job-running.sh");

/// slurm-forward's port on the job's node, and whether it answers there.
pub const FORWARD_PORT: &str = include_str!("sh/forward-port.sh");

/// slurm-attach --ide: the person's own sshd set up for the job's node.
pub const ATTACH_IDE: &str = include_str!("sh/attach-ide.sh");

/// `first_host`: the first host of the job, with or without a Slurm client.
pub const FIRST_HOST: &str = include_str!("sh/first-host.sh");

/// `chunk WHAT PATH OFFSET`: a log's new bytes, for slurm-watch's polls.
pub const LOG_CHUNK: &str = include_str!("sh/log-chunk.sh");

#[cfg(test)]
mod tests {
    #[test]
    fn tagged_lines_are_found_by_their_whole_tag() {
        let text = "MAXTIME 04:00:00\nSESSION slurm-tools-x\nCREATED 42\nNO_SSHD\nCREATED 43\n";
        let t = super::Tagged::of(text);
        assert_eq!(t.first("CREATED"), Some("42"));
        assert_eq!(t.all("CREATED").collect::<Vec<_>>(), ["42", "43"]);
        assert_eq!(t.first("MAXTIME"), Some("04:00:00"));
        assert_eq!(t.first("REUSE"), None);
        assert_eq!(t.first("NO_SSHD"), Some(""));
        assert!(t.has("NO_SSHD") && !t.has("NO_SSH"));
        assert_eq!(super::Tagged::of("CREATEDX 1\n").first("CREATED"), None);
    }

    /// The Rust side never carries a script of its own: no raw string literal given to
    /// `Script::raw`, and no shell constant over one line, outside tests.
    #[test]
    fn no_shell_text_lives_in_rust_files() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        let mut dirs = vec![root.join("shared/src"), root.join("tools")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 20, "{}", root.display());
        let mut found = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("\n#[cfg(test)]").next().unwrap_or(&text);
            for (n, line) in code.lines().enumerate() {
                let t = line.trim_start();
                let raw_literal = t.contains(".raw(r\"") || t.contains(".raw(r#\"");
                let long_const = t.starts_with("const ") || t.starts_with("pub const ");
                let long_const = long_const
                    && t.contains(": &str = r")
                    && !t.ends_with("\";")
                    && !t.ends_with("\"#;");
                if raw_literal || long_const {
                    found.push(format!("{}:{}: {t}", f.display(), n + 1));
                }
                // `s.raw(` with the literal on the next line.
                if t.ends_with(".raw(") {
                    let next = code.lines().nth(n + 1).unwrap_or("").trim_start();
                    if next.starts_with("r\"") || next.starts_with("r#\"") {
                        found.push(format!("{}:{}: {t} {next}", f.display(), n + 1));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "shell text in Rust files (move it into shared/src/remote/sh/):\n{}",
            found.join("\n")
        );
    }

    /// The clone's policy, run for real in sh: a lock held across executions is never broken for
    /// its pid; another run's lock is waited for and named; `keep_lock` and `release_lock` touch
    /// only our own.
    /// `body` after the clone lock of `repo` (for `token`, waiting `wait` seconds), run in sh:
    /// its exit code and stdout.
    fn with_clone_lock(
        repo: &std::path::Path,
        token: &str,
        wait: u64,
        body: &'static str,
    ) -> (Option<i32>, String) {
        let mut s = crate::remote::quote::Script::new();
        super::Lock::of_clone(repo.to_str().unwrap(), token, wait, 10, 15)
            .define(&mut s)
            .unwrap();
        s.raw(body);
        crate::remote::script_check::assert_clean("clone-lock", s.as_str());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(s.as_str())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), said)
    }

    #[test]
    fn the_clone_lock_waits_names_the_holder_and_touches_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        let run = |token: &str, body: &'static str| with_clone_lock(&repo, token, 1, body);
        let lock = dir.path().join("repo.slurm-tools-sync.lock");
        // Taken in one execution, kept in the next (its process is gone by then).
        assert_eq!(
            run("run-a", "take_lock\necho TOOK\n"),
            (Some(0), "TOOK\n".into())
        );
        let owner = std::fs::read_to_string(lock.join("owner")).unwrap();
        assert!(owner.starts_with("run-a "), "{owner}");
        assert_eq!(
            run("run-a", "keep_lock 19\necho KEPT\n"),
            (Some(0), "KEPT\n".into())
        );
        // Another run waits its second, names the holder, exits with the wait's code; it can
        // neither keep nor release the lock.
        let (code, said) = run("run-b", "take_lock\n");
        assert_eq!(code, Some(10), "{said}");
        assert!(
            said.starts_with("LOCKED ") && said.contains("run-a"),
            "{said}"
        );
        let (code, said) = run("run-b", "keep_lock 19\n");
        assert_eq!((code, said.as_str()), (Some(19), "LOST_LOCK\n"));
        run("run-b", "release_lock\n");
        assert!(lock.exists(), "another run released our lock");
        run("run-a", "release_lock\n");
        assert!(!lock.exists());
        // The holder releases while this run waits, its owner file first (as `rm -rf` does):
        // the wait names the holder seen before, not "another run".
        std::fs::create_dir(&lock).unwrap();
        std::fs::write(lock.join("owner"), "run-c 1 elsewhere\n").unwrap();
        let releaser = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(500));
                std::fs::remove_file(lock.join("owner")).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(700));
                std::fs::remove_dir(&lock).unwrap();
            })
        };
        let (code, said) = with_clone_lock(&repo, "run-d", 10, "take_lock\n");
        releaser.join().unwrap();
        assert_eq!(code, Some(0), "{said}");
        assert!(
            said.starts_with("WAITED ") && said.trim_end().ends_with(" run-c 1 elsewhere"),
            "{said}"
        );
        std::fs::remove_dir_all(&lock).unwrap();
        // Cannot be made (its parent is a file): said at once, with its own code.
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let (code, said) = with_clone_lock(&dir.path().join("f/repo"), "t", 5, "take_lock\n");
        assert_eq!(code, Some(15));
        assert!(said.starts_with("LOCK_FAILED "), "{said}");
    }

    #[test]
    fn every_script_file_passes_the_static_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/remote/sh");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "sh") {
                let text = std::fs::read_to_string(&p).unwrap();
                let name = p.file_stem().unwrap().to_string_lossy().into_owned();
                crate::remote::script_check::assert_clean(&name, &text);
                n += 1;
            }
        }
        assert!(n >= 2, "the script files are in {}", dir.display());
    }
}
