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

/// A line typed into `attach` (its newline, and a carriage return before
/// it, taken off), as the command line it queues.
pub fn typed_line(line: &[u8]) -> Result<String, ClientError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line_as_text(line)
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

/// A command line given as one argument, as text. A byte that is not
/// UTF-8 is written as `$'\xHH'` where the shell reads a word: unquoted,
/// or between single or double quotes (closed around it and opened
/// again); in a comment it is left out. Escaped by a backslash, or past a
/// substitution or a here document, it cannot be written so, and the
/// line is refused.
fn line_as_text(line: &[u8]) -> Result<String, ClientError> {
    if let Ok(text) = std::str::from_utf8(line) {
        return Ok(text.to_string());
    }
    let mut out = String::new();
    let mut scan = Scan {
        word_start: true,
        ..Scan::default()
    };
    let mut at = 0;
    while at < line.len() {
        let rest = &line[at..];
        let valid = match std::str::from_utf8(rest) {
            Ok(text) => text.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = std::str::from_utf8(&rest[..valid]).unwrap_or_default();
        for (n, c) in text.char_indices() {
            scan.read(c, rest.get(n + c.len_utf8()).copied());
            out.push(c);
        }
        at += valid;
        if at == line.len() {
            break;
        }
        let bad_len = std::str::from_utf8(&line[at..])
            .err()
            .and_then(|e| e.error_len())
            .unwrap_or(line.len() - at);
        let bytes = &line[at..at + bad_len];
        let written = match scan.quote {
            _ if scan.unsure || scan.escaped => None,
            Quote::None => Some(ansi_c_quoted(bytes)),
            Quote::Single => Some(format!("'{}'", ansi_c_quoted(bytes))),
            Quote::Double => Some(format!("\"{}\"", ansi_c_quoted(bytes))),
            Quote::Comment => Some(String::new()),
        };
        let Some(written) = written else {
            return Err(ClientError::Usage(format!(
                "the command line has a byte that is not UTF-8 (0x{:02x} at byte {at}) where it cannot be written as text: \
                 give the command and its arguments as separate words after `--`, each passed byte for byte",
                bytes[0]
            )));
        };
        out.push_str(&written);
        scan.word_start = false;
        at += bad_len;
    }
    Ok(out)
}

/// Where a shell reading the line so far is: enough to write a byte so
/// the shell reads it back.
#[derive(Default)]
struct Scan {
    quote: Quote,
    /// The previous character was a backslash that escapes the next one.
    escaped: bool,
    /// A substitution or a here document was seen: nesting this scan
    /// does not follow.
    unsure: bool,
    /// The previous character ends a word (a comment may start here).
    word_start: bool,
}

#[derive(Clone, Copy, Default, PartialEq)]
enum Quote {
    #[default]
    None,
    Single,
    Double,
    Comment,
}

impl Scan {
    /// Read character `c` (`next`: the byte after it).
    fn read(&mut self, c: char, next: Option<u8>) {
        let at_word_start = std::mem::replace(&mut self.word_start, false);
        if std::mem::take(&mut self.escaped) {
            return;
        }
        let substitution =
            c == '`' || (c == '$' && matches!(next, Some(b'(' | b'{' | b'\'' | b'"')));
        match self.quote {
            Quote::None => match c {
                '\'' => self.quote = Quote::Single,
                '"' => self.quote = Quote::Double,
                '\\' => self.escaped = true,
                '#' if at_word_start => self.quote = Quote::Comment,
                '<' if next == Some(b'<') => self.unsure = true,
                _ if substitution => self.unsure = true,
                _ => self.word_start = c.is_whitespace() || ";|&()".contains(c),
            },
            Quote::Single if c == '\'' => self.quote = Quote::None,
            Quote::Single => {}
            Quote::Double => match c {
                '"' => self.quote = Quote::None,
                '\\' => self.escaped = true,
                _ if substitution => self.unsure = true,
                _ => {}
            },
            Quote::Comment if c == '\n' => {
                self.quote = Quote::None;
                self.word_start = true;
            }
            Quote::Comment => {}
        }
    }
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
        assert_eq!(
            command_line(&words(&[
                b"echo 'caf\xe9' \"x\xff\" # \xfe don't\necho \xe9"
            ]))
            .unwrap(),
            r#"echo 'caf'$'\xe9''' "x"$'\xff'"" #  don't
echo $'\xe9'"#
        );
        for refused in [
            &b"echo \\\xe9"[..],
            b"echo $(echo \xe9)",
            b"cat <<E\n\xe9\nE",
        ] {
            let refused = command_line(&words(&[refused])).unwrap_err();
            assert!(refused.to_string().contains("(0xe9 at byte"), "{refused}");
        }
    }
}
