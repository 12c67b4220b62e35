//! How answers look: tables and transcripts for people, JSON for scripts.

use crate::protocol::message::{QueuedInput, SessionInfo, StatusInfo};
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
