//! The screens the worker keeps: one per terminal job it follows (a
//! terminal run, or user bash with a terminal), fed the job's output as it
//! is stored, and the last ended one's final screen, so `eukhe screen`
//! right after a run ends still shows what it left. Nothing more is kept:
//! the screens in memory follow the terminal jobs that run now.
//!
//! A worker that starts while a terminal run goes on (after a crash or a
//! restart) rebuilds its screen from the tail of the transcript
//! ([`REBUILD_ENTRIES`], [`REBUILD_BYTES`]), so a screen request after the
//! restart shows what the program drew before it. The kernel's hello says
//! which sizes the terminal took and where in the output each began
//! (`SizeAt`): the rebuild takes each at its place, as the live screen
//! did, and ends at the size the terminal has now.

use std::collections::BTreeMap;

use tokio::sync::watch;

use crate::laws::runs::RunId;
use crate::protocol::kernel::{SizeAt, ToKernel};
use crate::protocol::message::Response;
use crate::protocol::screen::ScreenState;
use crate::protocol::tty::WindowSize;
use crate::session::transcript::{self, Entry, EntryBody};
use crate::worker::core::JobKind;
use crate::worker::outbox::Outbox;
use crate::worker::screen::{Screen, ScreenSize};
use crate::worker::state::Worker;

/// The transcript's last entries read to rebuild a screen after a worker
/// restart: the time a rebuild takes is bounded by what it reads, not by
/// how long the run has gone on. A full-screen program redraws what it
/// shows often, so the tail is what the screen holds.
pub const REBUILD_ENTRIES: usize = 256;

/// The most output bytes fed to a rebuilt screen (the newest, from a
/// record's start when they fit): more than a full redraw of the largest
/// screen kept, emulated in well under a second.
pub const REBUILD_BYTES: usize = 4 * 1024 * 1024;

/// One terminal job's screen and what is known of it besides the cells.
#[derive(Debug)]
pub struct KeptScreen {
    /// The kernel's job (`r3`, `b4-...`).
    pub job: String,
    pub screen: Screen,
    /// Whether the job waits for input (`laws::waiting`, told by the kernel).
    pub waiting: bool,
    /// Its exit status, once it ended.
    pub ended: Option<i32>,
    /// It ended without its status: its kernel is gone.
    pub interrupted: bool,
}

/// The screens of the terminal jobs that run now, by input number, and the
/// last one that ended.
#[derive(Debug)]
pub struct Screens {
    live: BTreeMap<RunId, KeptScreen>,
    last_ended: Option<(RunId, KeptScreen)>,
    /// Counts every change to any screen (a feed, a resize, a waiting
    /// state, an end). A request that waits for a screen to change
    /// (`wait_for`) takes `changed.subscribe()` before it reads the screen,
    /// then awaits `changed()` on it: no change between the read and the
    /// wait is missed, as a `Notify` would miss it.
    pub changed: watch::Sender<u64>,
    /// The sizes each terminal job's terminal took, as the kernel's hello
    /// said: a screen rebuilt as its job is followed takes them.
    heard_sizes: BTreeMap<String, Vec<SizeAt>>,
}

impl Default for Screens {
    fn default() -> Self {
        Screens {
            live: BTreeMap::new(),
            last_ended: None,
            changed: watch::Sender::new(0),
            heard_sizes: BTreeMap::new(),
        }
    }
}

/// Whose screen a request asks for, and why there is none when there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScreenAsked {
    /// Input `n`'s.
    Input(RunId),
    /// The current terminal run's (`current`: the run that runs now, if
    /// any), else the latest user bash with a terminal, else the last
    /// ended one.
    Current { current: Option<RunId> },
}

impl Screens {
    fn touched(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Terminal job `job` of input `input` starts on a terminal of `size`:
    /// a blank screen.
    pub fn open(&mut self, input: RunId, job: &str, size: WindowSize) {
        let screen = Screen::new(ScreenSize::new(size.rows, size.cols));
        self.live.insert(
            input,
            KeptScreen {
                job: job.to_string(),
                screen,
                waiting: false,
                ended: None,
                interrupted: false,
            },
        );
        self.touched();
    }

    /// Whether input `input` has a screen that is fed (running, or the
    /// last ended one, whose late output still comes).
    pub fn keeps(&self, input: RunId) -> bool {
        self.kept_ref(input).is_some()
    }

    fn kept_ref(&self, input: RunId) -> Option<&KeptScreen> {
        self.live.get(&input).or(self
            .last_ended
            .as_ref()
            .filter(|(n, _)| *n == input)
            .map(|(_, kept)| kept))
    }

    fn kept_mut(&mut self, input: RunId) -> Option<&mut KeptScreen> {
        match self.live.get_mut(&input) {
            Some(kept) => Some(kept),
            None => self
                .last_ended
                .as_mut()
                .filter(|(n, _)| *n == input)
                .map(|(_, kept)| kept),
        }
    }

    /// Bytes input `input` wrote to its terminal, in order (nothing when it
    /// has no screen: not a terminal job).
    pub fn feed(&mut self, input: RunId, bytes: &[u8]) {
        if let Some(kept) = self.kept_mut(input) {
            kept.screen.feed(bytes);
            self.touched();
        }
    }

    /// Input `input`'s terminal took a new size.
    pub fn resize(&mut self, input: RunId, size: WindowSize) {
        if let Some(kept) = self.live.get_mut(&input) {
            kept.screen.resize(ScreenSize::new(size.rows, size.cols));
            self.touched();
        }
    }

    /// The size of input `input`'s terminal, while it runs.
    pub fn size(&self, input: RunId) -> Option<WindowSize> {
        let size = self.live.get(&input)?.screen.size();
        Some(WindowSize {
            rows: size.rows,
            cols: size.cols,
        })
    }

    /// Whether job `job` waits for input now (the kernel's word).
    pub fn set_waiting(&mut self, job: &str, waiting: bool) {
        if let Some(kept) = self.live.values_mut().find(|kept| kept.job == job) {
            if kept.waiting != waiting {
                kept.waiting = waiting;
                self.touched();
            }
        }
    }

    /// Input `input` ended with `status`: its screen is the last ended one
    /// (the one kept before goes).
    pub fn end(&mut self, input: RunId, status: i32) {
        if let Some(mut kept) = self.live.remove(&input) {
            kept.ended = Some(status);
            kept.waiting = false;
            self.last_ended = Some((input, kept));
            self.touched();
        }
    }

    /// Input `input` was cut short, its kernel gone.
    pub fn interrupt(&mut self, input: RunId) {
        self.end(input, 255);
        if let Some((ended, kept)) = &mut self.last_ended {
            kept.interrupted |= *ended == input;
        }
    }

    /// How input `input` ended, in words, if its screen says it ended.
    pub fn ended_words(&self, input: RunId) -> Option<String> {
        let (_, kept) = self.find(ScreenAsked::Input(input)).ok()?;
        let status = kept.ended?;
        Some(match kept.interrupted {
            true => format!("run {input} was cut short: the kernel running it is gone"),
            false => format!("run {input} exited {status}"),
        })
    }

    /// The screen `asked` names, as the wire shows it, or why there is
    /// none (one line saying what to do).
    pub fn state(&self, asked: ScreenAsked) -> Result<ScreenState, String> {
        let (input, kept) = self.find(asked)?;
        let mut state = kept.screen.state();
        state.input = input;
        state.waiting = kept.waiting;
        state.ended = kept.ended;
        Ok(state)
    }

    /// Bytes that paint a cleared terminal into the screen `asked` names
    /// (`Screen::redraw`), with its input number and whether it ended.
    pub fn redraw(&self, asked: ScreenAsked) -> Result<(RunId, Vec<u8>, Option<i32>), String> {
        let (input, kept) = self.find(asked)?;
        Ok((input, kept.screen.redraw(), kept.ended))
    }

    fn find(&self, asked: ScreenAsked) -> Result<(RunId, &KeptScreen), String> {
        let ended = self.last_ended.as_ref().map(|(n, kept)| (*n, kept));
        let found = match asked {
            ScreenAsked::Input(input) => self.kept_ref(input).map(|kept| (input, kept)),
            ScreenAsked::Current { current } => current
                .and_then(|run| self.live.get(&run).map(|kept| (run, kept)))
                .or_else(|| self.live.iter().next_back().map(|(n, kept)| (*n, kept)))
                .or(ended),
        };
        found.ok_or_else(|| match asked {
            ScreenAsked::Input(input) => format!(
                "input {input} has no screen: screens are kept for the terminal runs that \
                 run now and the last one that ended (see `eukhe queue`)"
            ),
            ScreenAsked::Current { .. } => "no terminal run in this session has a screen: start \
                 one with `eukhe send --tty` or `eukhe bash --tty`"
                .to_string(),
        })
    }

    /// The kernel's hello said which sizes its terminal jobs took.
    pub fn heard_sizes(&mut self, sizes: BTreeMap<String, Vec<SizeAt>>) {
        self.heard_sizes = sizes;
    }

    /// The sizes job `job`'s terminal took (once: the rebuild takes them).
    fn sizes_of(&mut self, job: &str) -> Option<Vec<SizeAt>> {
        self.heard_sizes
            .remove(job)
            .filter(|sizes| !sizes.is_empty())
    }

    /// Rebuild input `input`'s screen (job `job`) from the transcript's
    /// `tail`: its newest output, at most [`REBUILD_BYTES`] of it, each
    /// size of `sizes` (oldest first, not empty) taken before the first
    /// record drawn after it, so the screen ends at the last.
    pub fn rebuild(&mut self, (input, job): (RunId, &str), sizes: &[SizeAt], tail: &[Entry]) {
        // Runs and user bash are numbered apart in older transcripts: only
        // the job's own kind of output is its.
        let user_bash = job.starts_with('b');
        let outputs: Vec<(&[u8], Option<u64>)> = tail
            .iter()
            .filter_map(|entry| match &entry.body {
                EntryBody::Output {
                    input: run,
                    bash,
                    data,
                    spool_end,
                    ..
                } => {
                    let own = match user_bash {
                        true => *bash == Some(input),
                        false => bash.is_none() && *run == Some(input),
                    };
                    own.then_some((&data[..], *spool_end))
                }
                _ => None,
            })
            .collect();
        let mut from = outputs.len();
        let mut bytes = 0;
        while from > 0 && bytes + outputs[from - 1].0.len() <= REBUILD_BYTES {
            from -= 1;
            bytes += outputs[from].0.len();
        }
        let fed: Vec<(&[u8], Option<u64>)> = match outputs.last() {
            // The newest record alone is over the bound: its end.
            Some(&(last, end)) if from == outputs.len() => {
                vec![(&last[last.len().saturating_sub(REBUILD_BYTES)..], end)]
            }
            _ => outputs[from..].to_vec(),
        };
        let mut replay = SizeReplay::new(sizes, fed.iter().find_map(|(_, end)| *end));
        self.open(input, job, replay.first());
        for (data, end) in fed {
            if let Some(end) = end {
                for size in replay.before(end) {
                    self.resize(input, size);
                }
            }
            self.feed(input, data);
        }
        for size in replay.rest() {
            self.resize(input, size);
        }
    }
}

/// The sizes a rebuilt screen takes as its output is fed again: a size
/// taken at spool offset `at` comes before each record that ends after
/// `at` (sizes are taken between records).
struct SizeReplay<'a> {
    sizes: &'a [SizeAt],
    next: usize,
}

impl<'a> SizeReplay<'a> {
    /// For output whose first record fed ends at `first_end` (none: no
    /// record says where it ends, and the whole replay is at the last
    /// size, the one the terminal has now).
    fn new(sizes: &'a [SizeAt], first_end: Option<u64>) -> Self {
        let next = match first_end {
            Some(end) => sizes.iter().take_while(|size| size.at < end).count(),
            None => sizes.len(),
        };
        SizeReplay {
            sizes,
            next: next.max(1),
        }
    }

    /// The size the screen starts at.
    fn first(&self) -> WindowSize {
        self.sizes[self.next - 1].size
    }

    /// The sizes to take before a record that ends at `end`.
    fn before(&mut self, end: u64) -> Vec<WindowSize> {
        let from = self.next;
        while self.next < self.sizes.len() && self.sizes[self.next].at < end {
            self.next += 1;
        }
        self.sizes[from..self.next].iter().map(|s| s.size).collect()
    }

    /// The sizes taken after the last record fed.
    fn rest(&mut self) -> Vec<WindowSize> {
        let rest = self.sizes[self.next..].iter().map(|s| s.size).collect();
        self.next = self.sizes.len();
        rest
    }
}

/// The input number of the output in `body`: a run's or a user bash's.
fn output_input(body: &EntryBody) -> Option<(RunId, &[u8])> {
    match body {
        EntryBody::Output {
            input, bash, data, ..
        } => bash.or(*input).map(|n| (n, &data[..])),
        _ => None,
    }
}

impl Worker {
    /// Keep the screens up with an action the worker carries out: output
    /// stored, a terminal job started or followed, an end stored.
    pub(super) fn screens_see_store(&mut self, body: &EntryBody) {
        if let Some((input, data)) = output_input(body) {
            self.screens.feed(input, data);
            return;
        }
        match body {
            EntryBody::RunFinished { input, status, .. } => self.screens.end(*input, *status),
            EntryBody::RunInterrupted { input } => self.screens.interrupt(*input),
            EntryBody::BashFinished {
                bash: Some(number),
                status,
                ..
            } => self.screens.end(*number, *status),
            _ => {}
        }
    }

    /// A message to the kernel: a terminal job's start opens its screen; a
    /// terminal run followed without a screen (this worker began while it
    /// ran) has its screen rebuilt from the transcript.
    pub(super) fn screens_see_kernel(&mut self, message: &ToKernel) {
        match message {
            ToKernel::Start {
                job,
                tty: Some(size),
                ..
            } => {
                if let Some(input) = self.input_of_job(job) {
                    self.screens.open(input, job, *size);
                    self.screens.set_waiting(job, self.clients.waiting.has(job));
                }
            }
            ToKernel::Follow { job, .. } => {
                let Some(input) = self.input_of_job(job) else {
                    return;
                };
                let heard = self.screens.sizes_of(job);
                let started = self
                    .core
                    .run_tty(input)
                    .map(|size| vec![SizeAt { at: 0, size }]);
                let Some(sizes) = heard.or(started) else {
                    return;
                };
                if self.screens.keeps(input) {
                    return;
                }
                let tail = transcript::read_tail(&self.files.transcript(), REBUILD_ENTRIES)
                    .unwrap_or_else(|e| {
                        tracing::warn!("the screen of run {input} starts blank: {e}");
                        Vec::new()
                    });
                self.screens.rebuild((input, job), &sizes, &tail);
                self.screens.set_waiting(job, self.clients.waiting.has(job));
            }
            ToKernel::Resize { job, size, .. } => {
                if let Some(input) = self.input_of_job(job) {
                    self.screens.resize(input, *size);
                }
            }
            _ => {}
        }
    }

    fn input_of_job(&self, job: &str) -> Option<RunId> {
        match self.core.job_kind(job)? {
            JobKind::Run { input, .. } => Some(input),
            JobKind::Bash { number, .. } => Some(number),
        }
    }

    /// `screen`: answer `client` with the screen of `input` (or of the
    /// current terminal run).
    pub fn screen_request(&self, input: Option<RunId>, client: &Outbox) {
        let _ = client.send(self.screen_answer(input));
    }

    /// `watch_terminal`: answer `client` with the bytes that paint the
    /// screen of terminal run `input` (or of the current run), then make it
    /// one of the run's waiters, so it hears the run's output from the
    /// first byte after that screen, and its end. Both happen in one step
    /// of the worker, so no byte falls between them.
    /// With `offsets`, the answer says where in the spool the screen was
    /// drawn to and each output frame says where it ends, so the client
    /// can merge the kernel's echo into it.
    pub fn watch_terminal(&mut self, input: Option<RunId>, offsets: bool, client: &Outbox) {
        let _ = client.send(match self.terminal_run_redraw(input) {
            Ok((run, data)) => {
                self.wait_for(run, client.clone());
                if offsets {
                    client.want_offsets();
                }
                // A kernel this worker drives speaks its protocol, so it
                // takes a typist's `echo`.
                let at =
                    (offsets && self.core.connected()).then(|| self.core.run_spool_offset(run));
                Response::Redraw {
                    input: run,
                    data,
                    at,
                }
            }
            Err(message) => Response::Error { message },
        });
    }

    fn terminal_run_redraw(&self, input: Option<RunId>) -> Result<(RunId, Vec<u8>), String> {
        let current = self.core.current_run();
        let Some(run) = input.or(current) else {
            return Err("no run runs in this session: nothing to pass through".to_string());
        };
        if current != Some(run) {
            let words = self.screens.ended_words(run);
            return Err(words.unwrap_or_else(|| format!("run {run} does not run now")));
        }
        match self.screens.redraw(ScreenAsked::Input(run)) {
            Ok((run, data, None)) => Ok((run, data)),
            Ok((_, _, Some(status))) => Err(self
                .screens
                .ended_words(run)
                .unwrap_or_else(|| format!("run {run} exited {status}"))),
            Err(_) => Err(self.screen_not_yet(Some(run)).unwrap_or_else(|| {
                format!("run {run} is no terminal run: its output is in `eukhe log`")
            })),
        }
    }

    fn screen_answer(&self, input: Option<RunId>) -> Response {
        let asked = match input {
            Some(input) => ScreenAsked::Input(input),
            None => ScreenAsked::Current {
                current: self.core.current_run(),
            },
        };
        match self.screens.state(asked) {
            Ok(screen) => Response::Screen { screen },
            Err(message) => Response::Error {
                message: self.screen_not_yet(input).unwrap_or(message),
            },
        }
    }

    /// Why a terminal run that runs has no screen yet: this worker has not
    /// followed it since it began (its kernel link is coming up).
    fn screen_not_yet(&self, input: Option<RunId>) -> Option<String> {
        let run = self
            .core
            .current_run()
            .filter(|run| input.is_none_or(|n| n == *run))?;
        self.core.run_tty(run)?;
        Some(format!(
            "the screen of run {run} is not rebuilt yet: the session's kernel is not \
             connected; ask again in a moment"
        ))
    }
}

#[cfg(test)]
mod tests;
