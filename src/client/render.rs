//! How answers look: tables and transcripts for people, JSON for scripts.

use std::io::Write;

use crate::protocol::message::{QueuedInput, SessionInfo, StatusInfo, Stream};
use crate::session::transcript::{Entry, EntryBody};

pub fn sessions(sessions: &[SessionInfo], json: bool) -> String {
    if json {
        return format!(
            "{}\n",
            serde_json::to_string_pretty(sessions).unwrap_or_default()
        );
    }
    let mut out = format!(
        "{:<10} {:<20} {:<11} {:>8} {:>8} {:>5} {:>8}  {}\n",
        "ID", "NAME", "STATE", "PID", "KERNEL", "JOBS", "FAILURES", "BUILD"
    );
    let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or_else(|| "-".into());
    for s in sessions {
        out += &format!(
            "{:<10} {:<20} {:<11} {:>8} {:>8} {:>5} {:>8}  {}\n",
            s.id,
            s.name,
            s.state,
            pid(s.pid),
            pid(s.kernel_pid),
            s.jobs,
            s.failures_in_window,
            s.build.as_deref().unwrap_or("-")
        );
    }
    out
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
            self.prefix(out, entry, None)?;
            return out.write_all(line.as_bytes());
        };
        if data.is_empty() {
            return Ok(());
        }
        if self.open.is_some_and(|open| open != *stream) {
            self.end_open_line(out)?;
        }
        if !self.timestamps && *stream == Stream::Stdout {
            // The common case, at the speed of a copy.
            out.write_all(data)?;
        } else {
            for line in data.split_inclusive(|b| *b == b'\n') {
                if self.open.is_none() {
                    self.prefix(out, entry, Some(*stream))?;
                }
                out.write_all(line)?;
                self.open = Some(*stream);
                if line.ends_with(b"\n") {
                    self.open = None;
                }
            }
            return Ok(());
        }
        self.open = (!data.ends_with(b"\n")).then_some(*stream);
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
        entry: &Entry,
        stream: Option<Stream>,
    ) -> std::io::Result<()> {
        if self.timestamps {
            write!(out, "{} ", utc_timestamp(entry.at_ms))?;
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

    fn output(seq: u64, stream: Stream, data: &[u8]) -> Entry {
        Entry {
            seq,
            at_ms: 1_764_618_121_123,
            body: EntryBody::Output {
                stream,
                data: data.to_vec(),
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
}
