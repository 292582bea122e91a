//! `slurm-submit --race N`: the same job submitted also to the next best clusters of the
//! document's placement (`slurm-resolve --place`), so that slurm-watch can keep the first to
//! start and cancel the others (tools/slurm-watch/race.rs).
//!
//! Each other entrant goes through the whole pipeline for its own cluster, run here as the
//! sibling tools it is made of (slurm-resolve with the placement's catalog and `slurm_cluster`
//! set, slurm-ssh-preflight, both syncs, slurm-submit), from the person's input as it was before
//! slurm-resolve filled it in (the fields `resolve.derived` and `resolve.from_defaults` name are
//! taken out, and every section the pipeline writes). An entrant whose pipeline fails (an MFA
//! cluster without its master, a sync refused) is said and left out; the race goes on with the
//! others. Each entrant's submitted document is kept in the state directory, and this job's
//! `race_entrants` names them.

use shared::contract::schema::{Placement, PlacementCandidate, Resolve};
use shared::{Context, Document, Result, ToolError};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

shared::document_input! {
    /// What --race reads: the placement its entrants come from, and what slurm-resolve filled in.
    pub struct RaceInput {
        placement: Option<Placement> = section,
        resolve: Option<Resolve> = section,
        cluster: shared::state::ledger::ClusterName = part,
    }
}

/// The tools an entrant's pipeline runs, in order, with their arguments.
fn pipeline(catalog: Option<&str>) -> Vec<(&'static str, Vec<String>)> {
    let resolve = match catalog {
        Some(c) => vec!["--catalog".to_string(), c.to_string()],
        None => Vec::new(),
    };
    vec![
        ("slurm-resolve", resolve),
        ("slurm-ssh-preflight", Vec::new()),
        ("slurm-sync-tracked", Vec::new()),
        ("slurm-sync-untracked", Vec::new()),
        ("slurm-submit", Vec::new()),
    ]
}

/// The other entrants, best first: answered, not blocked, not `chosen`; by Slurm's estimated
/// start, then by more GPUs free now (placement's own order); at most `n`.
pub fn next_best<'a>(p: &'a Placement, chosen: &str, n: usize) -> Vec<&'a PlacementCandidate> {
    let mut c: Vec<&PlacementCandidate> = p
        .candidates
        .iter()
        .filter(|c| c.state == "answered" && c.blocked_by.is_none() && c.cluster_name != chosen)
        .collect();
    c.sort_by_key(|c| {
        (
            c.estimated_start.unwrap_or(u64::MAX),
            std::cmp::Reverse(c.free_gpus.unwrap_or(0)),
        )
    });
    c.truncate(n);
    c
}

/// The person's input for `cluster`: `doc` without what slurm-resolve filled in and without any
/// tool's section, with `slurm_cluster` set.
pub fn entrant_input(doc: &Document, resolve: Option<&Resolve>, cluster: &str) -> Document {
    let mut d = doc.clone();
    if let Some(r) = resolve {
        for f in r.derived.iter().chain(&r.from_defaults) {
            d.remove(f);
        }
    }
    // Every section a tool writes: the entrant's own pipeline writes its own.
    for s in shared::contract::schema::SECTION_NAMES {
        d.remove(s);
    }
    d.remove("slurm_cluster");
    let mut map = d.as_map().clone();
    map.insert("slurm_cluster".into(), cluster.into());
    Document::from_map(map)
}

/// `--race N`, before anything is sent: the document as slurm-submit read it, which must have a
/// placement to take the other entrants from.
pub struct Race {
    original: Document,
    input: RaceInput,
}

impl Race {
    pub fn of(doc: &Document) -> Result<Race> {
        let input = RaceInput::read(doc)?;
        if input.placement.is_none() {
            return Err(ToolError::bad_input(
                "--race needs the document's placement: run slurm-resolve --place first (nothing was submitted)",
            )
            .with_field("placement")
            .with_hint("slurm-resolve --place < job.json | slurm-ssh-preflight | slurm-sync-tracked | slurm-sync-untracked | slurm-submit --race 2"));
        }
        Ok(Race {
            original: doc.clone(),
            input,
        })
    }
}

/// `--race N`, once this job was accepted: the other entrants' submitted documents, for this
/// job's `race_entrants`. Fewer than asked, or none, is said; never an error (this job stands).
pub fn enter(ctx: &Context, n: u32, race: &Race, token: &str) -> Vec<String> {
    let (original, input) = (&race.original, &race.input);
    let placement = input.placement.as_ref().expect("checked by Race::of");
    let chosen = input.cluster.name();
    let others = next_best(placement, &chosen, n.saturating_sub(1) as usize);
    if others.len() + 1 < n as usize {
        ctx.warn(format!(
            "--race {n}: only {} other cluster{} could take the job now (answered, not blocked): racing {} in all",
            others.len(),
            if others.len() == 1 { "" } else { "s" },
            others.len() + 1
        ));
    }
    let catalog = input.resolve.as_ref().and_then(|r| r.catalog.clone());
    let dir = match race_dir(token) {
        Ok(d) => d,
        Err(e) => {
            ctx.warn(format!("race: {}: not racing (this job stands)", e.message));
            return Vec::new();
        }
    };
    let mut files = Vec::new();
    for c in others {
        let name = &c.cluster_name;
        ctx.note(format!(
            "race: submitting the same job to {name} too ({})",
            c.reason
        ));
        let doc = entrant_input(original, input.resolve.as_ref(), name);
        let file = dir.join(format!(
            "{}.json",
            shared::remote::layout::sanitize(name, false)
        ));
        let kept = run_pipeline(&doc, catalog.as_deref()).and_then(|submitted| {
            shared::state::private_files::write_atomic(&file, &submitted, 0o600).map_err(|e| {
                format!(
                    "its job was submitted, but its document could not be kept in {} ({e}): cancel it by hand (its job id is on stderr above)",
                    file.display()
                )
            })
        });
        match kept {
            Ok(()) => files.push(file.display().to_string()),
            Err(why) => ctx.warn(format!(
                "race: {name} left out: {why} (the race goes on without it)"
            )),
        }
    }
    if !files.is_empty() {
        ctx.note(format!(
            "race: {} entrants; slurm-watch keeps the first to start and cancels the others",
            files.len() + 1
        ));
    }
    files
}

/// `<state dir>/race/<tag>/`, private.
fn race_dir(token: &str) -> Result<PathBuf> {
    let dir = shared::state::journal::state_dir()
        .ok_or_else(|| {
            ToolError::bad_input("no state directory for the race's documents")
                .with_hint("set SLURM_TOOLS_STATE_DIR (or HOME)")
        })?
        .join("race")
        .join(token);
    shared::state::private_files::create_dir(&dir)
        .map_err(|e| ToolError::bad_input(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// The entrant's whole pipeline, each tool beside this one, each tool's stdout the next one's
/// stdin (their stderr is the person's): the submitted document, or why it stopped.
fn run_pipeline(doc: &Document, catalog: Option<&str>) -> std::result::Result<Vec<u8>, String> {
    let here = std::env::current_exe().map_err(|e| format!("cannot find slurm-submit: {e}"))?;
    let mut text = doc.to_line().into_bytes();
    for (tool, args) in pipeline(catalog) {
        let mut child = Command::new(here.with_file_name(tool))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {tool}: {e}"))?;
        let mut stdin = child.stdin.take().expect("piped");
        let writer = std::thread::spawn(move || stdin.write_all(&text));
        let out = child
            .wait_with_output()
            .map_err(|e| format!("{tool}: {e}"))?;
        let _ = writer.join();
        if !out.status.success() {
            return Err(format!(
                "{tool} {}",
                shared::support::process::describe_exit(out.status.code())
            ));
        }
        text = out.stdout;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(
        name: &str,
        start: Option<u64>,
        free: u64,
        blocked: bool,
        state: &str,
    ) -> PlacementCandidate {
        PlacementCandidate {
            cluster_name: name.into(),
            partition: None,
            state: state.into(),
            estimated_start: start,
            starts_in_seconds: None,
            free_gpus: Some(free),
            total_gpus: Some(8),
            idle_nodes: None,
            your_pending_jobs: None,
            max_time: None,
            max_nodes: None,
            blocked_by: blocked.then(|| "a cap".into()),
            chosen: false,
            reason: String::new(),
            login_command: None,
            seconds: 0.1,
        }
    }

    #[test]
    fn the_other_entrants_are_the_next_best_that_answered_and_are_not_blocked() {
        let p = Placement {
            policy: "earliest_start".into(),
            chosen: Some("a".into()),
            asked_at: 1,
            candidates: vec![
                cand("a", Some(10), 4, false, "answered"),
                cand("late", Some(500), 8, false, "answered"),
                cand("soon", Some(20), 0, false, "answered"),
                cand("tied-more-free", Some(20), 4, false, "answered"),
                cand("capped", Some(5), 8, true, "answered"),
                cand("mfa", None, 0, false, "login_needed"),
            ],
        };
        let names = |n| {
            next_best(&p, "a", n)
                .iter()
                .map(|c| c.cluster_name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(1), ["tied-more-free"]);
        assert_eq!(names(9), ["tied-more-free", "soon", "late"]);
        assert!(names(0).is_empty());
    }

    #[test]
    fn a_race_without_a_placement_is_refused_before_anything_is_sent() {
        let doc = Document::parse(br#"{"slurm_cluster":"a","command":"true"}"#, "t").unwrap();
        let e = Race::of(&doc).err().expect("refused");
        assert_eq!(e.field.as_deref(), Some("placement"));
        assert!(e.message.contains("nothing was submitted"), "{}", e.message);
    }

    #[test]
    fn an_entrants_input_is_the_persons_without_what_resolve_filled_in() {
        let doc = Document::parse(
            br#"{"job_name":"t","ssh_host":"login-a","account":"lab","command":"true",
                 "slurm_cluster":"a","partition":"p","placement":{},"resolve":{},"preflight":{},
                 "sync_tracked":{},"job":{},"remote_repo_path":"/a/repo"}"#,
            "t",
        )
        .unwrap();
        let resolve = Resolve {
            cluster_name: "a".into(),
            selected_by: shared::contract::schema::SelectedBy::Placement,
            derived: vec![
                "ssh_host".into(),
                "remote_repo_path".into(),
                "partition".into(),
            ],
            catalog: Some("/c.json".into()),
            defaults_file: None,
            from_defaults: vec!["account".into()],
            candidates: Vec::new(),
            partitions: Vec::new(),
            flags: Default::default(),
            sized_from_history: None,
        };
        let d = entrant_input(&doc, Some(&resolve), "b");
        let mut keys: Vec<&str> = d.as_map().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["command", "job_name", "slurm_cluster"], "{keys:?}");
        assert_eq!(d.get("slurm_cluster").and_then(|v| v.as_str()), Some("b"));
        assert_eq!(
            pipeline(Some("/c.json"))[0],
            (
                "slurm-resolve",
                vec!["--catalog".to_string(), "/c.json".to_string()]
            )
        );
    }
}
