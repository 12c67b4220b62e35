//! The spool's layout and record format: one codec for its one writer (the
//! kernel, `kernel::spool`) and its readers (the worker following a job,
//! transcript readers fetching stored output).
//!
//! A session's spool is `spool/` in its directory (0700, files 0600):
//!
//! - `<job>.out`: the job's output as records `[stream: u8][len: u32 BE][bytes]`
//!   (stream 1 stdout, 2 stderr), or, for a run of at least a block of zero
//!   bytes, `[stream: u8][len: u32 BE]` alone (3 stdout, 4 stderr: `len`
//!   zeros, see `protocol::zeros`).
//! - `<job>.end`: how the job ended (JSON, `protocol::kernel::JobEnd`).
//! - `<job>.group`: the identity of the job's process group leader (JSON).
//!
//! A forgotten job whose file the transcript points into is kept as
//! `output/<job>.out` beside `spool/` (the same inode: an open file stays
//! good across the move).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::protocol::entry::Stream;
use crate::protocol::kernel::JobEnd;
use crate::protocol::zeros;
use crate::session::page_cache;
use crate::session::store::{private_subdir, read_json};

/// The directory of the jobs the kernel follows, in a session's directory.
pub const SPOOL_DIR: &str = "spool";
/// The directory forgotten jobs' output files are kept in.
pub const OUTPUT_DIR: &str = "output";
/// The header of one output record: stream byte and length.
pub const RECORD_HEADER: usize = 5;
/// The longest job name.
pub const JOB_NAME_MAX: usize = 32;
/// Added to a stream's byte for a record of zeros.
const ZERO_RUN: u8 = 2;

/// The name of `job`'s output file, in `spool/` or `output/`.
pub fn out_name(job: &str) -> String {
    format!("{job}.out")
}

/// Whether `job` can name spool files: letters, digits and `-`, so no
/// name leads out of the directory.
pub fn valid_job(job: &str) -> bool {
    !job.is_empty()
        && job.len() <= JOB_NAME_MAX
        && job.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// What a record's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The stream its bytes came from.
    pub stream: Stream,
    /// How many bytes it stands for.
    pub len: usize,
    /// Whether it is a run of zeros (no bytes follow the header).
    pub zero_run: bool,
}

impl RecordHeader {
    /// How many bytes follow the header in the file.
    pub fn stored(&self) -> usize {
        if self.zero_run {
            0
        } else {
            self.len
        }
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; RECORD_HEADER] {
        let stream = match self.stream {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        };
        let kind = if self.zero_run {
            stream + ZERO_RUN
        } else {
            stream
        };
        let mut header = [0u8; RECORD_HEADER];
        header[0] = kind;
        header[1..].copy_from_slice(&(self.len as u32).to_be_bytes());
        header
    }

    /// The header `bytes` start with, if they hold one whole; an error
    /// when it makes no sense (damage).
    pub fn decode(bytes: &[u8]) -> Result<Option<RecordHeader>, String> {
        let Some(header) = bytes.get(..RECORD_HEADER) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(header[1..].try_into().expect("four bytes")) as usize;
        let (stream, zero_run) = match header[0] {
            1 => (Stream::Stdout, false),
            2 => (Stream::Stderr, false),
            3 => (Stream::Stdout, true),
            4 => (Stream::Stderr, true),
            other => return Err(format!("bad record {other}")),
        };
        if zero_run && (len == 0 || len > zeros::RUN_MAX) {
            return Err(format!("bad run of {len} zeros"));
        }
        Ok(Some(RecordHeader {
            stream,
            len,
            zero_run,
        }))
    }
}

/// A job's output records read from an offset.
#[derive(Debug, Default)]
pub struct Chunk {
    /// Each record's stream, bytes, and the offset just after it.
    pub records: Vec<(Stream, Bytes, u64)>,
    /// Where the next read starts.
    pub next: u64,
}

/// One session's spool directory, as its readers see it.
#[derive(Clone, Debug)]
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// The spool in `dir`, created 0700 if missing.
    pub fn open(dir: &Path) -> Result<Spool, String> {
        private_subdir(dir)?;
        Ok(Spool {
            dir: dir.to_path_buf(),
        })
    }

    /// `job`'s output file while the kernel follows it.
    pub fn out_path(&self, job: &str) -> PathBuf {
        self.dir.join(out_name(job))
    }

    /// `job`'s end.
    pub fn end_path(&self, job: &str) -> PathBuf {
        self.dir.join(format!("{job}.end"))
    }

    /// `job`'s process group leader.
    pub fn group_path(&self, job: &str) -> PathBuf {
        self.dir.join(format!("{job}.group"))
    }

    /// Where forgotten jobs' output files are kept.
    pub fn output_dir(&self) -> PathBuf {
        self.dir.with_file_name(OUTPUT_DIR)
    }

    /// How `job` ended, if the spool knows.
    pub fn end(&self, job: &str) -> Option<JobEnd> {
        read_json(&self.end_path(job)).ok().flatten()
    }

    /// Every job in the spool, with its end when it has one.
    pub fn jobs(&self) -> BTreeMap<String, Option<JobEnd>> {
        let mut jobs = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return jobs;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(job) = name.strip_suffix(".out") {
                jobs.insert(job.to_string(), self.end(job));
            }
        }
        jobs
    }

    /// How far `job`'s output file has grown (0 when there is none).
    pub fn len(&self, job: &str) -> u64 {
        std::fs::metadata(self.out_path(job)).map_or(0, |m| m.len())
    }

    /// Whole records of `job` from `offset` that end by `until`, at most
    /// about `max` bytes (always at least one whole record when there is
    /// one).
    pub fn read(&self, job: &str, offset: u64, until: u64, max: usize) -> Result<Chunk, String> {
        let path = self.out_path(job);
        let context = |e: std::io::Error| format!("spool {}: {e}", path.display());
        let mut chunk = Chunk {
            records: Vec::new(),
            next: offset,
        };
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(chunk),
            Err(e) => return Err(context(e)),
        };
        let len = file.metadata().map_err(context)?.len().min(until);
        let bad = |e: String| format!("spool {}: {e}", path.display());
        // The span is read with few preads into one buffer, which the
        // records then share (no copy, no allocation per record). A record
        // that starts within `max` is taken whole: room for it is reserved
        // up front, so the buffer is not moved when it grows.
        let available = len.saturating_sub(offset);
        let mut span = Vec::with_capacity(available.min(max.saturating_mul(2) as u64) as usize);
        read_span(&file, offset, available.min(max as u64) as usize, &mut span).map_err(context)?;
        let mut records = Vec::new();
        let mut at = 0;
        // What the records read so far stand for: their bytes in the file,
        // and the zeros a run record stands for, so a chunk of zero runs is
        // as bounded as any other.
        let mut taken = 0;
        while taken < max && offset + (at + RECORD_HEADER) as u64 <= len {
            read_span(&file, offset, at + RECORD_HEADER, &mut span).map_err(context)?;
            let Some(header) = RecordHeader::decode(&span[at.min(span.len())..]).map_err(bad)?
            else {
                break; // the file was cut since its length was read
            };
            let start = at + RECORD_HEADER;
            let stored = header.stored();
            if offset + (start + stored) as u64 > len {
                break; // a record still being written, or cut by a crash
            }
            read_span(&file, offset, start + stored, &mut span).map_err(context)?;
            if span.len() < start + stored {
                break; // cut since its length was read
            }
            at = start + stored;
            taken += RECORD_HEADER + header.len;
            let piece = match header.zero_run {
                true => Piece::Zeros(header.len),
                false => Piece::Stored(start..at),
            };
            records.push((header.stream, piece, offset + at as u64));
        }
        let span = Bytes::from(span);
        chunk.next = offset + at as u64;
        chunk.records = records
            .into_iter()
            .map(|(stream, piece, next)| {
                let bytes = match piece {
                    Piece::Stored(range) => span.slice(range),
                    Piece::Zeros(run) => Bytes::from_static(&zeros::ZEROS[..run]),
                };
                (stream, bytes, next)
            })
            .collect();
        Ok(chunk)
    }

    /// `job`'s output before `upto` is in the transcript (written, or
    /// pointed to): hand its pages back, as `session::page_cache` says (the
    /// first call for a range starts writing the kernel's dirty pages, a
    /// later one drops them once clean). Never punched: the transcript's
    /// stored output records point into it.
    pub fn release(&self, job: &str, upto: u64) {
        if upto < page_cache::RECYCLE_BYTES || !valid_job(job) {
            return;
        }
        if let Ok(file) = File::open(self.out_path(job)) {
            page_cache::drop_synced(&file, 0, upto);
        }
    }
}

/// Where a record's output is: its bytes in the span read, or a run of
/// zeros of that length.
enum Piece {
    Stored(std::ops::Range<usize>),
    Zeros(usize),
}

/// Read `file` from `offset` into `span` until `span` holds `want` bytes
/// (fewer at the end of the file), straight into its spare capacity: the
/// buffer is not zeroed first, what it holds is not read again, and
/// nothing past `want` is read (it belongs to a later read).
fn read_span(file: &File, offset: u64, want: usize, span: &mut Vec<u8>) -> std::io::Result<()> {
    span.reserve(want.saturating_sub(span.len()));
    while span.len() < want {
        let filled = span.len();
        let spare = &mut span.spare_capacity_mut()[..want - filled];
        let read = rustix::io::pread(file, spare, offset + filled as u64)?
            .0
            .len();
        if read == 0 {
            break;
        }
        // SAFETY: pread initialised the first `read` bytes past `filled`.
        unsafe { span.set_len(filled + read) };
    }
    Ok(())
}

/// The output files of the jobs the kernel still follows (`spool/*.out`) in
/// the session directory `session`, read-only, by job. A writer that opens
/// a transcript syncs them with its first sync: an earlier writer (a worker
/// that died) may have written records pointing into them and never synced
/// these files, and this writer's sync makes those records durable.
/// Forgotten jobs' files (`output/`) need not be: a job is forgotten only
/// after its end was stored, by a writer that synced its files or took them
/// over this way.
pub fn followed_jobs(session: &Path) -> Vec<(String, File)> {
    let Ok(entries) = std::fs::read_dir(session.join(SPOOL_DIR)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let job = name.strip_suffix(".out")?.to_string();
            let file = File::open(entry.path()).ok()?;
            Some((job, file))
        })
        .collect()
}

/// `job`'s output file in the session directory `session`, read-only
/// (enough to read it and to fdatasync it), wherever it is.
pub fn open_job(session: &Path, job: &str) -> Result<File, String> {
    let name = out_name(job);
    // Forgotten jobs are in `output/`, followed ones in `spool/`; a job
    // forgotten between the two looks is in `output/` again.
    for place in [OUTPUT_DIR, SPOOL_DIR, OUTPUT_DIR] {
        match File::open(session.join(place).join(&name)) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{place}/{name}: {e}")),
        }
    }
    Err(format!(
        "{name} is in neither {OUTPUT_DIR}/ nor {SPOOL_DIR}/"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written_and_nonsense_is_damage() {
        for header in [
            RecordHeader {
                stream: Stream::Stdout,
                len: 7,
                zero_run: false,
            },
            RecordHeader {
                stream: Stream::Stderr,
                len: zeros::RUN_MAX,
                zero_run: true,
            },
        ] {
            assert_eq!(RecordHeader::decode(&header.encode()), Ok(Some(header)));
        }
        assert_eq!(RecordHeader::decode(&[1, 0, 0]), Ok(None));
        assert!(RecordHeader::decode(&[9, 0, 0, 0, 1]).is_err());
        assert!(RecordHeader::decode(&[3, 0, 0, 0, 0]).is_err());
    }
}
