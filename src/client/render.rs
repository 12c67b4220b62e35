//! How answers look: tables and transcripts for people, JSON for scripts.

use std::io::Write;

use crate::protocol::message::{QueuedInput, SessionInfo, StatusInfo};
use crate::session::entry::Stream;
use crate::session::transcript::{Entry, EntryBody};

/// `ls`: a table for people (columns sized to their widest cell, as a
/// terminal shows it), or JSON. `now_ms` (wall clock) dates last activity.
/// Sessions in the order `ls` lists them: the one active most recently
/// last, nearest the prompt (as `ls -tr` puts it).
pub fn most_recent_last(sessions: &mut [SessionInfo]) {
    sessions.sort_by(|a, b| {
        (a.active_ms, a.created_ms, &a.id).cmp(&(b.active_ms, b.created_ms, &b.id))
    });
}

pub fn sessions(sessions: &[SessionInfo], json: bool, now_ms: u64) -> String {
    if json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(sessions).unwrap_or_default()
        );
    }
    let mut rows = vec![SESSION_COLUMNS.map(String::from).to_vec()];
    rows.extend(sessions.iter().map(|s| session_cells(s, now_ms, true)));
    table(&rows, &SESSION_RIGHT)
}

/// The columns of a session's row in `ls`.
pub(crate) const SESSION_COLUMNS: [&str; 9] = [
    "ID", "NAME", "STATE", "PID", "KERNEL", "JOBS", "FAILURES", "ACTIVE", "CWD",
];
/// Which of them align right (numbers; text aligns left).
pub(crate) const SESSION_RIGHT: [bool; 9] =
    [false, false, false, true, true, true, true, true, false];

/// A session's row in `ls`; `here`: the session is on this machine, so
/// a working directory that is gone can be told.
pub(crate) fn session_cells(s: &SessionInfo, now_ms: u64, here: bool) -> Vec<String> {
    let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
    vec![
        escape_controls(&s.id),
        escape_controls(&s.name),
        // Busy, and waiting for input: the word says which.
        match s.waiting {
            true => "waiting".to_string(),
            false => escape_controls(&s.state),
        },
        pid(s.pid),
        pid(s.kernel_pid),
        s.jobs.to_string(),
        s.failures_in_window.to_string(),
        ago(now_ms, s.active_ms),
        if s.cwd.is_empty() {
            "-".into()
        } else if here && !std::path::Path::new(&s.cwd).is_dir() {
            // Its commands do not run until it is back.
            format!("{} (missing)", escape_controls(&s.cwd))
        } else {
            escape_controls(&s.cwd)
        },
    ]
}

/// `text` with each control character written as an escape (`\n`,
/// `\u{1b}`): a directory named with a newline or an escape sequence
/// never breaks a table's rows or drives the terminal.
pub(crate) fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Rows as aligned columns, two spaces apart, sized by display width.
pub(crate) fn table(rows: &[Vec<String>], right: &[bool]) -> String {
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

/// The columns a terminal gives one character (see [`display_width`]).
fn char_width(c: char) -> usize {
    let c = c as u32;
    let within = |ranges: &[(u32, u32)]| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
    if c < 0x20 || (0x7F..0xA0).contains(&c) || within(ZERO_WIDTH) {
        0
    } else if within(WIDE) {
        2
    } else {
        1
    }
}

/// Code points a terminal gives no column: combining marks, zero-width
/// characters and variation selectors (first and last of each range).
const ZERO_WIDTH: &[(u32, u32)] = &[
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

/// Code points a terminal gives two columns: East Asian Wide and
/// Fullwidth characters and emoji (first and last of each range).
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
        .map(|q| match q.bash {
            true => format!("bash {:<5} {} (running)\n", q.run, q.text),
            false => format!("run {:<6} {}\n", q.run, q.text),
        })
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

/// A transcript as a person reads it: output bytes as the commands wrote
/// them, each line of standard error marked `[stderr] `, the rest as
/// marked lines, each on a line of its own (output without a final newline
/// is ended before the next mark); with `timestamps`, each line starts
/// with the time its entry was stored.
#[derive(Debug, Default)]
pub struct TextLog {
    pub timestamps: bool,
    /// The stream whose line is open (its last byte was not a newline).
    open: Option<Stream>,
}

/// How a line of standard error is marked.
pub const STDERR_MARK: &[u8] = b"[stderr] ";

impl TextLog {
    pub fn new(timestamps: bool) -> TextLog {
        TextLog {
            timestamps,
            open: None,
        }
    }

    /// Write `entry` to `out`.
    pub fn write(&mut self, out: &mut impl Write, entry: &Entry) -> std::io::Result<()> {
        let EntryBody::Output { stream, data, .. } = &entry.body else {
            let line = marked_line(entry);
            if line.is_empty() {
                return Ok(());
            }
            self.end_open_line(out)?;
            self.prefix(out, entry.at_ms, None)?;
            return out.write_all(line.as_bytes());
        };
        self.write_output(out, entry.at_ms, *stream, data)
    }

    /// Write output bytes of `stream`, stored at `at_ms`, as an output
    /// entry is written (live output, not stored yet, is written the same
    /// way: `eukhe mcp`'s `bash`).
    pub fn write_output(
        &mut self,
        out: &mut impl Write,
        at_ms: u64,
        stream: Stream,
        data: &[u8],
    ) -> std::io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        if self.open.is_some_and(|open| open != stream) {
            self.end_open_line(out)?;
        }
        if !self.timestamps && stream == Stream::Stdout {
            // The common case, at the speed of a copy.
            out.write_all(data)?;
        } else {
            for line in data.split_inclusive(|b| *b == b'\n') {
                if self.open.is_none() {
                    self.prefix(out, at_ms, Some(stream))?;
                }
                out.write_all(line)?;
                self.open = Some(stream);
                if line.ends_with(b"\n") {
                    self.open = None;
                }
            }
            return Ok(());
        }
        self.open = (!data.ends_with(b"\n")).then_some(stream);
        Ok(())
    }

    /// End a line output left open, before a mark or the other stream.
    pub fn end_open_line(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.open.take().is_some() {
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    fn prefix(
        &self,
        out: &mut impl Write,
        at_ms: u64,
        stream: Option<Stream>,
    ) -> std::io::Result<()> {
        if self.timestamps {
            write!(out, "{} ", utc_timestamp(at_ms))?;
        }
        if stream == Some(Stream::Stderr) {
            out.write_all(STDERR_MARK)?;
        }
        Ok(())
    }
}

/// `at_ms` (wall-clock milliseconds) as RFC 3339 UTC:
/// `2026-12-01T19:42:01.123Z`.
pub fn utc_timestamp(at_ms: u64) -> String {
    let (days, ms) = (at_ms / 86_400_000, at_ms % 86_400_000);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// The marked line of an entry that is not output (empty: not shown).
fn marked_line(entry: &Entry) -> String {
    match &entry.body {
        EntryBody::Output { .. } => String::new(),
        EntryBody::Input { input, text, .. } => format!("[run {input}] $ {text}\n"),
        EntryBody::RunStarted { .. } => String::new(),
        EntryBody::RunFinished {
            input,
            status,
            signal,
            cancelled,
            ..
        } => match (cancelled, signal) {
            (true, Some(signal)) => format!("[run {input} cancelled: signal {signal}]\n"),
            (true, None) => format!("[run {input} cancelled: exited {status}]\n"),
            (false, Some(signal)) => format!("[run {input} killed by signal {signal}]\n"),
            (false, None) => format!("[run {input} exited {status}]\n"),
        },
        EntryBody::Withdrawn { input } => format!("[run {input} withdrawn]\n"),
        EntryBody::RunInterrupted { input } => format!("[run {input} interrupted]\n"),
        EntryBody::ShellCommand {
            input,
            text,
            status: None,
        } => format!("[run {input} shell] $ {text}\n"),
        EntryBody::ShellCommand {
            input,
            status: Some(status),
            ..
        } => format!("[run {input} shell: exited {status}]\n"),
        EntryBody::Bash { command, bash } => format!("[bash{}] $ {command}\n", number(*bash)),
        EntryBody::BashFinished {
            status,
            bash,
            signal,
            cancelled,
            ..
        } => {
            let bash = number(*bash);
            match (cancelled, signal) {
                (true, Some(signal)) => format!("[bash{bash} cancelled: signal {signal}]\n"),
                (true, None) => format!("[bash{bash} cancelled: exited {status}]\n"),
                (false, Some(signal)) => format!("[bash{bash} killed by signal {signal}]\n"),
                (false, None) => format!("[bash{bash} exited {status}]\n"),
            }
        }
        EntryBody::Notice { text, .. } => format!("! {text}\n"),
    }
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

    pub fn push(
        &mut self,
        out: &mut impl std::io::Write,
        entry: &(impl serde::Serialize + ?Sized),
    ) -> std::io::Result<()> {
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

    fn output(seq: u64, stream: Stream, data: &[u8]) -> Entry {
        Entry {
            seq,
            at_ms: 1_764_618_121_123,
            body: EntryBody::Output {
                stream,
                data: data.to_vec().into(),
                input: Some(1),
                bash: None,
                spool_end: None,
            },
        }
    }

    fn render(timestamps: bool, entries: &[Entry]) -> String {
        let mut log = TextLog::new(timestamps);
        let mut out = Vec::new();
        for entry in entries {
            log.write(&mut out, entry).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    fn finished(seq: u64) -> Entry {
        Entry {
            seq,
            at_ms: 1_764_618_121_123,
            body: EntryBody::RunFinished {
                input: 1,
                status: 0,
                signal: None,
                cancelled: false,
                lost_output: None,
            },
        }
    }

    #[test]
    fn output_without_a_final_newline_ends_before_the_end_mark() {
        let text = render(
            false,
            &[output(1, Stream::Stdout, b"no newline"), finished(2)],
        );
        assert_eq!(text, "no newline\n[run 1 exited 0]\n");
    }

    #[test]
    fn standard_error_lines_are_marked_and_never_share_a_line_with_stdout() {
        let entries = [
            output(1, Stream::Stdout, b"out "),
            output(2, Stream::Stderr, b"err one\nerr "),
            output(3, Stream::Stderr, b"two\n"),
            output(4, Stream::Stdout, b"more\n"),
        ];
        assert_eq!(
            render(false, &entries),
            "out \n[stderr] err one\n[stderr] err two\nmore\n"
        );
    }

    #[test]
    fn timestamps_start_every_line() {
        let entries = [output(1, Stream::Stdout, b"a\nb\n"), finished(2)];
        let t = "2025-12-01T19:42:01.123Z";
        assert_eq!(
            render(true, &entries),
            format!("{t} a\n{t} b\n{t} [run 1 exited 0]\n")
        );
    }

    #[test]
    fn timestamps_are_utc_dates() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc_timestamp(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

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
