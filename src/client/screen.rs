//! `eukhe screen`: a terminal run's screen as a person would see it now,
//! as text with a status line, or as JSON.

use std::process::ExitCode;

use super::cli::unexpected;
use super::connect::connect;
use super::error::ClientError;
use super::stdout;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::screen::ScreenState;

/// `screen`: the screen of `input` (or of the session's current terminal
/// run) on standard output.
pub async fn screen(
    session: String,
    input: Option<u64>,
    json: bool,
) -> Result<ExitCode, ClientError> {
    let request = Request::Session {
        session,
        request: SessionRequest::Screen { input },
    };
    let answer = connect(ClientStart::Log).await?.ask(request).await?;
    let Response::Screen { screen } = answer else {
        return unexpected(answer);
    };
    let text = if json {
        // A screen is strings, numbers and booleans: it always encodes.
        format!("{}\n", serde_json::to_string(&screen).unwrap_or_default())
    } else {
        text_of(&screen)
    };
    stdout::print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The screen as text: its rows down to the last one that shows
/// something, then one status line.
pub fn text_of(screen: &ScreenState) -> String {
    let shown = screen
        .lines
        .iter()
        .rposition(|line| !line.is_empty())
        .map_or(0, |last| last + 1);
    let mut text = String::new();
    for line in &screen.lines[..shown] {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&status_line(screen));
    text.push('\n');
    text
}

/// Whose screen, its size, the cursor (from 1, as a terminal counts), the
/// title, which screen the program is on, and whether it waits or ended.
fn status_line(screen: &ScreenState) -> String {
    let mut parts = vec![
        format!("run {}", screen.input),
        format!("{}x{}", screen.cols, screen.rows),
        format!(
            "cursor row {} column {}{}",
            screen.cursor.row + 1,
            screen.cursor.col + 1,
            if screen.cursor.visible {
                ""
            } else {
                " (hidden)"
            }
        ),
    ];
    if let Some(title) = &screen.title {
        parts.push(format!("title {title:?}"));
    }
    parts.push(
        if screen.alternate {
            "alternate screen"
        } else {
            "main screen"
        }
        .to_string(),
    );
    parts.push(match (screen.ended, screen.waiting) {
        (Some(status), _) => format!("ended with status {status}"),
        (None, true) => "waiting for input".to_string(),
        (None, false) => "running".to_string(),
    });
    format!("[{}]", parts.join(" · "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::screen::Cursor;

    fn state() -> ScreenState {
        ScreenState {
            input: 4,
            rows: 4,
            cols: 20,
            lines: vec![
                "$ read x".into(),
                String::new(),
                "  y".into(),
                String::new(),
            ],
            cursor: Cursor {
                row: 0,
                col: 8,
                visible: true,
            },
            title: None,
            alternate: false,
            waiting: true,
            ended: None,
        }
    }

    #[test]
    fn trailing_blank_rows_are_left_out_and_a_status_line_follows() {
        assert_eq!(
            text_of(&state()),
            "$ read x\n\n  y\n[run 4 · 20x4 · cursor row 1 column 9 · main screen · waiting for input]\n"
        );
    }

    #[test]
    fn the_status_line_tells_the_title_the_alternate_screen_and_the_end() {
        let screen = ScreenState {
            lines: vec![String::new(); 4],
            title: Some("vim notes".into()),
            alternate: true,
            ended: Some(3),
            cursor: Cursor {
                row: 3,
                col: 0,
                visible: false,
            },
            ..state()
        };
        assert_eq!(
            text_of(&screen),
            "[run 4 · 20x4 · cursor row 4 column 1 (hidden) · title \"vim notes\" · \
             alternate screen · ended with status 3]\n"
        );
    }
}
