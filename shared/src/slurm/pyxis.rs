//! What pyxis and enroot mean for a job: the image reference in the form enroot takes, whether
//! the job's paths are visible inside the container, and what pyxis's log lines say (an image
//! import in progress, a container that could not start and why).
//!
//! pyxis writes its messages to the job's stderr (the `--error` file, or srun's stderr):
//! `pyxis: importing docker image: IMAGE` when the import starts (for a one-task step or a
//! batch step; a many-task step imports silently), `pyxis: imported docker image: IMAGE` when
//! it is done, and `slurmstepd-NODE: error: pyxis: ...` lines when it fails, followed by
//! enroot's own log (`pyxis:     [ERROR] ...`).

/// pyxis/enroot want the registry separated by `#`: `nvcr.io/nvidia/x:tag` -> `nvcr.io#nvidia/x:tag`
/// (also after a `docker://` prefix). A squashfs file (`/path` or `./path`), a reference that
/// already has a `#`, a Docker Hub name (`ubuntu:22.04`, `library/ubuntu`) and a local daemon's
/// image (`dockerd://`, `podman://`) pass unchanged. The document keeps the form the person
/// wrote; this is applied when the flag is built.
pub fn enroot_image(image: &str) -> String {
    let (scheme, rest) = match image.strip_prefix("docker://") {
        Some(rest) => ("docker://", rest),
        None => ("", image),
    };
    if rest.contains('#') || rest.starts_with('/') || rest.starts_with("./") || rest.contains("://")
    {
        return image.to_string();
    }
    match rest.split_once('/') {
        Some((first, tail))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            format!("{scheme}{first}#{tail}")
        }
        _ => image.to_string(),
    }
}

/// Whether `image` names a squashfs file rather than a registry image.
pub fn is_image_file(image: &str) -> bool {
    image.starts_with('/') || image.starts_with("./") || image.starts_with("../")
}

/// Where a path of the job is inside the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visibility {
    /// Under the home directory, which pyxis mounts by default.
    Home,
    /// Under the source of this `mounts` entry, mounted at the same path.
    Mount(String),
    /// Under this entry's source, but mounted at another path: the job's absolute paths
    /// (its code, its command file) do not exist inside.
    Moved { entry: String },
    /// Not mounted at all.
    Hidden,
}

/// Whether `path` (absolute) is visible at the same path inside a pyxis container, given the
/// cluster user's `home` (when known) and the `mounts` flag value (`src:dst[:flags],...`).
pub fn visibility(path: &str, home: Option<&str>, mounts: Option<&str>) -> Visibility {
    let under = |dir: &str| {
        let dir = dir.trim_end_matches('/');
        dir.is_empty() || path == dir || path.starts_with(&format!("{dir}/"))
    };
    if home.is_some_and(|h| !h.is_empty() && under(h)) {
        return Visibility::Home;
    }
    let mut moved = None;
    for entry in mounts.unwrap_or("").split(',').filter(|e| !e.is_empty()) {
        let mut parts = entry.split(':');
        let src = parts.next().unwrap_or("");
        let dst = parts.next().unwrap_or(src);
        if !src.starts_with('/') || !under(src) {
            continue;
        }
        if dst.trim_end_matches('/') == src.trim_end_matches('/') {
            return Visibility::Mount(entry.to_string());
        }
        moved.get_or_insert_with(|| entry.to_string());
    }
    match moved {
        Some(entry) => Visibility::Moved { entry },
        None => Visibility::Hidden,
    }
}

/// The image an import line says pyxis is importing now (`None` for any other line).
pub fn import_started(line: &str) -> Option<&str> {
    line.split_once("pyxis: importing docker image: ")
        .map(|(_, image)| image.trim())
}

/// Whether the line says an import ended (done or failed).
pub fn import_ended(line: &str) -> bool {
    line.contains("pyxis: imported docker image:")
        || line.contains("pyxis: failed to import docker image:")
}

/// What a pyxis failure in the job's stderr means, in a sentence that names the image or mount,
/// from the lines seen so far; `None` when no line is a pyxis failure.
pub fn failure(lines: &[String]) -> Option<String> {
    let mut what: Option<String> = None;
    let mut enroot_error: Option<String> = None;
    for line in lines {
        if let Some((_, image)) = line.split_once("pyxis: failed to import docker image: ") {
            what.get_or_insert_with(|| {
                format!("the container image {} could not be imported", image.trim())
            });
        } else if let Some((_, src)) =
            line.split_once("pyxis: --container-mounts: source path does not exist: ")
        {
            what.get_or_insert_with(|| {
                format!(
                    "the `mounts` source {} does not exist on the node",
                    src.trim()
                )
            });
        } else if let Some((_, rest)) = line.split_once("pyxis: couldn't chdir to ") {
            let dir = rest.split(": ").next().unwrap_or(rest).trim();
            what.get_or_insert_with(|| {
                format!("the job's directory {dir} is not visible inside the container: add its filesystem to `mounts` at the same path (this cluster's enroot may not mount the home directory)")
            });
        } else if let Some((_, msg)) = line.split_once("pyxis:     [ERROR] ") {
            enroot_error.get_or_insert_with(|| msg.trim().to_string());
        } else if let Some((_, msg)) = line.split_once("error: pyxis: ") {
            let msg = msg.trim();
            // The generic lines that follow the real cause say nothing more.
            let generic = msg.starts_with("child ")
                || msg.starts_with("printing enroot log")
                || msg.starts_with("couldn't create enroot start")
                || msg.starts_with("container was not started successfully");
            if !generic && !msg.is_empty() && !msg.starts_with("    ") {
                what.get_or_insert_with(|| format!("the container did not start: {msg}"));
            }
        }
    }
    match (what, enroot_error) {
        (Some(w), Some(e)) => Some(format!("{w} (enroot: {e})")),
        (Some(w), None) => Some(w),
        (None, Some(e)) => Some(format!("the container did not start (enroot: {e})")),
        (None, None) => None,
    }
}

pub use crate::remote::FIRST_HOST;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enroot_form() {
        assert_eq!(
            enroot_image("nvcr.io/nvidia/pytorch:24.01-py3"),
            "nvcr.io#nvidia/pytorch:24.01-py3"
        );
        assert_eq!(
            enroot_image("127.0.0.1:5055/testbed/devbox:1"),
            "127.0.0.1:5055#testbed/devbox:1"
        );
        assert_eq!(
            enroot_image("docker://nvcr.io/nvidia/x:1"),
            "docker://nvcr.io#nvidia/x:1"
        );
        assert_eq!(enroot_image("nvcr.io#nvidia/x:1"), "nvcr.io#nvidia/x:1");
        assert_eq!(enroot_image("/images/x.sqsh"), "/images/x.sqsh");
        assert_eq!(
            enroot_image("/lustre/images/x.sqsh"),
            "/lustre/images/x.sqsh"
        );
        assert_eq!(
            enroot_image("nvcr.io/nvidia/pytorch:24.01"),
            "nvcr.io#nvidia/pytorch:24.01"
        );
        assert_eq!(enroot_image("./x.sqsh"), "./x.sqsh");
        assert_eq!(enroot_image("dockerd://img:1"), "dockerd://img:1");
        assert_eq!(enroot_image("ubuntu:22.04"), "ubuntu:22.04");
        assert_eq!(enroot_image("library/ubuntu"), "library/ubuntu");
        assert_eq!(enroot_image("localhost:5000/x"), "localhost:5000#x");
        assert_eq!(
            enroot_image("user@nvcr.io/nvidia/x"),
            "user@nvcr.io#nvidia/x"
        );
    }

    #[test]
    fn visibility_follows_home_and_same_path_mounts() {
        let home = Some("/home/u");
        assert_eq!(visibility("/home/u/work/r", home, None), Visibility::Home);
        assert_eq!(visibility("/home/u", home, None), Visibility::Home);
        assert_eq!(visibility("/home/uu/r", home, None), Visibility::Hidden);
        assert_eq!(
            visibility(
                "/lustre/u/r",
                home,
                Some("/data:/data,/lustre/u:/lustre/u:ro")
            ),
            Visibility::Mount("/lustre/u:/lustre/u:ro".into())
        );
        assert_eq!(
            visibility("/lustre/u/r", home, Some("/lustre/")),
            Visibility::Mount("/lustre/".into())
        );
        assert_eq!(
            visibility("/lustre/u/r", home, Some("/lustre:/mnt")),
            Visibility::Moved {
                entry: "/lustre:/mnt".into()
            }
        );
        assert_eq!(
            visibility("/lustre2/r", home, Some("/lustre:/lustre")),
            Visibility::Hidden
        );
        assert_eq!(
            visibility("/lustre/r", None, Some("/:/")),
            Visibility::Mount("/:/".into())
        );
    }

    #[test]
    fn pyxis_lines_say_what_happened() {
        assert_eq!(
            import_started("pyxis: importing docker image: reg:5#ns/i:1"),
            Some("reg:5#ns/i:1")
        );
        assert!(import_ended("pyxis: imported docker image: reg:5#ns/i:1"));
        let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
        let missing = lines("pyxis: importing docker image: 127.0.0.1:5055#t/none:1\nslurmstepd-vm: error: pyxis: child 9124 failed with error code: 1\nslurmstepd-vm: error: pyxis: failed to import docker image: 127.0.0.1:5055#t/none:1\nslurmstepd-vm: error: pyxis: printing enroot log file:\nslurmstepd-vm: error: pyxis:     [INFO] Querying registry for permission grant\nslurmstepd-vm: error: pyxis:     [ERROR] URL http://127.0.0.1:5055/v2/t/none/manifests/1 returned error code: 404 Not Found\nslurmstepd-vm: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1");
        assert_eq!(
            failure(&missing).unwrap(),
            "the container image 127.0.0.1:5055#t/none:1 could not be imported (enroot: URL http://127.0.0.1:5055/v2/t/none/manifests/1 returned error code: 404 Not Found)"
        );
        let mount = lines("slurmstepd-vm: error: pyxis: --container-mounts: source path does not exist: /nonexistent\nslurmstepd-vm: error: pyxis: couldn't create enroot start configuration script\nslurmstepd-vm: error: pyxis: printing enroot log file:\nslurmstepd-vm: error: pyxis:     [INFO] Extracting squashfs filesystem...");
        assert_eq!(
            failure(&mount).unwrap(),
            "the `mounts` source /nonexistent does not exist on the node"
        );
        let chdir = lines("slurmstepd-vm: error: pyxis: couldn't chdir to /lustre/u/r: No such file or directory\nslurmstepd-vm: error: spank: required plugin spank_pyxis.so: task_init() failed with rc=-1");
        assert!(
            failure(&chdir)
                .unwrap()
                .starts_with("the job's directory /lustre/u/r is not visible inside the container"),
            "{chdir:?}"
        );
        assert_eq!(failure(&lines("hello\nTraceback")), None);
    }

    #[test]
    fn first_host_reads_the_node_list_without_scontrol() {
        for (list, first) in [
            ("vm", "vm"),
            ("mn1,mn2", "mn1"),
            ("node[01-04]", "node01"),
            ("gpu[7,9],cpu1", "gpu7"),
            ("a1,b[1-2]", "a1"),
            ("rack2-n[003-005,010]", "rack2-n003"),
        ] {
            for shell in ["sh", "bash"] {
                let out = std::process::Command::new(format!("/bin/{shell}"))
                    .arg("-c")
                    .arg(format!("{FIRST_HOST}first_host"))
                    .env_clear()
                    .env("PATH", "/nonexistent")
                    .env("SLURM_JOB_NODELIST", list)
                    .output()
                    .unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    format!("{first}\n"),
                    "{shell}: {list}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}
