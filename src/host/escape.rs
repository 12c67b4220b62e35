//! Unit names for sessions. An instance name is escaped exactly as
//! `systemd-escape` does it (systemd's `unit_name_escape`): `/` becomes
//! `-`; ASCII letters, digits, `:`, `_` and `.` stay (except a leading
//! `.`); every other byte becomes `\xNN` with lowercase hex.

/// The glob that matches every worker unit.
pub const WORKER_UNIT_PATTERN: &str = "eukhe@*.service";

/// Every kernel unit, as a pattern for the manager's unit listing.
pub const KERNEL_UNIT_PATTERN: &str = "eukhe-kernel@*.service";

/// `text` escaped as `systemd-escape` escapes it.
pub fn systemd_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for (index, &byte) in text.as_bytes().iter().enumerate() {
        let kept = byte.is_ascii_alphanumeric()
            || byte == b':'
            || byte == b'_'
            || (byte == b'.' && index > 0);
        if byte == b'/' {
            escaped.push('-');
        } else if kept {
            escaped.push(byte as char);
        } else {
            escaped.push_str(&format!("\\x{byte:02x}"));
        }
    }
    escaped
}

/// The text `systemd_escape` made `escaped` from, if it is well formed.
pub fn systemd_unescape(escaped: &str) -> Option<String> {
    let bytes = escaped.as_bytes();
    let mut text = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'-' => {
                text.push(b'/');
                index += 1;
            }
            b'\\' => {
                let hex = escaped.get(index + 2..index + 4)?;
                if bytes.get(index + 1) != Some(&b'x') {
                    return None;
                }
                text.push(u8::from_str_radix(hex, 16).ok()?);
                index += 4;
            }
            byte => {
                text.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8(text).ok()
}

/// The worker unit of `session`: `eukhe@<escaped session>.service`.
pub fn worker_unit(session: &str) -> String {
    format!("eukhe@{}.service", systemd_escape(session))
}

/// The kernel unit of `session`: `eukhe-kernel@<escaped session>.service`.
pub fn kernel_unit(session: &str) -> String {
    format!("eukhe-kernel@{}.service", systemd_escape(session))
}

/// The session a worker unit serves, if `unit` is one.
pub fn session_of_unit(unit: &str) -> Option<String> {
    let instance = unit.strip_prefix("eukhe@")?.strip_suffix(".service")?;
    (!instance.is_empty())
        .then(|| systemd_unescape(instance))
        .flatten()
}

/// The session a kernel unit serves, if `unit` is one.
pub fn session_of_kernel_unit(unit: &str) -> Option<String> {
    let instance = unit
        .strip_prefix("eukhe-kernel@")?
        .strip_suffix(".service")?;
    (!instance.is_empty())
        .then(|| systemd_unescape(instance))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_systemd_escape_documents() {
        // The examples of systemd-escape(1) and unit_name_escape's rules.
        assert_eq!(systemd_escape("1a2b3c4d"), "1a2b3c4d");
        assert_eq!(
            systemd_escape("Hallöchen, Meister"),
            "Hall\\xc3\\xb6chen\\x2c\\x20Meister"
        );
        assert_eq!(systemd_escape("a/b-c"), "a-b\\x2dc");
        assert_eq!(systemd_escape(".hidden.x"), "\\x2ehidden.x");
        assert_eq!(systemd_escape("a\\b:c_d"), "a\\x5cb:c_d");
    }

    #[test]
    fn unescape_inverts_escape_and_rejects_malformed_names() {
        for text in ["1a2b3c4d", "a/b-c", ".x", "Hallöchen", "tab\there", "\\x41"] {
            assert_eq!(
                systemd_unescape(&systemd_escape(text)).as_deref(),
                Some(text)
            );
        }
        assert_eq!(systemd_unescape("\\x4"), None);
        assert_eq!(systemd_unescape("\\y41"), None);
        assert_eq!(systemd_unescape("\\xzz"), None);
        assert_eq!(systemd_unescape("\\xff"), None, "not UTF-8");
    }

    #[test]
    fn worker_units_name_their_session() {
        assert_eq!(worker_unit("1a2b3c4d"), "eukhe@1a2b3c4d.service");
        assert_eq!(
            session_of_unit("eukhe@1a2b3c4d.service").as_deref(),
            Some("1a2b3c4d")
        );
        assert_eq!(
            session_of_unit(&worker_unit("a-b/c")).as_deref(),
            Some("a-b/c")
        );
        assert_eq!(session_of_unit("eukhe.service"), None);
        assert_eq!(session_of_unit("eukhe@.service"), None);
        assert_eq!(session_of_unit("other@x.service"), None);
    }

    #[test]
    fn kernel_units_name_their_session_and_are_not_worker_units() {
        assert_eq!(kernel_unit("1a2b3c4d"), "eukhe-kernel@1a2b3c4d.service");
        assert_eq!(kernel_unit("a-b/c"), "eukhe-kernel@a\\x2db-c.service");
        assert_ne!(kernel_unit("1a2b3c4d"), worker_unit("1a2b3c4d"));
        assert_eq!(session_of_unit(&kernel_unit("1a2b3c4d")), None);
        assert_eq!(
            session_of_kernel_unit(&kernel_unit("a-b/c")).as_deref(),
            Some("a-b/c")
        );
        assert_eq!(session_of_kernel_unit(&worker_unit("1a2b3c4d")), None);
        assert_eq!(session_of_kernel_unit("eukhe-kernel@.service"), None);
    }

    /// The real `systemd-escape` agrees on random text, where it is installed.
    #[test]
    fn agrees_with_the_real_systemd_escape() {
        let tool = "/usr/bin/systemd-escape";
        if !std::path::Path::new(tool).exists() {
            crate::skip::skip_unless_ci(&format!("{tool} is not installed; not compared"));
            return;
        }
        let alphabet: Vec<char> = "aZ09:_.-/\\ \t~%@ö€\u{1}".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut samples = Vec::new();
        for _ in 0..200 {
            let len = 1 + (seed % 12) as usize;
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            samples.push(text);
        }
        let out = std::process::Command::new(tool)
            .arg("--")
            .args(&samples)
            .output()
            .expect("run systemd-escape");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8(out.stdout).unwrap();
        let theirs: Vec<&str> = theirs.split_whitespace().collect();
        assert_eq!(theirs.len(), samples.len());
        for (text, expected) in samples.iter().zip(theirs) {
            assert_eq!(systemd_escape(text), expected, "escaping {text:?}");
        }
    }
}
