//! The notices a session stores about its own files.

use std::path::Path;

use super::entry::EntryBody;
use super::transcript::TornTail;

fn notice(text: String) -> EntryBody {
    EntryBody::Notice {
        text,
        restore: None,
        restore_id: None,
    }
}

/// A torn tail was cut off when the transcript was opened; its bytes
/// were kept in `kept`.
pub fn torn_tail(torn: &TornTail, kept: &Path) -> EntryBody {
    notice(format!(
        "the transcript ended in a torn tail (an unfinished record, from a crash or damage): \
         {} bytes at offset {} were cut off (the bytes are kept in {})",
        torn.bytes,
        torn.offset,
        kept.display()
    ))
}

/// A torn tail a reader of a resting session finds, which the session's
/// next start cuts off ([`torn_tail`] then says so).
pub fn torn_tail_at_rest(offset: u64, bytes: u64, kept: &Path) -> EntryBody {
    notice(format!(
        "the transcript ends in a torn tail (an unfinished record, from a crash or damage): \
         {bytes} bytes at offset {offset}; the session's next start cuts them off and keeps \
         them in {}",
        kept.display()
    ))
}

/// What a reader shows in the place of damaged bytes of the transcript:
/// where they are, how many, and where they were copied.
pub fn damaged_here(offset: u64, bytes: u64, kept: &Path) -> EntryBody {
    notice(format!(
        "{DAMAGED_HERE}{bytes} bytes at offset {offset} of the transcript could not be read: \
         the entries they held are lost (the bytes are kept in {}); the entries around them are intact",
        kept.display()
    ))
}

const DAMAGED_HERE: &str = "damaged transcript: ";

/// The damaged region a [`damaged_here`] notice names: (offset, bytes).
pub fn damaged_region(text: &str) -> Option<(u64, u64)> {
    let rest = text.strip_prefix(DAMAGED_HERE)?;
    let (bytes, rest) = rest.split_once(" bytes at offset ")?;
    let (offset, _) = rest.split_once(' ')?;
    Some((offset.parse().ok()?, bytes.parse().ok()?))
}

/// The transcript holds less than the session's own record of it says
/// (`lost`), so its numbering goes on from `next_input`.
pub fn history_lost(lost: &str, next_input: u64) -> EntryBody {
    notice(format!(
        "the transcript lost history: {lost}; what it held is gone, and input numbers go on \
         from {next_input} (numbers are never given twice)"
    ))
}

/// User bash `number` was cut short: its kernel is gone (or it never
/// reached one). Stored before its end, so a client following the bash
/// in the transcript reads why before it reads the end.
pub fn bash_cut_short(number: u64) -> EntryBody {
    notice(format!(
        "bash {number} was cut short: the kernel running it is gone, or it never \
         reached one; it does not run again"
    ))
}

/// The user bash a [`bash_cut_short`] notice names: it belongs to that
/// input's entries.
pub fn bash_of_cut_short(text: &str) -> Option<u64> {
    let rest = text.strip_prefix("bash ")?;
    let (number, rest) = rest.split_once(' ')?;
    rest.starts_with("was cut short: ")
        .then(|| number.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damage_notice_names_its_region_back() {
        let EntryBody::Notice { text, .. } =
            damaged_here(1234, 56, Path::new("/s/transcript.damaged-1234"))
        else {
            panic!("a notice");
        };
        assert_eq!(damaged_region(&text), Some((1234, 56)));
        assert_eq!(damaged_region("bash 7 exited"), None);
    }

    #[test]
    fn a_cut_short_notice_names_its_bash_back() {
        let EntryBody::Notice { text, .. } = bash_cut_short(7) else {
            panic!("a notice");
        };
        assert_eq!(bash_of_cut_short(&text), Some(7));
        assert_eq!(bash_of_cut_short("bash 7 exited"), None);
        assert_eq!(bash_of_cut_short("run 7 was cut short: x"), None);
    }
}
