//! Storing entries: appends, output stored in the transcript or pointing
//! into the spool, the group commit, replay checkpoints, output that could
//! not be kept.

use crate::worker::WorkerError;

use crate::clock::wall_ms;
use crate::protocol::zeros;
use crate::session::page_cache;
use crate::session::store::write_json_unsynced;
use crate::session::transcript::{Entry, EntryBody, STORED_FROM_BYTES};
use crate::worker::checkpoint::{self, Checkpoint};
use crate::worker::outbox::Stored;

use super::open::is_restore_notice;
use super::Worker;

impl Worker {
    /// Store an entry that nobody is told about yet (the next durable
    /// append makes it durable too), then show it to attached clients.
    pub fn append_unacknowledged(&mut self, body: EntryBody) -> Result<Entry, WorkerError> {
        let entry = self.store.transcript.append_unsynced(wall_ms(), body)?;
        self.appended_unacknowledged(entry)
    }

    fn appended_unacknowledged(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.store.shadow.see(&entry);
        self.report(&entry);
        self.clients.show(&entry);
        Ok(entry)
    }

    /// Output is written at once and group-committed: fsynced within
    /// `output_sync_ms` (and by its run's end record, which is synced).
    pub(super) fn store_output(&mut self, body: EntryBody) {
        // Only numbers are kept here: whose output it was is put in words
        // only when it could not be stored (this runs for every chunk).
        let (bytes, input, bash) = match &body {
            EntryBody::Output {
                data, input, bash, ..
            } => (data.len() as u64, *input, *bash),
            _ => (0, None, None),
        };
        let offset = self.store.transcript.end_offset();
        let stored = match self.stored_in(&body) {
            // Written once: the record says where in the spool its bytes
            // are.
            Some(job) => {
                let sync = self.store.output_sync.is_zero();
                match self
                    .store
                    .transcript
                    .append_stored(wall_ms(), body, &job, sync)
                {
                    Ok(entry) if sync => self.appended(entry),
                    Ok(entry) => self.appended_unacknowledged(entry),
                    Err(e) => Err(e.into()),
                }
            }
            None if self.store.output_sync.is_zero() => self.append(body),
            None => self.append_unacknowledged(body),
        };
        self.store.last_output = stored.as_ref().ok().map(|entry| Stored {
            seq: entry.seq,
            offset,
        });
        match stored {
            Err(_) => self.store.count_unstored(bytes, input, bash),
            Ok(_) if !self.store.output_sync.is_zero() && !self.store.sync_pending => {
                self.store.sync_pending = true;
                self.store.commit_signals.due.notify_one();
            }
            Ok(_) if self.store.transcript.unrecycled() >= page_cache::COMMIT_EARLY_BYTES => {
                self.store.commit_signals.now.notify_one();
            }
            Ok(_) => {}
        }
    }

    /// The job whose spool record holds `body`'s bytes, when they are left
    /// there (`transcript::STORED_FROM_BYTES` or more, not a run of zeros
    /// the spool keeps as its length: the transcript keeps those as holes).
    fn stored_in(&self, body: &EntryBody) -> Option<String> {
        let EntryBody::Output {
            input,
            bash,
            data,
            spool_end: Some(_),
            ..
        } = body
        else {
            return None;
        };
        if data.len() < STORED_FROM_BYTES || zeros::handed_out(data) {
            return None;
        }
        self.core.job_of_output(*input, *bash).map(str::to_string)
    }

    /// The group commit (`TranscriptStore::group_commit`).
    pub fn group_commit(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        self.store.group_commit()
    }

    /// Save the books as of the transcript's last record once it has grown
    /// `CHECKPOINT_BYTES` since the last save (or since where this worker
    /// began reading): first everything written is made durable, so the
    /// checkpoint never covers an entry a machine crash could take back.
    pub(super) fn checkpoint_if_due(&mut self) {
        let Some(after) = self.store.transcript.last_record() else {
            return;
        };
        if !checkpoint::due(self.store.checkpointed_at, after.end) {
            return;
        }
        let saved = self.store.transcript.sync_written().and_then(|()| {
            checkpoint::save(
                &self.files.replay_checkpoint(),
                &Checkpoint {
                    after,
                    books: self.store.shadow.books().clone(),
                    restore_notices: self.store.restore_notices.clone(),
                },
            )
        });
        match saved {
            Ok(()) => self.store.checkpointed_at = after.end,
            Err(e) => tracing::warn!("cannot save the replay checkpoint: {e}"),
        }
    }

    /// Keep the index of restore notices a tail read from disk shows (a
    /// cache of the transcript's: losing it loses no entry).
    pub fn index_restore_notices(&self) {
        let path = self.files.restore_notices();
        if let Err(e) = write_json_unsynced(&path, &self.store.restore_notices) {
            tracing::warn!("{e}");
        }
    }

    /// Store an entry durably, then show it to every attached client.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, WorkerError> {
        let entry = self.store.transcript.append(wall_ms(), body)?;
        self.appended(entry)
    }

    fn appended(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.store.shadow.see(&entry);
        if is_restore_notice(&entry) {
            self.store.restore_notices.push(entry.clone());
            self.index_restore_notices();
        }
        self.checkpoint_if_due();
        self.report(&entry);
        self.clients.show(&entry);
        Ok(entry)
    }

    /// Once the transcript takes entries again, say how much output it
    /// could not keep, and whose.
    pub fn notice_unstored_output(&mut self) {
        let Some(text) = self.store.unstored_notice() else {
            return;
        };
        let stored = self.append(EntryBody::Notice {
            text,
            restore: None,
            restore_id: None,
        });
        if stored.is_ok() {
            self.store.unstored_told();
        }
    }
}
