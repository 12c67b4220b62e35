//! The files around a transcript: its first format's file, new files put
//! in place whole, copies of damaged bytes.

use crate::session::store::sync_name_of;
use crate::session::SessionError;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::format::{self, Marker};

/// The first format's file, beside the current one.
pub fn v1_path(path: &Path) -> PathBuf {
    path.with_file_name("transcript")
}

/// The v2 file, beside the current one: read while there is no v3 file,
/// copied into one by the worker.
pub fn v2_path(path: &Path) -> PathBuf {
    path.with_file_name("transcript2")
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

/// Copy the v2 file `from` to `to` as a v3 file: the same bytes (records,
/// offsets, sync marker), the v3 magic. Through a temporary file renamed
/// into place, and copied by the kernel (`copy_file_range`): the file is
/// left as it is, for older builds.
pub fn copy_v2(from: &Path, to: &Path) -> Result<(), SessionError> {
    let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
        path: to.to_path_buf(),
        step,
        source,
    };
    let mut name = to.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = to.with_file_name(name);
    let mut source = File::open(from).map_err(|source| SessionError::Transcript {
        path: from.to_path_buf(),
        source,
    })?;
    let mut copy = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| context("create", e))?;
    io::copy(&mut source, &mut copy).map_err(|e| context("copy the v2 file", e))?;
    copy.write_all_at(&format::MAGIC, 0)
        .and_then(|()| copy.sync_all())
        .map_err(|e| context("write", e))?;
    std::fs::rename(&tmp, to).map_err(|e| context("rename", e))?;
    sync_name_of(to)
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
