//! Unit names for sessions. An instance name is escaped by
//! `libsystemd::unit::escape_name`, exactly as `systemd-escape` does it
//! (systemd's `unit_name_escape`): `/` becomes `-`; ASCII letters,
//! digits, `:`, `_` and `.` stay (except a leading `.`); every other byte
//! becomes `\xNN` with lowercase hex. The crate has no unescaping: that
//! stays here, to read a unit's session back.

use libsystemd::unit::escape_name;

/// The glob that matches every worker unit.
pub const WORKER_UNIT_PATTERN: &str = "eukhe@*.service";

/// Every kernel unit, as a pattern for the manager's unit listing.
pub const KERNEL_UNIT_PATTERN: &str = "eukhe-kernel@*.service";

/// The text `escape_name` made `escaped` from, if it is well formed.
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
    format!("eukhe@{}.service", escape_name(session))
}

/// The kernel unit of `session`: `eukhe-kernel@<escaped session>.service`.
pub fn kernel_unit(session: &str) -> String {
    format!("eukhe-kernel@{}.service", escape_name(session))
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

    /// What the hand-written escaper this module had before gave, and read
    /// back: the crate's escaping must give the same names both ways.
    const ESCAPED_BEFORE: [(&str, &str); 20] = [
        ("1a2b3c4d", "1a2b3c4d"),
        ("a/b-c", "a-b\\x2dc"),
        (".hidden.x", "\\x2ehidden.x"),
        ("a\\b:c_d", "a\\x5cb:c_d"),
        ("Hallöchen, Meister", "Hall\\xc3\\xb6chen\\x2c\\x20Meister"),
        ("tab\there", "tab\\x09here"),
        ("\\x41", "\\x5cx41"),
        ("", ""),
        ("/", "-"),
        (".", "\\x2e"),
        ("..", "\\x2e."),
        ("x.", "x."),
        ("-", "\\x2d"),
        ("--a", "\\x2d\\x2da"),
        ("a b", "a\\x20b"),
        ("ö€", "\\xc3\\xb6\\xe2\\x82\\xac"),
        ("\u{1}", "\\x01"),
        ("~%@", "\\x7e\\x25\\x40"),
        ("ns:id_1.2", "ns:id_1.2"),
        ("A-Z/0.9", "A\\x2dZ-0.9"),
    ];

    #[test]
    fn the_crate_escapes_and_unescapes_as_the_hand_written_code_did() {
        for (text, escaped) in ESCAPED_BEFORE {
            assert_eq!(escape_name(text), escaped, "escaping {text:?}");
            assert_eq!(systemd_unescape(escaped).as_deref(), Some(text));
        }
    }

    #[test]
    fn escapes_like_systemd_escape_documents() {
        // The examples of systemd-escape(1) and unit_name_escape's rules.
        assert_eq!(escape_name("1a2b3c4d"), "1a2b3c4d");
        assert_eq!(
            escape_name("Hallöchen, Meister"),
            "Hall\\xc3\\xb6chen\\x2c\\x20Meister"
        );
        assert_eq!(escape_name("a/b-c"), "a-b\\x2dc");
        assert_eq!(escape_name(".hidden.x"), "\\x2ehidden.x");
        assert_eq!(escape_name("a\\b:c_d"), "a\\x5cb:c_d");
    }

    #[test]
    fn unescape_inverts_escape_and_rejects_malformed_names() {
        for text in ["1a2b3c4d", "a/b-c", ".x", "Hallöchen", "tab\there", "\\x41"] {
            assert_eq!(systemd_unescape(&escape_name(text)).as_deref(), Some(text));
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
    fn agrees_with_the_real_escape_name() {
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
            assert_eq!(escape_name(text), expected, "escaping {text:?}");
        }
    }
}
