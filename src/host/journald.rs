//! Writing structured entries to journald, through
//! `libsystemd::logging::journal_send` (the native protocol: one datagram
//! of fields to `/run/systemd/journal/socket`, or a sealed memfd when the
//! entry is too large for one). journald adds the trusted fields (`_UID`,
//! `_SYSTEMD_USER_UNIT`, ...) itself, from the sender's credentials and
//! cgroup; a sender cannot set them.

use super::HostError;
use libsystemd::logging::{journal_send, Priority};

/// Whether journald keeps a field called `name`: uppercase letters,
/// digits and `_`, not starting with `_` (trusted) or a digit, at most 64
/// bytes. The crate drops any other field without a word; eukhe refuses
/// it instead, so a record never loses a field it is read back by.
pub fn is_field_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Send one informational entry to journald: `message` and `fields`.
pub fn send(message: &str, fields: &[(&str, &str)]) -> Result<(), HostError> {
    if let Some((name, _)) = fields.iter().find(|(name, _)| !is_field_name(name)) {
        return Err(HostError::FieldName(name.to_string()));
    }
    journal_send(Priority::Info, message, fields.iter().copied()).map_err(HostError::Journald)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_names_journald_would_drop_or_trust() {
        assert!(is_field_name("EUKHE_SESSION"));
        assert!(is_field_name("MESSAGE_ID"));
        for name in ["_UID", "message", "", "A-B", "1A", &"A".repeat(65)] {
            assert!(!is_field_name(name), "{name:?}");
        }
        let refused = send("x", &[("_UID", "0")]).unwrap_err();
        assert_eq!(refused.to_string(), "\"_UID\" is not a journal field name");
    }
}
