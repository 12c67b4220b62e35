//! The worker's state, by job: the transcript store (`transcript_store`:
//! the transcript, its group commit, the spool behind it), the clients
//! (`clients`: who hears what), the books (the run core, sans-IO, and the
//! tick's `Books`), the kernel link and busy evidence. Every decision is a
//! call into `core`, `books` or `laws`; this file carries them out.
//! Opening a worker (`open`) and storing entries (`store`) live beside it.

use super::WorkerError;

use super::books::Books;
use super::core::{Action, ClientId, JobKind, RunCore};
use super::kernel_watch::{KernelSilence, KernelWatch};
use super::outbox::Outbox;
use crate::build_id::build_id;
use crate::clock::{mono_ms, mono_us, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::host::HostError;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::idle_shutdown::{GateEvent, GateOutput, QuiesceAnswer};
use crate::laws::revival::BusyState;
use crate::laws::runs::RunId;
use crate::laws::work::WorkSet;
use crate::protocol::event::{entry_event, latest_line, Event, EventKind};
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{Response, WorkerInfo};
use crate::session::store::{read_json, SessionFiles, SessionMeta};
use crate::session::transcript::{Entry, EntryBody};

mod clients;
mod open;
mod store;
mod transcript_store;

pub use clients::{ClientConnection, Clients};
pub use transcript_store::TranscriptStore;

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
    /// A shell reset asked the kernel to stop: the link's end is expected,
    /// and a fresh kernel follows (`reset`).
    pub reset: Option<super::reset::ResetAsked>,
}

pub struct Worker {
    pub meta: SessionMeta,
    pub files: SessionFiles,
    /// The transcript, its group commit and the spool behind it.
    pub store: TranscriptStore,
    /// The run lifecycle's books and decisions.
    pub core: RunCore,
    /// The tick's books: signs of life, watchdog pings, busy evidence
    /// and the lost-supervisor clock.
    pub books: Books,
    /// Who hears what: bash clients, waiters, subscribers, the supervisor.
    pub clients: Clients,
    /// The link to the session's kernel, once connected.
    pub kernel: Option<tokio::sync::mpsc::UnboundedSender<ToKernel>>,
    /// What the kernel link must still do or expect.
    pub link_owes: LinkOwes,
    /// Wakes requests waiting for the kernel link (`notify_waiters`): as
    /// it comes up, and as the worker stops.
    pub kernel_connected: std::rc::Rc<tokio::sync::Notify>,
    /// The task that records busy evidence: its wake-up, and the lock it
    /// holds while it writes.
    pub evidence: std::rc::Rc<Evidence>,
    journal: BusyJournal,
    /// Wakes the tick: a deadline may have come nearer.
    pub reschedule: std::rc::Rc<tokio::sync::Notify>,
    pub stopping: bool,
    /// This process, read once: `info` goes out with every sign of life.
    identity: ProcessIdentity,
    /// The screens of the terminal jobs that run now, and the last ended one's.
    pub screens: super::screens::Screens,
}

impl Worker {
    /// Carry out the core's actions. When an end that must be stored
    /// cannot be yet (a full disk), it and every action after it are
    /// returned, not carried out: nobody hears of an end before it is on
    /// disk. The caller applies them again until they are
    /// (`serve::loops::apply_until_stored`).
    pub fn apply(&mut self, actions: Vec<Action>) -> Vec<Action> {
        let mut actions = actions.into_iter();
        while let Some(action) = actions.next() {
            match action {
                Action::Store(body @ EntryBody::Output { .. }) => {
                    self.screens_see_store(&body);
                    self.store_output(body)
                }
                Action::Store(body) => {
                    self.screens_see_store(&body);
                    let _ = self.append(body);
                }
                Action::StoreUntilStored(body) => {
                    // Output the transcript could not take is told before
                    // the end (or notice) that follows it.
                    self.notice_unstored_output();
                    match self.append(body.clone()) {
                        Ok(_) => {
                            log_end(&body);
                            self.screens_see_store(&body);
                        }
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
                    self.screens_see_kernel(&message);
                    self.send_kernel(message)
                }
                Action::Waiters(run, response) => self.tell_waiters(run, response),
                Action::EndWaiters(run, exit) => self.last_to_waiters(run, exit),
                Action::Client(client, response) => {
                    let last = matches!(response, Response::Exit { .. });
                    if let Some((tx, number)) = self.clients.bash_client(client) {
                        match response {
                            Response::Output { .. } | Response::OutputAt { .. } => tx.send_output(
                                response,
                                *number,
                                self.store.last_output,
                                self.store.transcript.path(),
                            ),
                            other => {
                                let _ = tx.send_after_output(other);
                            }
                        }
                    }
                    if last {
                        self.clients.forget_bash(client);
                    }
                }
            }
        }
        Vec::new()
    }

    /// Number a client that waits for user bash `number`.
    pub fn add_client(&mut self, tx: Outbox, number: u64) -> ClientId {
        self.clients.add_bash(tx, number)
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
        crate::host::systemd::notify(&format!("STATUS={}", self.unit_status()));
        Ok(())
    }

    /// What the worker tells the service manager it does (`STATUS=`): a
    /// spare is no session until `new` claims it.
    pub fn unit_status(&self) -> String {
        if self.files.meta().exists() {
            format!("serving session {}", self.meta.id)
        } else {
            format!("spare {}, for the next eukhe new", self.meta.id)
        }
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
    pub fn queue_input(
        &mut self,
        text: String,
        tty: Option<crate::protocol::tty::WindowSize>,
    ) -> Result<u64, WorkerError> {
        let input = self.core.next_input();
        self.reserve_input(input)?;
        let entry = self.append(EntryBody::Input {
            input,
            text: text.clone(),
            tty,
        })?;
        self.core.queued(input, (text, tty), entry.at_ms);
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
        self.clients.to_supervisor(Response::Worker(self.info()));
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
            self.clients.output_line.due_at(),
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
            clients: self.clients.open_count(),
            bash: self.core.bash_list().iter().map(|q| q.run).collect(),
            waiting: self.clients.waiting.any(),
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
            .quiesce_for_idle_stop(self.clients.open_count(), mono_us())
    }

    /// Tell the supervisor this worker lives (its watchdog's ping).
    pub fn sign_of_life(&self) {
        if self.clients.supervised() {
            self.clients.to_supervisor(Response::Worker(self.info()));
        }
    }

    /// Tell the supervisor's event stream what a stored entry says: runs
    /// and notices at once, output as its latest line at a bounded rate.
    fn report(&mut self, entry: &Entry) {
        let kind = match &entry.body {
            EntryBody::Output { data, .. } => match latest_line(data) {
                Some(line) => {
                    let waited = self.clients.output_line.due_at().is_some();
                    match self.clients.output_line.seen(line, mono_ms()) {
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
        // Only what `entry_event` makes is replayed from the transcript;
        // the latest output line is live only, so it carries no cursor.
        let seq = match kind {
            EventKind::Output { .. } => None,
            _ => Some(entry.seq),
        };
        self.tell_stored_event(entry.at_ms, kind, seq);
    }

    /// The latest output line, once its turn has come (from the tick).
    pub fn report_output_line(&mut self) {
        if let Some(line) = self.clients.output_line.due(mono_ms()) {
            self.tell_event(wall_ms(), EventKind::Output { line });
        }
    }

    /// Send an event of this session to the supervisor (which stamps it
    /// with the session's current name), if one supervises.
    pub fn tell_event(&self, at_ms: u64, kind: EventKind) {
        self.tell_stored_event(at_ms, kind, None);
    }

    /// An event with its cursor: the seq of the transcript entry it stands
    /// for, so a subscriber that replayed the transcript skips it.
    fn tell_stored_event(&self, at_ms: u64, kind: EventKind, seq: Option<u64>) {
        if self.clients.supervised() {
            let event = Event::session(at_ms, &self.meta.id, &self.meta.name, kind).at_seq(seq);
            self.clients.to_supervisor(Response::Event(event));
        }
    }

    pub fn supervised_by(&mut self, tx: Outbox, build_id: String) {
        self.clients.supervised_by(tx, build_id);
        self.books.supervised();
    }

    pub fn supervisor_lost(&mut self) {
        self.clients.supervisor_lost();
        self.books.supervisor_lost(mono_ms());
        self.reschedule.notify_one();
    }

    pub fn subscribe(&mut self, tx: tokio::sync::mpsc::UnboundedSender<Response>) {
        self.clients.subscribe(tx);
    }

    pub fn wait_for(&mut self, input: u64, tx: Outbox) {
        self.clients.wait_for(input, tx);
    }

    /// The clients that follow `job`'s output live.
    pub fn followers(&self, job: &str) -> Vec<Outbox> {
        match self.core.job_kind(job) {
            Some(JobKind::Bash {
                client: Some(client),
                ..
            }) => self
                .clients
                .bash_client(client)
                .map(|(tx, _)| tx.clone())
                .into_iter()
                .collect(),
            Some(JobKind::Run { input, .. }) => self.clients.waiters_of(input),
            Some(JobKind::Bash { client: None, .. }) | None => Vec::new(),
        }
    }

    pub fn tell_waiters(&mut self, input: u64, response: Response) {
        let (last_output, transcript) = (self.store.last_output, self.store.transcript.path());
        self.clients
            .tell_waiters(input, response, last_output, transcript);
    }

    /// Send the clients waiting for `input` their last answer, after the
    /// output queued for them, and forget them.
    fn last_to_waiters(&mut self, input: u64, last: Response) {
        self.clients.last_to_waiters(input, last);
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

/// Wait until `deadline` for a worker just started to connect to its
/// kernel, or to stop: false when the deadline came first.
pub async fn kernel_link_until(
    worker: &std::rc::Rc<std::cell::RefCell<Worker>>,
    deadline: tokio::time::Instant,
) -> bool {
    let connected = worker.borrow().kernel_connected.clone();
    // One thread: nothing can connect between the check and the wait.
    while !worker.borrow().core.connected() && !worker.borrow().stopping {
        if tokio::time::timeout_at(deadline, connected.notified())
            .await
            .is_err()
        {
            return false;
        }
    }
    true
}
