//! Many runs at once: whole pipelines from several checkouts of one repository (two clones and
//! a linked worktree), started together into the same cluster clone, round after round with
//! edits between rounds. Every run passes and runs exactly its own checkout's code.

use crate::fixture::*;
use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// One whole pipeline (both syncs, submit, watch) on `doc`; the watch's document.
/// The pipeline's last document and every tool's stderr.
fn whole_pipeline(doc: &Value) -> Result<(Value, String), String> {
    let mut d = doc.clone();
    let mut said = String::new();
    for (tool_name, args) in [
        ("slurm-sync-tracked", &[][..]),
        ("slurm-sync-untracked", &[][..]),
        ("slurm-submit", &[][..]),
        ("slurm-watch", &["--interval", "1"][..]),
    ] {
        let mut r = run(tool_name, args, &d);
        // A test-bed artifact, not the tools': the origins here are local directories that this
        // machine's pushes (as root) write and the cluster user's clone reads, so a clone can
        // meet another pipeline's push quarantine (`objects/tmp_objdir-incoming-*`, 0700, root's)
        // for the moment that push lasts. A real origin is a server, whose quarantine nobody
        // else's clone walks. Such a clone is tried once more.
        if r.code != 0 && r.stderr.contains("tmp_objdir-incoming") {
            std::thread::sleep(std::time::Duration::from_secs(1));
            r = run(tool_name, args, &d);
        }
        if r.code != 0 {
            return Err(format!("{tool_name} exited {}: {}", r.code, r.stderr));
        }
        said.push_str(&r.stderr);
        d = r.doc;
    }
    Ok((d, said))
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn eight_pipelines_at_once_from_two_clones_and_a_worktree_each_run_their_own_code() {
    crate::needs_cluster!();
    let fx = Fixture::new("concurrent");
    // A second clone of the same origin, and a linked worktree of the first.
    let other = tempdir();
    let clone_b = other.path().join("b");
    clone_repo(&fx.origin, &clone_b, &[]);
    let worktree = other.path().join("wt");
    git(
        &fx.local,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "wt",
            worktree.to_str().unwrap(),
        ],
    );
    let checkouts: [(&str, PathBuf); 3] = [
        ("a", fx.local.clone()),
        ("b", clone_b.clone()),
        ("w", worktree.clone()),
    ];
    let mut base = fx.doc();
    base["account"] = json!(testbed().s("account"));
    base["partition"] = json!(testbed().s("partition"));
    base["time_limit"] = json!("00:05:00");
    base["recipe"] = json!("single");
    base["command"] = json!("cat src/a.py notes/untracked.txt; ls only-*.txt");
    let before_refs = fx.origin_refs();
    for round in 0..3 {
        // Each checkout's own uncommitted edit this round, and its own untracked files: one at
        // a path every checkout has (its content differs), one only it has.
        for (name, dir) in &checkouts {
            write(
                &dir.join("src/a.py"),
                &format!("print('edit of {name} in round {round}')\n"),
            );
            std::fs::create_dir_all(dir.join("notes")).unwrap();
            write(
                &dir.join("notes/untracked.txt"),
                &format!("untracked of {name} in round {round}\n"),
            );
            write(&dir.join(format!("only-{name}.txt")), "");
        }
        // Eight at once: three from each clone, two from the worktree (the same checkout run
        // several times with different documents too).
        let runs: Vec<(String, Value)> = (0..8)
            .map(|i| {
                let (name, dir) = &checkouts[[0, 1, 2, 0, 1, 2, 0, 1][i]];
                let mut d = base.clone();
                d["repo_root"] = json!(dir);
                d["job_name"] = json!(format!("st-conc-{name}-{round}-{i}"));
                (name.to_string(), d)
            })
            .collect();
        let handles: Vec<_> = runs
            .into_iter()
            .map(|(name, d)| std::thread::spawn(move || (name, whole_pipeline(&d))))
            .collect();
        for h in handles {
            let (name, result) = h.join().unwrap();
            let (d, said) =
                result.unwrap_or_else(|e| panic!("round {round}, checkout {name}: {e}"));
            assert_eq!(
                report_of(&d).status.name(),
                "PASSED",
                "round {round} {name}: {d}"
            );
            let log = std::fs::read_to_string(job_of(&d).stdout_path.unwrap()).unwrap();
            assert!(
                log.contains(&format!("edit of {name} in round {round}")),
                "round {round}: the job from checkout {name} ran other code: {log}"
            );
            // Its own untracked files, whatever the other checkouts synced into the clone
            // between its sync and its submission.
            assert!(
                log.contains(&format!("untracked of {name} in round {round}")),
                "round {round}: the job from checkout {name} got other untracked files: {log}"
            );
            let only: Vec<&str> = log.lines().filter(|l| l.starts_with("only-")).collect();
            assert_eq!(
                only,
                vec![format!("only-{name}.txt")],
                "round {round}, checkout {name}: {log}"
            );
            assert!(
                !said.contains("are from the sync of snapshot"),
                "round {round} {name}: {said}"
            );
        }
    }
    // No temporary branch left on origin; the clone whole, its lock given back.
    assert_eq!(fx.origin_refs(), before_refs, "origin has only what it had");
    let lock = format!("{}.slurm-tools-sync.lock", fx.remote_repo);
    assert!(
        !Path::new(&lock).exists(),
        "the clone's lock is left behind"
    );
    git(Path::new(&fx.remote_repo), &["fsck", "--no-dangling"]);
    git(Path::new(&fx.remote_repo), &["status", "--porcelain"]);
    for (_, dir) in &checkouts {
        let pending = PathBuf::from(git(dir, &["rev-parse", "--absolute-git-dir"]).trim())
            .join("slurm-tools-pending-refs");
        assert!(
            !pending.exists(),
            "{} remembers a branch",
            pending.display()
        );
    }
}

/// Sessions started on the login node while others end: a tmux server exits with its last
/// session, and a client that meets it exiting fails ("server exited unexpectedly"; one of eight
/// pipelines at once met it in CI). Short sessions started four at a time, round after round, in
/// a tmux socket directory of their own: every one starts through `tmux_start`, each leaves its
/// mark. How often a bare `tmux new-session` failed the same way is printed, for comparison.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn tmux_sessions_started_while_the_server_exits_all_start() {
    crate::needs_cluster!();
    let d = doc_for("direct_host");
    let ssh = crate::harness::ssh_of(&d);
    let mut s = shared::remote::quote::Script::new();
    s.raw(shared::remote::TMUX);
    s.raw(
        r#"dir=$(mktemp -d) && export TMUX_TMPDIR="$dir" || exit 9
mkdir "$dir/marks"
try() { # $1: tmux_start or bare; $2: the session's name
  if [ "$1" = bare ]; then tmux new-session -d -s "$2" "touch $dir/marks/$2" 2>/dev/null || echo "FAILED $1 $2"
  else tmux_start "$2" "touch $dir/marks/$2" 2>/dev/null || echo "FAILED $1 $2"; fi
}
for how in bare tmux_start; do
  r=0
  while [ "$r" -lt 40 ]; do
    for i in 1 2 3 4; do try "$how" "$how-$r-$i" & done
    sleep "0.0$((r % 5))" 2>/dev/null || :
    r=$((r + 1))
  done
  wait
done
sleep 1
n=0
for f in "$dir"/marks/tmux_start-*; do [ -e "$f" ] && n=$((n + 1)); done
echo "MARKS $n"
tmux kill-server 2>/dev/null
rm -rf -- "$dir"
"#,
    );
    let out = ssh
        .run_script(&s, None, std::time::Duration::from_secs(120))
        .unwrap();
    let text = out.stdout_text();
    assert!(out.success(), "{text}\n{}", out.stderr_tail);
    let bare = text
        .lines()
        .filter(|l| l.starts_with("FAILED bare "))
        .count();
    eprintln!("a bare tmux new-session failed {bare} times of 160");
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("FAILED tmux_start "))
        .collect();
    assert!(failed.is_empty(), "tmux_start failed: {failed:?}\n{text}");
    assert!(
        text.contains("MARKS 160"),
        "every session ran its command: {text}"
    );
}
