//! Which container runtime a job uses and the image reference in that runtime's form.
//!
//! One field, `container_image`, runs on either runtime: pyxis/enroot (srun's `--container-*`
//! flags) or Apptainer/Singularity (`apptainer exec` inside each task). `container_runtime`
//! chooses (`auto`, the default: pyxis where srun has it, else Apptainer where it is on PATH);
//! the facts come from preflight's remote check (`preflight.remote.container_flags` and
//! `.apptainer`). A runtime the cluster lacks, or an image form the runtime cannot use, is
//! refused here, before anything is sent.

use crate::contract::doc::field_error;
use crate::contract::schema::RemoteCheck;
use crate::{Result, ToolError};

/// The container runtime a job runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// srun's `--container-image` (pyxis's SPANK plugin, enroot underneath).
    #[default]
    Pyxis,
    /// `apptainer exec` (or `singularity exec`) in each task.
    Apptainer,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Pyxis => "pyxis",
            Runtime::Apptainer => "apptainer",
        }
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a person may write in `container_runtime`.
pub const RUNTIME_VALUES: &str = "\"auto\" (the default), \"pyxis\" or \"apptainer\"";

/// An image reference, as people write it for either runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A registry image: `host[:port]/path[:tag|@digest]` (from `reg/x:1`, `docker://reg/x:1`
    /// or enroot's `reg#x:1`), or a Docker Hub name (`ubuntu:22.04`).
    Registry(String),
    /// An image file on the cluster: an enroot squashfs (`.sqsh`, which Apptainer runs too), a
    /// SIF (`.sif`, Apptainer only), or an Apptainer sandbox directory.
    File(String),
    /// A form only enroot takes: `dockerd://`, `podman://`.
    EnrootOnly(String),
    /// A form only Apptainer takes: `oras://`, `library://`, `shub://`, `docker-archive:`,
    /// `oci-archive:`, `docker-daemon:`, `oci:`.
    ApptainerOnly(String),
}

impl Image {
    pub fn parse(image: &str) -> Image {
        if image.starts_with('/') || image.starts_with("./") || image.starts_with("../") {
            return Image::File(image.to_string());
        }
        for p in ["dockerd://", "podman://"] {
            if image.starts_with(p) {
                return Image::EnrootOnly(image.to_string());
            }
        }
        for p in [
            "oras://",
            "library://",
            "shub://",
            "docker-archive:",
            "oci-archive:",
            "docker-daemon:",
            "oci:",
            "http://",
            "https://",
        ] {
            if image.starts_with(p) {
                return Image::ApptainerOnly(image.to_string());
            }
        }
        let rest = image.strip_prefix("docker://").unwrap_or(image);
        // enroot's `host#path` is the same reference with `/`.
        Image::Registry(rest.replacen('#', "/", 1))
    }

    /// The reference in the form `runtime` takes, or an error naming the form and the runtime.
    pub fn for_runtime(&self, runtime: Runtime, written: &str) -> Result<String> {
        let refuse = |what: &str, hint: &str| -> Result<String> {
            Err(field_error(
                "container_image",
                &format!("is {written:?}, {what}, which {runtime} cannot run"),
            )
            .with_hint(hint.to_string()))
        };
        match (self, runtime) {
            (Image::Registry(r), Runtime::Pyxis) => Ok(super::enroot_image(r)),
            (Image::Registry(r), Runtime::Apptainer) => Ok(format!("docker://{r}")),
            (Image::File(f), Runtime::Pyxis) if f.ends_with(".sif") => refuse(
                "an Apptainer SIF file",
                "give the registry reference the SIF was built from (pyxis imports it), an enroot .sqsh file, or set `container_runtime` to \"apptainer\" on a cluster that has it",
            ),
            (Image::File(f), _) => Ok(f.clone()),
            (Image::EnrootOnly(_), Runtime::Apptainer) => refuse(
                "an image from a local container daemon (an enroot form)",
                "push the image to a registry and give its reference, or give an image file (.sif or .sqsh) on the cluster",
            ),
            (Image::EnrootOnly(r), Runtime::Pyxis) => Ok(r.clone()),
            (Image::ApptainerOnly(_), Runtime::Pyxis) => refuse(
                "an Apptainer-only source",
                "give a registry reference (host/path:tag), an enroot .sqsh file, or set `container_runtime` to \"apptainer\" on a cluster that has it",
            ),
            (Image::ApptainerOnly(r), Runtime::Apptainer) => Ok(r.clone()),
        }
    }

    /// The registry reference whose content digest names the cached image file
    /// (`host[:port]/path` with a host; a Docker Hub short name has none: it runs uncached).
    pub fn cacheable(&self) -> bool {
        match self {
            Image::Registry(r) => r
                .split_once('/')
                .is_some_and(|(h, _)| h.contains('.') || h.contains(':') || h == "localhost"),
            _ => false,
        }
    }
}

/// What `container_runtime` says.
fn choice(written: Option<&str>) -> Result<Option<Runtime>> {
    match written.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("auto") | Some("") => Ok(None),
        Some("pyxis") | Some("enroot") => Ok(Some(Runtime::Pyxis)),
        Some("apptainer") | Some("singularity") => Ok(Some(Runtime::Apptainer)),
        Some(_) => Err(field_error(
            "container_runtime",
            &format!(
                "is {:?}; it is one of {RUNTIME_VALUES}",
                written.unwrap_or_default()
            ),
        )),
    }
}

/// What the cluster offers, in words: "pyxis 0.24.0, apptainer version 1.4.5", or "none".
pub fn offered(remote: &RemoteCheck) -> String {
    let mut have = Vec::new();
    if remote.container_flags {
        have.push(format!(
            "pyxis {}",
            remote.pyxis.as_deref().unwrap_or("(version unknown)")
        ));
    }
    if let Some(a) = &remote.apptainer {
        have.push(a.clone());
    }
    if have.is_empty() {
        "no container runtime (srun has no pyxis flags; neither apptainer nor singularity is on PATH)".into()
    } else {
        have.join(", ")
    }
}

/// The runtime a job with `image` uses: `container_runtime` as written, checked against what
/// preflight saw (`remote`, when there was a preflight); `auto` is pyxis where srun has it, else
/// Apptainer. Without a preflight, `auto` is pyxis unless the image is a form only Apptainer
/// runs.
pub fn runtime(
    written: Option<&str>,
    image: &str,
    remote: Option<&RemoteCheck>,
) -> Result<Runtime> {
    let wanted = choice(written)?;
    let parsed = Image::parse(image);
    let Some(remote) = remote else {
        return Ok(wanted.unwrap_or(match parsed {
            Image::ApptainerOnly(_) => Runtime::Apptainer,
            Image::File(ref f) if f.ends_with(".sif") => Runtime::Apptainer,
            _ => Runtime::Pyxis,
        }));
    };
    let pyxis = remote.container_flags;
    let apptainer = remote.apptainer.is_some();
    let lacks = |r: Runtime| -> ToolError {
        field_error(
            "container_runtime",
            &format!(
                "is \"{r}\", which this cluster does not offer (it has: {})",
                offered(remote)
            ),
        )
        .with_hint("set `container_runtime` to \"auto\" or to a runtime the cluster has, or run on a cluster that has it")
    };
    match wanted {
        Some(Runtime::Pyxis) if !pyxis => Err(lacks(Runtime::Pyxis)),
        Some(Runtime::Apptainer) if !apptainer => Err(lacks(Runtime::Apptainer)),
        Some(r) => Ok(r),
        None => {
            // An image only one runtime can run picks that one when the cluster has it.
            let prefer_apptainer = matches!(parsed, Image::ApptainerOnly(_))
                || matches!(parsed, Image::File(ref f) if f.ends_with(".sif"));
            if pyxis && !(prefer_apptainer && apptainer) {
                Ok(Runtime::Pyxis)
            } else if apptainer {
                Ok(Runtime::Apptainer)
            } else {
                Err(field_error(
                    "container_image",
                    &format!("is set, but this cluster offers {}", offered(remote)),
                )
                .with_hint("remove `container_image` to run on the nodes directly, or use a cluster with pyxis or Apptainer (`slurm-resolve` picks another from the catalog)"))
            }
        }
    }
}

crate::document_input! {
    /// Where the container files go on the cluster: the image cache and an allocation's files.
    pub struct Places {
        pub image_cache_dir: Option<String> = string,
        /// The user's root (`default_user_root_dir`, `remote_cwd`, the home preflight found).
        pub layout: crate::remote::layout::LayoutInput = part,
    }
}

/// The user's root on the cluster (`default_user_root_dir`, else `remote_cwd`, else the home).
fn user_root(places: &Places) -> Result<String> {
    let layout = crate::remote::layout::Layout::of(&places.layout);
    match layout.root()? {
        Some(r) => Ok(r),
        None => layout.home().map(str::to_string).ok_or_else(|| {
            crate::contract::doc::missing(
                "default_user_root_dir",
                "set `default_user_root_dir` (slurm-resolve derives it) or `remote_cwd`: the container image cache lives there",
            )
        }),
    }
}

/// Where a registry image is kept once per content digest (Apptainer's SIF files):
/// `image_cache_dir`, else beside the job trees, under the user's root on the shared filesystem.
pub fn image_cache(places: &Places) -> Result<String> {
    if let Some(dir) = &places.image_cache_dir {
        super::check_slurm_value("image_cache_dir", dir)?;
        let dir =
            crate::remote::layout::Layout::of(&places.layout).absolute("image_cache_dir", dir)?;
        if !dir.starts_with('/') {
            return Err(field_error(
                "image_cache_dir",
                &format!("is {dir:?}, not an absolute path on the cluster"),
            )
            .with_hint("give an absolute path (or ~/...) on a filesystem every node sees"));
        }
        return Ok(dir.trim_end_matches('/').to_string());
    }
    Ok(crate::remote::layout::join(
        &user_root(places)?,
        "slurm-tools-images",
    ))
}

/// An allocation's container files on Apptainer (its launcher and its `packages`), removed by
/// `slurm-alloc down`.
pub fn allocation_dir(places: &Places, job: &str) -> Result<String> {
    Ok(crate::remote::layout::join(
        &crate::remote::layout::join(&user_root(places)?, "slurm-tools-alloc"),
        job,
    ))
}

/// The prefix of the launcher's own lines in the job's stderr.
const SAY: &str = "slurm-tools: container: ";

/// What a line of the job's stderr says of a container image being made ready:
/// `Some(Some((image, what)))` when an import or pull starts (pyxis's import, the launcher's
/// pull or wait), `Some(None)` when it ends, `None` for any other line.
pub fn import_line(line: &str) -> Option<Option<(String, String)>> {
    if let Some(image) = super::pyxis::import_started(line) {
        return Some(Some((
            image.to_string(),
            format!("pyxis is importing the container image {image}"),
        )));
    }
    if super::pyxis::import_ended(line) {
        return Some(None);
    }
    let said = line.split_once(SAY)?.1;
    if let Some(rest) = said.strip_prefix("pulling ") {
        let image = rest.split(' ').next().unwrap_or(rest);
        return Some(Some((
            image.to_string(),
            format!("Apptainer is pulling the container image {image} into the image cache"),
        )));
    }
    if let Some(rest) = said.strip_prefix("waiting for the pull of ") {
        let image = rest.split(' ').next().unwrap_or(rest);
        return Some(Some((
            image.to_string(),
            format!("waiting for another pull of the container image {image}"),
        )));
    }
    if said.starts_with("pulled ")
        || said.starts_with("waited ")
        || said.starts_with("could not pull ")
    {
        return Some(None);
    }
    None
}

/// On pyxis, a registry image with a registry host: found in the image cache by its content
/// digest, or imported there with enroot on the login node first (other submissions of the same
/// image wait for that import); the job then runs the file, so its nodes import nothing. `None`
/// when the job runs uncached (another runtime, an image file, no enroot or curl on the login
/// node, a registry that names no digest, `image_cache_keep` 0): pyxis imports it in the job.
///
/// `token` is the submission's tag (the word in its Slurm comment that keeps the file from
/// being pruned while the job lives); `starts` says who starts from the file ("the job
/// starts"), `nothing` what a failed import leaves ("nothing was submitted").
pub fn pyxis_cache(
    ctx: &crate::Context,
    ssh: &crate::remote::ssh::Ssh,
    st: &mut crate::slurm::Settings,
    token: &str,
    starts: &str,
    nothing: &str,
) -> Result<Option<crate::contract::schema::ContainerUse>> {
    let (Some(Runtime::Pyxis), Some(written)) = (st.container_runtime, st.container_image.clone())
    else {
        return Ok(None);
    };
    let image = Image::parse(&written);
    let Image::Registry(reference) = &image else {
        return Ok(None);
    };
    if st.image_cache_keep == 0 || !image.cacheable() {
        return Ok(None);
    }
    let cache = image_cache(&st.places)?;
    ctx.note(format!("looking for the container image {reference} in the image cache {cache} on {} (a new image goes there once, by `enroot import` on the login node)", ssh.host));
    let params = ImportAsk {
        reference: reference.clone(),
        written: written.clone(),
        cache,
        keep: st.image_cache_keep,
        token: token.to_string(),
        host: ssh.host.clone(),
        nothing: nothing.to_string(),
    };
    let imported = crate::remote::run::<PyxisImport>(ssh, &params)?;
    for said in &imported.removed {
        ctx.note(said);
    }
    if let Some(e) = imported.failure {
        return Err(e);
    }
    match (imported.used, imported.file) {
        (Some(u), Some(f)) => {
            match u.cache.as_str() {
                "hit" => ctx.note(format!("the image cache has {reference} ({}): {starts} from {f}", u.digest.as_deref().unwrap_or("?"))),
                "waited" => ctx.note(format!("waited {} s for another submission's import of {reference}: {starts} from {f}", u.pull_seconds.unwrap_or(0))),
                _ => ctx.note(format!("imported {reference} into {f} in {} s: {starts} from it, and every later job of this image", u.pull_seconds.unwrap_or(0))),
            }
            st.container_ref = Some(f);
            Ok(Some(u))
        }
        (u, _) => {
            if let Some(why) = imported.uncached {
                ctx.note(format!(
                    "no image cache ({why}): pyxis imports the image on the nodes"
                ));
            }
            Ok(u)
        }
    }
}

/// What [`PyxisImport`] is given: the registry reference (and the image as the document wrote
/// it), the cache, how many images it keeps, the submission's tag, and for what a failure says
/// the host and what it left.
pub struct ImportAsk {
    pub reference: String,
    pub written: String,
    pub cache: String,
    pub keep: i64,
    pub token: String,
    pub host: String,
    pub nothing: String,
}

/// What the image cache said.
pub struct Imported {
    /// The cache's use (a hit, a wait for another import, an import).
    pub used: Option<crate::contract::schema::ContainerUse>,
    /// The image file the job starts from.
    pub file: Option<String>,
    /// What the cache's pruning removed, each as said.
    pub removed: Vec<String>,
    /// Why the image goes uncached (no enroot, no digest, ...), when it does.
    pub uncached: Option<String>,
    /// The import failed: the error, with enroot's own words.
    pub failure: Option<ToolError>,
}

/// A registry image found in the image cache on the login node by its digest, or imported there
/// (image-cache.sh, pyxis-import.sh): one execution, up to an hour for a large image.
pub struct PyxisImport;

impl crate::remote::Operation for PyxisImport {
    type Params = ImportAsk;
    type Reply = Imported;
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(3600);

    fn script(p: &ImportAsk) -> Result<crate::remote::quote::Script> {
        let mut s = crate::remote::quote::Script::new();
        s.assign("image", &p.reference)?;
        s.assign("cache", &p.cache)?;
        s.assign("keep", &p.keep.to_string())?;
        s.assign("user", &p.token)?;
        s.assign("E_PULL", "3")?;
        s.raw(crate::remote::IMAGE_CACHE);
        s.raw(crate::remote::PYXIS_IMPORT);
        Ok(s)
    }

    fn reply(p: &ImportAsk, out: &crate::support::process::Output) -> Result<Imported> {
        let text = out.stdout_text();
        let mut r = Imported {
            used: None,
            file: None,
            removed: Vec::new(),
            uncached: None,
            failure: None,
        };
        for line in text.lines() {
            note_use(line, &mut r.used);
            if let Some(f) = line.strip_prefix("FILE ") {
                r.file = Some(f.trim().to_string());
            } else if let Some((_, said)) = line.split_once(SAY) {
                if said.starts_with("removed ") {
                    r.removed.push(said.to_string());
                } else if let Some(rest) = said.strip_prefix("uncached ") {
                    if r.uncached.is_none() {
                        r.uncached = rest
                            .split_once(" (")
                            .map(|(_, why)| why.trim_end_matches(')').to_string());
                    }
                }
            }
        }
        if !out.success() {
            let lines: Vec<String> = text
                .lines()
                .chain(out.stderr_tail.lines())
                .map(str::to_string)
                .collect();
            let why = failure(&lines).unwrap_or_else(|| {
                format!(
                    "the import on {} failed ({})",
                    p.host,
                    crate::support::process::describe_exit(out.code)
                )
            });
            r.failure = Some(ToolError::remote(format!("`container_image` {}: {why}; {}", p.written, p.nothing))
                .with_field("container_image")
                .with_hint("check the image reference (registry host, path and tag) and that the registry answers from the login node; enroot's own output is in this error")
                .with_command(out.record()));
        }
        Ok(r)
    }
}

/// Which cached image a job used, from the launcher's lines (a pull outranks a wait, a wait a
/// cache hit: with several tasks, one may pull while the first waits for it).
pub fn note_use(line: &str, seen: &mut Option<crate::contract::schema::ContainerUse>) {
    use crate::contract::schema::ContainerUse;
    let Some((_, said)) = line.split_once(SAY) else {
        return;
    };
    let words: Vec<&str> = said.split(' ').collect();
    let rank = |c: &str| match c {
        "pulled" => 3,
        "waited" => 2,
        "hit" => 1,
        _ => 0,
    };
    let found = match words.as_slice() {
        ["pulled", image, digest, "into", file, "in", secs, "s"] => Some(ContainerUse {
            image: image.to_string(),
            digest: Some(digest.to_string()),
            file: Some(file.to_string()),
            cache: "pulled".into(),
            pull_seconds: secs.parse().ok(),
        }),
        ["waited", secs, "s", "for", "the", "pull", "of", image, digest, "into", file] => {
            Some(ContainerUse {
                image: image.to_string(),
                digest: Some(digest.to_string()),
                file: Some(file.to_string()),
                cache: "waited".into(),
                pull_seconds: secs.parse().ok(),
            })
        }
        ["cache", "hit", image, digest, "at", file] => Some(ContainerUse {
            image: image.to_string(),
            digest: Some(digest.to_string()),
            file: Some(file.to_string()),
            cache: "hit".into(),
            pull_seconds: None,
        }),
        ["uncached", image, ..] => Some(ContainerUse {
            image: image.to_string(),
            cache: "uncached".into(),
            ..Default::default()
        }),
        _ => None,
    };
    if let Some(f) = found {
        if seen
            .as_ref()
            .is_none_or(|s| rank(&s.cache) < rank(&f.cache))
        {
            *seen = Some(f);
        }
    }
}

/// Whether a stderr line belongs to the container's start (kept to say why it failed).
pub fn is_container_line(line: &str) -> bool {
    line.contains("pyxis:") || line.contains(SAY) || line.trim_start().starts_with("FATAL:")
}

/// What a container failure in the job's stderr means, in a sentence that names the image,
/// mount or directory (pyxis's lines, Apptainer's `FATAL:` lines, the launcher's own).
pub fn failure(lines: &[String]) -> Option<String> {
    if let Some(why) = super::pyxis::failure(lines) {
        return Some(why);
    }
    let mut pull: Option<String> = None;
    let mut missing_runtime: Option<String> = None;
    let mut fatal: Option<String> = None;
    for line in lines {
        if let Some((_, said)) = line.split_once(SAY) {
            if let Some(rest) = said.strip_prefix("could not pull ") {
                let image = rest.split(' ').next().unwrap_or(rest);
                // Its own reason, when the launcher knows it (not "apptainer's reason above").
                let reason = rest
                    .split_once(" (")
                    .map(|(_, r)| r.trim_end_matches(')'))
                    .filter(|r| !r.starts_with("apptainer's") && !r.starts_with("the pull's"));
                pull.get_or_insert_with(|| match reason {
                    Some(r) => format!("the container image {image} could not be pulled: {r}"),
                    None => format!("the container image {image} could not be pulled"),
                });
            } else if said.starts_with("neither apptainer nor singularity") {
                missing_runtime.get_or_insert_with(|| said.trim().to_string());
            }
        } else if let Some((_, msg)) = line.split_once("FATAL:") {
            fatal.get_or_insert_with(|| msg.trim().to_string());
        }
    }
    if let Some(m) = missing_runtime {
        return Some(format!("the container did not start: {m}"));
    }
    let explained = fatal.as_deref().map(|f| {
        if let Some((_, rest)) = f.split_once("mount source ") {
            let src = rest.trim_end_matches(" doesn't exist").trim();
            format!("the `mounts` source {src} does not exist on the node")
        } else if let Some((_, rest)) = f.split_once("failed to set working directory: chdir ") {
            let dir = rest.split(": ").next().unwrap_or(rest).trim();
            format!("the job's directory {dir} is not visible inside the container: add its filesystem to `mounts` at the same path")
        } else if let Some((_, rest)) = f.split_once("could not open image ") {
            let file = rest.split(": ").next().unwrap_or(rest).trim();
            format!("the container image file {file} does not exist on the node")
        } else if let Some((_, rest)) = f.split_once("Unable to handle ") {
            let image = rest.split(' ').next().unwrap_or(rest);
            format!("the container image {image} could not be pulled (apptainer: {f})")
        } else if f.contains("executable file not found in $PATH") {
            format!("the command is not in the container image ({f})")
        } else {
            format!("the container did not start (apptainer: {f})")
        }
    });
    match (pull, fatal, explained) {
        (Some(p), Some(f), _) => Some(format!("{p} (apptainer: {f})")),
        (Some(p), None, _) => Some(p),
        (None, _, e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask() -> ImportAsk {
        ImportAsk {
            reference: "reg:5000/img:1".into(),
            written: "docker://reg:5000/img:1".into(),
            cache: "/h/u/.cache/slurm-tools/images".into(),
            keep: 3,
            token: "slurm-tools-abc".into(),
            host: "login".into(),
            nothing: "nothing was submitted".into(),
        }
    }

    /// The image cache's reply: its use, the file, what pruning removed, why an image goes
    /// uncached, and a failed import with enroot's words; the script as assembled is clean.
    #[test]
    fn the_image_caches_reply_is_read_once_into_its_parts() {
        use crate::remote::Operation;
        use crate::support::process::Output;
        let hit = Output::of(
            Some(0),
            "slurm-tools: container: removed the cached image /c/old.sqsh (least recently used; the cache keeps 3)\n\
             slurm-tools: container: cache hit reg:5000/img:1 sha256:ab at /c/ab.sqsh\nFILE /c/ab.sqsh\n",
            "",
        );
        let r = PyxisImport::reply(&ask(), &hit).unwrap();
        assert_eq!(r.file.as_deref(), Some("/c/ab.sqsh"));
        assert_eq!(r.used.as_ref().map(|u| u.cache.as_str()), Some("hit"));
        assert_eq!(
            r.removed,
            ["removed the cached image /c/old.sqsh (least recently used; the cache keeps 3)"]
        );
        assert!(r.uncached.is_none() && r.failure.is_none());
        let uncached = Output::of(
            Some(0),
            "slurm-tools: container: uncached reg:5000/img:1 (no enroot on the login node l: pyxis imports the image in each job)\n",
            "",
        );
        let r = PyxisImport::reply(&ask(), &uncached).unwrap();
        assert_eq!(
            r.uncached.as_deref(),
            Some("no enroot on the login node l: pyxis imports the image in each job")
        );
        assert!(r.file.is_none());
        let failed = Output::of(Some(3), "", "[ERROR] something enroot said\n");
        let e = PyxisImport::reply(&ask(), &failed)
            .unwrap()
            .failure
            .unwrap();
        assert!(
            e.message
                .starts_with("`container_image` docker://reg:5000/img:1: "),
            "{}",
            e.message
        );
        assert!(
            e.message.ends_with("; nothing was submitted"),
            "{}",
            e.message
        );
        assert_eq!(e.field.as_deref(), Some("container_image"));
        let script = PyxisImport::script(&ImportAsk {
            token: "it's".into(),
            ..ask()
        })
        .unwrap();
        crate::remote::script_check::assert_clean("pyxis-import", script.as_str());
    }

    fn remote(pyxis: bool, apptainer: bool) -> RemoteCheck {
        RemoteCheck {
            container_flags: pyxis,
            pyxis: pyxis.then(|| "0.24.0".into()),
            apptainer: apptainer.then(|| "apptainer version 1.4.5".into()),
            ..Default::default()
        }
    }

    #[test]
    fn each_form_becomes_the_runtimes_own_or_is_refused_by_name() {
        let cases: &[(&str, Option<&str>, Option<&str>)] = &[
            // (written, pyxis, apptainer)
            (
                "10.77.0.1:5055/testbed/devbox:1",
                Some("10.77.0.1:5055#testbed/devbox:1"),
                Some("docker://10.77.0.1:5055/testbed/devbox:1"),
            ),
            (
                "docker://nvcr.io/nvidia/pytorch:24.01-py3",
                Some("nvcr.io#nvidia/pytorch:24.01-py3"),
                Some("docker://nvcr.io/nvidia/pytorch:24.01-py3"),
            ),
            (
                "nvcr.io#nvidia/pytorch:24.01-py3",
                Some("nvcr.io#nvidia/pytorch:24.01-py3"),
                Some("docker://nvcr.io/nvidia/pytorch:24.01-py3"),
            ),
            (
                "ubuntu:22.04",
                Some("ubuntu:22.04"),
                Some("docker://ubuntu:22.04"),
            ),
            (
                "ghcr.io/o/i@sha256:0123",
                Some("ghcr.io#o/i@sha256:0123"),
                Some("docker://ghcr.io/o/i@sha256:0123"),
            ),
            (
                "/images/x.sqsh",
                Some("/images/x.sqsh"),
                Some("/images/x.sqsh"),
            ),
            ("./x.sqsh", Some("./x.sqsh"), Some("./x.sqsh")),
            ("/images/x.sif", None, Some("/images/x.sif")),
            ("dockerd://img:1", Some("dockerd://img:1"), None),
            ("podman://img:1", Some("podman://img:1"), None),
            ("oras://ghcr.io/o/i:1", None, Some("oras://ghcr.io/o/i:1")),
            ("library://o/c/i:1", None, Some("library://o/c/i:1")),
            ("docker-archive:/x.tar", None, Some("docker-archive:/x.tar")),
        ];
        for (written, pyxis, apptainer) in cases {
            let image = Image::parse(written);
            for (runtime, want) in [(Runtime::Pyxis, pyxis), (Runtime::Apptainer, apptainer)] {
                match (image.for_runtime(runtime, written), want) {
                    (Ok(got), Some(want)) => assert_eq!(&got, want, "{written} on {runtime}"),
                    (Err(e), None) => {
                        assert_eq!(e.field.as_deref(), Some("container_image"));
                        assert!(e.message.contains(written), "{e}");
                        assert!(e.message.contains(runtime.name()), "{e}");
                        assert!(e.hint.is_some(), "{written}");
                    }
                    (got, want) => panic!("{written} on {runtime}: {got:?}, wanted {want:?}"),
                }
            }
        }
        assert!(Image::parse("nvcr.io/nvidia/x:1").cacheable());
        assert!(Image::parse("localhost/x:1").cacheable());
        assert!(Image::parse("10.77.0.1:5055/t/d:1").cacheable());
        assert!(!Image::parse("ubuntu:22.04").cacheable());
        assert!(!Image::parse("library/ubuntu").cacheable());
        assert!(!Image::parse("/x.sif").cacheable());
    }

    #[test]
    fn the_runtime_is_what_the_cluster_has_or_a_clear_refusal() {
        let img = "reg.example/x:1";
        let both = remote(true, true);
        let pyxis = remote(true, false);
        let apptainer = remote(false, true);
        let none = remote(false, false);
        assert_eq!(runtime(None, img, Some(&both)).unwrap(), Runtime::Pyxis);
        assert_eq!(
            runtime(Some("auto"), img, Some(&apptainer)).unwrap(),
            Runtime::Apptainer
        );
        assert_eq!(
            runtime(Some("Apptainer"), img, Some(&both)).unwrap(),
            Runtime::Apptainer
        );
        assert_eq!(
            runtime(Some("singularity"), img, Some(&apptainer)).unwrap(),
            Runtime::Apptainer
        );
        assert_eq!(
            runtime(None, "/x.sif", Some(&both)).unwrap(),
            Runtime::Apptainer
        );
        assert_eq!(runtime(None, "/x.sif", None).unwrap(), Runtime::Apptainer);
        assert_eq!(runtime(None, img, None).unwrap(), Runtime::Pyxis);
        assert_eq!(
            runtime(Some("apptainer"), img, None).unwrap(),
            Runtime::Apptainer
        );
        let e = runtime(Some("pyxis"), img, Some(&apptainer)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("container_runtime"));
        assert!(e.message.contains("apptainer version 1.4.5"), "{e}");
        let e = runtime(Some("apptainer"), img, Some(&pyxis)).unwrap_err();
        assert!(e.message.contains("pyxis 0.24.0"), "{e}");
        let e = runtime(None, img, Some(&none)).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("container_image"));
        assert!(e.message.contains("no container runtime"), "{e}");
        let e = runtime(Some("docker"), img, Some(&both)).unwrap_err();
        assert!(
            e.message.contains("\"docker\"") && e.message.contains("apptainer"),
            "{e}"
        );
    }

    #[test]
    fn the_launchers_and_apptainers_lines_say_what_happened() {
        let img = "docker://10.77.0.1:5055/t/d:1";
        let d = "sha256:8c89";
        assert_eq!(
            import_line(&format!(
                "slurm-tools: container: pulling {img} {d} into /c/8c89.sif"
            )),
            Some(Some((
                img.to_string(),
                format!("Apptainer is pulling the container image {img} into the image cache")
            )))
        );
        assert_eq!(
            import_line(&format!(
                "slurm-tools: container: pulled {img} {d} into /c/8c89.sif in 22 s"
            )),
            Some(None)
        );
        assert_eq!(import_line("pyxis: imported docker image: x"), Some(None));
        assert_eq!(import_line("hello"), None);
        let mut seen = None;
        note_use(
            &format!("slurm-tools: container: cache hit {img} {d} at /c/8c89.sif"),
            &mut seen,
        );
        assert_eq!(seen.as_ref().unwrap().cache, "hit");
        note_use(
            &format!("slurm-tools: container: pulled {img} {d} into /c/8c89.sif in 22 s"),
            &mut seen,
        );
        note_use(
            &format!(
                "slurm-tools: container: waited 3 s for the pull of {img} {d} into /c/8c89.sif"
            ),
            &mut seen,
        );
        let u = seen.unwrap();
        assert_eq!(
            (
                u.cache.as_str(),
                u.pull_seconds,
                u.digest.as_deref(),
                u.file.as_deref()
            ),
            ("pulled", Some(22), Some(d), Some("/c/8c89.sif"))
        );
        let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
        let mount = lines("WARNING: skipping mount of /nonexistent: stat /nonexistent: no such file or directory\nFATAL:   container creation failed: mount hook function failure: mount /nonexistent->/x error: while mounting /nonexistent: mount source /nonexistent doesn't exist");
        assert_eq!(
            failure(&mount).unwrap(),
            "the `mounts` source /nonexistent does not exist on the node"
        );
        let pull = lines(&format!("slurm-tools: container: pulling {img} {d} into /c/x.sif\nFATAL:   While making image from oci registry: error fetching image to cache: failed to get checksum for {img}: reading manifest 1 in 10.77.0.1:5055/t/d: manifest unknown\nslurm-tools: container: could not pull {img} {d} (apptainer's reason above)"));
        let why = failure(&pull).unwrap();
        assert!(
            why.starts_with(&format!(
                "the container image {img} could not be pulled (apptainer: While making"
            )),
            "{why}"
        );
        let chdir = lines(
            "FATAL:   failed to set working directory: chdir /lustre/r: no such file or directory",
        );
        assert!(failure(&chdir)
            .unwrap()
            .starts_with("the job's directory /lustre/r is not visible"));
        let nofile = lines("FATAL:   While checking container encryption: could not open image /x/none.sif: failed to retrieve path for /x/none.sif: lstat /x/none.sif: no such file or directory");
        assert_eq!(
            failure(&nofile).unwrap(),
            "the container image file /x/none.sif does not exist on the node"
        );
        let gone = lines(&format!("slurm-tools: container: could not pull {img} (the registry has no such image: http://r/v2/t/d/manifests/1 answered 404)"));
        assert_eq!(failure(&gone).unwrap(), format!("the container image {img} could not be pulled: the registry has no such image: http://r/v2/t/d/manifests/1 answered 404"));
        let direct = lines(&format!("FATAL:   Unable to handle {img} uri: failed to get checksum for {img}: manifest unknown"));
        assert!(failure(&direct).unwrap().starts_with(&format!(
            "the container image {img} could not be pulled (apptainer: Unable"
        )));
        assert_eq!(failure(&lines("hello\nTraceback")), None);
    }
}
