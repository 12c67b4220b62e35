//! How far a session's input numbering went, kept apart from the
//! transcript: input numbers are never given twice, whatever happens to
//! that file (damaged, truncated, emptied, deleted).
//!
//! `sessions/<id>/numbers.json` holds a reservation: numbers below
//! `inputs_below` may have been given. It is written durably before the
//! first number at or past it is given, [`RESERVED`] numbers ahead, so
//! nothing acknowledged is ever numbered past what is on disk, and only one
//! input in [`RESERVED`] waits for that write: the others add no sync to
//! the transcript's own. When the transcript has lost history (it is
//! another file than the one the mark names, shorter than the mark
//! recorded, cut through a record, or damaged after its last entry that
//! numbers an input),
//! numbering goes on past the reservation. The decisions are pure; the
//! worker reads and writes the file, and only when the mark changes, so a
//! worker starting over an intact transcript writes nothing.
//!
//! What this cannot see: the same file cut exactly at a record boundary
//! (or put back as an older copy of itself) above the length the mark
//! last recorded. Seeing that would take a write of the mark with every
//! input; the length is recorded when the mark is written (at a new
//! reservation, one input in [`RESERVED`], and after a loss).

use serde::{Deserialize, Serialize};

/// How many numbers one write of the mark reserves.
pub const RESERVED: u64 = 64;

/// The session's record of its numbering and its transcript.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumberMark {
    /// Numbers below this may have been given.
    pub inputs_below: u64,
    /// Numbers below this are given (or passed over) for good: a worker
    /// gives none of them again, whatever the transcript holds.
    pub inputs_from: u64,
    /// The transcript's length when the mark was written (synced then): it
    /// only ever grows.
    pub transcript_len: u64,
    /// The transcript file's own sync marker: a file made afresh (after
    /// the old one was removed or emptied) has another.
    #[serde(default)]
    pub transcript_marker: Option<[u8; 8]>,
    /// The damaged regions of the transcript already accounted for (their
    /// offsets).
    #[serde(default)]
    pub damage_seen: Vec<u64>,
}

/// What opening the transcript found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The next input number the transcript's entries call for.
    pub next_input: u64,
    /// Its length once opened.
    pub transcript_len: u64,
    /// Its sync marker.
    pub transcript_marker: [u8; 8],
    /// The offsets of the damaged regions read.
    pub damaged: Vec<u64>,
    /// Where the last entry read that gives an input its number ends:
    /// numbers rise through the file, so damage before it held only
    /// smaller ones.
    pub numbered_until: u64,
    /// Whether an unfinished last record was cut off: a crash's (which
    /// may have held a user bash whose number its client was told), or a
    /// cut through the file.
    pub torn: bool,
}

/// Where numbering goes on, and why it jumps when it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The next input's number.
    pub next_input: u64,
    /// What the transcript lost, for one notice (none when it lost nothing
    /// or its damage is shown where it is).
    pub lost: Option<String>,
    /// The mark to write, durably, before any input is given.
    pub mark: NumberMark,
}

/// Where numbering goes on after an open that found `opened`, given the
/// session's `mark` (none for a session that never wrote one).
pub fn settle(mark: Option<&NumberMark>, opened: &Opened) -> Settled {
    let old = mark.cloned().unwrap_or_default();
    let replaced = old
        .transcript_marker
        .is_some_and(|marker| marker != opened.transcript_marker);
    let shorter = opened.transcript_len < old.transcript_len || replaced;
    // Damage before the last numbering entry held only smaller numbers.
    let new_damage: Vec<u64> = opened
        .damaged
        .iter()
        .copied()
        .filter(|offset| *offset >= opened.numbered_until && !old.damage_seen.contains(offset))
        .collect();
    let jumped = shorter || opened.torn || !new_damage.is_empty();
    let mut next_input = opened.next_input.max(old.inputs_from).max(1);
    if jumped {
        next_input = next_input.max(old.inputs_below);
    }
    let lost = shorter.then(|| lost_text(replaced, opened.transcript_len, old.transcript_len));
    // Those offsets were the old file's.
    let mut damage_seen = if shorter { Vec::new() } else { old.damage_seen };
    damage_seen.extend(new_damage);
    // The mark changes only when it must, so a worker that starts over an
    // intact transcript writes nothing.
    let mark = NumberMark {
        inputs_below: match next_input >= old.inputs_below {
            true => next_input + RESERVED,
            false => old.inputs_below,
        },
        inputs_from: match jumped {
            true => next_input,
            false => old.inputs_from,
        },
        transcript_len: match shorter || mark.is_none() {
            true => opened.transcript_len,
            false => old.transcript_len,
        },
        transcript_marker: Some(opened.transcript_marker),
        damage_seen,
    };
    Settled {
        next_input,
        lost,
        mark,
    }
}

/// What a transcript made afresh (`replaced`), or holding `len` bytes of
/// the `held` it held, lost.
fn lost_text(replaced: bool, len: u64, held: u64) -> String {
    match replaced {
        true => format!(
            "the transcript was made afresh ({len} bytes): the one it replaced was removed or \
             emptied"
        ),
        false => format!(
            "the transcript holds {len} bytes, less than the {held} bytes it held (it was truncated)"
        ),
    }
}

/// What the transcript of a resting session lost since its worker last
/// wrote `mark`, as a reader finds it before a worker opens it again:
/// `found` is the file's length and sync marker (none when it is missing,
/// or too short to hold a header). The text of the notice the next worker
/// stores, and the number input goes on from: `None` when nothing is
/// lost (or the mark records no file, as a mark of an earlier build).
pub fn lost_at_rest(mark: &NumberMark, found: Option<(u64, [u8; 8])>) -> Option<(String, u64)> {
    let recorded = mark.transcript_marker?;
    let next_input = mark.inputs_below.max(1);
    let lost = match found {
        None => "the transcript is missing or emptied: it was removed, or cut to less than its \
                 header"
            .to_string(),
        Some((len, marker)) if marker != recorded => lost_text(true, len, mark.transcript_len),
        Some((len, _)) if len < mark.transcript_len => lost_text(false, len, mark.transcript_len),
        Some(_) => return None,
    };
    Some((lost, next_input))
}

/// The mark to write before giving input number `number`, if it is past
/// the reservation; `transcript_len` is the transcript's length, synced.
pub fn reserve(mark: &NumberMark, number: u64, transcript_len: u64) -> Option<NumberMark> {
    (number >= mark.inputs_below).then(|| NumberMark {
        inputs_below: number + RESERVED,
        inputs_from: mark.inputs_from,
        transcript_len: transcript_len.max(mark.transcript_len),
        transcript_marker: mark.transcript_marker,
        damage_seen: mark.damage_seen.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers below 70 reserved, over a transcript of 9000 bytes.
    fn seventy_reserved() -> NumberMark {
        NumberMark {
            inputs_below: 70,
            inputs_from: 3,
            transcript_len: 9_000,
            transcript_marker: Some(*b"marker!!"),
            damage_seen: vec![],
        }
    }

    fn opened(next_input: u64, transcript_len: u64, damaged: &[u64]) -> Opened {
        Opened {
            next_input,
            transcript_len,
            transcript_marker: *b"marker!!",
            damaged: damaged.to_vec(),
            numbered_until: 100,
            torn: false,
        }
    }

    #[test]
    fn an_intact_transcript_numbers_on_from_its_own_entries() {
        let first = settle(None, &opened(1, 16, &[]));
        assert_eq!((first.next_input, first.lost), (1, None));
        assert_eq!(first.mark.inputs_below, 1 + RESERVED);
        let mark = NumberMark {
            transcript_len: 5_000,
            ..first.mark
        };
        let again = settle(Some(&mark), &opened(9, 5_000, &[]));
        assert_eq!((again.next_input, again.lost), (9, None));
    }

    #[test]
    fn a_lost_history_numbers_on_past_every_number_that_may_have_been_given() {
        let mark = seventy_reserved();
        // Emptied or removed: the file is a fresh header.
        let emptied = settle(Some(&mark), &opened(1, 16, &[]));
        assert_eq!(emptied.next_input, 70);
        assert!(emptied
            .lost
            .unwrap()
            .contains("16 bytes, less than the 9000"));
        // And the next open, with nothing new, goes on from there.
        let again = settle(Some(&emptied.mark), &opened(1, 16, &[]));
        assert_eq!((again.next_input, again.lost), (70, None));
        // A file made afresh since the mark was written, however long.
        let mut afresh = opened(1, 20_000, &[]);
        afresh.transcript_marker = *b"another!";
        let replaced = settle(Some(&mark), &afresh);
        assert_eq!(replaced.next_input, 70);
        assert!(replaced.lost.unwrap().contains("made afresh"));
        // New damage jumps too, once, without a notice of its own (readers
        // show it where it is).
        let damaged = settle(Some(&mark), &opened(5, 9_000, &[400]));
        assert_eq!((damaged.next_input, damaged.lost), (70, None));
        // A cut through a record may have taken inputs.
        let mut cut = opened(5, 9_000, &[]);
        cut.torn = true;
        assert_eq!(settle(Some(&mark), &cut).next_input, 70);
        // Damage before the last numbered entry held smaller numbers.
        let before = settle(Some(&mark), &opened(5, 9_000, &[40]));
        assert_eq!(before.next_input, 5);
        let seen = settle(Some(&damaged.mark), &opened(5, 9_000, &[400]));
        assert_eq!(seen.next_input, 70);
        assert_eq!(seen.mark.inputs_below, damaged.mark.inputs_below);
    }

    #[test]
    fn a_worker_that_starts_over_an_intact_transcript_changes_nothing() {
        let mark = settle(None, &opened(1, 16, &[])).mark;
        let again = settle(Some(&mark), &opened(7, 5_000, &[]));
        assert_eq!((again.next_input, &again.mark), (7, &mark));
        // Damage before the last numbered entry changes nothing either.
        let again = settle(Some(&mark), &opened(7, 5_000, &[40]));
        assert_eq!((again.next_input, &again.mark), (7, &mark));
    }

    #[test]
    fn a_reader_at_rest_sees_what_the_next_worker_will_say_was_lost() {
        let mark = seventy_reserved();
        assert_eq!(lost_at_rest(&mark, Some((9_000, *b"marker!!"))), None);
        assert_eq!(lost_at_rest(&mark, Some((12_000, *b"marker!!"))), None);
        let (missing, next) = lost_at_rest(&mark, None).unwrap();
        assert!(missing.contains("missing or emptied"), "{missing}");
        assert_eq!(next, 70);
        let (afresh, _) = lost_at_rest(&mark, Some((16, *b"another!"))).unwrap();
        // The words the worker stores once it opens the file.
        let mut reopened = opened(1, 16, &[]);
        reopened.transcript_marker = *b"another!";
        assert_eq!(Some(afresh), settle(Some(&mark), &reopened).lost);
        let (cut, _) = lost_at_rest(&mark, Some((4_000, *b"marker!!"))).unwrap();
        assert!(cut.contains("4000 bytes, less than the 9000"), "{cut}");
        // A mark of an earlier build names no file: nothing to compare.
        let earlier = NumberMark {
            transcript_marker: None,
            ..mark
        };
        assert_eq!(lost_at_rest(&earlier, None), None);
    }

    #[test]
    fn a_number_past_the_reservation_is_reserved_first() {
        let mark = settle(None, &opened(1, 16, &[])).mark;
        assert_eq!(reserve(&mark, RESERVED, 100), None);
        let renewed = reserve(&mark, RESERVED + 1, 100).unwrap();
        assert_eq!(renewed.inputs_below, 2 * RESERVED + 1);
        assert_eq!(renewed.transcript_len, 100);
    }
}
