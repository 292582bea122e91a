//! One watch = one ssh session. The remote side is a small loop that serves poll requests read
//! from its stdin: wait (ending early when the job's end marker appears), then report the job's
//! state and the bytes each log gained since the offsets the request names, read from there
//! (`tail -c +N`, which seeks), never from the start. So the cost of a poll depends on what the
//! job wrote since, not on the size of its log, and polling costs no new login. sacct (or
//! scontrol, when accounting is disabled) is asked only once the job has left squeue. When we
//! close the session's stdin, the loop ends.

use shared::remote::quote::Script;
use shared::slurm::{SACCT_FORMAT, SQUEUE_FORMAT};
use shared::Result;

/// The most log bytes one poll brings back per stream; a poll that hits it is followed at once
/// by the next.
pub const CHUNK_CAP: u64 = 16 * 1024 * 1024;

pub struct Target<'a> {
    pub job_id: &'a str,
    pub out: &'a str,
    /// `None` when stdout and stderr go to the same file.
    pub err: Option<&'a str>,
    /// A file whose appearance means the job's command has ended (written by slurm-submit's
    /// wrapper); a wait ends early when it appears.
    pub end_marker: Option<&'a str>,
}

/// One request line: wait `wait` seconds (in quarter seconds on the wire; with `watch_marker`,
/// less if the end marker appears), then poll from these offsets.
pub fn request(wait: f64, watch_marker: bool, out_offset: u64, err_offset: u64) -> String {
    let quarters = (wait.max(0.0) * 4.0).round() as u64;
    format!(
        "W {quarters} {} {out_offset} {err_offset}\n",
        u8::from(watch_marker)
    )
}

/// The serving loop.
pub fn script(t: &Target) -> Result<Script> {
    let mut s = Script::new();
    s.raw("set -u\n");
    shared::remote::exit::assign::<shared::remote::exit::Watch>(&mut s)?;
    s.assign("job", t.job_id)?;
    s.assign("out_path", t.out)?;
    s.assign("err_path", t.err.unwrap_or(""))?;
    s.assign("marker", t.end_marker.unwrap_or(""))?;
    s.raw("cap=");
    s.glued(&CHUNK_CAP.to_string())?;
    s.raw("\nfmt=");
    s.glued(SQUEUE_FORMAT)?;
    s.raw("\nafmt=");
    s.glued(SACCT_FORMAT)?;
    s.raw("\n");
    s.raw(shared::slurm::NAP);
    s.raw(shared::remote::PENDING_FACTS);
    s.raw(shared::remote::LOG_CHUNK);
    s.raw(shared::remote::WATCH_POLL);
    Ok(s)
}

/// What one poll said.
#[derive(Debug, Default)]
pub struct Reply {
    pub queue: Option<String>,
    pub queue_error: Option<String>,
    pub accounting: Option<String>,
    pub accounting_error: Option<String>,
    pub accounting_disabled: bool,
    pub scontrol: Option<String>,
    /// Accounting is disabled and scontrol no longer knows the job (MinJobAge passed).
    pub scontrol_purged: bool,
    /// The end marker's first line (the command's exit code), sent when the record is purged.
    pub marker_text: Option<String>,
    pub cancelled_by: Option<String>,
    /// pending-facts.sh's lines (PJ, PP, PI, PQ, PA, PR), when the job pends for a new reason.
    pub pending_facts: Vec<String>,
    /// The end marker exists.
    pub marker: bool,
    pub chunks: Vec<Chunk>,
}

/// New bytes of one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `out` or `err`.
    pub name: String,
    /// Where in the file `data` starts.
    pub offset: u64,
    pub data: Vec<u8>,
    /// The file's size when it was read (more than `offset + data.len()`: capped, read on).
    pub size: u64,
}

/// Parse a reply; `None` when it is not whole (cut short: the poll is simply repeated).
#[cfg(test)]
pub fn parse(bytes: &[u8]) -> Option<Reply> {
    parse_at(bytes).map(|(r, _)| r)
}

/// Parse the first whole reply in `bytes`: it and the bytes it took, or `None` if it is not
/// whole yet.
pub fn parse_at(bytes: &[u8]) -> Option<(Reply, usize)> {
    let mut r = Reply::default();
    let mut at = 0;
    loop {
        let nl = at + bytes.get(at..)?.iter().position(|b| *b == b'\n')?;
        let line = String::from_utf8_lossy(&bytes[at..nl]).into_owned();
        at = nl + 1;
        let (tag, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match tag {
            "END" => return Some((r, at)),
            "MARK" => r.marker = true,
            "Q" => r.queue = Some(rest.to_string()),
            "QERR" => r.queue_error = Some(rest.to_string()),
            "A" => r.accounting = Some(rest.to_string()),
            "AERR" => r.accounting_error = Some(rest.to_string()),
            "ACCT_DISABLED" => r.accounting_disabled = true,
            "SC" => r.scontrol = Some(rest.to_string()),
            "SC_PURGED" => r.scontrol_purged = true,
            "MARKTEXT" => r.marker_text = Some(rest.to_string()),
            "PJ" | "PP" | "PI" | "PQ" | "PA" | "PR" => r.pending_facts.push(line.clone()),
            "BY" => {
                let (uid, name) = rest.split_once(' ').unwrap_or((rest, ""));
                r.cancelled_by = Some(if name.is_empty() {
                    format!("uid {uid}")
                } else {
                    name.to_string()
                });
            }
            "CHUNK" => {
                let f: Vec<&str> = rest.split(' ').collect();
                let (name, off, len, size) = (
                    f.first()?,
                    f.get(1)?.parse().ok()?,
                    f.get(2)?.parse::<usize>().ok()?,
                    f.get(3)?.parse().ok()?,
                );
                let data = bytes.get(at..at + len)?.to_vec();
                at += len;
                r.chunks.push(Chunk {
                    name: name.to_string(),
                    offset: off,
                    data,
                    size,
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_loop_passes_the_static_checks() {
        for (err, marker) in [
            (None, None),
            (Some("/h/u/j.err"), Some("/h/u/.slurm-tools/t.end")),
        ] {
            let t = Target {
                job_id: "42",
                out: "/h/u/j.out",
                err,
                end_marker: marker,
            };
            shared::remote::script_check::assert_clean("watch-poll", script(&t).unwrap().as_str());
        }
    }

    #[test]
    fn parses_chunks_with_newlines_inside() {
        let reply =
            b"Q RUNNING|None|1|0:01|1:00|0:59\nCHUNK out 0 6 6\na\nb\nc\nCHUNK err 3 0 3\nEND\n";
        let r = parse(reply).unwrap();
        assert_eq!(r.queue.as_deref(), Some("RUNNING|None|1|0:01|1:00|0:59"));
        assert_eq!(
            r.chunks[0],
            Chunk {
                name: "out".to_string(),
                offset: 0,
                data: b"a\nb\nc\n".to_vec(),
                size: 6
            }
        );
        assert_eq!(r.chunks[1].data, b"");
    }

    #[test]
    fn a_cut_reply_is_not_taken() {
        assert!(parse(b"Q RUNNING|x\nCHUNK out 0 10 10\nabc").is_none());
        assert!(parse(b"Q RUNNING|x\n").is_none());
    }
}
