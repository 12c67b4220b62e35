//! The worker's state and the synchronous steps on it. Every decision is a
//! call into `laws`; this file only keeps the books.

use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::sync::mpsc::UnboundedSender;

use super::engine;
use crate::build_id::build_id;
use crate::clock::{mono_ms, wall_ms};
use crate::host::busy_journal::{BusyJournal, JournalLine};
use crate::host::process::own_identity;
use crate::host::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::idle_shutdown::{
    gate_at, run_gate_step, GateEvent, GateOutput, QuiesceAnswer, RunGate,
};
use crate::laws::orphan::{orphan_decision, LostExitWindow, OrphanVerdict};
use crate::laws::revival::{busy_refresh, BusyState, OwnRecord, RefreshAction};
use crate::laws::runs::{may_withdraw, RunId, RunRecord};
use crate::laws::work::{session_work, Activity, WorkKind, WorkSet};
use crate::paths::Paths;
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{QueuedInput, Response, WorkerInfo};
use crate::session::store::{
    private_dir, read_json, write_json, SessionFiles, SessionMeta, WorkerRecord,
};
use crate::session::transcript::{Entry, EntryBody, Transcript};

/// A job the worker follows in its kernel.
pub struct Followed {
    pub kind: JobKind,
    /// Its end is stored (output may still come until it settles).
    pub ended: bool,
    /// Bytes of a UTF-8 character cut at the end of a record, per stream.
    pub carry: [Vec<u8>; 2],
}

pub enum JobKind {
    /// Run `input`; `lost`: its kernel is gone, so its end is an interruption.
    Run { input: RunId, lost: bool },
    /// User bash, answered to this client.
    Bash { client: UnboundedSender<Response> },
}

pub struct Worker {
    pub meta: SessionMeta,
    pub files: SessionFiles,
    transcript: Transcript,
    /// Every input's latest record, as `laws::runs` reads it.
    pub book: BTreeMap<RunId, RunRecord>,
    /// Queued inputs in order (a copy of the `Queued` part of the book,
    /// with their text and when they were queued).
    pub queue: VecDeque<QueuedInput>,
    next_input: u64,
    /// Where each run's stored output reaches in the kernel's spool.
    pub spool_offsets: HashMap<RunId, u64>,
    /// The text of every run started and not ended (to hand it again).
    pub started_text: HashMap<RunId, String>,
    /// The link to the session's kernel, once connected.
    pub kernel: Option<UnboundedSender<ToKernel>>,
    pub kernel_pid: Option<u32>,
    /// Processes that runs left running, as the kernel counts them.
    pub background: u32,
    /// Jobs the worker follows in the kernel.
    pub jobs: HashMap<String, Followed>,
    bash_seq: u64,
    /// Wakes the task that records busy evidence.
    pub evidence_due: std::rc::Rc<tokio::sync::Notify>,
    gate: RunGate,
    latest_record: Option<OwnRecord>,
    journal: BusyJournal,
    lost_since_ms: Option<u64>,
    lost_window: LostExitWindow,
    subscribers: Vec<UnboundedSender<Response>>,
    waiters: HashMap<u64, Vec<UnboundedSender<Response>>>,
    supervisor: Option<UnboundedSender<Response>>,
    pub stopping: bool,
    /// Output bytes shown but not stored (the disk was full).
    pub unstored_output: u64,
    /// This process, read once: `info` goes out with every sign of life.
    identity: ProcessIdentity,
}

impl Worker {
    /// Open the session: transcript (cutting a torn tail), kernel (over the
    /// snapshot when there is one), and the queue rebuilt from the
    /// transcript.
    pub fn open(paths: &Paths, session: &str) -> Result<Worker, String> {
        let files = SessionFiles::new(paths.session_dir(session));
        let meta: SessionMeta =
            read_json(&files.meta())?.ok_or_else(|| format!("session {session} does not exist"))?;
        private_dir(&files.scratch())?;
        let (transcript, entries, torn) = Transcript::open(&files.transcript())?;
        // The supervisor passes its setting on the process backend; a unit
        // started by systemd reads the configuration itself.
        let lost_window = match std::env::var("EUKHE_WORKER_LOST_EXIT_MS") {
            Ok(text) => crate::config::parse_window(&text)
                .map_err(|e| format!("EUKHE_WORKER_LOST_EXIT_MS: {e}"))?,
            Err(_) => crate::config::Config::load(&paths.config)?.worker_lost_exit_ms,
        };
        engine::check(&meta.engine)?;
        let mut worker = Worker {
            meta,
            files,
            transcript,
            book: BTreeMap::new(),
            queue: VecDeque::new(),
            next_input: 1,
            spool_offsets: HashMap::new(),
            started_text: HashMap::new(),
            kernel: None,
            kernel_pid: None,
            background: 0,
            jobs: HashMap::new(),
            bash_seq: 0,
            evidence_due: Default::default(),
            gate: RunGate::Open,
            latest_record: None,
            journal: HostKind::from_env()?.busy_journal(&paths.state),
            lost_since_ms: Some(mono_ms()),
            lost_window,
            subscribers: Vec::new(),
            waiters: HashMap::new(),
            supervisor: None,
            stopping: false,
            unstored_output: 0,
            identity: own_identity(),
        };
        if let Some(torn) = torn {
            worker.append(EntryBody::Notice {
                text: format!(
                    "the transcript had a torn tail after a crash: {} bytes at offset {} were cut off",
                    torn.bytes, torn.offset
                ),
                restore: None,
            })?;
        }
        worker.rebuild_book(&entries);
        write_json(
            &worker.files.worker(),
            &WorkerRecord {
                identity: worker.identity,
                build_id: build_id().to_string(),
            },
        )?;
        Ok(worker)
    }

    /// The book, the queue and the spool offsets, from the transcript.
    fn rebuild_book(&mut self, entries: &[Entry]) {
        let mut queue = Vec::new();
        let mut texts = HashMap::new();
        for entry in entries {
            match &entry.body {
                EntryBody::Input { input, text } => {
                    self.book.insert(*input, RunRecord::Queued);
                    texts.insert(*input, text.clone());
                    queue.push(QueuedInput {
                        run: *input,
                        text: text.clone(),
                        at_ms: entry.at_ms,
                    });
                    self.next_input = self.next_input.max(input + 1);
                }
                EntryBody::Withdrawn { input } => {
                    self.book.insert(*input, RunRecord::Withdrawn);
                }
                EntryBody::RunStarted { input } => {
                    self.book.insert(*input, RunRecord::Started);
                }
                EntryBody::RunFinished { input, .. } | EntryBody::RunInterrupted { input } => {
                    self.book.insert(*input, RunRecord::Ended);
                }
                EntryBody::Output {
                    input: Some(input),
                    spool_end: Some(end),
                    ..
                } => {
                    self.spool_offsets.insert(*input, *end);
                }
                _ => {}
            }
        }
        self.started_text = texts
            .into_iter()
            .filter(|(run, _)| self.book.get(run) == Some(&RunRecord::Started))
            .collect();
        self.queue = queue
            .into_iter()
            .filter(|q| self.book.get(&q.run) == Some(&RunRecord::Queued))
            .collect();
    }

    /// How many restore notices the transcript holds.
    pub fn restores(&self) -> Result<u32, String> {
        let entries = crate::session::transcript::read_entries(&self.files.transcript())?;
        Ok(entries
            .iter()
            .filter(|e| {
                matches!(
                    e.body,
                    EntryBody::Notice {
                        restore: Some(_),
                        ..
                    }
                )
            })
            .count() as u32)
    }

    /// The run the kernel executes now (started, not ended).
    pub fn current_run(&self) -> Option<RunId> {
        self.book
            .iter()
            .find(|(_, r)| **r == RunRecord::Started)
            .map(|(run, _)| *run)
    }

    /// A fresh job name for user bash.
    pub fn next_bash_job(&mut self) -> String {
        self.bash_seq += 1;
        format!("b{}-{}", self.identity.pid, self.bash_seq)
    }

    /// Store an entry that nobody is told about yet (the next durable
    /// append makes it durable too), then show it to attached clients.
    pub fn append_unacknowledged(&mut self, body: EntryBody) -> Result<Entry, String> {
        let entry = self.transcript.append_unsynced(wall_ms(), body)?;
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
        Ok(entry)
    }

    /// Store an entry durably, then show it to every attached client.
    pub fn append(&mut self, body: EntryBody) -> Result<Entry, String> {
        let entry = self.transcript.append(wall_ms(), body)?;
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
        Ok(entry)
    }

    /// Once the transcript takes entries again, say how much output it
    /// could not keep.
    pub fn notice_unstored_output(&mut self) {
        if self.unstored_output == 0 {
            return;
        }
        let bytes = self.unstored_output;
        let stored = self.append(EntryBody::Notice {
            text: format!("{bytes} bytes of output could not be stored: the disk was full"),
            restore: None,
        });
        if stored.is_ok() {
            self.unstored_output = 0;
        }
    }

    /// Queue input as a new run.
    pub fn queue_input(&mut self, text: String) -> Result<u64, String> {
        let input = self.next_input;
        let entry = self.append(EntryBody::Input {
            input,
            text: text.clone(),
        })?;
        self.next_input += 1;
        self.book.insert(input, RunRecord::Queued);
        self.queue.push_back(QueuedInput {
            run: input,
            text,
            at_ms: entry.at_ms,
        });
        self.work_changed();
        Ok(input)
    }

    /// Withdraw queued input `run`: it never runs.
    pub fn withdraw(&mut self, run: RunId) -> Result<(), String> {
        if !may_withdraw(&self.book, run) {
            return Err(match self.book.get(&run) {
                None => format!("there is no run {run}"),
                Some(RunRecord::Withdrawn) => format!("run {run} is already withdrawn"),
                Some(_) => format!("run {run} is not queued: it has started"),
            });
        }
        self.append(EntryBody::Withdrawn { input: run })?;
        self.book.insert(run, RunRecord::Withdrawn);
        self.queue.retain(|q| q.run != run);
        self.work_changed();
        Ok(())
    }

    /// The session's work now.
    pub fn work(&self) -> WorkSet {
        let mut activities = Vec::new();
        if self.current_run().is_some() {
            activities.push(Activity::Work(WorkKind::Run));
        }
        if !self.queue.is_empty() {
            activities.push(Activity::Work(WorkKind::QueuedInput));
        }
        for job in self.jobs.values() {
            activities.push(match (&job.kind, job.ended) {
                (JobKind::Bash { .. }, false) => Activity::Work(WorkKind::UserBash),
                (JobKind::Run { .. }, false) => Activity::Work(WorkKind::Run),
                (_, true) => Activity::Work(WorkKind::UnsettledChild),
            });
        }
        if self.background > 0 {
            activities.push(Activity::Work(WorkKind::BackgroundJob));
        }
        if self.book.values().any(|r| *r == RunRecord::Withdrawn) {
            activities.push(Activity::WithdrawnInput);
        }
        session_work(&activities)
    }

    /// Record busy evidence as the refresh law says, and tell the supervisor.
    /// Tell the supervisor, and have busy evidence recorded as the refresh
    /// law says (by the evidence task, so no reply waits on its write).
    pub fn work_changed(&mut self) {
        self.evidence_due.notify_one();
        let info = self.info();
        if let Some(supervisor) = &self.supervisor {
            let _ = supervisor.send(Response::Worker(info));
        }
    }

    pub fn refresh_evidence(&mut self) {
        let now = mono_ms();
        let work = self.work();
        let state = match busy_refresh(work, self.latest_record, now) {
            RefreshAction::Nothing => return,
            RefreshAction::RecordBusy => BusyState::Busy,
            RefreshAction::RecordIdle => BusyState::Idle,
        };
        let line = JournalLine {
            session: self.meta.id.clone(),
            state,
            at_ms: Some(wall_ms()),
            work,
            build: build_id().to_string(),
        };
        match self.journal.record(&line) {
            Ok(()) => self.latest_record = Some(OwnRecord { state, at_ms: now }),
            Err(e) => tracing::error!("cannot record busy evidence: {e}"),
        }
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
            background: self.background,
            kernel_pid: self.kernel_pid,
        }
    }

    /// Whether the run gate admits a new run now.
    pub fn gate_admits_run(&mut self) -> bool {
        let (gate, output) = run_gate_step(self.gate, GateEvent::RunRequest, mono_ms());
        self.gate = gate;
        output == GateOutput::Run { admitted: true }
    }

    pub fn gate_event(&mut self, event: GateEvent) -> GateOutput {
        let (gate, output) = run_gate_step(self.gate, event, mono_ms());
        self.gate = gate;
        output
    }

    pub fn quiesce(&mut self) -> QuiesceAnswer {
        match self.gate_event(GateEvent::Quiesce { work: self.work() }) {
            GateOutput::Answer(answer) => answer,
            _ => QuiesceAnswer::Busy,
        }
    }

    pub fn expire_gate(&mut self) {
        self.gate = gate_at(self.gate, mono_ms());
    }

    /// Tell the supervisor this worker lives (its watchdog's ping).
    pub fn sign_of_life(&self) {
        if let Some(supervisor) = &self.supervisor {
            let _ = supervisor.send(Response::Worker(self.info()));
        }
    }

    pub fn supervised_by(&mut self, tx: UnboundedSender<Response>) {
        self.supervisor = Some(tx);
        self.lost_since_ms = None;
    }

    pub fn supervisor_lost(&mut self) {
        self.supervisor = None;
        self.lost_since_ms.get_or_insert(mono_ms());
    }

    /// What to do about a lost supervisor now.
    pub fn orphan_verdict(&self) -> OrphanVerdict {
        match self.lost_since_ms {
            None => OrphanVerdict::Wait,
            Some(since) => orphan_decision(since, mono_ms(), self.lost_window, self.work()),
        }
    }

    pub fn subscribe(&mut self, tx: UnboundedSender<Response>) {
        self.subscribers.push(tx);
    }

    pub fn wait_for(&mut self, input: u64, tx: UnboundedSender<Response>) {
        self.waiters.entry(input).or_default().push(tx);
    }

    pub fn tell_waiters(&mut self, input: u64, response: Response) {
        if let Some(waiters) = self.waiters.get_mut(&input) {
            waiters.retain(|w| w.send(response.clone()).is_ok());
        }
    }

    pub fn end_waiters(&mut self, input: u64, status: i32) {
        if let Some(waiters) = self.waiters.remove(&input) {
            for w in waiters {
                let _ = w.send(Response::Exit { status });
            }
        }
    }
}
