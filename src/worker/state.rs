//! The worker's state: the run core (`core`, sans-IO) and the I/O it is
//! driven with (transcript, clients, the kernel link, busy evidence). Every
//! decision is a call into `core` or `laws`; this file carries them out.

use super::WorkerError;
use std::collections::HashMap;

use super::books::Books;
use super::checkpoint::{self, Checkpoint};
use super::core::{Action, ClientId, JobKind, Replay, RunCore};
use super::engine;
use super::kernel_watch::{KernelSilence, KernelWatch};
use super::outbox::{Outbox, Stored};
use crate::build_id::build_id;
use crate::clock::{mono_ms, mono_us, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::host::process::own_identity;
use crate::host::{HostError, HostKind};
use crate::kernel::spool::Spool;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::events::OutputLine;
use crate::laws::idle_shutdown::{GateEvent, GateOutput, QuiesceAnswer};
use crate::laws::orphan::LostExitWindow;
use crate::laws::revival::BusyState;
use crate::laws::runs::RunId;
use crate::laws::work::WorkSet;
use crate::paths::Paths;
use crate::protocol::event::{entry_event, latest_line, Event, EventKind};
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{Response, WorkerInfo};
use crate::session::notices;
use crate::session::numbers::NumberMark;
use crate::session::store::{
    private_subdir, read_json, read_meta_or_spare, write_json_unsynced, SessionFiles, SessionMeta,
    WorkerRecord,
};
use crate::session::transcript::{
    Entry, EntryBody, Opened, OutputBytes, TornTail, Transcript, STORED_FROM_BYTES,
};
use crate::session::{page_cache, zeros};

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
    /// Open the session: transcript (cutting a torn tail), kernel (over the
    /// snapshot when there is one), and the queue rebuilt from the
    /// transcript.
    pub fn open(paths: &Paths, session: &str) -> Result<Worker, WorkerError> {
        let files = SessionFiles::new(paths.session_dir(session));
        let meta: SessionMeta = read_meta_or_spare(&files)?
            .ok_or_else(|| WorkerError::NoSession(session.to_string()))?;
        private_subdir(&files.scratch())?;
        let (opened, replay, restore_notices) = replay_transcript(&files)?;
        let shadow = Replay::resume(replay.books().clone(), std::process::id());
        let core = replay.finish();
        let config = crate::config::Config::load(&paths.config).map_err(WorkerError::Other)?;
        let lost_window = lost_exit_window(&config)?;
        engine::check(&meta.engine)?;
        let spool = Spool::open(&files.spool()).map_err(WorkerError::Other)?;
        let mut worker = Worker {
            spool,
            meta,
            files,
            transcript: opened.transcript,
            core,
            output_sync: std::time::Duration::from_millis(config.output_sync_ms),
            commit_signals: CommitSignals::default(),
            sync_pending: false,
            spool_stored: HashMap::new(),
            kernel: None,
            clients: HashMap::new(),
            last_output: None,
            restore_notices,
            next_client: 1,
            evidence: Default::default(),
            kernel_connected: Default::default(),
            books: Books::new(
                mono_ms(),
                lost_window,
                crate::host::systemd::watchdog_ping_interval()
                    .map(|every| every.as_millis() as u64),
            ),
            journal: HostKind::from_env()?.busy_journal(&paths.state),
            subscribers: Vec::new(),
            waiters: HashMap::new(),
            supervisor: None,
            stopping: false,
            link_owes: LinkOwes::default(),
            unstored_output: 0,
            unstored_of: Default::default(),
            identity: own_identity(),
            open_clients: Default::default(),
            clients_changed: Default::default(),
            output_line: Default::default(),
            shadow,
            checkpointed_at: opened.read_from,
            numbers: NumberMark::default(),
        };
        let damaged = (opened.damaged.as_slice(), opened.numbered_until);
        worker.note_transcript_repairs(opened.migrated, opened.torn.as_ref(), damaged)?;
        worker.checkpoint_if_due();
        worker.index_restore_notices();
        worker.record_identity()?;
        Ok(worker)
    }

    /// Record who this worker is. Not synced, as the kernel's record:
    /// after a machine crash the recorded worker is dead anyway, and it is
    /// only ever trusted by identity (pid and start time); an unreadable
    /// record is no worker.
    fn record_identity(&self) -> Result<(), WorkerError> {
        write_json_unsynced(
            &self.files.worker(),
            &WorkerRecord {
                identity: self.identity,
                build_id: build_id().to_string(),
            },
        )?;
        Ok(())
    }

    /// Log a migration and store a notice of each repair the open made;
    /// settle where input numbering goes on (`damaged`: the regions read,
    /// and where the last entry that numbers an input ends).
    fn note_transcript_repairs(
        &mut self,
        migrated: Option<u64>,
        torn: Option<&TornTail>,
        (damaged, numbered_until): (&[(u64, u64)], u64),
    ) -> Result<(), WorkerError> {
        if let Some(count) = migrated {
            tracing::info!(
                count,
                "the transcript was copied to the current format ({count} entries)"
            );
        }
        if let Some(torn) = torn {
            self.append(notices::torn_tail(torn))?;
        }
        // Every reader shows damage where it is (`transcript::read`): a
        // notice here would be a second one, at the end.
        for (offset, bytes) in damaged {
            tracing::warn!("the transcript is damaged: {bytes} bytes at offset {offset}");
        }
        self.settle_numbers((damaged, numbered_until), torn.is_some())
    }

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

    /// Store an entry that nobody is told about yet (the next durable
    /// append makes it durable too), then show it to attached clients.
    pub fn append_unacknowledged(&mut self, body: EntryBody) -> Result<Entry, WorkerError> {
        let entry = self.transcript.append_unsynced(wall_ms(), body)?;
        self.appended_unacknowledged(entry)
    }

    fn appended_unacknowledged(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.shadow.see(&entry);
        self.report(&entry);
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
        Ok(entry)
    }

    /// Output is written at once and group-committed: fsynced within
    /// `output_sync_ms` (and by its run's end record, which is synced).
    fn store_output(&mut self, body: EntryBody) {
        // Only numbers are kept here: whose output it was is put in words
        // only when it could not be stored (this runs for every chunk).
        let (bytes, input, bash) = match &body {
            EntryBody::Output {
                data, input, bash, ..
            } => (data.len() as u64, *input, *bash),
            _ => (0, None, None),
        };
        let offset = self.transcript.end_offset();
        let stored = match self.stored_in(&body) {
            // Written once: the record says where in the spool its bytes
            // are.
            Some(job) => {
                let sync = self.output_sync.is_zero();
                match self.transcript.append_stored(wall_ms(), body, &job, sync) {
                    Ok(entry) if sync => self.appended(entry),
                    Ok(entry) => self.appended_unacknowledged(entry),
                    Err(e) => Err(e.into()),
                }
            }
            None if self.output_sync.is_zero() => self.append(body),
            None => self.append_unacknowledged(body),
        };
        self.last_output = stored.as_ref().ok().map(|entry| Stored {
            seq: entry.seq,
            offset,
        });
        match stored {
            Err(_) => {
                self.unstored_output += bytes;
                self.unstored_of.insert(match (bash, input) {
                    (Some(bash), _) => format!("bash {bash}"),
                    (None, Some(run)) => format!("run {run}"),
                    (None, None) => "a command".to_string(),
                });
            }
            Ok(_) if !self.output_sync.is_zero() && !self.sync_pending => {
                self.sync_pending = true;
                self.commit_signals.due.notify_one();
            }
            Ok(_) if self.transcript.unrecycled() >= page_cache::COMMIT_EARLY_BYTES => {
                self.commit_signals.now.notify_one();
            }
            Ok(_) => {}
        }
    }

    /// The job whose spool record holds `body`'s bytes, when they are left
    /// there (`transcript::STORED_FROM_BYTES` or more, not a run of zeros
    /// the spool keeps as its length: the transcript keeps those as holes).
    fn stored_in(&self, body: &EntryBody) -> Option<String> {
        let EntryBody::Output {
            input,
            bash,
            data,
            spool_end: Some(_),
            ..
        } = body
        else {
            return None;
        };
        if data.len() < STORED_FROM_BYTES || zeros::handed_out(data) {
            return None;
        }
        self.core.job_of_output(*input, *bash).map(str::to_string)
    }

    /// The group commit: what makes every entry written so far durable,
    /// off this thread (a large fdatasync must not hold the worker), then
    /// releases the spool behind it.
    pub fn group_commit(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        self.sync_pending = false;
        let handle = self
            .transcript
            .take_sync_handle()
            .map_err(|e| tracing::warn!("{e}"))
            .ok()
            .flatten()?;
        let stored = std::mem::take(&mut self.spool_stored);
        let spool = self.spool.clone();
        Some(move || match handle.commit() {
            Ok(()) => {
                for (job, upto) in stored {
                    spool.release(&job, upto);
                }
            }
            Err(e) => tracing::warn!("{e}"),
        })
    }

    /// Save the books as of the transcript's last record once it has grown
    /// `CHECKPOINT_BYTES` since the last save (or since where this worker
    /// began reading): first everything written is made durable, so the
    /// checkpoint never covers an entry a machine crash could take back.
    fn checkpoint_if_due(&mut self) {
        let Some(after) = self.transcript.last_record() else {
            return;
        };
        if !checkpoint::due(self.checkpointed_at, after.end) {
            return;
        }
        let saved = self.transcript.sync_written().and_then(|()| {
            checkpoint::save(
                &self.files.replay_checkpoint(),
                &Checkpoint {
                    after,
                    books: self.shadow.books().clone(),
                    restore_notices: self.restore_notices.clone(),
                },
            )
        });
        match saved {
            Ok(()) => self.checkpointed_at = after.end,
            Err(e) => tracing::warn!("cannot save the replay checkpoint: {e}"),
        }
    }

    /// Keep the index of restore notices a tail read from disk shows (a
    /// cache of the transcript's: losing it loses no entry).
    pub fn index_restore_notices(&self) {
        let path = self.files.restore_notices();
        if let Err(e) = write_json_unsynced(&path, &self.restore_notices) {
            tracing::warn!("{e}");
        }
    }

    /// Store an entry durably, then show it to every attached client.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, WorkerError> {
        let entry = self.transcript.append(wall_ms(), body)?;
        self.appended(entry)
    }

    fn appended(&mut self, entry: Entry) -> Result<Entry, WorkerError> {
        self.shadow.see(&entry);
        if is_restore_notice(&entry) {
            self.restore_notices.push(entry.clone());
            self.index_restore_notices();
        }
        self.checkpoint_if_due();
        self.report(&entry);
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
        Ok(entry)
    }

    /// Once the transcript takes entries again, say how much output it
    /// could not keep, and whose.
    pub fn notice_unstored_output(&mut self) {
        if self.unstored_output == 0 {
            return;
        }
        let writers: Vec<&str> = self.unstored_of.iter().map(String::as_str).collect();
        let text = format!(
            "{} bytes of the output of {} could not be stored in the transcript (the disk was full); \
             clients following it then got them",
            self.unstored_output,
            writers.join(", ")
        );
        let stored = self.append(EntryBody::Notice {
            text,
            restore: None,
            restore_id: None,
        });
        if stored.is_ok() {
            self.unstored_output = 0;
            self.unstored_of.clear();
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
    pub fn evidence_to_write(&self) -> Option<(BusyJournal, JournalLine, BusyState, u64)> {
        let now = mono_ms();
        let state = self.books.evidence_due(self.work(), now)?;
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
            Err(e) => tracing::error!("cannot record busy evidence: {e}"),
        }
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
        self.core.gate_event(event, mono_us())
    }

    pub fn quiesce(&mut self) -> QuiesceAnswer {
        self.core.quiesce(mono_us())
    }

    /// Quiesce for an idle stop: busy with work or with a client connected.
    pub fn quiesce_for_idle_stop(&mut self) -> QuiesceAnswer {
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
                Some(line) => match self.output_line.seen(line, mono_ms()) {
                    Some(line) => EventKind::Output { line },
                    None => return,
                },
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

/// Open the transcript: it, the books rebuilt from it, and every restore notice it holds.
/// The books from the transcript: from the replay checkpoint on when it
/// holds, else from the start. They need no output bytes.
fn replay_transcript(files: &SessionFiles) -> Result<(Opened, Replay, Vec<Entry>), WorkerError> {
    let path = files.transcript();
    let saved = checkpoint::load(&files.replay_checkpoint())
        .filter(|saved| Transcript::resumable(&path, &saved.after));
    let job_tag = std::process::id();
    let (mut replay, mut restore_notices, after) = match saved {
        Some(saved) => (
            Replay::resume(saved.books, job_tag),
            saved.restore_notices,
            Some(saved.after),
        ),
        None => (RunCore::replay(job_tag), Vec::new(), None),
    };
    let opened = Transcript::open_with(&path, OutputBytes::Left, after, &mut |entry| {
        replay.see(&entry);
        if is_restore_notice(&entry) {
            restore_notices.push(entry);
        }
    })?;
    if let Some(after) = after {
        tracing::info!(
            "read the transcript from offset {} (the replay checkpoint's entry {})",
            after.end,
            after.seq
        );
    }
    Ok((opened, replay, restore_notices))
}

/// How long the worker waits for a supervisor before it exits.
fn lost_exit_window(config: &crate::config::Config) -> Result<LostExitWindow, WorkerError> {
    // The supervisor passes its setting on the process backend; a unit
    // started by systemd reads the configuration itself.
    match std::env::var("EUKHE_WORKER_LOST_EXIT_MS") {
        Ok(text) => crate::config::parse_window(&text)
            .map_err(|e| WorkerError::Other(format!("EUKHE_WORKER_LOST_EXIT_MS: {e}"))),
        Err(_) => Ok(config.worker_lost_exit_ms),
    }
}

fn is_restore_notice(entry: &Entry) -> bool {
    matches!(
        entry.body,
        EntryBody::Notice {
            restore: Some(_),
            ..
        }
    )
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
