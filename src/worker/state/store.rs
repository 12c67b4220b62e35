//! Storing entries: appends, output stored in the transcript or pointing
//! into the spool, the group commit, replay checkpoints, output that could
//! not be kept.

use crate::worker::WorkerError;

use crate::clock::wall_ms;
use crate::protocol::message::Response;
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
        let entry = self.transcript.append_unsynced(wall_ms(), body)?;
        self.appended_unacknowledged(entry)
    }

    fn appended_unacknowledged(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.shadow.see(&entry);
        self.report(&entry);
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
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
        let offset = self.transcript.end_offset();
        let stored = match self.stored_in(&body) {
            // Written once: the record says where in the spool its bytes
            // are.
            Some(job) => {
                let sync = self.output_sync.is_zero();
                match self.transcript.append_stored(wall_ms(), body, &job, sync) {
                    Ok(entry) if sync => self.appended(entry),
                    Ok(entry) => self.appended_unacknowledged(entry),
                    Err(e) => Err(e.into()),
                }
            }
            None if self.output_sync.is_zero() => self.append(body),
            None => self.append_unacknowledged(body),
        };
        self.last_output = stored.as_ref().ok().map(|entry| Stored {
            seq: entry.seq,
            offset,
        });
        match stored {
            Err(_) => {
                self.unstored_output += bytes;
                self.unstored_of.insert(match (bash, input) {
                    (Some(bash), _) => format!("bash {bash}"),
                    (None, Some(run)) => format!("run {run}"),
                    (None, None) => "a command".to_string(),
                });
            }
            Ok(_) if !self.output_sync.is_zero() && !self.sync_pending => {
                self.sync_pending = true;
                self.commit_signals.due.notify_one();
            }
            Ok(_) if self.transcript.unrecycled() >= page_cache::COMMIT_EARLY_BYTES => {
                self.commit_signals.now.notify_one();
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

    /// The group commit: what makes every entry written so far durable,
    /// off this thread (a large fdatasync must not hold the worker), then
    /// releases the spool behind it.
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

    /// Save the books as of the transcript's last record once it has grown
    /// `CHECKPOINT_BYTES` since the last save (or since where this worker
    /// began reading): first everything written is made durable, so the
    /// checkpoint never covers an entry a machine crash could take back.
    pub(super) fn checkpoint_if_due(&mut self) {
        let Some(after) = self.transcript.last_record() else {
            return;
        };
        if !checkpoint::due(self.checkpointed_at, after.end) {
            return;
        }
        let saved = self.transcript.sync_written().and_then(|()| {
            checkpoint::save(
                &self.files.replay_checkpoint(),
                &Checkpoint {
                    after,
                    books: self.shadow.books().clone(),
                    restore_notices: self.restore_notices.clone(),
                },
            )
        });
        match saved {
            Ok(()) => self.checkpointed_at = after.end,
            Err(e) => tracing::warn!("cannot save the replay checkpoint: {e}"),
        }
    }

    /// Keep the index of restore notices a tail read from disk shows (a
    /// cache of the transcript's: losing it loses no entry).
    pub fn index_restore_notices(&self) {
        let path = self.files.restore_notices();
        if let Err(e) = write_json_unsynced(&path, &self.restore_notices) {
            tracing::warn!("{e}");
        }
    }

    /// Store an entry durably, then show it to every attached client.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, WorkerError> {
        let entry = self.transcript.append(wall_ms(), body)?;
        self.appended(entry)
    }

    fn appended(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.shadow.see(&entry);
        if is_restore_notice(&entry) {
            self.restore_notices.push(entry.clone());
            self.index_restore_notices();
        }
        self.checkpoint_if_due();
        self.report(&entry);
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
        Ok(entry)
    }

    /// Once the transcript takes entries again, say how much output it
    /// could not keep, and whose.
    pub fn notice_unstored_output(&mut self) {
        if self.unstored_output == 0 {
            return;
        }
        let writers: Vec<&str> = self.unstored_of.iter().map(String::as_str).collect();
        let text = format!(
            "{} bytes of the output of {} could not be stored in the transcript (the disk was full); \
             clients following it then got them",
            self.unstored_output,
            writers.join(", ")
        );
        let stored = self.append(EntryBody::Notice {
            text,
            restore: None,
            restore_id: None,
        });
        if stored.is_ok() {
            self.unstored_output = 0;
            self.unstored_of.clear();
        }
    }
}
