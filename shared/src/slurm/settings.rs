//! The Slurm settings of a job document, parsed and checked once, for every tool that submits or
//! allocates (slurm-submit and slurm-alloc), and the argv words they become.
//!
//! Every option takes the `--opt=value` form, so a value starting with `-` can never become an
//! option, and every word is quoted once when it becomes shell text.

use super::{check_slurm_value, check_time_limit, enroot_image, pyxis};
use crate::doc::{field_error, wrong_type};
use crate::schema::{Recipe, Resolve};
use crate::{Document, Result};
use serde_json::Value;

/// The Slurm settings shared by every job, read and checked from the document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub job_name: Option<String>,
    pub account: Option<String>,
    pub partition: Option<String>,
    pub time_limit: Option<String>,
    /// `node_count`, default 1.
    pub nodes: i64,
    /// `required_devices_per_node`.
    pub per_node: Option<i64>,
    pub gpus_per_node: Option<i64>,
    pub container_image: Option<String>,
    /// `mounts`, as a string `src:dst[,src:dst]` or a list of `src:dst`, joined with `,`.
    pub mounts: Option<String>,
    /// From the catalog (`resolve.flags`): `network` (or `sharp: true`), `constraint`,
    /// `comment`, `gpu_clocks`.
    pub network: Option<String>,
    pub constraint: Option<String>,
    pub comment: Option<String>,
    pub gpu_clocks: Option<String>,
    /// `exclude_nodes`, joined with `,` (slurm-watch --retry adds the nodes that failed).
    pub exclude: Option<String>,
}

/// The launcher variables of the distributed recipe (and `slurm-alloc exec --mode distributed`).
pub const DISTRIBUTED_ENV: &str =
    "export RANK=\"$SLURM_PROCID\" LOCAL_RANK=\"$SLURM_LOCALID\" WORLD_SIZE=\"$SLURM_NTASKS\"\n";

/// The directory to suggest mounting for `path`: its first two components (`/lustre/me/x` ->
/// `/lustre/me`), which is where a parallel filesystem's per-user space usually starts.
fn parent_mount(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts[..parts.len().min(2)].join("/"))
}

/// `exclude_nodes`: node names or Slurm host lists (`mn[1-2]`), joined with `,`.
pub fn exclude_nodes(doc: &Document) -> Result<Option<String>> {
    let Some(list) = doc.str_list_opt("exclude_nodes")? else {
        return Ok(None);
    };
    for (i, n) in list.iter().enumerate() {
        let ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-[],".contains(c));
        if !ok {
            return Err(crate::doc::field_error(
                "exclude_nodes",
                &format!(
                    "item {i} is {}, which is not a node name or host list",
                    crate::quote::preview(n)
                ),
            )
            .with_hint(
                "give node names as Slurm prints them, e.g. [\"gpu-017\", \"gpu-[020-023]\"]",
            ));
        }
    }
    Ok((!list.is_empty()).then(|| list.join(",")))
}

/// `mounts`: a string or a list of strings, each checked; `None` when absent.
pub fn mounts(doc: &Document) -> Result<Option<String>> {
    let m = match doc.get("mounts") {
        None => return Ok(None),
        Some(Value::String(m)) => m.clone(),
        Some(Value::Array(_)) => {
            let list = doc.str_list_opt("mounts")?.unwrap_or_default();
            for (i, item) in list.iter().enumerate() {
                if item.is_empty() || item.contains(',') {
                    return Err(field_error(
                        "mounts",
                        &format!("item {i} is {item:?}; each list item is one `src:dst` mount"),
                    )
                    .with_hint("e.g. [\"/data:/data\", \"/scratch:/scratch:ro\"]"));
                }
            }
            list.join(",")
        }
        Some(other) => return Err(wrong_type("mounts", "a string or a list of strings", other)),
    };
    if m.is_empty() {
        return Ok(None);
    }
    check_slurm_value("mounts", &m)?;
    Ok(Some(m))
}

impl Settings {
    pub fn from_doc(doc: &Document) -> Result<Settings> {
        let s = |k: &str| -> Result<Option<String>> {
            let v = doc.str_opt(k)?.map(str::to_string);
            if let Some(v) = &v {
                check_slurm_value(k, v)?;
            }
            Ok(v)
        };
        let time_limit = match doc.str_opt("time_limit")? {
            Some(t) => Some(check_time_limit(t)?.to_string()),
            None => None,
        };
        let resolve = doc.section_as::<Resolve>("resolve")?;
        let flags = resolve.as_ref().map(|r| &r.flags);
        let flag = |k: &str| -> Result<Option<String>> {
            let v = match flags.and_then(|f| f.get(k)) {
                None | Some(Value::Null) | Some(Value::Bool(false)) => None,
                Some(Value::Bool(true)) if k == "network" || k == "sharp" => {
                    Some("sharp".to_string())
                }
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            if let Some(v) = &v {
                check_slurm_value(&format!("resolve.flags.{k}"), v)?;
            }
            Ok(v)
        };
        Ok(Settings {
            job_name: s("job_name")?,
            account: s("account")?,
            partition: s("partition")?,
            time_limit,
            nodes: doc.int_opt("node_count", 1, 100_000)?.unwrap_or(1),
            per_node: doc.int_opt("required_devices_per_node", 1, 4096)?,
            gpus_per_node: doc.int_opt("gpus_per_node", 1, 4096)?,
            container_image: s("container_image")?,
            mounts: mounts(doc)?,
            network: flag("network")?.or(flag("sharp")?),
            constraint: flag("constraint")?,
            comment: flag("comment")?,
            gpu_clocks: flag("gpu_clocks")?,
            exclude: exclude_nodes(doc)?,
        })
    }

    /// `--account`, `--partition`, `--gpus-per-node` and the catalog's cluster flags.
    pub fn common(&self, argv: &mut Vec<String>) {
        if let Some(a) = &self.account {
            argv.push(format!("--account={a}"));
        }
        if let Some(p) = &self.partition {
            argv.push(format!("--partition={p}"));
        }
        if let Some(g) = self.gpus_per_node {
            argv.push(format!("--gpus-per-node={g}"));
        }
        if let Some(n) = &self.network {
            argv.push(format!("--network={n}"));
        }
        if let Some(c) = &self.constraint {
            argv.push(format!("--constraint={c}"));
        }
        if let Some(x) = &self.exclude {
            argv.push(format!("--exclude={x}"));
        }
    }

    /// `--comment`: the catalog's comment (e.g. `metrics`) and our lookup token.
    pub fn comment(&self, token: &str) -> String {
        match &self.comment {
            Some(c) => format!("--comment={c};{token}"),
            None => format!("--comment={token}"),
        }
    }

    /// `--container-image` (enroot's form), `--container-mounts`, and `--container-workdir`
    /// (the job starts in its checkout inside the container too, not in the image's workdir).
    pub fn container(&self, argv: &mut Vec<String>, workdir: &str) {
        if let Some(i) = &self.container_image {
            argv.push(format!("--container-image={}", enroot_image(i)));
            self.container_mounts(argv);
            argv.push(format!("--container-workdir={workdir}"));
        }
    }

    /// With a container, refuse paths the job needs that the container would not see at the
    /// same path: pyxis mounts the home directory by default, anything else (code on a parallel
    /// filesystem) must be in `mounts`. `paths` are (what, absolute path); `home` is the
    /// cluster user's home when known (unknown: only a mount at another path is refused).
    pub fn check_container_sees(&self, home: Option<&str>, paths: &[(&str, &str)]) -> Result<()> {
        if self.container_image.is_none() {
            return Ok(());
        }
        for (what, path) in paths {
            match pyxis::visibility(path, home, self.mounts.as_deref()) {
                pyxis::Visibility::Home | pyxis::Visibility::Mount(_) => {}
                pyxis::Visibility::Moved { entry } => {
                    return Err(field_error(
                        "mounts",
                        &format!("mounts {entry:?} over {what} {path} at another path inside the container, where the job's paths do not exist"),
                    )
                    .with_hint(format!("mount it at the same path, e.g. add \"{0}:{0}\" to `mounts`", parent_mount(path))));
                }
                // Without the home (no preflight), whether pyxis mounts it cannot be told.
                pyxis::Visibility::Hidden if home.is_none() => {}
                pyxis::Visibility::Hidden => {
                    return Err(field_error(
                        "mounts",
                        &format!(
                            "does not cover {what} {path}, which is outside the home directory ({}): inside the container `{}` the job would not find it",
                            home.unwrap_or_default(),
                            self.container_image.as_deref().unwrap_or_default()
                        ),
                    )
                    .with_hint(format!("add \"{0}:{0}\" to `mounts` (pyxis mounts only the home directory by default), or keep the checkout under the home directory", parent_mount(path))));
                }
            }
        }
        Ok(())
    }

    /// `--container-mounts`, when `mounts` is set.
    pub fn container_mounts(&self, argv: &mut Vec<String>) {
        if let Some(m) = &self.mounts {
            argv.push(format!("--container-mounts={m}"));
        }
    }

    /// Tasks per node for a recipe: `required_devices_per_node`, else `gpus_per_node`, else 1.
    pub fn tasks_per_node(&self, recipe: Recipe) -> i64 {
        match recipe {
            Recipe::Single | Recipe::Launcher | Recipe::Batch => 1,
            Recipe::Mpi | Recipe::Distributed => self.devices_per_node(),
        }
    }

    /// Devices (GPUs) per node the work uses: `required_devices_per_node`, else
    /// `gpus_per_node`, else 1.
    pub fn devices_per_node(&self) -> i64 {
        self.per_node.or(self.gpus_per_node).unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(s: &str) -> Result<Settings> {
        Settings::from_doc(&Document::parse(s.as_bytes(), "test").unwrap())
    }

    #[test]
    fn mounts_as_string_or_list_give_the_same_flag() {
        let a = settings(r#"{"container_image":"r/i:1","mounts":"/a:/a,/b:/b"}"#).unwrap();
        let b = settings(r#"{"container_image":"r/i:1","mounts":["/a:/a","/b:/b"]}"#).unwrap();
        assert_eq!(a, b);
        let mut argv = vec![];
        a.container(&mut argv, "/w");
        assert_eq!(
            argv,
            [
                "--container-image=r/i:1",
                "--container-mounts=/a:/a,/b:/b",
                "--container-workdir=/w"
            ]
        );
        for bad in [
            r#"{"mounts":7}"#,
            r#"{"mounts":["/a:/a",3]}"#,
            r#"{"mounts":["/a:/a,/b:/b"]}"#,
            r#"{"mounts":"/a:/a\n"}"#,
        ] {
            let e = settings(bad).unwrap_err();
            assert!(
                e.field.as_deref().is_some_and(|f| f.starts_with("mounts")),
                "{bad}: {e:?}"
            );
        }
        assert_eq!(settings(r#"{"mounts":[]}"#).unwrap().mounts, None);
    }

    #[test]
    fn the_container_must_see_the_jobs_paths() {
        let home = Some("/home/u");
        let paths = [("the job's code tree", "/lustre/u/r/.trees/t")];
        // No container: nothing to check.
        assert!(settings("{}")
            .unwrap()
            .check_container_sees(home, &paths)
            .is_ok());
        let bare = settings(r#"{"container_image":"r/i:1"}"#).unwrap();
        let e = bare.check_container_sees(home, &paths).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("mounts"));
        assert!(e.message.contains("/lustre/u/r/.trees/t"), "{e:?}");
        assert!(
            e.hint
                .as_deref()
                .unwrap()
                .contains("\"/lustre/u:/lustre/u\""),
            "{e:?}"
        );
        // Under home: pyxis/enroot mount it.
        assert!(bare
            .check_container_sees(home, &[("the tree", "/home/u/w/t")])
            .is_ok());
        // Home unknown (no preflight): only a mount at another path is refused.
        assert!(bare.check_container_sees(None, &paths).is_ok());
        let moved = settings(r#"{"container_image":"r/i:1","mounts":"/lustre:/mnt"}"#).unwrap();
        assert!(moved.check_container_sees(None, &paths).is_err());
        let same =
            settings(r#"{"container_image":"r/i:1","mounts":["/lustre:/lustre:ro"]}"#).unwrap();
        assert!(same.check_container_sees(home, &paths).is_ok());
    }

    #[test]
    fn catalog_flags_become_options() {
        let st = settings(r#"{"account":"a","partition":"p","gpus_per_node":4,"resolve":{"cluster_name":"c","selected_by":"explicit","derived":[],"catalog":null,"candidates":[],"partitions":[],"flags":{"sharp":true,"constraint":"h100","comment":"metrics"}}}"#).unwrap();
        let mut argv = vec![];
        st.common(&mut argv);
        assert_eq!(
            argv,
            [
                "--account=a",
                "--partition=p",
                "--gpus-per-node=4",
                "--network=sharp",
                "--constraint=h100"
            ]
        );
        assert_eq!(st.comment("tag"), "--comment=metrics;tag");
        assert_eq!(st.tasks_per_node(Recipe::Mpi), 4);
        assert_eq!(st.tasks_per_node(Recipe::Launcher), 1);
    }
}
