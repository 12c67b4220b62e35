//! Requests and responses. Every message is one frame of JSON, tagged by
//! `type`; an unknown type or field is a malformed message, never ignored.

use serde::{Deserialize, Serialize};

use super::event::Event;
use super::hello::Hello;
use crate::laws::idle_shutdown::QuiesceAnswer;
use crate::laws::work::WorkSet;
use crate::session::entry::Stream;
use crate::session::env::SessionEnv;
use crate::session::transcript::Entry;

/// What a client (or the supervisor) asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Hello(Hello),
    /// Create a session.
    New {
        name: Option<String>,
        cwd: Option<String>,
        /// The session's first environment (absent: the daemon's, as an
        /// older client gets).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<SessionEnv>,
    },
    /// List sessions.
    List,
    /// The daemon's own state.
    Status,
    /// Start a given-up session afresh.
    Restart {
        session: String,
    },
    /// Remove a session: refused while it is busy unless `force` (which
    /// cancels its work); its processes end and its directory is deleted.
    Remove {
        session: String,
        force: bool,
    },
    /// Give a session another name (its id never changes).
    Rename {
        session: String,
        name: String,
    },
    /// Subscribe to the daemon's events (all sessions', or one's):
    /// answered with `Ok`, then one `Event` frame per event until either
    /// side hangs up.
    Events {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    /// Stop the daemon.
    Shutdown {
        mode: ShutdownMode,
    },
    /// A request for one session's worker, routed by the supervisor.
    Session {
        session: String,
        request: SessionRequest,
    },
    /// Supervisor to worker: serve this client's request, and the client
    /// from now on, directly. One byte follows, carrying the client's
    /// connection (`host::handoff`).
    Handoff {
        session: String,
        request: SessionRequest,
    },
    /// Supervisor to worker: take this worker under supervision.
    Supervise {
        build_id: String,
    },
    /// Supervisor to worker: quiesce for an idle shutdown.
    Quiesce,
    /// Supervisor to worker: quiesce for an idle stop (busy while a client
    /// is connected, as well as with work: `laws::idle_stop`).
    QuiesceIdle,
    /// Supervisor to worker: the shutdown did not commit; reopen the gate.
    Release,
    /// Supervisor to worker: stop, keeping resumable work (the kernel and
    /// its runs keep running).
    Stop,
    /// Supervisor to worker: the idle shutdown's stop. Taken only while the
    /// worker's gate is still quiesced (answered `Ok`, then the worker
    /// stops as for `Stop`); a worker whose gate reopened answers
    /// `Quiesce { answer: busy }` and keeps serving.
    IdleStop,
    /// Supervisor to worker: stop the session's kernel (every process of
    /// the session ends), then the worker (`shutdown --force`).
    StopWithKernel,
}

/// A request served by a session's worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionRequest {
    /// Queue input; with `wait`, stream the run and end with its exit.
    Send { text: String, wait: bool },
    /// Run a command now in the session's shell, beside any run; what it
    /// leaves in the shell persists.
    Bash {
        command: String,
        /// The command's standard input is this client's: the pid of the
        /// client process (its peer credentials must agree), whose fd 0
        /// the command opens. None: `/dev/null`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdin: Option<u32>,
    },
    /// The transcript rebuilt from stored messages: all of it, the last
    /// `tail` entries, those after entry `after`, or input `input`'s
    /// entries; with `follow`, then live entries until the client leaves
    /// (or, with `input`, until that input has ended).
    Log {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        follow: bool,
    },
    /// The transcript's last `tail` entries (default 200; or those after
    /// entry `after`, when attaching again), then live entries until the
    /// client leaves.
    Attach {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail: Option<u64>,
    },
    /// Cancel the running run; with `all`, withdraw every queued input too.
    Cancel { all: bool },
    /// Cancel input `input` by its number: a running run or user bash is
    /// signalled as `Cancel` signals a run, a queued run is withdrawn.
    /// Answered `Cancelled` (`run` when signalled, `withdrawn` when
    /// withdrawn) or with an error naming why not.
    CancelInput { input: u64 },
    /// The queued inputs.
    Queue,
    /// Withdraw queued input `run` (it never runs).
    Withdraw { run: u64 },
}

/// One queued input, as `eukhe queue` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedInput {
    pub run: u64,
    pub text: String,
    /// Wall-clock milliseconds when it was queued.
    pub at_ms: u64,
}

/// How `shutdown` stops the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownMode {
    /// Stop the supervisor; workers with work keep it resumable.
    Normal,
    /// Stop only if every worker quiesces (the idle-shutdown protocol).
    IfIdle,
    /// Stop every worker now; transcripts keep what was acknowledged.
    Force,
}

/// A session as `eukhe ls` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    pub id: String,
    pub name: String,
    /// running, busy, idle, restarting, given-up, saved or damaged.
    pub state: String,
    pub pid: Option<u32>,
    pub build: Option<String>,
    pub failures_in_window: u32,
    /// Processes that runs left running (background jobs).
    #[serde(default)]
    pub jobs: u32,
    /// The session's kernel (its live shell), while it lives.
    #[serde(default)]
    pub kernel_pid: Option<u32>,
    /// The session's working directory: its shell's now (as its saved
    /// shell state says), else the one it was created in.
    #[serde(default)]
    pub cwd: String,
    /// When it was created, wall-clock milliseconds.
    #[serde(default)]
    pub created_ms: u64,
    /// When it last did something (its transcript's last write),
    /// wall-clock milliseconds.
    #[serde(default)]
    pub active_ms: u64,
    /// A file of the session that cannot be read, and what is wrong with
    /// it (state `damaged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The daemon as `eukhe status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusInfo {
    pub version: String,
    pub build_id: String,
    pub pid: u32,
    pub backend: String,
    pub protocol: u32,
    pub capabilities: Vec<String>,
    pub sessions: u32,
    pub running: u32,
    pub busy: u32,
    pub given_up: u32,
    pub socket: String,
    pub state_dir: String,
}

/// A worker's account of itself to its supervisor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerInfo {
    pub session: String,
    pub pid: u32,
    pub start_time: u64,
    pub build_id: String,
    pub work: WorkSet,
    /// Processes that runs left running.
    #[serde(default)]
    pub background: u32,
    #[serde(default)]
    pub kernel_pid: Option<u32>,
    /// Client connections open (attached clients, requests being served).
    #[serde(default)]
    pub clients: u32,
}

/// What comes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    Hello(Hello),
    /// The request failed; the message is one line for the user.
    Error {
        message: String,
    },
    /// Done, nothing to report.
    Ok,
    Created {
        id: String,
        name: String,
    },
    /// The answer to `rm`: the session `id`, named `name`, is gone.
    Removed {
        id: String,
        name: String,
    },
    Sessions {
        sessions: Vec<SessionInfo>,
    },
    Status(StatusInfo),
    /// Input queued as run `input`.
    Queued {
        input: u64,
    },
    /// Output of a run or of user bash.
    Output {
        stream: Stream,
        data: Vec<u8>,
    },
    /// A run or user bash ended.
    Exit {
        status: i32,
    },
    /// One transcript entry (log, attach).
    Entry(Entry),
    /// The end of a replay; live entries may follow on attach.
    Replayed,
    /// The answer to `shutdown`.
    Shutdown {
        stopped: bool,
        message: String,
    },
    Worker(WorkerInfo),
    Quiesce {
        answer: QuiesceAnswer,
    },
    /// The answer to `cancel`: the run cancelled (if one ran) and the
    /// inputs withdrawn.
    Cancelled {
        run: Option<u64>,
        withdrawn: Vec<u64>,
    },
    /// The answer to `queue`.
    Queue {
        inputs: Vec<QueuedInput>,
    },
    /// One event of the daemon's stream (and, worker to supervisor on the
    /// control connection, one the worker reports).
    Event(Event),
}
