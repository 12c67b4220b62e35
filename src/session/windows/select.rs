//! What a window keeps of an output fed to it forward, from a known place
//! (its byte offset and line number): the first lines, a byte range, the
//! last lines, the lines a regex matches with context. No I/O: bytes in,
//! parts out.

use std::collections::VecDeque;

use regex::bytes::Regex;

use crate::protocol::window::PartStart;

/// The most bytes one window answers with; a window that would hold more
/// stops there and says so.
pub const WINDOW_CAP_BYTES: usize = 16 << 20;

/// The longest line a grep matches whole; a longer one is matched on its
/// first this many bytes, and the answer says so.
pub const GREP_LINE_CAP_BYTES: usize = 16 << 20;

/// Whether to go on feeding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    More,
    /// Stop: the window has what it needs.
    Enough,
}

/// A part of the answer: where it starts and its bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Part {
    /// Where it starts.
    pub start: PartStart,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Where the next byte fed is: its offset and line number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its byte offset.
    pub offset: u64,
    /// Its line's number (from 1).
    pub line: u64,
}

impl Place {
    /// The output's start.
    pub const START: Place = Place { offset: 0, line: 1 };

    fn advance(&mut self, data: &[u8]) {
        self.offset += data.len() as u64;
        self.line += memchr::memchr_iter(b'\n', data).count() as u64;
    }
}

/// What a window collected.
#[derive(Debug, Default)]
pub struct Collected {
    /// The parts, in order.
    pub parts: Vec<Part>,
    /// Lines a grep matched.
    pub matches: Option<u64>,
    /// It stopped before the end: a grep's max count, or the size cap.
    pub stopped: bool,
    /// Lines longer than a grep matches whole.
    pub long_lines: u64,
}

/// A window fed an output forward.
pub trait Select {
    /// The next bytes of the output.
    fn feed(&mut self, data: &[u8]) -> Flow;
    /// The output ended: what was collected.
    fn finish(self: Box<Self>) -> Collected;
}

/// The first `lines` lines, fed from the start.
pub struct Head {
    left: u64,
    part: Part,
    stopped: bool,
}

impl Head {
    /// The first `lines` lines.
    pub fn new(lines: u64) -> Head {
        Head {
            left: lines,
            part: Part {
                start: PartStart { line: 1, offset: 0 },
                data: Vec::new(),
            },
            stopped: false,
        }
    }
}

impl Select for Head {
    fn feed(&mut self, data: &[u8]) -> Flow {
        if self.left == 0 {
            return Flow::Enough;
        }
        let mut take = data.len();
        for (seen, at) in memchr::memchr_iter(b'\n', data).enumerate() {
            if seen as u64 + 1 == self.left {
                take = at + 1;
                break;
            }
        }
        let taken = &data[..take];
        self.left -= memchr::memchr_iter(b'\n', taken).count() as u64;
        if push_capped(&mut self.part.data, taken) {
            self.stopped = true;
            return Flow::Enough;
        }
        if self.left == 0 {
            Flow::Enough
        } else {
            Flow::More
        }
    }

    fn finish(self: Box<Self>) -> Collected {
        Collected {
            parts: nonempty(self.part),
            stopped: self.stopped,
            ..Collected::default()
        }
    }
}

/// Append `data` to `buf` up to the cap; whether the cap cut it.
fn push_capped(buf: &mut Vec<u8>, data: &[u8]) -> bool {
    let room = WINDOW_CAP_BYTES.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
    data.len() > room
}

fn nonempty(part: Part) -> Vec<Part> {
    if part.data.is_empty() {
        Vec::new()
    } else {
        vec![part]
    }
}

/// Bytes `start` to `end`, fed from `at` (at or before `start`).
pub struct Bytes {
    at: Place,
    start: u64,
    end: u64,
    part: Part,
    stopped: bool,
}

impl Bytes {
    /// Bytes `start` to `end` (to the end when absent), fed from `at`.
    pub fn new(at: Place, start: u64, end: Option<u64>) -> Bytes {
        Bytes {
            at,
            start,
            end: end.unwrap_or(u64::MAX),
            part: Part::default(),
            stopped: false,
        }
    }
}

impl Select for Bytes {
    fn feed(&mut self, data: &[u8]) -> Flow {
        let from = self.at.offset;
        let to = from + data.len() as u64;
        let skip = self.start.saturating_sub(from).min(data.len() as u64) as usize;
        self.at.advance(&data[..skip]);
        if self.part.data.is_empty() {
            self.part.start = PartStart {
                line: self.at.line,
                offset: self.at.offset,
            };
        }
        let keep = (self.end.min(to).saturating_sub(from) as usize).max(skip);
        if push_capped(&mut self.part.data, &data[skip..keep]) {
            self.stopped = true;
            return Flow::Enough;
        }
        self.at.advance(&data[skip..]);
        if to >= self.end {
            Flow::Enough
        } else {
            Flow::More
        }
    }

    fn finish(self: Box<Self>) -> Collected {
        Collected {
            parts: nonempty(self.part),
            stopped: self.stopped,
            ..Collected::default()
        }
    }
}

/// Lines as they complete, whatever chunks the bytes come in: each with
/// its place and whether the output's end cut it (no newline).
struct Lines {
    at: Place,
    open: Vec<u8>,
    open_at: Place,
    /// How many bytes of the open line were left out (past the cap).
    dropped: u64,
}

impl Lines {
    fn new(at: Place) -> Lines {
        Lines {
            at,
            open: Vec::new(),
            open_at: at,
            dropped: 0,
        }
    }

    /// Each whole line in `data` (with its newline), after the open one.
    fn feed(&mut self, data: &[u8], mut each: impl FnMut(Place, &[u8], u64) -> Flow) -> Flow {
        let mut from = 0;
        for end in memchr::memchr_iter(b'\n', data) {
            let piece = &data[from..=end];
            let flow = if self.open.is_empty() && self.dropped == 0 {
                each(self.at, piece, 0)
            } else {
                self.keep(piece);
                let line = std::mem::take(&mut self.open);
                let dropped = std::mem::take(&mut self.dropped);
                each(self.open_at, &line, dropped)
            };
            self.at.offset += piece.len() as u64;
            self.at.line += 1;
            from = end + 1;
            if flow == Flow::Enough {
                return Flow::Enough;
            }
        }
        let rest = &data[from..];
        if !rest.is_empty() {
            if self.open.is_empty() && self.dropped == 0 {
                self.open_at = self.at;
            }
            self.keep(rest);
            self.at.offset += rest.len() as u64;
        }
        Flow::More
    }

    fn keep(&mut self, piece: &[u8]) {
        let room = GREP_LINE_CAP_BYTES.saturating_sub(self.open.len());
        let kept = piece.len().min(room);
        self.open.extend_from_slice(&piece[..kept]);
        self.dropped += (piece.len() - kept) as u64;
    }

    /// The last line, if the output ended without its newline.
    fn last(&mut self) -> Option<(Place, Vec<u8>, u64)> {
        if self.open.is_empty() && self.dropped == 0 {
            return None;
        }
        Some((
            self.open_at,
            std::mem::take(&mut self.open),
            std::mem::take(&mut self.dropped),
        ))
    }
}

/// The last `lines` lines, fed from the start of a line at or before the
/// first of them.
pub struct Tail {
    lines: Lines,
    wanted: u64,
    /// The last lines, each with whether it was cut at the line cap.
    kept: VecDeque<(Place, Vec<u8>, bool)>,
    kept_bytes: usize,
    stopped: bool,
}

impl Tail {
    /// The last `lines` lines, fed from `at`.
    pub fn new(at: Place, lines: u64) -> Tail {
        Tail {
            lines: Lines::new(at),
            wanted: lines,
            kept: VecDeque::new(),
            kept_bytes: 0,
            stopped: false,
        }
    }

    fn keep(&mut self, at: Place, line: &[u8], cut: bool) {
        if self.wanted == 0 {
            return;
        }
        self.kept.push_back((at, line.to_vec(), cut));
        self.kept_bytes += line.len();
        while self.kept.len() as u64 > self.wanted {
            let (_, gone, _) = self.kept.pop_front().expect("more than wanted");
            self.kept_bytes -= gone.len();
        }
    }
}

impl Select for Tail {
    fn feed(&mut self, data: &[u8]) -> Flow {
        let mut whole = Vec::new();
        self.lines.feed(data, |at, line, dropped| {
            whole.push((at, line.to_vec(), dropped > 0));
            Flow::More
        });
        for (at, line, cut) in whole {
            self.keep(at, &line, cut);
        }
        Flow::More
    }

    fn finish(mut self: Box<Self>) -> Collected {
        if let Some((at, line, dropped)) = self.lines.last() {
            self.keep(at, &line, dropped > 0);
        }
        let Some(&(first, _, _)) = self.kept.front() else {
            return Collected::default();
        };
        let mut data = Vec::with_capacity(self.kept_bytes.min(WINDOW_CAP_BYTES));
        let mut start = PartStart {
            line: first.line,
            offset: first.offset,
        };
        // Over the cap: the newest bytes are kept, starting in a line.
        let mut skip = self.kept_bytes.saturating_sub(WINDOW_CAP_BYTES);
        // A line longer than the line cap kept only its start.
        self.stopped = skip > 0 || self.kept.iter().any(|(_, _, cut)| *cut);
        for (at, line, _) in &self.kept {
            if skip >= line.len() {
                skip -= line.len();
                continue;
            }
            if data.is_empty() {
                start = PartStart {
                    line: at.line,
                    offset: at.offset + skip as u64,
                };
            }
            data.extend_from_slice(&line[skip..]);
            skip = 0;
        }
        Collected {
            parts: vec![Part { start, data }],
            stopped: self.stopped,
            ..Collected::default()
        }
    }
}

/// The lines a regex matches, each with `context` lines before and after,
/// in groups of adjacent lines; at most `max_count` matches.
pub struct Grep {
    lines: Lines,
    regex: Regex,
    /// The regex with `^` and `$` at every line's ends, run on a whole
    /// chunk: where it finds nothing, no line of the chunk matches.
    search: Option<Regex>,
    context: u64,
    max_count: u64,
    matches: u64,
    before: VecDeque<(Place, Vec<u8>)>,
    after_left: u64,
    last_shown: Option<u64>,
    parts: Vec<Part>,
    shown_bytes: usize,
    stopped: bool,
    long_lines: u64,
    /// Fed from inside a line, after a skip: its rest is not looked at.
    partial: bool,
}

impl Grep {
    /// The lines `regex` matches, `context` lines around each, at most
    /// `max_count` matches.
    pub fn new(regex: Regex, context: u64, max_count: Option<u64>) -> Grep {
        // Flags and whole-text anchors could tell a chunk from its lines:
        // such a regex is run on each line.
        let pattern = regex.as_str();
        let search = match ["(?", "\\A", "\\z"].iter().any(|p| pattern.contains(p)) {
            true => None,
            false => regex::bytes::RegexBuilder::new(pattern)
                .multi_line(true)
                .build()
                .ok(),
        };
        Grep {
            lines: Lines::new(Place::START),
            regex,
            search,
            context,
            max_count: max_count.unwrap_or(u64::MAX),
            matches: 0,
            before: VecDeque::new(),
            after_left: 0,
            last_shown: None,
            parts: Vec::new(),
            shown_bytes: 0,
            stopped: false,
            long_lines: 0,
            partial: false,
        }
    }

    /// The next bytes fed are from `at`, after a skip over lines that need
    /// no look; `in_line` when `at` is inside a line, whose rest is then
    /// skipped too. The line left open before is dropped.
    pub fn resync(&mut self, at: Place, in_line: bool) {
        self.lines = Lines::new(at);
        self.before.clear();
        self.after_left = 0;
        self.partial = in_line;
    }

    /// The number of the line fed in part, whose end is still to come.
    pub fn open_line(&self) -> Option<u64> {
        let open = !self.lines.open.is_empty() || self.lines.dropped > 0;
        (open && !self.partial).then_some(self.lines.at.line)
    }

    /// Whether it has its max count and no context to come: it stops
    /// before the next line, which is there, and says so.
    pub fn stop_at_max(&mut self) -> bool {
        let done = self.matches >= self.max_count && self.after_left == 0;
        self.stopped |= done;
        done
    }

    /// Whether lines of context after a match are still to come.
    pub fn owes_context(&self) -> bool {
        self.after_left > 0
    }

    /// The rest of the output is skipped: the line fed in part is not a
    /// line to look at.
    pub fn skip_rest(&mut self) {
        let at = self.lines.at;
        self.lines = Lines::new(at);
    }

    fn show(&mut self, at: Place, line: &[u8]) -> Flow {
        let adjacent = self.last_shown.is_some_and(|last| last + 1 == at.line);
        if !adjacent {
            self.parts.push(Part {
                start: PartStart {
                    line: at.line,
                    offset: at.offset,
                },
                data: Vec::new(),
            });
        }
        self.last_shown = Some(at.line);
        self.shown_bytes += line.len();
        let part = self.parts.last_mut().expect("pushed above");
        part.data.extend_from_slice(line);
        if self.shown_bytes > WINDOW_CAP_BYTES {
            self.stopped = true;
            return Flow::Enough;
        }
        Flow::More
    }

    fn line(&mut self, at: Place, line: &[u8], dropped: u64) -> Flow {
        if self.matches >= self.max_count && self.after_left == 0 {
            self.stopped = true;
            return Flow::Enough;
        }
        if dropped > 0 {
            self.long_lines += 1;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        if self.matches < self.max_count && self.regex.is_match(text) {
            self.matches += 1;
            let before: Vec<_> = self.before.drain(..).collect();
            for (at, line) in before {
                if self.show(at, &line) == Flow::Enough {
                    return Flow::Enough;
                }
            }
            self.after_left = self.context;
            return self.show(at, line);
        }
        if self.after_left > 0 {
            self.after_left -= 1;
            return self.show(at, line);
        }
        if self.context > 0 {
            self.before.push_back((at, line.to_vec()));
            if self.before.len() as u64 > self.context {
                self.before.pop_front();
            }
        }
        Flow::More
    }
}

impl Grep {
    /// Each line of `data` looked at.
    fn each_line(&mut self, data: &[u8]) -> Flow {
        let mut lines = std::mem::replace(&mut self.lines, Lines::new(Place::START));
        let flow = lines.feed(data, |at, line, dropped| self.line(at, line, dropped));
        self.lines = lines;
        flow
    }

    /// Where the lines of `data` that need no look lie, when the regex
    /// finds nothing in it: after the line it continues and the context
    /// a match there or before may show, and before the lines a match
    /// after may show and the line it leaves open.
    fn skippable(&self, data: &[u8]) -> Option<std::ops::Range<usize>> {
        let search = self.search.as_ref()?;
        // The first line may end one that matches: its context follows.
        let owed = self.after_left.max(self.context);
        let first = memchr::memchr_iter(b'\n', data).nth(usize::try_from(owed).ok()?)? + 1;
        let last = match memchr::memrchr_iter(b'\n', data).nth(usize::try_from(self.context).ok()?)
        {
            Some(newline) => newline + 1,
            None => return None,
        };
        (first < last && !search.is_match(data)).then_some(first..last)
    }
}

impl Select for Grep {
    fn feed(&mut self, mut data: &[u8]) -> Flow {
        if self.partial {
            let Some(newline) = memchr::memchr(b'\n', data) else {
                self.lines.at.advance(data);
                return Flow::More;
            };
            self.lines.at.advance(&data[..=newline]);
            self.lines.open_at = self.lines.at;
            self.partial = false;
            data = &data[newline + 1..];
        }
        let Some(skip) = self.skippable(data) else {
            return self.each_line(data);
        };
        if self.each_line(&data[..skip.start]) == Flow::Enough {
            return Flow::Enough;
        }
        self.lines.at.advance(&data[skip.clone()]);
        // The lines before the context kept next are not just before it.
        self.before.clear();
        self.each_line(&data[skip.end..])
    }

    fn finish(mut self: Box<Self>) -> Collected {
        if let Some((at, line, dropped)) = self.lines.last() {
            self.line(at, &line, dropped);
        }
        Collected {
            parts: self.parts,
            matches: Some(self.matches),
            stopped: self.stopped,
            long_lines: self.long_lines,
        }
    }
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
