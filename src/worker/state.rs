//! The worker's state: the run core (`core`, sans-IO) and the I/O it is
//! driven with (transcript, clients, the kernel link, busy evidence). Every
//! decision is a call into `core` or `laws`; this file carries them out.
//! Opening a worker (`open`) and storing entries (`store`) live beside it.

use super::WorkerError;
use std::collections::HashMap;

use super::books::Books;
use super::core::{Action, ClientId, JobKind, Replay, RunCore};
use super::kernel_watch::{KernelSilence, KernelWatch};
use super::outbox::{Outbox, Stored};
use crate::build_id::build_id;
use crate::clock::{mono_ms, mono_us, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::host::HostError;
use crate::kernel::spool::Spool;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::events::OutputLine;
use crate::laws::idle_shutdown::{GateEvent, GateOutput, QuiesceAnswer};
use crate::laws::revival::BusyState;
use crate::laws::runs::RunId;
use crate::laws::work::WorkSet;
use crate::protocol::event::{entry_event, latest_line, Event, EventKind};
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{Response, WorkerInfo};
use crate::session::numbers::NumberMark;
use crate::session::store::{read_json, SessionFiles, SessionMeta};
use crate::session::transcript::{Entry, EntryBody, Transcript};

mod open;
mod store;

/// What wakes the task that group-commits output (`output_sync_loop`).
#[derive(Clone, Default)]
pub struct CommitSignals {
    /// Output was written: commit within `output_sync_ms`.
    pub due: std::rc::Rc<tokio::sync::Notify>,
    /// Commit now: a flood of output (`page_cache::COMMIT_EARLY_BYTES`)
    /// waits for it.
    pub now: std::rc::Rc<tokio::sync::Notify>,
}

/// Busy evidence is written off the worker's thread (on the process
/// backend each record waits for the disk), one record at a time.
#[derive(Default)]
pub struct Evidence {
    /// Wakes the task that records it.
    pub due: tokio::sync::Notify,
    /// Held while a record is written, so records land in the order they
    /// were made (`serve::loops::stop`'s last one too).
    pub writing: tokio::sync::Mutex<()>,
}

/// What the kernel link owes the worker's state.
#[derive(Default)]
pub struct LinkOwes {
    /// The worker asked its kernel to stop: the link's end is expected.
    pub stop_asked: bool,
    /// `eukhe new` claimed this spare before the kernel link was up: the
    /// link tells the kernel first thing (`link::run`).
    pub claim: bool,
    /// The count of queued inputs this link last told the kernel (none:
    /// nothing told on this link yet).
    pub queued_told: Option<u32>,
    /// Whether the kernel answers the starts it is asked for.
    pub watch: KernelWatch,
}

pub struct Worker {
    pub meta: SessionMeta,
    pub files: SessionFiles,
    /// The kernel's spool: the worker reads output records from it.
    pub spool: Spool,
    pub(super) transcript: Transcript,
    /// The run lifecycle's books and decisions.
    pub core: RunCore,
    /// The link to the session's kernel, once connected.
    pub kernel: Option<tokio::sync::mpsc::UnboundedSender<ToKernel>>,
    /// Clients waiting for user bash, by the core's numbers.
    clients: HashMap<ClientId, (Outbox, u64)>,
    /// Where the latest output entry was stored (none: it could not be).
    last_output: Option<Stored>,
    /// Every restore notice stored: an attach shows them all (the notice
    /// law) even when it replays only the transcript's last entries.
    pub restore_notices: Vec<Entry>,
    next_client: ClientId,
    /// The task that records busy evidence: its wake-up, and the lock it
    /// holds while it writes.
    pub evidence: std::rc::Rc<Evidence>,
    /// Wakes the tick: a deadline may have come nearer.
    pub reschedule: std::rc::Rc<tokio::sync::Notify>,
    /// Wakes requests waiting for the kernel link (`notify_waiters`).
    pub kernel_connected: std::rc::Rc<tokio::sync::Notify>,
    /// The tick's books: signs of life, watchdog pings, busy evidence
    /// and the lost-supervisor clock.
    pub books: Books,
    journal: BusyJournal,
    subscribers: Vec<tokio::sync::mpsc::UnboundedSender<Response>>,
    waiters: HashMap<u64, Vec<Outbox>>,
    supervisor: Option<Outbox>,
    pub stopping: bool,
    /// What the kernel link must still do or expect.
    pub link_owes: LinkOwes,
    /// Output bytes shown but not stored (the disk was full).
    pub unstored_output: u64,
    /// What wrote them ("run 3", "bash 2").
    unstored_of: std::collections::BTreeSet<String>,
    /// How long output may wait for its fsync (`output_sync_ms`).
    pub output_sync: std::time::Duration,
    /// Wakes the task that group-commits output.
    pub commit_signals: CommitSignals,
    /// Output was written and its fsync is scheduled.
    pub sync_pending: bool,
    /// How far each job's spool is in the transcript since the last group
    /// commit, which releases what the steps of `link::read_spooled` left
    /// (`Spool::release`).
    pub spool_stored: HashMap<String, u64>,
    /// This process, read once: `info` goes out with every sign of life.
    identity: ProcessIdentity,
    /// Client connections open now (`ClientConnection`): an idle stop
    /// waits for them.
    pub open_clients: std::rc::Rc<std::cell::Cell<u32>>,
    /// Wakes the task that tells the supervisor the client count changed.
    pub clients_changed: std::rc::Rc<tokio::sync::Notify>,
    /// The latest output line, reported at a bounded rate.
    output_line: OutputLine,
    /// The books as the stored transcript leaves them, kept up entry by
    /// entry for the replay checkpoint.
    shadow: Replay,
    /// The transcript's offset the last checkpoint covers (or where this
    /// worker began reading).
    checkpointed_at: u64,
    /// How far input numbering may have gone (`session::numbers`).
    pub(super) numbers: NumberMark,
}

/// One client connection, counted while it is open (`Worker::open_clients`).
/// A connection counts from the moment it is accepted, before its first
/// request is read, so a client the supervisor has handed over is counted
/// before any later quiesce is answered; the supervisor's own connections
/// stop counting once they say what they are.
pub struct ClientConnection {
    clients: std::rc::Rc<std::cell::Cell<u32>>,
    changed: std::rc::Rc<tokio::sync::Notify>,
}

impl ClientConnection {
    /// Count a connection just accepted.
    pub fn open(worker: &Worker) -> ClientConnection {
        worker.open_clients.set(worker.open_clients.get() + 1);
        worker.clients_changed.notify_one();
        ClientConnection {
            clients: worker.open_clients.clone(),
            changed: worker.clients_changed.clone(),
        }
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        self.clients.set(self.clients.get().saturating_sub(1));
        self.changed.notify_one();
    }
}

impl Worker {
    /// How many restore notices the transcript holds.
    pub fn restores(&self) -> u32 {
        self.restore_notices.len() as u32
    }

    /// The ids of the restores whose notices the transcript holds.
    pub fn restore_ids(&self) -> Vec<u64> {
        self.restore_notices
            .iter()
            .filter_map(|entry| match entry.body {
                EntryBody::Notice { restore_id, .. } => restore_id,
                _ => None,
            })
            .collect()
    }

    /// Carry out the core's actions. When an end that must be stored
    /// cannot be yet (a full disk), it and every action after it are
    /// returned, not carried out: nobody hears of an end before it is on
    /// disk. The caller applies them again until they are
    /// (`serve::loops::apply_until_stored`).
    pub fn apply(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut actions = actions.into_iter();
        while let Some(action) = actions.next() {
            match action {
                Action::Store(body @ EntryBody::Output { .. }) => self.store_output(body),
                Action::Store(body) => {
                    let _ = self.append(body);
                }
                Action::StoreUntilStored(body) => {
                    // Output the transcript could not take is told before
                    // the end (or notice) that follows it.
                    self.notice_unstored_output();
                    match self.append(body.clone()) {
                        Ok(_) => log_end(&body),
                        Err(e) => {
                            tracing::error!("{e}; retrying");
                            let mut held = vec![Action::StoreUntilStored(body)];
                            held.extend(actions);
                            return held;
                        }
                    }
                }
                Action::Kernel(message) => {
                    if let ToKernel::Start { job, .. } = &message {
                        self.link_owes.watch.asked(job, mono_ms());
                        self.reschedule.notify_one();
                    }
                    self.send_kernel(message)
                }
                Action::Waiters(run, response) => self.tell_waiters(run, response),
                Action::EndWaiters(run, exit) => self.last_to_waiters(run, exit),
                Action::Client(client, response) => {
                    let last = matches!(response, Response::Exit { .. });
                    if let Some((tx, number)) = self.clients.get(&client) {
                        match response {
                            Response::Output { .. } => tx.send_output(
                                response,
                                *number,
                                self.last_output,
                                self.transcript.path(),
                            ),
                            other => {
                                let _ = tx.send_after_output(other);
                            }
                        }
                    }
                    if last {
                        self.clients.remove(&client);
                    }
                }
            }
        }
        Vec::new()
    }

    /// Number a client that waits for user bash `number`.
    pub fn add_client(&mut self, tx: Outbox, number: u64) -> ClientId {
        let id = self.next_client;
        self.next_client += 1;
        self.clients.insert(id, (tx, number));
        id
    }

    /// `eukhe new` claimed this spare session: its metadata is the
    /// session's now, and the kernel makes its first snapshot.
    pub fn claim(&mut self) -> Result<(), WorkerError> {
        self.meta = read_json(&self.files.meta())?
            .ok_or_else(|| WorkerError::NoSession(self.meta.id.clone()))?;
        // A claim that comes while the kernel link is still coming up
        // (a spare just made) is told once it is, so the kernel still gets
        // ready ahead of the first job.
        self.link_owes.claim = self.kernel.is_none();
        self.send_kernel(ToKernel::Claim);
        Ok(())
    }

    /// Say in the transcript (and the log) what the kernel's silence, or
    /// its return, means.
    pub fn tell_kernel_silence(&mut self, silence: KernelSilence) {
        let text = silence.words(self.core.kernel_pid());
        tracing::warn!("{text}");
        if let Err(e) = self.append(EntryBody::Notice {
            text,
            restore: None,
            restore_id: None,
        }) {
            tracing::error!("the notice could not be stored: {e}");
        }
    }

    pub fn send_kernel(&self, message: ToKernel) {
        if let Some(kernel) = &self.kernel {
            let _ = kernel.send(message);
        }
    }

    /// Queue input as a new run.
    pub fn queue_input(&mut self, text: String) -> Result<u64, WorkerError> {
        let input = self.core.next_input();
        self.reserve_input(input)?;
        let entry = self.append(EntryBody::Input {
            input,
            text: text.clone(),
        })?;
        self.core.queued(input, text, entry.at_ms);
        self.work_changed();
        Ok(input)
    }

    /// Withdraw queued input `run`: it never runs.
    pub fn withdraw(&mut self, run: RunId) -> Result<(), WorkerError> {
        self.core.check_withdraw(run)?;
        self.append(EntryBody::Withdrawn { input: run })?;
        self.core.withdrawn(run);
        self.work_changed();
        // A client waiting for it (`send --wait`) waits for nothing now.
        let message = crate::session::log_query::withdrawn(run);
        self.last_to_waiters(run, Response::Error { message });
        Ok(())
    }

    /// The session's work now.
    pub fn work(&self) -> WorkSet {
        self.core.work()
    }

    /// Tell the supervisor, and have busy evidence recorded as the refresh
    /// law says (by the evidence task, so no reply waits on its write).
    pub fn work_changed(&mut self) {
        self.tell_kernel_queued();
        self.evidence.due.notify_one();
        self.reschedule.notify_one();
        let info = self.info();
        if let Some(supervisor) = &self.supervisor {
            let _ = supervisor.send(Response::Worker(info));
        }
    }

    /// Tell the kernel how many inputs wait, when that changed since it
    /// last heard: the kernel counts them in its own busy evidence once
    /// this worker is gone.
    fn tell_kernel_queued(&mut self) {
        if self.kernel.is_none() {
            return;
        }
        let inputs = u32::try_from(self.core.queue().count()).unwrap_or(u32::MAX);
        if self.link_owes.queued_told != Some(inputs) {
            self.link_owes.queued_told = Some(inputs);
            self.send_kernel(ToKernel::Queued { inputs });
        }
    }

    /// The busy evidence the books say is due now, as the journal and the
    /// line to write (off this thread: on the process backend the write
    /// waits for the disk), with the state and the time to enter in the
    /// books once it is written (`evidence_written`).
    pub fn evidence_to_write(&mut self) -> Option<(BusyJournal, JournalLine, BusyState, u64)> {
        let now = mono_ms();
        let Some(state) = self.books.evidence_due(self.work(), now) else {
            self.books.record_not_needed();
            return None;
        };
        let (journal, line) = self.evidence_line(state);
        Some((journal, line, state, now))
    }

    /// Enter evidence in `state`, written at `now_ms`, in the books.
    pub fn evidence_written(
        &mut self,
        written: Result<(), HostError>,
        state: BusyState,
        now_ms: u64,
    ) {
        match written {
            Ok(()) => self.books.recorded(state, now_ms),
            Err(e) => {
                tracing::error!("cannot record busy evidence: {e}");
                self.books.record_failed(mono_ms());
                self.reschedule.notify_one();
            }
        }
    }

    /// The earliest instant (monotonic milliseconds) the tick has
    /// something to do: the books', the run gate's, the kernel watch's
    /// and the output line's deadlines, whichever comes first.
    pub fn next_tick_ms(&self) -> u64 {
        let gate = self.core.poll_timeout().map(|us| us.div_ceil(1000));
        [
            gate,
            self.link_owes.watch.poll_timeout(),
            self.output_line.due_at(),
        ]
        .into_iter()
        .flatten()
        .fold(self.books.poll_timeout(self.work()), u64::min)
    }

    fn evidence_line(&self, state: BusyState) -> (BusyJournal, JournalLine) {
        let line = JournalLine {
            session: self.meta.id.clone(),
            state,
            at_ms: Some(wall_ms()),
            work: self.work(),
            build: build_id().to_string(),
        };
        (self.journal.clone(), line)
    }

    /// Record busy now (an exit that keeps work resumable).
    pub fn record_busy_now(&mut self) {
        if self.work().is_empty() {
            return;
        }
        let line = JournalLine {
            session: self.meta.id.clone(),
            state: BusyState::Busy,
            at_ms: Some(wall_ms()),
            work: self.work(),
            build: build_id().to_string(),
        };
        if let Err(e) = self.journal.record(&line) {
            tracing::error!("cannot record busy evidence: {e}");
        }
    }

    pub fn info(&self) -> WorkerInfo {
        WorkerInfo {
            session: self.meta.id.clone(),
            pid: self.identity.pid,
            start_time: self.identity.start_time,
            build_id: build_id().to_string(),
            work: self.work(),
            background: self.core.background(),
            kernel_pid: self.core.kernel_pid(),
            clients: self.open_clients.get(),
            bash: self.core.bash_list().iter().map(|q| q.run).collect(),
        }
    }

    pub fn gate_event(&mut self, event: GateEvent) -> GateOutput {
        self.reschedule.notify_one();
        self.core.gate_event(event, mono_us())
    }

    pub fn quiesce(&mut self) -> QuiesceAnswer {
        self.reschedule.notify_one();
        self.core.quiesce(mono_us())
    }

    /// Quiesce for an idle stop: busy with work or with a client connected.
    pub fn quiesce_for_idle_stop(&mut self) -> QuiesceAnswer {
        self.reschedule.notify_one();
        self.core
            .quiesce_for_idle_stop(self.open_clients.get(), mono_us())
    }

    /// Tell the supervisor this worker lives (its watchdog's ping).
    pub fn sign_of_life(&self) {
        if let Some(supervisor) = &self.supervisor {
            let _ = supervisor.send(Response::Worker(self.info()));
        }
    }

    /// Tell the supervisor's event stream what a stored entry says: runs
    /// and notices at once, output as its latest line at a bounded rate.
    fn report(&mut self, entry: &Entry) {
        let kind = match &entry.body {
            EntryBody::Output { data, .. } => match latest_line(data) {
                Some(line) => {
                    let waited = self.output_line.due_at().is_some();
                    match self.output_line.seen(line, mono_ms()) {
                        Some(line) => EventKind::Output { line },
                        // Its turn comes at the tick (told once it waits).
                        None => {
                            if !waited {
                                self.reschedule.notify_one();
                            }
                            return;
                        }
                    }
                }
                None => return,
            },
            _ => match entry_event(entry) {
                Some(kind) => kind,
                None => return,
            },
        };
        self.tell_event(entry.at_ms, kind);
    }

    /// The latest output line, once its turn has come (from the tick).
    pub fn report_output_line(&mut self) {
        if let Some(line) = self.output_line.due(mono_ms()) {
            self.tell_event(wall_ms(), EventKind::Output { line });
        }
    }

    /// Send an event of this session to the supervisor (which stamps it
    /// with the session's current name), if one supervises.
    pub fn tell_event(&self, at_ms: u64, kind: EventKind) {
        if let Some(supervisor) = &self.supervisor {
            let event = Event::session(at_ms, &self.meta.id, &self.meta.name, kind);
            let _ = supervisor.send(Response::Event(event));
        }
    }

    pub fn supervised_by(&mut self, tx: Outbox) {
        self.supervisor = Some(tx);
        self.books.supervised();
    }

    pub fn supervisor_lost(&mut self) {
        self.supervisor = None;
        self.books.supervisor_lost(mono_ms());
        self.reschedule.notify_one();
    }

    pub fn subscribe(&mut self, tx: tokio::sync::mpsc::UnboundedSender<Response>) {
        self.subscribers.push(tx);
    }

    pub fn wait_for(&mut self, input: u64, tx: Outbox) {
        self.waiters.entry(input).or_default().push(tx);
    }

    /// The clients that follow `job`'s output live.
    pub fn followers(&self, job: &str) -> Vec<Outbox> {
        match self.core.job_kind(job) {
            Some(JobKind::Bash {
                client: Some(client),
                ..
            }) => self
                .clients
                .get(&client)
                .map(|(tx, _)| tx.clone())
                .into_iter()
                .collect(),
            Some(JobKind::Run { input, .. }) => {
                self.waiters.get(&input).cloned().unwrap_or_default()
            }
            Some(JobKind::Bash { client: None, .. }) | None => Vec::new(),
        }
    }

    pub fn tell_waiters(&mut self, input: u64, response: Response) {
        if let Some(waiters) = self.waiters.get_mut(&input) {
            waiters.retain(|w| !w.is_closed());
            for w in waiters.iter() {
                w.send_output(
                    response.clone(),
                    input,
                    self.last_output,
                    self.transcript.path(),
                );
            }
        }
    }

    /// Send the clients waiting for `input` their last answer, after the
    /// output queued for them, and forget them.
    fn last_to_waiters(&mut self, input: u64, last: Response) {
        if let Some(waiters) = self.waiters.remove(&input) {
            for w in waiters {
                let _ = w.send_after_output(last.clone());
            }
        }
    }
}

/// The journal's line for a run's end (`EUKHE_RUN` names the run).
fn log_end(body: &EntryBody) {
    match body {
        EntryBody::RunFinished { input, status, .. } => {
            tracing::info!(run = input, status, "run {input} exited {status}")
        }
        EntryBody::RunInterrupted { input } => {
            tracing::info!(run = input, "run {input} interrupted: its kernel is gone")
        }
        _ => {}
    }
}
