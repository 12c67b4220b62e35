//! The marks an interactive shell run writes around each typed command
//! (`kernel/shell.bash`), as terminals' shell integration reads them:
//! `OSC 633 ; E ; text` (the command's text, `\xNN` escaped), `OSC 133 ; C`
//! (its output begins) and `OSC 133 ; D ; status` (it ended), each ended
//! by BEL or `ESC \`. [`ShellMarks`] finds them in the run's output as it
//! comes, a mark cut across chunks included, and [`split`] turns a chunk
//! into the transcript's entries: the output around each mark, and a
//! `ShellCommand` entry at each start and end. The output bytes are kept
//! exactly; the marks stay in them, outside the command's own output.

use bytes::Bytes;

use crate::protocol::entry::{EntryBody, Stream};
use crate::session::transcript::STORED_FROM_BYTES;

/// The longest mark kept while it is cut across chunks: anything longer
/// is not one of ours and is passed over.
const MARK_MAX_BYTES: usize = 64 * 1024;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

/// A command's start or end, and where in the chunk it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Where the mark began in this chunk (0 when it began in an earlier
    /// one).
    pub start: usize,
    /// Just after the mark's last byte.
    pub end: usize,
    /// The command's text, as its last text mark gave it.
    pub text: String,
    /// Its status: `None` at its start.
    pub status: Option<i32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    Escape,
    Osc,
    OscEscape,
}

/// The scanner of one shell run's output.
#[derive(Clone, Debug)]
pub struct ShellMarks {
    state: State,
    /// The mark's bytes after `ESC ]`, while it is read.
    payload: Vec<u8>,
    /// The text of the command the marks are about.
    text: String,
}

impl Default for ShellMarks {
    fn default() -> Self {
        ShellMarks {
            state: State::Ground,
            payload: Vec::new(),
            text: String::new(),
        }
    }
}

impl ShellMarks {
    /// The starts and ends of commands marked in `data`, the next chunk
    /// of output.
    pub fn scan(&mut self, data: &[u8]) -> Vec<Found> {
        let mut found = Vec::new();
        let mut began = 0;
        let mut i = 0;
        while i < data.len() {
            if self.state == State::Ground {
                match memchr::memchr(ESC, &data[i..]) {
                    Some(at) => {
                        i += at + 1;
                        began = i - 1;
                        self.state = State::Escape;
                    }
                    None => break,
                }
                continue;
            }
            let byte = data[i];
            i += 1;
            match (self.state, byte) {
                (State::Escape, b']') => {
                    self.state = State::Osc;
                    self.payload.clear();
                }
                (State::Escape, ESC) => began = i - 1,
                (State::Escape, _) => self.state = State::Ground,
                (State::Osc, BEL) => self.ended(began, i, &mut found),
                (State::Osc, ESC) => self.state = State::OscEscape,
                (State::Osc, _) if self.payload.len() < MARK_MAX_BYTES => self.payload.push(byte),
                (State::Osc, _) => self.state = State::Ground,
                (State::OscEscape, b'\\') => self.ended(began, i, &mut found),
                // Another sequence begins: this one was cut off.
                (State::OscEscape, b']') => {
                    began = i - 2;
                    self.state = State::Osc;
                    self.payload.clear();
                }
                (State::OscEscape, _) => self.state = State::Ground,
                (State::Ground, _) => unreachable!("handled above"),
            }
        }
        // A mark cut across chunks began before the next one.
        found
    }

    /// An OSC sequence ended at `end`; if it is one of ours, note it.
    fn ended(&mut self, start: usize, end: usize, found: &mut Vec<Found>) {
        self.state = State::Ground;
        let payload = std::mem::take(&mut self.payload);
        let status = match &payload[..] {
            [b'1', b'3', b'3', b';', b'C', ..] => None,
            [b'1', b'3', b'3', b';', b'D', rest @ ..] => Some(status_of(rest)),
            [b'6', b'3', b'3', b';', b'E', b';', text @ ..] => {
                self.text = unescape(text);
                return;
            }
            _ => return,
        };
        found.push(Found {
            start: start.min(end),
            end,
            text: self.text.clone(),
            status,
        });
    }
}

/// `;N` (absent or unreadable: 0, as a terminal reads it).
fn status_of(rest: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(rest.strip_prefix(b";").unwrap_or(rest));
    text.split(';')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The text of an `E` mark: `\xNN` is that byte, `\\` a backslash.
fn unescape(text: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            if text.get(i + 1) == Some(&b'\\') {
                bytes.push(b'\\');
                i += 2;
                continue;
            }
            if text.get(i + 1) == Some(&b'x') {
                let hex = text
                    .get(i + 2..i + 4)
                    .and_then(|h| std::str::from_utf8(h).ok());
                if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    bytes.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        bytes.push(text[i]);
        i += 1;
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The entries a chunk of shell run `input`'s output makes, given the
/// marks found in it: its output cut at each command's start (after its
/// mark) and end (before its mark), a `ShellCommand` entry at each cut.
/// Only the last piece carries `spool_end` (a reconnect resumes after the
/// whole chunk), and only when it is small enough to be kept in the
/// transcript: a piece is never stored as a pointer into the spool
/// record, which holds the whole chunk.
pub fn split(
    input: u64,
    stream: Stream,
    (data, spool_end): (Bytes, u64),
    found: Vec<Found>,
) -> Vec<EntryBody> {
    let output = |piece: Bytes, spool_end| EntryBody::Output {
        input: Some(input),
        stream,
        data: piece,
        spool_end,
        bash: None,
    };
    let mut entries = Vec::new();
    let mut from = 0;
    for mark in found {
        let at = if mark.status.is_some() {
            mark.start
        } else {
            mark.end
        };
        let at = at.clamp(from, data.len());
        if at > from {
            entries.push(output(data.slice(from..at), None));
        }
        from = at;
        entries.push(EntryBody::ShellCommand {
            input,
            text: mark.text,
            status: mark.status,
        });
    }
    if from < data.len() {
        entries.push(output(data.slice(from..), None));
    }
    let last = entries
        .iter_mut()
        .rev()
        .find(|entry| matches!(entry, EntryBody::Output { .. }));
    if let Some(EntryBody::Output {
        data, spool_end: e, ..
    }) = last
    {
        if data.len() < STORED_FROM_BYTES {
            *e = Some(spool_end);
        }
    }
    entries
}

#[cfg(test)]
mod tests;
