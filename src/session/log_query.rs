//! Which entries `log` reads: all of them, the last N, or one input's.
//!
//! Entries come from the transcript as a stream (memory does not grow
//! with the file); `--tail` reads from the end without reading the rest.

use super::SessionError;
use std::path::Path;

use super::entry::{Entry, EntryBody};
use super::numbers::{self, NumberMark};
use super::transcript;

/// What a `log` request asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Only the last `tail` entries.
    pub tail: Option<u64>,
    /// Only the entries of input `input` (a run or user bash).
    pub input: Option<u64>,
    /// Only the entries after entry `after` (`log --since`).
    pub after: Option<u64>,
}

/// The entries `query` selects from the transcript at `path`, in order.
pub fn entries(
    path: &Path,
    query: LogQuery,
) -> Result<Box<dyn Iterator<Item = Entry>>, SessionError> {
    let after = query.after.unwrap_or(0);
    let all: Box<dyn Iterator<Item = Entry>> = match query.tail {
        // The last N of those after `after` are the last N overall that
        // are after it.
        Some(n) => Box::new(
            transcript::read_tail(path, n as usize)?
                .into_iter()
                .filter(move |e| e.seq > after),
        ),
        None => Box::new(transcript::stream_from(path, after + 1)?),
    };
    Ok(match query.input {
        Some(input) => Box::new(of_input(all, input)),
        None => all,
    })
}

/// The entries of input `input` among `all`, with the damage notices read
/// between its first entry and its end: what it wrote may have been there.
pub fn of_input(all: impl Iterator<Item = Entry>, input: u64) -> impl Iterator<Item = Entry> {
    let mut open = false;
    all.filter(move |entry| {
        if belongs_to(entry, input) {
            open = !ends(entry, input);
            return true;
        }
        open && is_damage_notice(entry)
    })
}

/// Whether `entry` is the notice a reader shows in the place of damaged
/// transcript bytes.
pub fn is_damage_notice(entry: &Entry) -> bool {
    matches!(&entry.body, EntryBody::Notice { text, .. } if super::notices::damaged_region(text).is_some())
}

/// The entries `query` selects, after the restore notices older than the
/// first of them when the query is a tail of the whole session (the
/// notice law: every restore is shown once, however short the tail).
pub fn entries_with_notices(
    path: &Path,
    query: LogQuery,
    notices: Vec<Entry>,
) -> Result<Box<dyn Iterator<Item = Entry>>, SessionError> {
    let selected = entries(path, query)?;
    if query.tail.is_none() || query.input.is_some() {
        return Ok(selected);
    }
    let mut selected = selected.peekable();
    let first = selected.peek().map_or(u64::MAX, |e| e.seq);
    let after = query.after.unwrap_or(0);
    let older = notices
        .into_iter()
        .filter(move |n| n.seq < first && n.seq > after);
    Ok(Box::new(older.chain(selected)))
}

/// Whether `entry` is part of input `input`: its text, start, output or end.
pub fn belongs_to(entry: &Entry, input: u64) -> bool {
    match &entry.body {
        EntryBody::Input { input: i, .. }
        | EntryBody::RunStarted { input: i }
        | EntryBody::RunFinished { input: i, .. }
        | EntryBody::RunInterrupted { input: i }
        | EntryBody::ShellCommand { input: i, .. }
        | EntryBody::Withdrawn { input: i } => *i == input,
        EntryBody::Output {
            input: run, bash, ..
        } => *run == Some(input) || *bash == Some(input),
        EntryBody::Bash { bash, .. } | EntryBody::BashFinished { bash, .. } => *bash == Some(input),
        // Bytes of its output read as lost (damaged, or their file gone),
        // or why its user bash was cut short.
        EntryBody::Notice { text, .. } => {
            transcript::input_of_lost_notice(text) == Some(input)
                || super::notices::bash_of_cut_short(text) == Some(input)
        }
    }
}

/// Whether `entry` ends input `input`: its run's end, interruption or
/// withdrawal, or its user bash's end.
pub fn ends(entry: &Entry, input: u64) -> bool {
    match &entry.body {
        EntryBody::RunFinished { input: i, .. }
        | EntryBody::RunInterrupted { input: i }
        | EntryBody::Withdrawn { input: i } => *i == input,
        EntryBody::BashFinished { bash, .. } => *bash == Some(input),
        _ => false,
    }
}

/// What a request naming input `input` that the session never numbered
/// gets.
pub fn no_input(input: u64) -> String {
    format!("the session has no input {input}")
}

/// Why a client waiting for run `input` gets no status: the same words
/// whether its worker tells it or the transcript does.
pub fn withdrawn(input: u64) -> String {
    format!("run {input} was withdrawn: it never ran")
}

/// `selected`, with the notice a reader of a resting session shows when
/// its transcript lost history since its worker last wrote `mark`
/// (`numbers::lost_at_rest`): the words the next worker stores, first
/// when the file is gone or another one, last when it was cut short; or,
/// when it ends in a torn tail, the notice saying so. None for one
/// input's entries (that input's own are asked for).
pub fn with_history_lost_at_rest(
    path: &Path,
    query: LogQuery,
    mark: Option<&NumberMark>,
    selected: Box<dyn Iterator<Item = Entry>>,
) -> Result<Box<dyn Iterator<Item = Entry>>, SessionError> {
    if query.input.is_some() {
        return Ok(selected);
    }
    let found = transcript::identity(path)?;
    let lost = mark.and_then(|mark| Some((mark, numbers::lost_at_rest(mark, found)?)));
    let (body, cut_short) = match lost {
        Some((mark, (lost, next_input))) => (
            super::notices::history_lost(&lost, next_input),
            found.is_some_and(|(_, marker)| Some(marker) == mark.transcript_marker),
        ),
        None => match transcript::torn_tail(path)? {
            Some((offset, bytes)) => {
                let kept = transcript::damaged_path(path, offset);
                (
                    super::notices::torn_tail_at_rest(offset, bytes, &kept),
                    true,
                )
            }
            None => return Ok(selected),
        },
    };
    if !cut_short {
        let notice = Entry {
            seq: 0,
            at_ms: 0,
            body,
        };
        return Ok(Box::new(std::iter::once(notice).chain(selected)));
    }
    // Numbered as the entry before it, as a damage notice is.
    let last = std::rc::Rc::new(std::cell::Cell::new((0, 0)));
    let seen = last.clone();
    let selected = selected.inspect(move |e| seen.set((e.seq, e.at_ms)));
    let notice = std::iter::once_with(move || {
        let (seq, at_ms) = last.get();
        Entry { seq, at_ms, body }
    });
    Ok(Box::new(selected.chain(notice)))
}
