//! A grep that reads only the blocks of an output where a match may be:
//! a block is read when its filter may hold one of the regex's needed
//! literals (ending in it, begun up to `NEEDLE_MAX_BYTES` before), when it
//! has no filter, or to finish a line (and its context) begun in a block
//! read. Reading resumes at an index entry far enough back that the lines
//! of a possible match and its context before are read whole; a line cut
//! by the resumption is not looked at. The numbering comes from the
//! index's newline counts, so the answer is the one a whole read gives.

use crate::protocol::entry::Stream;

use super::filter::Filter;
use super::index::Mark;
use super::needles::NEEDLE_MAX_BYTES;
use super::records::{Records, RecordsError};
use super::select::{Flow, Grep, Place, Select};

/// Where a grep of one stream (or both) reads: the blocks between the
/// output's start, the index's entries and the output's end.
pub struct Blocks<'a> {
    /// The output's start, then the index's entries.
    pub marks: &'a [Mark],
    /// The end of the last block: the output's records' end.
    pub end: u64,
    /// The stream read, or both.
    pub stream: Option<Stream>,
}

impl Blocks<'_> {
    fn counts(&self, block: usize) -> super::index::Counts {
        self.marks[block].of(self.stream)
    }

    fn end_of(&self, block: usize) -> u64 {
        self.marks.get(block + 1).map_or(self.end, |m| m.offset)
    }

    /// The first block a needed literal ending in `block` can begin in.
    fn reach_back(&self, block: usize) -> usize {
        let at = self.counts(block).bytes;
        let mut first = block;
        while first > 0 && self.counts(first).bytes + NEEDLE_MAX_BYTES as u64 > at {
            first -= 1;
        }
        first
    }

    /// The block to read from so that every line of `block` and the
    /// `context` lines before it are read whole, and where it starts:
    /// the place, and whether it is inside a line.
    fn resume_for(&self, block: usize, context: u64) -> (usize, Place, bool) {
        let first_line = self.counts(block).newlines + 1;
        let mut from = block;
        loop {
            let counts = self.counts(from);
            let in_line = counts.bytes > 0 && !counts.ends_line;
            let first_whole = counts.newlines + 1 + u64::from(in_line);
            if from == 0 || first_whole + context <= first_line {
                let place = Place {
                    offset: counts.bytes,
                    line: counts.newlines + 1,
                };
                return (from, place, in_line);
            }
            from -= 1;
        }
    }
}

/// `grep` fed the blocks of `blocks` that may hold a match of `needles`
/// (`context` lines around each): what it collected, and the blocks left
/// unread.
pub fn grep(
    records: &mut Records,
    blocks: &Blocks,
    filter: &Filter,
    needles: &[Vec<u8>],
    (mut grep, context): (Grep, u64),
) -> Result<(super::select::Collected, usize), RecordsError> {
    let mut fed_to = 0;
    // The line a read block left open: it is read to its end.
    let mut owed = None;
    let mut unread = 0;
    let mut last_read = None;
    for block in 0..blocks.marks.len() {
        let may_hold = filter.may_hold(blocks.reach_back(block), block, needles);
        let owes = grep.owes_context() || owed.is_some_and(|line| grep.open_line() == Some(line));
        if !may_hold && !owes {
            let has_bytes = blocks.counts(block).bytes < blocks.counts_after(block).bytes;
            if has_bytes && grep.stop_at_max() {
                break;
            }
            unread += 1;
            continue;
        }
        if may_hold {
            let (from, place, in_line) = blocks.resume_for(block, context);
            if blocks.marks[from].offset > fed_to {
                grep.resync(place, in_line);
                fed_to = blocks.marks[from].offset;
            }
        }
        let mut flow = Flow::More;
        fed_to = records.each_to(fed_to, blocks.end_of(block), |s, data, _| {
            if blocks.stream.is_some_and(|only| only != s) {
                return Flow::More;
            }
            flow = grep.feed(data);
            let owes = grep.owes_context() || owed.is_some_and(|l| grep.open_line() == Some(l));
            // A block read only to finish a line is read only so far.
            match may_hold || owes {
                true => flow,
                false => Flow::Enough,
            }
        })?;
        last_read = Some(block);
        if flow == Flow::Enough {
            return Ok((Box::new(grep).finish(), unread));
        }
        if may_hold {
            owed = grep.open_line();
        }
    }
    if last_read.is_none_or(|block| block + 1 < blocks.marks.len()) {
        grep.skip_rest();
    }
    Ok((Box::new(grep).finish(), unread))
}

impl Blocks<'_> {
    /// The counts at the end of `block`; the last block's end is not
    /// counted: taken as holding bytes.
    fn counts_after(&self, block: usize) -> super::index::Counts {
        match self.marks.get(block + 1) {
            Some(mark) => mark.of(self.stream),
            None => super::index::Counts {
                bytes: u64::MAX,
                ..Default::default()
            },
        }
    }
}

#[cfg(test)]
#[path = "skim_tests.rs"]
mod tests;
