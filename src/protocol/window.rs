//! Output windows: a part of one input's output (its first or last lines,
//! a byte range, the lines matching a regex), asked for with
//! `SessionRequest::Window` and answered as parts, each a
//! [`Response::WindowPart`](super::message::Response) followed by its bytes
//! as output frames, then the whole output's size in a
//! [`WindowSummary`].

use serde::{Deserialize, Serialize};

/// Which part of the output is asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "window", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputWindow {
    /// The first `lines` lines.
    Head {
        /// How many.
        lines: u64,
    },
    /// The last `lines` lines.
    Tail {
        /// How many.
        lines: u64,
    },
    /// Bytes `start` to `end` (exclusive; to the end when absent).
    Bytes {
        /// The first byte's offset.
        start: u64,
        /// Just past the last byte.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        end: Option<u64>,
    },
    /// The lines `pattern` (a regex) matches, each with `context` lines
    /// around it, at most `max_count` matching lines.
    Grep {
        /// The regex (Rust's `regex` syntax), matched against each line.
        pattern: String,
        /// Lines shown before and after each matching line.
        #[serde(default)]
        context: u64,
        /// Stop after this many matching lines.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_count: Option<u64>,
    },
}

/// Where a part of a window starts in the whole output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartStart {
    /// The number of its first line (from 1).
    pub line: u64,
    /// Its first byte's offset in the output.
    pub offset: u64,
}

/// The whole output's size and what the window showed of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSummary {
    /// The input the output is of.
    pub input: u64,
    /// Bytes in the whole output (of the stream asked for).
    pub bytes: u64,
    /// Lines in the whole output (a last line without a newline counts).
    pub lines: u64,
    /// The first and last line shown (none when nothing was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_lines: Option<(u64, u64)>,
    /// The bytes shown, from and to (exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown_bytes: Option<(u64, u64)>,
    /// Lines a grep matched (it stopped at its `max_count` when `stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<u64>,
    /// A grep stopped at its `max_count`, or a window at its size cap,
    /// before the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// How many bytes of stored output were read to answer.
    pub read_bytes: u64,
    /// What the reader had to say: a missing or damaged index, a scan,
    /// output lost. One line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl WindowSummary {
    /// The summary as one line: `run 3: 1000 bytes, 20 lines; shown lines
    /// 11-20`.
    pub fn line(&self) -> String {
        let mut line = format!(
            "run {}: {} bytes, {} lines",
            self.input, self.bytes, self.lines
        );
        match (self.shown_lines, self.shown_bytes) {
            (Some((first, last)), _) => line += &format!("; shown lines {first}-{last}"),
            (None, _) => line += "; nothing shown",
        }
        if let Some((from, to)) = self.shown_bytes {
            line += &format!(" (bytes {from}-{to})");
        }
        if let Some(matches) = self.matches {
            line += &format!("; {matches} matching lines");
            if self.stopped {
                line += " (stopped at the max count)";
            }
        } else if self.stopped {
            line += " (cut at the window's size cap)";
        }
        for note in &self.notes {
            line += "; ";
            line += note;
        }
        line
    }
}
