//! Requests and responses. Every message is one frame of JSON, tagged by
//! `type`; an unknown type or field is a malformed message, never ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::{Entry, LostOutput, Stream};
use super::event::Event;
use super::hello::Hello;
use super::tty::{TerminalInput, WindowSize};
use crate::laws::idle_shutdown::QuiesceAnswer;
use crate::laws::limits::ResourceLimits;
use crate::laws::work::WorkSet;

/// How a session's first environment is made: sent with `New`, kept in
/// the session's `env.json` (`session::env` says which variables are
/// carried).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEnv {
    /// The client's exported variables (those carried); `None` starts from
    /// the daemon's (`--clean-env`).
    pub client: Option<BTreeMap<String, String>>,
    /// `--env KEY=VALUE`, set over either.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// What a client (or the supervisor) asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The greeting every connection starts with (`protocol::hello`).
    Hello(Hello),
    /// Create a session.
    New {
        /// The session's name; absent, its id.
        name: Option<String>,
        /// The directory its shell starts in; absent, the daemon's `$HOME`.
        cwd: Option<String>,
        /// The session's first environment (absent: the daemon's, as an
        /// older client gets).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<SessionEnv>,
        /// Its kernel's resource limits, over `config.toml`'s defaults.
        #[serde(default, skip_serializing_if = "ResourceLimits::is_none")]
        limits: ResourceLimits,
    },
    /// List sessions.
    List,
    /// The daemon's own state.
    Status,
    /// Start a given-up session afresh.
    Restart {
        /// The session's name or id.
        session: String,
    },
    /// Remove a session: refused while it is busy unless `force` (which
    /// cancels its work); its processes end and its directory is deleted.
    Remove {
        /// The session's name or id.
        session: String,
        /// Remove it even while busy, cancelling its work.
        force: bool,
    },
    /// Give a session another name (its id never changes).
    Rename {
        /// The session's current name or id.
        session: String,
        /// The new name.
        name: String,
    },
    /// Subscribe to the daemon's events (all sessions', or one's):
    /// answered with `Ok`, then one `Event` frame per event until either
    /// side hangs up.
    Events {
        /// Only this session's events (name or id); absent, every session's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    /// Stop the daemon.
    Shutdown {
        /// How far to go: see [`ShutdownMode`].
        mode: ShutdownMode,
    },
    /// A request for one session's worker, routed by the supervisor.
    Session {
        /// The session's name or id.
        session: String,
        /// What its worker is to do.
        request: SessionRequest,
    },
    /// Supervisor to worker: serve this client's request, and the client
    /// from now on, directly. One byte follows, carrying the client's
    /// connection (`host::handoff`).
    Handoff {
        /// The session's id.
        session: String,
        /// The client's request, which the worker now answers.
        request: SessionRequest,
        /// The client reads zero-run frames (its hello said
        /// `zero_runs`); told only to a worker whose hello says so too.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        zero_runs: bool,
    },
    /// Client to a session's worker, right after a hello saying `direct`:
    /// serve this request, and the client from now on, as a client handed
    /// over. A worker that will not answers its hello without `direct` and
    /// serves nothing (`laws::direct`).
    Direct {
        /// The session's id.
        session: String,
        /// The client's request.
        request: SessionRequest,
    },
    /// Client to worker, on the connection of its `Bash` or `Send --wait`
    /// that asked for a terminal, while that run goes on: keys typed for
    /// it or its new window size. Not answered; keys that come before the
    /// run has started are dropped.
    TerminalInput {
        /// The keys or the size.
        input: TerminalInput,
    },
    /// Supervisor to worker: take this worker under supervision.
    Supervise {
        /// The supervisor's build, so a worker of another build can be told apart.
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
    /// stops as for `StopWithKernel`: it is idle, so its kernel has nothing
    /// to keep; the snapshot stays); a worker whose gate reopened answers
    /// `Quiesce { answer: busy }` and keeps serving.
    IdleStop,
    /// Supervisor to worker: stop the session's kernel (every process of
    /// the session ends), then the worker (`shutdown --force`).
    StopWithKernel,
    /// Supervisor to worker: `eukhe new` claimed this spare session (its
    /// `meta.json` is written): read the metadata, have the kernel make the
    /// first snapshot.
    Claim,
}

/// A request served by a session's worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum SessionRequest {
    /// Queue input; with `wait`, stream the run and end with its exit.
    Send {
        /// The input: a command line for the `shell` engine.
        text: String,
        /// Stream the run's output and end with its exit.
        wait: bool,
        /// Run it on a terminal of this size (a terminal run); with `wait`
        /// the client may then send `tty::TerminalInput` frames for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<WindowSize>,
    },
    /// Run a command now in the session's shell, beside any run; what it
    /// leaves in the shell persists.
    Bash {
        /// The command line, run by the session's shell.
        command: String,
        /// The command's standard input is this client's: the pid of the
        /// client process (its peer credentials must agree), whose fd 0
        /// the command opens. None: `/dev/null`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdin: Option<u32>,
        /// Run it on a terminal of this size (then `stdin` is not used);
        /// the client may then send `tty::TerminalInput` frames for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tty: Option<WindowSize>,
        /// The client is on another machine, behind `eukhe proxy` (sent
        /// only to a daemon advertising `remote_clients`): the end of this
        /// connection is the proxy's, not the client's, so the command
        /// rides through it for a reconnection grace.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        remote: bool,
        /// With `tty`: say where in the command's spool each output frame
        /// ends (`OutputAt`), so the client can merge the output its
        /// kernel sends it straight (a typist's `echo`). Sent only to a
        /// daemon of the client's own build: an earlier one refuses it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        offsets: bool,
    },
    /// A remote client follows its user bash `input` again after its
    /// connection dropped (sent before the `Log` that follows it): the
    /// hang-up its dropped connection would bring is off, and this
    /// connection's end is watched instead. Answers nothing.
    Rejoin {
        /// The user bash's number.
        input: u64,
    },
    /// A remote client that really leaves (Ctrl-C twice, SIGTERM, SIGHUP,
    /// a closed standard output) hangs up its user bash `input` at once,
    /// as a local client's end does. Answered `Ok`, or an error saying it
    /// is not a user bash that runs.
    HangUp {
        /// The user bash's number.
        input: u64,
    },
    /// Write `data` to the terminal of terminal run `input` (absent: the
    /// session's current terminal run); answered `Ok` once the bytes are
    /// in the terminal's input queue.
    Keys {
        /// The input's number.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
        /// The bytes.
        #[serde(with = "super::tty::base64_bytes")]
        data: Vec<u8>,
    },
    /// The screen of terminal run `input` (absent: the session's current
    /// terminal run, else the last one that ended), answered `Screen`.
    Screen {
        /// The input's number.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
    },
    /// Wait until the screen of terminal run `input` (absent: the
    /// session's current terminal run, else the last one that ended) meets
    /// any of `until`, at most `timeout_ms` (bounded by
    /// `laws::timing::WAIT_FOR_TIMEOUT_MAX_MS`). Answered once with
    /// `WaitedFor`: the condition that held, or the run's end without one,
    /// or the timeout (the run goes on); an invalid regex is one error line.
    WaitFor {
        /// The input's number.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
        /// The conditions: any one holding ends the wait.
        until: Vec<Until>,
        /// How long to wait, in milliseconds.
        timeout_ms: u64,
    },
    /// Pass a terminal run through to an attached terminal: answered
    /// `Redraw` (the bytes that paint its screen as it is now), then its
    /// output live and its end as `Send --wait` hears them; an error when
    /// the session's current run (or run `input`) is no terminal run that
    /// runs.
    WatchTerminal {
        /// The run's number (absent: the session's current run).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
        /// Say where in the run's spool the screen and each output frame
        /// end (`Redraw`'s `at`, `OutputAt`), so the client can merge
        /// the output its kernel sends it straight (a typist's `echo`). A
        /// worker of an earlier build refuses the field as malformed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        offsets: bool,
    },
    /// The client leaves on purpose (a detach from a terminal run): the
    /// user bash this connection asked for goes on, never hung up for its
    /// client's going. Answers nothing.
    Detach,
    /// From here on, this connection's `tty::TerminalInput` frames go to
    /// the terminal of running input `input`: how a client types into a
    /// terminal run whose output it follows on another connection (a
    /// passthrough riding through a lost worker, an attach). Answered `Ok`,
    /// or an error saying the input is not running.
    TypeInto {
        /// The running terminal run's input number.
        input: u64,
    },
    /// Where running input `input`'s keys may go straight to the kernel
    /// that holds its terminal (a typist's connection, past the worker):
    /// answered `Typist`, or an error saying the input is not running.
    Typist {
        /// The running terminal run's input number.
        input: u64,
    },
    /// The transcript rebuilt from stored messages: all of it, the last
    /// `tail` entries, those after entry `after`, or input `input`'s
    /// entries; with `follow`, then live entries until the client leaves
    /// (or, with `input`, until that input has ended).
    Log {
        /// Only the last this many entries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail: Option<u64>,
        /// Only the entries of this input.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<u64>,
        /// Only the entries numbered after this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        /// Keep streaming live entries after the stored ones.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        follow: bool,
    },
    /// A window of input `input`'s output (`stream`, or both as they
    /// came): answered with parts (`window_part`, then its bytes as
    /// output frames), then `window_end` with the whole output's size.
    Window {
        /// The input's number.
        input: u64,
        /// Only this stream's bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stream: Option<Stream>,
        /// Which part.
        window: super::window::OutputWindow,
    },
    /// The transcript's last `tail` entries (default 200; or those after
    /// entry `after`, when attaching again), then live entries until the
    /// client leaves.
    Attach {
        /// Only the entries numbered after this one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<u64>,
        /// How many stored entries to replay first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail: Option<u64>,
    },
    /// Cancel the running run and every running user bash; with `all`,
    /// withdraw every queued input too.
    Cancel {
        /// Withdraw every queued input too.
        all: bool,
    },
    /// Cancel input `input` by its number: a running run or user bash is
    /// signalled as `Cancel` signals a run, a queued run is withdrawn.
    /// Answered `Cancelled` (`run` when signalled, `withdrawn` when
    /// withdrawn) or with an error naming why not.
    CancelInput {
        /// The input's number.
        input: u64,
    },
    /// The queued inputs.
    Queue,
    /// Give the session a fresh shell: the kernel ends and a new one
    /// starts from the session's first state (its first working directory
    /// and environment); the transcript stays, with one notice saying so.
    /// Refused while a run, a user bash or a background job runs, unless
    /// `force` (they end with the old shell, recorded interrupted); queued
    /// inputs stay and run in the new shell. Answered `Ok` once the new
    /// kernel serves.
    ResetShell {
        /// End what runs rather than refuse.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
    },
    /// Withdraw queued input `run` (it never runs).
    Withdraw {
        /// The queued input's number.
        run: u64,
    },
}

/// A condition `WaitFor` waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Until {
    /// The screen's text (its rows joined by newlines) matches `regex`
    /// (the `regex` crate's syntax).
    Screen {
        /// The regular expression.
        regex: String,
    },
    /// The run waits for input (`laws::waiting`).
    Waiting,
    /// The run has ended.
    End,
}

/// One queued input, as `eukhe queue` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedInput {
    /// The input's number, which `withdraw` and `cancel` take.
    pub run: u64,
    /// The input as queued.
    pub text: String,
    /// Wall-clock milliseconds when it was queued.
    pub at_ms: u64,
    /// A user bash that runs now (never queued: `cancel` ends it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bash: bool,
    /// A terminal run, and its terminal's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tty: Option<WindowSize>,
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
    /// The session's id: never changes, names its directory.
    pub id: String,
    /// The session's name: unique among sessions, may change.
    pub name: String,
    /// running, busy, idle, restarting, given-up, saved or damaged.
    pub state: String,
    /// The worker's pid, while one runs.
    pub pid: Option<u32>,
    /// The build id of the worker serving it, while one runs.
    pub build: Option<String>,
    /// Worker failures in the restart budget's window (enough of them give up).
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
    /// The numbers of the user bash that run now (`eukhe cancel` ends them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bash: Vec<u64>,
    /// A terminal run (or user bash) of the session waits for input
    /// (`laws::waiting`); its state stays `busy`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting: bool,
    /// The session's resource limits and what its kernel uses now, for a
    /// session with limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<SessionResources>,
}

/// A session's resource limits and its kernel's current use, read from
/// its cgroup (absent where the cgroup does not count it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionResources {
    /// The limits, as the session was created with them.
    pub limits: ResourceLimits,
    /// Bytes of memory its kernel's cgroup uses now.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Processes and threads in its kernel's cgroup now.
    #[serde(default)]
    pub tasks: Option<u64>,
}

/// The daemon as `eukhe status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusInfo {
    /// The daemon's version (`Cargo.toml`'s).
    pub version: String,
    /// The daemon binary's build id, to tell two builds of one version apart.
    pub build_id: String,
    /// The supervisor's pid.
    pub pid: u32,
    /// `process` or `systemd`: where workers run.
    pub backend: String,
    /// The wire protocol version it speaks.
    pub protocol: u32,
    /// The capabilities it advertises in its hello.
    pub capabilities: Vec<String>,
    /// Sessions it knows.
    pub sessions: u32,
    /// Sessions with a live worker.
    pub running: u32,
    /// Sessions with work (runs, queued input, background jobs).
    pub busy: u32,
    /// Sessions whose restart budget ran out.
    pub given_up: u32,
    /// The socket it listens on.
    pub socket: String,
    /// The state directory it serves.
    pub state_dir: String,
}

/// A worker's account of itself to its supervisor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerInfo {
    /// The session it serves.
    pub session: String,
    /// Its pid, with `start_time` its identity.
    pub pid: u32,
    /// Its start time (clock ticks since boot), so a reused pid is not taken for it.
    pub start_time: u64,
    /// Its build id, to tell a worker of an older build apart.
    pub build_id: String,
    /// The work it has, which keeps the session busy.
    pub work: WorkSet,
    /// Processes that runs left running.
    #[serde(default)]
    pub background: u32,
    /// The session's kernel, while it lives.
    #[serde(default)]
    pub kernel_pid: Option<u32>,
    /// Client connections open (attached clients, requests being served).
    #[serde(default)]
    pub clients: u32,
    /// The numbers of the user bash that run now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bash: Vec<u64>,
    /// A terminal run (or user bash) waits for input (`laws::waiting`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting: bool,
}

/// What comes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    /// The answer to the client's hello.
    Hello(Hello),
    /// The request failed; the message is one line for the user.
    Error {
        /// One line for the user.
        message: String,
    },
    /// Done, nothing to report.
    Ok,
    /// The answer to `new`: the session created.
    Created {
        /// The new session's id.
        id: String,
        /// The new session's name.
        name: String,
        /// What the user must know about the session as made: limits
        /// this host keeps but cannot enforce.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
    },
    /// The answer to `rm`: the session `id`, named `name`, is gone.
    Removed {
        /// The removed session's id.
        id: String,
        /// Its name.
        name: String,
    },
    /// The answer to `ls`.
    Sessions {
        /// Every session, in id order.
        sessions: Vec<SessionInfo>,
    },
    /// The answer to `status`.
    Status(StatusInfo),
    /// Input queued as run `input`.
    Queued {
        /// The run's number.
        input: u64,
    },
    /// Output of a run or of user bash.
    Output {
        /// Which stream it came from.
        stream: Stream,
        /// The bytes exactly as written: no decoding on the way.
        data: bytes::Bytes,
    },
    /// Live output of a terminal run to a client that watches it with
    /// `offsets`: the bytes of one spool record (or the part of one the
    /// transcript stored last), and the spool offset just after it.
    OutputAt {
        /// Which stream it came from.
        stream: Stream,
        /// The bytes exactly as written.
        data: bytes::Bytes,
        /// The spool offset after the record they are from.
        end: u64,
    },
    /// A run or user bash ended.
    Exit {
        /// The exit status, as the shell reports it.
        status: i32,
        /// Output it wrote that could not be kept (the state disk was
        /// full): what the client received is incomplete.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost: Option<LostOutput>,
        /// Why eukhe ended it without its status (its kernel is gone or
        /// never had it), as one line: the status is then 255.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cut_short: Option<String>,
    },
    /// One transcript entry (log, attach).
    Entry(Entry),
    /// The end of a replay; live entries may follow on attach.
    Replayed,
    /// The answer to `shutdown`.
    Shutdown {
        /// Whether the daemon stops.
        stopped: bool,
        /// What happened, or why it does not stop, in one line.
        message: String,
    },
    /// Worker to supervisor: its account of itself, answering `Supervise`.
    Worker(WorkerInfo),
    /// Worker to supervisor: the answer to `Quiesce` or `QuiesceIdle`.
    Quiesce {
        /// Idle (and the gate closed) or busy.
        answer: QuiesceAnswer,
    },
    /// The answer to `cancel`: the run cancelled (if one ran) and the
    /// inputs withdrawn.
    Cancelled {
        /// The run that was signalled, if one ran.
        run: Option<u64>,
        /// The inputs withdrawn.
        withdrawn: Vec<u64>,
        /// The user bash that was signalled.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        bash: Vec<u64>,
    },
    /// The answer to `queue`.
    Queue {
        /// The queued inputs, in queue order.
        inputs: Vec<QueuedInput>,
    },
    /// The answer to `WaitFor`: the screen when the wait ended, and why.
    WaitedFor {
        /// The screen as it was then.
        screen: super::screen::ScreenState,
        /// The condition that held (the first of `until` that did).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        met: Option<Until>,
        /// The timeout came first; the run goes on.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
    },
    /// One event of the daemon's stream (and, worker to supervisor on the
    /// control connection, one the worker reports).
    Event(Event),
    /// The first answer to `watch_terminal`: bytes that paint a cleared
    /// terminal into run `input`'s screen as it is now.
    Redraw {
        /// The run's number.
        input: u64,
        /// The bytes.
        #[serde(with = "super::tty::base64_bytes")]
        data: Vec<u8>,
        /// Asked with `offsets`: the spool offset of the run's output the
        /// screen was drawn to, when the worker knows it and its kernel
        /// takes a typist's `echo` (absent: the client shows the worker's
        /// output alone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<u64>,
    },
    /// The answer to `typist`: the session's id, whose kernel's socket
    /// takes a typist, and the tag of the run's job there.
    Typist {
        /// The session's id.
        session: String,
        /// The job's tag.
        job: String,
    },
    /// The answer to `screen`: a terminal run's screen as it is now.
    Screen {
        /// The screen.
        screen: super::screen::ScreenState,
    },
    /// A part of an output window starts: its bytes follow as output.
    WindowPart(super::window::PartStart),
    /// An output window is complete: the whole output's size.
    WindowEnd(super::window::WindowSummary),
}
