//! The notices a session stores about its own files.

use super::entry::EntryBody;
use super::transcript::{Damage, TornTail};

fn notice(text: String) -> EntryBody {
    EntryBody::Notice {
        text,
        restore: None,
        restore_id: None,
    }
}

/// A torn tail was cut off when the transcript was opened.
pub fn torn_tail(torn: &TornTail) -> EntryBody {
    notice(format!(
        "the transcript had a torn tail after a crash: {} bytes at offset {} were cut off",
        torn.bytes, torn.offset
    ))
}

/// A damaged region was found, kept aside and skipped.
pub fn damage(damage: &Damage) -> EntryBody {
    notice(format!(
        "the transcript was damaged: {} bytes at offset {} could not be read and were kept in {}; the entries after them are intact",
        damage.bytes,
        damage.offset,
        damage.kept.display()
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
    fn a_cut_short_notice_names_its_bash_back() {
        let EntryBody::Notice { text, .. } = bash_cut_short(7) else {
            panic!("a notice");
        };
        assert_eq!(bash_of_cut_short(&text), Some(7));
        assert_eq!(bash_of_cut_short("bash 7 exited"), None);
        assert_eq!(bash_of_cut_short("run 7 was cut short: x"), None);
    }
}
