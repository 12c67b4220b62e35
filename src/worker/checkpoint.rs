//! The replay checkpoint: the worker's books as of one record of the
//! transcript, saved beside it (`replay.json`), so a worker that starts
//! reads only the entries stored after that record instead of a history of
//! many gigabytes (which, read from disk, could outlast the supervisor's
//! `worker_start_wait`).
//!
//! It is a cache of the transcript's: written without waiting for the disk,
//! only after every entry it covers is on disk, and trusted only when
//! `Transcript::resumable` finds its record where it says (same file, same
//! number, good checksum). Anything else (no file, unreadable, another
//! transcript, a record cut off or damaged) and the worker reads the whole
//! transcript, as it always could.

use serde::{Deserialize, Serialize};
use std::path::Path;

use super::core::ReplayBooks;
use crate::session::store::{read_json, write_json_unsynced};
use crate::session::transcript::{Entry, Resume};
use crate::session::SessionError;

/// How much the transcript grows between two checkpoints: reading this
/// much again costs a starting worker well under a second, even from disk.
pub const CHECKPOINT_BYTES: u64 = 64 << 20;

/// What a checkpoint holds.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// The last record the books were built from.
    pub after: Resume,
    /// The books as of that record.
    pub books: ReplayBooks,
    /// Every restore notice up to that record.
    pub restore_notices: Vec<Entry>,
}

/// The checkpoint at `path`, if there is a readable one (an unreadable one
/// is logged and passed over).
pub fn load(path: &Path) -> Option<Checkpoint> {
    match read_json(path) {
        Ok(checkpoint) => checkpoint,
        Err(e) => {
            tracing::warn!("{e}; reading the whole transcript");
            None
        }
    }
}

/// Save `checkpoint` at `path` (atomically, not synced).
pub fn save(path: &Path, checkpoint: &Checkpoint) -> Result<(), SessionError> {
    write_json_unsynced(path, checkpoint)
}

/// Whether the transcript has grown enough since `saved_at` (the end of the
/// record last saved, or where this worker began reading) for another one.
pub fn due(saved_at: u64, transcript_end: u64) -> bool {
    transcript_end.saturating_sub(saved_at) >= CHECKPOINT_BYTES
}
