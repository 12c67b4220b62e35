//! The detach key of a terminal run (`detach_key` in the file, `--detach-key`
//! on the command line): the key or two keys that leave a program's terminal
//! without the program seeing them.
//!
//! Its first key is a control key other than Escape: one byte, so nothing a
//! person types is held back waiting for the next key (a key starting with
//! Escape would delay every Escape pressed in vim or less).

/// The key a terminal run detaches with when none is configured: `C-\`
/// (dtach's and abduco's). Ctrl-A (screen), Ctrl-B (tmux), Ctrl-O (zellij)
/// and Ctrl-Space (shpool) are readline's, emacs's and vim's own keys;
/// Ctrl-\ is unbound in readline and less, starts only rare two-key commands
/// in vim (`C-\ C-n`) and emacs (the input method), and in a cooked
/// terminal only sends SIGQUIT.
pub const DEFAULT_DETACH_KEY: &str = "C-\\";

/// What `detach_key` takes, as a refusal says it.
pub const DETACH_KEY_ALLOWED: &str =
    "a control key (C-a to C-z except C-[, or C-@, C-\\, C-], C-^, C-_, C-Space), \
     alone or followed by one more key (\"C-a d\"), or \"none\"";

/// A detach key: the bytes a terminal sends for it, or none at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetachKey {
    /// Detaching by key is off: every byte reaches the program.
    None,
    /// The first key (one control byte), and the second key's bytes if the
    /// key is a pair ("C-a d"); empty when the first key alone detaches.
    Keys {
        /// The control byte that starts the key.
        first: u8,
        /// The second key's bytes (empty: one key).
        second: Vec<u8>,
    },
}

impl Default for DetachKey {
    fn default() -> Self {
        DetachKey::Keys {
            first: FS,
            second: Vec::new(),
        }
    }
}

/// Ctrl-\ (file separator).
const FS: u8 = 0x1c;
/// Escape, which no detach key may start with.
const ESC: u8 = 0x1b;

impl DetachKey {
    /// The key from its text (`"C-\\"`, `"C-a d"`, `"none"`); the error is
    /// what the key takes.
    pub fn parse(text: &str) -> Result<DetachKey, String> {
        let refused = || format!("{text:?}: expected {DETACH_KEY_ALLOWED}");
        if text == "none" {
            return Ok(DetachKey::None);
        }
        let mut names = text.split(' ').filter(|name| !name.is_empty());
        let first = names
            .next()
            .and_then(control_key)
            .filter(|&byte| byte != ESC)
            .ok_or_else(refused)?;
        let second = match names.next() {
            None => Vec::new(),
            Some(name) => second_key(name).ok_or_else(refused)?,
        };
        if names.next().is_some() || second == [first] {
            return Err(refused());
        }
        Ok(DetachKey::Keys { first, second })
    }

    /// The bytes that detach, in order (empty when detaching is off).
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            DetachKey::None => Vec::new(),
            DetachKey::Keys { first, second } => {
                let mut bytes = vec![*first];
                bytes.extend_from_slice(second);
                bytes
            }
        }
    }
}

impl std::str::FromStr for DetachKey {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DetachKey::parse(text)
    }
}

/// The byte a terminal sends for a control key: `C-a`..`C-z` (either case),
/// `C-@`, `C-[`, `C-\`, `C-]`, `C-^`, `C-_`, `C-Space`.
pub fn control_key(name: &str) -> Option<u8> {
    let rest = name.strip_prefix("C-")?;
    if rest == "Space" {
        return Some(0);
    }
    let &[byte] = rest.as_bytes() else {
        return None;
    };
    match byte.to_ascii_uppercase() {
        upper @ b'@'..=b'_' => Some(upper & 0x1f),
        _ => None,
    }
}

/// The second key of a pair: a control key, or one printable ASCII character.
fn second_key(name: &str) -> Option<Vec<u8>> {
    if let Some(byte) = control_key(name) {
        return Some(vec![byte]);
    }
    match name.as_bytes() {
        &[byte] if byte.is_ascii_graphic() => Some(vec![byte]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_keys_are_the_bytes_a_terminal_sends() {
        for (name, byte) in [
            ("C-a", 0x01),
            ("C-A", 0x01),
            ("C-z", 0x1a),
            ("C-@", 0x00),
            ("C-Space", 0x00),
            ("C-[", 0x1b),
            ("C-\\", 0x1c),
            ("C-]", 0x1d),
            ("C-^", 0x1e),
            ("C-_", 0x1f),
        ] {
            assert_eq!(control_key(name), Some(byte), "{name}");
        }
        for name in ["C-", "C-1", "C-ab", "C-?", "a", "M-a", "C-é"] {
            assert_eq!(control_key(name), None, "{name}");
        }
    }

    #[test]
    fn a_detach_key_is_one_control_key_or_a_pair_or_none() {
        assert_eq!(
            DetachKey::parse(DEFAULT_DETACH_KEY).unwrap(),
            DetachKey::default()
        );
        assert_eq!(DetachKey::default().bytes(), [0x1c]);
        assert_eq!(DetachKey::parse("C-a d").unwrap().bytes(), [0x01, b'd']);
        assert_eq!(
            DetachKey::parse("C-Space C-q").unwrap().bytes(),
            [0x00, 0x11]
        );
        assert_eq!(DetachKey::parse("none").unwrap(), DetachKey::None);
        assert!(DetachKey::None.bytes().is_empty());
    }

    #[test]
    fn a_refused_detach_key_says_what_it_takes() {
        for text in [
            "",
            "d",
            "C-[",
            "C-[ d",
            "Escape",
            "M-d",
            "C-a d e",
            "C-a C-a",
            "C-a Enter",
            "F12",
        ] {
            let err = DetachKey::parse(text).unwrap_err();
            assert_eq!(err, format!("{text:?}: expected {DETACH_KEY_ALLOWED}"));
            assert!(!err.contains('\n'));
        }
    }
}
