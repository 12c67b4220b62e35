//! `log` with `run` and a window (`head`, `tail_lines`, `bytes`, `grep`):
//! which window the arguments ask for, and the answer in words, within
//! the output cap and always saying what it left out and how to read it.
//! No I/O: `server` asks the session (`client::windows::fetch`).

use regex::bytes::Regex;
use serde_json::{json, Value};

use super::tools::{LogArgs, OUTPUT_CAP_BYTES};
use crate::client::windows::{numbered, parse_range, ShownPart};
use crate::protocol::window::{OutputWindow, WindowSummary};

/// Matching lines a `grep` shows unless `max_count` says otherwise: more
/// would not fit the output cap anyway.
pub const GREP_MAX_COUNT_DEFAULT: u64 = 100;

/// Room kept under the cap for the closing lines.
const TRAILER_BYTES: usize = 1024;

/// The window `args` ask for, if any; why not, when they ask for one
/// wrongly.
pub fn window_of(args: &LogArgs) -> Result<Option<OutputWindow>, String> {
    let asked = [
        args.head.is_some(),
        args.tail_lines.is_some(),
        args.bytes.is_some(),
        args.grep.is_some(),
    ];
    let windows = asked.iter().filter(|&&a| a).count();
    if windows == 0 {
        if args.context.is_some() || args.max_count.is_some() {
            return Err("context and max_count go with grep".into());
        }
        return Ok(None);
    }
    if windows > 1 {
        return Err("ask for one of head, tail_lines, bytes and grep at a time".into());
    }
    if args.run.is_none() {
        return Err("head, tail_lines, bytes and grep need run (the input's number)".into());
    }
    if args.grep.is_none() && (args.context.is_some() || args.max_count.is_some()) {
        return Err("context and max_count go with grep".into());
    }
    Ok(Some(if let Some(lines) = args.head {
        OutputWindow::Head { lines }
    } else if let Some(lines) = args.tail_lines {
        OutputWindow::Tail { lines }
    } else if let Some(range) = &args.bytes {
        let (start, end) = parse_range(range)?;
        OutputWindow::Bytes { start, end }
    } else {
        OutputWindow::Grep {
            pattern: args.grep.clone().unwrap_or_default(),
            context: args.context.unwrap_or(0),
            max_count: Some(args.max_count.unwrap_or(GREP_MAX_COUNT_DEFAULT)),
        }
    }))
}

/// The window's bytes as shown: a grep's lines numbered.
fn body_of(window: &OutputWindow, parts: &[ShownPart]) -> Vec<u8> {
    match window {
        OutputWindow::Grep {
            pattern, context, ..
        } => match Regex::new(pattern) {
            Ok(regex) => numbered(parts, &regex, *context > 0),
            Err(_) => Vec::new(),
        },
        _ => parts.iter().flat_map(|p| p.data.iter().copied()).collect(),
    }
}

/// How much of `body` fits under the cap with room for the closing
/// lines: whole lines, when a line ends before the cap.
fn under_cap(body: &[u8]) -> usize {
    let cap = OUTPUT_CAP_BYTES - TRAILER_BYTES;
    let kept = body.len().min(cap);
    if kept == body.len() {
        return kept;
    }
    match body[..kept].iter().rposition(|&b| b == b'\n') {
        Some(newline) => newline + 1,
        None => kept,
    }
}

/// The answer: the window's text (a grep's lines numbered), cut at the
/// output cap, then what was left out and how to read it.
pub fn window_text(
    session: &str,
    window: &OutputWindow,
    parts: &[ShownPart],
    summary: &WindowSummary,
) -> (String, Value) {
    let run = summary.input;
    let body = body_of(window, parts);
    let kept = under_cap(&body);
    let mut text = String::from_utf8_lossy(&body[..kept]).into_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let read = format!("`log` session={session}, run={run}");
    let mut notes = vec![format!(
        "[run {run}: {} bytes, {} lines of output{}]",
        summary.bytes,
        summary.lines,
        match summary.shown_lines {
            Some((first, last)) => format!("; this window holds lines {first}-{last}"),
            None => "; this window holds none of it".into(),
        }
    )];
    if kept < body.len() {
        let more = match (window, parts.first()) {
            (OutputWindow::Grep { .. }, _) | (_, None) => {
                "narrow the regex or lower max_count".to_string()
            }
            (_, Some(first)) => {
                format!("bytes={}: reads on", first.start.offset + kept as u64)
            }
        };
        notes.push(format!(
            "[{} bytes of this window are cut at the {OUTPUT_CAP_BYTES}-byte cap; {more}]",
            body.len() - kept
        ));
    }
    if let OutputWindow::Grep { .. } = window {
        let matches = summary.matches.unwrap_or(0);
        notes.push(match summary.stopped {
            true => format!(
                "[{matches} matching lines shown, then stopped at max_count: more may match \
                 after line {}; raise max_count or read on with {read} and bytes]",
                summary.shown_lines.map_or(0, |(_, last)| last)
            ),
            false => format!("[{matches} matching lines: every one in the output]"),
        });
    }
    let whole = summary.shown_lines == Some((1, summary.lines)) && kept == body.len();
    if !whole && !matches!(window, OutputWindow::Grep { .. }) {
        notes.push(format!(
            "[the rest of the output is left out: read it with {read} and head, tail_lines, \
             bytes=START:END or grep]"
        ));
    }
    notes.extend(summary.notes.iter().map(|note| format!("[{note}]")));
    for note in &notes {
        text += note;
        text.push('\n');
    }
    (text, structured(summary, &body, kept))
}

/// The answer as data: the size, what was shown, the text.
fn structured(summary: &WindowSummary, body: &[u8], kept: usize) -> Value {
    json!({
        "run": summary.input,
        "bytes": summary.bytes,
        "lines": summary.lines,
        "shown_lines": summary.shown_lines,
        "shown_bytes": summary.shown_bytes,
        "matches": summary.matches,
        "cut": kept < body.len(),
        "text": String::from_utf8_lossy(&body[..kept]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::window::PartStart;

    #[test]
    fn a_window_says_what_it_left_out_and_stays_under_the_cap() {
        let line = "0123456789\n";
        let data = line.repeat(10_000).into_bytes();
        let parts = [ShownPart {
            start: PartStart { line: 1, offset: 0 },
            data,
        }];
        let summary = WindowSummary {
            input: 4,
            bytes: 1_000_000,
            lines: 90_000,
            shown_lines: Some((1, 10_000)),
            ..WindowSummary::default()
        };
        let window = OutputWindow::Head { lines: 10_000 };
        let (text, structured) = window_text("s", &window, &parts, &summary);
        assert!(text.len() <= OUTPUT_CAP_BYTES, "{}", text.len());
        assert!(text.contains("90000 lines of output"), "{text}");
        assert!(text.contains("cut at the 32768-byte cap"), "{text}");
        assert!(text.contains("bytes=31735: reads on"), "{text}");
        assert!(
            text.contains("the rest of the output is left out"),
            "{text}"
        );
        assert_eq!(structured["cut"], true);
    }

    #[test]
    fn window_arguments_are_one_window_of_one_run() {
        let args = |json: Value| serde_json::from_value::<LogArgs>(json).unwrap();
        let tail = args(json!({"session": "s", "run": 2, "tail_lines": 5}));
        assert_eq!(window_of(&tail), Ok(Some(OutputWindow::Tail { lines: 5 })));
        let grep = args(json!({"session": "s", "run": 2, "grep": "x"}));
        assert_eq!(
            window_of(&grep),
            Ok(Some(OutputWindow::Grep {
                pattern: "x".into(),
                context: 0,
                max_count: Some(GREP_MAX_COUNT_DEFAULT)
            }))
        );
        assert!(window_of(&args(json!({"session": "s", "head": 3}))).is_err());
        assert!(window_of(&args(
            json!({"session": "s", "run": 1, "head": 3, "grep": "x"})
        ))
        .is_err());
        assert_eq!(
            window_of(&args(json!({"session": "s", "run": 1}))),
            Ok(None)
        );
    }
}
