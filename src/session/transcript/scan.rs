//! Reading records forward, resynchronising past damage.
//!
//! Records are read one after the other, each skipped by its length, so
//! the bytes inside a payload are never looked at. After a bad record the
//! reader searches byte by byte for the next place where this file's
//! marker starts a complete, valid record numbered above the last good
//! one: records of other files carry other markers, and copies of this
//! file's own records (a run that printed its transcript) carry numbers
//! already seen, so neither is ever taken for a record of the file.

use std::io;

use super::format::{self, Decoded, Header, Marker, OutputBytes, FILE_HEADER, HEADER};
use super::stored::OutputStore;
use super::window::{Source, Window};
use super::Entry;

/// What the reader finds next.
#[derive(Debug)]
pub enum Event {
    /// A good entry, its record from `start` to `end`.
    Entry { entry: Entry, start: u64, end: u64 },
    /// Bad bytes with a good record after them.
    Damage { offset: u64, len: u64 },
    /// Bad bytes up to the end of the file; `torn` when they are the start
    /// of a record that was never finished (too short for a header, a
    /// header whose record ends past the end, or zeros).
    Tail { offset: u64, len: u64, torn: bool },
}

enum Record {
    Good(Decoded, u64),
    Bad,
    Incomplete,
}

/// The records of one file, from its first record on.
pub struct Scanner<S> {
    window: Window<S>,
    marker: Marker,
    pos: u64,
    last_seq: u64,
    /// The good record resynchronisation found (and where it starts),
    /// returned next.
    found: Option<(Decoded, u64, u64)>,
    output: OutputBytes,
    /// Where stored output's bytes are read (none: such entries come
    /// without their bytes).
    store: Option<OutputStore>,
    /// The file's header is damaged and not reported yet.
    header_damaged: bool,
    /// An event held back behind the header's damage.
    held: Option<Event>,
}

impl<S: Source> Scanner<S> {
    /// Read `src` up to `eof` (fixed now), records starting at `start`.
    pub fn new(src: S, eof: u64, marker: Marker, start: u64) -> Self {
        Scanner {
            window: Window::new(src, eof),
            marker,
            pos: start,
            last_seq: 0,
            found: None,
            output: OutputBytes::Kept,
            store: None,
            header_damaged: false,
            held: None,
        }
    }

    /// The file's header is damaged (see `header::read`): it is reported
    /// as damage before the first record, one region with any damage
    /// right after it.
    pub fn with_damaged_header(mut self, damaged: bool) -> Self {
        self.header_damaged = damaged && self.pos == FILE_HEADER;
        self
    }

    /// The number of the last good entry read (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Stored output entries come with their bytes, read from `store`
    /// (when output bytes are kept).
    pub fn with_store(mut self, store: OutputStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Records numbered `seq` or below are not this reader's: it starts
    /// after the record numbered `seq` (see `Transcript::open_with`).
    pub fn after_seq(mut self, seq: u64) -> Self {
        self.last_seq = seq;
        self
    }

    /// Whether output entries come with their bytes (checked either way).
    pub fn with_output_bytes(mut self, output: OutputBytes) -> Self {
        self.output = output;
        self
    }

    /// The next event, or `None` at the end.
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        if let Some(held) = self.held.take() {
            return Ok(Some(held));
        }
        if !std::mem::take(&mut self.header_damaged) {
            return self.next_record();
        }
        let header = Event::Damage {
            offset: 0,
            len: FILE_HEADER,
        };
        Ok(Some(match self.next_record()? {
            Some(Event::Damage { offset, len }) if offset == FILE_HEADER => Event::Damage {
                offset: 0,
                len: len + FILE_HEADER,
            },
            Some(Event::Tail { offset, len, .. }) if offset == FILE_HEADER => Event::Tail {
                offset: 0,
                len: len + FILE_HEADER,
                torn: false,
            },
            next => {
                self.held = next;
                header
            }
        }))
    }

    fn next_record(&mut self) -> io::Result<Option<Event>> {
        if let Some((entry, start, end)) = self.found.take() {
            return Ok(Some(self.accept(entry, start, end)));
        }
        if self.pos >= self.window.eof() {
            return Ok(None);
        }
        let start = self.pos;
        let record = match self.record_at(start)? {
            Record::Good(entry, end) => return Ok(Some(self.accept(entry, start, end))),
            other => other,
        };
        if let Some(at) = self.resync(start + 1)? {
            self.pos = at;
            return Ok(Some(Event::Damage {
                offset: start,
                len: at - start,
            }));
        }
        let eof = self.window.eof();
        self.pos = eof;
        let torn = matches!(record, Record::Incomplete) || self.zeros(start, eof)?;
        Ok(Some(Event::Tail {
            offset: start,
            len: eof - start,
            torn,
        }))
    }

    fn accept(&mut self, decoded: Decoded, start: u64, end: u64) -> Event {
        self.pos = end;
        self.last_seq = decoded.entry.seq;
        let entry = match (&decoded.stored, &mut self.store, self.output) {
            (Some(stored), Some(store), OutputBytes::Kept) => store.fill(decoded.entry, stored),
            _ => decoded.entry,
        };
        Event::Entry { entry, start, end }
    }

    /// The record at `at`; good only if numbered above the last good one.
    fn record_at(&mut self, at: u64) -> io::Result<Record> {
        let bytes = self.window.get(at, HEADER)?;
        if bytes.len() < HEADER {
            return Ok(Record::Incomplete);
        }
        let Some(header) = Header::read(bytes, &self.marker) else {
            return Ok(Record::Bad);
        };
        let Some(end) = header.end(at) else {
            return Ok(Record::Bad);
        };
        if end > self.window.eof() {
            return Ok(Record::Incomplete);
        }
        // Checked before the checksum: it is what rules out copies of this
        // file's own records, and it is cheaper.
        if header.seq <= self.last_seq {
            return Ok(Record::Bad);
        }
        let size = (end - at) as usize;
        let bytes = self.window.get(at, size)?;
        if bytes.len() < size {
            return Ok(Record::Incomplete);
        }
        Ok(
            match format::decode_keeping(&header, &bytes[..size], self.output) {
                Some(entry) => Record::Good(entry, end),
                None => Record::Bad,
            },
        )
    }

    /// The first position from `from` on where a good record starts.
    fn resync(&mut self, from: u64) -> io::Result<Option<u64>> {
        let mut at = from;
        while let Some(candidate) = self.window.find(at, &self.marker)? {
            if let Record::Good(entry, end) = self.record_at(candidate)? {
                self.found = Some((entry, candidate, end));
                return Ok(Some(candidate));
            }
            at = candidate + 1;
        }
        Ok(None)
    }

    fn zeros(&mut self, from: u64, to: u64) -> io::Result<bool> {
        let mut at = from;
        while at < to {
            let bytes = self.window.get(at, 1)?;
            if bytes.is_empty() {
                break;
            }
            let n = bytes.len().min((to - at) as usize);
            if bytes[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += n as u64;
        }
        Ok(true)
    }
}
