//! The worker's side of `session::numbers`: the mark read and settled as
//! the transcript opens, and renewed before a number past it is given.

use super::state::Worker;
use super::WorkerError;
use crate::session::notices;
use crate::session::numbers::{self, NumberMark};
use crate::session::store::{read_json, write_json};

impl Worker {
    /// Settle where input numbering goes on, from the session's mark and
    /// what opening the transcript found (`damaged`: the regions read,
    /// and where its last numbering entry ends; `torn`: whether a torn
    /// tail was cut), and
    /// write the mark before any input is given; one notice when the
    /// transcript lost history.
    pub(super) fn settle_numbers(
        &mut self,
        (damaged, numbered_until): (&[(u64, u64)], u64),
        torn: bool,
    ) -> Result<(), WorkerError> {
        let path = self.files.numbers();
        // An unreadable mark is no mark: the transcript's own numbers stand.
        let mark: Option<NumberMark> = read_json(&path).unwrap_or_else(|e| {
            tracing::warn!(
                "{}: {e}; numbering goes on from the transcript",
                path.display()
            );
            None
        });
        let opened = numbers::Opened {
            next_input: self.core.next_input(),
            transcript_len: self.store.transcript.end_offset(),
            transcript_marker: self.store.transcript.marker(),
            damaged: damaged.iter().map(|(offset, _)| *offset).collect(),
            numbered_until,
            torn,
        };
        let settled = numbers::settle(mark.as_ref(), &opened);
        self.core.number_inputs_from(settled.next_input);
        if mark.as_ref() != Some(&settled.mark) {
            // What the mark records must be on disk before it is recorded.
            self.store.transcript.sync_written()?;
            write_json(&path, &settled.mark)?;
        }
        self.store.numbers = settled.mark;
        if let Some(lost) = settled.lost {
            tracing::warn!("{lost}");
            self.append(notices::history_lost(&lost, settled.next_input))?;
        }
        Ok(())
    }

    /// Before input number `number` is given: renew the mark, durably,
    /// when the number is past it (one input in `numbers::RESERVED`).
    pub fn reserve_input(&mut self, number: u64) -> Result<(), WorkerError> {
        let Some(mark) = numbers::reserve(
            &self.store.numbers,
            number,
            self.store.transcript.end_offset(),
        ) else {
            return Ok(());
        };
        self.store.transcript.sync_written()?;
        write_json(&self.files.numbers(), &mark)?;
        self.store.numbers = mark;
        Ok(())
    }
}
