//! The index beside a job's output file (`index/<job>.idx` in the session's
//! directory): every `BLOCK_BYTES` or so of the output file, at a record's
//! start, how many bytes and newlines each stream had before it. So a
//! window knows the output's size and where its lines are without reading
//! it. The worker writes it as it reads the output (`IndexWriter`).
//!
//! It is a cache: each entry has its own CRC, and a reader takes the
//! entries up to the first bad one, then reads the output itself from
//! there. Losing or damaging it costs a scan, never a wrong answer.
//!
//! Layout: `MAGIC`, then entries of `ENTRY_BYTES`: the output file's
//! offset, stdout's bytes and newlines, stderr's bytes and newlines (u64
//! big-endian each), a flag byte (which of stdout, stderr and both
//! together last wrote a newline), three zero bytes, the CRC of the rest.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::protocol::entry::Stream;

use super::filter::{FilterFeed, FilterWriter};
use super::records::Records;
use super::select::Flow;

/// The directory of the indexes, in a session's directory.
pub const INDEX_DIR: &str = "index";
const MAGIC: &[u8; 8] = b"eukhix1\n";
const ENTRY_BYTES: usize = 48;
/// How far apart entries are in the output file, at least.
pub const BLOCK_BYTES: u64 = 1 << 20;
/// How much of an output a worker that takes over a job reads to bring
/// its index up to where it resumes; further behind, it writes none.
const CATCH_UP_BYTES: u64 = 8 << 20;

/// Where `job`'s index is in the session directory `session`.
pub fn index_path(session: &Path, job: &str) -> PathBuf {
    session.join(INDEX_DIR).join(format!("{job}.idx"))
}

/// The counts at a place in the output file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// The output file's offset (a record's start).
    pub offset: u64,
    /// Standard output's counts.
    pub stdout: Counts,
    /// Standard error's counts.
    pub stderr: Counts,
    /// Whether the output of both streams together so far ends in a
    /// newline.
    pub both_ends_line: bool,
}

/// One stream's bytes and newlines, and whether its last byte is one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Its bytes.
    pub bytes: u64,
    /// Its newline bytes.
    pub newlines: u64,
    /// Whether its last byte is a newline.
    pub ends_line: bool,
}

impl Counts {
    fn add(&mut self, data: &[u8]) {
        if let Some(&last) = data.last() {
            self.bytes += data.len() as u64;
            self.newlines += memchr::memchr_iter(b'\n', data).count() as u64;
            self.ends_line = last == b'\n';
        }
    }
}

impl Mark {
    /// The counts of `stream`, or of both streams together.
    pub fn of(&self, stream: Option<Stream>) -> Counts {
        match stream {
            Some(Stream::Stdout) => self.stdout,
            Some(Stream::Stderr) => self.stderr,
            None => Counts {
                bytes: self.stdout.bytes + self.stderr.bytes,
                newlines: self.stdout.newlines + self.stderr.newlines,
                ends_line: self.both_ends_line,
            },
        }
    }

    /// Count one record of `stream` ending at `end`.
    pub fn add(&mut self, stream: Stream, data: &[u8], end: u64) {
        match stream {
            Stream::Stdout => self.stdout.add(data),
            Stream::Stderr => self.stderr.add(data),
        }
        if let Some(&last) = data.last() {
            self.both_ends_line = last == b'\n';
        }
        self.offset = end;
    }

    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut entry = [0u8; ENTRY_BYTES];
        let numbers = [
            self.offset,
            self.stdout.bytes,
            self.stdout.newlines,
            self.stderr.bytes,
            self.stderr.newlines,
        ];
        for (i, n) in numbers.iter().enumerate() {
            entry[i * 8..i * 8 + 8].copy_from_slice(&n.to_be_bytes());
        }
        entry[40] = u8::from(self.stdout.ends_line)
            | u8::from(self.stderr.ends_line) << 1
            | u8::from(self.both_ends_line) << 2;
        let crc = crc32fast::hash(&entry[..44]);
        entry[44..].copy_from_slice(&crc.to_be_bytes());
        entry
    }

    fn decode(entry: &[u8]) -> Option<Mark> {
        if crc32fast::hash(&entry[..44]).to_be_bytes() != entry[44..48] || entry[40] > 7 {
            return None;
        }
        let n = |i: usize| u64::from_be_bytes(entry[i * 8..i * 8 + 8].try_into().expect("8"));
        let flag = |bit: u8| entry[40] & (1 << bit) != 0;
        Some(Mark {
            offset: n(0),
            stdout: Counts {
                bytes: n(1),
                newlines: n(2),
                ends_line: flag(0),
            },
            stderr: Counts {
                bytes: n(3),
                newlines: n(4),
                ends_line: flag(1),
            },
            both_ends_line: flag(2),
        })
    }

    /// Whether `self` can follow `before` in one output.
    fn follows(&self, before: &Mark) -> bool {
        let grows = |a: Counts, b: Counts| a.bytes >= b.bytes && a.newlines >= b.newlines;
        self.offset > before.offset
            && grows(self.stdout, before.stdout)
            && grows(self.stderr, before.stderr)
            && self.stdout.newlines <= self.stdout.bytes
            && self.stderr.newlines <= self.stderr.bytes
    }
}

/// What a reader found of an index.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The good entries, in order, after the output's start.
    pub marks: Vec<Mark>,
    /// Why there are fewer than the file holds, or none: one line.
    pub damage: Option<String>,
    /// The index file's length.
    pub len: u64,
}

/// The index of `job` in `session`, its entries up to the first bad one
/// or the first past `output_len`.
pub fn load(session: &Path, job: &str, output_len: u64) -> Loaded {
    let path = index_path(session, job);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Loaded {
                damage: Some("it has no index".into()),
                ..Loaded::default()
            }
        }
        Err(e) => {
            return Loaded {
                damage: Some(format!("its index cannot be read: {e}")),
                ..Loaded::default()
            }
        }
    };
    let mut loaded = Loaded {
        len: bytes.len() as u64,
        ..Loaded::default()
    };
    let Some(entries) = bytes.strip_prefix(MAGIC.as_slice()) else {
        loaded.damage = Some("its index is damaged (no header)".into());
        return loaded;
    };
    let mut last = Mark::default();
    for (i, entry) in entries.chunks(ENTRY_BYTES).enumerate() {
        let good = (entry.len() == ENTRY_BYTES)
            .then(|| Mark::decode(entry))
            .flatten()
            .filter(|mark| mark.follows(&last) && mark.offset <= output_len);
        match good {
            Some(mark) => {
                loaded.marks.push(mark);
                last = mark;
            }
            // A torn last entry is an index being written, not damage.
            None if entry.len() < ENTRY_BYTES => break,
            None => {
                loaded.damage = Some(format!("its index is damaged at entry {}", i + 1));
                break;
            }
        }
    }
    loaded
}

/// Writes a job's index as its output is read.
pub struct IndexWriter {
    file: File,
    /// The counts up to the output read so far.
    at: Mark,
    /// Where the last entry is.
    last: u64,
    /// The filter written beside it, while it can follow.
    filter: Option<FilterFeed>,
}

impl IndexWriter {
    /// The writer of `job`'s index in `session`, whose output is read from
    /// `from` on: a new index when `from` is 0; else the index there,
    /// brought up to `from` by reading the output from its last entry.
    /// None when that is too far behind or anything fails (readers then
    /// read the output itself).
    pub fn open(session: &Path, job: &str, output: &File, from: u64) -> Option<IndexWriter> {
        let path = index_path(session, job);
        crate::session::store::private_subdir(path.parent()?).ok()?;
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).mode(0o600);
        if from == 0 {
            let mut file = options.truncate(true).open(&path).ok()?;
            file.write_all(MAGIC).ok()?;
            return Some(IndexWriter {
                file,
                at: Mark::default(),
                last: 0,
                filter: FilterWriter::create(session, job)
                    .and_then(|writer| FilterFeed::start(writer, output)),
            });
        }
        let loaded = load(session, job, from);
        let mut at = loaded.marks.last().copied().unwrap_or_default();
        if loaded.damage.is_some() && loaded.len > 0 || from - at.offset > CATCH_UP_BYTES {
            return None;
        }
        let mut records = Records::new(output, from);
        let reached = records
            .each(at.offset, |stream, data, end| {
                at.add(stream, data, end);
                Flow::More
            })
            .ok()?;
        // The filter's thread reads its block from the last entry on.
        let ends: Vec<u64> = loaded.marks.iter().map(|m| m.offset).collect();
        let filter = FilterWriter::resume(session, job, &ends)
            .and_then(|writer| FilterFeed::start(writer, output));
        if reached != from {
            return None;
        }
        let file = options.open(&path).ok()?;
        let kept = MAGIC.len() as u64 + (loaded.marks.len() * ENTRY_BYTES) as u64;
        file.set_len(kept).ok()?;
        if kept == MAGIC.len() as u64 {
            file.write_all_at(MAGIC, 0).ok()?;
        }
        let last = loaded.marks.last().map_or(0, |m| m.offset);
        Some(IndexWriter {
            file,
            at,
            last,
            filter,
        })
    }

    /// Output records read from `from`: their stream, bytes and end.
    /// False once the index can no longer follow (a gap, a failed write):
    /// drop the writer then.
    pub fn read<'a>(
        &mut self,
        from: u64,
        records: impl IntoIterator<Item = (Stream, &'a [u8], u64)>,
    ) -> bool {
        if from != self.at.offset {
            return false;
        }
        for (stream, data, end) in records {
            self.at.add(stream, data, end);
            if self.at.offset - self.last >= BLOCK_BYTES {
                // The filter's block ends where the index's entry is.
                if let Some(filter) = self.filter.as_mut() {
                    if !filter.block_ends(self.at.offset) {
                        self.filter = None;
                    }
                }
                let entry = self.at.encode();
                let at = self.file.metadata().map(|m| m.len());
                let Ok(at) = at else { return false };
                if self.file.write_all_at(&entry, at).is_err() {
                    return false;
                }
                self.last = self.at.offset;
            }
        }
        true
    }
}

#[cfg(test)]
impl IndexWriter {
    /// Wait for the filter's blocks told so far to be written.
    pub fn finish_filter(&mut self) {
        if let Some(filter) = self.filter.take() {
            filter.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_and_a_flipped_byte_is_refused() {
        let mut mark = Mark::default();
        mark.add(Stream::Stdout, b"one\ntwo", 12);
        mark.add(Stream::Stderr, b"e\n", 19);
        let entry = mark.encode();
        assert_eq!(Mark::decode(&entry), Some(mark));
        assert_eq!(mark.of(None).bytes, 9);
        assert_eq!(mark.of(None).newlines, 2);
        assert!(mark.of(None).ends_line && !mark.of(Some(Stream::Stdout)).ends_line);
        for i in 0..ENTRY_BYTES {
            let mut bad = entry;
            bad[i] ^= 0x10;
            assert_eq!(Mark::decode(&bad), None, "byte {i}");
        }
    }
}
