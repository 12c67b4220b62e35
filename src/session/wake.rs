//! A session's durable events and the wake-ups built on them, without I/O
//! or a clock. A session's events are its transcript's entries (a run
//! queued, started, ended with its status or interrupted, an input
//! withdrawn, a notice: a restore, a give-up, lost output), and an event's
//! cursor is its entry's seq: what is stored is replayed exactly, after
//! any restart, with no write of its own. `eukhe events --since` and
//! `eukhe wait` read them through this module.

use regex::Regex;

use crate::protocol::entry::{Entry, EntryBody};
use crate::protocol::event::{bounded, entry_event, Event, EventKind};

/// The status a run cut short reports (its kernel gone, or withdrawn
/// before it ran), as `send --wait` does.
pub const CUT_SHORT_STATUS: i32 = 255;

/// The longest partial line kept between output entries for `--match`:
/// a line longer than this is matched in pieces.
const CARRY_MAX_BYTES: usize = 64 * 1024;

/// The event stored `entry` of session `id` (named `name`) is, with its
/// cursor; none for output and the other entries that are not events.
pub fn stored_event(id: &str, name: &str, entry: &Entry) -> Option<Event> {
    let kind = entry_event(entry)?;
    Some(Event::session(entry.at_ms, id, name, kind).at_seq(Some(entry.seq)))
}

/// What a wait waits for; it is met by whichever comes first.
#[derive(Clone, Debug, Default)]
pub struct Condition {
    /// Run N ended (at once if it already has).
    pub run: Option<u64>,
    /// Any run ended after the cursor.
    pub any_run: bool,
    /// Output after the cursor matched (line by line).
    pub regex: Option<Regex>,
    /// The session went idle (asked of the daemon: see [`Wake::ask_idle`]).
    pub idle: bool,
}

/// Why a wait woke: the event that met its condition, its cursor and the
/// run's status where there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Woken {
    /// What happened.
    pub event: EventKind,
    /// Its entry's seq.
    pub seq: u64,
    /// Wall-clock milliseconds of the entry (or of the look that saw it).
    pub at_ms: u64,
    /// The run's exit status, for a run's end.
    pub status: Option<i32>,
}

/// A wait fed the session's entries in order.
#[derive(Debug)]
pub struct Wake {
    condition: Condition,
    /// Output not yet ended by a newline.
    carry: String,
    /// The seq of the last entry fed: the next cursor.
    cursor: Option<u64>,
}

impl Wake {
    /// A wait for `condition` on what is stored after `since` (absent:
    /// the caller passes over what is already stored).
    pub fn new(condition: Condition, since: Option<u64>) -> Wake {
        Wake {
            condition,
            carry: String::new(),
            cursor: since,
        }
    }

    /// The cursor to pass next: the last entry fed, else the one given.
    pub fn cursor(&self) -> Option<u64> {
        self.cursor
    }

    /// Feed the next stored entry; the wake-up, if it meets the condition.
    pub fn feed(&mut self, entry: &Entry) -> Option<Woken> {
        self.pass(entry);
        let ended = match &entry.body {
            EntryBody::RunFinished { input, status, .. } => Some((*input, *status)),
            EntryBody::RunInterrupted { input } | EntryBody::Withdrawn { input } => {
                Some((*input, CUT_SHORT_STATUS))
            }
            _ => None,
        };
        if let Some((input, status)) = ended {
            if self.condition.any_run || self.condition.run == Some(input) {
                return Some(Woken {
                    event: entry_event(entry)?,
                    seq: entry.seq,
                    at_ms: entry.at_ms,
                    status: Some(status),
                });
            }
        }
        if let (Some(regex), EntryBody::Output { data, .. }) = (&self.condition.regex, &entry.body)
        {
            let line = matched_line(regex, &mut self.carry, data)?;
            return Some(Woken {
                event: EventKind::Output {
                    line: bounded(&line),
                },
                seq: entry.seq,
                at_ms: entry.at_ms,
                status: None,
            });
        }
        None
    }

    /// Move the cursor past `entry` without looking at it: it was
    /// stored before the wait began.
    pub fn pass(&mut self, entry: &Entry) {
        self.cursor = Some(self.cursor.map_or(entry.seq, |c| c.max(entry.seq)));
    }

    /// The transcript was empty when the wait began: everything is new.
    pub fn pass_empty(&mut self) {
        self.cursor.get_or_insert(0);
    }

    /// The wake-up for a session the daemon said was idle at `at_ms`.
    pub fn idle(&self, at_ms: u64) -> Woken {
        Woken {
            event: EventKind::State {
                state: "idle".into(),
            },
            seq: self.cursor.unwrap_or(0),
            at_ms,
            status: None,
        }
    }
}

/// The first line of `carry` + `data` that `regex` matches (a line still
/// open included); `carry` keeps the open line for the next chunk.
fn matched_line(regex: &Regex, carry: &mut String, data: &[u8]) -> Option<String> {
    carry.push_str(&String::from_utf8_lossy(data));
    let (complete, open) = match carry.rfind('\n') {
        Some(end) => (&carry[..end], &carry[end + 1..]),
        None => ("", carry.as_str()),
    };
    let found = complete
        .split('\n')
        .chain(std::iter::once(open))
        .map(|line| line.trim_end_matches('\r'))
        .find(|line| regex.is_match(line))
        .map(str::to_string);
    let mut keep = open.to_string();
    if keep.len() > CARRY_MAX_BYTES {
        let mut start = keep.len() - CARRY_MAX_BYTES;
        while !keep.is_char_boundary(start) {
            start += 1;
        }
        keep = keep[start..].to_string();
    }
    *carry = keep;
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::entry::Stream;

    fn entry(seq: u64, body: EntryBody) -> Entry {
        Entry {
            seq,
            at_ms: 1000 + seq,
            body,
        }
    }

    fn finished(seq: u64, input: u64, status: i32) -> Entry {
        entry(
            seq,
            EntryBody::RunFinished {
                input,
                status,
                signal: None,
                cancelled: false,
                lost_output: None,
            },
        )
    }

    fn output(seq: u64, text: &str) -> Entry {
        entry(
            seq,
            EntryBody::Output {
                input: Some(1),
                stream: Stream::Stdout,
                data: text.as_bytes().to_vec().into(),
                spool_end: None,
                bash: None,
            },
        )
    }

    #[test]
    fn a_run_queued_started_and_ended_with_its_status_are_events_with_their_cursor() {
        let queued = entry(
            3,
            EntryBody::Input {
                input: 1,
                text: "sleep 3; exit 4".into(),
                tty: None,
            },
        );
        let event = stored_event("abc", "s", &queued).unwrap();
        assert_eq!(event.seq, Some(3));
        assert_eq!(event.at_ms, 1003);
        assert!(matches!(event.event, EventKind::RunQueued { input: 1, .. }));
        let started = stored_event("abc", "s", &entry(4, EntryBody::RunStarted { input: 1 }));
        assert_eq!(started.unwrap().seq, Some(4));
        let ended = stored_event("abc", "s", &finished(9, 1, 4)).unwrap();
        assert_eq!(ended.seq, Some(9));
        assert!(matches!(
            ended.event,
            EventKind::RunFinished {
                input: 1,
                status: 4,
                ..
            }
        ));
    }

    #[test]
    fn a_restore_and_a_give_up_are_events_and_output_is_not() {
        let restore = entry(
            5,
            EntryBody::Notice {
                text: "restored".into(),
                restore: Some(2),
                restore_id: None,
            },
        );
        assert!(matches!(
            stored_event("a", "a", &restore).unwrap().event,
            EventKind::Restored { restore: 2, .. }
        ));
        let give_up = entry(
            6,
            EntryBody::Notice {
                text: "given up".into(),
                restore: None,
                restore_id: None,
            },
        );
        assert!(matches!(
            stored_event("a", "a", &give_up).unwrap().event,
            EventKind::Notice { .. }
        ));
        assert_eq!(stored_event("a", "a", &output(7, "hi\n")), None);
    }

    #[test]
    fn waiting_for_run_n_wakes_on_its_end_with_its_status_and_not_on_another() {
        let mut wake = Wake::new(
            Condition {
                run: Some(2),
                ..Condition::default()
            },
            None,
        );
        assert_eq!(wake.feed(&finished(4, 1, 0)), None);
        let woken = wake.feed(&finished(8, 2, 4)).unwrap();
        assert_eq!((woken.seq, woken.status), (8, Some(4)));
        assert_eq!(wake.cursor(), Some(8));
    }

    #[test]
    fn an_interrupted_run_wakes_with_the_cut_short_status() {
        let mut wake = Wake::new(
            Condition {
                any_run: true,
                ..Condition::default()
            },
            Some(3),
        );
        assert_eq!(wake.cursor(), Some(3));
        let woken = wake
            .feed(&entry(5, EntryBody::RunInterrupted { input: 7 }))
            .unwrap();
        assert_eq!(woken.status, Some(CUT_SHORT_STATUS));
        assert_eq!(woken.event, EventKind::RunInterrupted { input: 7 });
    }

    #[test]
    fn output_matches_across_chunks_and_reports_the_line() {
        let mut wake = Wake::new(
            Condition {
                regex: Some(Regex::new("^ready on port [0-9]+$").unwrap()),
                ..Condition::default()
            },
            None,
        );
        assert_eq!(wake.feed(&output(2, "starting\nready on")), None);
        let woken = wake.feed(&output(3, " port 80\r\nmore\n")).unwrap();
        assert_eq!(
            woken.event,
            EventKind::Output {
                line: "ready on port 80".into()
            }
        );
        assert_eq!((woken.seq, woken.status), (3, None));
    }

    #[test]
    fn a_prompt_without_a_newline_matches() {
        let mut wake = Wake::new(
            Condition {
                regex: Some(Regex::new(r"\$ $").unwrap()),
                ..Condition::default()
            },
            None,
        );
        assert!(wake.feed(&output(1, "user@host $ ")).is_some());
    }

    #[test]
    fn entries_passed_over_move_the_cursor_and_wake_nothing() {
        let mut wake = Wake::new(
            Condition {
                any_run: true,
                ..Condition::default()
            },
            None,
        );
        wake.pass(&finished(6, 1, 0));
        assert_eq!(wake.cursor(), Some(6));
        assert_eq!(wake.idle(77).seq, 6);
        let mut empty = Wake::new(Condition::default(), None);
        empty.pass_empty();
        assert_eq!(empty.cursor(), Some(0));
    }
}
