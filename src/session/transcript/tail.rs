//! The last entries, read backward from the end.
//!
//! Going back from the end, a record is taken only if it ends exactly
//! where the next one taken starts and is numbered exactly one below it.
//! The last one needs more care, since nothing after it vouches for it: a
//! record whose payload holds a copy of this file ends with a copy of the
//! record before it, and one still being written (or torn) may hold such
//! copies whole. Copies lie inside one record, so a run of records that
//! follow each other exactly (each ending where the next starts, numbered
//! one apart) and spans more than a record can ([`SPAN`]), or starts at the
//! file's first record, is made of the file's own records. The last record
//! taken is the last one ending such a run, found by reading the headers
//! of the last 32 MiB; and no good record numbered higher may follow it
//! (reading forward would take that one). Whenever this is not so (damage
//! near the end), the entries are read forward instead.

use crate::session::SessionError;
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::format::{self, Decoded, Header, Marker, FILE_HEADER, HEADER, SPAN};
use super::read::{locate, Entries, Found};
use super::scan::{Event, Scanner};
use super::stored::OutputStore;
use super::window::{memmem, Window, CHUNK};
use super::Entry;

/// The last `n` good entries of the transcript at `path`, in order
/// (read-only, like [`super::read_entries`], and returning the same
/// entries), without reading the whole file when its end is intact.
pub fn read_tail(path: &Path, n: usize) -> Result<Vec<Entry>, SessionError> {
    let context = |source: io::Error| SessionError::Transcript {
        path: path.to_path_buf(),
        source,
    };
    if n == 0 {
        return Ok(Vec::new());
    }
    let found = locate(path)?;
    if let Some(tail) = backward(&found, n, SPAN).map_err(context)? {
        return Ok(tail);
    }
    let mut entries = Entries::new(found, 0);
    let mut last = VecDeque::with_capacity(n.min(1024));
    while let Some(entry) = entries.next_entry().map_err(context)? {
        if last.len() == n {
            last.pop_front();
        }
        last.push_back(entry);
    }
    Ok(last.into())
}

/// Where the transcript at `path` ends in a torn tail (an unfinished
/// record after its last good one) and how many bytes it holds: what the
/// worker's next open cuts off. `None` when it ends with a good record,
/// or its end cannot be told reading backward (damage: readers show that
/// where it is).
pub fn torn_tail(path: &Path) -> Result<Option<(u64, u64)>, SessionError> {
    let Found::Records(file, eof, marker, path, false) = &locate(path)? else {
        return Ok(None);
    };
    let records = Records {
        file,
        eof: *eof,
        marker: *marker,
        span: SPAN,
        path,
    };
    records
        .torn_tail()
        .map_err(|source| SessionError::Transcript {
            path: path.to_path_buf(),
            source,
        })
}

/// The last `n` entries read backward, or `None` if they must be read
/// forward. `span` is the most a record spans ([`SPAN`]; tests use less,
/// to go through with small files what large ones go through).
pub(super) fn backward(found: &Found, n: usize, span: u64) -> io::Result<Option<Vec<Entry>>> {
    match found {
        // Its damage is shown where it is, by reading forward.
        Found::Records(_, _, _, _, true) => Ok(None),
        Found::Records(file, eof, marker, path, false) => Records {
            file,
            eof: *eof,
            marker: *marker,
            span,
            path,
        }
        .tail(n),
        _ => Ok(None),
    }
}

/// A good record and where it lies.
struct Record {
    decoded: Decoded,
    start: u64,
    end: u64,
}

struct Records<'a> {
    file: &'a File,
    eof: u64,
    marker: Marker,
    /// The most a record spans.
    span: u64,
    /// The transcript's path, beside which its stored output is.
    path: &'a Path,
}

impl Records<'_> {
    /// The last `n` entries, or `None` if they must be read forward.
    fn tail(&self, n: usize) -> io::Result<Option<Vec<Entry>>> {
        if self.eof <= FILE_HEADER {
            return Ok(Some(Vec::new()));
        }
        let lo = FILE_HEADER.max(self.eof.saturating_sub(2 * self.span));
        let last = match self.last_anchored(lo)? {
            // A long torn tail after a long record can leave too short a
            // run in the window: look further back, once.
            None if lo > FILE_HEADER => {
                self.last_anchored(FILE_HEADER.max(lo.saturating_sub(self.span)))?
            }
            last => last,
        };
        let Some(last) = last else {
            return Ok(None);
        };
        let Some(last) = self.record(last)? else {
            return Ok(None);
        };
        if self.newer_after(last.end, last.decoded.entry.seq)?
            || self.damaged_after(last.end, last.decoded.entry.seq)?
        {
            return Ok(None);
        }
        let mut chain = vec![last];
        while chain.len() < n {
            let current = chain.last().unwrap();
            if current.start == FILE_HEADER {
                break;
            }
            if current.decoded.entry.seq <= 1 {
                // Something before the first number: read forward.
                return Ok(None);
            }
            match self.previous(current.start, current.decoded.entry.seq - 1)? {
                Some(record) => chain.push(record),
                None => return Ok(None),
            }
        }
        let mut store = OutputStore::beside(self.path);
        Ok(Some(
            chain
                .into_iter()
                .rev()
                .map(|r| match &r.decoded.stored {
                    Some(stored) => store.fill(r.decoded.entry, stored),
                    None => r.decoded.entry,
                })
                .collect(),
        ))
    }

    /// See [`torn_tail`].
    fn torn_tail(&self) -> io::Result<Option<(u64, u64)>> {
        let lo = FILE_HEADER.max(self.eof.saturating_sub(2 * self.span));
        let last = match self.last_anchored(lo)? {
            None if lo > FILE_HEADER => return Ok(None),
            Some(at) => match self.record(at)? {
                Some(last) => Some(last),
                None => return Ok(None),
            },
            None => None,
        };
        let (from, seq) = last.map_or((FILE_HEADER, 0), |r| (r.end, r.decoded.entry.seq));
        if from >= self.eof {
            return Ok(None);
        }
        let mut scanner = Scanner::new(self.file, self.eof, self.marker, from).after_seq(seq);
        Ok(match scanner.next_event()? {
            Some(Event::Tail {
                offset,
                len,
                torn: true,
            }) => Some((offset, len)),
            _ => None,
        })
    }

    /// The start of the last complete record at or after `from` that ends
    /// a run of records following each other exactly which starts at the
    /// file's first record or spans at least `span`: one of the file's
    /// own records, not a copy inside another. Only headers are read.
    fn last_anchored(&self, from: u64) -> io::Result<Option<u64>> {
        let mut window = Window::new(self.file, self.eof);
        // Runs that a record starting at `end` numbered `seq + 1` would
        // continue: (end, seq, where the run starts). Only ends ahead are
        // kept, so this holds about one run per level of nesting: a list
        // searched whole costs less than a map's upkeep at every header.
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let mut last = None;
        let mut at = from;
        while let Some(q) = window.find(at, &self.marker)? {
            at = q + 1;
            runs.retain(|&(end, _, _)| end >= q);
            let head = window.get(q, HEADER)?;
            if head.len() < HEADER {
                continue;
            }
            let Some(header) = Header::read(head, &self.marker) else {
                continue;
            };
            let Some(end) = header.end(q).filter(|&end| end <= self.eof) else {
                continue;
            };
            let continued = header.seq.checked_sub(1).and_then(|previous| {
                let i = runs
                    .iter()
                    .position(|&(end, seq, _)| end == q && seq == previous)?;
                Some(runs.swap_remove(i).2)
            });
            let run = continued.unwrap_or(q);
            if run == FILE_HEADER || end - run >= self.span {
                last = Some(q);
            }
            match runs
                .iter_mut()
                .find(|(at_end, seq, _)| *at_end == end && *seq == header.seq)
            {
                Some(kept) => kept.2 = run,
                None => runs.push((end, header.seq, run)),
            }
        }
        Ok(last)
    }

    /// Whether a good record numbered above `seq` starts at or after
    /// `from`: reading forward would take it after resynchronising.
    fn newer_after(&self, from: u64, seq: u64) -> io::Result<bool> {
        let mut window = Window::new(self.file, self.eof);
        let mut at = from;
        while let Some(q) = window.find(at, &self.marker)? {
            at = q + 1;
            let head = window.get(q, HEADER)?;
            let newer = head.len() >= HEADER
                && Header::read(head, &self.marker).is_some_and(|h| h.seq > seq);
            if newer && self.record(q)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the bytes from `from` (where the record numbered `seq`
    /// ends) to the end are damage rather than nothing or a record still
    /// being written: reading forward shows a notice there.
    fn damaged_after(&self, from: u64, seq: u64) -> io::Result<bool> {
        if from >= self.eof {
            return Ok(false);
        }
        let mut scanner = Scanner::new(self.file, self.eof, self.marker, from).after_seq(seq);
        while let Some(event) = scanner.next_event()? {
            if !matches!(event, Event::Tail { torn: true, .. }) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The good record numbered `seq` that ends exactly at `end`.
    fn previous(&self, end: u64, seq: u64) -> io::Result<Option<Record>> {
        let lowest = FILE_HEADER.max(end.saturating_sub(self.span));
        if end < lowest + HEADER as u64 {
            return Ok(None);
        }
        // Candidates start below `hi`; most records are small, so look
        // close first.
        let mut hi = end - HEADER as u64 + 1;
        let mut size = 4096;
        let mut buf = Vec::new();
        let mut hits = Vec::new();
        while hi > lowest {
            let lo = lowest.max(hi.saturating_sub(size));
            size = (size * 2).min(CHUNK as u64);
            // Room for the header of a record starting just below `hi`.
            buf.resize((hi - lo) as usize + HEADER - 1, 0);
            self.file.read_exact_at(&mut buf, lo)?;
            hits.clear();
            let mut i = 0;
            while let Some(j) = memmem(&buf[i..], &self.marker) {
                if lo + (i + j) as u64 >= hi {
                    break;
                }
                hits.push(i + j);
                i += j + 1;
            }
            for &p in hits.iter().rev() {
                let start = lo + p as u64;
                let header = Header::read(&buf[p..], &self.marker).unwrap();
                if header.seq == seq && header.end(start) == Some(end) {
                    return self.record(start);
                }
            }
            hi = lo;
        }
        Ok(None)
    }

    /// The good record at `start`, if there is one.
    fn record(&self, start: u64) -> io::Result<Option<Record>> {
        if start + HEADER as u64 > self.eof {
            return Ok(None);
        }
        let mut head = [0u8; HEADER];
        self.file.read_exact_at(&mut head, start)?;
        let Some(header) = Header::read(&head, &self.marker) else {
            return Ok(None);
        };
        let Some(end) = header.end(start).filter(|&end| end <= self.eof) else {
            return Ok(None);
        };
        let mut record = vec![0u8; (end - start) as usize];
        self.file.read_exact_at(&mut record, start)?;
        Ok(format::decode(&header, &record).map(|decoded| Record {
            decoded,
            start,
            end,
        }))
    }
}
