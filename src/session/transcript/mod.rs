//! The transcript: a session's memory, an append-only file of entries.
//!
//! # Format (v3, `sessions/<id>/transcript3`)
//!
//! A 16-byte file header, the magic `EUKHETR3` and 8 random bytes: the
//! file's sync marker, different in every file. Then records:
//!
//! ```text
//! marker (8) | seq u64 | kind u8 | len u32 | crc32 u32 | payload (len)
//! ```
//!
//! (integers big-endian; the CRC covers seq, kind, len and the payload).
//! Kind 1 is one JSON [`Entry`] whose `seq` is the header's. Kind 2 is
//! output, binary: `at_ms u64 | input u64 (0: none) | bash u64 (0: none) |
//! spool_end u64 (u64::MAX: none) | stream u8 (1 stdout, 2 stderr) |
//! bytes`. Kind 3 is output written once: kind 2's fields without the
//! bytes, then `len u32 | crc32 u32 | job`: the bytes are the kernel's
//! spool record of `job` that ends at `spool_end` (`spool/<job>.out`, and
//! `output/<job>.out` once the job is forgotten), read back by
//! [`OutputStore`]; bytes that are not there whole and good read as a
//! notice in the entry's place. Output entries of [`STORED_FROM_BYTES`]
//! or more are kind 3, smaller ones kind 2. Payloads are at most 16 MiB.
//! Numbers rise by one per entry; an append that fails is cut back and
//! takes no number.
//!
//! An entry is on disk (fdatasync) before [`Transcript::append`] returns,
//! so anything acknowledged survives a crash; the spool files that stored
//! output points into are synced first, at every sync of the transcript
//! (a group commit too), so a record on disk never points at bytes a power
//! cut took.
//!
//! # Damage
//!
//! The header is only a hint: a reader takes the marker the records
//! carry, so a damaged header is one damaged region (its 16 bytes, and
//! any damage right after them), never the loss of the records.
//! Records are read one after the other, skipped by their length. After a
//! bad one, reading resumes at the next place where the marker starts a
//! good record numbered above the last good one, so bytes inside an
//! output payload (a run that printed a transcript, even this one) are
//! never taken for records, and one damaged record loses one entry, not
//! the rest of the history. [`Transcript::open`] cuts off only a torn
//! tail, an unfinished last record; other damage is copied aside once and
//! reported, never cut. (A copy of this file's own record numbered above
//! the last good one is read as that record: it can only be there when
//! the record it copies is damaged, and it holds the same entry.)
//!
//! [`read_tail`] reads backward from the end without reading the whole
//! file, and returns what reading forward would.
//!
//! # Earlier formats
//!
//! v2, `sessions/<id>/transcript2`: the same records, magic `EUKHETR2`,
//! never kind 3. [`Transcript::open`] copies it into a new v3 file (the
//! same bytes but the magic; the v2 file is left as it is, for older
//! builds); readers read it while there is no v3 file yet.
//!
//! The first format, `sessions/<id>/transcript`: `[len u32][crc32
//! u32][JSON entry]` records, read up to the first bad one.
//! [`Transcript::open`] migrates it into a new v3 file when there is no v2
//! file either (the old one is left as it is); readers read it while there
//! is neither.

mod files;
mod format;
mod header;
mod read;
mod scan;
mod stored;
mod tail;
mod v1;
mod window;
mod writer;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use super::entry::{Entry, EntryBody};
pub use files::damaged_path;
pub use format::{OutputBytes, StoredOutput};
pub use read::{identity, read_entries, stream, stream_at, stream_from, Entries};
pub use stored::{input_of_lost_notice, OutputStore};
pub use tail::{read_tail, torn_tail};
pub use writer::{SyncHandle, Transcript};

/// Output entries of at least this many bytes are written once: left in
/// the kernel's spool record that holds them, which the transcript's
/// record points to (kind 3), and the spool file is kept (`output/`).
/// Smaller ones (output that comes a little at a time, not a flood: the
/// kernel gathers a stream in full flow into records of up to 512 KiB)
/// are copied into their record, so their run's end needs no sync of its
/// spool file and the spool file goes when the job is forgotten.
pub const STORED_FROM_BYTES: usize = 16 * 1024;

/// An unfinished last record found (and cut off) when opening a
/// transcript; its bytes are kept aside first (`damaged_path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the record started.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
}

/// Damaged bytes found when opening a transcript: left in place, and
/// copied to `kept`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Where the damage starts.
    pub offset: u64,
    /// How many bytes are damaged.
    pub bytes: u64,
    /// The copy of the damaged bytes.
    pub kept: PathBuf,
}

/// A good record of a transcript: a reader that has taken every entry up
/// to it can later open the file after it ([`Transcript::open_with`]),
/// once [`Transcript::resumable`] says the record is still there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// The file's sync marker: each transcript file has its own.
    pub file: [u8; 8],
    /// Where the record starts.
    pub start: u64,
    /// Where it ends (the next record starts).
    pub end: u64,
    /// Its entry's number.
    pub seq: u64,
}

/// A transcript opened for appending, and what opening it found.
pub struct Opened {
    /// The transcript, ready to append.
    pub transcript: Transcript,
    /// The torn tail cut off, if there was one.
    pub torn: Option<TornTail>,
    /// Damage found for the first time (kept aside by this open).
    pub damage: Vec<Damage>,
    /// Every damaged region read, as (offset, length), whether this open
    /// or an earlier reader kept it aside.
    pub damaged: Vec<(u64, u64)>,
    /// How many entries were migrated from the first format, if they were.
    pub migrated: Option<u64>,
    /// How many entries were visited.
    pub entries: u64,
    /// Where the last entry read that numbers an input (its queueing or
    /// its user bash's start) ends: where reading started, if none.
    pub numbered_until: u64,
    /// Where reading started: after the header, or after the record
    /// resumed from.
    pub read_from: u64,
}

/// What [`parse`] finds in a whole file image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// The good entries, in order.
    pub entries: Vec<Entry>,
    /// Damaged regions as (offset, length): bad bytes with a good record
    /// after them, or a complete bad record at the end.
    pub damage: Vec<(u64, u64)>,
    /// Where an unfinished last record (or header) starts.
    pub torn_at: Option<u64>,
    /// Where the last good record ends (the header's end if none, 0 if
    /// there is no header).
    pub end: u64,
}

/// Read a whole file image (v2 or v3) as a reader would (for the fuzzer
/// and tests; stored output entries come without their bytes).
pub fn parse(bytes: &[u8]) -> Parsed {
    let mut parsed = Parsed::default();
    if bytes.len() < format::FILE_HEADER as usize {
        parsed.torn_at = (!bytes.is_empty()).then_some(0);
        return parsed;
    }
    let Ok(Some(hint)) = header::read(bytes, bytes.len() as u64) else {
        parsed.damage.push((0, bytes.len() as u64));
        return parsed;
    };
    parsed.end = format::FILE_HEADER;
    let mut scanner =
        scan::Scanner::new(bytes, bytes.len() as u64, hint.marker, format::FILE_HEADER)
            .with_damaged_header(hint.damaged);
    // Reading memory cannot fail.
    while let Ok(Some(event)) = scanner.next_event() {
        match event {
            scan::Event::Entry { entry, end, .. } => {
                parsed.entries.push(entry);
                parsed.end = end;
            }
            scan::Event::Tail {
                offset, torn: true, ..
            } => parsed.torn_at = Some(offset),
            scan::Event::Damage { offset, len } | scan::Event::Tail { offset, len, .. } => {
                parsed.damage.push((offset, len))
            }
        }
    }
    parsed
}
