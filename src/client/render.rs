//! How answers look: tables and transcripts for people, JSON for scripts.

use crate::protocol::message::{QueuedInput, SessionInfo, StatusInfo};
use crate::session::transcript::{Entry, EntryBody};

/// `ls`: a table for people (columns sized to their widest cell, as a
/// terminal shows it), or JSON. `now_ms` (wall clock) dates last activity.
pub fn sessions(sessions: &[SessionInfo], json: bool, now_ms: u64) -> String {
    if json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(sessions).unwrap_or_default()
        );
    }
    let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
    let header: Vec<String> = [
        "ID", "NAME", "STATE", "PID", "KERNEL", "JOBS", "FAILURES", "ACTIVE", "CWD",
    ]
    .map(String::from)
    .to_vec();
    let mut rows = vec![header];
    for s in sessions {
        rows.push(vec![
            s.id.clone(),
            s.name.clone(),
            s.state.clone(),
            pid(s.pid),
            pid(s.kernel_pid),
            s.jobs.to_string(),
            s.failures_in_window.to_string(),
            ago(now_ms, s.active_ms),
            if s.cwd.is_empty() {
                "-".into()
            } else {
                s.cwd.clone()
            },
        ]);
    }
    // Numbers align right, text left; the last column is not padded.
    let right = [false, false, false, true, true, true, true, true, false];
    table(&rows, &right)
}

/// Rows as aligned columns, two spaces apart, sized by display width.
fn table(rows: &[Vec<String>], right: &[bool]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| display_width(&r[c])).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let fill = " ".repeat(widths[c] - display_width(cell));
            if right.get(c).copied().unwrap_or(false) {
                line.push_str(&fill);
                line.push_str(cell);
            } else if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&fill);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// How long ago `then_ms` was, for people: `12s`, `5m`, `3h`, `2d` ago
/// (`-`: never, `now` for a clock a little ahead).
pub fn ago(now_ms: u64, then_ms: u64) -> String {
    if then_ms == 0 {
        return "-".into();
    }
    let seconds = now_ms.saturating_sub(then_ms) / 1000;
    match seconds {
        0 => "now".into(),
        s if s < 60 => format!("{s}s ago"),
        s if s < 3600 => format!("{}m ago", s / 60),
        s if s < 86_400 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

/// The columns a terminal gives `text`: 2 for East Asian Wide and
/// Fullwidth characters and emoji, 0 for combining marks, zero-width
/// characters and variation selectors, 1 for the rest.
pub fn display_width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

fn char_width(c: char) -> usize {
    let c = c as u32;
    const ZERO: &[(u32, u32)] = &[
        (0x0300, 0x036F),
        (0x0483, 0x0489),
        (0x0591, 0x05BD),
        (0x0610, 0x061A),
        (0x064B, 0x065F),
        (0x200B, 0x200F),
        (0x20D0, 0x20FF),
        (0xFE00, 0xFE0F),
        (0xFE20, 0xFE2F),
        (0xE0100, 0xE01EF),
    ];
    const WIDE: &[(u32, u32)] = &[
        (0x1100, 0x115F),
        (0x231A, 0x231B),
        (0x2329, 0x232A),
        (0x23E9, 0x23EC),
        (0x2614, 0x2615),
        (0x2648, 0x2653),
        (0x26A1, 0x26A1),
        (0x26AA, 0x26AB),
        (0x26BD, 0x26BE),
        (0x26C4, 0x26C5),
        (0x26D4, 0x26D4),
        (0x26EA, 0x26EA),
        (0x26F2, 0x26F5),
        (0x26FA, 0x26FD),
        (0x2705, 0x2705),
        (0x270A, 0x270B),
        (0x2728, 0x2728),
        (0x274C, 0x274C),
        (0x2753, 0x2755),
        (0x2757, 0x2757),
        (0x2795, 0x2797),
        (0x2B1B, 0x2B1C),
        (0x2B50, 0x2B50),
        (0x2E80, 0x303E),
        (0x3041, 0x33FF),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xA000, 0xA4CF),
        (0xA960, 0xA97F),
        (0xAC00, 0xD7A3),
        (0xF900, 0xFAFF),
        (0xFE10, 0xFE19),
        (0xFE30, 0xFE6F),
        (0xFF00, 0xFF60),
        (0xFFE0, 0xFFE6),
        (0x16FE0, 0x16FE4),
        (0x17000, 0x18CFF),
        (0x1B000, 0x1B2FF),
        (0x1F004, 0x1F004),
        (0x1F0CF, 0x1F0CF),
        (0x1F18E, 0x1F18E),
        (0x1F191, 0x1F19A),
        (0x1F200, 0x1F251),
        (0x1F300, 0x1F64F),
        (0x1F680, 0x1F6FF),
        (0x1F7E0, 0x1F7EB),
        (0x1F90C, 0x1F9FF),
        (0x1FA70, 0x1FAFF),
        (0x20000, 0x2FFFD),
        (0x30000, 0x3FFFD),
    ];
    let within = |ranges: &[(u32, u32)]| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
    if c < 0x20 || (0x7F..0xA0).contains(&c) || within(ZERO) {
        0
    } else if within(WIDE) {
        2
    } else {
        1
    }
}

pub fn queue(inputs: &[QueuedInput], json: bool) -> String {
    if json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(inputs).unwrap_or_default()
        );
    }
    if inputs.is_empty() {
        return "nothing queued\n".into();
    }
    inputs
        .iter()
        .map(|q| format!("run {:<6} {}\n", q.run, q.text))
        .collect()
}

pub fn status(status: &StatusInfo, json: bool) -> String {
    if json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(status).unwrap_or_default()
        );
    }
    format!(
        "eukhe daemon {} (build {}), pid {}, {} backend, protocol {}\ncapabilities: {}\nsessions: {} ({} running, {} busy, {} given up)\nsocket: {}\nstate: {}\n",
        status.version,
        status.build_id,
        status.pid,
        status.backend,
        status.protocol,
        status.capabilities.join(", "),
        status.sessions,
        status.running,
        status.busy,
        status.given_up,
        status.socket,
        status.state_dir
    )
}

/// One entry as a person reads it: output bytes exactly as written, the
/// rest as marked lines.
pub fn entry(entry: &Entry) -> Vec<u8> {
    let line = match &entry.body {
        EntryBody::Output { data, .. } => return data.clone(),
        EntryBody::Input { input, text } => format!("[run {input}] $ {text}\n"),
        EntryBody::RunStarted { .. } => String::new(),
        EntryBody::RunFinished {
            input,
            status,
            signal,
            cancelled,
        } => match (cancelled, signal) {
            (true, Some(signal)) => format!("[run {input} cancelled: signal {signal}]\n"),
            (true, None) => format!("[run {input} cancelled: exited {status}]\n"),
            (false, Some(signal)) => format!("[run {input} killed by signal {signal}]\n"),
            (false, None) => format!("[run {input} exited {status}]\n"),
        },
        EntryBody::Withdrawn { input } => format!("[run {input} withdrawn]\n"),
        EntryBody::RunInterrupted { input } => format!("[run {input} interrupted]\n"),
        EntryBody::Bash { command, bash } => format!("[bash{}] $ {command}\n", number(*bash)),
        EntryBody::BashFinished { status, bash } => {
            format!("[bash{} exited {status}]\n", number(*bash))
        }
        EntryBody::Notice { text, .. } => format!("! {text}\n"),
    };
    line.into_bytes()
}

/// ` N` for a numbered user bash (older transcripts did not number them).
fn number(bash: Option<u64>) -> String {
    bash.map(|n| format!(" {n}")).unwrap_or_default()
}

/// `log --json`: a JSON array written one entry at a time, so memory does
/// not grow with the transcript.
pub struct JsonArray {
    first: bool,
}

impl JsonArray {
    pub fn start(out: &mut impl std::io::Write) -> std::io::Result<JsonArray> {
        out.write_all(b"[")?;
        Ok(JsonArray { first: true })
    }

    pub fn push(&mut self, out: &mut impl std::io::Write, entry: &Entry) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(entry).map_err(std::io::Error::other)?;
        out.write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                out.write_all(b"\n")?;
            }
            out.write_all(b"  ")?;
            out.write_all(line.as_bytes())?;
        }
        Ok(())
    }

    pub fn finish(self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(if self.first { b"]\n" } else { b"\n]\n" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_characters_take_two_columns_and_marks_none() {
        assert_eq!(display_width("abc"), 3);
        assert_eq!(display_width("日本語"), 6);
        assert_eq!(display_width("ｆｕｌｌ"), 8);
        assert_eq!(display_width("🦀x"), 3);
        assert_eq!(display_width("e\u{301}"), 1);
    }

    #[test]
    fn activity_reads_as_time_ago() {
        assert_eq!(ago(10_000, 0), "-");
        assert_eq!(ago(10_000, 10_500), "now");
        assert_eq!(ago(70_000, 10_000), "1m ago");
        assert_eq!(ago(3 * 86_400_000 + 5, 5), "3d ago");
    }
}
