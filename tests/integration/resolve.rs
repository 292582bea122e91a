//! slurm-resolve: explicit and auto selection, derived fields, bad input (issue: resolve).

use crate::harness::*;
use serde_json::{json, Value};

fn catalog(dir: &std::path::Path, body: Value) -> String {
    let p = dir.join("clusters.json");
    write(&p, &body.to_string());
    p.display().to_string()
}

fn sample_catalog() -> Value {
    json!({"clusters": [
        {"cluster_name": "alpha", "device_types": ["H100"], "gpus_per_node": 8, "nodes": 4, "mfa_style": true,
         "ssh_host": "{slurm_user}@login-{cluster_name}.example.org",
         "default_user_root_dir": "/lustre/{slurm_user}", "default_models_repo": "/lustre/models",
         "partitions": [{"name": "batch", "max_time": "04:00:00"}], "flags": {"sharp": true}},
        {"cluster_name": "beta", "device_type": "h100", "gpus_per_node": 4, "mfa_style": false,
         "ssh_host": "beta-login", "default_user_root_dir": "/home/{slurm_user}"},
        {"cluster_name": "gamma", "device_types": ["B200", "GB200"], "gpus_per_node": 4, "nodes": 2, "mfa_style": null,
         "ssh_host": "gamma"}
    ]})
}

fn resolve(cat: Option<&str>, extra: &[&str], input: Value) -> Run {
    let mut args: Vec<&str> = Vec::new();
    if let Some(c) = cat {
        args.push("--catalog");
        args.push(c);
    }
    args.extend_from_slice(extra);
    run("slurm-resolve", &args, &input)
}

#[test]
fn explicit_cluster_fills_every_derived_field_from_the_catalog() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let r = resolve(
        Some(&cat),
        &[],
        json!({"slurm_cluster": "alpha", "slurm_user": "me",
        "repo_url": "git@github.com:NVIDIA/TensorRT-LLM.git", "work_dir": "runs/exp1", "total_required_devices": 20,
        "required_devices_per_node": 8}),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let d = r.typed();
    let res = r.resolve();
    assert_eq!(
        d.ssh_host.as_deref().unwrap_or_default(),
        "me@login-alpha.example.org"
    );
    assert_eq!(d.mfa_style, Some(true));
    assert_eq!(d.gpus_per_node, Some(8));
    assert_eq!(
        d.default_user_root_dir.as_deref().unwrap_or_default(),
        "/lustre/me"
    );
    assert_eq!(
        d.default_models_repo.as_deref().unwrap_or_default(),
        "/lustre/models"
    );
    assert_eq!(d.node_count.unwrap_or_default(), 3, "ceil(20/8)");
    assert_eq!(
        d.remote_repo_path.as_deref().unwrap_or_default(),
        "/lustre/me/TensorRT-LLM"
    );
    assert_eq!(
        d.remote_work_dir.as_deref().unwrap_or_default(),
        "/lustre/me/TensorRT-LLM/work_dirs/exp1"
    );
    assert_eq!(res.selected_by.to_string(), "explicit");
    assert_eq!(res.cluster_name, "alpha");
    assert_eq!(res.flags["sharp"], true);
    let derived: Vec<&str> = res.derived.iter().map(String::as_str).collect();
    assert_eq!(
        derived,
        [
            "ssh_host",
            "mfa_style",
            "gpus_per_node",
            "default_user_root_dir",
            "default_models_repo",
            "node_count",
            "remote_repo_path",
            "remote_work_dir"
        ]
    );
}

#[test]
fn supplied_fields_are_never_overwritten() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let given = json!({"slurm_cluster": "alpha", "slurm_user": "me", "repo_url": "/x/r.git",
        "ssh_host": "my-alias", "mfa_style": false, "gpus_per_node": 2, "default_user_root_dir": "/mine",
        "default_models_repo": "/models-mine", "node_count": 7, "total_required_devices": 64, "required_devices_per_node": 8,
        "remote_repo_path": "/somewhere/else", "remote_work_dir": "/wd"});
    let r = resolve(Some(&cat), &[], given.clone());
    assert_eq!(r.code, 0, "{}", r.stderr);
    for (k, v) in given.as_object().unwrap() {
        assert_eq!(&r.doc[k], v, "{k} was overwritten");
    }
    assert_eq!(r.resolve().derived, Vec::<String>::new());
}

#[test]
fn node_count_is_derived_only_when_absent() {
    let r = resolve(
        None,
        &[],
        json!({"slurm_cluster": "c", "ssh_host": "h", "total_required_devices": 9, "required_devices_per_node": 4}),
    );
    assert_eq!(r.typed().node_count.unwrap_or_default(), 3);
    let r = resolve(
        None,
        &[],
        json!({"slurm_cluster": "c", "ssh_host": "h", "total_required_devices": 9, "required_devices_per_node": 4, "node_count": 1}),
    );
    assert_eq!(r.typed().node_count.unwrap_or_default(), 1);
    let r = resolve(None, &[], json!({"slurm_cluster": "c", "ssh_host": "h"}));
    assert_eq!(r.typed().node_count.unwrap_or_default(), 1, "at least 1");
}

#[test]
fn auto_select_with_one_match_takes_it() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let r = resolve(
        Some(&cat),
        &[],
        json!({"device_type": "gb200", "required_devices_per_node": 4, "slurm_user": "me"}),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.typed().slurm_cluster.as_deref().unwrap_or_default(),
        "gamma"
    );
    assert_eq!(r.resolve().selected_by.to_string(), "auto");
    assert!(
        r.doc.get("mfa_style").is_none(),
        "a null mfa_style in the catalog is not filled in"
    );
    assert_schema(&r.doc);
    let candidates = r.resolve().candidates;
    let rejected: Vec<_> = candidates.iter().filter(|c| !c.accepted).collect();
    assert_eq!(rejected.len(), 2);
}

#[test]
fn auto_select_with_no_match_exits_2_with_each_reason() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let r = resolve(
        Some(&cat),
        &[],
        json!({"device_type": "H100", "required_devices_per_node": 8, "total_required_devices": 64}),
    );
    assert_eq!(r.code, 2);
    let m = r.error_message();
    assert!(
        m.contains("alpha: 4 nodes x 8 GPUs = 32 < total_required_devices 64"),
        "{m}"
    );
    assert!(
        m.contains("beta: 4 GPUs per node < required_devices_per_node 8"),
        "{m}"
    );
    assert!(
        m.contains("gamma: device type H100 not offered (it has: B200, GB200)"),
        "{m}"
    );
}

#[test]
fn auto_select_with_several_matches_exits_3_unless_told_how_to_pick() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let input = json!({"device_type": "H100", "required_devices_per_node": 4, "slurm_user": "me"});
    let r = resolve(Some(&cat), &[], input.clone());
    assert_eq!(r.code, 3);
    assert!(
        r.error_message().contains("alpha, beta"),
        "{}",
        r.error_message()
    );
    assert!(r.error().hint.as_str().contains("--pick"));

    let r = resolve(Some(&cat), &["--pick", "beta"], input.clone());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.typed().slurm_cluster.as_deref().unwrap_or_default(),
        "beta"
    );
    assert_eq!(
        r.typed()
            .default_user_root_dir
            .as_deref()
            .unwrap_or_default(),
        "/home/me"
    );

    let r = resolve(Some(&cat), &["--pick", "gamma"], input.clone());
    assert_eq!(r.code, 2, "gamma does not match");

    let mut with_pref = sample_catalog();
    with_pref["prefer"] = json!(["beta", "alpha"]);
    let cat2 = catalog(dir.path(), with_pref);
    let r = resolve(Some(&cat2), &[], input);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.typed().slurm_cluster.as_deref().unwrap_or_default(),
        "beta"
    );
}

#[test]
fn the_catalog_comes_from_the_env_then_the_xdg_default() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let input = json!({"slurm_cluster": "beta", "slurm_user": "me"}).to_string();
    let mut cmd = tool("slurm-resolve");
    cmd.env("SLURM_TOOLS_CATALOG", &cat);
    let r = run_raw(cmd, input.as_bytes());
    assert_eq!(
        r.typed().ssh_host.as_deref().unwrap_or_default(),
        "beta-login"
    );

    let xdg = tempdir();
    std::fs::create_dir_all(xdg.path().join("slurm-tools")).unwrap();
    std::fs::copy(&cat, xdg.path().join("slurm-tools/clusters.json")).unwrap();
    let mut cmd = tool("slurm-resolve");
    cmd.env("XDG_CONFIG_HOME", xdg.path());
    let r = run_raw(cmd, input.as_bytes());
    assert_eq!(
        r.typed().ssh_host.as_deref().unwrap_or_default(),
        "beta-login"
    );
    assert!(r
        .resolve()
        .catalog
        .unwrap()
        .ends_with("slurm-tools/clusters.json"));
}

#[test]
fn without_a_catalog_an_explicit_cluster_resolves_from_the_document_and_says_so() {
    let r = resolve(
        None,
        &[],
        json!({"slurm_cluster": "mine", "ssh_host": "login.example.org", "remote_cwd": "/home/me", "repo_url": "https://h/x/proj.git"}),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("no catalog"), "{}", r.stderr);
    assert_eq!(r.resolve().catalog, None);
    assert_eq!(
        r.typed()
            .default_user_root_dir
            .as_deref()
            .unwrap_or_default(),
        "/home/me"
    );
    assert_eq!(
        r.typed().remote_repo_path.as_deref().unwrap_or_default(),
        "/home/me/proj"
    );
}

#[test]
fn a_missing_ssh_host_is_never_defaulted_it_asks_the_person() {
    let r = resolve(None, &[], json!({"slurm_cluster": "mine"}));
    assert_eq!(r.code, 3);
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "ssh_host");
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let r = resolve(Some(&cat), &[], json!({"slurm_cluster": "alpha"}));
    assert_eq!(r.code, 3, "the pattern needs slurm_user");
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "slurm_user");
}

#[test]
fn no_cluster_and_no_device_type_exits_2() {
    // A login host alone is the smallest document: that host is the cluster.
    let r = resolve(None, &[], json!({"ssh_host": "h", "remote_cwd": "/w"}));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.resolve().selected_by.to_string(), "ssh_host");
    assert_eq!(r.resolve().cluster_name, "h");
    assert!(r.doc.get("slurm_cluster").is_none(), "not invented");
    let r = resolve(None, &[], json!({"remote_cwd": "/w"}));
    assert_eq!(r.code, 2);
    assert_eq!(
        r.error().field.as_deref().unwrap_or_default(),
        "slurm_cluster"
    );
    let r = resolve(
        None,
        &[],
        json!({"device_type": "H100", "required_devices_per_node": 4}),
    );
    assert_eq!(r.code, 2);
    assert!(r.error_message().contains("needs a cluster catalog"));
}

#[test]
fn an_unknown_explicit_cluster_lists_the_known_ones() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let r = resolve(Some(&cat), &[], json!({"slurm_cluster": "alfa"}));
    assert_eq!(r.code, 2);
    assert!(r.error_message().contains("alpha, beta, gamma"));
}

#[test]
fn bad_required_devices_per_node_values_are_refused_naming_the_field() {
    for bad in [
        json!(0),
        json!(-1),
        json!("4"),
        json!(2.5),
        json!(1e30),
        json!(true),
        json!([4]),
    ] {
        let r = resolve(
            None,
            &[],
            json!({"slurm_cluster": "c", "ssh_host": "h", "required_devices_per_node": bad}),
        );
        assert_eq!(r.code, 2, "{bad}");
        assert_eq!(
            r.error().field.as_deref().unwrap_or_default(),
            "required_devices_per_node",
            "{bad}"
        );
        assert!(r.error_message().contains("required_devices_per_node"));
    }
}

#[test]
fn an_ssh_host_that_would_be_an_option_is_refused() {
    let r = resolve(
        None,
        &[],
        json!({"slurm_cluster": "c", "ssh_host": "-oProxyCommand=id"}),
    );
    assert_eq!(r.code, 2);
    assert_eq!(r.error().field.as_deref().unwrap_or_default(), "ssh_host");
}

#[test]
fn a_catalog_that_is_not_json_is_named_with_line_and_column() {
    let dir = tempdir();
    let p = dir.path().join("broken.json");
    write(&p, "{\"clusters\": [\n  {\"cluster_name\": \"x\",}\n]}");
    let r = resolve(
        Some(p.to_str().unwrap()),
        &[],
        json!({"slurm_cluster": "x"}),
    );
    assert_eq!(r.code, 2);
    let m = r.error_message();
    assert!(
        m.contains("broken.json") && m.contains("line 2 column"),
        "{m}"
    );
}

#[test]
fn a_catalog_entry_with_a_wrong_type_names_the_entry_and_field() {
    let dir = tempdir();
    let cat = catalog(
        dir.path(),
        json!({"clusters": [{"cluster_name": "x", "gpus_per_node": "8"}]}),
    );
    let r = resolve(Some(&cat), &[], json!({"slurm_cluster": "x"}));
    assert_eq!(r.code, 2);
    assert!(
        r.error_message().contains("clusters[0]: `gpus_per_node`"),
        "{}",
        r.error_message()
    );
}

#[test]
fn an_unknown_mfa_style_value_is_refused() {
    for bad in [json!("yes"), json!(1), json!("true")] {
        let r = resolve(
            None,
            &[],
            json!({"slurm_cluster": "c", "ssh_host": "h", "mfa_style": bad}),
        );
        assert_eq!(r.code, 2, "{bad}");
        assert_eq!(r.error().field.as_deref().unwrap_or_default(), "mfa_style");
    }
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn the_testbed_catalog_resolves_the_sample_job() {
    crate::needs_cluster!();
    let tb = testbed();
    let input: Value =
        serde_json::from_str(&std::fs::read_to_string(tb.s("sample_job")).unwrap()).unwrap();
    let r = resolve(Some(&tb.s("catalog")), &[], input);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.typed().ssh_host.as_deref().unwrap_or_default(),
        tb.s("direct_host")
    );
    assert_eq!(
        r.typed().remote_repo_path.as_deref().unwrap_or_default(),
        format!("{}/sample", tb.remote_root())
    );
}

#[test]
fn hostile_slurm_users_filled_into_catalog_patterns_are_refused_or_stay_literal() {
    let dir = tempdir();
    let cat = catalog(dir.path(), sample_catalog());
    let canary = format!("/tmp/slurm-tools-resolve-canary-{}", std::process::id());
    // Into an ssh_host pattern: a user that would make ssh read an option, or carries shell
    // syntax, never becomes a host.
    for user in [
        "-oProxyCommand=touch /tmp/x",
        "a b",
        &format!("$(touch {canary})"),
    ] {
        let r = resolve(
            Some(&cat),
            &[],
            json!({"slurm_cluster": "alpha", "slurm_user": user}),
        );
        assert_eq!(r.code, 2, "{user}: {}", r.stderr);
        let e = r.error();
        assert!(
            matches!(e.field.as_deref(), Some("ssh_host" | "slurm_user")),
            "{user}: names the field: {e:?}"
        );
    }
    // Into a path pattern: the value stays literal (later tools quote it).
    let user = format!("x$(touch {canary})");
    let r = resolve(
        Some(&cat),
        &[],
        json!({"slurm_cluster": "beta", "slurm_user": user}),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.typed()
            .default_user_root_dir
            .as_deref()
            .unwrap_or_default(),
        format!("/home/{user}")
    );
    assert!(!std::path::Path::new(&canary).exists(), "a canary fired");
}

#[test]
#[ignore = "needs root and the local cluster: scripts/test runs it"]
fn slurm_init_writes_a_catalog_entry_and_a_first_document_that_resolves_and_connects() {
    crate::needs_cluster!();
    let tb = testbed();
    let dir = tempdir();
    let cat = dir.path().join("clusters.json");
    std::fs::write(
        &cat,
        r#"{"prefer":["other"],"clusters":[{"cluster_name":"other","ssh_host":"o"}]}"#,
    )
    .unwrap();
    let mut c = tool("slurm-init");
    c.args(["--ssh-config", &tb.ssh_config(), "--catalog"])
        .arg(&cat)
        .args(["--cluster", "tb", &tb.s("direct_host")]);
    let out = c.stdin(std::process::Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["slurm_cluster"], "tb");
    let written: Value = serde_json::from_slice(&std::fs::read(&cat).unwrap()).unwrap();
    assert_eq!(
        written["prefer"],
        json!(["other"]),
        "the rest of the catalog kept"
    );
    assert_eq!(written["clusters"][0]["cluster_name"], "other");
    let e = &written["clusters"][1];
    assert_eq!(e["cluster_name"], "tb");
    assert_eq!(
        e["defaults"],
        json!({"account": tb.s("account"), "partition": tb.s("partition"), "qos": "normal"}),
        "{err}"
    );
    assert_eq!(
        e["default_user_root_dir"],
        format!("{}/slurm-tools", tb.s("cluster_home"))
    );
    assert!(
        e["device_types"].as_array().is_none_or(|t| t.is_empty()),
        "{e}"
    );
    assert_eq!(e["gpus_per_node"], tb.info["gpus_per_node"]);
    // The printed document goes through the pipeline's first steps as it is.
    let r = resolve(Some(cat.to_str().unwrap()), &[], job);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.typed().account.as_deref().unwrap_or_default(),
        tb.s("account")
    );
    assert_eq!(r.typed().qos.as_deref().unwrap_or_default(), "normal");
    let p = run("slurm-ssh-preflight", &[], &r.doc);
    assert_eq!(p.code, 0, "{}", p.stderr);
    // Run again: the entry is replaced, not added twice.
    let mut c = tool("slurm-init");
    c.args(["--ssh-config", &tb.ssh_config(), "--catalog"])
        .arg(&cat)
        .args(["--cluster", "tb", "--qos", "normal", &tb.s("direct_host")]);
    assert_eq!(
        c.stdin(std::process::Stdio::null())
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    let again: Value = serde_json::from_slice(&std::fs::read(&cat).unwrap()).unwrap();
    assert_eq!(again["clusters"].as_array().unwrap().len(), 2);
}

/// A person's defaults file: a one-line document resolves with the cluster it names, and every
/// other field it sets where the document is silent; the document wins, and a cluster's own
/// defaults in the catalog win over the person's; a bad file is exit 2 naming it and the field.
#[test]
fn a_persons_defaults_fill_a_one_line_document() {
    let xdg = tempdir();
    let cfg = xdg.path().join("slurm-tools");
    std::fs::create_dir_all(&cfg).unwrap();
    let mut cat = sample_catalog();
    cat["clusters"][1]["defaults"] = json!({"account": "site-acct"});
    write(&cfg.join("clusters.json"), &cat.to_string());
    write(
        &cfg.join("defaults.json"),
        &json!({"slurm_cluster": "beta", "slurm_user": "me", "account": "mine",
                "time_limit": "01:00:00", "stall_seconds": 600, "qos": "normal"})
        .to_string(),
    );
    let with = |input: Value| {
        let mut cmd = tool("slurm-resolve");
        cmd.env("XDG_CONFIG_HOME", xdg.path());
        run_raw(cmd, input.to_string().as_bytes())
    };
    let r = with(json!({"command": "python train.py", "qos": "high"}));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let d = r.typed();
    let res = r.resolve();
    assert_eq!(
        d.slurm_cluster.as_deref().unwrap_or_default(),
        "beta",
        "the cluster comes from the defaults"
    );
    assert_eq!(
        d.ssh_host.as_deref().unwrap_or_default(),
        "beta-login",
        "and the catalog follows from it"
    );
    assert_eq!(
        d.account.as_deref().unwrap_or_default(),
        "site-acct",
        "the cluster's own default wins"
    );
    assert_eq!(d.time_limit.as_deref().unwrap_or_default(), "01:00:00");
    assert_eq!(d.stall_seconds.unwrap_or_default(), 600);
    assert_eq!(
        d.qos.as_deref().unwrap_or_default(),
        "high",
        "the document wins"
    );
    assert_eq!(
        res.from_defaults,
        ["slurm_cluster", "slurm_user", "time_limit", "stall_seconds"],
        "{res:?}"
    );
    assert!(res
        .defaults_file
        .as_deref()
        .unwrap()
        .ends_with("slurm-tools/defaults.json"));
    assert!(r.stderr.contains("from your defaults"), "{}", r.stderr);

    // A field no document has: exit 2, the file and the field named, nothing written.
    write(&cfg.join("defaults.json"), r#"{"acount": "x"}"#);
    let bad = with(json!({"command": "x"}));
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("defaults.json") && bad.stderr.contains("`acount`"),
        "{}",
        bad.stderr
    );
}
