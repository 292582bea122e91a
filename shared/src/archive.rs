//! One tar stream of local files, built while it is sent (bounded memory), with only what was
//! meant to leave the machine in it (RELIABILITY.md 3 and 4).
//!
//! - Symlinks are stored as symlinks, never followed: the `tar` crate follows them unless told
//!   otherwise, which would upload a link's target (`~/.aws/credentials`).
//! - FIFOs, sockets, devices and unreadable files are skipped, each with its reason.
//! - Names are byte-exact (spaces, newlines, leading `-`, backslashes, non-UTF-8).
//! - Modes are reduced to 0644 or 0755 (the executable bit kept), owner 0, no names, no setuid.
//! - A file that changes size while it is read is cut or zero-padded to the size in its header,
//!   so the archive stays valid, and reported.

use serde_json::{json, Value};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One file to send: where it is here, and its name in the archive.
#[derive(Debug, Clone)]
pub struct Item {
    pub local: PathBuf,
    pub name: OsString,
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub files: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub skipped: Vec<(String, String)>,
    pub changed_while_reading: Vec<String>,
    /// Set when writing the stream failed (usually: the remote side stopped reading).
    pub write_error: Option<String>,
}

impl Stats {
    pub fn skipped_json(&self) -> Value {
        Value::Array(
            self.skipped
                .iter()
                .map(|(p, why)| json!({"path": p, "reason": why}))
                .collect(),
        )
    }
}

/// Called with (files done, bytes done) as the stream is written.
pub type ProgressFn = Box<dyn FnMut(u64, u64) + Send>;

/// Write the archive of `items` to `out`. Returns the shared stats (also filled when the write
/// fails half-way, so the caller can say how far it got).
pub fn write_archive(
    items: &[Item],
    out: &mut dyn Write,
    gzip: bool,
    stats: &Arc<Mutex<Stats>>,
    mut progress: Option<ProgressFn>,
) -> std::io::Result<()> {
    let buffered = std::io::BufWriter::with_capacity(1 << 20, out);
    if gzip {
        let enc = flate2::write::GzEncoder::new(buffered, flate2::Compression::fast());
        let enc = append_all(items, enc, stats, &mut progress)?;
        enc.finish()?.flush()
    } else {
        append_all(items, buffered, stats, &mut progress)?.flush()
    }
}

fn append_all<W: Write>(
    items: &[Item],
    w: W,
    stats: &Arc<Mutex<Stats>>,
    progress: &mut Option<ProgressFn>,
) -> std::io::Result<W> {
    let mut builder = tar::Builder::new(w);
    builder.follow_symlinks(false);
    for item in items {
        let shown = String::from_utf8_lossy(item.name.as_bytes()).into_owned();
        let skip = |why: String| stats.lock().unwrap().skipped.push((shown.clone(), why));
        let meta = match std::fs::symlink_metadata(&item.local) {
            Ok(m) => m,
            Err(e) => {
                skip(format!("cannot read it: {e}"));
                continue;
            }
        };
        let ft = meta.file_type();
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(meta.mtime().max(0) as u64);
        if ft.is_symlink() {
            let target = match std::fs::read_link(&item.local) {
                Ok(t) => t,
                Err(e) => {
                    skip(format!("cannot read the link: {e}"));
                    continue;
                }
            };
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            builder.append_link(&mut header, Path::new(&item.name), &target)?;
            stats.lock().unwrap().symlinks += 1;
        } else if ft.is_file() {
            let file = match std::fs::File::open(&item.local) {
                Ok(f) => f,
                Err(e) => {
                    skip(format!("cannot read it: {e}"));
                    continue;
                }
            };
            let size = meta.len();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if meta.mode() & 0o111 != 0 {
                0o755
            } else {
                0o644
            });
            header.set_size(size);
            let mut reader = Exact {
                inner: file,
                left: size,
                short: false,
            };
            builder.append_data(&mut header, Path::new(&item.name), &mut reader)?;
            // Anything appended after the size was taken is not sent.
            let grew = reader
                .inner
                .read(&mut [0u8; 1])
                .map(|n| n > 0)
                .unwrap_or(false);
            let mut s = stats.lock().unwrap();
            if reader.short || grew {
                s.changed_while_reading.push(shown.clone());
            }
            s.files += 1;
            s.bytes += size;
        } else {
            let kind = if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_socket() {
                "a socket"
            } else if ft.is_block_device() || ft.is_char_device() {
                "a device"
            } else if ft.is_dir() {
                "a directory (a nested git repository: its files are not synced)"
            } else {
                "not a regular file"
            };
            skip(format!("{kind}; only files and symlinks are sent"));
            continue;
        }
        if let Some(p) = progress.as_mut() {
            let s = stats.lock().unwrap();
            p(s.files + s.symlinks, s.bytes);
        }
    }
    builder.into_inner()
}

/// Reads exactly `left` bytes: stops early if the file grew, pads with zeros if it shrank.
struct Exact {
    inner: std::fs::File,
    left: u64,
    short: bool,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = if self.short {
            0
        } else {
            self.inner.read(&mut buf[..want])?
        };
        let n = if n == 0 {
            self.short = true;
            buf[..want].fill(0);
            want
        } else {
            n
        };
        self.left -= n as u64;
        Ok(n)
    }
}
