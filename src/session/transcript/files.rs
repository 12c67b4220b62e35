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

/// Create `path` with a fresh header and whatever `fill` writes after it:
/// the file is never seen without its header, nor half migrated.
pub fn create(
    path: &Path,
    fill: impl FnOnce(&Marker, &mut BufWriter<File>) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let marker = format::new_marker().map_err(step_error(path, "random marker"))?;
    write_beside(path, |file| {
        let mut out = BufWriter::new(file);
        out.write_all(&format::file_header(&marker))
            .map_err(step_error(path, "write"))?;
        fill(&marker, &mut out)?;
        out.into_inner()
            .map_err(|e| step_error(path, "write")(e.into_error()))
    })
}

/// Copy the v2 file `from` to `to` as a v3 file: the same bytes (records,
/// offsets, sync marker), the v3 magic. Copied by the kernel
/// (`copy_file_range`); the v2 file is left as it is, for older builds.
pub fn copy_v2(from: &Path, to: &Path) -> Result<(), SessionError> {
    let mut source = File::open(from).map_err(|source| SessionError::Transcript {
        path: from.to_path_buf(),
        source,
    })?;
    write_beside(to, |mut copy| {
        io::copy(&mut source, &mut copy).map_err(step_error(to, "copy the v2 file"))?;
        copy.write_all_at(&format::MAGIC, 0)
            .map_err(step_error(to, "write"))?;
        Ok(copy)
    })
}

/// Put `path` in place whole: `write` fills a temporary file beside it
/// (`<name>.tmp`, 0600), which is synced, renamed over `path` and its name
/// synced, so a reader or a crash finds the old file or the whole new one.
fn write_beside(
    path: &Path,
    write: impl FnOnce(File) -> Result<File, SessionError>,
) -> Result<(), SessionError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(step_error(path, "create"))?;
    write(file)?.sync_all().map_err(step_error(path, "sync"))?;
    std::fs::rename(&tmp, path).map_err(step_error(path, "rename"))?;
    sync_name_of(path)
}

/// What failed, at which step of writing `path`.
fn step_error<'a>(path: &'a Path, step: &'static str) -> impl Fn(io::Error) -> SessionError + 'a {
    move |source| SessionError::TranscriptStep {
        path: path.to_path_buf(),
        step,
        source,
    }
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
