//! Sweeps: one document, many runs (docs/contract.md, "sweep" and "after").
//!
//! A `sweep` (a grid crossed, or a list of parameter sets) becomes one Slurm job array: task `i`
//! runs the document's recipe with set `i`. Each task gets its parameters as environment
//! variables (`SWEEP_<NAME>`, `SWEEP_INDEX`, `SWEEP_COUNT`, `SWEEP_PARAMS` as JSON), set in the
//! job's own script from `SLURM_ARRAY_TASK_ID`, so they reach every task of every recipe, in a
//! container too. `{name}` in `command` becomes `"${SWEEP_NAME}"`: one word holding the value
//! exactly, whatever characters it has (the value itself never becomes shell text).

use crate::contract::schema::Sweep;
use crate::remote::quote::Script;
use crate::{Result, ToolError};
use serde_json::{Map, Value};

/// The most tasks a document may ask for (Slurm's own ceiling for MaxArraySize is 4000001; the
/// cluster's MaxArraySize is checked before submitting).
pub const MAX_TASKS: usize = 4_000_000;

/// One task of a sweep: its array index and its parameters, in the document's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub index: u32,
    pub params: Vec<(String, String)>,
}

impl Task {
    /// The task's parameters as one JSON object of strings (`SWEEP_PARAMS`, the report's rows).
    pub fn params_map(&self) -> Map<String, Value> {
        self.params
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect()
    }

    /// `lr=0.1 seed=2`, for messages and tables.
    pub fn label(&self) -> String {
        self.params
            .iter()
            .map(|(k, v)| format!("{k}={}", crate::remote::quote::quote_for_display(v)))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A sweep as it is submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub tasks: Vec<Task>,
    pub max_parallel: Option<u32>,
    /// Only these indexes are submitted (sorted, each a task's).
    pub only: Option<Vec<u32>>,
}

impl Plan {
    /// The parameter names (every task has the same ones).
    pub fn names(&self) -> Vec<String> {
        self.tasks
            .first()
            .map(|t| t.params.iter().map(|(k, _)| k.clone()).collect())
            .unwrap_or_default()
    }

    /// sbatch's `--array` value: `0-N[%max_parallel]`, or the indexes of `only`.
    pub fn array_spec(&self) -> String {
        let last = self.tasks.len().saturating_sub(1);
        let range = match &self.only {
            Some(only) => only
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            None => format!("0-{last}"),
        };
        match self.max_parallel {
            Some(m) => format!("{range}%{m}"),
            None => range,
        }
    }

    /// The tasks this submission runs (all, or those of `only`).
    pub fn running(&self) -> Vec<&Task> {
        self.tasks
            .iter()
            .filter(|t| self.only.as_ref().is_none_or(|o| o.contains(&t.index)))
            .collect()
    }

    /// The preamble of the job's script: the task's variables, chosen by its array index.
    pub fn preamble(&self, s: &mut Script) -> Result<()> {
        s.raw("# The sweep: this task's parameters (slurm-submit, shared/src/slurm/sweep.rs).\n");
        s.raw("export SWEEP_INDEX=\"${SLURM_ARRAY_TASK_ID:-0}\" SWEEP_COUNT=");
        s.glued(&self.tasks.len().to_string())?;
        // The values are data, quoted once: quotes in them are meant literally.
        s.raw("\n# shellcheck disable=SC2089,SC2090\ncase \"$SWEEP_INDEX\" in\n");
        for t in &self.tasks {
            s.glued(&t.index.to_string())?;
            s.raw(")\n");
            for (name, value) in &t.params {
                s.export_env(&env_name(name), value)?;
            }
            s.export_env("SWEEP_PARAMS", &Value::Object(t.params_map()).to_string())?;
            s.raw(";;\n");
        }
        s.raw("*) echo \"slurm-tools: sweep: no parameter set for task $SWEEP_INDEX\" >&2; exit 2 ;;\nesac\n");
        Ok(())
    }
}

/// `SWEEP_<NAME>`: the name upper-cased.
pub fn env_name(name: &str) -> String {
    format!("SWEEP_{}", name.to_ascii_uppercase())
}

fn field(what: &str) -> ToolError {
    crate::contract::doc::field_error("sweep", what).with_hint(
        "give `sweep` as {\"grid\": {\"lr\": [0.1, 0.01], \"seed\": [1, 2]}, \"max_parallel\": 4} or {\"sets\": [{\"lr\": 0.1}, {\"lr\": 0.01}]}",
    )
}

/// A parameter's value as the task sees it: a string as it is, a number as the document writes
/// it, a boolean as true/false.
fn value_text(name: &str, v: &Value) -> Result<String> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => {
            return Err(field(&format!(
                "has parameter `{name}` with {}; a value is a string, a number or a boolean",
                crate::contract::doc::describe(other)
            )))
        }
    };
    if text.contains('\0') {
        return Err(field(&format!("has parameter `{name}` with a NUL byte")));
    }
    Ok(text)
}

fn check_names<'a>(names: impl Iterator<Item = &'a String>) -> Result<Vec<String>> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for name in names {
        let ok = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(field(&format!(
                "has a parameter named {}; a name is letters, digits and _, not starting with a digit (it becomes the variable SWEEP_<NAME>)",
                crate::remote::quote::preview(name)
            )));
        }
        let upper = env_name(name);
        if upper == "SWEEP_INDEX" || upper == "SWEEP_COUNT" || upper == "SWEEP_PARAMS" {
            return Err(field(&format!(
                "has a parameter named `{name}`, whose variable {upper} the sweep sets itself; rename it"
            )));
        }
        if seen.contains(&upper) {
            return Err(field(&format!(
                "has two parameters that both become {upper}; names must differ in more than case"
            )));
        }
        seen.push(upper);
        out.push(name.clone());
    }
    Ok(out)
}

/// The tasks of a sweep, checked: every name, every value, the count.
pub fn plan(sweep: &Sweep) -> Result<Plan> {
    let tasks = match (&sweep.grid, &sweep.sets) {
        (Some(_), Some(_)) => return Err(field("has both `grid` and `sets`; give one of them")),
        (None, None) => return Err(field("has neither `grid` nor `sets`")),
        (Some(grid), None) => grid_tasks(grid)?,
        (None, Some(sets)) => set_tasks(sets)?,
    };
    if tasks.len() > MAX_TASKS {
        return Err(field(&format!(
            "makes {} tasks; Slurm arrays hold at most {MAX_TASKS}",
            tasks.len()
        )));
    }
    if sweep.max_parallel == Some(0) {
        return Err(field(
            "has `max_parallel` 0; give at least 1 (or leave it out: as many at once as Slurm starts)",
        ));
    }
    let only = match &sweep.only {
        Some(list) => {
            let mut list = list.clone();
            list.sort_unstable();
            list.dedup();
            if list.is_empty() {
                return Err(field("has `only` empty; name at least one task's index"));
            }
            if let Some(bad) = list.iter().find(|i| **i as usize >= tasks.len()) {
                return Err(field(&format!(
                    "has `only` with task {bad}, but the sweep has tasks 0-{}",
                    tasks.len() - 1
                )));
            }
            Some(list)
        }
        None => None,
    };
    Ok(Plan {
        tasks,
        max_parallel: sweep.max_parallel,
        only,
    })
}

fn grid_tasks(grid: &Map<String, Value>) -> Result<Vec<Task>> {
    if grid.is_empty() {
        return Err(field("has an empty `grid`"));
    }
    let names = check_names(grid.keys())?;
    let mut axes: Vec<Vec<String>> = Vec::new();
    for name in &names {
        let values = match &grid[name] {
            Value::Array(v) if !v.is_empty() => v,
            Value::Array(_) => {
                return Err(field(&format!(
                    "has `grid.{name}` as an empty list; give at least one value"
                )))
            }
            other => {
                return Err(field(&format!(
                    "has `grid.{name}` as {}; each grid parameter is a list of values",
                    crate::contract::doc::describe(other)
                )))
            }
        };
        axes.push(
            values
                .iter()
                .map(|v| value_text(name, v))
                .collect::<Result<_>>()?,
        );
    }
    let total = axes.iter().try_fold(1usize, |n, a| n.checked_mul(a.len()));
    if total.is_none_or(|t| t > MAX_TASKS) {
        return Err(field(&format!(
            "has a grid of more than {MAX_TASKS} tasks; Slurm arrays hold fewer"
        )));
    }
    let total = total.unwrap_or(0);
    // The first parameter varies slowest.
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        let mut rest = i;
        let mut picks = vec![0usize; axes.len()];
        for (k, axis) in axes.iter().enumerate().rev() {
            picks[k] = rest % axis.len();
            rest /= axis.len();
        }
        tasks.push(Task {
            index: i as u32,
            params: names
                .iter()
                .zip(&axes)
                .zip(&picks)
                .map(|((n, a), p)| (n.clone(), a[*p].clone()))
                .collect(),
        });
    }
    Ok(tasks)
}

fn set_tasks(sets: &[Map<String, Value>]) -> Result<Vec<Task>> {
    let Some(first) = sets.first() else {
        return Err(field(
            "has an empty `sets`; give at least one parameter set",
        ));
    };
    let names = check_names(first.keys())?;
    let mut tasks = Vec::with_capacity(sets.len());
    for (i, set) in sets.iter().enumerate() {
        let mut keys: Vec<&String> = set.keys().collect();
        let mut want: Vec<&String> = names.iter().collect();
        keys.sort();
        want.sort();
        if keys != want {
            return Err(field(&format!(
                "has set {i} with the parameters {keys:?}, but set 0 has {want:?}; every set names the same parameters"
            )));
        }
        tasks.push(Task {
            index: i as u32,
            params: names
                .iter()
                .map(|n| Ok((n.clone(), value_text(n, &set[n])?)))
                .collect::<Result<_>>()?,
        });
    }
    Ok(tasks)
}

/// `command` with each `{name}` of a parameter replaced by its variable, so that it expands to
/// exactly one word holding the value, wherever it stands: `"${SWEEP_NAME}"` outside quotes,
/// `${SWEEP_NAME}` inside double quotes, `'"${SWEEP_NAME}"'` inside single quotes (the value is
/// never shell text). `${name}` (the shell's own expansion) and names that are not parameters
/// stay as written.
pub fn substitute(command: &str, names: &[String]) -> String {
    #[derive(PartialEq, Clone, Copy)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let mut out = String::with_capacity(command.len());
    let mut state = Quote::None;
    let mut chars = command.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match (state, c) {
            (Quote::None, '\\') | (Quote::Double, '\\') => {
                out.push(c);
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
                continue;
            }
            (Quote::None, '\'') => state = Quote::Single,
            (Quote::Single, '\'') => state = Quote::None,
            (Quote::None, '"') => state = Quote::Double,
            (Quote::Double, '"') => state = Quote::None,
            (_, '{') => {
                let rest = &command[at + 1..];
                let name = rest.find('}').map(|c| &rest[..c]);
                let shell_own = state != Quote::Single && out.ends_with('$');
                if let Some(n) = name.filter(|n| !shell_own && names.iter().any(|x| x == n)) {
                    let var = env_name(n);
                    out.push_str(&match state {
                        Quote::None => format!("\"${{{var}}}\""),
                        Quote::Double => format!("${{{var}}}"),
                        Quote::Single => format!("'\"${{{var}}}\"'"),
                    });
                    for _ in 0..=n.chars().count() {
                        chars.next();
                    }
                    continue;
                }
            }
            _ => {}
        }
        out.push(c);
    }
    out
}

/// `after`: the jobs this run waits for, as sbatch's and srun's `--dependency` value. Each entry
/// is a job id or a saved job document (its `job.job_id`), optionally prefixed with the
/// condition (`afterok:` by default, `afterany:`, `afternotok:`, `aftercorr:`).
pub fn dependency(
    entries: &[String],
    read_doc: impl Fn(&str) -> Result<String>,
) -> Result<Option<String>> {
    const KINDS: &[&str] = &["afterok", "afterany", "afternotok", "aftercorr", "after"];
    let mut parts: Vec<(String, Vec<String>)> = Vec::new();
    for entry in entries {
        let (kind, what) = match entry.split_once(':') {
            Some((k, w)) if KINDS.contains(&k) => (k.to_string(), w),
            _ => ("afterok".to_string(), entry.as_str()),
        };
        if what.is_empty() {
            return Err(crate::contract::doc::field_error(
                "after",
                &format!(
                    "has {} without a job id or document after the condition",
                    crate::remote::quote::preview(entry)
                ),
            ));
        }
        let id = if super::is_job_id(what) {
            what.to_string()
        } else {
            read_doc(what)?
        };
        match parts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, ids)) => ids.push(id),
            None => parts.push((kind, vec![id])),
        }
    }
    Ok((!parts.is_empty()).then(|| {
        parts
            .iter()
            .map(|(k, ids)| format!("{k}:{}", ids.join(":")))
            .collect::<Vec<_>>()
            .join(",")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sweep(v: Value) -> Sweep {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_grid_is_crossed_with_the_first_parameter_slowest() {
        let p = plan(&sweep(
            json!({"grid": {"lr": [0.1, "1e-3"], "seed": [1, 2, 3]}, "max_parallel": 2}),
        ))
        .unwrap();
        assert_eq!(p.tasks.len(), 6);
        assert_eq!(p.array_spec(), "0-5%2");
        assert_eq!(p.names(), ["lr", "seed"]);
        let labels: Vec<String> = p.tasks.iter().map(Task::label).collect();
        assert_eq!(
            labels,
            [
                "lr=0.1 seed=1",
                "lr=0.1 seed=2",
                "lr=0.1 seed=3",
                "lr=1e-3 seed=1",
                "lr=1e-3 seed=2",
                "lr=1e-3 seed=3"
            ]
        );
        let p = plan(&sweep(
            json!({"sets": [{"a": true}, {"a": "x y"}, {"a": 3}], "only": [2, 0, 2]}),
        ))
        .unwrap();
        assert_eq!(p.array_spec(), "0,2");
        assert_eq!(p.running().len(), 2);
        let p = plan(&sweep(json!({"sets": [{"a": true}, {"a": "x y"}]}))).unwrap();
        assert_eq!(p.array_spec(), "0-1");
        assert_eq!(p.running().len(), 2);
        assert_eq!(p.tasks[1].params, [("a".to_string(), "x y".to_string())]);
    }

    #[test]
    fn bad_sweeps_name_what_is_wrong() {
        for (v, says) in [
            (json!({}), "neither"),
            (json!({"grid": {"a": [1]}, "sets": [{"a": 1}]}), "both"),
            (json!({"grid": {}}), "empty `grid`"),
            (json!({"grid": {"a": []}}), "grid.a"),
            (json!({"grid": {"a": 1}}), "grid.a"),
            (json!({"grid": {"a-b": [1]}}), "\"a-b\""),
            (json!({"grid": {"9a": [1]}}), "\"9a\""),
            (json!({"grid": {"lr": [1], "LR": [2]}}), "SWEEP_LR"),
            (json!({"grid": {"index": [1]}}), "SWEEP_INDEX"),
            (json!({"grid": {"a": [[1]]}}), "a list"),
            (json!({"grid": {"a": [null]}}), "null"),
            (json!({"sets": []}), "empty `sets`"),
            (json!({"sets": [{"a": 1}, {"b": 1}]}), "set 1"),
            (
                json!({"sets": [{"a": 1}], "max_parallel": 0}),
                "max_parallel",
            ),
            (json!({"sets": [{"a": 1}], "only": [1]}), "tasks 0-0"),
            (json!({"sets": [{"a": 1}], "only": []}), "`only` empty"),
            (
                json!({"grid": {"a": vec![0; 3000], "b": vec![0; 3000]}}),
                "more than",
            ),
        ] {
            let e = plan(&sweep(v.clone())).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("sweep"), "{v}");
            assert!(e.message.contains(says), "{v}: {}", e.message);
        }
    }

    #[test]
    fn parameters_become_one_word_each_whatever_they_hold() {
        let names = vec!["lr".to_string(), "name".to_string()];
        assert_eq!(
            substitute(
                "python t.py --lr={lr} --name \"{name}\" ${HOME} {other} {",
                &names
            ),
            "python t.py --lr=\"${SWEEP_LR}\" --name \"${SWEEP_NAME}\" ${HOME} {other} {"
        );
        assert_eq!(
            substitute("python -c 'print({lr})' \\{lr} \"a\\\"{lr}\"", &names),
            "python -c 'print('\"${SWEEP_LR}\"')' \\{lr} \"a\\\"${SWEEP_LR}\""
        );
        // Run for real: a value with spaces, quotes, `$`, a newline and a backslash arrives whole.
        let tricky = "a b 'c' \"d\" $HOME `x` \\ \n;e";
        let p = plan(&sweep(json!({"sets": [{"v": "plain"}, {"v": tricky}]}))).unwrap();
        let mut s = Script::new();
        p.preamble(&mut s).unwrap();
        let cmd = substitute("printf '%s|' {v} \"$SWEEP_V\" \"<{v}>\" '<{v}>' \"$SWEEP_INDEX/$SWEEP_COUNT\"; printf '%s' \"$SWEEP_PARAMS\"", &p.names());
        s.user_shell_text(&cmd);
        crate::remote::script_check::assert_clean("sweep-preamble", s.as_str());
        for shell in ["sh", "bash"] {
            let out = std::process::Command::new(shell)
                .arg("-c")
                .arg(s.as_str())
                .env("SLURM_ARRAY_TASK_ID", "1")
                .output()
                .unwrap();
            let text = String::from_utf8(out.stdout).unwrap();
            let params = serde_json::to_string(&json!({"v": tricky})).unwrap();
            assert_eq!(
                text,
                format!("{tricky}|{tricky}|<{tricky}>|<{tricky}>|1/2|{params}"),
                "{shell}"
            );
        }
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(s.as_str())
            .env("SLURM_ARRAY_TASK_ID", "7")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
    }

    #[test]
    fn after_names_jobs_and_saved_documents() {
        let read = |p: &str| -> Result<String> {
            if p == "sweep.json" {
                Ok("41".into())
            } else {
                Err(crate::contract::doc::field_error("after", "nope"))
            }
        };
        let e = |v: &[&str]| dependency(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), read);
        assert_eq!(e(&[]).unwrap(), None);
        assert_eq!(e(&["12"]).unwrap().as_deref(), Some("afterok:12"));
        assert_eq!(
            e(&["sweep.json", "7_2"]).unwrap().as_deref(),
            Some("afterok:41:7_2")
        );
        assert_eq!(
            e(&["afterany:sweep.json", "afterok:3"]).unwrap().as_deref(),
            Some("afterany:41,afterok:3")
        );
        assert!(e(&["afterany:"]).is_err());
        assert!(e(&["missing.json"]).is_err());
    }
}
