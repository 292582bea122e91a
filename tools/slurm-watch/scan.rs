//! Scanning the bytes a log gained, a complete line at a time.
//!
//! A line split across two polls is joined before it is matched (the partial end of one chunk
//! is carried to the next), so a pattern is found however the bytes arrive. The last bytes of
//! each log are kept (up to [`KEEP`]) for the excerpt and the local copy, so the end of the run
//! needs no extra remote read.

/// How much of each log's end is kept in memory.
pub const KEEP: usize = 8 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct Stream {
    pub offset: u64,
    partial: Vec<u8>,
    kept: Vec<u8>,
    /// Bytes dropped from the front of `kept` (so the local copy is only the tail).
    pub dropped: u64,
    pub seen: bool,
}

use shared::slurm::container;

/// What the patterns found.
#[derive(Debug, Default)]
pub struct Findings {
    pub hang: Option<String>,
    pub failures: Vec<String>,
    pub successes: Vec<String>,
    pub oom: Option<String>,
    pub progress: Option<u8>,
    /// The image being imported or pulled now, and what is happening, in words (pyxis's
    /// "importing" line or the Apptainer launcher's "pulling" line seen, not yet its end).
    pub importing: Option<(String, String)>,
    /// The container runtime's own lines (the first ones), to say why a container did not start.
    pub container_lines: Vec<String>,
    /// Which cached image the job's container ran from (the Apptainer launcher's lines).
    pub container_use: Option<shared::contract::schema::ContainerUse>,
    /// slurmstepd's `*** JOB|STEP N ON node CANCELLED AT ... ***` line, when the job was ended
    /// by Slurm (a time limit, scancel): how it ended when Slurm's record is gone.
    pub slurm_cancel: Option<String>,
}

pub struct Patterns {
    pub hang: String,
    pub failure: Vec<String>,
    pub success: Vec<String>,
}

impl Stream {
    /// Take a chunk read at `offset`; returns the complete lines it finished.
    pub fn take(&mut self, offset: u64, data: &[u8]) -> Vec<String> {
        self.seen = true;
        if offset != self.offset {
            // The file was truncated (requeue): start over.
            self.partial.clear();
            self.offset = offset;
        }
        self.offset += data.len() as u64;
        self.kept.extend_from_slice(data);
        if self.kept.len() > KEEP + KEEP / 4 {
            let cut = self.kept.len() - KEEP;
            self.kept.drain(..cut);
            self.dropped += cut as u64;
        }
        self.partial.extend_from_slice(data);
        let Some(last_nl) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(last_nl + 1);
        let complete = std::mem::replace(&mut self.partial, rest);
        complete
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                String::from_utf8_lossy(l)
                    .trim_end_matches('\r')
                    .to_string()
            })
            .collect()
    }

    /// The kept bytes (the whole log when `dropped` is 0).
    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// The last `n` lines of what was kept.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.kept);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

impl Patterns {
    pub fn scan(&self, lines: &[String], f: &mut Findings) {
        for line in lines {
            let lower = line.to_lowercase();
            if f.hang.is_none() && !self.hang.is_empty() && lower.contains(&self.hang) {
                f.hang = Some(line.clone());
            }
            for p in &self.failure {
                if !f.failures.contains(p) && lower.contains(p) {
                    f.failures.push(p.clone());
                }
            }
            for p in &self.success {
                if !f.successes.contains(p) && lower.contains(p) {
                    f.successes.push(p.clone());
                }
            }
            if f.oom.is_none() && shared::slurm::is_oom_line(line) {
                f.oom = Some(line.clone());
            }
            if let Some(p) = build_progress(line) {
                f.progress = Some(p);
            }
            if let Some(now) = container::import_line(line) {
                f.importing = now;
            }
            container::note_use(line, &mut f.container_use);
            if f.slurm_cancel.is_none() && line.contains("***") && line.contains(" CANCELLED AT ") {
                f.slurm_cancel = Some(line.clone());
            }
            if container::is_container_line(line) && f.container_lines.len() < 60 {
                f.container_lines.push(line.clone());
            }
        }
    }
}

/// `[ 42%] Building CXX object ...` -> 42.
pub fn build_progress(line: &str) -> Option<u8> {
    let rest = line.trim_start().strip_prefix('[')?;
    let (num, _) = rest.split_once("%]")?;
    num.trim().parse().ok().filter(|p| *p <= 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_split_across_chunks_is_joined() {
        let mut s = Stream::default();
        assert_eq!(s.take(0, b"first line\nhang det"), vec!["first line"]);
        let lines = s.take(19, b"ected here\n");
        assert_eq!(lines, vec!["hang detected here"]);
        let p = Patterns {
            hang: "hang detected".into(),
            failure: vec![],
            success: vec![],
        };
        let mut f = Findings::default();
        p.scan(&lines, &mut f);
        assert_eq!(f.hang.as_deref(), Some("hang detected here"));
    }

    #[test]
    fn progress_lines() {
        assert_eq!(build_progress("[ 42%] Building CXX object a.o"), Some(42));
        assert_eq!(build_progress("[100%] Linking CXX executable x"), Some(100));
        assert_eq!(build_progress("no"), None);
    }

    #[test]
    fn only_the_tail_is_kept() {
        let mut s = Stream::default();
        let big = vec![b'x'; KEEP * 2];
        s.take(0, &big);
        assert!(s.kept().len() <= KEEP + KEEP / 4);
        assert!(s.dropped > 0);
    }
}
