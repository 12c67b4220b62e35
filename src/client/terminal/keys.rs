//! Named keys (`eukhe keys S -- 'text' Enter C-c Escape Up`): each argument
//! is a key name or literal text, turned into the bytes an xterm sends.
//!
//! Names are matched exactly as written here (`Enter`, not `enter`), so a
//! word such as `end` or `up` typed into a program stays text. An argument
//! shaped like a key (`C-…`, `M-…`, `F` and digits) that is not one is
//! refused rather than typed. To type a key's name as text (the word
//! "Enter"), the caller passes `--literal`, as tmux's `send-keys -l`:
//! [`literal_keys`] then takes every argument as text.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt as _;

use crate::config::detach_key::control_key;

/// How the program asked for cursor keys (DECCKM). In normal mode an xterm
/// sends `ESC [ A` for Up, in application mode `ESC O A`. `eukhe keys`
/// sends normal mode unless told: readline, less and vim read both forms,
/// while a program in normal mode (a shell's prompt) takes `ESC O A` as
/// Escape and two letters. A caller that has the screen knows the mode and
/// may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CursorKeys {
    /// `ESC [ A`: a terminal's state after a reset.
    #[default]
    Normal,
    /// `ESC O A`: after the program sent `ESC [ ? 1 h` (vim, less).
    Application,
}

/// An argument that looks like a key name and is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("argument {position} ({given:?}) is no key: {allowed}; to type it as text, use --literal")]
pub struct KeyError {
    /// The argument's place among the keys, from 1.
    pub position: usize,
    /// The argument as given (lossily, if not UTF-8).
    pub given: String,
    /// What that kind of key takes.
    pub allowed: &'static str,
}

const CONTROL_ALLOWED: &str = "C- takes a to z, @, [, \\, ], ^, _ or Space";
const META_ALLOWED: &str = "M- takes one character or a key name (M-x, M-Enter, M-C-a)";
const FUNCTION_ALLOWED: &str = "function keys are F1 to F12";

/// The bytes for `args` with cursor keys in normal mode.
pub fn parse_keys(args: &[OsString]) -> Result<Vec<u8>, KeyError> {
    parse_keys_in(args, CursorKeys::Normal)
}

/// The bytes for `args`, cursor keys as `mode` asks.
pub fn parse_keys_in(args: &[OsString], mode: CursorKeys) -> Result<Vec<u8>, KeyError> {
    let mut bytes = Vec::new();
    for (index, arg) in args.iter().enumerate() {
        let raw = arg.as_bytes();
        match std::str::from_utf8(raw).ok().map(|name| key(name, mode)) {
            Some(Ok(Some(key))) => bytes.extend_from_slice(&key),
            Some(Err(allowed)) => {
                return Err(KeyError {
                    position: index + 1,
                    given: arg.to_string_lossy().into_owned(),
                    allowed,
                })
            }
            // Text, byte for byte (also when not UTF-8).
            Some(Ok(None)) | None => bytes.extend_from_slice(raw),
        }
    }
    Ok(bytes)
}

/// Every argument as text, byte for byte (`--literal`).
pub fn literal_keys(args: &[OsString]) -> Vec<u8> {
    args.iter()
        .flat_map(|arg| arg.as_bytes().to_vec())
        .collect()
}

/// A key's bytes; `Ok(None)` for text; `Err` for a key-shaped argument that
/// names no key.
fn key(name: &str, mode: CursorKeys) -> Result<Option<Vec<u8>>, &'static str> {
    if let Some(bytes) = named(name, mode) {
        return Ok(Some(bytes));
    }
    if name.starts_with("C-") && name.len() > 2 {
        return control_key(name)
            .map(|byte| Some(vec![byte]))
            .ok_or(CONTROL_ALLOWED);
    }
    if let Some(rest) = name.strip_prefix("M-").filter(|rest| !rest.is_empty()) {
        let mut chars = rest.chars();
        let inner = match (chars.next(), chars.next()) {
            (Some(_), None) => rest.as_bytes().to_vec(),
            _ => key(rest, mode).ok().flatten().ok_or(META_ALLOWED)?,
        };
        return Ok(Some([&[ESC][..], &inner].concat()));
    }
    let digits = name.strip_prefix('F').unwrap_or("");
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FUNCTION_ALLOWED);
    }
    Ok(None)
}

const ESC: u8 = 0x1b;

/// The named keys, as an xterm sends them.
fn named(name: &str, mode: CursorKeys) -> Option<Vec<u8>> {
    let cursor = |last: u8| match mode {
        CursorKeys::Normal => vec![ESC, b'[', last],
        CursorKeys::Application => vec![ESC, b'O', last],
    };
    let tilde = |code: &str| [&[ESC, b'['][..], code.as_bytes(), b"~"].concat();
    let bytes = match name {
        "Enter" => vec![b'\r'],
        "Tab" => vec![b'\t'],
        "BTab" => vec![ESC, b'[', b'Z'],
        "Space" => vec![b' '],
        "Escape" => vec![ESC],
        "BSpace" | "Backspace" => vec![0x7f],
        "Up" => cursor(b'A'),
        "Down" => cursor(b'B'),
        "Right" => cursor(b'C'),
        "Left" => cursor(b'D'),
        "Home" => cursor(b'H'),
        "End" => cursor(b'F'),
        "Insert" | "IC" => tilde("2"),
        "Delete" | "DC" => tilde("3"),
        "PageUp" | "PPage" | "PgUp" => tilde("5"),
        "PageDown" | "NPage" | "PgDn" => tilde("6"),
        "F1" => vec![ESC, b'O', b'P'],
        "F2" => vec![ESC, b'O', b'Q'],
        "F3" => vec![ESC, b'O', b'R'],
        "F4" => vec![ESC, b'O', b'S'],
        "F5" => tilde("15"),
        "F6" => tilde("17"),
        "F7" => tilde("18"),
        "F8" => tilde("19"),
        "F9" => tilde("20"),
        "F10" => tilde("21"),
        "F11" => tilde("23"),
        "F12" => tilde("24"),
        _ => return None,
    };
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt as _;

    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn each_named_key_is_the_bytes_an_xterm_sends() {
        for (name, bytes) in [
            ("Enter", &b"\r"[..]),
            ("Tab", b"\t"),
            ("BTab", b"\x1b[Z"),
            ("Space", b" "),
            ("Escape", b"\x1b"),
            ("BSpace", b"\x7f"),
            ("Backspace", b"\x7f"),
            ("Up", b"\x1b[A"),
            ("Down", b"\x1b[B"),
            ("Right", b"\x1b[C"),
            ("Left", b"\x1b[D"),
            ("Home", b"\x1b[H"),
            ("End", b"\x1b[F"),
            ("Insert", b"\x1b[2~"),
            ("Delete", b"\x1b[3~"),
            ("PageUp", b"\x1b[5~"),
            ("PPage", b"\x1b[5~"),
            ("PageDown", b"\x1b[6~"),
            ("NPage", b"\x1b[6~"),
            ("F1", b"\x1bOP"),
            ("F4", b"\x1bOS"),
            ("F5", b"\x1b[15~"),
            ("F10", b"\x1b[21~"),
            ("F11", b"\x1b[23~"),
            ("F12", b"\x1b[24~"),
            ("C-a", b"\x01"),
            ("C-c", b"\x03"),
            ("C-z", b"\x1a"),
            ("C-@", b"\x00"),
            ("C-Space", b"\x00"),
            ("C-[", b"\x1b"),
            ("C-\\", b"\x1c"),
            ("C-]", b"\x1d"),
            ("C-^", b"\x1e"),
            ("C-_", b"\x1f"),
            ("M-x", b"\x1bx"),
            ("M-Enter", b"\x1b\r"),
            ("M-C-a", b"\x1b\x01"),
            ("M-é", "\x1bé".as_bytes()),
        ] {
            assert_eq!(parse_keys(&args(&[name])).unwrap(), bytes, "{name}");
        }
    }

    #[test]
    fn application_cursor_mode_sends_esc_o() {
        for (name, bytes) in [
            ("Up", &b"\x1bOA"[..]),
            ("Down", b"\x1bOB"),
            ("Right", b"\x1bOC"),
            ("Left", b"\x1bOD"),
            ("Home", b"\x1bOH"),
            ("End", b"\x1bOF"),
            ("PageUp", b"\x1b[5~"),
        ] {
            let sent = parse_keys_in(&args(&[name]), CursorKeys::Application).unwrap();
            assert_eq!(sent, bytes, "{name}");
        }
    }

    #[test]
    fn text_and_keys_are_sent_in_order() {
        let sent = parse_keys(&args(&["ls -l", "Enter", "C-c", "Escape", "Up"])).unwrap();
        assert_eq!(sent, b"ls -l\r\x03\x1b\x1b[A");
        // Words that are no key names, in any case, are text.
        let sent = parse_keys(&args(&["end", "enter", "up", "F", "Fix", "C-", "M-"])).unwrap();
        assert_eq!(sent, b"endenterupFFixC-M-");
    }

    #[test]
    fn text_that_is_not_utf8_passes_byte_for_byte() {
        let raw = OsString::from_vec(vec![0xff, b'C', b'-', 0xfe, 0x00]);
        let sent = parse_keys(&[raw, OsString::from("Tab")]).unwrap();
        assert_eq!(sent, [0xff, b'C', b'-', 0xfe, 0x00, b'\t']);
    }

    #[test]
    fn literal_sends_key_names_as_text() {
        let sent = literal_keys(&args(&["Enter", " C-c"]));
        assert_eq!(sent, b"Enter C-c");
    }

    #[test]
    fn a_key_shaped_argument_that_is_no_key_names_itself_and_what_is_allowed() {
        for (words, said) in [
            (
                &["hi", "C-1"][..],
                "argument 2 (\"C-1\") is no key: C- takes a to z, @, [, \\, ], ^, _ or Space; \
                 to type it as text, use --literal",
            ),
            (
                &["C-ab"],
                "argument 1 (\"C-ab\") is no key: C- takes a to z, @, [, \\, ], ^, _ or Space; \
                 to type it as text, use --literal",
            ),
            (
                &["M-Nope"],
                "argument 1 (\"M-Nope\") is no key: M- takes one character or a key name \
                 (M-x, M-Enter, M-C-a); to type it as text, use --literal",
            ),
            (
                &["Enter", "Enter", "F13"],
                "argument 3 (\"F13\") is no key: function keys are F1 to F12; \
                 to type it as text, use --literal",
            ),
        ] {
            let err = parse_keys(&args(words)).unwrap_err();
            assert_eq!(err.to_string(), said);
        }
    }
}
