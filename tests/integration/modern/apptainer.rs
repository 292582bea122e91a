//! Containers on Apptainer (the modern site: real Apptainer 1.4.5 in user-namespace mode on real
//! Slurm 24.11 nodes, no pyxis) beside pyxis (the first site): one `container_image` for both,
//! the image pulled once per content digest into the image cache, the runtime's failures said.

use super::*;

/// The first site's registry, as both sites reach it.
fn registry() -> String {
    testbed().s("registry")
}

/// A new image in the registry: the test bed's devbox image with one more environment variable
/// (`SLURM_TOOLS_SALT=salt`), so its config and manifest, and so its content digest, are new,
/// while its layers are the ones the registry already has (the push sends two small blobs).
/// Pushed as `testbed/devbox:TAG`; returns the reference.
pub(crate) fn push_salted_image(tag: &str, salt: &str) -> String {
    let dir = tempdir();
    let layout = dir.path().join("oci");
    let source = std::path::Path::new("/var/cache/slurm-tools-testbed/images/devbox.oci");
    let sh = |script: &str| {
        let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // Blobs are content-addressed and never rewritten: hard links share them; the index is
    // rewritten by umoci, so it is a copy.
    sh(&format!(
        "cp -al {src} {dst} && rm {dst}/index.json && cp {src}/index.json {dst}/index.json \
         && umoci config --image {dst}:devbox --config.env=SLURM_TOOLS_SALT={salt}",
        src = source.display(),
        dst = layout.display()
    ));
    let reference = format!("{}/testbed/devbox:{tag}", registry());
    sh(&format!(
        "skopeo copy -q --format v2s2 --dest-tls-verify=false oci:{}:devbox docker://{reference}",
        layout.display()
    ));
    reference
}

/// A word no earlier run used: images salted with it have a content digest of their own.
pub(crate) fn fresh_salt() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// The registry's content digest of `reference` (`host/path:tag`).
pub(crate) fn digest_of(reference: &str) -> String {
    let (host, rest) = reference.split_once('/').unwrap();
    let (name, tag) = rest.rsplit_once(':').unwrap();
    let out = Command::new("curl")
        .args([
            "-sfI",
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
        ])
        .arg(format!("http://{host}/v2/{name}/manifests/{tag}"))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&out.stdout).to_lowercase();
    headers
        .lines()
        .find_map(|l| l.strip_prefix("docker-content-digest: "))
        .map(|d| d.trim().to_string())
        .unwrap_or_else(|| panic!("no digest for {reference}: {headers}"))
}

/// The image cache on the modern site (the catalog's user root there).
fn cache_dir(doc: &Value) -> String {
    let job = job_of(doc);
    job.image_cache
        .clone()
        .unwrap_or_else(|| panic!("no image_cache in {job:?}"))
}

/// Which cached image the job ran from (the report's `container`).
fn used_of(doc: &Value) -> shared::contract::schema::ContainerUse {
    let r = report_of(doc);
    r.container
        .clone()
        .unwrap_or_else(|| panic!("no container in the report: {r:?}"))
}

/// A synced document on the modern site for one container test: one GPU per job (the site's
/// nodes have four, so several tests' jobs share a node instead of queueing behind each other)
/// and time to wait in the queue while the other tests' jobs run.
fn container_job(name: &str) -> ModernJob {
    container_job_in(ModernJob::new(name))
}

fn container_job_in(mut j: ModernJob) -> ModernJob {
    j.doc["gpus_per_node"] = json!(1);
    j.doc["monitor_timeout_seconds"] = json!(900);
    j
}

/// A container job's document for `slurm-alloc up` under an allocation name unique to this test
/// (`st-NAME-<pid>`), and the guard that cancels that allocation when the test ends. Its clone
/// is its own: `exec --sync` runs commands in the clone itself.
fn allocation(name: &str, image: &str) -> (ModernJob, Value, Release) {
    let j = container_job_in(ModernJob::own_clone(name));
    let mut a = j.doc.clone();
    let job_name = format!("st-{name}-{}", std::process::id());
    a["job_name"] = json!(job_name);
    a["container_image"] = json!(image);
    (j, a, Release(job_name))
}

/// Cancels the allocation of this job name when dropped, so a test that fails half-way never
/// leaves a node held for the tests after it (also when `up` failed before writing a document,
/// which the harness's own cancelling needs).
struct Release(String);

impl Drop for Release {
    fn drop(&mut self) {
        on_modern("modern-login", &format!("scancel -n '{}' || true", self.0));
    }
}

/// One job of `doc` submitted and watched; its document.
fn run(state: &Path, doc: &Value) -> Value {
    let s = step(state, "slurm-submit", &[], doc);
    step(state, "slurm-watch", &["--interval", "1"], &s.doc).doc
}

/// One job of `doc` that fails: submitted, watched (exit 1); the watch's document.
fn run_failing(state: &Path, doc: &Value) -> Value {
    let s = step(state, "slurm-submit", &[], doc);
    let mut c = tool("slurm-watch");
    c.env("SLURM_TOOLS_STATE_DIR", state)
        .args(["--interval", "1"]);
    let w = run_raw(c, s.doc.to_string().as_bytes());
    assert_eq!(w.code, 1, "{}", w.stderr);
    w.doc
}

/// The main job (build job and run) with the first site's registry image, on both sites with
/// the same document except `slurm_cluster`: Apptainer on the modern site, pyxis on the first.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_main_job_runs_in_the_same_image_on_apptainer_and_on_pyxis() {
    crate::needs_cluster!();
    let _one = logins_lock();
    let dir = tempdir();
    let repo = sample_clone(dir.path());
    let state = dir.path().join("state");
    let cp = control_path("ctr-%C");
    let mut local = job(&repo, "local", &cp, "containers");
    local["container_image"] = json!(testbed().s("container_image"));
    local["command"] = json!("cat /etc/slurm-tools-image && ./build/hello");
    let mut modern = local.clone();
    modern["slurm_cluster"] = json!("modern");
    login(&cp);
    let on_modern = main_job(&state, &modern);
    let on_local = main_job(&state, &local);
    for (site, d, runtime) in [
        ("modern", &on_modern, "apptainer"),
        ("local", &on_local, "pyxis"),
    ] {
        let r = report_of(d);
        assert_eq!(r.status.name(), "PASSED", "{site}: {r:?}");
        assert_eq!(
            r.excerpt,
            [
                "slurm-tools testbed image devbox:1",
                "hello from the sample project"
            ],
            "{site}: the command ran inside the image: {r:?}"
        );
        assert_eq!(
            job_of(d).container_runtime.as_deref(),
            Some(runtime),
            "{site}"
        );
        // The build job ran in the image too.
        let build: shared::contract::schema::Build = section_of(d, "build");
        let built = build.report.expect("the build job's report");
        assert_eq!(built.status.name(), "PASSED", "{site}");
    }
    // Preflight learned the runtimes in its one round trip.
    let preflight: shared::contract::schema::Preflight = section_of(&on_modern, "preflight");
    let remote = preflight.remote;
    assert!(!remote.container_flags, "{remote:?}");
    assert!(
        remote
            .apptainer
            .as_deref()
            .is_some_and(|a| a.contains("1.4.5")),
        "{remote:?}"
    );
    assert_eq!(
        job_of(&on_modern).container_image,
        Some(format!("docker://{}", testbed().s("container_image")))
    );
    // pyxis runs the file the first site's login node imported the image into once.
    let local_file = job_of(&on_local).container_image.unwrap_or_default();
    assert!(local_file.ends_with(".sqsh"), "{local_file}");
    let local_used = used_of(&on_local);
    assert_eq!(
        local_used.digest,
        Some(digest_of(&testbed().s("container_image"))),
        "{local_used:?}"
    );
    // The report says which cached image the modern job ran from.
    let used = used_of(&on_modern);
    assert_eq!(
        used.digest,
        Some(digest_of(&testbed().s("container_image"))),
        "{used:?}"
    );
    assert!(
        ["hit", "pulled", "waited"].contains(&used.cache.as_str()),
        "{used:?}"
    );
    let text = run_raw(tool("slurm-report"), on_modern.to_string().as_bytes()).stderr;
    assert!(
        text.contains("(apptainer; ") && text.contains("sha256:"),
        "{text}"
    );
    logout(&cp);
    master_exit("direct_host", &cp);
}

/// Two jobs submitted back to back with a new image: one pull, the other from the cache (or
/// waiting for that pull); the same tag pointing at new content is pulled again.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_image_is_pulled_once_per_digest_and_again_when_its_tag_moves() {
    crate::needs_cluster!();
    let salt = fresh_salt();
    let tag = format!("cache-{salt}");
    let reference = push_salted_image(&tag, &format!("{salt}-a"));
    let first = digest_of(&reference);
    let j = container_job("image-cache");
    let mut d = j.doc.clone();
    d["container_image"] = json!(reference);
    d["recipe"] = json!("batch");
    d["command"] = json!("echo \"salt=$SLURM_TOOLS_SALT\"");
    // Back to back: the second is submitted before the first has started.
    let a = step(&j.state, "slurm-submit", &[], &d).doc;
    let b = step(&j.state, "slurm-submit", &[], &d).doc;
    let wa = step(&j.state, "slurm-watch", &["--interval", "1"], &a);
    let wb = step(&j.state, "slurm-watch", &["--interval", "1"], &b);
    // The pull is said while it runs, as pyxis's import is (the first watch sees its job pull,
    // or wait for the other's pull).
    assert!(
        wa.stderr.contains(&format!(
            "Apptainer is pulling the container image docker://{reference}"
        )) || wa.stderr.contains(&format!(
            "waiting for another pull of the container image docker://{reference}"
        )),
        "{}",
        wa.stderr
    );
    let (a, b) = (wa.doc, wb.doc);
    let mut caches = Vec::new();
    for w in [&a, &b] {
        let r = report_of(w);
        assert_eq!(r.status.name(), "PASSED", "{r:?}");
        assert_eq!(r.excerpt, [format!("salt={salt}-a")], "{r:?}");
        let used = used_of(w);
        assert_eq!(used.digest.as_deref(), Some(first.as_str()), "{r:?}");
        caches.push(used.cache);
    }
    caches.sort();
    assert!(
        caches == ["hit", "pulled"] || caches == ["pulled", "waited"],
        "one pull for both jobs: {caches:?}"
    );
    // slurm-runs says which cached image each job ran from (learned by the watch here).
    for w in [&a, &b] {
        let run = listed_run(Some(&j.state), &job_of(w).job_id.unwrap());
        assert_eq!(run["image_digest"], first, "{run}");
    }
    let cache = cache_dir(&a);
    let sif = format!("{cache}/{}.sif", first.trim_start_matches("sha256:"));
    assert_eq!(used_of(&a).file, Some(sif));
    let pulled = if used_of(&a).cache == "pulled" {
        &a
    } else {
        &b
    };
    let pull = used_of(pulled);
    assert!(pull.pull_seconds.is_some(), "{pull:?}");
    let text = run_raw(tool("slurm-report"), pulled.to_string().as_bytes()).stderr;
    assert!(text.contains("pulled into the image cache in "), "{text}");
    // One file for the digest, no partial pull or lock left behind.
    let listing = on_modern("modern-login", &format!("ls {cache}"));
    let ours: Vec<&str> = listing
        .lines()
        .filter(|l| l.starts_with(first.trim_start_matches("sha256:")))
        .collect();
    assert_eq!(
        ours,
        [
            format!("{}.sif", first.trim_start_matches("sha256:")),
            format!("{}.sif.ref", first.trim_start_matches("sha256:")),
            format!("{}.sif.users", first.trim_start_matches("sha256:"))
        ],
        "{listing}"
    );

    // The tag moves to new content: the next job pulls it.
    push_salted_image(&tag, &format!("{salt}-b"));
    let second = digest_of(&reference);
    assert_ne!(first, second);
    let c = run(&j.state, &d);
    let r = report_of(&c);
    assert_eq!(r.status.name(), "PASSED", "{r:?}");
    assert_eq!(r.excerpt, [format!("salt={salt}-b")], "{r:?}");
    let used = used_of(&c);
    assert_eq!(used.digest.as_deref(), Some(second.as_str()), "{r:?}");
    assert_eq!(used.cache, "pulled", "{r:?}");
    // A third job of the same content is a cache hit.
    let again = run(&j.state, &d);
    assert_eq!(used_of(&again).cache, "hit", "{:?}", report_of(&again));
    for dg in [&first, &second] {
        let h = dg.trim_start_matches("sha256:");
        on_modern(
            "modern-login",
            &format!("rm -f {cache}/{h}.sif {cache}/{h}.sif.ref"),
        );
    }
}

/// What the runtime refuses is said before anything is sent, naming the field; what fails on
/// the node is said in the verdict, naming the image or mount.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_runtime_or_image_the_cluster_cannot_run_is_refused_and_failures_are_named() {
    crate::needs_cluster!();
    let j = container_job("ctr-errors");
    let mut d = j.doc.clone();
    d["container_image"] = json!(testbed().s("container_image"));
    // pyxis on a cluster without it: exit 2 before anything is sent.
    d["container_runtime"] = json!("pyxis");
    for tool_name in ["slurm-ssh-preflight", "slurm-submit"] {
        let mut c = tool(tool_name);
        c.env("SLURM_TOOLS_STATE_DIR", &j.state);
        let r = run_raw(c, d.to_string().as_bytes());
        assert_eq!(r.code, 2, "{tool_name}: {}", r.stderr);
        assert!(
            r.stderr.contains("container_runtime") && r.stderr.contains("apptainer version 1.4.5"),
            "{tool_name}: {}",
            r.stderr
        );
    }
    // An image form Apptainer cannot run.
    d["container_runtime"] = json!("auto");
    d["container_image"] = json!("dockerd://devbox:1");
    let r = run_raw(tool("slurm-submit"), d.to_string().as_bytes());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("container_image") && r.stderr.contains("apptainer"),
        "{}",
        r.stderr
    );
    // An image the registry does not have, a mount source the node lacks: the verdict names it.
    d["recipe"] = json!("single");
    d["command"] = json!("true");
    d["container_image"] = json!(format!("{}/testbed/none:1", registry()));
    let w = report_of(&run_failing(&j.state, &d));
    let s = w.summary.as_str();
    assert_eq!(w.status.name(), "FAILED", "{w:?}");
    assert!(
        s.contains("testbed/none:1") && s.contains("could not be pulled"),
        "{s}"
    );
    d["container_image"] = json!(testbed().s("container_image"));
    d["mounts"] = json!(["/nonexistent-src:/data"]);
    let w = report_of(&run_failing(&j.state, &d));
    let s = w.summary.as_str();
    assert_eq!(w.status.name(), "FAILED", "{w:?}");
    assert!(
        s.contains("the `mounts` source /nonexistent-src does not exist on the node"),
        "{s}"
    );
}

/// The recipes that span nodes run in the image on both modern nodes, with `mounts` bound.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn two_node_recipes_run_in_apptainer_on_both_nodes_with_mounts() {
    crate::needs_cluster!();
    let j = container_job("ctr-nodes");
    let mut d = j.doc.clone();
    d["container_image"] = json!(testbed().s("container_image"));
    d["node_count"] = json!(2);
    d["mounts"] = json!(["/etc:/host-etc:ro"]);
    d["recipe"] = json!("distributed");
    d["required_devices_per_node"] = json!(1);
    d["command"] = json!(
        "printf '%s %s %s %s\\n' \"$RANK\" \"$(hostname)\" \"$(cut -d' ' -f4 /etc/slurm-tools-image)\" \"$(test -f /host-etc/hostname && echo mounted)\""
    );
    let r = report_of(&run(&j.state, &d));
    assert_eq!(r.status.name(), "PASSED", "{r:?}");
    let mut lines = r.excerpt.clone();
    lines.sort();
    assert_eq!(
        lines,
        ["0 gn1 devbox:1 mounted", "1 gn2 devbox:1 mounted"],
        "{r:?}"
    );
}

/// On each modern node: how many Apptainer instances named `instance` run, and how many of their
/// overlays are in the node's temporary directory ("1\n1": both there).
fn instances_on_nodes(instance: &str) -> Vec<String> {
    let listing = format!(
        "apptainer instance list {instance} | grep -c '^{instance} '; ls -d /tmp/slurm-tools-*-{instance} 2>/dev/null | wc -l"
    );
    ["gn1", "gn2"]
        .iter()
        .map(|n| on_modern(n, &listing).trim().to_string())
        .collect()
}

/// slurm-alloc on Apptainer: the image ready on both nodes, `packages` installed once into a
/// directory every node's container sees, kept across `exec` (on both nodes, with --sync) and
/// slurm-attach, and gone after `down`.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_on_apptainer_installs_packages_once_for_both_nodes_and_down_removes_them() {
    crate::needs_cluster!();
    // The test bed's probe wheel, in the modern site's home (which the container sees).
    let wheel = testbed().s("probe_wheel");
    let name = std::path::Path::new(&wheel).file_name().unwrap().to_owned();
    let home = testbed().s("modern_cluster_home");
    let dir = format!("{}{home}/wheelhouse", testbed().s("modern_root"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&wheel, std::path::Path::new(&dir).join(&name)).unwrap();
    let on_site = format!("{home}/wheelhouse/{}", name.to_string_lossy());

    let (j, mut a, _release) = allocation("ctr-alloc", &testbed().s("container_image"));
    a["node_count"] = json!(2);
    a["packages"] = json!([on_site]);
    a["mounts"] = json!(["/etc:/host-etc:ro"]);
    let up = step(&j.state, "slurm-alloc", &["up", "--wait"], &a);
    let sec = up.allocation();
    let packages = sec
        .packages_dir
        .clone()
        .unwrap_or_else(|| panic!("{sec:?}"));
    assert!(sec.container_launcher.is_some(), "{sec:?}");
    assert_eq!(
        sec.container_name, None,
        "pyxis's name only on pyxis: {sec:?}"
    );
    assert!(up.stderr.contains("packages installed"), "{}", up.stderr);
    // The allocation's instance runs on both nodes, each with its own overlay.
    let instance = format!("slurm-tools-{}", sec.job_id.clone().unwrap());
    assert_eq!(
        sec.container_instance.as_deref(),
        Some(instance.as_str()),
        "{sec:?}"
    );
    assert_eq!(
        instances_on_nodes(&instance),
        ["1\n1", "1\n1"],
        "instance and overlay on each node"
    );

    let per_node = step(
        &j.state,
        "slurm-alloc",
        &[
            "exec",
            "--mode",
            "per-node",
            "--",
            "echo host=$(hostname) $(cut -d' ' -f4 /etc/slurm-tools-image) $(python3 -c 'import slurm_tools_probe as p; print(p.MESSAGE)' | tr ' ' _) $(test -f /host-etc/hostname && echo mounted)",
        ],
        &up.doc,
    );
    let mut hosts: Vec<&str> = per_node
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("host="))
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        [
            "gn1 devbox:1 slurm_tools_probe_imported mounted",
            "gn2 devbox:1 slurm_tools_probe_imported mounted"
        ],
        "{}",
        per_node.stderr
    );
    // A local change sent with the command; the command starts in the working directory.
    let repo = PathBuf::from(j.doc["repo_root"].as_str().unwrap());
    std::fs::write(repo.join("ctr-note.txt"), "from the laptop\n").unwrap();
    let sx = step(
        &j.state,
        "slurm-alloc",
        &[
            "exec",
            "--sync",
            "--",
            "cat ctr-note.txt /etc/slurm-tools-image",
        ],
        &per_node.doc,
    );
    assert!(
        sx.stdout.contains("from the laptop") && sx.stdout.contains("devbox:1"),
        "{}",
        sx.stderr
    );
    let at = step(
        &j.state,
        "slurm-attach",
        &[
            "--command",
            "python3 -c 'import slurm_tools_probe as p; print(p.MESSAGE)'",
        ],
        &sx.doc,
    );
    assert!(
        at.stdout.contains("slurm_tools_probe imported"),
        "{}",
        at.stderr
    );
    let listed = on_modern("modern-login", &format!("ls {packages}"));
    assert!(listed.contains("slurm_tools_probe"), "{listed}");

    // What a command changes in the container stays in its node's instance for the next one.
    let marked = step(
        &j.state,
        "slurm-alloc",
        &[
            "exec",
            "--mode",
            "per-node",
            "--",
            "hostname > /opt/slurm-tools-mark",
        ],
        &at.doc,
    );
    assert!(!marked.stderr.contains("not running"), "{}", marked.stderr);
    let read_mark = |doc: &Value| {
        let r = step(
            &j.state,
            "slurm-alloc",
            &[
                "exec",
                "--mode",
                "per-node",
                "--",
                "echo \"$(hostname) has $(cat /opt/slurm-tools-mark 2>/dev/null || echo nothing)\"",
            ],
            doc,
        );
        let mut lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
        lines.sort();
        (lines, r.stderr, r.doc)
    };
    let (lines, err, doc) = read_mark(&marked.doc);
    assert_eq!(lines, ["gn1 has gn1", "gn2 has gn2"], "{err}");
    // exec --sync and slurm-attach run in the same instances: they see the mark too.
    let synced = step(
        &j.state,
        "slurm-alloc",
        &[
            "exec",
            "--sync",
            "--",
            "echo \"$(hostname) has $(cat /opt/slurm-tools-mark)\"",
        ],
        &doc,
    );
    let attached = step(
        &j.state,
        "slurm-attach",
        &[
            "--command",
            "echo \"$(hostname) has $(cat /opt/slurm-tools-mark)\"",
        ],
        &synced.doc,
    );
    for (what, out) in [
        ("exec --sync", &synced.stdout),
        ("attach", &attached.stdout),
    ] {
        assert!(
            ["gn1 has gn1", "gn2 has gn2"].contains(&out.trim()),
            "{what}: {out:?}"
        );
    }
    let doc = attached.doc;
    // Where the instance is gone, the command runs in the image, and says so.
    on_modern("gn2", &format!("apptainer instance stop {instance}"));
    let (lines, err, doc) = read_mark(&doc);
    assert_eq!(lines, ["gn1 has gn1", "gn2 has nothing"], "{err}");
    assert!(
        err.contains(&format!(
            "slurm-tools: container: instance {instance} is not running on gn2"
        )),
        "{err}"
    );
    let at = Run { doc, ..at };

    let down = step(&j.state, "slurm-alloc", &["down"], &at.doc);
    let released = down.allocation().released.unwrap_or_default();
    assert!(
        released
            .iter()
            .any(|r| r.starts_with("CONTAINER_FILES_REMOVED")),
        "{released:?}"
    );
    let gone = on_modern(
        "modern-login",
        &format!("test -e {packages} && echo present || echo gone"),
    );
    assert_eq!(gone.trim(), "gone");
    let released: Vec<String> = released
        .into_iter()
        .filter(|r| r.starts_with("INSTANCE_STOPPED"))
        .collect();
    assert_eq!(
        released,
        [format!("INSTANCE_STOPPED {instance} on gn1")],
        "gn2's was stopped by hand"
    );
    assert_eq!(
        instances_on_nodes(&instance),
        ["0\n0", "0\n0"],
        "no instance or overlay left"
    );
}

/// An allocation Slurm ends without `down` (scancel here; its time limit the same way) leaves no
/// Apptainer instance and no overlay on its nodes: the step that holds the instances stops them
/// when Slurm signals it (Slurm here does not track the instance's own processes).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn an_allocation_slurm_ends_without_down_leaves_no_instance_on_its_nodes() {
    crate::needs_cluster!();
    let (j, mut a, _release) = allocation("ctr-alloc-end", &testbed().s("container_image"));
    a["node_count"] = json!(2);
    let up = step(&j.state, "slurm-alloc", &["up", "--wait"], &a);
    let sec = up.allocation();
    let instance = sec
        .container_instance
        .clone()
        .unwrap_or_else(|| panic!("{sec:?}"));
    let on_nodes = || instances_on_nodes(&instance);
    assert_eq!(on_nodes(), ["1\n1", "1\n1"]);
    let job = sec.job_id.unwrap();
    on_modern("modern-login", &format!("scancel {job}"));
    let started = std::time::Instant::now();
    while on_nodes() != ["0\n0", "0\n0"] {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "left on the nodes 90 s after the allocation ended: {:?}",
            on_nodes()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Every recipe on Apptainer, as `submit::every_recipe_runs_in_a_real_container_...` proves them
/// on pyxis: the registry image and an enroot squashfs file (Apptainer runs both), `mounts` as a
/// list and as a string, the job in the image, in its own code tree, seeing the mounts; MPI
/// ranks through pmix, the distributed variables, one torchrun per node.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn every_recipe_runs_in_apptainer_with_the_documents_settings() {
    crate::needs_cluster!();
    // The squashfs image where the modern nodes see it.
    let images = "/var/lib/slurm-tools-images";
    let on_host = format!("{}{images}", testbed().s("modern_root"));
    std::fs::create_dir_all(&on_host).unwrap();
    let sqsh = format!("{images}/devbox.sqsh");
    let source = testbed().s("container_image_file");
    let target = format!("{on_host}/devbox.sqsh");
    if std::fs::metadata(&target).map(|m| m.len()).ok()
        != std::fs::metadata(&source).map(|m| m.len()).ok()
    {
        std::fs::copy(&source, format!("{target}.tmp")).unwrap();
        std::fs::rename(format!("{target}.tmp"), &target).unwrap();
    }
    let j = container_job("ctr-recipes");
    let torchrun = crate::submit::TORCHRUN_MOUNT;
    let probe = crate::submit::RECIPE_PROBE;
    let cases = crate::submit::RECIPE_CASES;
    let registry = testbed().s("container_image");
    let mut jobs = Vec::new();
    for (image, list) in [(registry.as_str(), true), (sqsh.as_str(), false)] {
        for (recipe, command, tasks) in cases {
            let mut d = j.doc.clone();
            d["recipe"] = json!(recipe);
            d["command"] = json!(format!("{command}; {probe}"));
            d["container_image"] = json!(image);
            d["required_devices_per_node"] = json!(4);
            let mounts = [format!("{images}:/mnt/images:ro"), torchrun.to_string()];
            d["mounts"] = if list {
                json!(mounts)
            } else {
                json!(mounts.join(","))
            };
            let s = step(&j.state, "slurm-submit", &[], &d);
            assert_eq!(
                s.job().container_runtime.as_deref(),
                Some("apptainer"),
                "{recipe}"
            );
            jobs.push((image, recipe, tasks, s.doc));
        }
    }
    for (image, recipe, tasks, doc) in jobs {
        let w = step(&j.state, "slurm-watch", &["--interval", "1"], &doc);
        let r = w.report();
        let ctx = format!("{image} {recipe}: {r:?}");
        assert_eq!(r.status.name(), "PASSED", "{ctx}");
        let submitted = job_of(&doc);
        let out = on_modern(
            "modern-login",
            &format!("cat {}", submitted.stdout_path.clone().unwrap()),
        );
        let ctx = format!("{image} {recipe}: {out}");
        assert!(
            out.contains("slurm-tools testbed image devbox"),
            "runs in the image: {ctx}"
        );
        assert!(out.contains("devbox.sqsh"), "sees the mount: {ctx}");
        if recipe != "launcher" {
            assert!(
                out.contains(&format!("pwd={}", submitted.tree.clone().unwrap())),
                "starts in its own code tree: {ctx}"
            );
            assert!(out.contains("code-visible"), "{ctx}");
        }
        crate::submit::assert_recipe_output(recipe, &out, tasks, "gn", &ctx);
        if image == sqsh {
            assert_eq!(r.container, None, "a file is run as it is: {ctx}");
        }
    }
}

/// The image cache is bounded: beyond `image_cache_keep` images the least recently used goes,
/// never one a job Slurm still has runs from; `image_cache_dir` puts the cache where asked.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_image_cache_keeps_its_bound_and_never_removes_an_image_a_running_job_uses() {
    crate::needs_cluster!();
    let salt = fresh_salt();
    let x = push_salted_image(&format!("keep-x-{salt}"), &format!("{salt}-x"));
    let y = push_salted_image(&format!("keep-y-{salt}"), &format!("{salt}-y"));
    let (dx, dy) = (digest_of(&x), digest_of(&y));
    let sif = |d: &str| format!("{}.sif", d.trim_start_matches("sha256:"));
    let j = container_job("ctr-keep");
    let cache = format!(
        "{}/st-image-cache-{salt}",
        testbed().s("modern_remote_root")
    );
    let mut d = j.doc.clone();
    d["image_cache_dir"] = json!(cache);
    d["image_cache_keep"] = json!(1);
    let listing = || on_modern("modern-login", &format!("ls {cache} 2>/dev/null"));

    // A job that runs from X for a while.
    let mut long = d.clone();
    long["container_image"] = json!(x);
    long["recipe"] = json!("batch");
    long["command"] = json!("sleep 600");
    let running = step(&j.state, "slurm-submit", &[], &long).doc;
    let id = job_of(&running).job_id.unwrap();
    let marker = format!("{cache}/{}.users/{id}", sif(&dx));
    let started = std::time::Instant::now();
    while on_modern(
        "modern-login",
        &format!("test -e {marker} && echo yes || echo no"),
    )
    .trim()
        != "yes"
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{}",
            listing()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Y pulled with room for one image: X stays, its job still runs.
    let mut other = d.clone();
    other["container_image"] = json!(y);
    other["command"] = json!("true");
    let w = run(&j.state, &other);
    assert_eq!(report_of(&w).status.name(), "PASSED", "{:?}", report_of(&w));
    assert_eq!(used_of(&w).cache, "pulled");
    let now = listing();
    assert!(now.contains(&sif(&dx)) && now.contains(&sif(&dy)), "{now}");
    // X's job ends; the next use of the cache removes X, the least recently used.
    on_modern("modern-login", &format!("scancel {id}"));
    let mut c = tool("slurm-watch");
    c.env("SLURM_TOOLS_STATE_DIR", &j.state)
        .args(["--interval", "1"]);
    let done = run_raw(c, running.to_string().as_bytes());
    assert_eq!(done.report().status.name(), "CANCELLED", "{}", done.stderr);
    let w = run(&j.state, &other);
    assert_eq!(used_of(&w).cache, "hit", "{:?}", report_of(&w));
    let err = on_modern(
        "modern-login",
        &format!("cat {}", job_of(&w).stderr_path.unwrap()),
    );
    assert!(
        err.contains(&format!("removed the cached image {cache}/{}", sif(&dx))),
        "{err}"
    );
    let now = listing();
    assert!(!now.contains(&sif(&dx)) && now.contains(&sif(&dy)), "{now}");
    on_modern("modern-login", &format!("rm -rf {cache}"));
}

/// slurm-alloc on Apptainer says what went wrong, naming the field, and keeps the allocation
/// for `down`: `packages` asked of an image without python3 (an enroot file, which cannot be an
/// Apptainer instance either: said, and the commands run in the image).
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn alloc_on_apptainer_names_an_image_without_python_for_packages() {
    crate::needs_cluster!();
    let images = "/var/lib/slurm-tools-images";
    let on_host = format!("{}{images}", testbed().s("modern_root"));
    std::fs::create_dir_all(&on_host).unwrap();
    std::fs::copy(
        testbed().s("container_image_without_python"),
        format!("{on_host}/nopython.sqsh"),
    )
    .unwrap();
    let (j, mut a, _release) = allocation("ctr-alloc-nopy", &format!("{images}/nopython.sqsh"));
    a["packages"] = json!(["anything"]);
    let mut c = tool("slurm-alloc");
    c.env("SLURM_TOOLS_STATE_DIR", &j.state)
        .args(["up", "--wait"]);
    let up = run_raw(c, a.to_string().as_bytes());
    assert_eq!(up.code, 4, "{}", up.stderr);
    let e = up.error();
    assert_eq!(e.field.as_deref(), Some("packages"), "{e:?}");
    assert!(e.message.contains("has no python3"), "{e:?}");
    // An enroot squashfs file has no Apptainer start action: no instance, said once by `up`,
    // and the commands run in the image.
    assert!(
        up.stderr.contains("did not start on gn1")
            && up.stderr.contains("an enroot .sqsh, cannot be an instance"),
        "{}",
        up.stderr
    );
    // The allocation stayed held for `down`, which releases it (and the launcher's files).
    let id = up.allocation().job_id.unwrap();
    let down = step(&j.state, "slurm-alloc", &["down"], &up.doc);
    let released = down.allocation().released.unwrap_or_default();
    assert!(
        released
            .iter()
            .any(|r| r.starts_with("CONTAINER_FILES_REMOVED")),
        "{released:?}"
    );
    let state = on_modern("modern-login", &format!("squeue -h -j {id} -o %T"));
    assert!(!state.contains("RUNNING"), "released: {state}");
}

/// A sweep on the modern site: a job array of a two-task recipe in Apptainer, on Slurm 24.11
/// without accounting (each task's end from scontrol); every task gets its parameters, in the
/// container, on every rank, and its own verdict.
#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn a_sweep_runs_every_task_in_apptainer_and_judges_each_without_accounting() {
    crate::needs_cluster!();
    let j = container_job("ctr-sweep");
    let mut d = j.doc.clone();
    d["recipe"] = json!("distributed");
    d["required_devices_per_node"] = json!(2);
    d["container_image"] = json!(testbed().s("container_image"));
    d["sweep"] = json!({"sets": [{"v": "a b"}, {"v": "$HOME 'q'"}, {"v": "fails"}]});
    d["command"] = json!(
        "echo \"rank $RANK v=[{v}] task $SWEEP_INDEX\"; head -n 1 /etc/slurm-tools-image; [ {v} != fails ]"
    );
    let s = step(&j.state, "slurm-submit", &[], &d);
    let submitted = s.job();
    assert_eq!(
        submitted.container_runtime.as_deref(),
        Some("apptainer"),
        "{submitted:?}"
    );
    assert_eq!(submitted.array.as_deref(), Some("0-2"));
    let mut c = tool("slurm-watch");
    c.env("SLURM_TOOLS_STATE_DIR", &j.state)
        .args(["--interval", "1"]);
    let w = run_raw(c, s.doc.to_string().as_bytes());
    assert_eq!(w.code, 1, "{}", w.stderr);
    let r = w.report();
    assert_eq!(
        r.source,
        shared::contract::schema::Source::Scontrol,
        "no accounting on this site"
    );
    let tasks = r.tasks.unwrap();
    use shared::contract::schema::Status::*;
    assert_eq!(
        tasks.iter().map(|t| t.status).collect::<Vec<_>>(),
        [Passed, Passed, Failed],
        "{}",
        w.stderr
    );
    for (t, v) in tasks.iter().zip(["a b", "$HOME 'q'"]) {
        let log = on_modern("modern-login", &format!("cat '{}'", t.remote_log));
        for rank in 0..2 {
            assert!(
                log.contains(&format!("rank {rank} v=[{v}] task {}", t.index)),
                "task {} rank {rank}: {log}",
                t.index
            );
        }
        assert!(
            log.contains("slurm-tools testbed image"),
            "in the image: {log}"
        );
    }
    // An array Slurm no longer knows (its record purged MinJobAge after its end; here an id it
    // never gave, which scontrol answers the same way) and no accounting: nothing will ever say
    // how its tasks ended, so each is judged at once from its log, never after waiting out the
    // outage limit (10 minutes here).
    let mut gone = s.doc.clone();
    gone["job"]["job_id"] = json!("9999999");
    let mut c = tool("slurm-watch");
    c.env("SLURM_TOOLS_STATE_DIR", &j.state)
        .args(["--interval", "1", "--outage-limit", "600"]);
    let started = std::time::Instant::now();
    let w = run_raw(c, gone.to_string().as_bytes());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(300),
        "judged at once, not after the outage limit: {}",
        w.stderr
    );
    let r = w.report();
    assert_eq!(r.source, shared::contract::schema::Source::EndMarker);
    for t in r.tasks.unwrap() {
        assert_eq!(t.slurm_state, "PURGED", "{t:?}");
        assert_eq!(
            t.status, Error,
            "no end marker, no Slurm line: unknown, said so"
        );
        assert!(t.summary.contains("MinJobAge"), "{}", t.summary);
    }
}
