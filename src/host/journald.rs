//! Writing structured entries to journald through its native protocol: one
//! datagram of `KEY=value` fields to `/run/systemd/journal/socket`.
//! journald adds the trusted fields (`_UID`, `_SYSTEMD_USER_UNIT`, ...)
//! itself, from the sender's credentials and cgroup; a sender cannot set
//! them.

use super::HostError;
use std::os::unix::net::UnixDatagram;

/// journald's native-protocol socket.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Encode `fields` in the native protocol. Names must be journal field
/// names (uppercase letters, digits, `_`, not starting with `_`); a value
/// with a newline is length-prefixed.
pub fn encode(fields: &[(&str, &str)]) -> Result<Vec<u8>, HostError> {
    let mut payload = Vec::new();
    for (name, value) in fields {
        let well_formed = !name.is_empty()
            && !name.starts_with('_')
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !well_formed {
            return Err(HostError::Refused(format!(
                "{name:?} is not a journal field name"
            )));
        }
        payload.extend_from_slice(name.as_bytes());
        if value.contains('\n') {
            payload.push(b'\n');
            payload.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            payload.push(b'=');
        }
        payload.extend_from_slice(value.as_bytes());
        payload.push(b'\n');
    }
    Ok(payload)
}

/// Send one entry to journald.
pub fn send(fields: &[(&str, &str)]) -> Result<(), HostError> {
    let payload = encode(fields)?;
    let socket =
        UnixDatagram::unbound().map_err(|e| HostError::io("journald: cannot open a socket", e))?;
    socket
        .send_to(&payload, JOURNAL_SOCKET)
        .map(|_| ())
        .map_err(|e| HostError::io(format!("journald at {JOURNAL_SOCKET}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_plain_and_multiline_values() {
        let payload = encode(&[("MESSAGE", "hi"), ("EUKHE_X", "a\nb")]).unwrap();
        let mut expected = b"MESSAGE=hi\nEUKHE_X\n".to_vec();
        expected.extend_from_slice(&3u64.to_le_bytes());
        expected.extend_from_slice(b"a\nb\n");
        assert_eq!(payload, expected);
    }

    #[test]
    fn refuses_names_journald_would_drop_or_trust() {
        assert!(encode(&[("_UID", "0")])
            .unwrap_err()
            .to_string()
            .contains("_UID"));
        assert!(encode(&[("message", "x")]).is_err());
        assert!(encode(&[("", "x")]).is_err());
        assert!(encode(&[("A-B", "x")]).is_err());
    }
}
