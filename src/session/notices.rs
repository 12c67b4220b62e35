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
