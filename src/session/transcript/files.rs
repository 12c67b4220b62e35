//! The files around a transcript: its first format's file, new files put
//! in place whole, copies of damaged bytes.

use crate::session::store::sync_name_of;
use crate::session::SessionError;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::format::{self, Marker};

/// The first format's file, beside the v2 one.
pub fn v1_path(path: &Path) -> PathBuf {
    path.with_file_name("transcript")
}

/// Where damaged bytes at `offset` are kept.
pub fn damaged_path(path: &Path, offset: u64) -> PathBuf {
    path.with_file_name(format!("transcript.damaged-{offset}"))
}

pub fn exists(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Create `path` with a fresh header and whatever `fill` writes after it,
/// through a temporary file renamed into place: the file is never seen
/// without its header, nor half migrated.
pub fn create(
    path: &Path,
    fill: impl FnOnce(&Marker, &mut BufWriter<File>) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
        path: path.to_path_buf(),
        step,
        source,
    };
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let marker = format::new_marker().map_err(|e| context("random marker", e))?;
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| context("create", e))?;
    let mut out = BufWriter::new(file);
    out.write_all(&format::file_header(&marker))
        .map_err(|e| context("write", e))?;
    fill(&marker, &mut out)?;
    let file = out
        .into_inner()
        .map_err(|e| context("write", e.into_error()))?;
    file.sync_all().map_err(|e| context("sync", e))?;
    std::fs::rename(&tmp, path).map_err(|e| context("rename", e))?;
    sync_name_of(path)
}

/// Copy `[offset, offset + len)` of `file` to a new file `to` (0600).
/// `Ok(false)` when `to` already exists: the damage was kept (and
/// reported) by an earlier open.
pub fn keep(file: &File, offset: u64, len: u64, to: &Path) -> io::Result<bool> {
    let out = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
    {
        Ok(out) => out,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(e),
    };
    let copied = copy_range(file, offset, len, &out).and_then(|()| out.sync_all());
    if let Err(e) = copied {
        // A partial copy would pass for a complete one at the next open.
        let _ = std::fs::remove_file(to);
        return Err(e);
    }
    Ok(true)
}

fn copy_range(file: &File, offset: u64, len: u64, mut out: &File) -> io::Result<()> {
    let mut buf = vec![0u8; super::window::CHUNK];
    let mut done = 0;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        file.read_exact_at(&mut buf[..n], offset + done)?;
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}
