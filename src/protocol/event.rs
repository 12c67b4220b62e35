//! The daemon's event stream (`eukhe events`, `eukhe top`): what happened
//! to which session, and when. The supervisor makes the session-level
//! events itself (created, removed, renamed, state changes, failures and
//! their restart verdicts) and relays the ones its workers report on their
//! control connections (runs, background jobs, notices, the latest output
//! line), stamping each with the session's id and current name.
//!
//! Like every message, unknown kinds and fields are refused, never ignored.

use serde::{Deserialize, Serialize};

use super::entry::{Entry, EntryBody};
use crate::laws::restart::RestartVerdict;

/// The longest text an event carries (a run's command, a notice, an output
/// line), in bytes: a subscriber's buffer holds a bounded number of events,
/// so each must be bounded too.
pub const EVENT_TEXT_MAX_BYTES: usize = 400;

/// One event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Wall-clock milliseconds when it happened.
    pub at_ms: u64,
    /// The session's id (none: an event of the daemon itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The session's name when the event was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What happened.
    pub event: EventKind,
    /// The event's cursor: the sequence number of the transcript entry it
    /// stands for (none: an event nothing stores, such as a state change).
    /// `eukhe events --since` and `eukhe wait --since` take it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventKind {
    /// A session was created, its shell in `cwd`.
    Created {
        /// The shell's first working directory.
        cwd: String,
    },
    /// A session was removed (`eukhe rm`).
    Removed,
    /// A session was renamed; `name` is the new name.
    Renamed {
        /// The name it had.
        from: String,
    },
    /// The session's state as `eukhe ls` shows it changed: running, busy,
    /// idle, restarting, given-up, saved, stopping, removing or damaged.
    State {
        /// The new state, as `ls` words it.
        state: String,
    },
    /// Input was queued as run `input`.
    RunQueued {
        /// The run's number.
        input: u64,
        /// The input, cut to [`EVENT_TEXT_MAX_BYTES`].
        text: String,
    },
    /// Run `input` started.
    RunStarted {
        /// The run's number.
        input: u64,
    },
    /// Run `input` ended.
    RunFinished {
        /// The run's number.
        input: u64,
        /// Its exit status.
        status: i32,
        /// The signal that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Whether `eukhe cancel` ended it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancelled: bool,
    },
    /// Run `input` was cut short: its kernel is gone.
    RunInterrupted {
        /// The run's number.
        input: u64,
    },
    /// Terminal run `input` waits for input (`laws::waiting`): its
    /// program is blocked reading its terminal, and quiet.
    WaitingForInput {
        /// The run's number (the user bash's, with `bash`).
        input: u64,
        /// A user bash (`eukhe bash --tty`), not a run.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bash: bool,
    },
    /// Terminal run `input`, which waited for input, took some (keys came,
    /// it wrote, or it ended).
    InputTaken {
        /// The run's number (the user bash's, with `bash`).
        input: u64,
        /// A user bash, not a run.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bash: bool,
    },
    /// Queued input `input` was withdrawn before it ran.
    Withdrawn {
        /// The input's number.
        input: u64,
    },
    /// Background jobs (processes runs left running) started: `count` run
    /// now.
    JobsStarted {
        /// Background jobs running now.
        count: u32,
    },
    /// Background jobs ended: `count` run now.
    JobsEnded {
        /// Background jobs running now.
        count: u32,
    },
    /// A kernel was started over the session's snapshot (restore number
    /// `restore`).
    Restored {
        /// The restore's number among the session's restores.
        restore: u32,
        /// The restore notice, as the transcript holds it.
        text: String,
    },
    /// A session resting on disk was brought back at the daemon's start
    /// (busy evidence, or a kernel that still lives).
    Revived {
        /// What showed the session had work.
        why: String,
    },
    /// Something the session says in its transcript.
    Notice {
        /// The notice, cut to [`EVENT_TEXT_MAX_BYTES`].
        text: String,
    },
    /// The session's kernel is gone (its worker fails with it).
    KernelFailed {
        /// How it ended, in words.
        why: String,
    },
    /// The session's worker failed; the restart budget's verdict.
    WorkerFailed {
        /// How it ended, in words.
        why: String,
        /// Restart after a pause, or give up.
        verdict: RestartVerdict,
    },
    /// The latest line of output, at most once per `EVENT_OUTPUT_LINE_MS`
    /// per session.
    Output {
        /// The line, cut to [`EVENT_TEXT_MAX_BYTES`].
        line: String,
    },
    /// This subscriber fell behind: `count` events were left out here.
    Dropped {
        /// How many events were left out.
        count: u64,
    },
    /// The daemon stops (`eukhe shutdown`, or a newer daemon replaces it).
    DaemonStopping {
        /// Why, in one line.
        message: String,
    },
}

impl Event {
    /// An event of the daemon itself (no session).
    pub fn daemon(at_ms: u64, event: EventKind) -> Event {
        Event {
            at_ms,
            id: None,
            name: None,
            event,
            seq: None,
        }
    }

    /// An event of session `id`, named `name`.
    pub fn session(at_ms: u64, id: &str, name: &str, event: EventKind) -> Event {
        Event {
            at_ms,
            id: Some(id.to_string()),
            name: Some(name.to_string()),
            event,
            seq: None,
        }
    }

    /// The same event, stamped with its transcript entry's `seq`.
    pub fn at_seq(self, seq: Option<u64>) -> Event {
        Event { seq, ..self }
    }

    /// The event as one line for a person (no time: the caller adds it).
    pub fn describe(&self) -> String {
        let who = match (&self.name, &self.id) {
            (Some(name), Some(id)) if name != id => format!("{name} ({id}): "),
            (_, Some(id)) => format!("{id}: "),
            _ => "daemon: ".to_string(),
        };
        let what = match &self.event {
            EventKind::Created { cwd } => format!("created in {cwd}"),
            EventKind::Removed => "removed".into(),
            EventKind::Renamed { from } => format!("renamed from {from}"),
            EventKind::State { state } => format!("state {state}"),
            EventKind::RunQueued { input, text } => format!("run {input} queued: {text}"),
            EventKind::RunStarted { input } => format!("run {input} started"),
            EventKind::RunFinished {
                input,
                status,
                signal,
                cancelled,
            } => {
                let mut text = format!("run {input} exited {status}");
                if let Some(signal) = signal {
                    text.push_str(&format!(" (signal {signal})"));
                }
                if *cancelled {
                    text.push_str(", cancelled");
                }
                text
            }
            EventKind::RunInterrupted { input } => {
                format!("run {input} interrupted: its kernel is gone")
            }
            EventKind::WaitingForInput { input, bash } => waiting(*input, *bash, true),
            EventKind::InputTaken { input, bash } => waiting(*input, *bash, false),
            EventKind::Withdrawn { input } => format!("input {input} withdrawn"),
            EventKind::JobsStarted { count } => {
                format!("background jobs started ({count} running)")
            }
            EventKind::JobsEnded { count } => format!("background jobs ended ({count} running)"),
            EventKind::Restored { restore, text } => format!("restore {restore}: {text}"),
            EventKind::Revived { why } => format!("revived: {why}"),
            EventKind::Notice { text } => format!("notice: {text}"),
            EventKind::KernelFailed { why } => format!("kernel failed: {why}"),
            EventKind::WorkerFailed { why, verdict } => match verdict {
                RestartVerdict::Restart {
                    pause_ms,
                    failures_in_window,
                } => format!(
                    "worker failed ({why}): restarting in {pause_ms} ms (failure {failures_in_window} in the window)"
                ),
                RestartVerdict::GiveUp { failures_in_window } => format!(
                    "worker failed ({why}): given up after {failures_in_window} failures in the window"
                ),
            },
            EventKind::Output { line } => format!("output: {line}"),
            EventKind::Dropped { count } => {
                format!("events dropped: {count} (this client fell behind)")
            }
            EventKind::DaemonStopping { message } => format!("stopping: {message}"),
        };
        format!("{who}{what}")
    }
}

/// A terminal run (or user bash, with `bash`) waits for input, or took it.
fn waiting(input: u64, bash: bool, waiting: bool) -> String {
    let job = if bash { "bash" } else { "run" };
    let what = if waiting {
        "waiting for input"
    } else {
        "input taken"
    };
    format!("{job} {input} {what}")
}

/// `text` cut to at most `EVENT_TEXT_MAX_BYTES`, at a character boundary.
pub fn bounded(text: &str) -> String {
    if text.len() <= EVENT_TEXT_MAX_BYTES {
        return text.to_string();
    }
    let mut end = EVENT_TEXT_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The event a stored transcript entry makes, if any. Output is not one:
/// its latest line goes out at a bounded rate instead (`latest_line`).
pub fn entry_event(entry: &Entry) -> Option<EventKind> {
    Some(match &entry.body {
        EntryBody::Input { input, text, .. } => EventKind::RunQueued {
            input: *input,
            text: bounded(text),
        },
        EntryBody::RunStarted { input } => EventKind::RunStarted { input: *input },
        EntryBody::RunFinished {
            input,
            status,
            signal,
            cancelled,
            ..
        } => EventKind::RunFinished {
            input: *input,
            status: *status,
            signal: *signal,
            cancelled: *cancelled,
        },
        EntryBody::RunInterrupted { input } => EventKind::RunInterrupted { input: *input },
        EntryBody::Withdrawn { input } => EventKind::Withdrawn { input: *input },
        EntryBody::Notice {
            text,
            restore: Some(restore),
            ..
        } => EventKind::Restored {
            restore: *restore,
            text: bounded(text),
        },
        EntryBody::Notice {
            text,
            restore: None,
            ..
        } => EventKind::Notice {
            text: bounded(text),
        },
        EntryBody::Output { .. }
        | EntryBody::Bash { .. }
        | EntryBody::BashFinished { .. }
        | EntryBody::ShellCommand { .. } => return None,
    })
}

/// The last non-blank line in the last 4 KiB of `data` (output bytes,
/// read as UTF-8 with replacement), without its indentation and control
/// characters, bounded; none when those bytes hold only blank lines.
pub fn latest_line(data: &[u8]) -> Option<String> {
    // Only the end is looked at: every output chunk passes here, on the
    // output's path, and a line is shown cut anyway.
    const WINDOW: usize = 4096;
    let window = &data[data.len().saturating_sub(WINDOW)..];
    // Zeros, the commonest blank output, are known at vector speed.
    if super::zeros::all_zero(window) {
        return None;
    }
    window
        .split(|&byte| byte == b'\n')
        .rev()
        // A line of ASCII blanks and control bytes alone (a run of zeros,
        // say) is passed over on its bytes, without building its text.
        .filter(|line| {
            !line
                .iter()
                .all(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        })
        .map(|line| {
            String::from_utf8_lossy(line).replace(|c: char| c.is_control() && c != '\t', "")
        })
        .find(|line| !line.trim().is_empty())
        .map(|line| bounded(line.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_unknown_fields_or_kinds_are_refused() {
        let event = Event::session(
            5,
            "abc",
            "build",
            EventKind::RunFinished {
                input: 2,
                status: 130,
                signal: Some(2),
                cancelled: true,
            },
        );
        let json = serde_json::to_string(&event).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), event);
        let extra = json.replacen("\"at_ms\"", "\"surprise\":1,\"at_ms\"", 1);
        assert!(serde_json::from_str::<Event>(&extra).is_err());
        let inner = json.replacen("\"input\"", "\"surprise\":1,\"input\"", 1);
        assert!(serde_json::from_str::<Event>(&inner).is_err());
        let kind = json.replace("run_finished", "run_exploded");
        assert!(serde_json::from_str::<Event>(&kind).is_err());
    }

    #[test]
    fn the_latest_line_is_the_last_non_blank_one_bounded() {
        assert_eq!(latest_line(b"one\ntwo\n\n"), Some("two".into()));
        assert_eq!(latest_line(b"partial"), Some("partial".into()));
        assert_eq!(latest_line(b"\n  \n"), None);
        assert_eq!(
            latest_line(b"done\n\0\0\x07\n"),
            Some("done".into()),
            "control only is blank"
        );
        assert_eq!(latest_line(b"a\x1b[1mb\r\n"), Some("a[1mb".into()));
        assert_eq!(latest_line(&[0; 8192]), None, "zeros are blank");
        let mut zeros_after = b"last words\n".to_vec();
        zeros_after.extend([0; 4000]);
        assert_eq!(latest_line(&zeros_after), Some("last words".into()));
        assert_eq!(
            latest_line(b"caf\xc3\xa9 \xff\n\xe2\x80\x83\n"),
            Some("caf\u{e9} \u{fffd}".into()),
            "invalid bytes read with replacement; a line of Unicode spaces is blank"
        );
        let long = "é".repeat(EVENT_TEXT_MAX_BYTES);
        let line = latest_line(long.as_bytes()).unwrap();
        assert!(line.len() <= EVENT_TEXT_MAX_BYTES + '…'.len_utf8());
    }

    #[test]
    fn a_worker_verdict_reads_for_a_person() {
        let event = Event::session(
            0,
            "abc",
            "abc",
            EventKind::WorkerFailed {
                why: "its worker ended".into(),
                verdict: RestartVerdict::Restart {
                    pause_ms: 250,
                    failures_in_window: 1,
                },
            },
        );
        assert_eq!(
            event.describe(),
            "abc: worker failed (its worker ended): restarting in 250 ms (failure 1 in the window)"
        );
    }

    #[test]
    fn waiting_for_input_reads_for_a_person_and_in_json() {
        let waits = EventKind::WaitingForInput {
            input: 3,
            bash: false,
        };
        let event = Event::session(0, "abc", "abc", waits);
        assert_eq!(event.describe(), "abc: run 3 waiting for input");
        let json = serde_json::to_string(&event.event).unwrap();
        assert_eq!(json, r#"{"kind":"waiting_for_input","input":3}"#);
        let taken = EventKind::InputTaken {
            input: 2,
            bash: true,
        };
        let event = Event::session(0, "abc", "abc", taken);
        assert_eq!(event.describe(), "abc: bash 2 input taken");
    }
}
