//! Output windows: a part of one run's output (`log --raw N --head`,
//! `--tail`, `--bytes`, `--grep`) and the whole output's size, read from
//! the job's output file through its index (`index`), so a window reads
//! what it shows and about a block more, whatever the output's size. A
//! grep reads the output from its start until its max count.
//!
//! An output with no file (small, its bytes all kept in the transcript)
//! or a damaged one is read from the transcript, as `log --raw` reads it:
//! slower, never wrong.

pub mod filter;
pub mod index;
mod needles;
mod records;
pub mod select;
mod skim;

use std::path::Path;

use regex::bytes::Regex;

use crate::protocol::entry::Stream;
use crate::protocol::window::{OutputWindow, WindowSummary};
use crate::session::entry::EntryBody;
use crate::session::log_query::{self, LogQuery};
use crate::session::spool::{open_job, SpoolError, OUTPUT_DIR, SPOOL_DIR};

use index::{Mark, BLOCK_BYTES};
use records::Records;
use select::{Bytes, Collected, Flow, Grep, Head, Part, Place, Select, Tail};

/// What a window request asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowAsk {
    /// The input (run) whose output it is.
    pub input: u64,
    /// Only this stream, or both as they came.
    pub stream: Option<Stream>,
    /// Which part.
    pub window: OutputWindow,
}

impl WindowAsk {
    /// The window `request` asks for, if it is a `Window` request.
    pub fn of(request: crate::protocol::message::SessionRequest) -> Option<WindowAsk> {
        match request {
            crate::protocol::message::SessionRequest::Window {
                input,
                stream,
                window,
            } => Some(WindowAsk {
                input,
                stream,
                window,
            }),
            _ => None,
        }
    }
}

/// A window's answer: its parts, then the whole output's size.
#[derive(Debug, Default)]
pub struct Answer {
    /// The parts shown, in order.
    pub parts: Vec<Part>,
    /// The whole output's size and what was shown of it.
    pub summary: WindowSummary,
}

/// Why a window cannot be answered: its message is the user's line.
#[derive(Debug, thiserror::Error)]
pub enum WindowError {
    /// A grep's pattern is no regex.
    #[error("--grep {pattern:?} is not a regex: {why}")]
    BadRegex {
        /// The pattern.
        pattern: String,
        /// The regex parser's words.
        why: String,
    },
    /// The session never numbered the input.
    #[error("{}", log_query::no_input(*.0))]
    NoInput(u64),
    /// The transcript, read for an output without a file of its own.
    #[error("cannot read the transcript: {0}")]
    Transcript(#[from] crate::session::SessionError),
}

/// The job whose output file holds input `input`'s output, if it has
/// one: run N's job is `rN`, user bash N's `bN-...` (numbers are never
/// given twice, so one such file at most).
fn job_of_input(session: &Path, input: u64) -> Option<String> {
    let run = format!("r{input}");
    if [OUTPUT_DIR, SPOOL_DIR, OUTPUT_DIR]
        .iter()
        .any(|place| session.join(place).join(format!("{run}.out")).exists())
    {
        return Some(run);
    }
    let bash = format!("b{input}-");
    [SPOOL_DIR, OUTPUT_DIR, SPOOL_DIR].iter().find_map(|place| {
        let names = std::fs::read_dir(session.join(place)).ok()?;
        names.flatten().find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let job = name.strip_suffix(".out")?;
            (job == run || job.starts_with(&bash)).then(|| job.to_string())
        })
    })
}

/// Answer `ask` from the session directory `session` (whose transcript is
/// `transcript`).
pub fn answer(session: &Path, transcript: &Path, ask: &WindowAsk) -> Result<Answer, WindowError> {
    if let OutputWindow::Grep { pattern, .. } = &ask.window {
        regex(pattern)?;
    }
    let job = job_of_input(session, ask.input).unwrap_or_else(|| format!("r{}", ask.input));
    let mut notes = Vec::new();
    match open_job(session, &job) {
        Ok(file) => match from_file(session, &job, &file, ask, true) {
            Ok(answer) => return Ok(answer),
            Err(why) => match from_file(session, &job, &file, ask, false) {
                Ok(mut answer) => {
                    let note = format!("its index does not fit its output ({why}): read it all");
                    answer.summary.notes.insert(0, note);
                    return Ok(answer);
                }
                Err(why) => notes.push(format!(
                    "its output file is damaged ({why}): read the transcript"
                )),
            },
        },
        Err(SpoolError::Missing { .. }) => {}
        Err(e) => notes.push(format!("{e}: read the transcript")),
    }
    let mut answer = from_transcript(transcript, ask)?;
    notes.append(&mut answer.summary.notes);
    answer.summary.notes = notes;
    Ok(answer)
}

/// The regex of a grep.
pub fn regex(pattern: &str) -> Result<Regex, WindowError> {
    Regex::new(pattern).map_err(|e| WindowError::BadRegex {
        pattern: pattern.to_string(),
        why: e
            .to_string()
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string(),
    })
}

/// The selector of `window`, fed from `at` on.
fn selector(window: &OutputWindow, at: Place) -> Box<dyn Select> {
    match window {
        OutputWindow::Head { lines } => Box::new(Head::new(*lines)),
        OutputWindow::Tail { lines } => Box::new(Tail::new(at, *lines)),
        OutputWindow::Bytes { start, end } => Box::new(Bytes::new(at, *start, *end)),
        OutputWindow::Grep {
            pattern,
            context,
            max_count,
        } => Box::new(Grep::new(
            regex(pattern).expect("checked first"),
            *context,
            *max_count,
        )),
    }
}

/// Lines in an output of `counts`: a last line without its newline counts.
fn lines(counts: index::Counts) -> u64 {
    counts.newlines + u64::from(counts.bytes > 0 && !counts.ends_line)
}

/// The place a mark is at in `stream`.
fn place(mark: &Mark, stream: Option<Stream>) -> Place {
    let counts = mark.of(stream);
    Place {
        offset: counts.bytes,
        line: counts.newlines + 1,
    }
}

/// The last mark from which `window` can be fed, given the output's lines.
fn start_mark(marks: &[Mark], stream: Option<Stream>, window: &OutputWindow, total: u64) -> Mark {
    let fits = |mark: &Mark| {
        let c = mark.of(stream);
        match window {
            // Before the stream's first byte: only the other one's.
            OutputWindow::Head { .. } | OutputWindow::Grep { .. } => c.bytes == 0,
            OutputWindow::Bytes { start, .. } => c.bytes <= *start,
            OutputWindow::Tail { lines } => {
                let before = total.saturating_sub(*lines);
                c.newlines < before || (c.newlines == before && c.ends_line)
            }
        }
    };
    marks
        .iter()
        .rev()
        .find(|m| fits(m))
        .copied()
        .unwrap_or_default()
}

fn from_file(
    session: &Path,
    job: &str,
    file: &std::fs::File,
    ask: &WindowAsk,
    use_index: bool,
) -> Result<Answer, records::RecordsError> {
    let len = file.metadata()?.len();
    let loaded = match use_index {
        true => index::load(session, job, len),
        false => index::Loaded::default(),
    };
    let mut marks = vec![Mark::default()];
    marks.extend(loaded.marks.iter().copied());
    let stream = ask.stream;
    let mut records = Records::new(file, len);
    let mut end = *marks.last().expect("one at least");
    records.each(end.offset, |s, data, at| {
        end.add(s, data, at);
        Flow::More
    })?;
    let total = end.of(stream);
    let total_lines = lines(total);
    let collected = match skimmed(session, job, (&marks, records.end()), ask, &mut records)? {
        Some(collected) => collected,
        None => {
            let from = start_mark(&marks, stream, &ask.window, total_lines);
            let mut select = selector(&ask.window, place(&from, stream));
            records.each(from.offset, |s, data, _| match stream {
                Some(only) if only != s => Flow::More,
                _ => select.feed(data),
            })?;
            select.finish()
        }
    };
    let mut notes = Vec::new();
    if let Some(damage) = loaded.damage.filter(|_| use_index && len > BLOCK_BYTES) {
        notes.push(format!("{damage}: read its output from there"));
    }
    Ok(summed(ask, collected, total, records.read, notes))
}

/// A grep's lines read through the output's filter (`skim`), when the
/// regex needs literals and the filter has blocks; else None.
fn skimmed(
    session: &Path,
    job: &str,
    (marks, end): (&[Mark], u64),
    ask: &WindowAsk,
    records: &mut Records,
) -> Result<Option<Collected>, records::RecordsError> {
    let OutputWindow::Grep {
        pattern,
        context,
        max_count,
    } = &ask.window
    else {
        return Ok(None);
    };
    let Some(needles) = needles::needles(pattern) else {
        return Ok(None);
    };
    let starts: Vec<u64> = marks.iter().map(|m| m.offset).collect();
    let filter = filter::Filter::of(filter::load(session, job).0, &starts);
    if filter.good() == 0 {
        return Ok(None);
    }
    let blocks = skim::Blocks {
        marks,
        end,
        stream: ask.stream,
    };
    let grep = Grep::new(regex(pattern).expect("checked first"), *context, *max_count);
    let (collected, _unread) = skim::grep(records, &blocks, &filter, &needles, (grep, *context))?;
    Ok(Some(collected))
}

/// The answer of `collected`, of an output of `total`.
fn summed(
    ask: &WindowAsk,
    collected: Collected,
    total: index::Counts,
    read_bytes: u64,
    mut notes: Vec<String>,
) -> Answer {
    if collected.long_lines > 0 {
        notes.push(format!(
            "{} lines longer than {} bytes were matched on their first {0} bytes",
            collected.long_lines,
            select::GREP_LINE_CAP_BYTES
        ));
    }
    let shown_lines = match (collected.parts.first(), collected.parts.last()) {
        (Some(first), Some(last)) => {
            let body = last.data.strip_suffix(b"\n").unwrap_or(&last.data);
            let last_line = last.start.line + memchr::memchr_iter(b'\n', body).count() as u64;
            Some((first.start.line, last_line))
        }
        _ => None,
    };
    let shown_bytes = match (collected.parts.first(), collected.parts.last()) {
        (Some(first), Some(last)) => Some((
            first.start.offset,
            last.start.offset + last.data.len() as u64,
        )),
        _ => None,
    };
    Answer {
        parts: collected.parts,
        summary: WindowSummary {
            input: ask.input,
            bytes: total.bytes,
            lines: lines(total),
            shown_lines,
            shown_bytes,
            matches: collected.matches,
            stopped: collected.stopped,
            read_bytes,
            notes,
        },
    }
}

/// The window read from the transcript: every output entry of the input.
fn from_transcript(transcript: &Path, ask: &WindowAsk) -> Result<Answer, WindowError> {
    let query = LogQuery {
        input: Some(ask.input),
        ..LogQuery::default()
    };
    let mut select = selector(&ask.window, Place::START);
    let mut flow = Flow::More;
    let mut total = index::Counts::default();
    let mut found = false;
    let mut read = 0;
    let mut notes = Vec::new();
    for entry in log_query::entries(transcript, query)? {
        found = true;
        match &entry.body {
            EntryBody::Output { stream, data, .. }
                if ask.stream.is_none_or(|only| only == *stream) =>
            {
                read += data.len() as u64;
                if let Some(&last) = data.last() {
                    total.bytes += data.len() as u64;
                    total.newlines += memchr::memchr_iter(b'\n', data).count() as u64;
                    total.ends_line = last == b'\n';
                }
                if flow == Flow::More {
                    flow = select.feed(data);
                }
            }
            EntryBody::Notice { text, .. } => notes.push(format!("incomplete: {text}")),
            _ => {}
        }
    }
    if !found {
        return Err(WindowError::NoInput(ask.input));
    }
    Ok(summed(ask, select.finish(), total, read, notes))
}

/// The most output bytes one frame of a window carries.
const FRAME_DATA_BYTES: usize = 512 << 10;

/// `answer` as the responses that carry it: each part's start and its
/// bytes as output frames, then the summary. Both streams asked for
/// together come as stdout.
pub fn responses(answer: Answer, stream: Option<Stream>) -> Vec<crate::protocol::Response> {
    use crate::protocol::Response;
    let stream = stream.unwrap_or(Stream::Stdout);
    let mut responses = Vec::new();
    for part in answer.parts {
        responses.push(Response::WindowPart(part.start));
        let data = bytes::Bytes::from(part.data);
        let mut at = 0;
        while at < data.len() {
            let end = (at + FRAME_DATA_BYTES).min(data.len());
            responses.push(Response::Output {
                stream,
                data: data.slice(at..end),
            });
            at = end;
        }
    }
    responses.push(Response::WindowEnd(answer.summary));
    responses
}

/// The answer to `ask` as the frames a client reads: the window's parts and
/// size, or one error line. It reads files: run it off an async thread.
pub fn answer_frames(
    session: &Path,
    transcript: &Path,
    ask: &WindowAsk,
) -> Vec<crate::protocol::Response> {
    match answer(session, transcript, ask) {
        Ok(answer) => responses(answer, ask.stream),
        Err(e) => vec![crate::protocol::Response::Error {
            message: e.to_string(),
        }],
    }
}

/// The line for a window whose reading thread failed.
pub fn failed(e: impl std::fmt::Display) -> crate::protocol::Response {
    crate::protocol::Response::Error {
        message: format!("the output window failed: {e}"),
    }
}
