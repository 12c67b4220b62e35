//! `eukhe log`: a session's transcript as text, JSON or exact bytes; with
//! `--follow`, then live entries, riding through a lost worker or daemon.
//! Also how `send --wait` and `bash` finish when their connection drops:
//! they follow their input in the transcript.

use std::cell::Cell;
use std::io::Write;
use std::process::ExitCode;
use std::rc::Rc;

use super::attach::{open, within_relaunch};
use super::cli::unexpected;
use super::connect::{connect, Client};
use super::error::ClientError;
use super::render::{JsonArray, TextLog};
use super::stdout;
use crate::laws::replace::ClientStart;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::session::entry::{LostOutput, Stream};
use crate::session::log_query::ends;
use crate::session::notices::damaged_region;
use crate::session::transcript::{input_of_lost_notice, Entry, EntryBody};

/// What `eukhe log` was asked for.
pub struct LogArgs {
    pub session: String,
    pub json: bool,
    pub tail: Option<u64>,
    pub since: Option<u64>,
    pub follow: bool,
    pub timestamps: bool,
    pub raw: Option<u64>,
    pub stream: Option<Stream>,
    pub window: super::windows::WindowFlags,
}

/// How entries are written.
enum Sink {
    Text(TextLog),
    /// `--json`: one array; with `--follow`, one entry per line.
    Json(Option<JsonArray>),
    /// `--raw N`: input N's output bytes, nothing else; what its notices
    /// said is missing from them.
    Raw(Option<Stream>, Vec<String>),
}

impl Sink {
    fn write(&mut self, out: &mut impl Write, entry: &Entry) -> std::io::Result<()> {
        match self {
            Sink::Text(text) => text.write(out, entry),
            Sink::Json(Some(array)) => array.push(out, &marked(entry)),
            Sink::Json(None) => {
                serde_json::to_writer(&mut *out, &marked(entry)).map_err(std::io::Error::other)?;
                out.write_all(b"\n")
            }
            Sink::Raw(only, missing) => match &entry.body {
                EntryBody::Output { stream, data, .. } if only.is_none_or(|s| s == *stream) => {
                    out.write_all(data)
                }
                // Among an input's own entries a notice says its output
                // is incomplete: bytes lost to damage or a full disk.
                EntryBody::Notice { text, .. } => {
                    missing.push(text.clone());
                    Ok(())
                }
                _ => Ok(()),
            },
        }
    }

    /// Why the bytes written are not the whole output, in one line.
    fn incomplete(&self, input: u64) -> Option<ClientError> {
        let Sink::Raw(_, missing) = self else {
            return None;
        };
        let first = missing.first()?;
        Some(ClientError::IncompleteOutput {
            input,
            first: first.clone(),
            more: missing.len() - 1,
        })
    }

    fn finish(self, out: &mut impl Write) -> std::io::Result<()> {
        match self {
            Sink::Text(mut text) => text.end_open_line(out),
            Sink::Json(Some(array)) => array.finish(out),
            _ => Ok(()),
        }
    }
}

/// `entry` as JSON, marked `"lost"` when it stands for what is lost:
/// damaged transcript bytes (where and how many) or an input's output
/// bytes (whose).
fn marked(entry: &Entry) -> serde_json::Value {
    let mut value = serde_json::to_value(entry).unwrap_or_default();
    if let EntryBody::Notice { text, .. } = &entry.body {
        let lost = match (damaged_region(text), input_of_lost_notice(text)) {
            (Some((offset, bytes)), _) => {
                Some(serde_json::json!({ "transcript_offset": offset, "bytes": bytes }))
            }
            (None, Some(input)) => Some(serde_json::json!({ "input": input })),
            (None, None) => None,
        };
        if let (Some(lost), Some(object)) = (lost, value.as_object_mut()) {
            object.insert("lost".into(), lost);
        }
    }
    value
}

/// `eukhe log`.
pub async fn log(args: LogArgs) -> Result<ExitCode, ClientError> {
    let request = SessionRequest::Log {
        tail: args.tail,
        input: args.raw,
        after: args.since,
        follow: args.follow,
    };
    let mut client = open(&args.session, ClientStart::Log, request).await?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut sink = match (args.raw, args.json) {
        (Some(_), _) => Sink::Raw(args.stream, Vec::new()),
        (None, true) if args.follow => Sink::Json(None),
        (None, true) => Sink::Json(Some(JsonArray::start(&mut out).map_err(stdout::failed)?)),
        (None, false) => Sink::Text(TextLog::new(args.timestamps)),
    };
    if !args.follow {
        loop {
            match client.receive().await? {
                Response::Entry(entry) => sink.write(&mut out, &entry).map_err(stdout::failed)?,
                Response::Replayed => break,
                other => return unexpected(other),
            }
        }
        let incomplete = args.raw.and_then(|input| sink.incomplete(input));
        sink.finish(&mut out).map_err(stdout::failed)?;
        out.flush().map_err(stdout::failed)?;
        return complete_or(incomplete);
    }
    // Following: flushed entry by entry; a dropped connection is made
    // again, asking for what came after the last entry written.
    let mut last = args.since;
    let mut pending = None;
    loop {
        let response = match pending.take() {
            Some(first) => Ok(first),
            None => client.receive().await,
        };
        match response {
            Ok(Response::Entry(entry)) => {
                last = Some(entry.seq);
                sink.write(&mut out, &entry).map_err(stdout::failed)?;
                out.flush().map_err(stdout::failed)?;
                if let Some(input) = args.raw.filter(|&input| ends(&entry, input)) {
                    return complete_or(sink.incomplete(input));
                }
            }
            Ok(Response::Replayed) => {}
            Ok(other) => return unexpected(other),
            Err(_) => {
                let request = SessionRequest::Log {
                    tail: if last.is_none() { args.tail } else { None },
                    input: args.raw,
                    after: last,
                    follow: true,
                };
                let (again, first) = reopen(&args.session, request).await?;
                client = again;
                pending = Some(first);
            }
        }
    }
}

/// Success, unless what was written is `incomplete`.
fn complete_or(incomplete: Option<ClientError>) -> Result<ExitCode, ClientError> {
    match incomplete {
        Some(incomplete) => Err(incomplete),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Connect again and send `request` until the session answers it, within
/// `CLIENT_RELAUNCH_WITHIN_MS`; the connection and its first answer. An
/// error answer is tried again as a refused connection is: the daemon may
/// not have seen the lost worker end yet, and answers that it cannot
/// reach it until the next one runs.
pub(super) async fn reopen(
    session: &str,
    request: SessionRequest,
) -> Result<(Client, Response), ClientError> {
    reopen_as(session, None, request).await
}

/// As [`reopen`], sending `before` (which answers nothing) first.
async fn reopen_as(
    session: &str,
    before: Option<SessionRequest>,
    request: SessionRequest,
) -> Result<(Client, Response), ClientError> {
    within_relaunch(|| {
        let (before, request) = (before.clone(), request.clone());
        async move {
            let mut client = match before {
                None => open(session, ClientStart::Reattach, request).await?,
                Some(before) => {
                    let mut client = open(session, ClientStart::Reattach, before).await?;
                    client
                        .send(&Request::Session {
                            session: session.to_string(),
                            request,
                        })
                        .await?;
                    client
                }
            };
            match client.receive().await? {
                Response::Error { message } => Err(refusal(session, message).await),
                first => Ok((client, first)),
            }
        }
    })
    .await
    .map_err(|e| match e {
        gone @ ClientError::Gone(_) => gone,
        e => e.within(format!(
            "lost the session {session} and could not reach it again within a minute"
        )),
    })
}

/// The daemon's refusal `message` while `session` is followed: final
/// (`Gone`) when the daemon no longer lists the session (it was removed;
/// retrying would only wait out the minute), else one to try again.
pub(super) async fn refusal(session: &str, message: String) -> ClientError {
    let listed = match connect(ClientStart::Reattach).await {
        Ok(mut client) => match client.ask(Request::List).await {
            Ok(Response::Sessions { sessions }) => sessions
                .iter()
                .any(|s| s.id == session || s.name == session),
            _ => true,
        },
        Err(_) => true,
    };
    if listed {
        ClientError::Daemon { message }
    } else {
        ClientError::Gone(session.to_string())
    }
}

/// Print a run's or a user bash's output as it comes and end with its
/// status (`send --wait`, `bash`). If the connection drops (a worker or
/// the daemon lost), the input goes on in the session: follow it in the
/// transcript, leaving out the bytes already printed.
pub async fn stream_until_exit(
    client: &mut Client,
    session: &str,
    wait: bool,
) -> Result<ExitCode, ClientError> {
    if !wait {
        return match client.receive().await? {
            Response::Queued { input } => {
                stdout::outln!("queued as run {input}")?;
                Ok(ExitCode::SUCCESS)
            }
            other => unexpected(other),
        };
    }
    follow_to_exit(client, session, &mut AnnouncedRun).await
}

/// Print the followed input's output as it comes to `sink` and end with
/// its status.
async fn follow_to_exit<S: OutputSink>(
    client: &mut Client,
    session: &str,
    sink: &mut S,
) -> Result<ExitCode, ClientError> {
    let end = output_until_end(client, session, None, sink).await?;
    if let Some(why) = &end.cut_short {
        eprintln!("eukhe: {why}");
    }
    Ok(exit_code(end.status))
}

/// A shell's status for a command that SIGINT ended: what `bash` exits
/// with when a second Ctrl-C stops it waiting.
const INTERRUPTED: u8 = 130;

/// `bash`: as [`stream_until_exit`], and Ctrl-C cancels the command in the
/// session (SIGINT to its process group, then SIGTERM and SIGKILL after
/// the cancel grace), whose end then comes as any end does; a second
/// Ctrl-C (or one before the session numbered the command) stops waiting.
pub async fn stream_bash_until_exit(
    client: &mut Client,
    session: &str,
    remote: bool,
) -> Result<ExitCode, ClientError> {
    use tokio::signal::unix::{signal, SignalKind};
    // A client started with SIGINT ignored (a background job of a script)
    // keeps ignoring it, as a shell's commands do.
    let mut interrupts = match sigint_ignored() {
        true => None,
        false => Some(
            signal(SignalKind::interrupt()).map_err(ClientError::system("cannot catch Ctrl-C"))?,
        ),
    };
    // A remote client that leaves hangs up its command itself.
    let mut leaving = super::remote_bash::Leaving::watch(session, remote)?;
    let number = Rc::new(Cell::new(None));
    let mut sink = NumberedTerminal {
        number: number.clone(),
        remote,
    };
    let follow = output_until_end(client, session, None, &mut sink);
    tokio::pin!(follow);
    let mut cancelling = false;
    let end = loop {
        let interrupted = async {
            match &mut interrupts {
                Some(interrupts) => interrupts.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            end = &mut follow => break end,
            _ = interrupted => match number.get() {
                Some(input) if !cancelling => {
                    cancelling = true;
                    eprintln!("eukhe: cancelling bash {input} (Ctrl-C again stops waiting)");
                    // Not reaching the daemon this moment ends nothing:
                    // the command's end is still followed.
                    if let Err(e) = cancel_input(session, input).await {
                        eprintln!("eukhe: cannot cancel bash {input}: {e}");
                    }
                }
                _ => {
                    leaving.hang_up(number.get()).await;
                    return Ok(ExitCode::from(INTERRUPTED));
                }
            },
            signal = leaving.signalled() => {
                leaving.hang_up(number.get()).await;
                super::remote_bash::die_of(signal);
            }
        }
    };
    let end = match end {
        // Only a remote client's standard output closes here: it hangs up
        // its command, then dies of SIGPIPE as a local one does at once.
        Err(ClientError::Stdout(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            leaving.hang_up(number.get()).await;
            super::remote_bash::die_of(libc::SIGPIPE);
        }
        end => end?,
    };
    if let Some(why) = &end.cut_short {
        eprintln!("eukhe: {why}");
    }
    Ok(exit_code(end.status))
}

/// Whether this process started with SIGINT ignored.
fn sigint_ignored() -> bool {
    let mut current = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: sigaction(2) with no new action only reads the current one
    // into `current`, which is valid for writes.
    let read = unsafe { libc::sigaction(libc::SIGINT, std::ptr::null(), current.as_mut_ptr()) };
    // SAFETY: zeroed is a valid sigaction, and a successful call filled it.
    read == 0 && unsafe { current.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Cancel input `input` of `session`; one that has just ended is no
/// failure (its end is on its way).
async fn cancel_input(session: &str, input: u64) -> Result<(), ClientError> {
    let request = Request::Session {
        session: session.to_string(),
        request: SessionRequest::CancelInput { input },
    };
    match connect(ClientStart::Cancel).await?.ask(request).await? {
        Response::Cancelled { .. } | Response::Error { .. } => Ok(()),
        other => unexpected(other),
    }
}

/// Where a followed input's output goes: the terminal (`bash`, `send
/// --wait`) or a buffer (`eukhe mcp`).
pub(crate) trait OutputSink {
    /// The session numbered the input (its `Queued` answer).
    fn numbered(&mut self, _input: u64) {}

    /// The input is this remote client's user bash: after a dropped
    /// connection it follows it again as its client (`Rejoin`).
    fn rejoins(&self) -> bool {
        false
    }

    /// Bytes the input wrote to `stream`, each byte once.
    fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), ClientError>;

    /// Bytes as `write`'s, from the spool record that ends at `end`.
    fn write_at(&mut self, stream: Stream, data: &[u8], _end: u64) -> Result<(), ClientError> {
        self.write(stream, data)
    }
}

/// This process's standard output and error.
struct Terminal;

/// The terminal, for `send --wait`: the run's number on standard error
/// as it is queued, as plain `send` prints it, so a script can read the
/// run again (`log --raw N`).
struct AnnouncedRun;

impl OutputSink for AnnouncedRun {
    fn numbered(&mut self, input: u64) {
        eprintln!("eukhe: queued as run {input}");
    }

    fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), ClientError> {
        Terminal.write(stream, data)
    }
}

/// The terminal, keeping the number the session gave the input (`bash`).
struct NumberedTerminal {
    number: Rc<Cell<Option<u64>>>,
    /// The client is remote: a closed standard output is returned (its
    /// command is hung up first), not died of at once.
    remote: bool,
}

impl OutputSink for NumberedTerminal {
    fn numbered(&mut self, input: u64) {
        self.number.set(Some(input));
    }

    fn rejoins(&self) -> bool {
        self.remote
    }

    fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), ClientError> {
        match (self.remote, stream) {
            (true, Stream::Stdout) => stdout::write_all_or_closed(data),
            _ => Terminal.write(stream, data),
        }
    }
}

impl OutputSink for Terminal {
    fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), ClientError> {
        match stream {
            Stream::Stdout => stdout::write_all(data),
            Stream::Stderr => {
                let _ = std::io::stderr().write_all(data);
                Ok(())
            }
        }
    }
}

/// How an input a client followed ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InputEnd {
    /// Its exit status (255 when it was interrupted or withdrawn; eukhe's
    /// own failure, 125, when output it wrote could not be kept).
    pub status: i32,
    /// Why it ended without running to its end, or why its output is
    /// incomplete, as one line.
    pub cut_short: Option<String>,
}

impl InputEnd {
    /// The command exited `status`, having written `lost` bytes that could
    /// not be kept (told live or read from its end in the transcript).
    fn exited(status: i32, lost: Option<&LostOutput>) -> InputEnd {
        match lost {
            None => InputEnd {
                status,
                cut_short: None,
            },
            // Output the command wrote could not be kept (a full state
            // disk): eukhe's own failure, so a script never takes what it
            // got for all of the output.
            Some(lost) => InputEnd {
                status: i32::from(super::cli::EUKHE_FAILED),
                cut_short: Some(format!(
                    "the command exited {status}, but {} bytes of its output could not be \
                     kept: {}; the output above is incomplete",
                    lost.bytes, lost.error
                )),
            },
        }
    }
}

/// Follow the input whose request was sent on `client` (numbered `input`
/// when its `Queued` answer was already read) until it ends, writing its
/// output to `sink`. If the connection drops, the input goes on in the
/// session: it is followed in the transcript, each byte written once.
pub(crate) async fn output_until_end<S: OutputSink>(
    client: &mut Client,
    session: &str,
    mut input: Option<u64>,
    sink: &mut S,
) -> Result<InputEnd, ClientError> {
    let mut printed = Printed::new(sink);
    loop {
        let response = match client.receive().await {
            Ok(response) => response,
            Err(e) => match input {
                Some(input) => return follow_input(session, input, printed).await,
                None => return Err(e),
            },
        };
        match response {
            Response::Queued { input: queued } => {
                printed.sink.numbered(queued);
                input = Some(queued);
            }
            Response::Output { stream, data } => printed.live(stream, &data, None)?,
            Response::OutputAt { stream, data, end } => printed.live(stream, &data, Some(end))?,
            Response::Exit {
                status,
                cut_short: Some(why),
                ..
            } => {
                return Ok(InputEnd {
                    status,
                    cut_short: Some(why),
                })
            }
            Response::Exit { status, lost, .. } => {
                return Ok(InputEnd::exited(status, lost.as_ref()))
            }
            other => return unexpected(other),
        }
    }
}

/// How many bytes of each stream were written to the sink.
struct Printed<'a, S> {
    stdout: u64,
    stderr: u64,
    sink: &'a mut S,
}

impl<'a, S: OutputSink> Printed<'a, S> {
    fn new(sink: &'a mut S) -> Self {
        Printed {
            stdout: 0,
            stderr: 0,
            sink,
        }
    }

    /// Write live output (ending at spool offset `end`, when it says):
    /// all of it follows what was written.
    fn live(&mut self, stream: Stream, data: &[u8], end: Option<u64>) -> Result<(), ClientError> {
        let done = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        *done += data.len() as u64;
        match end {
            Some(end) => self.sink.write_at(stream, data, end),
            None => self.sink.write(stream, data),
        }
    }

    /// Write what of `data` (which starts at byte `at` of its stream) was
    /// not written yet.
    fn write(&mut self, stream: Stream, data: &[u8], at: u64) -> Result<(), ClientError> {
        let done = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        let end = at + data.len() as u64;
        if end <= *done {
            return Ok(());
        }
        let fresh = &data[(*done - at.min(*done)) as usize..];
        *done = end;
        self.sink.write(stream, fresh)
    }
}

/// Follow input `input` in the transcript until its end (255 when it was
/// interrupted or withdrawn).
async fn follow_input<S: OutputSink>(
    session: &str,
    input: u64,
    mut printed: Printed<'_, S>,
) -> Result<InputEnd, ClientError> {
    let request = SessionRequest::Log {
        tail: None,
        input: Some(input),
        after: None,
        follow: true,
    };
    // A remote bash client takes its command back first, so the hang-up
    // its dropped connection would bring is off.
    let rejoin = printed
        .sink
        .rejoins()
        .then_some(SessionRequest::Rejoin { input });
    loop {
        let (mut client, first) = reopen_as(session, rejoin.clone(), request.clone()).await?;
        // Each connection replays the input's entries from its start.
        let (mut stdout_at, mut stderr_at) = (0u64, 0u64);
        // Why eukhe ended it, when the transcript says so before its end.
        let mut said = None;
        let mut pending = Some(first);
        loop {
            let response = match pending.take() {
                Some(first) => first,
                None => match client.receive().await {
                    Ok(response) => response,
                    Err(_) => break,
                },
            };
            let entry = match response {
                Response::Entry(entry) => entry,
                Response::Replayed => continue,
                other => return unexpected(other),
            };
            match &entry.body {
                EntryBody::Output { stream, data, .. } => {
                    let at = match stream {
                        Stream::Stdout => &mut stdout_at,
                        Stream::Stderr => &mut stderr_at,
                    };
                    printed.write(*stream, data, *at)?;
                    *at += data.len() as u64;
                }
                body => {
                    if let Some(end) = end_of_input(body, input, &mut said) {
                        return end;
                    }
                }
            }
        }
    }
}

/// What `body`, an entry of input `input` other than its output, means to
/// a client following it: its end, if it is one. `said` keeps a notice of
/// the input (why eukhe ended it) for the end that follows.
pub(super) fn end_of_input(
    body: &EntryBody,
    input: u64,
    said: &mut Option<String>,
) -> Option<Result<InputEnd, ClientError>> {
    let cut_short = |why: String| {
        Some(Ok(InputEnd {
            status: 255,
            cut_short: Some(why),
        }))
    };
    match body {
        EntryBody::Notice { text, .. } => {
            *said = Some(text.clone());
            None
        }
        EntryBody::BashFinished { status: 255, .. } if said.is_some() => {
            cut_short(said.take().unwrap_or_default())
        }
        EntryBody::RunFinished {
            status,
            lost_output,
            ..
        }
        | EntryBody::BashFinished {
            status,
            lost_output,
            ..
        } => Some(Ok(InputEnd::exited(*status, lost_output.as_ref()))),
        EntryBody::RunInterrupted { .. } => {
            cut_short(format!("run {input} was interrupted (its kernel is gone)"))
        }
        EntryBody::Withdrawn { .. } => Some(Err(ClientError::Withdrawn(input))),
        _ => None,
    }
}

pub(crate) fn exit_code(status: i32) -> ExitCode {
    ExitCode::from(status.clamp(0, 255) as u8)
}
