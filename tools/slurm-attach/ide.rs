//! `slurm-attach --ssh-config FILE`: an ssh `Host` entry that reaches a node inside the running
//! job, for IDEs (VS Code / PyCharm Remote-SSH) and plain ssh, scp and rsync.
//!
//! The entry's ProxyCommand goes through the pipeline's ControlMaster (no new login) to the login
//! node and starts, as a step of the job on its node, the OpenSSH server in inetd mode
//! (`sshd -i`, run by the person, no root, no sshd service) with a config and a host key of
//! their own in `~/.slurm-tools/ide/` on the cluster. It accepts only a key made for this
//! (`$XDG_CONFIG_HOME/slurm-tools/ide_ed25519` here, its public half in that directory's
//! authorized_keys), so the entry reaches only this person's own job; the key opens nothing else
//! (the login node's sshd does not know it, and the in-job sshd exists only inside their job).

use shared::quote::{quote, Script};
use shared::running::{check_running, pick_node, run_on_job, Target};
use shared::ssh::Ssh;
use shared::{Context, Result, ToolError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the entry needs, learned on the cluster in one round trip.
pub struct Entry {
    pub alias: String,
    pub node: String,
}

fn config_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("slurm-tools")
}

/// The local key for the in-job sshd, made once (no passphrase: it opens only that sshd).
fn local_key() -> Result<PathBuf> {
    let dir = config_dir();
    std::fs::create_dir_all(&dir)
        .map_err(|e| ToolError::bad_input(format!("cannot create {}: {e}", dir.display())))?;
    let key = dir.join("ide_ed25519");
    if !key.exists() {
        let out = shared::process::Cmd::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "slurm-tools-ide",
                "-f",
            ])
            .arg(key.display().to_string())
            .deadline(Duration::from_secs(30))
            .run()
            .map_err(|e| shared::ssh::spawn_error("ssh-keygen", e))?;
        if !out.success() {
            return Err(ToolError::remote(format!(
                "ssh-keygen could not make {} ({})",
                key.display(),
                out.stderr_tail.trim()
            )));
        }
    }
    Ok(key)
}

/// `%` is a token in ssh_config values: literal ones are doubled.
fn ssh_escape(s: &str) -> String {
    s.replace('%', "%%")
}

/// Set up the cluster side, then write (or replace) the entry for this job in `file`.
pub fn write_entry(
    ctx: &mut Context,
    ssh: &Ssh,
    t: &Target,
    node: Option<&str>,
    file: &Path,
) -> Result<Entry> {
    let key = local_key()?;
    let public = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| ToolError::bad_input(format!("cannot read the public key: {e}")))?;
    let mut s = Script::new();
    s.raw("set -u\n");
    check_running(&mut s, &t.job_id)?;
    pick_node(&mut s, node)?;
    s.raw(shared::slurm::OVERLAP);
    s.assign("pub", public.trim())?;
    s.raw(
        r#"sshd=$(command -v sshd 2>/dev/null || true)
[ -n "$sshd" ] || for p in /usr/sbin/sshd /usr/local/sbin/sshd /sbin/sshd; do [ -x "$p" ] && sshd=$p && break; done
[ -n "$sshd" ] || { echo "NO_SSHD"; exit 0; }
d=$HOME/.slurm-tools/ide
umask 077
mkdir -p "$d" || exit 1
[ -f "$d/host_key" ] || ssh-keygen -q -t ed25519 -N '' -C slurm-tools-ide-host -f "$d/host_key" || { echo "NO_KEYGEN"; exit 0; }
cat >"$d/sshd_config" <<EOF
HostKey $d/host_key
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
PidFile none
Subsystem sftp internal-sftp
EOF
touch "$d/authorized_keys"
grep -Fqx -- "$pub" "$d/authorized_keys" || printf '%s\n' "$pub" >>"$d/authorized_keys"
echo "NODE $node"
echo "SSHD $sshd"
echo "DIR $d"
echo "OVERLAP $ov"
echo "USER $(id -un)"
echo "HOSTKEY $(cut -d' ' -f1,2 "$d/host_key.pub")"
"#,
    );
    let reply = run_on_job(ssh, t, node, &s)?;
    let field = |k: &str| reply.field(k);
    if reply.says("NO_SSHD") {
        return Err(ToolError::remote(
            "the OpenSSH server (sshd) is not installed on the cluster's nodes, and the IDE entry needs it (run by you inside the job, no root)",
        )
        .with_hint("ask the admins for the openssh-server package on the compute nodes, or use slurm-attach's shell instead"));
    }
    let (Some(node), Some(sshd), Some(dir), Some(user), Some(hostkey)) = (
        field("NODE "),
        field("SSHD "),
        field("DIR "),
        field("USER "),
        field("HOSTKEY "),
    ) else {
        return Err(ToolError::remote(format!(
            "could not set up the in-job sshd ({})",
            reply.out.exit_text()
        ))
        .with_command(reply.out.record()));
    };
    let overlap = field("OVERLAP ").unwrap_or_default();
    let alias = format!("slurm-job-{}", t.job_id);

    // The entry. ProxyCommand runs through sh: every word quoted; the remote part is fixed text
    // plus checked values (job id, node) and paths of the cluster user.
    let mut proxy = vec![shared::ssh::ssh_program()];
    proxy.extend(ssh.base_args());
    proxy.extend([
        "-o".into(),
        "BatchMode=yes".into(),
        "-T".into(),
        ssh.host.clone(),
    ]);
    let remote = format!(
        "srun {overlap} --unbuffered --jobid={} --nodes=1 --ntasks=1 --nodelist={node} {} -i -f {}",
        t.job_id,
        quote(&sshd)?,
        quote(&format!("{dir}/sshd_config"))?
    );
    proxy.push(remote);
    let proxy_text = proxy
        .iter()
        .map(|w| quote(w))
        .collect::<Result<Vec<_>>>()?
        .join(" ");
    let known = config_dir().join("known_hosts_jobs");
    let mut known_text = std::fs::read_to_string(&known).unwrap_or_default();
    let line = format!("{alias} {hostkey}");
    if !known_text.lines().any(|l| l == line) {
        known_text.push_str(&line);
        known_text.push('\n');
        std::fs::write(&known, known_text)
            .map_err(|e| ToolError::bad_input(format!("cannot write {}: {e}", known.display())))?;
    }
    let begin = format!("# >>> slurm-attach {alias}");
    let end = format!("# <<< slurm-attach {alias}");
    let block = format!(
        "{begin}\n# Job {job} on {node}: a step of the job runs {sshd} -i as {user} (no root, no sshd service).\n# It reaches only this job, and ends with it.\nHost {alias}\n    HostName {node}\n    User {user}\n    IdentityFile {key}\n    IdentitiesOnly yes\n    HostKeyAlias {alias}\n    UserKnownHostsFile {known}\n    StrictHostKeyChecking yes\n    ProxyCommand {proxy}\n{end}\n",
        job = t.job_id,
        key = ssh_escape(&key.display().to_string()),
        known = ssh_escape(&known.display().to_string()),
        proxy = ssh_escape(&proxy_text),
    );
    // Replace this job's block, keep everything else in the file.
    let old = std::fs::read_to_string(file).unwrap_or_default();
    let mut kept = String::new();
    let mut skipping = false;
    for l in old.lines() {
        if l == begin {
            skipping = true;
        } else if l == end {
            skipping = false;
        } else if !skipping {
            kept.push_str(l);
            kept.push('\n');
        }
    }
    kept.push_str(&block);
    std::fs::write(file, kept).map_err(|e| {
        ToolError::bad_input(format!("cannot write --ssh-config {}: {e}", file.display()))
    })?;
    ctx.note(format!(
        "wrote Host {alias} to {} (job {} on {node}); try: ssh -F {} {alias} hostname  (IDEs: add `Include {}` to ~/.ssh/config)",
        file.display(),
        t.job_id,
        file.display(),
        file.display()
    ));
    Ok(Entry { alias, node })
}
