//! The process backend's busy journal and the journald trust rule on
//! arbitrary input: never a panic; a trusted record names its own unit.
#![no_main]

use eukhe::host::busy_journal::{latest_in_text, trusted_record};
use eukhe::host::escape::worker_unit;
use eukhe::host::sd_journal::JournalEntry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = latest_in_text(&text);
    let mut entry = JournalEntry::default();
    for (i, part) in text.split('\n').take(8).enumerate() {
        let name = ["EUKHE_SESSION", "EUKHE_BUSY", "_UID", "_SYSTEMD_USER_UNIT"][i % 4];
        entry.fields.insert(name.to_string(), part.to_string());
    }
    if let Some((session, _)) = trusted_record(&entry, 1000) {
        assert_eq!(
            entry.get("_SYSTEMD_USER_UNIT"),
            Some(worker_unit(&session).as_str())
        );
        assert_eq!(entry.get("_UID"), Some("1000"));
    }
});
