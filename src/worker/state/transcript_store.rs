//! The worker's transcript store: the transcript, the group commit that
//! makes its output durable, the spool behind it (how far each job's
//! spool is stored, for the pages handed back), the restore notices, the
//! books a replay checkpoint saves, and the output the disk could not
//! take. The appends themselves are `store`'s (they tell clients too).

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::session::numbers::NumberMark;
use crate::session::spool::Spool;
use crate::session::transcript::{Entry, EntryBody, Transcript};
use crate::worker::core::Replay;
use crate::worker::outbox::Stored;

/// What wakes the task that group-commits output (`output_sync_loop`).
#[derive(Clone, Default)]
pub struct CommitSignals {
    /// Output was written: commit within `output_sync_ms`.
    pub due: Rc<Notify>,
    /// Commit now: a flood of output (`page_cache::COMMIT_EARLY_BYTES`)
    /// waits for it.
    pub now: Rc<Notify>,
}

/// The transcript and what its durability needs.
pub struct TranscriptStore {
    pub(in crate::worker) transcript: Transcript,
    /// The kernel's spool: the worker reads output records from it.
    pub spool: Spool,
    /// Where the latest output entry was stored (none: it could not be).
    pub last_output: Option<Stored>,
    /// Every restore notice stored: an attach shows them all (the notice
    /// law) even when it replays only the transcript's last entries.
    pub restore_notices: Vec<Entry>,
    /// How long output may wait for its fsync (`output_sync_ms`).
    pub output_sync: Duration,
    /// Wakes the task that group-commits output.
    pub commit_signals: CommitSignals,
    /// Output was written and its fsync is scheduled.
    pub sync_pending: bool,
    /// How far each job's spool is in the transcript since the last group
    /// commit, which releases what the steps of `link::read_spooled` left
    /// (`Spool::release`).
    pub spool_stored: HashMap<String, u64>,
    /// Output bytes shown but not stored (the disk was full).
    pub unstored_output: u64,
    /// What wrote them ("run 3", "bash 2").
    unstored_of: BTreeSet<String>,
    /// The books as the stored transcript leaves them, kept up entry by
    /// entry for the replay checkpoint.
    pub(super) shadow: Replay,
    /// The transcript's offset the last checkpoint covers (or where this
    /// worker began reading).
    pub(super) checkpointed_at: u64,
    /// How far input numbering may have gone (`session::numbers`).
    pub(in crate::worker) numbers: NumberMark,
}

impl TranscriptStore {
    /// The store of an opened transcript (`checkpointed_at`: where the
    /// worker began reading it).
    pub fn new(
        transcript: Transcript,
        spool: Spool,
        (shadow, checkpointed_at): (Replay, u64),
        restore_notices: Vec<Entry>,
        output_sync: Duration,
    ) -> TranscriptStore {
        TranscriptStore {
            transcript,
            spool,
            last_output: None,
            restore_notices,
            output_sync,
            commit_signals: CommitSignals::default(),
            sync_pending: false,
            spool_stored: HashMap::new(),
            unstored_output: 0,
            unstored_of: BTreeSet::new(),
            shadow,
            checkpointed_at,
            numbers: NumberMark::default(),
        }
    }

    /// How many restore notices the transcript holds.
    pub fn restores(&self) -> u32 {
        self.restore_notices.len() as u32
    }

    /// The ids of the restores whose notices the transcript holds.
    pub fn restore_ids(&self) -> Vec<u64> {
        self.restore_notices
            .iter()
            .filter_map(|entry| match entry.body {
                EntryBody::Notice { restore_id, .. } => restore_id,
                _ => None,
            })
            .collect()
    }

    /// The group commit: what makes every entry written so far durable,
    /// off the worker's thread (a large fdatasync must not hold the
    /// worker), then releases the spool behind it.
    pub fn group_commit(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        self.sync_pending = false;
        let handle = self
            .transcript
            .take_sync_handle()
            .map_err(|e| tracing::warn!("{e}"))
            .ok()
            .flatten()?;
        let stored = std::mem::take(&mut self.spool_stored);
        let spool = self.spool.clone();
        Some(move || match handle.commit() {
            Ok(()) => {
                for (job, upto) in stored {
                    spool.release(&job, upto);
                }
            }
            Err(e) => tracing::warn!("{e}"),
        })
    }

    /// `bytes` of output of run `input` or user bash `bash` were shown but
    /// could not be stored.
    pub fn count_unstored(&mut self, bytes: u64, input: Option<u64>, bash: Option<u64>) {
        self.unstored_output += bytes;
        self.unstored_of.insert(match (bash, input) {
            (Some(bash), _) => format!("bash {bash}"),
            (None, Some(run)) => format!("run {run}"),
            (None, None) => "a command".to_string(),
        });
    }

    /// The notice of the output not stored, if any was left out.
    pub fn unstored_notice(&self) -> Option<String> {
        if self.unstored_output == 0 {
            return None;
        }
        let writers: Vec<&str> = self.unstored_of.iter().map(String::as_str).collect();
        Some(format!(
            "{} bytes of the output of {} could not be stored in the transcript (the disk was full); \
             clients following it then got them",
            self.unstored_output,
            writers.join(", ")
        ))
    }

    /// The notice of the output not stored is stored.
    pub fn unstored_told(&mut self) {
        self.unstored_output = 0;
        self.unstored_of.clear();
    }
}
