//! The terminal-run tools of `eukhe mcp` (`send_keys`, `screen`,
//! `wait_for`, and `bash` with `tty: true`): their arguments, the keys they
//! type, and a screen put into words for a model. Nothing here does I/O:
//! `screen_calls` carries the calls out.

use std::ffi::OsString;

use serde::Deserialize;

use crate::client::terminal::keys::{parse_keys, KeyError};
use crate::protocol::message::Until;
use crate::protocol::screen::ScreenState;

// `rmcp` re-exports the `schemars` it derives schemas with.
use rmcp::schemars;

/// Arguments of `send_keys`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendKeysArgs {
    /// The session: its id or its name.
    pub session: String,
    /// Keys by name or text, typed one after another: `Enter`, `Tab`,
    /// `Escape`, `BSpace`, `Up`, `Down`, `Left`, `Right`, `Home`, `End`,
    /// `PageUp`, `PageDown`, `F1`..`F12`, `C-c` (Ctrl), `M-x` (Alt); any
    /// other string is typed as it is (`["git status", "Enter"]`).
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// Text typed exactly as given, no key names (instead of `keys`).
    #[serde(default)]
    pub text: Option<String>,
    /// The terminal run's number (default: the one running).
    #[serde(default)]
    pub run: Option<u64>,
}

/// Arguments of `screen`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenArgs {
    /// The session: its id or its name.
    pub session: String,
    /// The terminal run's number (default: the one running, else the last
    /// that ended).
    #[serde(default)]
    pub run: Option<u64>,
}

/// Arguments of `wait_for`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitForArgs {
    /// The session: its id or its name.
    pub session: String,
    /// The terminal run's number (default: the one running, else the last
    /// that ended).
    #[serde(default)]
    pub run: Option<u64>,
    /// Until the screen's text (its rows joined by newlines) matches this
    /// regular expression (Rust `regex` syntax: escape `?`, `[`, `(`).
    #[serde(default, rename = "match")]
    pub regex: Option<String>,
    /// Until the run waits for input: its program is blocked reading the
    /// terminal and wrote nothing for half a second.
    #[serde(default)]
    pub waiting: bool,
    /// Until the run has ended.
    #[serde(default)]
    pub end: bool,
    /// How long to wait, in milliseconds (default 30000, at most one
    /// hour). Past it the answer is the screen as it is, with
    /// `timed_out: true`; the run goes on.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

impl WaitForArgs {
    /// The conditions named, in the order `match`, `waiting`, `end`.
    pub fn until(&self) -> Vec<Until> {
        let mut until: Vec<Until> = self
            .regex
            .iter()
            .map(|regex| Until::Screen {
                regex: regex.clone(),
            })
            .collect();
        if self.waiting {
            until.push(Until::Waiting);
        }
        if self.end {
            until.push(Until::End);
        }
        until
    }
}

/// Why `send_keys` has no keys to type, or which argument is no key.
#[derive(Debug, thiserror::Error)]
pub enum KeysRefused {
    /// Both or neither of `keys` and `text`.
    #[error("send_keys takes `keys` or `text`, exactly one of them")]
    OneOf,
    /// Nothing to type.
    #[error("send_keys has nothing to type: `keys` is empty")]
    Empty,
    /// A key-shaped string that names no key.
    #[error("{0}")]
    NoKey(#[from] KeyError),
}

/// The bytes `args` types.
pub fn key_bytes(args: &SendKeysArgs) -> Result<Vec<u8>, KeysRefused> {
    match (&args.keys, &args.text) {
        (Some(keys), None) => {
            let keys: Vec<OsString> = keys.iter().map(OsString::from).collect();
            let bytes = parse_keys(&keys)?;
            if bytes.is_empty() {
                return Err(KeysRefused::Empty);
            }
            Ok(bytes)
        }
        (None, Some(text)) if !text.is_empty() => Ok(text.as_bytes().to_vec()),
        (None, Some(_)) => Err(KeysRefused::Empty),
        _ => Err(KeysRefused::OneOf),
    }
}

/// A screen as a model reads it: its rows (trailing blank rows left
/// out) between two rules, then one line of what it is.
pub fn screen_text(screen: &ScreenState, run: Option<u64>, status: &str) -> String {
    let shown = screen
        .lines
        .iter()
        .rposition(|line| !line.is_empty())
        .map_or(0, |last| last + 1);
    let mut text = String::from("--- screen ---\n");
    for line in &screen.lines[..shown] {
        text += line;
        text.push('\n');
    }
    text += "--- end of screen ---\n";
    let run = run.map(|run| format!("run {run}: ")).unwrap_or_default();
    text += &format!(
        "[{run}{status}; {}x{} terminal, cursor at row {} column {}{}]\n",
        screen.rows,
        screen.cols,
        screen.cursor.row + 1,
        screen.cursor.col + 1,
        if screen.alternate {
            ", full-screen program (alternate screen)"
        } else {
            ""
        }
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::screen::Cursor;

    fn keys_args(keys: Option<&[&str]>, text: Option<&str>) -> SendKeysArgs {
        SendKeysArgs {
            session: "s".into(),
            keys: keys.map(|keys| keys.iter().map(|k| k.to_string()).collect()),
            text: text.map(str::to_string),
            run: None,
        }
    }

    #[test]
    fn keys_by_name_and_text_become_the_bytes_a_terminal_sends() {
        let args = keys_args(Some(&["y", "Enter", "C-c", "Up"]), None);
        assert_eq!(key_bytes(&args).unwrap(), b"y\r\x03\x1b[A");
        let args = keys_args(None, Some("Enter"));
        assert_eq!(key_bytes(&args).unwrap(), b"Enter");
    }

    #[test]
    fn keys_and_text_are_one_or_the_other_and_never_empty() {
        let both = keys_args(Some(&["y"]), Some("y"));
        assert!(matches!(key_bytes(&both), Err(KeysRefused::OneOf)));
        let neither = keys_args(None, None);
        assert!(matches!(key_bytes(&neither), Err(KeysRefused::OneOf)));
        assert!(matches!(
            key_bytes(&keys_args(Some(&[]), None)),
            Err(KeysRefused::Empty)
        ));
        let bad = key_bytes(&keys_args(Some(&["C-é"]), None)).unwrap_err();
        assert!(bad.to_string().contains("is no key"), "{bad}");
    }

    #[test]
    fn wait_for_names_its_conditions_in_order() {
        let args = WaitForArgs {
            session: "s".into(),
            run: None,
            regex: Some("pick".into()),
            waiting: false,
            end: true,
            timeout_ms: None,
        };
        assert_eq!(
            args.until(),
            vec![
                Until::Screen {
                    regex: "pick".into()
                },
                Until::End
            ]
        );
    }

    #[test]
    fn a_screen_in_words_leaves_out_trailing_blank_rows() {
        let screen = ScreenState {
            input: 3,
            rows: 4,
            cols: 20,
            lines: vec![
                "Continue? [y/N] ".into(),
                String::new(),
                "x".into(),
                String::new(),
            ],
            cursor: Cursor {
                row: 0,
                col: 16,
                visible: true,
            },
            title: None,
            alternate: false,
            waiting: true,
            ended: None,
        };
        let text = screen_text(&screen, Some(3), "waiting for input");
        assert_eq!(
            text,
            "--- screen ---\nContinue? [y/N] \n\nx\n--- end of screen ---\n\
             [run 3: waiting for input; 4x20 terminal, cursor at row 1 column 17]\n"
        );
    }
}
