//! Installed as a person installs it: the wheel scripts/release builds, into a fresh virtual
//! environment, as a normal (non-root) user with no Rust on the PATH, running the main job's
//! pipeline against the local cluster; and the static binary inside a Debian 13 root (the modern
//! site's) and a busybox-only root. The artifacts come from `scripts/release` (scripts/test runs
//! it first and names its folder in SLURM_TOOLS_DIST).

use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The local user the install test runs as: an ordinary account, not root.
const USER: &str = "slurm-tools-user";

pub(crate) fn dist() -> PathBuf {
    let dir = std::env::var_os("SLURM_TOOLS_DIST")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("dist"));
    assert!(
        dir.join("SHA256SUMS").exists(),
        "no release artifacts in {}: run scripts/release (scripts/test does, and sets SLURM_TOOLS_DIST)",
        dir.display()
    );
    dir
}

/// The one artifact in `dir` whose name ends with `suffix`.
fn artifact(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one *{suffix} in {}: {found:?}",
        dir.display()
    );
    found[0].clone()
}

fn sh(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs root, the local cluster and scripts/release's artifacts: scripts/test runs it"]
fn the_checksums_name_every_artifact_and_match() {
    crate::needs_cluster!();
    let dir = dist();
    let (ok, out, err) = sh(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&dir));
    assert!(ok, "{out}{err}");
    let listed = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    assert!(
        listed.contains(".tar.gz") && listed.contains(".whl"),
        "{listed}"
    );
}

#[test]
#[ignore = "needs root, the local cluster and scripts/release's artifacts: scripts/test runs it"]
fn the_wheel_installs_for_a_normal_user_without_rust_and_runs_the_main_job_to_passed() {
    crate::needs_cluster!();
    let tb = testbed();
    let wheel = artifact(&dist(), "musllinux_1_2_x86_64.whl");
    if !sh(Command::new("id").arg(USER)).0 {
        let (ok, _, err) = sh(Command::new("useradd").args(["-m", "-s", "/bin/bash", USER]));
        assert!(ok, "useradd: {err}");
    }
    // The person's own folder, with their copy of the key the test bed's cluster accepts.
    let home = tempfile::Builder::new()
        .prefix("st-install-")
        .tempdir_in("/tmp")
        .unwrap();
    let h = home.path();
    let state = PathBuf::from(tb.s("state_dir"));
    std::fs::create_dir_all(h.join(".ssh")).unwrap();
    std::fs::copy(state.join("id_ed25519"), h.join(".ssh/id_ed25519")).unwrap();
    std::fs::copy(state.join("known_hosts"), h.join(".ssh/known_hosts")).unwrap();
    std::fs::copy(tb.s("catalog"), h.join("clusters.json")).unwrap();
    std::fs::copy(&wheel, h.join(wheel.file_name().unwrap())).unwrap();
    let config = std::fs::read_to_string(tb.ssh_config())
        .unwrap()
        .replace(
            &state.join("id_ed25519").display().to_string(),
            &h.join(".ssh/id_ed25519").display().to_string(),
        )
        .replace(
            &state.join("known_hosts").display().to_string(),
            &h.join(".ssh/known_hosts").display().to_string(),
        );
    write(&h.join(".ssh/config"), &config);
    let job = serde_json::json!({
        "slurm_cluster": "local",
        "slurm_user": tb.s("cluster_user"),
        "ssh_config_file": h.join(".ssh/config").display().to_string(),
        "repo_url": tb.s("origin_url"),
        "repo_root": h.join("sample").display().to_string(),
        "job_name": "installed",
        "time_limit": "00:05:00",
        "recipe": "single",
        "command": "./build/hello",
        "build_command": "./build.sh",
        "work_dir": format!("installed-{}", std::process::id()),
    });
    write(&h.join("job.json"), &job.to_string());
    let (ok, _, err) = sh(Command::new("chown").args(["-R", USER]).arg(h));
    assert!(ok, "{err}");
    std::fs::set_permissions(
        h.join(".ssh/id_ed25519"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();

    // What the person types: a venv, the wheel, the pipeline; Debian's python3, no cargo.
    let script = format!(
        r#"set -eu
cd "$HOME"
/usr/bin/python3 -m venv venv
venv/bin/pip install --no-index --disable-pip-version-check -q ./{wheel}
export PATH="$HOME/venv/bin:/usr/bin:/bin"
if command -v cargo rustc >/dev/null 2>&1; then echo "Rust is on the PATH" >&2; exit 9; fi
for t in slurm-resolve slurm-watch slurm-init; do command -v "$t"; done
slurm-resolve --version
git clone -q {origin} sample
slurm-resolve --catalog clusters.json job.json | slurm-ssh-preflight | slurm-sync-tracked | slurm-sync-untracked > synced.json
slurm-submit --build synced.json | slurm-watch --interval 1 > built.json
slurm-submit built.json | slurm-watch --interval 1 > report.json
# The password hand-over: ssh runs the installed program as its askpass helper.
slurm-ssh-preflight --establish mfa.json > mfa-out.json
ssh -F .ssh/config -o ControlPath="$HOME/mfa-cm" -O exit {mfa_host} 2>/dev/null || true
slurm-tools --list > tools.txt
"#,
        wheel = wheel.file_name().unwrap().to_string_lossy(),
        origin = tb.s("origin_url"),
        mfa_host = tb.s("mfa_host"),
    );
    let mut mfa = doc_for("mfa_host");
    mfa["ssh_config_file"] = serde_json::json!(h.join(".ssh/config").display().to_string());
    mfa["control_path"] = serde_json::json!(h.join("mfa-cm").display().to_string());
    mfa["mfa_style"] = serde_json::json!(true);
    mfa["slurm_password"] = serde_json::json!(std::fs::read_to_string(tb.s("mfa_password_file"))
        .unwrap()
        .trim());
    write(&h.join("mfa.json"), &mfa.to_string());
    let _ = Command::new("chown")
        .args([USER])
        .arg(h.join("mfa.json"))
        .status();
    // The MFA host's login count is other tests' measure too.
    let _mfa = mfa_lock();
    let (ok, out, err) = sh(Command::new("runuser")
        .args(["-u", USER, "--", "env", "-i"])
        .arg(format!("HOME={}", h.display()))
        .args(["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "sh", "-c", &script]));
    assert!(ok, "as {USER}:\n{out}\n{err}");
    let venv_bin = h.join("venv/bin");
    for line in out.lines().take(3) {
        assert!(
            line.starts_with(&venv_bin.display().to_string()),
            "the commands come from the venv: {out}"
        );
    }
    let version = out.lines().nth(3).unwrap_or_default();
    assert!(
        version.starts_with("slurm-resolve ") && version.contains("(commit "),
        "--version names the version and the commit: {version:?}"
    );
    let mfa: Value =
        serde_json::from_str(&std::fs::read_to_string(h.join("mfa-out.json")).unwrap()).unwrap();
    assert_eq!(
        section_of::<shared::contract::schema::Preflight>(&mfa, "preflight")
            .master
            .to_string(),
        "managed",
        "{mfa:#}\n{err}"
    );
    // One program behind every command: each tool has its launcher on the PATH.
    let listed = std::fs::read_to_string(h.join("tools.txt")).unwrap();
    assert_eq!(listed.lines().count(), 15, "{listed}");
    assert!(listed.lines().any(|t| t == "slurm-mcp"), "{listed}");
    for t in listed.lines() {
        assert!(venv_bin.join(t).exists(), "{t} is on the PATH");
    }
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(h.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        report_of(&report).status.name(),
        "PASSED",
        "{report:#}\n{err}"
    );
    assert_eq!(
        report_of(&report).excerpt,
        ["hello from the sample project"]
    );
    // The master the pipeline opened belongs to that user: close it.
    let _ = Command::new("runuser")
        .args(["-u", USER, "--", "ssh", "-F"])
        .arg(h.join(".ssh/config"))
        .args(["-O", "exit"])
        .arg(tb.s("direct_host"))
        .env("HOME", h)
        .output();
}

#[test]
#[ignore = "needs root, the local cluster and scripts/release's artifacts: scripts/test runs it"]
fn the_static_binary_runs_in_a_debian_13_root_and_in_a_busybox_only_root() {
    crate::needs_cluster!();
    let tarball = artifact(&dist(), "x86_64-unknown-linux-musl.tar.gz");
    let unpacked = tempdir();
    let (ok, _, err) = sh(Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(unpacked.path()));
    assert!(ok, "{err}");
    let top = std::fs::read_dir(unpacked.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    for part in [
        "bin/slurm-resolve",
        "bin/slurm-watch",
        "share/man/man1/slurm-submit.1",
        "share/bash-completion/completions/slurm-alloc",
        "share/zsh/site-functions/_slurm-fetch",
        "share/fish/vendor_completions.d/slurm-runs.fish",
        "README.md",
    ] {
        assert!(top.join(part).exists(), "the archive has {part}");
    }
    let bin = top.join("bin/slurm-resolve");
    // Static: no program interpreter (no dynamic loader, no libc of any version needed).
    let (ok, headers, _) = sh(Command::new("readelf").arg("-l").arg(&bin));
    assert!(ok);
    assert!(!headers.contains("INTERP"), "{headers}");

    let busybox_root = tempdir();
    let r = busybox_root.path();
    std::fs::create_dir_all(r.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", r.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", r.join("bin/sh")).unwrap();
    let modern_root = PathBuf::from(testbed().s("modern_root"));
    let in_modern = modern_root.join(format!("opt/st-static-{}", std::process::id()));
    for (root, dir) in [
        (modern_root.as_path(), in_modern.clone()),
        (r, r.join("opt")),
    ] {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&bin, dir.join("slurm-resolve")).unwrap();
        let inside = Path::new("/").join(dir.strip_prefix(root).unwrap());
        let (ok, out, err) = sh(Command::new("chroot").arg(root).args([
            "/bin/sh",
            "-c",
            &format!(
                "{0}/slurm-resolve --version && echo '{{\"ssh_host\": \"login.example.org\"}}' | {0}/slurm-resolve",
                inside.display()
            ),
        ]));
        let _ = std::fs::remove_dir_all(&in_modern);
        assert!(ok, "in {}: {out}\n{err}", root.display());
        let doc: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(
            section_of::<shared::contract::schema::Resolve>(&doc, "resolve")
                .selected_by
                .to_string(),
            "ssh_host",
            "{out}"
        );
    }
}

/// What can be known here of a macOS program (there is no Mac): from its Mach-O header and load
/// commands.
#[derive(Debug)]
struct MachO {
    cpu: u32,
    filetype: u32,
    /// LC_BUILD_VERSION's platform (1: macOS).
    platform: Option<u32>,
    /// LC_CODE_SIGNATURE is there (an ad-hoc signature at least: arm64 macOS runs nothing
    /// unsigned).
    signed: bool,
    /// The libraries it loads (LC_LOAD_DYLIB).
    dylibs: Vec<String>,
}

fn mach_o(b: &[u8]) -> MachO {
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    assert_eq!(u32_at(0), 0xfeed_facf, "a 64-bit Mach-O file");
    let mut m = MachO {
        cpu: u32_at(4),
        filetype: u32_at(12),
        platform: None,
        signed: false,
        dylibs: Vec::new(),
    };
    let mut at = 32;
    for _ in 0..u32_at(16) {
        let (cmd, size) = (u32_at(at), u32_at(at + 4) as usize);
        match cmd {
            0xc => {
                let name = &b[at + u32_at(at + 8) as usize..at + size];
                let end = name.iter().position(|c| *c == 0).unwrap_or(name.len());
                m.dylibs
                    .push(String::from_utf8_lossy(&name[..end]).into_owned());
            }
            0x1d => m.signed = true,
            0x32 => m.platform = Some(u32_at(at + 8)),
            _ => {}
        }
        at += size;
    }
    m
}

/// The macOS release files, built here by cross-linking with zig: for each Mac (Apple silicon
/// and Intel), the archive's program and the wheel's are one Mach-O executable for that
/// processor and for macOS (signed where Apple silicon requires it) that loads only the
/// system's own libraries and frameworks (what a Mac has without anything installed), and the
/// wheel's tag says which Mac it installs on.
/// Running them needs a Mac: not done here.
#[test]
#[ignore = "needs scripts/release's artifacts: scripts/test runs it"]
fn the_macos_release_files_are_signed_mach_o_programs_loading_only_the_systems_libraries() {
    let dir = dist();
    // Apple silicon runs only signed programs (an ad-hoc signature will do); Intel Macs run
    // unsigned ones.
    for (target, cpu, tag, must_sign) in [
        (
            "aarch64-apple-darwin",
            0x0100_000c,
            "macosx_11_0_arm64",
            true,
        ),
        (
            "x86_64-apple-darwin",
            0x0100_0007,
            "macosx_10_12_x86_64",
            false,
        ),
    ] {
        let tarball = artifact(&dir, &format!("{target}.tar.gz"));
        let name = tarball
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".tar.gz")
            .to_string();
        let program = Command::new("tar")
            .arg("-xzOf")
            .arg(&tarball)
            .arg(format!("{name}/bin/slurm-tools"))
            .output()
            .unwrap();
        assert!(
            program.status.success(),
            "{target}: bin/slurm-tools in the archive"
        );
        let m = mach_o(&program.stdout);
        assert_eq!(m.cpu, cpu, "{target}: {m:?}");
        assert_eq!(m.filetype, 2, "{target}: an executable: {m:?}");
        assert_eq!(m.platform, Some(1), "{target}: built for macOS: {m:?}");
        assert!(m.signed || !must_sign, "{target}: signed: {m:?}");
        assert!(
            m.dylibs.iter().any(|d| d == "/usr/lib/libSystem.B.dylib"),
            "{target}: {m:?}"
        );
        for d in &m.dylibs {
            assert!(
                d.starts_with("/usr/lib/") || d.starts_with("/System/Library/Frameworks/"),
                "{target}: loads only what every Mac has, not {d}"
            );
        }
        // Every tool is a link to the one program, as on Linux.
        let (ok, listing, err) = sh(Command::new("tar").arg("-tvzf").arg(&tarball));
        assert!(ok, "{err}");
        for t in ["slurm-resolve", "slurm-watch", "slurm-alloc"] {
            assert!(
                listing.contains(&format!("{name}/bin/{t} -> slurm-tools")),
                "{target}: {t}:\n{listing}"
            );
        }
        // The wheel: the same program, tagged for that Mac.
        let wheel = artifact(&dir, &format!("{tag}.whl"));
        let inside = |member: &str| {
            let out = Command::new("python3")
                .args(["-c", "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [x for x in z.namelist() if x.endswith(sys.argv[2])]; sys.stdout.buffer.write(z.read(n[0]))"])
                .arg(&wheel)
                .arg(member)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}: {member}", wheel.display());
            out.stdout
        };
        let meta = String::from_utf8(inside(".dist-info/WHEEL")).unwrap();
        assert!(meta.contains(&format!("Tag: py3-none-{tag}")), "{meta}");
        assert_eq!(
            inside("/scripts/slurm-tools"),
            program.stdout,
            "{target}: the wheel's program is the archive's"
        );
    }
}
