//! A job's latest small output records, kept beside its spool file so a
//! follower can send them to the worker inline (`FromKernel::Output`): a
//! keystroke's echo then reaches the worker in the frame that announces
//! it, and the worker reads no file. The spool stays the record of
//! output: a record is kept here only after it was appended there, and
//! only as exactly the bytes of that one record.

use std::collections::VecDeque;

use crate::protocol::kernel::InlineRecord;
use crate::protocol::zeros;
use crate::session::entry::Stream;
use crate::session::spool::RECORD_HEADER;

/// The largest record sent inline: a terminal's read is at most 4 KiB.
const INLINE_RECORD_BYTES: usize = 4096;

/// The most bytes kept (and sent in one message): a follower further
/// behind reads the spool file.
const INLINE_KEEP_BYTES: usize = 16 * 1024;

/// The records kept, contiguous in the spool, oldest first.
#[derive(Default)]
pub struct RecentOutput {
    records: VecDeque<Kept>,
    bytes: usize,
}

struct Kept {
    start: u64,
    record: InlineRecord,
}

impl RecentOutput {
    /// `data` of `stream` was appended to the spool, which now ends at
    /// `end`. Kept when it made one small record right after the last one
    /// kept; otherwise what was kept is no longer contiguous and goes.
    pub fn appended(&mut self, stream: Stream, data: &[u8], end: u64) {
        let one_record = data.len() <= INLINE_RECORD_BYTES && zeros::runs(data).is_empty();
        let start = end.checked_sub((RECORD_HEADER + data.len()) as u64);
        let (true, Some(start)) = (one_record && !data.is_empty(), start) else {
            self.clear();
            return;
        };
        if self
            .records
            .back()
            .is_some_and(|last| last.record.end != start)
        {
            self.clear();
        }
        self.bytes += data.len();
        self.records.push_back(Kept {
            start,
            record: InlineRecord {
                stream,
                end,
                data: data.to_vec(),
            },
        });
        while self.bytes > INLINE_KEEP_BYTES {
            if let Some(old) = self.records.pop_front() {
                self.bytes -= old.record.data.len();
            }
        }
    }

    /// Output could not be appended (or not as one record): nothing kept
    /// stands for what follows.
    pub fn clear(&mut self) {
        self.records.clear();
        self.bytes = 0;
    }

    /// The records from spool offset `from` to `to`, when every one of
    /// them is kept (else the follower reads the file).
    pub fn span(&self, from: u64, to: u64) -> Option<Vec<InlineRecord>> {
        if self.records.back()?.record.end != to {
            return None;
        }
        let first = self.records.iter().position(|kept| kept.start == from)?;
        Some(
            self.records
                .iter()
                .skip(first)
                .map(|kept| kept.record.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end_after(start: u64, data: &[u8]) -> u64 {
        start + (RECORD_HEADER + data.len()) as u64
    }

    #[test]
    fn contiguous_small_records_are_given_from_any_record_start() {
        let mut recent = RecentOutput::default();
        let a = end_after(0, b"a");
        recent.appended(Stream::Stdout, b"a", a);
        let b = end_after(a, b"bc");
        recent.appended(Stream::Stderr, b"bc", b);
        let both = recent.span(0, b).unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(
            (both[1].stream, both[1].end, &both[1].data[..]),
            (Stream::Stderr, b, &b"bc"[..])
        );
        assert_eq!(recent.span(a, b).unwrap().len(), 1);
        assert!(recent.span(1, b).is_none(), "not a record's start");
        assert!(recent.span(0, a).is_none(), "not the spool's end");
    }

    #[test]
    fn a_large_record_or_a_gap_sends_the_follower_to_the_file() {
        let mut recent = RecentOutput::default();
        let a = end_after(0, b"a");
        recent.appended(Stream::Stdout, b"a", a);
        let big = vec![b'x'; INLINE_RECORD_BYTES + 1];
        let after_big = end_after(a, &big);
        recent.appended(Stream::Stdout, &big, after_big);
        assert!(recent.span(0, after_big).is_none());
        let c = end_after(after_big, b"c");
        recent.appended(Stream::Stdout, b"c", c);
        assert!(recent.span(0, c).is_none(), "the large record is not kept");
        assert_eq!(recent.span(after_big, c).unwrap().len(), 1);
        // A record that does not start where the last kept one ended.
        recent.appended(Stream::Stdout, b"d", c + 100);
        assert!(recent.span(after_big, c + 100).is_none());
    }

    #[test]
    fn zeros_the_spool_keeps_as_a_length_are_not_sent_inline() {
        let mut recent = RecentOutput::default();
        let zeros = vec![0u8; zeros::BLOCK];
        recent.appended(Stream::Stdout, &zeros, end_after(0, &zeros));
        assert!(recent.span(0, end_after(0, &zeros)).is_none());
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut recent = RecentOutput::default();
        let chunk = vec![b'y'; 1000];
        let mut end = 0;
        for _ in 0..100 {
            end = end_after(end, &chunk);
            recent.appended(Stream::Stdout, &chunk, end);
        }
        assert!(recent.bytes <= INLINE_KEEP_BYTES);
        assert!(recent.span(0, end).is_none(), "the oldest are gone");
        let last = end - (RECORD_HEADER + chunk.len()) as u64;
        assert_eq!(recent.span(last, end).unwrap().len(), 1);
    }
}
