//! Rebuilding the run core's books from a stored transcript, one entry at
//! a time, and the books a replay has gathered (saved by `checkpoint`).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::RunCore;
use crate::laws::idle_shutdown::RunGate;
use crate::laws::runs::{RunId, RunRecord};
use crate::protocol::message::QueuedInput;
use crate::protocol::tty::WindowSize;
use crate::session::transcript::{Entry, EntryBody};

/// The books being rebuilt from a stored transcript.
pub struct Replay {
    books: ReplayBooks,
    job_tag: u32,
}

/// What a replay has gathered from the entries seen so far: all a worker
/// needs of the transcript before them, so it can be saved and taken up
/// again (`worker::checkpoint`) instead of reading those entries again.
/// Memory follows the open inputs and the number of runs, not the
/// transcript's length.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBooks {
    book: BTreeMap<RunId, RunRecord>,
    next_input: RunId,
    spool_offsets: HashMap<RunId, u64>,
    open_bash: BTreeMap<RunId, u64>,
    /// Inputs not yet started, ended or withdrawn.
    queue: BTreeMap<RunId, QueuedInput>,
    texts: HashMap<RunId, String>,
    /// The terminal sizes of terminal runs among `texts`.
    #[serde(default, skip_serializing_if = "HashMap::is_empty")]
    ttys: HashMap<RunId, WindowSize>,
}

impl Replay {
    /// Take up books saved after the entries they were built from.
    pub fn resume(books: ReplayBooks, job_tag: u32) -> Replay {
        Replay { books, job_tag }
    }

    /// The books so far.
    pub fn books(&self) -> &ReplayBooks {
        &self.books
    }

    /// Take one stored entry, in transcript order.
    pub fn see(&mut self, entry: &Entry) {
        let books = &mut self.books;
        match &entry.body {
            EntryBody::Input { input, text, tty } => {
                books.queued(QueuedInput {
                    run: *input,
                    text: text.clone(),
                    at_ms: entry.at_ms,
                    bash: false,
                    tty: *tty,
                });
            }
            EntryBody::Withdrawn { input } => {
                books.book.insert(*input, RunRecord::Withdrawn);
                books.queue.remove(input);
                books.texts.remove(input);
                books.ttys.remove(input);
            }
            EntryBody::Bash {
                bash: Some(number), ..
            } => {
                books.next_input = books.next_input.max(number + 1);
                books.open_bash.insert(*number, 0);
            }
            EntryBody::BashFinished {
                bash: Some(number), ..
            } => {
                books.open_bash.remove(number);
            }
            EntryBody::Output {
                bash: Some(number),
                spool_end: Some(end),
                ..
            } => {
                if let Some(offset) = books.open_bash.get_mut(number) {
                    *offset = *end;
                }
            }
            EntryBody::RunStarted { input } => {
                books.book.insert(*input, RunRecord::Started);
                books.queue.remove(input);
            }
            EntryBody::RunFinished { input, .. } | EntryBody::RunInterrupted { input } => {
                books.book.insert(*input, RunRecord::Ended);
                // An ended run's text, place and spool offset are not
                // needed again.
                books.queue.remove(input);
                books.texts.remove(input);
                books.ttys.remove(input);
                books.spool_offsets.remove(input);
            }
            EntryBody::Output {
                input: Some(input),
                spool_end: Some(end),
                ..
            } => {
                books.spool_offsets.insert(*input, *end);
            }
            _ => {}
        }
    }

    /// The books once every entry is seen.
    pub fn finish(self) -> RunCore {
        let ReplayBooks {
            book,
            next_input,
            spool_offsets,
            open_bash,
            queue,
            texts,
            ttys,
        } = self.books;
        let started_text = texts
            .into_iter()
            .filter(|(run, _)| book.get(run) == Some(&RunRecord::Started))
            .map(|(run, text)| (run, (text, ttys.get(&run).copied())))
            .collect();
        let queue = queue
            .into_values()
            .filter(|q| book.get(&q.run) == Some(&RunRecord::Queued))
            .collect();
        RunCore {
            book,
            queue,
            next_input,
            spool_offsets,
            open_bash,
            started_text,
            jobs: HashMap::new(),
            gate: RunGate::Open,
            connected: false,
            kernel_pid: None,
            background: 0,
            bash_seq: 0,
            job_tag: self.job_tag,
            bash_waiting: 0,
            bash_listed: BTreeMap::new(),
        }
    }
}

impl RunCore {
    /// The books as the stored transcript leaves them, in one call: the
    /// worker itself streams its transcript through `replay`.
    #[cfg(test)]
    pub fn from_transcript(entries: &[Entry], job_tag: u32) -> RunCore {
        let mut replay = RunCore::replay(job_tag);
        for entry in entries {
            replay.see(entry);
        }
        replay.finish()
    }

    /// Books built one stored entry at a time, so a transcript is read as
    /// a stream (`Replay::see`, then `Replay::finish`).
    pub fn replay(job_tag: u32) -> Replay {
        Replay::resume(
            ReplayBooks {
                next_input: 1,
                ..ReplayBooks::default()
            },
            job_tag,
        )
    }
}

impl ReplayBooks {
    /// Input `queued` is stored.
    fn queued(&mut self, queued: QueuedInput) {
        let input = queued.run;
        self.book.insert(input, RunRecord::Queued);
        self.texts.insert(input, queued.text.clone());
        if let Some(size) = queued.tty {
            self.ttys.insert(input, size);
        }
        self.queue.insert(input, queued);
        self.next_input = self.next_input.max(input + 1);
    }
}
