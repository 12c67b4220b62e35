//! A command's arguments as the shell command line a session runs.
//!
//! Arguments are the operating system's strings, passed byte for byte as
//! `ssh` and `env` pass them: a byte that is not UTF-8 is written in the
//! line as bash's `$'\xHH'`, which bash turns back into that byte. The
//! line itself stays text, so the transcript stores it as it is and `log`
//! shows such a byte escaped.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt as _;

use super::error::ClientError;

/// The shell command line for a command's arguments: one is a command
/// line already; several are words, each quoted so the shell passes it as
/// it is.
pub fn command_line(words: &[OsString]) -> Result<String, ClientError> {
    if let [line] = words {
        return line_as_text(line.as_bytes());
    }
    Ok(words
        .iter()
        .map(|word| quoted(word.as_bytes()))
        .collect::<Vec<_>>()
        .join(" "))
}

/// One word, quoted when the shell would read it otherwise: single quotes
/// for text, `$'...'` for a word with bytes that are not UTF-8.
fn quoted(word: &[u8]) -> String {
    let plain = !word.is_empty()
        && word
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:,+@%".contains(b));
    match std::str::from_utf8(word) {
        Ok(text) if plain => text.to_string(),
        Ok(text) => format!("'{}'", text.replace('\'', "'\\''")),
        Err(_) => ansi_c_quoted(word),
    }
}

/// `bytes` as bash's `$'...'`: printable ASCII as it is (a quote and a
/// backslash escaped), every other byte as `\xHH`.
fn ansi_c_quoted(bytes: &[u8]) -> String {
    let mut out = String::from("$'");
    for &b in bytes {
        match b {
            b'\'' => out.push_str("\\'"),
            b'\\' => out.push_str("\\\\"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('\'');
    out
}

/// A command line given as one argument, as text. Bytes that are not
/// UTF-8 outside any quoting are written as `$'\xHH'` (the shell reads
/// them back as those bytes); inside quotes, a substitution or a here
/// document they cannot be written so, and the line is refused.
fn line_as_text(line: &[u8]) -> Result<String, ClientError> {
    if let Ok(text) = std::str::from_utf8(line) {
        return Ok(text.to_string());
    }
    let mut out = String::new();
    let mut rest = line;
    // Past one of these the shell may read a byte as quoted text.
    let mut quoting_seen = false;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                let good = std::str::from_utf8(good).unwrap_or_default();
                quoting_seen |= good.contains(['\'', '"', '\\', '`', '$']) || good.contains("<<");
                out.push_str(good);
                let bad_len = e.error_len().unwrap_or(bad.len());
                if quoting_seen {
                    let offset = line.len() - rest.len() + good.len();
                    return Err(ClientError::Usage(format!(
                        "the command line has a byte that is not UTF-8 (0x{:02x} at byte {offset}) inside quoting: \
                         give the command and its arguments as separate words after `--`, each passed byte for byte",
                        bad[0]
                    )));
                }
                out.push_str(&ansi_c_quoted(&bad[..bad_len]));
                rest = &bad[bad_len..];
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt as _;

    fn words(list: &[&[u8]]) -> Vec<OsString> {
        list.iter()
            .map(|w| OsString::from_vec(w.to_vec()))
            .collect()
    }

    #[test]
    fn text_words_are_quoted_as_before() {
        assert_eq!(
            command_line(&words(&[b"sh", b"-c", b"exit 3"])).unwrap(),
            "sh -c 'exit 3'"
        );
        assert_eq!(
            command_line(&words(&[b"echo", b"it's", b""])).unwrap(),
            "echo 'it'\\''s' ''"
        );
        assert_eq!(
            command_line(&words(&[b"cd src && make"])).unwrap(),
            "cd src && make"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_are_written_as_the_shell_reads_them_back() {
        assert_eq!(
            command_line(&words(&[b"wc", b"-l", b"caf\xe9.txt"])).unwrap(),
            "wc -l $'caf\\xe9.txt'"
        );
        assert_eq!(
            command_line(&words(&[b"printf", b"%s", b"a'b\\\xff\n"])).unwrap(),
            "printf %s $'a\\'b\\\\\\xff\\x0a'"
        );
        assert_eq!(
            command_line(&words(&[b"wc -l caf\xe9.txt"])).unwrap(),
            "wc -l caf$'\\xe9'.txt"
        );
        let refused = command_line(&words(&[b"echo 'caf\xe9'"])).unwrap_err();
        assert!(refused.to_string().contains("0xe9 at byte 9"), "{refused}");
    }
}
