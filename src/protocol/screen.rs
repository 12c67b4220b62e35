//! The wire form of a terminal run's screen, for `eukhe screen --json` and
//! the MCP `screen` tool: what a person would see on it now, as text.
//!
//! Like every message, unknown fields are refused, never ignored.

use serde::{Deserialize, Serialize};

/// A screen as it is now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenState {
    /// The number of the input (a run, or user bash) whose screen it is.
    #[serde(default)]
    pub input: u64,
    /// Rows of the terminal.
    pub rows: u16,
    /// Columns of the terminal.
    pub cols: u16,
    /// Each row's text, top to bottom, trailing blanks trimmed: always
    /// `rows` lines, the blank ones empty.
    pub lines: Vec<String>,
    /// Where the cursor is, and whether the program shows it.
    pub cursor: Cursor,
    /// The window title the program set (OSC 0 or 2), if it set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Whether the program is on the alternate screen (a full-screen
    /// program such as `vim` or `less`).
    pub alternate: bool,
    /// Whether the run waits for input (`laws::waiting`): its foreground
    /// program is blocked reading the terminal and wrote nothing for a
    /// moment.
    pub waiting: bool,
    /// The exit status the run ended with; absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<i32>,
}

/// The cursor of a screen: zero-based, row 0 at the top.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cursor {
    /// The row, from 0 at the top.
    pub row: u16,
    /// The column, from 0 at the left.
    pub col: u16,
    /// Whether the program shows the cursor (DECTCEM).
    pub visible: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ScreenState {
        ScreenState {
            input: 3,
            rows: 2,
            cols: 10,
            lines: vec!["$ read x".into(), String::new()],
            cursor: Cursor {
                row: 0,
                col: 8,
                visible: true,
            },
            title: Some("bash".into()),
            alternate: false,
            waiting: true,
            ended: None,
        }
    }

    #[test]
    fn a_screen_crosses_the_wire_unchanged() {
        let json = serde_json::to_string(&sample()).unwrap();
        assert_eq!(
            serde_json::from_str::<ScreenState>(&json).unwrap(),
            sample()
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let mut value = serde_json::to_value(sample()).unwrap();
        value["colour"] = serde_json::json!(true);
        assert!(serde_json::from_value::<ScreenState>(value).is_err());
        let mut value = serde_json::to_value(sample()).unwrap();
        value["cursor"]["blink"] = serde_json::json!(true);
        assert!(serde_json::from_value::<ScreenState>(value).is_err());
    }

    #[test]
    fn a_screen_without_a_title_leaves_it_out() {
        let state = ScreenState {
            title: None,
            ..sample()
        };
        let json = serde_json::to_value(&state).unwrap();
        assert!(json.get("title").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<ScreenState>(json).unwrap(), state);
    }
}
