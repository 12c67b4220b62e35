//! The tools `eukhe mcp` offers: their arguments (each with a JSON schema
//! and a description written for a model), the output cap, and how an
//! answer is put into words. Nothing here does I/O: `server` carries the
//! calls out with the command line's client code.

use std::collections::VecDeque;

use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::client::render::TextLog;
use crate::session::entry::Stream;
use crate::session::transcript::Entry;

// `rmcp` re-exports the `schemars` it derives schemas with.
use rmcp::schemars;

/// The most output bytes one tool call answers with (`bash`, `log`). The
/// rest stays in the session's transcript; the answer says how to read it
/// (`log` with `run`, `since`). About 8 000 tokens: enough for a build's
/// errors, small enough that one call cannot flood a model's context.
pub const OUTPUT_CAP_BYTES: usize = 32 * 1024;

/// Arguments of a tool that takes none.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Arguments of `new_session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSessionArgs {
    /// A name to refer to the session by instead of its id: 1 to 64
    /// characters, no `/`, no `..`, not another session's name or id.
    #[serde(default)]
    pub name: Option<String>,
    /// The absolute path the session's shell starts in (default: the
    /// directory `eukhe mcp` runs in).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Most memory the session's commands may use, as systemd reads it:
    /// bytes, or a whole number with K, M, G or T, or "infinity" (e.g. "2G").
    #[serde(default)]
    pub memory_max: Option<String>,
    /// Most CPU time per second, in percent of one CPU (e.g. "50%").
    #[serde(default)]
    pub cpu_quota: Option<String>,
    /// Most processes and threads at once: a number or "infinity".
    #[serde(default)]
    pub tasks_max: Option<String>,
}

/// Arguments of `bash`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The session: its id or its name.
    pub session: String,
    /// A shell command line (bash), run in the session's shell (it may be
    /// left out with `restart`).
    #[serde(default)]
    pub command: Option<String>,
    /// Give the session a fresh shell first: its first working directory
    /// and environment; functions, aliases and options set since are
    /// gone, the transcript is kept. Refused while something runs in the
    /// shell, unless `force`.
    #[serde(default)]
    pub restart: bool,
    /// With `restart`: end what still runs in the shell (runs, commands,
    /// background jobs) rather than refuse.
    #[serde(default)]
    pub force: bool,
    /// How long to wait for the command, in milliseconds (default 30000).
    /// Past it the call answers with the output so far and the command
    /// goes on running in the session.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Run it on a terminal (for programs that prompt or draw a screen:
    /// `git rebase -i`, `npm init`, `python3`): the answer comes when it
    /// ends, waits for input, or at the timeout, with its screen instead
    /// of its output.
    #[serde(default)]
    pub tty: bool,
    /// The terminal's rows with `tty` (default 24).
    #[serde(default)]
    pub rows: Option<u16>,
    /// The terminal's columns with `tty` (default 80).
    #[serde(default)]
    pub cols: Option<u16>,
}

/// Arguments of `send`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The session: its id or its name.
    pub session: String,
    /// A shell command line (bash), queued to run after the runs queued
    /// before it.
    pub command: String,
}

/// Arguments of `log`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogArgs {
    /// The session: its id or its name.
    pub session: String,
    /// Only the last `tail` entries of the transcript.
    #[serde(default)]
    pub tail: Option<u64>,
    /// Only the entries after entry `since` (an answer that stops at the
    /// output cap gives the `since` to read on from).
    #[serde(default)]
    pub since: Option<u64>,
    /// Only the entries of input `run`: a run `send` queued or a `bash`
    /// command (the number their answers give).
    #[serde(default)]
    pub run: Option<u64>,
    /// With `run`: only the first `head` lines of its output.
    #[serde(default)]
    pub head: Option<u64>,
    /// With `run`: only the last `tail_lines` lines of its output (`tail`
    /// counts transcript entries).
    #[serde(default)]
    pub tail_lines: Option<u64>,
    /// With `run`: only bytes START to END of its output, as
    /// "START:END" or "START:" (to the end).
    #[serde(default)]
    pub bytes: Option<String>,
    /// With `run`: only the lines of its output this regex matches,
    /// numbered (`N:`), with `context` lines around each (`N-`).
    #[serde(default)]
    pub grep: Option<String>,
    /// With `grep`: lines shown before and after each match.
    #[serde(default)]
    pub context: Option<u64>,
    /// With `grep`: stop after this many matching lines (default 100).
    #[serde(default)]
    pub max_count: Option<u64>,
}

/// Arguments of `cancel`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    /// The session: its id or its name.
    pub session: String,
    /// Also withdraw every queued run (they never run).
    #[serde(default)]
    pub all: bool,
    /// Cancel input `run` instead: a `bash` command still running after
    /// its timeout, the running run, or a queued run (withdrawn).
    #[serde(default)]
    pub run: Option<u64>,
}

/// Arguments of `remove_session`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    /// The session: its id or its name.
    pub session: String,
    /// Remove it even while it is busy: its runs are cancelled, its queue
    /// dropped, its background processes ended.
    #[serde(default)]
    pub force: bool,
}

/// Arguments that do not fit a tool's schema, in serde's words (which name
/// the field).
#[derive(Debug, thiserror::Error)]
#[error("invalid arguments: {0}")]
pub struct InvalidArguments(#[source] pub serde_json::Error);

/// Whether `arguments` fit tool `tool`'s schema, or why not (one line).
/// A call whose arguments do not fit is refused as the protocol's invalid
/// params, before the tool runs; an unknown tool is the router's to refuse.
pub fn check_arguments(tool: &str, arguments: Option<&JsonObject>) -> Result<(), InvalidArguments> {
    fn fits<T: DeserializeOwned>(arguments: Option<&JsonObject>) -> Result<(), InvalidArguments> {
        let value = serde_json::Value::Object(arguments.cloned().unwrap_or_default());
        serde_json::from_value::<T>(value)
            .map(drop)
            .map_err(InvalidArguments)
    }
    match tool {
        "new_session" => fits::<NewSessionArgs>(arguments),
        "list_sessions" => fits::<NoArgs>(arguments),
        "bash" => fits::<BashArgs>(arguments),
        "send" => fits::<SendArgs>(arguments),
        "log" => fits::<LogArgs>(arguments),
        "cancel" => fits::<CancelArgs>(arguments),
        "remove_session" => fits::<RemoveArgs>(arguments),
        "send_keys" => fits::<super::screen_tools::SendKeysArgs>(arguments),
        "screen" => fits::<super::screen_tools::ScreenArgs>(arguments),
        "wait_for" => fits::<super::screen_tools::WaitForArgs>(arguments),
        "wait" => fits::<super::wake_tool::WaitArgs>(arguments),
        _ => Ok(()),
    }
}

/// Output of one command as a model reads it: stdout as written, each
/// line of stderr marked `[stderr] `, at most `cap` bytes: the first and
/// the last halves, with what lies between left out (and counted).
#[derive(Debug)]
pub struct CappedOutput {
    cap: usize,
    text: TextLog,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    left_out: u64,
}

impl CappedOutput {
    /// Nothing taken yet; at most `cap` bytes kept.
    pub fn new(cap: usize) -> CappedOutput {
        CappedOutput {
            cap,
            text: TextLog::new(false),
            head: Vec::new(),
            tail: VecDeque::new(),
            left_out: 0,
        }
    }

    /// Take bytes `data` the command wrote to `stream`.
    pub fn push(&mut self, stream: Stream, data: &[u8]) {
        let mut rendered = Vec::with_capacity(data.len());
        // Writing to a Vec cannot fail.
        let _ = self.text.write_output(&mut rendered, 0, stream, data);
        self.take(&rendered);
    }

    fn take(&mut self, mut bytes: &[u8]) {
        let head_room = (self.cap / 2).saturating_sub(self.head.len());
        let into_head = head_room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        let tail_cap = self.cap - self.cap / 2;
        if bytes.len() > tail_cap {
            let skipped = bytes.len() - tail_cap;
            self.left_out += (self.tail.len() + skipped) as u64;
            self.tail.clear();
            bytes = &bytes[skipped..];
        }
        self.tail.extend(bytes);
        let over = self.tail.len().saturating_sub(tail_cap);
        self.tail.drain(..over);
        self.left_out += over as u64;
    }

    /// Whether bytes were left out.
    pub fn truncated(&self) -> bool {
        self.left_out > 0
    }

    /// The output as text (bytes that are not UTF-8 shown as U+FFFD),
    /// `gap` standing where bytes were left out; ended with a newline.
    pub fn text(&self, gap: &str) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.truncated() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text += &format!("[... {} bytes left out: {gap} ...]\n", self.left_out);
        }
        let (front, back) = self.tail.as_slices();
        text += &String::from_utf8_lossy(&[front, back].concat());
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }
}

impl crate::client::log::OutputSink for CappedOutput {
    fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), crate::client::ClientError> {
        self.push(stream, data);
        Ok(())
    }
}

/// One answer of `log`: whole entries, as `eukhe log` prints them, up to
/// `cap` bytes.
#[derive(Debug)]
pub struct LogPage {
    cap: usize,
    text: TextLog,
    out: Vec<u8>,
    /// The last entry shown (whole or cut).
    pub last_seq: Option<u64>,
    /// Entries were left for a later page.
    pub more: bool,
    /// The one entry shown cut: alone it was longer than the cap.
    pub cut: Option<u64>,
}

impl LogPage {
    /// An empty page of at most `cap` bytes.
    pub fn new(cap: usize) -> LogPage {
        LogPage {
            cap,
            text: TextLog::new(false),
            out: Vec::new(),
            last_seq: None,
            more: false,
            cut: None,
        }
    }

    /// Add `entry` if it fits; false when the page is full (the entry is
    /// not on it, unless it is the page's first and is shown cut).
    pub fn offer(&mut self, entry: &Entry) -> bool {
        let mut rendered = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.text.write(&mut rendered, entry);
        if self.out.len() + rendered.len() <= self.cap {
            self.out.extend_from_slice(&rendered);
            self.last_seq = Some(entry.seq);
            return true;
        }
        self.more = true;
        if self.out.is_empty() {
            self.out.extend_from_slice(&rendered[..self.cap]);
            // The cut ends a line, so whatever follows starts on its own.
            if !self.out.ends_with(b"\n") {
                self.out.push(b'\n');
            }
            self.last_seq = Some(entry.seq);
            self.cut = Some(entry.seq);
        }
        false
    }

    /// The page as text (bytes that are not UTF-8 shown as U+FFFD).
    pub fn text(&mut self) -> String {
        let _ = self.text.end_open_line(&mut self.out);
        String::from_utf8_lossy(&self.out).into_owned()
    }
}

/// How to read on after a `log` page: the arguments for the next call.
pub fn read_on(session: &str, page: &LogPage, run: Option<u64>) -> Option<String> {
    let last = page.last_seq?;
    if !page.more {
        return None;
    }
    let run = run.map(|run| format!(", run={run}")).unwrap_or_default();
    let mut hint = format!(
        "[this answer stops at the {OUTPUT_CAP_BYTES}-byte cap; read on with `log` \
         session={session}{run}, since={last}]"
    );
    if let Some(cut) = page.cut {
        hint += &format!(
            "\n[entry {cut} alone is longer than the cap and is cut; `eukhe log {session} \
             --raw N` in a shell prints an input's output whole]"
        );
    }
    Some(hint)
}

/// What stands where `bash` output was left out.
pub fn bash_gap(session: &str, bash: u64) -> String {
    format!("all of it is in the transcript: `log` session={session}, run={bash}")
}

/// The last line of a `bash` answer: how the command ended, or that it
/// still runs and how to follow it.
pub fn bash_trailer(
    session: &str,
    bash: u64,
    status: Option<i32>,
    cut_short: Option<&str>,
    waited_ms: u64,
) -> String {
    match (status, cut_short) {
        (_, Some(why)) => format!("[bash {bash}: {why}]"),
        (Some(status), None) => format!("[bash {bash} exited {status}]"),
        (None, None) => format!(
            "[bash {bash} is still running after {waited_ms} ms; its output goes on into the \
             session's transcript: read it with `log` session={session}, run={bash}; stop it \
             with `cancel` session={session}, run={bash}]"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::EntryBody;

    #[test]
    fn capped_output_keeps_the_first_and_last_halves_and_counts_the_rest() {
        let mut output = CappedOutput::new(10);
        output.push(Stream::Stdout, b"0123");
        output.push(Stream::Stdout, b"456789abcdefghij");
        output.push(Stream::Stdout, b"XYZ");
        assert!(output.truncated());
        assert_eq!(
            output.text("see log"),
            "01234\n[... 13 bytes left out: see log ...]\nijXYZ\n"
        );
        let mut small = CappedOutput::new(64);
        small.push(Stream::Stdout, b"ok\n");
        small.push(Stream::Stderr, b"bad\n");
        assert!(!small.truncated());
        assert_eq!(small.text("-"), "ok\n[stderr] bad\n");
    }

    #[test]
    fn capped_output_counts_every_byte_once() {
        let mut output = CappedOutput::new(64);
        let mut total = 0u64;
        for chunk in 0..50u8 {
            let data = vec![b'a' + chunk % 26; usize::from(chunk) * 3];
            total += data.len() as u64;
            output.push(Stream::Stdout, &data);
        }
        assert_eq!(
            output.head.len() as u64 + output.tail.len() as u64 + output.left_out,
            total
        );
        assert_eq!(output.head.len() + output.tail.len(), 64);
    }

    fn output(seq: u64, text: &str) -> Entry {
        Entry {
            seq,
            at_ms: 0,
            body: EntryBody::Output {
                input: Some(1),
                stream: Stream::Stdout,
                data: text.as_bytes().to_vec().into(),
                spool_end: None,
                bash: None,
            },
        }
    }

    #[test]
    fn a_log_page_holds_whole_entries_and_says_where_to_read_on() {
        let mut page = LogPage::new(12);
        assert!(page.offer(&output(4, "12345\n")));
        assert!(page.offer(&output(5, "abcde\n")));
        assert!(!page.offer(&output(6, "more\n")));
        assert_eq!(page.text(), "12345\nabcde\n");
        assert_eq!(page.last_seq, Some(5));
        let hint = read_on("s", &page, Some(1)).unwrap();
        assert!(hint.contains("session=s, run=1, since=5"), "{hint}");
        let mut whole = LogPage::new(100);
        assert!(whole.offer(&output(1, "all\n")));
        assert_eq!(read_on("s", &whole, None), None);
    }

    #[test]
    fn an_entry_longer_than_the_cap_is_shown_cut_and_passed() {
        let mut page = LogPage::new(4);
        assert!(!page.offer(&output(9, "0123456789\n")));
        assert_eq!(page.text(), "0123\n");
        assert_eq!((page.last_seq, page.cut), (Some(9), Some(9)));
        let hint = read_on("s", &page, None).unwrap();
        assert!(hint.contains("since=9") && hint.contains("--raw"), "{hint}");
    }
}
