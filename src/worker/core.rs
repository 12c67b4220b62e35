//! The worker's run lifecycle as a sans-IO state machine, in the manner of
//! quinn-proto: the shell (`serve`, `link`) feeds it events (what the
//! transcript holds, what the kernel reports, what clients ask, the time)
//! and carries out the actions it returns (store an entry, tell the kernel,
//! answer a client). It reads no clock and does no I/O, so every sequence
//! of crashes, reconnects, kernel deaths, cancels and withdrawals is a unit
//! test with a fake clock. Each decision it makes is a call into `laws`.
//!
//! Storing comes first where the specification needs it: the shell stores
//! an input, a run's start or a withdrawal and only then tells the core
//! (`queued`, `run_start_stored`, `withdrawn`), so the core never believes
//! what the transcript does not hold.

use super::WorkerError;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::kernel::spool::{JobEnd, LostOutput};
use crate::laws::idle_shutdown::{
    gate_at, run_gate_step, GateEvent, GateOutput, QuiesceAnswer, RunGate,
};
use crate::laws::idle_stop::idle_stop_answer;
use crate::laws::runs::{
    end_is_recorded, may_withdraw, next_run, reconcile, KernelView, RunAction, RunId, RunRecord,
    SpoolRun,
};
use crate::laws::work::{session_work, Activity, WorkKind, WorkSet};
use crate::protocol::kernel::{JobState, ToKernel};
use crate::protocol::message::{QueuedInput, Response};
use crate::session::entry::Stream;
use crate::session::notices;
use crate::session::transcript::{Entry, EntryBody};

mod bash;

/// A client waiting for user bash, as the shell numbers it.
pub type ClientId = u64;

/// Runs' records and the spool's view of them, as `laws::runs::reconcile` takes them.
type RunBooks = (BTreeMap<RunId, RunRecord>, BTreeMap<RunId, SpoolRun>);

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Store this entry durably before going on.
    Store(EntryBody),
    /// Store this entry, retrying while the disk is full (a run's end: a
    /// restart must never call a finished run interrupted).
    StoreUntilStored(EntryBody),
    Kernel(ToKernel),
    /// Tell the clients waiting on a run (`send --wait`).
    Waiters(RunId, Response),
    /// The run ended: give its waiters their last answer (`Exit`).
    EndWaiters(RunId, Response),
    Client(ClientId, Response),
}

/// What cancelling one input by its number does (`RunCore::cancel_input`).
#[derive(Clone, Debug, PartialEq)]
pub enum InputCancel {
    /// It runs (a run or a user bash): carry out these actions.
    Signal(Vec<Action>),
    /// It is queued: withdraw it.
    Withdraw,
}

/// Whose job the worker follows in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// Run `input`; `lost`: the kernel that accepted it is gone, so its end
    /// is an interruption.
    Run { input: RunId, lost: bool },
    /// User bash `number`, answered to its client (none when an earlier
    /// worker took it: its client follows it in the transcript).
    Bash {
        client: Option<ClientId>,
        number: RunId,
    },
}

#[derive(Clone, Debug)]
struct Followed {
    kind: JobKind,
    /// Its end is stored (output may still come until it settles).
    ended: bool,
}

/// The books of one session's runs.
#[derive(Debug)]
pub struct RunCore {
    book: BTreeMap<RunId, RunRecord>,
    queue: VecDeque<QueuedInput>,
    next_input: RunId,
    spool_offsets: HashMap<RunId, u64>,
    /// User bash the transcript holds no end of, with the spool offset its
    /// stored output reaches.
    open_bash: BTreeMap<RunId, u64>,
    started_text: HashMap<RunId, String>,
    jobs: HashMap<String, Followed>,
    gate: RunGate,
    connected: bool,
    kernel_pid: Option<u32>,
    background: u32,
    bash_seq: u64,
    /// Makes user bash job names unique to this worker (its pid).
    job_tag: u32,
    /// User bash requests taken but not started yet (waiting for the
    /// kernel link): already user bash work, so no quiesce answers idle
    /// while one waits.
    bash_waiting: u32,
    /// The user bash this worker started and that has not ended, as
    /// `queue` lists them.
    bash_listed: BTreeMap<RunId, QueuedInput>,
}

/// The number of the user bash a kernel job runs: `b<number>-<tag>-<seq>`
/// (earlier builds named them `b<tag>-<seq>`, without the number).
fn bash_number(job: &str) -> Option<RunId> {
    let mut parts = job.strip_prefix('b')?.split('-');
    let number = parts.next()?.parse().ok()?;
    (parts.count() == 2).then_some(number)
}

fn ms(now_us: u64) -> u64 {
    now_us / 1000
}

/// The books being rebuilt from a stored transcript.
pub struct Replay {
    books: ReplayBooks,
    job_tag: u32,
}

/// What a replay has gathered from the entries seen so far: all a worker
/// needs of the transcript before them, so it can be saved and taken up
/// again (`worker::checkpoint`) instead of reading those entries again.
/// Memory follows the open inputs and the number of runs, not the
/// transcript's length.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBooks {
    book: BTreeMap<RunId, RunRecord>,
    next_input: RunId,
    spool_offsets: HashMap<RunId, u64>,
    open_bash: BTreeMap<RunId, u64>,
    /// Inputs not yet started, ended or withdrawn.
    queue: BTreeMap<RunId, QueuedInput>,
    texts: HashMap<RunId, String>,
}

impl Replay {
    /// Take up books saved after the entries they were built from.
    pub fn resume(books: ReplayBooks, job_tag: u32) -> Replay {
        Replay { books, job_tag }
    }

    /// The books so far.
    pub fn books(&self) -> &ReplayBooks {
        &self.books
    }

    /// Take one stored entry, in transcript order.
    pub fn see(&mut self, entry: &Entry) {
        let books = &mut self.books;
        match &entry.body {
            EntryBody::Input { input, text } => {
                books.book.insert(*input, RunRecord::Queued);
                books.texts.insert(*input, text.clone());
                books.queue.insert(
                    *input,
                    QueuedInput {
                        run: *input,
                        text: text.clone(),
                        at_ms: entry.at_ms,
                        bash: false,
                    },
                );
                books.next_input = books.next_input.max(input + 1);
            }
            EntryBody::Withdrawn { input } => {
                books.book.insert(*input, RunRecord::Withdrawn);
                books.queue.remove(input);
                books.texts.remove(input);
            }
            EntryBody::Bash {
                bash: Some(number), ..
            } => {
                books.next_input = books.next_input.max(number + 1);
                books.open_bash.insert(*number, 0);
            }
            EntryBody::BashFinished {
                bash: Some(number), ..
            } => {
                books.open_bash.remove(number);
            }
            EntryBody::Output {
                bash: Some(number),
                spool_end: Some(end),
                ..
            } => {
                if let Some(offset) = books.open_bash.get_mut(number) {
                    *offset = *end;
                }
            }
            EntryBody::RunStarted { input } => {
                books.book.insert(*input, RunRecord::Started);
                books.queue.remove(input);
            }
            EntryBody::RunFinished { input, .. } | EntryBody::RunInterrupted { input } => {
                books.book.insert(*input, RunRecord::Ended);
                // An ended run's text, place and spool offset are not
                // needed again.
                books.queue.remove(input);
                books.texts.remove(input);
                books.spool_offsets.remove(input);
            }
            EntryBody::Output {
                input: Some(input),
                spool_end: Some(end),
                ..
            } => {
                books.spool_offsets.insert(*input, *end);
            }
            _ => {}
        }
    }

    /// The books once every entry is seen.
    pub fn finish(self) -> RunCore {
        let ReplayBooks {
            book,
            next_input,
            spool_offsets,
            open_bash,
            queue,
            texts,
        } = self.books;
        let started_text = texts
            .into_iter()
            .filter(|(run, _)| book.get(run) == Some(&RunRecord::Started))
            .collect();
        let queue = queue
            .into_values()
            .filter(|q| book.get(&q.run) == Some(&RunRecord::Queued))
            .collect();
        RunCore {
            book,
            queue,
            next_input,
            spool_offsets,
            open_bash,
            started_text,
            jobs: HashMap::new(),
            gate: RunGate::Open,
            connected: false,
            kernel_pid: None,
            background: 0,
            bash_seq: 0,
            job_tag: self.job_tag,
            bash_waiting: 0,
            bash_listed: BTreeMap::new(),
        }
    }
}

impl RunCore {
    /// The books as the stored transcript leaves them, in one call: the
    /// worker itself streams its transcript through `replay`.
    #[cfg(test)]
    pub fn from_transcript(entries: &[Entry], job_tag: u32) -> RunCore {
        let mut replay = RunCore::replay(job_tag);
        for entry in entries {
            replay.see(entry);
        }
        replay.finish()
    }

    /// Books built one stored entry at a time, so a transcript is read as
    /// a stream (`Replay::see`, then `Replay::finish`).
    pub fn replay(job_tag: u32) -> Replay {
        Replay::resume(
            ReplayBooks {
                next_input: 1,
                ..ReplayBooks::default()
            },
            job_tag,
        )
    }

    // ---- what the shell reads -------------------------------------------

    /// The queued inputs, in order.
    pub fn queue(&self) -> impl Iterator<Item = &QueuedInput> {
        self.queue.iter()
    }

    /// The number the next queued input gets.
    pub fn next_input(&self) -> RunId {
        self.next_input
    }

    /// Give no input a number below `number` (the session's own record of
    /// its numbering says they may have been given).
    pub fn number_inputs_from(&mut self, number: RunId) {
        self.next_input = self.next_input.max(number);
    }

    /// The run the kernel executes now (started, not ended).
    /// Whose job `job` is, while the worker follows it.
    pub fn job_kind(&self, job: &str) -> Option<JobKind> {
        self.jobs.get(job).map(|followed| followed.kind)
    }

    pub fn current_run(&self) -> Option<RunId> {
        self.book
            .iter()
            .find(|(_, r)| **r == RunRecord::Started)
            .map(|(run, _)| *run)
    }

    pub fn connected(&self) -> bool {
        self.connected
    }

    /// The followed job whose output is run `input`'s or user bash
    /// `bash`'s: where its stored output's bytes are.
    pub fn job_of_output(&self, input: Option<RunId>, bash: Option<RunId>) -> Option<&str> {
        self.jobs.iter().find_map(|(job, followed)| {
            let matches = match followed.kind {
                JobKind::Run { input: run, .. } => bash.is_none() && input == Some(run),
                JobKind::Bash { number, .. } => bash == Some(number),
            };
            matches.then_some(job.as_str())
        })
    }

    pub fn kernel_pid(&self) -> Option<u32> {
        self.kernel_pid
    }

    pub fn background(&self) -> u32 {
        self.background
    }

    /// The session's work now (the specification's one set).
    pub fn work(&self) -> WorkSet {
        let mut activities = Vec::new();
        if self.current_run().is_some() {
            activities.push(Activity::Work(WorkKind::Run));
        }
        if !self.queue.is_empty() {
            activities.push(Activity::Work(WorkKind::QueuedInput));
        }
        for job in self.jobs.values() {
            activities.push(match (job.kind, job.ended) {
                (JobKind::Bash { .. }, false) => Activity::Work(WorkKind::UserBash),
                (JobKind::Run { .. }, false) => Activity::Work(WorkKind::Run),
                (_, true) => Activity::Work(WorkKind::UnsettledChild),
            });
        }
        if self.background > 0 {
            activities.push(Activity::Work(WorkKind::BackgroundJob));
        }
        if self.bash_waiting > 0 {
            activities.push(Activity::Work(WorkKind::UserBash));
        }
        if self.book.values().any(|r| *r == RunRecord::Withdrawn) {
            activities.push(Activity::WithdrawnInput);
        }
        session_work(&activities)
    }

    // ---- the run gate (idle shutdown) ------------------------------------

    /// The next queued input to start now, if the kernel is connected and
    /// the run gate admits a run. The shell stores its start, then calls
    /// [`RunCore::run_start_stored`].
    pub fn next_start(&mut self, now_us: u64) -> Option<RunId> {
        if !self.connected {
            return None;
        }
        next_run(&self.book, true)?;
        let (gate, output) = run_gate_step(self.gate, GateEvent::RunRequest, ms(now_us));
        self.gate = gate;
        next_run(&self.book, output == GateOutput::Run { admitted: true })
    }

    /// A user bash request was taken: it is work until it starts (or is
    /// refused), even while it waits for the kernel link.
    pub fn bash_requested(&mut self) {
        self.bash_waiting += 1;
    }

    /// A user bash request taken earlier starts now (or was refused).
    pub fn bash_request_taken_up(&mut self) {
        self.bash_waiting = self.bash_waiting.saturating_sub(1);
    }

    /// The supervisor asks the worker to quiesce for an idle shutdown.
    pub fn quiesce(&mut self, now_us: u64) -> QuiesceAnswer {
        match self.gate_event(GateEvent::Quiesce { work: self.work() }, now_us) {
            GateOutput::Answer(answer) => answer,
            _ => QuiesceAnswer::Busy,
        }
    }

    /// The supervisor asks the worker to quiesce for an idle stop, with
    /// `clients` client connections open (`laws::idle_stop`).
    pub fn quiesce_for_idle_stop(&mut self, clients: u32, now_us: u64) -> QuiesceAnswer {
        let (gate, answer) = idle_stop_answer(self.gate, self.work(), clients, ms(now_us));
        self.gate = gate;
        answer
    }

    /// Whether a user bash may start now: the run gate admits it as it
    /// admits a run (a quiesced or stopping worker starts no work).
    pub fn bash_admitted(&mut self, now_us: u64) -> bool {
        self.gate_event(GateEvent::RunRequest, now_us) == GateOutput::Run { admitted: true }
    }

    /// The idle shutdown's stop: taken only through a gate still quiesced
    /// (or already stopping).
    pub fn idle_stop(&mut self, now_us: u64) -> bool {
        self.gate_event(GateEvent::IdleStop, now_us) == GateOutput::IdleStop { taken: true }
    }

    pub fn gate_event(&mut self, event: GateEvent, now_us: u64) -> GateOutput {
        let (gate, output) = run_gate_step(self.gate, event, ms(now_us));
        self.gate = gate;
        output
    }

    /// Time passes: a quiesced gate reopens by itself after its hold.
    pub fn tick(&mut self, now_us: u64) {
        self.gate = gate_at(self.gate, ms(now_us));
    }

    // ---- client requests, after the shell stored them --------------------

    /// Input `run` is stored as queued.
    pub fn queued(&mut self, run: RunId, text: String, at_ms: u64) {
        self.book.insert(run, RunRecord::Queued);
        self.queue.push_back(QueuedInput {
            run,
            text,
            at_ms,
            bash: false,
        });
        self.next_input = self.next_input.max(run + 1);
    }

    /// Whether `run` may be withdrawn, or why not (one line for the user).
    pub fn check_withdraw(&self, run: RunId) -> Result<(), WorkerError> {
        if may_withdraw(&self.book, run) {
            return Ok(());
        }
        Err(WorkerError::Refused(match self.book.get(&run) {
            None => format!("there is no run {run}"),
            Some(RunRecord::Withdrawn) => format!("run {run} is already withdrawn"),
            Some(_) => format!("run {run} is not queued: it has started"),
        }))
    }

    /// `run`'s withdrawal is stored: it never runs.
    pub fn withdrawn(&mut self, run: RunId) {
        self.book.insert(run, RunRecord::Withdrawn);
        self.queue.retain(|q| q.run != run);
    }

    /// Cancel: the running run (if any) and every running user bash are
    /// signalled; returns the run, the user bash and the actions. (`--all`
    /// withdrawals go through `check_withdraw`/`withdrawn`.)
    pub fn cancel(&self) -> (Option<RunId>, Vec<RunId>, Vec<Action>) {
        let run = self.current_run();
        let mut jobs: Vec<String> = run.iter().map(|run| format!("r{run}")).collect();
        let bash = self.running_bash();
        for (_, job) in &bash {
            jobs.push(job.clone());
        }
        let actions = jobs
            .into_iter()
            .map(|job| Action::Kernel(ToKernel::Cancel { job }))
            .collect();
        (
            run,
            bash.into_iter().map(|(number, _)| number).collect(),
            actions,
        )
    }

    /// What cancelling input `input` by its number does, or why it cannot
    /// (one line for the user): the running run or a running user bash is
    /// signalled (its whole process group, as `cancel` does), a queued run
    /// is withdrawn (the shell stores that, then calls `withdrawn`).
    pub fn cancel_input(&self, input: RunId) -> Result<InputCancel, WorkerError> {
        let signal = |job: &str| {
            InputCancel::Signal(vec![Action::Kernel(ToKernel::Cancel {
                job: job.to_string(),
            })])
        };
        if self.current_run() == Some(input) {
            return Ok(signal(&format!("r{input}")));
        }
        if let Some((_, job)) = self.running_bash().iter().find(|(n, _)| *n == input) {
            return Ok(signal(job));
        }
        if may_withdraw(&self.book, input) {
            return Ok(InputCancel::Withdraw);
        }
        Err(WorkerError::Refused(
            if input == 0 || input >= self.next_input {
                crate::session::log_query::no_input(input)
            } else {
                format!("input {input} is neither running nor queued: it has ended")
            },
        ))
    }

    /// `run`'s start is stored: hand it to the kernel.
    pub fn run_start_stored(&mut self, run: RunId) -> Vec<Action> {
        let Some(queued) = self.queue.iter().find(|q| q.run == run).cloned() else {
            return Vec::new();
        };
        self.queue.retain(|q| q.run != run);
        self.book.insert(run, RunRecord::Started);
        self.started_text.insert(run, queued.text.clone());
        self.follow(
            &format!("r{run}"),
            Some(&queued.text),
            None,
            JobKind::Run {
                input: run,
                lost: false,
            },
        )
    }

    /// User bash (its entry stored at wall-clock `at_ms`): run it in the
    /// kernel now, beside any run in progress, reading the standard input
    /// of process `stdin_of` (its client) if given.
    pub fn bash(
        &mut self,
        command: &str,
        stdin_of: Option<u32>,
        (client, at_ms): (ClientId, u64),
        number: RunId,
    ) -> Vec<Action> {
        self.bash_listed.insert(
            number,
            QueuedInput {
                run: number,
                text: command.to_string(),
                at_ms,
                bash: true,
            },
        );
        self.bash_seq += 1;
        // The number first, so a later worker knows whose job it is; this
        // worker's tag keeps names unique even if a number is reused after
        // a crash lost the entry that took it.
        let job = format!("b{number}-{}-{}", self.job_tag, self.bash_seq);
        self.open_bash.insert(number, 0);
        let kind = JobKind::Bash {
            client: Some(client),
            number,
        };
        self.follow(&job, Some(command), stdin_of, kind)
    }

    /// The number the next input (a queued run or user bash) takes: inputs
    /// share one sequence, so `log --raw N` names any of them.
    pub fn take_input_number(&mut self) -> RunId {
        let number = self.next_input;
        self.next_input += 1;
        number
    }

    fn follow(
        &mut self,
        job: &str,
        command: Option<&str>,
        stdin_of: Option<u32>,
        kind: JobKind,
    ) -> Vec<Action> {
        let from = match kind {
            JobKind::Run { input, .. } => self.spool_offsets.get(&input).copied().unwrap_or(0),
            JobKind::Bash { number, .. } => self.open_bash.get(&number).copied().unwrap_or(0),
        };
        let mut actions = Vec::new();
        if let Some(command) = command {
            actions.push(Action::Kernel(ToKernel::Start {
                job: job.to_string(),
                command: command.to_string(),
                stdin_of,
            }));
        }
        actions.push(Action::Kernel(ToKernel::Follow {
            job: job.to_string(),
            from,
        }));
        self.jobs
            .insert(job.to_string(), Followed { kind, ended: false });
        actions
    }

    // ---- the kernel ------------------------------------------------------

    /// The kernel greeted this worker: settle every run the transcript
    /// left open, as `laws::runs::reconcile` decides (runs a gone kernel
    /// accepted against a dead kernel, the rest against this live one).
    pub fn kernel_hello(
        &mut self,
        pid: u32,
        jobs: &BTreeMap<String, JobState>,
        background: u32,
    ) -> Vec<Action> {
        self.connected = true;
        self.kernel_pid = Some(pid);
        self.background = background;
        let mut actions = self.settle_open_runs(jobs);
        // User bash of an earlier worker goes on: its output and end are
        // stored (its client follows them in the transcript). One the live
        // kernel does not know was cut short: its kernel is gone, or its
        // worker was lost before handing it over.
        let (following, followed) = self.follow_earlier_bash(jobs);
        actions.extend(following);
        actions.extend(self.cut_short_bash(&followed));
        // The spool's leftovers: user bash whose end is stored, and runs
        // whose end the transcript already holds.
        actions.extend(self.forget_leftovers(jobs, &followed));
        actions
    }

    /// Reconcile the open runs with the kernel's jobs and follow each.
    fn settle_open_runs(&mut self, jobs: &BTreeMap<String, JobState>) -> Vec<Action> {
        let (lost, live) = self.books_by_kernel(jobs);
        let mut decided = reconcile(
            &lost.0,
            KernelView {
                alive: false,
                spool: &lost.1,
            },
        );
        decided.extend(reconcile(
            &live.0,
            KernelView {
                alive: true,
                spool: &live.1,
            },
        ));
        let mut actions = Vec::new();
        for action in decided {
            let (run, command, lost) = match action {
                RunAction::Hand(run) => (run, self.started_text.get(&run).cloned(), false),
                RunAction::Follow(run) | RunAction::RecordEnd(run, _) => (run, None, false),
                RunAction::RecordInterrupted(run) => (run, None, true),
            };
            let kind = JobKind::Run { input: run, lost };
            actions.extend(self.follow(&format!("r{run}"), command.as_deref(), None, kind));
        }
        actions
    }

    /// The run books split between runs a gone kernel accepted and the rest.
    fn books_by_kernel(&self, jobs: &BTreeMap<String, JobState>) -> (RunBooks, RunBooks) {
        let mut lost = (BTreeMap::new(), BTreeMap::new());
        let mut live = (BTreeMap::new(), BTreeMap::new());
        for (run, record) in &self.book {
            match jobs.get(&format!("r{run}")) {
                Some(JobState::Lost) => {
                    lost.0.insert(*run, *record);
                    lost.1.insert(*run, SpoolRun::Accepted);
                }
                Some(JobState::Running) => {
                    live.0.insert(*run, *record);
                    live.1.insert(*run, SpoolRun::Accepted);
                }
                Some(JobState::Ended { end }) => {
                    live.0.insert(*run, *record);
                    live.1.insert(*run, SpoolRun::Ended { status: end.status });
                }
                None => {
                    live.0.insert(*run, *record);
                }
            }
        }
        (lost, live)
    }

    /// Follow the open user bash the live kernel runs: the actions and the numbers followed.
    fn follow_earlier_bash(
        &mut self,
        jobs: &BTreeMap<String, JobState>,
    ) -> (Vec<Action>, BTreeSet<RunId>) {
        let mut actions = Vec::new();
        let mut followed = BTreeSet::new();
        for (job, state) in jobs {
            let Some(number) = bash_number(job) else {
                continue;
            };
            if self.open_bash.contains_key(&number) && *state != JobState::Lost {
                followed.insert(number);
                let kind = JobKind::Bash {
                    client: None,
                    number,
                };
                actions.extend(self.follow(job, None, None, kind));
            }
        }
        (actions, followed)
    }

    /// Store the end of every open user bash not `followed`, with a notice.
    fn cut_short_bash(&mut self, followed: &BTreeSet<RunId>) -> Vec<Action> {
        let cut_short: Vec<RunId> = self
            .open_bash
            .keys()
            .filter(|number| !followed.contains(number))
            .copied()
            .collect();
        let mut actions = Vec::new();
        for number in cut_short {
            self.open_bash.remove(&number);
            actions.push(Action::Store(notices::bash_cut_short(number)));
            actions.push(Action::StoreUntilStored(EntryBody::BashFinished {
                status: 255,
                bash: Some(number),
                signal: None,
                cancelled: false,
                lost_output: None,
            }));
        }
        actions
    }

    /// Ask the kernel to forget the jobs whose end is already stored.
    fn forget_leftovers(
        &self,
        jobs: &BTreeMap<String, JobState>,
        followed: &BTreeSet<RunId>,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        for job in jobs.keys() {
            let stored_run = job
                .strip_prefix('r')
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|run| self.book.get(&run) == Some(&RunRecord::Ended));
            let stored_bash = bash_number(job).is_some_and(|n| !followed.contains(&n));
            if stored_bash || (job.starts_with('b') && bash_number(job).is_none()) || stored_run {
                actions.push(Action::Kernel(ToKernel::Forget { job: job.clone() }));
            }
        }
        actions
    }

    /// Whether `job`'s output is being stored (a job not followed is
    /// nobody's: its output is not stored).
    pub fn follows(&self, job: &str) -> bool {
        self.jobs.contains_key(job)
    }

    /// The link to the kernel is gone.
    pub fn kernel_lost(&mut self) {
        self.connected = false;
        self.kernel_pid = None;
        self.jobs.clear();
    }

    /// Output of `job`: stored, then shown. `end` is the spool offset after
    /// it; a reconnect resumes there. A UTF-8 character cut by a record
    /// boundary waits for its rest.
    pub fn output(&mut self, job: &str, stream: Stream, end: u64, data: Bytes) -> Vec<Action> {
        let Some(followed) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        // The kernel cut its records at UTF-8 character boundaries: each
        // chunk is stored and shown as it is.
        if data.is_empty() {
            return Vec::new();
        }
        let response = Response::Output {
            stream,
            data: data.clone(),
        };
        match followed.kind {
            JobKind::Run { input, .. } => {
                self.spool_offsets.insert(input, end);
                vec![
                    Action::Store(EntryBody::Output {
                        input: Some(input),
                        stream,
                        data,
                        spool_end: Some(end),
                        bash: None,
                    }),
                    Action::Waiters(input, response),
                ]
            }
            JobKind::Bash { client, number } => {
                if let Some(offset) = self.open_bash.get_mut(&number) {
                    *offset = end;
                }
                let mut actions = vec![Action::Store(EntryBody::Output {
                    input: None,
                    stream,
                    data,
                    spool_end: Some(end),
                    bash: Some(number),
                })];
                actions.extend(client.map(|client| Action::Client(client, response)));
                actions
            }
        }
    }

    /// `job` ended (`None`: the kernel that ran it is gone). A run's end is
    /// stored once: only while the book has it started.
    pub fn ended(&mut self, job: &str, end: Option<&JobEnd>) -> Vec<Action> {
        let Some(followed) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        if followed.ended {
            return Vec::new();
        }
        followed.ended = true;
        let mut actions = Vec::new();
        match followed.kind {
            JobKind::Run { input, .. } => {
                if !end_is_recorded(&self.book, input) {
                    return actions;
                }
                let lost = lost_output(&format!("run {input}"), end, &mut actions);
                let status = match end {
                    Some(end) => {
                        actions.push(Action::StoreUntilStored(EntryBody::RunFinished {
                            input,
                            status: end.status,
                            signal: end.signal,
                            cancelled: end.cancelled,
                            lost_output: lost.clone(),
                        }));
                        end.status
                    }
                    None => {
                        actions.push(Action::StoreUntilStored(EntryBody::RunInterrupted {
                            input,
                        }));
                        actions.push(Action::Store(EntryBody::Notice {
                            text: format!(
                                "run {input} was cut short: the kernel running it is gone; it does not run again"
                            ),
                            restore: None,
                            restore_id: None,
                        }));
                        255
                    }
                };
                self.book.insert(input, RunRecord::Ended);
                self.started_text.remove(&input);
                actions.push(Action::EndWaiters(input, Response::Exit { status, lost }));
            }
            JobKind::Bash { client, number } => {
                self.open_bash.remove(&number);
                self.bash_listed.remove(&number);
                actions.extend(bash_ended(number, client, end));
            }
        }
        if let Some(text) = end.and_then(|e| e.notice.clone()) {
            actions.push(Action::Store(EntryBody::Notice {
                text,
                restore: None,
                restore_id: None,
            }));
        }
        actions
    }

    /// Every writer of `job`'s output closed: the kernel may forget it.
    pub fn settled(&mut self, job: &str) -> Vec<Action> {
        match self.jobs.remove(job) {
            Some(_) => vec![Action::Kernel(ToKernel::Forget {
                job: job.to_string(),
            })],
            None => Vec::new(),
        }
    }

    /// The kernel counted the processes runs left behind.
    pub fn background_jobs(&mut self, count: u32) -> Vec<Action> {
        let before = std::mem::replace(&mut self.background, count);
        if before > 0 && count == 0 {
            vec![Action::Store(EntryBody::Notice {
                text: "the last background job ended".into(),
                restore: None,
                restore_id: None,
            })]
        } else {
            Vec::new()
        }
    }
}

/// What user bash `number` ending with `end` (`None`: its kernel is gone)
/// stores and tells its client, if one waits.
fn bash_ended(number: RunId, client: Option<ClientId>, end: Option<&JobEnd>) -> Vec<Action> {
    let status = end.map_or(255, |e| e.status);
    let mut actions = Vec::new();
    let lost = lost_output(&format!("bash {number}"), end, &mut actions);
    actions.push(Action::StoreUntilStored(EntryBody::BashFinished {
        status,
        bash: Some(number),
        signal: end.and_then(|e| e.signal),
        cancelled: end.is_some_and(|e| e.cancelled),
        lost_output: lost.clone(),
    }));
    if let Some(client) = client {
        actions.push(Action::Client(client, Response::Exit { status, lost }));
    }
    actions
}

/// Output of `subject` ("run 3", "bash 2") that its kernel could not
/// spool: said in the transcript just before its end (stored as surely as
/// the end, so the end never reads as complete output without it), and
/// returned for the clients that followed it.
fn lost_output(
    subject: &str,
    end: Option<&JobEnd>,
    actions: &mut Vec<Action>,
) -> Option<LostOutput> {
    let lost = end?.lost_output.clone()?;
    actions.push(Action::StoreUntilStored(EntryBody::Notice {
        text: format!(
            "{} bytes of the output of {subject} could not be kept: {}",
            lost.bytes, lost.error
        ),
        restore: None,
        restore_id: None,
    }));
    Some(lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::timing::TM;

    fn entry(seq: u64, body: EntryBody) -> Entry {
        Entry {
            seq,
            at_ms: seq,
            body,
        }
    }

    fn input(run: u64, text: &str) -> EntryBody {
        EntryBody::Input {
            input: run,
            text: text.into(),
        }
    }

    fn end(status: i32) -> JobEnd {
        JobEnd {
            status,
            signal: None,
            cancelled: false,
            notice: None,
            settled: true,
            lost_output: None,
        }
    }

    fn stores(actions: &[Action]) -> Vec<&EntryBody> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Store(b) | Action::StoreUntilStored(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    /// A worker that crashed mid-run: the next one finds the run live in
    /// the kernel, resumes its output where the transcript stops, and
    /// stores its end once.
    #[test]
    fn a_reconnecting_worker_resumes_a_live_run_and_stores_its_end_once() {
        let transcript = [
            entry(1, input(1, "sleep 3; echo done")),
            entry(2, EntryBody::RunStarted { input: 1 }),
            entry(
                3,
                EntryBody::Output {
                    input: Some(1),
                    stream: Stream::Stdout,
                    data: "half\n".into(),
                    spool_end: Some(10),
                    bash: None,
                },
            ),
        ];
        let mut core = RunCore::from_transcript(&transcript, 7);
        assert_eq!(core.current_run(), Some(1));
        let jobs = BTreeMap::from([("r1".to_string(), JobState::Running)]);
        let actions = core.kernel_hello(99, &jobs, 0);
        assert_eq!(
            actions,
            vec![Action::Kernel(ToKernel::Follow {
                job: "r1".into(),
                from: 10
            })],
            "resumes from the stored offset and never starts the run again"
        );
        let out = core.output("r1", Stream::Stdout, 20, b"done\n".to_vec().into());
        assert!(matches!(
            stores(&out)[..],
            [EntryBody::Output {
                spool_end: Some(20),
                ..
            }]
        ));
        let first = core.ended("r1", Some(&end(0)));
        assert!(
            first.contains(&Action::StoreUntilStored(EntryBody::RunFinished {
                input: 1,
                status: 0,
                signal: None,
                cancelled: false,
                lost_output: None
            }))
        );
        assert!(first.contains(&Action::EndWaiters(
            1,
            Response::Exit {
                status: 0,
                lost: None
            }
        )));
        assert!(core.ended("r1", Some(&end(0))).is_empty(), "stored twice");
        assert_eq!(core.current_run(), None);
    }

    /// The kernel died with the run (a reboot): the run is interrupted,
    /// never rerun, and the queued input behind it runs next.
    #[test]
    fn a_run_of_a_gone_kernel_is_interrupted_once_and_the_queue_goes_on() {
        let transcript = [
            entry(1, input(1, "make")),
            entry(2, EntryBody::RunStarted { input: 1 }),
            entry(3, input(2, "echo next")),
        ];
        let mut core = RunCore::from_transcript(&transcript, 7);
        let jobs = BTreeMap::from([("r1".to_string(), JobState::Lost)]);
        let hello = core.kernel_hello(5, &jobs, 0);
        assert!(!hello
            .iter()
            .any(|a| matches!(a, Action::Kernel(ToKernel::Start { .. }))));
        assert_eq!(core.next_start(0), None, "one run at a time");
        let ended = core.ended("r1", None);
        assert_eq!(
            stores(&ended)[0],
            &EntryBody::RunInterrupted { input: 1 },
            "{ended:?}"
        );
        assert_eq!(core.next_start(0), Some(2));
        let start = core.run_start_stored(2);
        assert_eq!(
            start[0],
            Action::Kernel(ToKernel::Start {
                job: "r2".into(),
                command: "echo next".into(),
                stdin_of: None,
            })
        );
    }

    /// A worker that crashed between storing a run's start and handing it
    /// over: no kernel ever had it, so it is handed now (it never ran).
    #[test]
    fn a_start_stored_but_never_handed_is_handed_on_reconnect() {
        let transcript = [
            entry(1, input(1, "echo once")),
            entry(2, EntryBody::RunStarted { input: 1 }),
        ];
        let mut core = RunCore::from_transcript(&transcript, 7);
        let actions = core.kernel_hello(5, &BTreeMap::new(), 0);
        assert_eq!(
            actions[0],
            Action::Kernel(ToKernel::Start {
                job: "r1".into(),
                command: "echo once".into(),
                stdin_of: None,
            })
        );
    }

    #[test]
    fn withdrawn_input_never_starts_and_is_not_work() {
        let mut core = RunCore::from_transcript(&[], 7);
        core.kernel_hello(5, &BTreeMap::new(), 0);
        core.queued(1, "echo a".into(), 0);
        assert!(core.check_withdraw(1).is_ok());
        core.withdrawn(1);
        assert!(core.work().is_empty());
        assert_eq!(core.next_start(0), None);
        assert_eq!(
            core.check_withdraw(1).unwrap_err().to_string(),
            "run 1 is already withdrawn"
        );
        core.queued(2, "sleep 9".into(), 0);
        assert_eq!(core.next_start(0), Some(2));
        core.run_start_stored(2);
        assert_eq!(
            core.check_withdraw(2).unwrap_err().to_string(),
            "run 2 is not queued: it has started"
        );
        let (cancelled, bash, actions) = core.cancel();
        assert_eq!((cancelled, bash), (Some(2), Vec::new()));
        assert_eq!(
            actions,
            vec![Action::Kernel(ToKernel::Cancel { job: "r2".into() })]
        );
    }

    /// The run gate on a fake clock: a quiesced idle worker starts nothing
    /// until the gate's hold has passed.
    #[test]
    fn a_quiesced_gate_holds_runs_until_its_hold_passes() {
        let mut core = RunCore::from_transcript(&[], 7);
        core.kernel_hello(5, &BTreeMap::new(), 0);
        let t0 = 1_000_000_000u64;
        assert_eq!(core.quiesce(t0), QuiesceAnswer::Quiesced);
        core.queued(1, "echo late".into(), 0);
        assert_eq!(core.next_start(t0 + 1_000), None, "the gate is closed");
        // Closed through the hold's last millisecond, open just after it.
        let hold_us = TM.quiesce_hold * 1000;
        core.tick(t0 + hold_us);
        assert_eq!(core.next_start(t0 + hold_us), None);
        core.tick(t0 + hold_us + 1_000);
        assert_eq!(core.next_start(t0 + hold_us + 1_000), Some(1));
    }

    #[test]
    fn user_bash_output_is_stored_and_shown_as_its_exact_bytes_under_its_number() {
        let mut core = RunCore::from_transcript(&[], 7);
        core.kernel_hello(5, &BTreeMap::new(), 0);
        let number = core.take_input_number();
        core.bash("cat blob", None, (3, 0), number);
        let bytes = [0xff, 0x00, 0xc3];
        let job = format!("b{number}-7-1");
        let actions = core.output(&job, Stream::Stdout, 8, bytes.to_vec().into());
        assert_eq!(
            actions,
            vec![
                Action::Store(EntryBody::Output {
                    input: None,
                    stream: Stream::Stdout,
                    data: bytes.to_vec().into(),
                    spool_end: Some(8),
                    bash: Some(number),
                }),
                Action::Client(
                    3,
                    Response::Output {
                        stream: Stream::Stdout,
                        data: bytes.to_vec().into()
                    }
                ),
            ]
        );
        assert_eq!(core.take_input_number(), number + 1, "inputs share numbers");
    }

    /// Cancel by number reaches what `cancel` cannot: a running user bash
    /// (also one an earlier worker started), and it withdraws a queued run.
    #[test]
    fn an_input_is_cancelled_by_its_number_whether_a_run_or_a_user_bash() {
        let cancel = |job: &str| {
            InputCancel::Signal(vec![Action::Kernel(ToKernel::Cancel { job: job.into() })])
        };
        let mut core = RunCore::from_transcript(&[], 7);
        core.kernel_hello(5, &BTreeMap::new(), 0);
        let number = core.take_input_number();
        core.bash("sleep 30", None, (3, 0), number);
        let (run, bash, actions) = core.cancel();
        assert_eq!(
            (run, bash),
            (None, vec![number]),
            "cancel reaches user bash"
        );
        assert_eq!(
            actions,
            vec![Action::Kernel(ToKernel::Cancel {
                job: format!("b{number}-7-1")
            })]
        );
        assert_eq!(core.bash_list()[0].text, "sleep 30");
        assert_eq!(
            core.hang_up(number),
            vec![Action::Kernel(ToKernel::HangUp {
                job: format!("b{number}-7-1")
            })]
        );
        assert_eq!(
            core.cancel_input(number).ok(),
            Some(cancel(&format!("b{number}-7-1")))
        );
        core.queued(2, "sleep 9".into(), 0);
        core.queued(3, "echo later".into(), 0);
        assert_eq!(core.next_start(0), Some(2));
        core.run_start_stored(2);
        assert_eq!(core.cancel_input(2).ok(), Some(cancel("r2")));
        assert_eq!(core.cancel_input(3).ok(), Some(InputCancel::Withdraw));
        core.ended(&format!("b{number}-7-1"), Some(&end(130)));
        assert!(!core.bash_runs(number));
        assert_eq!(
            core.hang_up(number),
            Vec::new(),
            "an ended bash is not hung up"
        );
        assert_eq!(core.bash_list(), Vec::new());
        assert_eq!(
            core.cancel_input(number).unwrap_err().to_string(),
            format!("input {number} is neither running nor queued: it has ended")
        );
        assert_eq!(
            core.cancel_input(9).unwrap_err().to_string(),
            "the session has no input 9"
        );
        // A user bash an earlier worker started is followed, and reached.
        let stored = [entry(
            1,
            EntryBody::Bash {
                command: "sleep 30".into(),
                bash: Some(1),
            },
        )];
        let mut next = RunCore::from_transcript(&stored, 8);
        let jobs = BTreeMap::from([("b1-7-1".to_string(), JobState::Running)]);
        next.kernel_hello(5, &jobs, 0);
        assert_eq!(next.cancel_input(1).ok(), Some(cancel("b1-7-1")));
    }

    #[test]
    fn background_jobs_are_work_and_the_last_ones_end_is_noticed() {
        let mut core = RunCore::from_transcript(&[], 7);
        core.kernel_hello(5, &BTreeMap::new(), 2);
        assert!(core.work().contains(WorkKind::BackgroundJob));
        assert!(core.background_jobs(1).is_empty());
        let last = core.background_jobs(0);
        assert_eq!(stores(&last).len(), 1);
        assert!(core.work().is_empty());
    }

    #[test]
    fn user_bash_outlives_its_worker_and_one_that_never_ran_is_ended_once() {
        let bash = |number: u64, command: &str| EntryBody::Bash {
            command: command.into(),
            bash: Some(number),
        };
        let stored = [
            entry(1, bash(1, "sleep 5; echo late")),
            entry(
                2,
                EntryBody::Output {
                    input: None,
                    stream: Stream::Stdout,
                    data: b"early\n".to_vec().into(),
                    spool_end: Some(40),
                    bash: Some(1),
                },
            ),
            entry(3, bash(2, "never handed over")),
        ];
        let mut core = RunCore::from_transcript(&stored, 8);
        let jobs = BTreeMap::from([("b1-7-1".to_string(), JobState::Running)]);
        let actions = core.kernel_hello(5, &jobs, 0);
        assert!(
            actions.contains(&Action::Kernel(ToKernel::Follow {
                job: "b1-7-1".into(),
                from: 40
            })),
            "bash 1 is followed from where its stored output ends: {actions:#?}"
        );
        assert!(!actions
            .iter()
            .any(|a| matches!(a, Action::Kernel(ToKernel::Forget { job }) if job == "b1-7-1")));
        assert!(stores(&actions).contains(&&EntryBody::BashFinished {
            status: 255,
            bash: Some(2),
            signal: None,
            cancelled: false,
            lost_output: None,
        }));
        assert!(core.work().contains(WorkKind::UserBash));
        let output = core.output("b1-7-1", Stream::Stdout, 50, b"late\n".to_vec().into());
        assert_eq!(output.len(), 1, "stored, shown to no client: {output:#?}");
        let ended = core.ended("b1-7-1", Some(&end(0)));
        assert_eq!(
            stores(&ended),
            vec![&EntryBody::BashFinished {
                status: 0,
                bash: Some(1),
                signal: None,
                cancelled: false,
                lost_output: None,
            }]
        );
    }
}
