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

use shared::remote::quote::{quote, Script};
use shared::remote::running::{check_running, on_job, pick_node, Target};
use shared::remote::ssh::Ssh;
use shared::{Context, Result, ToolError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the entry needs, learned on the cluster in one round trip.
pub struct Entry {
    pub alias: String,
    pub node: String,
}

/// `$XDG_CONFIG_HOME/slurm-tools`, else `$HOME/.config/slurm-tools`. Never the current directory:
/// the key made there would be uploaded by the next untracked sync.
fn config_dir() -> Result<PathBuf> {
    shared::state::local_dirs::config_dir().ok_or_else(|| {
        ToolError::bad_input(
            "neither XDG_CONFIG_HOME nor HOME is set, so there is no private place for the IDE key",
        )
        .with_hint("set HOME (or XDG_CONFIG_HOME) and run slurm-attach again")
    })
}

/// The local key for the in-job sshd, made once (no passphrase: it opens only that sshd).
fn local_key() -> Result<PathBuf> {
    let dir = config_dir()?;
    shared::state::private_files::create_dir(&dir)
        .map_err(|e| ToolError::bad_input(format!("cannot create {}: {e}", dir.display())))?;
    let key = dir.join("ide_ed25519");
    if !key.exists() {
        let out = shared::support::process::Cmd::new("ssh-keygen")
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
            .map_err(|e| shared::remote::ssh::spawn_error("ssh-keygen", e))?;
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

/// A value written into the stanza: refused when it holds a control character (a newline would
/// end the line and start directives of its own, `Match exec` among them, run on every ssh once
/// the file is included). `what` names where it came from.
fn stanza_value<'a>(what: &str, v: &'a str) -> Result<&'a str> {
    if let Some(c) = v.chars().find(|c| c.is_control()) {
        return Err(ToolError::bad_input(format!(
            "{what} {} holds the control character {c:?}, which cannot be written into an ssh config entry",
            shared::remote::quote::preview(v)
        ))
        .with_hint(format!("remove it from {what}")));
    }
    Ok(v)
}

/// A path for an ssh_config value, in double quotes (ssh splits unquoted values on blanks, and
/// `UserKnownHostsFile` takes several). A `"` cannot be written inside them: refused.
fn stanza_path(what: &str, p: &Path) -> Result<String> {
    let text = p.display().to_string();
    stanza_value(what, &text)?;
    if text.contains('"') {
        return Err(ToolError::bad_input(format!(
            "{what} {text:?} holds a double quote, which an ssh config value cannot carry"
        ))
        .with_hint("use a path without `\"`"));
    }
    Ok(format!("\"{}\"", ssh_escape(&text)))
}

/// The lines of `text` with their terminators (`\n`, `\r\n` or none at the end).
fn lines_with_ends(text: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|b| *b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// A line without its terminator.
fn bare(line: &[u8]) -> &[u8] {
    let l = line.strip_suffix(b"\n").unwrap_or(line);
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// `old` with the block between the lines `begin` and `end` replaced by `block` (in place), or
/// `block` appended when there is none. Every byte outside the block stays as it was (other
/// blocks, CRLF, bytes that are not UTF-8); a file not ending in a newline gets one before the
/// appended block. A begin marker without its end, an end without its begin, or the block twice
/// is an error: the file is then not ours to interpret.
pub fn replace_block(
    old: &[u8],
    begin: &str,
    end: &str,
    block: &str,
) -> std::result::Result<Vec<u8>, String> {
    let lines = lines_with_ends(old);
    let is = |l: &[u8], m: &str| bare(l) == m.as_bytes();
    let starts: Vec<usize> = (0..lines.len()).filter(|i| is(lines[*i], begin)).collect();
    let ends: Vec<usize> = (0..lines.len()).filter(|i| is(lines[*i], end)).collect();
    let mut out = Vec::with_capacity(old.len() + block.len() + 1);
    match (starts.as_slice(), ends.as_slice()) {
        ([], []) => {
            out.extend_from_slice(old);
            if !old.is_empty() && !old.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(block.as_bytes());
        }
        ([s], [e]) if s < e => {
            for l in &lines[..*s] {
                out.extend_from_slice(l);
            }
            out.extend_from_slice(block.as_bytes());
            for l in &lines[e + 1..] {
                out.extend_from_slice(l);
            }
        }
        _ => {
            return Err(format!(
                "its markers of this entry do not pair up ({} `{begin}` and {} `{end}` lines)",
                starts.len(),
                ends.len()
            ))
        }
    }
    Ok(out)
}

/// Put `block` (between `begin` and `end`) into the file at `path`, atomically, keeping every
/// other byte and the file's mode (0600 when new). A file that cannot be read, or whose markers
/// do not pair up, is left untouched and the tool stops with exit 2.
fn update_file(path: &Path, what: &str, begin: &str, end: &str, block: &str) -> Result<()> {
    let old = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(ToolError::bad_input(format!(
                "cannot read {what} {} ({e}); it was left as it is",
                path.display()
            ))
            .with_hint("fix its permissions, or give another file"))
        }
    };
    let new = replace_block(&old, begin, end, block).map_err(|why| {
        ToolError::bad_input(format!(
            "{what} {}: {why}; it was left as it is",
            path.display()
        ))
        .with_hint(format!(
            "remove the stray marker lines from {} by hand, or give a file of its own",
            path.display()
        ))
    })?;
    shared::state::private_files::write_atomic(path, &new, 0o600).map_err(|e| {
        ToolError::bad_input(format!(
            "cannot write {what} {} ({e}); it was left as it is",
            path.display()
        ))
    })
}

/// The entry's ProxyCommand: ssh to the login node (as the tools reach it), then one step of
/// the job on its node runs the in-job sshd in inetd mode. It runs through sh: every word
/// quoted; the remote part is fixed text plus checked values (job id, node) and paths of the
/// cluster user.
fn proxy_command(
    ssh: &Ssh,
    job_id: &str,
    overlap: Option<String>,
    node: &str,
    sshd: &str,
    dir: &str,
) -> Result<String> {
    let mut proxy = vec![shared::remote::ssh::ssh_program()];
    proxy.extend(ssh.base_args());
    proxy.extend([
        "-o".into(),
        "BatchMode=yes".into(),
        "-T".into(),
        ssh.host.clone(),
    ]);
    // The remote part is one line for the login node's shell: every value in it quoted.
    let mut remote = vec!["srun".to_string()];
    remote.extend(overlap);
    remote.extend([
        "--unbuffered".into(),
        format!("--jobid={job_id}"),
        "--nodes=1".into(),
        "--ntasks=1".into(),
        format!("--nodelist={node}"),
        sshd.to_string(),
        "-i".into(),
        "-f".into(),
        format!("{dir}/sshd_config"),
    ]);
    let remote = remote
        .iter()
        .map(|w| quote(w))
        .collect::<Result<Vec<_>>>()?
        .join(" ");
    proxy.push(remote);
    let proxy_text = proxy
        .iter()
        .map(|w| quote(w))
        .collect::<Result<Vec<_>>>()?
        .join(" ");
    Ok(proxy_text)
}

/// What `SshdSetup` is given: the job, the node asked for, the IDE's public key.
struct SshdAsk {
    job_id: String,
    node: Option<String>,
    public: String,
}

/// The in-job sshd, ready: where it runs and what the entry needs.
struct InJobSshd {
    node: String,
    sshd: String,
    /// The cluster directory the host key and authorized key are in.
    dir: String,
    user: String,
    hostkey: String,
    /// `--overlap` when the cluster's srun needs it for a step beside the job's own.
    overlap: Option<String>,
}

/// The job runs; on its node, a host key and the IDE's public key for an sshd the person runs
/// inside the job (job-running.sh, attach-ide.sh): one execution.
struct SshdSetup;

impl shared::remote::Operation for SshdSetup {
    type Params = SshdAsk;
    type Reply = InJobSshd;
    const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

    fn script(p: &SshdAsk) -> Result<Script> {
        let mut s = Script::new();
        s.raw("set -u\n");
        check_running(&mut s, &p.job_id)?;
        pick_node(&mut s, p.node.as_deref())?;
        s.raw(shared::slurm::OVERLAP);
        s.assign("pub", &p.public)?;
        s.raw(shared::remote::ATTACH_IDE);
        Ok(s)
    }

    fn reply(p: &SshdAsk, out: &shared::support::process::Output) -> Result<InJobSshd> {
        let reply = on_job(&p.job_id, p.node.as_deref(), out)?;
        let field = |k: &str| reply.field(k);
        if reply.says("NO_SSHD") {
            return Err(ToolError::remote(
                "the OpenSSH server (sshd) is not installed on the cluster's nodes, and the IDE entry needs it (run by you inside the job, no root)",
            )
            .with_hint("ask the admins for the openssh-server package on the compute nodes, or use slurm-attach's shell instead"));
        }
        let (Some(node), Some(sshd), Some(dir), Some(user), Some(hostkey)) = (
            field("NODE"),
            field("SSHD"),
            field("DIR"),
            field("USER"),
            field("HOSTKEY"),
        ) else {
            return Err(ToolError::remote(format!(
                "could not set up the in-job sshd ({})",
                out.exit_text()
            ))
            .with_command(out.record()));
        };
        Ok(InJobSshd {
            node,
            sshd,
            dir,
            user,
            hostkey,
            overlap: field("OVERLAP").filter(|o| o == "--overlap"),
        })
    }
}

/// Set up the cluster side, then write (or replace) the entry for this job in `file`.
pub fn write_entry(
    ctx: &mut Context,
    ssh: &Ssh,
    cluster: &str,
    t: &Target,
    node: Option<&str>,
    file: &Path,
) -> Result<Entry> {
    let key = local_key()?;
    let public = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| ToolError::bad_input(format!("cannot read the public key: {e}")))?;
    let params = SshdAsk {
        job_id: t.job_id.clone(),
        node: node.map(str::to_string),
        public: public.trim().to_string(),
    };
    let InJobSshd {
        node,
        sshd,
        dir,
        user,
        hostkey,
        overlap,
    } = shared::remote::run::<SshdSetup>(ssh, &params)?;
    let cluster = shared::remote::layout::sanitize(cluster, false);
    let alias = format!("slurm-{cluster}-{}", t.job_id);
    for (what, v) in [
        ("the node name", node.as_str()),
        ("the sshd path", sshd.as_str()),
        ("the cluster directory", dir.as_str()),
        ("the cluster user", user.as_str()),
        ("the host key", hostkey.as_str()),
    ] {
        stanza_value(what, v)?;
    }

    let proxy_text = proxy_command(ssh, &t.job_id, overlap, &node, &sshd, &dir)?;
    // ssh_options, the ssh config file and the control path come from the document.
    stanza_value(
        "the ssh command (ssh_options, ssh_config_file, control_path)",
        &proxy_text,
    )?;
    let known = config_dir()?.join("known_hosts_jobs");
    let known_q = stanza_path("the known hosts file", &known)?;
    let key_q = stanza_path("the IDE key", &key)?;
    let known_begin = format!("# >>> slurm-attach {alias}");
    let known_end = format!("# <<< slurm-attach {alias}");
    update_file(
        &known,
        "the known hosts file",
        &known_begin,
        &known_end,
        &format!("{known_begin}\n{alias} {hostkey}\n{known_end}\n"),
    )?;
    let begin = format!("# >>> slurm-attach {alias}");
    let end = format!("# <<< slurm-attach {alias}");
    let block = format!(
        "{begin}\n# Job {job} on {node} of {cluster}: a step of the job runs {sshd} -i as {user} (no root, no sshd service).\n# It reaches only this job, and ends with it.\nHost {alias}\n    HostName {node}\n    User {user}\n    IdentityFile {key_q}\n    IdentitiesOnly yes\n    HostKeyAlias {alias}\n    UserKnownHostsFile {known_q}\n    StrictHostKeyChecking yes\n    ProxyCommand {proxy}\n{end}\n",
        job = t.job_id,
        proxy = ssh_escape(&proxy_text),
    );
    // Replace this job's block, keep every other byte of the file.
    update_file(file, "--ssh-config", &begin, &end, &block)?;
    ctx.note(format!(
        "wrote Host {alias} to {} (job {} on {node}); try: ssh -F {} {alias} hostname  (IDEs: add `Include {}` to ~/.ssh/config)",
        file.display(),
        t.job_id,
        file.display(),
        file.display()
    ));
    Ok(Entry { alias, node })
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: &str = "# >>> slurm-attach slurm-c-7";
    const E: &str = "# <<< slurm-attach slurm-c-7";

    fn block(n: u8) -> String {
        format!("{B}\nHost slurm-c-7\n    HostName n{n}\n{E}\n")
    }

    #[test]
    fn every_byte_outside_the_block_is_kept() {
        // Not UTF-8 (Latin-1 comment), CRLF lines, another job's block, no final newline.
        let mut old: Vec<u8> = b"# caf\xe9\r\nHost a\r\n    User x\r\n".to_vec();
        old.extend_from_slice(
            b"# >>> slurm-attach slurm-c-8\nHost slurm-c-8\n# <<< slurm-attach slurm-c-8\n",
        );
        old.extend_from_slice(b"Host z\n    Port 2");
        let new = replace_block(&old, B, E, &block(1)).unwrap();
        assert!(new.starts_with(&old), "the old bytes are a prefix");
        assert_eq!(&new[old.len()..], format!("\n{}", block(1)).as_bytes());
        // Replaced in place, the rest byte-identical.
        let again = replace_block(&new, B, E, &block(2)).unwrap();
        assert_eq!(&again[..old.len() + 1], &new[..old.len() + 1]);
        assert_eq!(&again[old.len() + 1..], block(2).as_bytes());
        // In the middle of the file: what follows is kept too.
        let mut mid = b"Host a\r\n".to_vec();
        mid.extend_from_slice(block(1).replace('\n', "\r\n").as_bytes());
        mid.extend_from_slice(b"Host b\xff\r\n");
        let out = replace_block(&mid, B, E, &block(3)).unwrap();
        let mut want = b"Host a\r\n".to_vec();
        want.extend_from_slice(block(3).as_bytes());
        want.extend_from_slice(b"Host b\xff\r\n");
        assert_eq!(out, want);
    }

    #[test]
    fn unpaired_markers_are_refused() {
        for old in [
            format!("{B}\nHost x\n"),
            format!("Host x\n{E}\n"),
            format!("{E}\n{B}\n"),
            format!("{B}\n{E}\n{B}\n{E}\n"),
        ] {
            assert!(
                replace_block(old.as_bytes(), B, E, &block(1)).is_err(),
                "{old:?}"
            );
        }
    }

    #[test]
    fn control_characters_and_quotes_are_refused_in_stanza_values() {
        assert!(stanza_value("x", "a\nMatch exec \"touch /tmp/p\"").is_err());
        assert!(stanza_value("x", "a\rb").is_err());
        assert!(stanza_value("x", "plain value").is_ok());
        assert_eq!(
            stanza_path("p", Path::new("/home/a b/%k")).unwrap(),
            "\"/home/a b/%%k\""
        );
        assert!(stanza_path("p", Path::new("/a\"b")).is_err());
    }

    #[test]
    fn the_config_is_written_atomically_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("jobs");
        update_file(&f, "--ssh-config", B, E, &block(1)).unwrap();
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&f, format!("{B}\nunterminated\n")).unwrap();
        let before = std::fs::read(&f).unwrap();
        assert!(update_file(&f, "--ssh-config", B, E, &block(2)).is_err());
        assert_eq!(std::fs::read(&f).unwrap(), before, "left untouched");
        assert_eq!(
            std::fs::read_dir(t.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }
}
