//! The log and attach replays: stored entries sent to a client at the
//! pace it reads, then (when it follows) the live ones.

use crate::worker::WorkerError;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::protocol::message::Response;
use crate::session::log_query::{self, LogQuery};
use crate::session::transcript::{self, Entry};
use crate::worker::outbox::{Outbox, LAG_BYTES, REPLAY_AHEAD_BYTES};
use crate::worker::state::Worker;

/// Send the entries `query` selects; with `follow`, then live ones.
pub(super) fn send_log(worker: &Rc<RefCell<Worker>>, query: LogQuery, follow: bool, tx: &Outbox) {
    let next_input = worker.borrow().core.next_input();
    if let Some(n) = query.input.filter(|n| *n == 0 || *n >= next_input) {
        let _ = tx.send(Response::Error {
            message: log_query::no_input(n),
        });
        return;
    }
    if follow {
        let start = match (query.after, query.tail) {
            (Some(after), _) => ReplayStart::After(after),
            (None, Some(n)) => ReplayStart::Tail(n),
            (None, None) => ReplayStart::After(0),
        };
        follow_entries(worker, start, query.input, tx);
        return;
    }
    let (path, notices) = {
        let w = worker.borrow();
        (w.files.transcript(), w.store.restore_notices.clone())
    };
    tokio::task::spawn_local(replay(path, query, notices, tx.clone()));
}

/// Replay from `start`, then live entries (only input `only`'s, if
/// given, until it has ended).
pub(super) fn follow_entries(
    worker: &Rc<RefCell<Worker>>,
    start: ReplayStart,
    only: Option<u64>,
    tx: &Outbox,
) {
    // Subscribe before reading the file, then leave out live entries the
    // replay already carried. (Only traffic: the client's view,
    // `laws::notice::View`, decides what is shown.)
    let (live_tx, live_rx) = unbounded_channel();
    let (path, notices) = {
        let mut w = worker.borrow_mut();
        w.subscribe(live_tx);
        (w.files.transcript(), w.store.restore_notices.clone())
    };
    let notices = match (&start, only) {
        (ReplayStart::Tail(_), None) => notices,
        _ => Vec::new(),
    };
    let replay = Replay {
        start,
        notices,
        only,
    };
    tokio::task::spawn_local(attach(path, replay, tx.clone(), live_rx));
}

/// Send the entries `query` selects (a tail after the older restore
/// `notices`), never more than [`REPLAY_AHEAD_BYTES`] ahead of the
/// client, then `Replayed`.
async fn replay(path: PathBuf, query: LogQuery, notices: Vec<Entry>, tx: Outbox) {
    let entries = match log_query::entries_with_notices(&path, query, notices) {
        Ok(entries) => entries,
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
            return;
        }
    };
    for entry in entries {
        if tx.send(Response::Entry(entry)).is_err() {
            return;
        }
        tx.below(REPLAY_AHEAD_BYTES).await;
    }
    let _ = tx.send(Response::Replayed);
}

/// Where a replay before live entries starts.
pub(super) enum ReplayStart {
    /// Every entry after this one (0: all of them).
    After(u64),
    /// The last N entries, after every older restore notice.
    Tail(u64),
}

/// What an attach (or `log --follow`) replays before going live.
struct Replay {
    start: ReplayStart,
    /// Restore notices to show before a tail that leaves them out.
    notices: Vec<Entry>,
    /// Only this input's entries, until its end.
    only: Option<u64>,
}

impl Replay {
    /// The replayed entries, read as a stream (a tail is bounded).
    fn entries(
        self,
        path: &std::path::Path,
    ) -> Result<Box<dyn Iterator<Item = Entry>>, WorkerError> {
        Ok(match self.start {
            ReplayStart::After(after) => Box::new(transcript::stream_from(path, after + 1)?),
            ReplayStart::Tail(n) => {
                let tail = transcript::read_tail(path, n as usize)?;
                let first = tail.first().map_or(u64::MAX, |e| e.seq);
                let older = self.notices.into_iter().filter(move |n| n.seq < first);
                Box::new(older.chain(tail).collect::<Vec<_>>().into_iter())
            }
        })
    }
}

/// Attach: the replay, then live entries. A client that stops reading is
/// not buffered for: past [`LAG_BYTES`] live entries are dropped (they are
/// in the transcript) and it is fed from the file until it has caught up.
async fn attach(path: PathBuf, replay: Replay, tx: Outbox, live: UnboundedReceiver<Response>) {
    let only = replay.only;
    let last = match replay.start {
        ReplayStart::After(after) => after,
        ReplayStart::Tail(_) => 0,
    };
    let entries = match replay.entries(&path) {
        Ok(entries) => entries,
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
            return;
        }
    };
    let mut feed = Feed {
        path,
        tx,
        only,
        last,
        resume_at: 0,
        only_open: Default::default(),
    };
    if feed.send_replay(entries).await {
        feed.follow_live(live).await;
    }
}

/// An attach's feed of entries to its client, and where it stands.
struct Feed {
    path: PathBuf,
    tx: Outbox,
    /// Only this input's entries, until its end.
    only: Option<u64>,
    /// The last entry sent or passed over.
    last: u64,
    /// Where reading the file on may start: a record's start, or the top.
    resume_at: u64,
    /// The followed input has begun and not ended: damage read now may
    /// have held its output.
    only_open: std::cell::Cell<bool>,
}

/// What became of one entry of a feed.
#[derive(PartialEq)]
enum Passed {
    /// Not the followed input's.
    Skipped,
    Sent,
    /// The client is gone, or the followed input has ended: the feed ends.
    Done,
}

impl Feed {
    /// Send `entry` if the feed wants it.
    fn pass_on(&self, entry: Entry) -> Passed {
        // Only the followed input's entries are sent; its end ends the follow.
        let only = self.only;
        let own = only.is_none_or(|input| log_query::belongs_to(&entry, input));
        if !(own || self.only_open.get() && log_query::is_damage_notice(&entry)) {
            return Passed::Skipped;
        }
        let end = only.is_some_and(|input| log_query::ends(&entry, input));
        if own {
            self.only_open.set(!end);
        }
        if self.tx.send(Response::Entry(entry)).is_err() || end {
            return Passed::Done;
        }
        Passed::Sent
    }

    /// Send the replayed `entries`, then `Replayed`; whether the feed goes on.
    async fn send_replay(&mut self, entries: impl Iterator<Item = Entry>) -> bool {
        for entry in entries {
            self.last = entry.seq;
            match self.pass_on(entry) {
                Passed::Skipped => {}
                Passed::Sent => self.tx.below(REPLAY_AHEAD_BYTES).await,
                Passed::Done => return false,
            }
        }
        let _ = self.tx.send(Response::Replayed);
        true
    }

    /// Send live entries, from the file while the client is behind.
    async fn follow_live(&mut self, mut live: UnboundedReceiver<Response>) {
        while let Some(response) = live.recv().await {
            let Response::Entry(entry) = response else {
                continue;
            };
            if entry.seq <= self.last {
                continue;
            }
            if self.tx.pending() < LAG_BYTES {
                self.last = entry.seq;
                if self.pass_on(entry) == Passed::Done {
                    return;
                }
                continue;
            }
            // Behind: this entry and every later one come from the file.
            if !self.catch_up(&mut live, entry.seq).await {
                return;
            }
        }
    }

    /// Feed the client from the file until it has caught up; whether the feed goes on.
    async fn catch_up(&mut self, live: &mut UnboundedReceiver<Response>, mut owed: u64) -> bool {
        loop {
            tokio::select! {
                _ = self.tx.below(REPLAY_AHEAD_BYTES) => {}
                more = live.recv() => match more {
                    Some(Response::Entry(e)) => owed = owed.max(e.seq),
                    Some(_) => {}
                    None => return false,
                },
            }
            if self.tx.is_closed() {
                return false;
            }
            if self.tx.pending() >= REPLAY_AHEAD_BYTES {
                continue;
            }
            let Ok(mut entries) = transcript::stream_at(&self.path, self.resume_at, self.last + 1)
            else {
                return false;
            };
            while self.tx.pending() < REPLAY_AHEAD_BYTES {
                let Ok(Some((entry, end))) = entries.next_with_end() else {
                    break;
                };
                self.last = entry.seq;
                self.resume_at = end;
                if self.pass_on(entry) == Passed::Done {
                    return false;
                }
            }
            // Live again once everything dropped is sent: what the live
            // channel still holds is newer and follows in order.
            if self.last >= owed {
                return true;
            }
        }
    }
}
