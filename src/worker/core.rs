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
use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::laws::idle_shutdown::{
    gate_at, run_gate_step, GateEvent, GateOutput, QuiesceAnswer, RunGate,
};
use crate::laws::idle_stop::idle_stop_answer;
use crate::laws::runs::{may_withdraw, next_run, RunId, RunRecord, SpoolRun};
use crate::laws::timing::QUIESCE_HOLD_MS;
use crate::laws::work::{session_work, Activity, WorkKind, WorkSet};
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{QueuedInput, Response};
use crate::protocol::tty::WindowSize;
use crate::session::transcript::EntryBody;

mod bash;
mod kernel;
mod replay;

pub use replay::{Replay, ReplayBooks};

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
    /// An interactive shell run's marks, read as its output comes.
    marks: Option<super::shell_marks::ShellMarks>,
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
    /// Started runs' text, and their terminal's size for a terminal run.
    started_text: HashMap<RunId, (String, Option<WindowSize>)>,
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

fn ms(now_us: u64) -> u64 {
    now_us / 1000
}

impl RunCore {
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

    /// How far run `input`'s stored output reaches in its spool.
    pub fn run_spool_offset(&self, input: RunId) -> u64 {
        self.spool_offsets.get(&input).copied().unwrap_or(0)
    }

    /// How far job `job`'s stored output reaches in its spool.
    pub fn stored_spool_offset(&self, job: &str) -> u64 {
        let offset = match self.job_kind(job) {
            Some(JobKind::Run { input, .. }) => self.spool_offsets.get(&input),
            Some(JobKind::Bash { number, .. }) => self.open_bash.get(&number),
            None => None,
        };
        offset.copied().unwrap_or(0)
    }

    /// The terminal size run `run` started with, if it is a terminal run
    /// that has not ended.
    pub fn run_tty(&self, run: RunId) -> Option<WindowSize> {
        self.started_text.get(&run).and_then(|(_, tty)| *tty)
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

    /// Whether the run gate is open: neither quiesced nor stopping.
    pub fn gate_open(&self) -> bool {
        self.gate == RunGate::Open
    }

    pub fn gate_event(&mut self, event: GateEvent, now_us: u64) -> GateOutput {
        let (gate, output) = run_gate_step(self.gate, event, ms(now_us));
        self.gate = gate;
        output
    }

    /// The earliest instant (monotonic microseconds) this core next needs
    /// time: a quiesced gate reopens once its hold has passed (the first
    /// millisecond after it, as `laws::idle_shutdown::gate_at` reads it).
    /// None: nothing here waits for time.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.gate {
            RunGate::Quiesced { since_ms } => Some(
                since_ms
                    .saturating_add(QUIESCE_HOLD_MS)
                    .saturating_add(1)
                    .saturating_mul(1000),
            ),
            RunGate::Open | RunGate::Stopping => None,
        }
    }

    /// Time passes: a quiesced gate reopens by itself after its hold.
    pub fn tick(&mut self, now_us: u64) {
        self.gate = gate_at(self.gate, ms(now_us));
    }

    // ---- client requests, after the shell stored them --------------------

    /// Input `run` is stored as queued.
    pub fn queued(&mut self, run: RunId, (text, tty): (String, Option<WindowSize>), at_ms: u64) {
        self.book.insert(run, RunRecord::Queued);
        self.queue.push_back(QueuedInput {
            run,
            text,
            at_ms,
            bash: false,
            tty,
        });
        self.next_input = self.next_input.max(run + 1);
    }

    /// Whether `run` may be withdrawn, or why not (one line for the user).
    pub fn check_withdraw(&self, run: RunId) -> Result<(), WorkerError> {
        if may_withdraw(&self.book, run) {
            return Ok(());
        }
        Err(match self.book.get(&run) {
            None => WorkerError::NoRun(run),
            Some(RunRecord::Withdrawn) => WorkerError::AlreadyWithdrawn(run),
            Some(_) => WorkerError::RunStarted(run),
        })
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
        Err(if input == 0 || input >= self.next_input {
            WorkerError::NoInput(input)
        } else {
            WorkerError::InputEnded(input)
        })
    }

    /// `run`'s start is stored: hand it to the kernel.
    pub fn run_start_stored(&mut self, run: RunId) -> Vec<Action> {
        let Some(queued) = self.queue.iter().find(|q| q.run == run).cloned() else {
            return Vec::new();
        };
        self.queue.retain(|q| q.run != run);
        self.book.insert(run, RunRecord::Started);
        self.started_text
            .insert(run, (queued.text.clone(), queued.tty));
        self.follow(
            &format!("r{run}"),
            Some(&queued.text),
            (None, queued.tty),
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
        (stdin_of, tty): (Option<u32>, Option<WindowSize>),
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
                tty,
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
        self.follow(&job, Some(command), (stdin_of, tty), kind)
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
        (stdin_of, tty): (Option<u32>, Option<WindowSize>),
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
                tty,
            }));
        }
        actions.push(Action::Kernel(ToKernel::Follow {
            job: job.to_string(),
            from,
        }));
        let shell = match kind {
            JobKind::Run { input, .. } => {
                self.started_text.get(&input).is_some_and(|(text, tty)| {
                    tty.is_some() && text == crate::protocol::tty::SHELL_COMMAND
                })
            }
            JobKind::Bash { .. } => false,
        };
        let followed = Followed {
            kind,
            ended: false,
            marks: shell.then(Default::default),
        };
        self.jobs.insert(job.to_string(), followed);
        actions
    }
}

#[cfg(test)]
mod tests;
