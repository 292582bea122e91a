//! The Slurm settings of a job document, parsed and checked once, for every tool that submits or
//! allocates (slurm-submit and slurm-alloc), and the argv words they become.
//!
//! Every option takes the `--opt=value` form, so a value starting with `-` can never become an
//! option, and every word is quoted once when it becomes shell text.

use super::container::{self, Runtime};
use super::{check_slurm_value, check_time_limit, pyxis};
use crate::contract::doc::{field_error, wrong_type};
use crate::contract::schema::{Recipe, Resolve};
use crate::{Document, Result};
use serde_json::Value;

crate::document_input! {
    /// The document fields the Slurm settings are made from.
    pub struct SettingsInput {
        pub job_name: Option<String> = string,
        pub account: Option<String> = string,
        pub partition: Option<String> = string,
        pub time_limit: Option<String> = string,
        pub node_count: Option<i64> = int(1, 100_000),
        pub required_devices_per_node: Option<i64> = int(1, 4096),
        pub gpus_per_node: Option<i64> = int(1, 4096),
        pub container_image: Option<String> = string,
        pub container_runtime: Option<String> = string,
        pub image_cache_keep: Option<i64> = int(0, 10_000),
        /// A string or a list of strings ([`mounts`]).
        pub mounts: Option<Value> = value,
        pub exclude_nodes: Option<Vec<String>> = strings,
        pub qos: Option<String> = string,
        pub mem: Option<String> = string,
        pub mem_per_gpu: Option<String> = string,
        pub cpus_per_task: Option<i64> = int(1, 4096),
        pub gres: Option<String> = string,
        pub reservation: Option<String> = string,
        pub exclusive: Option<bool> = flag,
        pub slurm_options: Option<Vec<String>> = strings,
        /// The catalog's cluster flags (`resolve.flags`).
        pub resolve: Option<Resolve> = section,
        /// Where the image cache and an allocation's container files go.
        pub places: container::Places = part,
    }
}

/// The Slurm settings shared by every job, read and checked from the document.
#[derive(Debug, Clone, Default)]
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
    /// The runtime the container runs on (`container_runtime`, checked against what preflight
    /// saw) and the image in its form; both absent without `container_image`.
    pub container_runtime: Option<Runtime>,
    pub container_ref: Option<String>,
    /// `image_cache_keep` (default 8).
    pub image_cache_keep: i64,
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
    /// A site's own options: `qos`, `mem`, `mem_per_gpu`, `cpus_per_task`, `gres`,
    /// `reservation`, `exclusive`, and `slurm_options` (further long options, exact words).
    pub site: SiteOptions,
    /// Where the container files go on the cluster ([`Settings::image_cache`]).
    pub places: container::Places,
}

/// The Slurm options a site may require, as the argv words they become (every allocating
/// command: sbatch, srun from the login node, salloc; every recipe, the build job, slurm-alloc).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SiteOptions {
    pub qos: Option<String>,
    pub mem: Option<String>,
    pub mem_per_gpu: Option<String>,
    pub cpus_per_task: Option<i64>,
    pub gres: Option<String>,
    pub reservation: Option<String>,
    pub exclusive: bool,
    /// `slurm_options`, each checked to be a well-formed long option the tools do not set.
    pub extra: Vec<String>,
}

/// The options the tools set themselves (or through a typed field): `slurm_options` may not
/// name them, so nothing the tools rely on (the log paths, the tag, the node count) can be
/// overridden by accident. (option, the field or reason that owns it)
const OWNED_OPTIONS: &[(&str, &str)] = &[
    ("job-name", "`job_name`"),
    ("nodes", "`node_count`"),
    ("ntasks", "the recipe"),
    (
        "ntasks-per-node",
        "the recipe (`required_devices_per_node`)",
    ),
    ("time", "`time_limit`"),
    ("account", "`account`"),
    ("partition", "`partition`"),
    ("gpus-per-node", "`gpus_per_node`"),
    ("network", "the catalog's flags"),
    ("constraint", "the catalog's flags"),
    ("exclude", "`exclude_nodes`"),
    ("comment", "the tools (their lookup tag)"),
    ("chdir", "the tools (the job's own code tree)"),
    ("output", "the tools (the log slurm-watch reads)"),
    ("error", "the tools (the log slurm-watch reads)"),
    ("parsable", "the tools"),
    ("mpi", "the recipe"),
    ("jobid", "the tools"),
    ("kill-command", "the tools"),
    ("wrap", "`command`"),
    ("array", "`sweep`"),
    ("dependency", "`after`"),
    ("qos", "`qos`"),
    ("mem", "`mem`"),
    ("mem-per-gpu", "`mem_per_gpu`"),
    ("cpus-per-task", "`cpus_per_task`"),
    ("gres", "`gres`"),
    ("reservation", "`reservation`"),
    ("exclusive", "`exclusive`"),
];

/// A memory size as Slurm takes it: digits and an optional unit (K, M, G or T).
fn check_memory(field: &str, v: &str) -> Result<()> {
    let digits = v.trim_end_matches(|c: char| "KMGTkmgt".contains(c));
    let unit_len = v.len() - digits.len();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || unit_len > 1 {
        return Err(field_error(
            field,
            &format!(
                "is {}, which is not a memory size",
                crate::remote::quote::preview(v)
            ),
        )
        .with_hint(format!(
            "give `{field}` as a number with an optional unit K, M, G or T, e.g. \"64G\""
        )));
    }
    Ok(())
}

/// A `slurm_options` entry: `--name` or `--name=value`, a long option the tools do not set.
fn check_option(i: usize, o: &str) -> Result<()> {
    let bad = |why: String, hint: &str| {
        Err(field_error(
            "slurm_options",
            &format!("item {i} is {}: {why}", crate::remote::quote::preview(o)),
        )
        .with_hint(hint.to_string()))
    };
    if o.chars().any(|c| c.is_control()) {
        return bad(
            "it holds a newline or control character".into(),
            "give each option as one line",
        );
    }
    let Some(body) = o.strip_prefix("--") else {
        return bad(
            "not a long option".into(),
            "give each option in its long form with its value joined by `=`, e.g. \"--licenses=scratch\"",
        );
    };
    let name = body.split_once('=').map_or(body, |(n, _)| n);
    let well_formed = name.len() >= 2
        && name.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !well_formed {
        return bad(
            format!("`--{name}` is not a well-formed option name"),
            "write it as Slurm's documentation does: lower-case words joined by `-`, then `=value`",
        );
    }
    if let Some((_, owner)) = OWNED_OPTIONS.iter().find(|(n, _)| *n == name) {
        return bad(
            format!("`--{name}` is set by {owner}"),
            "use that field instead (or leave it to the tools); `slurm_options` is for options the tools do not set",
        );
    }
    if name.starts_with("container-") {
        return bad(
            format!("`--{name}` is set by the tools from `container_image` and `mounts`"),
            "use `container_image` and `mounts`",
        );
    }
    Ok(())
}

impl SiteOptions {
    /// The site's options from the document (slurm-resolve's placement probe asks with them).
    pub fn from_doc(doc: &Document) -> Result<SiteOptions> {
        Self::from_input(&SettingsInput::read(doc)?)
    }

    pub fn from_input(input: &SettingsInput) -> Result<SiteOptions> {
        let s = |k: &str, v: &Option<String>| -> Result<Option<String>> {
            let v = v.clone();
            if let Some(v) = &v {
                check_slurm_value(k, v)?;
                if v.contains([' ', '\t']) {
                    return Err(field_error(k, &format!("is {v:?}, which holds a blank"))
                        .with_hint(format!(
                            "give `{k}` as one word, as Slurm's option takes it"
                        )));
                }
            }
            Ok(v)
        };
        let mem = s("mem", &input.mem)?;
        let mem_per_gpu = s("mem_per_gpu", &input.mem_per_gpu)?;
        for (f, v) in [("mem", &mem), ("mem_per_gpu", &mem_per_gpu)] {
            if let Some(v) = v {
                check_memory(f, v)?;
            }
        }
        if mem.is_some() && mem_per_gpu.is_some() {
            return Err(field_error(
                "mem_per_gpu",
                "is set together with `mem`, and Slurm takes only one of --mem and --mem-per-gpu",
            )
            .with_hint("keep one: `mem` per node, or `mem_per_gpu`"));
        }
        let gres = s("gres", &input.gres)?;
        if let Some(g) = &gres {
            let ok = g.split(',').all(|item| {
                let parts: Vec<&str> = item.split(':').collect();
                !item.is_empty()
                    && parts.iter().all(|p| {
                        !p.is_empty()
                            && p.bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
                    })
                    && parts.len() <= 3
            });
            if !ok {
                return Err(field_error(
                    "gres",
                    &format!(
                        "is {}, which is not a gres list",
                        crate::remote::quote::preview(g)
                    ),
                )
                .with_hint("give name[:type][:count], comma-separated, e.g. \"gpu:a100:2\""));
            }
            if g.split(',').any(|i| i.split(':').next() == Some("gpu"))
                && input.gpus_per_node.is_some()
            {
                return Err(field_error(
                    "gres",
                    "asks for GPUs while `gpus_per_node` does too (Slurm would get both --gres=gpu and --gpus-per-node)",
                )
                .with_hint("keep one: `gres` (with a GPU type, e.g. \"gpu:a100:2\") or `gpus_per_node`"));
            }
        }
        let extra = input.slurm_options.clone().unwrap_or_default();
        for (i, o) in extra.iter().enumerate() {
            check_option(i, o)?;
        }
        Ok(SiteOptions {
            qos: s("qos", &input.qos)?,
            mem,
            mem_per_gpu,
            cpus_per_task: input.cpus_per_task,
            gres,
            reservation: s("reservation", &input.reservation)?,
            exclusive: input.exclusive.unwrap_or(false),
            extra,
        })
    }

    /// The argv words, in a fixed order.
    pub fn push(&self, argv: &mut Vec<String>) {
        let opt = |argv: &mut Vec<String>, name: &str, v: &Option<String>| {
            if let Some(v) = v {
                argv.push(format!("--{name}={v}"));
            }
        };
        opt(argv, "qos", &self.qos);
        opt(argv, "mem", &self.mem);
        opt(argv, "mem-per-gpu", &self.mem_per_gpu);
        if let Some(c) = self.cpus_per_task {
            argv.push(format!("--cpus-per-task={c}"));
        }
        opt(argv, "gres", &self.gres);
        opt(argv, "reservation", &self.reservation);
        if self.exclusive {
            argv.push("--exclusive".into());
        }
        argv.extend(self.extra.iter().cloned());
    }
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
pub fn exclude_nodes(list: Option<&[String]>) -> Result<Option<String>> {
    let Some(list) = list else {
        return Ok(None);
    };
    for (i, n) in list.iter().enumerate() {
        let ok = !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-[],".contains(c));
        if !ok {
            return Err(crate::contract::doc::field_error(
                "exclude_nodes",
                &format!(
                    "item {i} is {}, which is not a node name or host list",
                    crate::remote::quote::preview(n)
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
pub fn mounts(value: Option<&Value>) -> Result<Option<String>> {
    let m = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(m)) => m.clone(),
        Some(Value::Array(items)) => {
            let mut list = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => list.push(s.clone()),
                    other => {
                        return Err(wrong_type(&format!("mounts[{i}]"), "a string", other)
                            .with_field("mounts"))
                    }
                }
            }
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
    /// The settings of a document: its [`SettingsInput`], read and checked once.
    pub fn from_doc(doc: &Document) -> Result<Settings> {
        Self::from_input(&SettingsInput::read(doc)?)
    }

    pub fn from_input(input: &SettingsInput) -> Result<Settings> {
        let s = |k: &str, v: &Option<String>| -> Result<Option<String>> {
            if let Some(v) = v {
                check_slurm_value(k, v)?;
            }
            Ok(v.clone())
        };
        let time_limit = match &input.time_limit {
            Some(t) => Some(check_time_limit(t)?.to_string()),
            None => None,
        };
        let flags = input.resolve.as_ref().map(|r| &r.flags);
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
        let container_image = s("container_image", &input.container_image)?;
        let (container_runtime, container_ref) = match &container_image {
            Some(image) => {
                let preflight = input.places.layout.preflight.as_ref();
                let runtime = container::runtime(
                    input.container_runtime.as_deref(),
                    image,
                    preflight.map(|p| &p.remote),
                )?;
                let form = container::Image::parse(image).for_runtime(runtime, image)?;
                (Some(runtime), Some(form))
            }
            None => (None, None),
        };
        Ok(Settings {
            job_name: s("job_name", &input.job_name)?,
            account: s("account", &input.account)?,
            partition: s("partition", &input.partition)?,
            time_limit,
            nodes: input.node_count.unwrap_or(1),
            per_node: input.required_devices_per_node,
            gpus_per_node: input.gpus_per_node,
            container_image,
            container_runtime,
            container_ref,
            image_cache_keep: input.image_cache_keep.unwrap_or(8),
            mounts: mounts(input.mounts.as_ref())?,
            network: flag("network")?.or(flag("sharp")?),
            constraint: flag("constraint")?,
            comment: flag("comment")?,
            gpu_clocks: flag("gpu_clocks")?,
            exclude: exclude_nodes(input.exclude_nodes.as_deref())?,
            site: SiteOptions::from_input(input)?,
            places: input.places.clone(),
        })
    }

    /// `--account`, `--partition`, `--gpus-per-node`, the catalog's cluster flags, and the site's
    /// options ([`SiteOptions`]).
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
        self.site.push(argv);
    }

    /// `--comment`: the catalog's comment (e.g. `metrics`) and our lookup token.
    pub fn comment(&self, token: &str) -> String {
        match &self.comment {
            Some(c) => format!("--comment={c};{token}"),
            None => format!("--comment={token}"),
        }
    }

    /// On pyxis: `--container-image` (enroot's form), `--container-mounts`, and
    /// `--container-workdir` (the job starts in its checkout inside the container too, not in
    /// the image's workdir). Nothing on Apptainer: [`Settings::apptainer_launcher`] wraps the
    /// command instead.
    pub fn container(&self, argv: &mut Vec<String>, workdir: &str) {
        if let (Some(Runtime::Pyxis), Some(i)) = (self.container_runtime, &self.container_ref) {
            argv.push(format!("--container-image={i}"));
            self.container_mounts(argv);
            argv.push(format!("--container-workdir={workdir}"));
        }
    }

    /// Whether the container runs on Apptainer (the command is wrapped in a launcher script).
    pub fn on_apptainer(&self) -> bool {
        self.container_runtime == Some(Runtime::Apptainer)
    }

    /// On Apptainer: the launcher script that runs its arguments in the image (pulled once per
    /// content digest into `cache`), with `mounts` (and `extra_bind`) bound, starting in
    /// `workdir` (empty: where it is started), with the GPUs (`--nv`) when the job asks for
    /// any, and `packages` (a pip --target directory) on its paths; with `instance` (an
    /// allocation's), in that Apptainer instance where it runs on the node (apptainer-run.sh).
    /// `None` on pyxis or without a container.
    pub fn apptainer_launcher(
        &self,
        workdir: &str,
        cache: &str,
        extra_bind: Option<&str>,
        packages: Option<&str>,
        instance: Option<&str>,
    ) -> Result<Option<String>> {
        let (true, Some(image)) = (self.on_apptainer(), &self.container_ref) else {
            return Ok(None);
        };
        let binds: Vec<&str> = extra_bind
            .into_iter()
            .chain(self.mounts.as_deref())
            .filter(|b| !b.is_empty())
            .collect();
        let gpus = self.gpus_per_node.is_some()
            || self.site.gres.as_deref().is_some_and(|g| g.contains("gpu"));
        let mut s = crate::remote::quote::Script::new();
        s.raw(
            "#!/bin/sh
# Written by slurm-tools: the job's container on Apptainer.
",
        );
        s.assign("image", image)?;
        s.assign("cache", cache)?;
        s.assign("binds", &binds.join(","))?;
        s.assign("workdir", workdir)?;
        s.assign("gpus", if gpus { "1" } else { "0" })?;
        s.assign("packages", packages.unwrap_or(""))?;
        s.assign("keep", &self.image_cache_keep.to_string())?;
        s.assign("instance", instance.unwrap_or(""))?;
        s.raw(crate::remote::IMAGE_CACHE);
        s.raw(crate::remote::APPTAINER_RUN);
        Ok(Some(s.into_string()))
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
                    .with_hint(format!("add \"{0}:{0}\" to `mounts` (pyxis and Apptainer mount only the home directory by default), or keep the checkout under the home directory", parent_mount(path))));
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
        assert_eq!(a.mounts, b.mounts);
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

    #[test]
    fn a_sites_options_become_exact_words_or_are_refused_naming_the_field() {
        let st = settings(r#"{"qos":"normal","mem":"64G","cpus_per_task":8,"gres":"gpu:a100:2","reservation":"maint","exclusive":true,"slurm_options":["--licenses=scratch:1","--requeue","--signal=USR1@90"]}"#).unwrap();
        let mut argv = vec![];
        st.common(&mut argv);
        assert_eq!(
            argv,
            [
                "--qos=normal",
                "--mem=64G",
                "--cpus-per-task=8",
                "--gres=gpu:a100:2",
                "--reservation=maint",
                "--exclusive",
                "--licenses=scratch:1",
                "--requeue",
                "--signal=USR1@90"
            ]
        );
        let m = settings(r#"{"mem_per_gpu":"80G"}"#).unwrap();
        let mut argv = vec![];
        m.common(&mut argv);
        assert_eq!(argv, ["--mem-per-gpu=80G"]);
        for (bad, field, says) in [
            (
                r#"{"slurm_options":["-q normal"]}"#,
                "slurm_options",
                "not a long option",
            ),
            (
                r#"{"slurm_options":["--output=/tmp/x"]}"#,
                "slurm_options",
                "the log slurm-watch reads",
            ),
            (r#"{"slurm_options":["--qos=x"]}"#, "slurm_options", "`qos`"),
            (
                r#"{"slurm_options":["--Bad_Name"]}"#,
                "slurm_options",
                "well-formed",
            ),
            (
                r#"{"slurm_options":["--x=a\nb"]}"#,
                "slurm_options",
                "control",
            ),
            (
                r#"{"slurm_options":["--container-image=x"]}"#,
                "slurm_options",
                "container_image",
            ),
            (r#"{"slurm_options":"--requeue"}"#, "slurm_options", "list"),
            (r#"{"mem":"lots"}"#, "mem", "memory size"),
            (r#"{"mem":"64GB"}"#, "mem", "memory size"),
            (
                r#"{"mem":"64G","mem_per_gpu":"8G"}"#,
                "mem_per_gpu",
                "only one",
            ),
            (r#"{"cpus_per_task":0}"#, "cpus_per_task", "between"),
            (r#"{"gres":"gpu a100"}"#, "gres", "blank"),
            (
                r#"{"gres":"gpu:a100:2","gpus_per_node":2}"#,
                "gres",
                "gpus_per_node",
            ),
            (r#"{"exclusive":"yes"}"#, "exclusive", "true or false"),
            (r#"{"qos":"a b"}"#, "qos", "blank"),
        ] {
            let e = settings(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{bad}: {e:?}");
            assert!(e.message.contains(says), "{bad}: {}", e.message);
        }
    }
}
