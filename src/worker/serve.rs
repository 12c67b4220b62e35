//! The worker's event loops: its socket, the run loop, and the tick that
//! refreshes busy evidence, reopens an expired gate and watches for a lost
//! supervisor.

use super::WorkerError;
use crate::host::HostError;
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::OwnedReadHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Notify;

use super::books::TickAction;
use super::client_left::{self, Peer};
use super::core::{Action, InputCancel};
use super::outbox::{Outbox, LAG_BYTES, REPLAY_AHEAD_BYTES};
use super::state::{ClientConnection, Worker};
use crate::build_id::{build_id, version};
use crate::clock::{mono_ms, mono_us, wall_ms};
use crate::host::handoff;
use crate::host::process::{identity_of, is_alive};
use crate::host::socket::{from_own_user, listen_private};
use crate::host::systemd;
use crate::laws::idle_shutdown::{GateEvent, QuiesceAnswer};
use crate::laws::timing::{duration_in_words, POLL_MS, TM, WORKER_RETRY_MS, WORKER_TICK_MS};
use crate::paths::Paths;
use crate::protocol::hello::{check_protocol, Capability, Role};
use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};
use crate::session::log_query::{self, LogQuery};
use crate::session::store::{read_json, KernelRecord};
use crate::session::transcript::{self, Entry, EntryBody};

/// How many of its last entries an attach replays first.
const ATTACH_REPLAY_ENTRIES: u64 = 200;

/// Shared wake-ups: the run loop, and the end of the worker.
#[derive(Clone, Default)]
struct Signals {
    run: Rc<Notify>,
    exit: Rc<Notify>,
}

pub async fn run(worker: Rc<RefCell<Worker>>, paths: &Paths) -> Result<(), WorkerError> {
    let id = worker.borrow().meta.id.clone();
    let socket = paths.worker_socket(&id);
    let listener = UnixListener::from_std(listen_private(&socket)?).map_err(|e| {
        WorkerError::Host(HostError::io(
            format!("cannot listen on {}", socket.display()),
            e,
        ))
    })?;
    let signals = Signals::default();
    let failure: Rc<RefCell<Option<WorkerError>>> = Rc::default();
    {
        let (worker, signals, failure, paths) = (
            worker.clone(),
            signals.clone(),
            failure.clone(),
            paths.clone(),
        );
        tokio::task::spawn_local(async move {
            if let Err(e) = super::link::run(worker.clone(), paths, signals.run.clone()).await {
                tracing::error!("{e}");
                *failure.borrow_mut() = Some(e);
                stop(&worker, &signals).await;
            }
        });
    }
    tokio::task::spawn_local(run_loop(worker.clone(), signals.clone()));
    tokio::task::spawn_local(tick_loop(worker.clone(), signals.clone()));
    tokio::task::spawn_local(output_sync_loop(worker.clone()));
    tokio::task::spawn_local(record_evidence(worker.clone()));
    tokio::task::spawn_local(stop_on_sigterm(worker.clone(), signals.clone()));
    tokio::task::spawn_local(tell_client_changes(worker.clone()));
    worker.borrow_mut().work_changed();
    systemd::notify(&format!("READY=1\nSTATUS=serving session {id}"));
    tracing::info!("serving session {id} on {}", socket.display());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if !from_own_user(&stream) {
                    refuse(stream, "eukhe: connection refused: another user's process").await;
                    continue;
                }
                let counted = ClientConnection::open(&worker.borrow());
                tokio::task::spawn_local(connection(worker.clone(), stream, signals.clone(), counted));
            }
            _ = signals.exit.notified() => break,
        }
    }
    let _ = std::fs::remove_file(&socket);
    close_transcript(&worker).await;
    let failed = failure.borrow_mut().take();
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn refuse(stream: UnixStream, message: &str) {
    let (_, mut write) = stream.into_split();
    let _ = write_frame(
        &mut write,
        &Response::Error {
            message: message.to_string(),
        },
    )
    .await;
}

/// A client the supervisor handed over after its hello and first request:
/// that request, then the client's next ones, as on any connection.
async fn handed_client(
    worker: Rc<RefCell<Worker>>,
    stream: UnixStream,
    first: SessionRequest,
    signals: Signals,
    _counted: Option<ClientConnection>,
    zero_runs: bool,
) {
    let peer = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let (mut read, write) = stream.into_split();
    let tx = Outbox::spawn_writer(write, zero_runs);
    // The user bash asked for here, and who the client is (taken with the
    // first, while it surely lives), so the end of this connection can
    // tell a client that went away from one that left on purpose.
    let mut bash: Vec<u64> = Vec::new();
    let mut client = None;
    let mut asked = |number: Option<u64>| {
        if number.is_some() && client.is_none() {
            client = Some(peer.and_then(identity_of));
        }
        bash.extend(number);
    };
    asked(session_request(&worker, first, &tx, &signals, peer).await);
    loop {
        match read_frame::<Request, _>(&mut read).await {
            Ok(Request::Session { request, .. }) => {
                asked(session_request(&worker, request, &tx, &signals, peer).await)
            }
            Ok(other) => {
                let _ = tx.send(Response::Error {
                    message: format!("a worker does not serve {other:?} from a client"),
                });
            }
            Err(FrameError::Closed) => break,
            Err(e) => {
                let _ = tx.send(Response::Error {
                    message: e.to_string(),
                });
                break;
            }
        }
    }
    let client = Peer::Client(client.flatten());
    client_left::connection_ended(worker, client, bash).await;
}

async fn connection(
    worker: Rc<RefCell<Worker>>,
    stream: UnixStream,
    signals: Signals,
    counted: ClientConnection,
) {
    // A client's connection counts until it ends (a handed-over client's
    // until its own connection ends); the supervisor's do not.
    let mut counted = Some(counted);
    let (mut read, write) = stream.into_split();
    let tx = Outbox::spawn_writer(write, false);
    // A peer of another protocol (a supervisor of another build) still gets
    // the hello and may still stop this worker; nothing else.
    let Some(compatible) = answer_hello(&mut read, &tx).await else {
        return;
    };
    let mut supervising = false;
    // The user bash asked for on this connection: relayed by the
    // supervisor, whose loss may be what ends it.
    let mut bash: Vec<u64> = Vec::new();
    loop {
        let Some(request) = next_request(&mut read, &tx).await else {
            break;
        };
        if from_the_supervisor(&request) {
            counted = None;
        }
        if let (Err(message), false) = (&compatible, matches!(request, Request::Stop)) {
            let _ = tx.send(Response::Error {
                message: message.to_string(),
            });
            break;
        }
        match request {
            Request::Session { request, .. } => {
                bash.extend(session_request(&worker, request, &tx, &signals, None).await)
            }
            Request::Handoff {
                request, zero_runs, ..
            } => {
                // The supervisor hands a client over and leaves; the client
                // is served directly from now on. The hello's answer was
                // queued first, so it is written before the client's task
                // runs (one thread, tasks in order): a supervisor that never
                // saw it knows this worker never served the client.
                let counted = counted.take();
                take_handed_client(&worker, &read, request, &signals, counted, zero_runs).await;
                return;
            }
            Request::Supervise { build_id } => {
                tracing::info!(supervisor_build = build_id, "supervised");
                supervising = true;
                let mut w = worker.borrow_mut();
                w.supervised_by(tx.clone());
                let _ = tx.send(Response::Worker(w.info()));
            }
            other => {
                if supervisor_request(&worker, other, &tx, &signals)
                    .await
                    .is_break()
                {
                    return;
                }
            }
        }
    }
    client_left::connection_ended(worker.clone(), Peer::Relayed, bash).await;
    if supervising {
        tracing::info!("lost its supervisor; waiting for the next one");
        worker.borrow_mut().supervisor_lost();
    }
}

/// Answer the peer's hello: whether it speaks this protocol (none: no hello came).
async fn answer_hello(read: &mut OwnedReadHalf, tx: &Outbox) -> Option<Result<(), WorkerError>> {
    match read_frame::<Request, _>(read).await {
        Ok(Request::Hello(hello)) => {
            let _ = tx.send(Response::Hello(Hello {
                protocol: PROTOCOL_VERSION,
                version: version().to_string(),
                build_id: build_id().to_string(),
                role: Role::Daemon,
                capabilities: vec![
                    Capability::Handoff.name().to_string(),
                    Capability::ZeroRuns.name().to_string(),
                ],
                pid: Some(std::process::id()),
            }));
            Some(check_protocol(hello.protocol).map_err(WorkerError::Refused))
        }
        Ok(_) => {
            let _ = tx.send(Response::Error {
                message: "expected hello first".into(),
            });
            None
        }
        Err(e) => {
            let _ = tx.send(Response::Error {
                message: e.to_string(),
            });
            None
        }
    }
}

/// The peer's next request (none: it closed, or sent a bad frame and was told).
async fn next_request(read: &mut OwnedReadHalf, tx: &Outbox) -> Option<Request> {
    match read_frame::<Request, _>(read).await {
        Ok(request) => Some(request),
        Err(FrameError::Closed) => None,
        Err(e) => {
            let _ = tx.send(Response::Error {
                message: e.to_string(),
            });
            None
        }
    }
}

/// Whether only the supervisor sends `request` (its connection stops counting).
fn from_the_supervisor(request: &Request) -> bool {
    matches!(
        request,
        Request::Supervise { .. }
            | Request::Quiesce
            | Request::QuiesceIdle
            | Request::Release
            | Request::Stop
            | Request::StopWithKernel
            | Request::Claim
    )
}

/// Receive the client the supervisor hands over and serve it on its own.
async fn take_handed_client(
    worker: &Rc<RefCell<Worker>>,
    read: &OwnedReadHalf,
    first: SessionRequest,
    signals: &Signals,
    counted: Option<ClientConnection>,
    zero_runs: bool,
) {
    match handoff::recv_fd(read.as_ref())
        .await
        .and_then(handoff::into_stream)
    {
        Ok(client) if from_own_user(&client) => {
            tokio::task::spawn_local(handed_client(
                worker.clone(),
                client,
                first,
                signals.clone(),
                counted,
                zero_runs,
            ));
        }
        Ok(client) => refuse(client, "eukhe: connection refused: another user's process").await,
        Err(e) => tracing::warn!("a client handed over did not arrive: {e}"),
    }
}

/// Serve a supervisor's quiesce, release or stop; breaks once the worker stops.
async fn supervisor_request(
    worker: &Rc<RefCell<Worker>>,
    request: Request,
    tx: &Outbox,
    signals: &Signals,
) -> ControlFlow<()> {
    match request {
        Request::Quiesce => {
            let answer = worker.borrow_mut().quiesce();
            let _ = tx.send(Response::Quiesce { answer });
        }
        Request::QuiesceIdle => {
            let answer = worker.borrow_mut().quiesce_for_idle_stop();
            let _ = tx.send(Response::Quiesce { answer });
        }
        Request::Claim => {
            let claimed = worker.borrow_mut().claim();
            let _ = tx.send(match claimed {
                Ok(()) => Response::Ok,
                Err(e) => Response::Error {
                    message: e.to_string(),
                },
            });
        }
        Request::Release => {
            worker.borrow_mut().gate_event(GateEvent::Release);
            signals.run.notify_one();
            let _ = tx.send(Response::Ok);
        }
        Request::IdleStop => return idle_stop(worker, tx, signals).await,
        Request::Stop => {
            tracing::info!("stopping: asked by the supervisor (the kernel keeps its runs)");
            stop(worker, signals).await;
            let _ = tx.send(Response::Ok);
            return ControlFlow::Break(());
        }
        Request::StopWithKernel => {
            tracing::info!("stopping with the kernel: asked by the supervisor");
            stop_with_kernel(worker, signals).await;
            let _ = tx.send(Response::Ok);
            return ControlFlow::Break(());
        }
        other => {
            let _ = tx.send(Response::Error {
                message: format!("a worker does not serve {other:?}"),
            });
        }
    }
    ControlFlow::Continue(())
}

/// The idle shutdown's stop, refused if the run gate reopened after its hold.
async fn idle_stop(
    worker: &Rc<RefCell<Worker>>,
    tx: &Outbox,
    signals: &Signals,
) -> ControlFlow<()> {
    let taken = worker.borrow_mut().core.idle_stop(mono_us());
    if !taken {
        tracing::info!("refused the idle shutdown's stop: the run gate reopened after its hold");
        let _ = tx.send(Response::Quiesce {
            answer: QuiesceAnswer::Busy,
        });
        return ControlFlow::Continue(());
    }
    // Idle: the kernel has no run and no background job to keep.
    tracing::info!("stopping with the kernel: the idle shutdown committed");
    stop_with_kernel(worker, signals).await;
    let _ = tx.send(Response::Ok);
    ControlFlow::Break(())
}

/// Serve one session request. `peer` is the client's pid when the client
/// is connected directly (handed over), not relayed. Returns the number
/// of the user bash it started, if it started one.
async fn session_request(
    worker: &Rc<RefCell<Worker>>,
    request: SessionRequest,
    tx: &Outbox,
    signals: &Signals,
    peer: Option<u32>,
) -> Option<u64> {
    if let SessionRequest::Send { text, .. } | SessionRequest::Bash { command: text, .. } = &request
    {
        if let Some(why) = unrunnable(text) {
            let _ = tx.send(Response::Error {
                message: why.to_string(),
            });
            return None;
        }
    }
    match request {
        SessionRequest::Send { text, wait } => send_input(worker, text, wait, tx, signals),
        SessionRequest::Bash { command, stdin } => {
            return bash_request(worker, command, stdin, tx, peer).await
        }
        SessionRequest::Cancel { all } => cancel_run(worker, all, tx),
        SessionRequest::CancelInput { input } => cancel_input(worker, input, tx),
        SessionRequest::Queue => {
            // What runs beside the queue and `cancel` ends: user bash first.
            let core = &worker.borrow().core;
            let mut inputs = core.bash_list();
            inputs.extend(core.queue().cloned());
            let _ = tx.send(Response::Queue { inputs });
        }
        SessionRequest::Withdraw { run } => {
            let withdrawn = worker.borrow_mut().withdraw(run);
            let _ = tx.send(match withdrawn {
                Ok(()) => Response::Ok,
                Err(message) => Response::Error {
                    message: message.into(),
                },
            });
        }
        SessionRequest::Log {
            tail,
            input,
            after,
            follow,
        } => send_log(worker, LogQuery { tail, input, after }, follow, tx),
        SessionRequest::Attach { after, tail } => {
            let start = match after {
                Some(after) => ReplayStart::After(after),
                None => ReplayStart::Tail(tail.unwrap_or(ATTACH_REPLAY_ENTRIES)),
            };
            follow_entries(worker, start, None, tx);
        }
    }
    None
}

/// Why a command line cannot run, if it cannot: it takes no number then.
fn unrunnable(command: &str) -> Option<&'static str> {
    if command.trim().is_empty() {
        Some("the command is empty: nothing to run")
    } else if command.contains('\0') {
        Some(crate::protocol::kernel::NUL_IN_COMMAND)
    } else {
        None
    }
}

/// Queue input `text` (with `wait`, its client waits for its run).
fn send_input(
    worker: &Rc<RefCell<Worker>>,
    text: String,
    wait: bool,
    tx: &Outbox,
    signals: &Signals,
) {
    let queued = worker.borrow_mut().queue_input(text);
    match queued {
        Ok(input) => {
            if wait {
                worker.borrow_mut().wait_for(input, tx.clone());
            }
            let _ = tx.send(Response::Queued { input });
            signals.run.notify_one();
        }
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
        }
    }
}

/// Run user bash `command` once the kernel link is up; its number.
async fn bash_request(
    worker: &Rc<RefCell<Worker>>,
    command: String,
    stdin: Option<u32>,
    tx: &Outbox,
    peer: Option<u32>,
) -> Option<u64> {
    // Only the client itself may lend its standard input: a
    // connection relayed by the supervisor has no client pid.
    if stdin.is_some() && stdin != peer {
        let message = "this session's worker cannot take standard input through the \
                       daemon's relay; pass -n for /dev/null"
            .to_string();
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // User bash work from the moment it is taken: a quiesce (idle
    // shutdown, rm) meanwhile answers busy.
    worker.borrow_mut().core.bash_requested();
    // A worker just started connects to its kernel first. (One
    // thread: nothing can connect between the check and the wait.)
    let connected = worker.borrow().kernel_connected.clone();
    while !worker.borrow().core.connected() && !worker.borrow().stopping {
        tokio::select! {
            _ = connected.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)) => {}
        }
    }
    worker.borrow_mut().core.bash_request_taken_up();
    user_bash(worker, command, stdin, tx)
}

/// Cancel the run in progress and every user bash running (with `all`,
/// withdraw every queued input too).
fn cancel_run(worker: &Rc<RefCell<Worker>>, all: bool, tx: &Outbox) {
    let mut w = worker.borrow_mut();
    let (run, bash, actions) = w.core.cancel();
    if let Some(run) = run {
        tracing::info!(run, "cancelling run {run}");
    }
    for number in &bash {
        tracing::info!(number, "cancelling bash {number}");
    }
    w.apply(actions);
    let mut withdrawn = Vec::new();
    if all {
        let queued: Vec<u64> = w.core.queue().map(|q| q.run).collect();
        for queued in queued {
            match w.withdraw(queued) {
                Ok(()) => withdrawn.push(queued),
                Err(message) => {
                    let _ = tx.send(Response::Error {
                        message: message.into(),
                    });
                    return;
                }
            }
        }
    }
    let _ = tx.send(Response::Cancelled {
        run,
        withdrawn,
        bash,
    });
}

/// Cancel input `input`: signal it if it runs, withdraw it if it is queued.
fn cancel_input(worker: &Rc<RefCell<Worker>>, input: u64, tx: &Outbox) {
    let mut w = worker.borrow_mut();
    let answer = match w.core.cancel_input(input) {
        Ok(InputCancel::Signal(actions)) => {
            tracing::info!(input, "cancelling input {input}");
            w.apply(actions);
            Response::Cancelled {
                run: Some(input),
                withdrawn: Vec::new(),
                bash: Vec::new(),
            }
        }
        Ok(InputCancel::Withdraw) => match w.withdraw(input) {
            Ok(()) => Response::Cancelled {
                run: None,
                withdrawn: vec![input],
                bash: Vec::new(),
            },
            Err(message) => Response::Error {
                message: message.into(),
            },
        },
        Err(message) => Response::Error {
            message: message.into(),
        },
    };
    let _ = tx.send(answer);
}

/// Send the entries `query` selects; with `follow`, then live ones.
fn send_log(worker: &Rc<RefCell<Worker>>, query: LogQuery, follow: bool, tx: &Outbox) {
    let next_input = worker.borrow().core.next_input();
    if let Some(n) = query.input.filter(|n| *n == 0 || *n >= next_input) {
        let _ = tx.send(Response::Error {
            message: log_query::no_input(n),
        });
        return;
    }
    if follow {
        let start = match (query.after, query.tail) {
            (Some(after), _) => ReplayStart::After(after),
            (None, Some(n)) => ReplayStart::Tail(n),
            (None, None) => ReplayStart::After(0),
        };
        follow_entries(worker, start, query.input, tx);
        return;
    }
    let (path, notices) = {
        let w = worker.borrow();
        (w.files.transcript(), w.restore_notices.clone())
    };
    tokio::task::spawn_local(replay(path, query, notices, tx.clone()));
}

/// Replay from `start`, then live entries (only input `only`'s, if
/// given, until it has ended).
fn follow_entries(
    worker: &Rc<RefCell<Worker>>,
    start: ReplayStart,
    only: Option<u64>,
    tx: &Outbox,
) {
    // Subscribe before reading the file, then leave out live entries the
    // replay already carried. (Only traffic: the client's view,
    // `laws::notice::View`, decides what is shown.)
    let (live_tx, live_rx) = unbounded_channel();
    let (path, notices) = {
        let mut w = worker.borrow_mut();
        w.subscribe(live_tx);
        (w.files.transcript(), w.restore_notices.clone())
    };
    let notices = match (&start, only) {
        (ReplayStart::Tail(_), None) => notices,
        _ => Vec::new(),
    };
    let replay = Replay {
        start,
        notices,
        only,
    };
    tokio::task::spawn_local(attach(path, replay, tx.clone(), live_rx));
}

/// Send the entries `query` selects (a tail after the older restore
/// `notices`), never more than [`REPLAY_AHEAD_BYTES`] ahead of the
/// client, then `Replayed`.
async fn replay(path: PathBuf, query: LogQuery, notices: Vec<Entry>, tx: Outbox) {
    let entries = match log_query::entries_with_notices(&path, query, notices) {
        Ok(entries) => entries,
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
            return;
        }
    };
    for entry in entries {
        if tx.send(Response::Entry(entry)).is_err() {
            return;
        }
        tx.below(REPLAY_AHEAD_BYTES).await;
    }
    let _ = tx.send(Response::Replayed);
}

/// Where a replay before live entries starts.
enum ReplayStart {
    /// Every entry after this one (0: all of them).
    After(u64),
    /// The last N entries, after every older restore notice.
    Tail(u64),
}

/// What an attach (or `log --follow`) replays before going live.
struct Replay {
    start: ReplayStart,
    /// Restore notices to show before a tail that leaves them out.
    notices: Vec<Entry>,
    /// Only this input's entries, until its end.
    only: Option<u64>,
}

impl Replay {
    /// The replayed entries, read as a stream (a tail is bounded).
    fn entries(
        self,
        path: &std::path::Path,
    ) -> Result<Box<dyn Iterator<Item = Entry>>, WorkerError> {
        Ok(match self.start {
            ReplayStart::After(after) => Box::new(transcript::stream_from(path, after + 1)?),
            ReplayStart::Tail(n) => {
                let tail = transcript::read_tail(path, n as usize)?;
                let first = tail.first().map_or(u64::MAX, |e| e.seq);
                let older = self.notices.into_iter().filter(move |n| n.seq < first);
                Box::new(older.chain(tail).collect::<Vec<_>>().into_iter())
            }
        })
    }
}

/// Attach: the replay, then live entries. A client that stops reading is
/// not buffered for: past [`LAG_BYTES`] live entries are dropped (they are
/// in the transcript) and it is fed from the file until it has caught up.
async fn attach(path: PathBuf, replay: Replay, tx: Outbox, live: UnboundedReceiver<Response>) {
    let only = replay.only;
    let last = match replay.start {
        ReplayStart::After(after) => after,
        ReplayStart::Tail(_) => 0,
    };
    let entries = match replay.entries(&path) {
        Ok(entries) => entries,
        Err(message) => {
            let _ = tx.send(Response::Error {
                message: message.into(),
            });
            return;
        }
    };
    let mut feed = Feed {
        path,
        tx,
        only,
        last,
        resume_at: 0,
        only_open: Default::default(),
    };
    if feed.send_replay(entries).await {
        feed.follow_live(live).await;
    }
}

/// An attach's feed of entries to its client, and where it stands.
struct Feed {
    path: PathBuf,
    tx: Outbox,
    /// Only this input's entries, until its end.
    only: Option<u64>,
    /// The last entry sent or passed over.
    last: u64,
    /// Where reading the file on may start: a record's start, or the top.
    resume_at: u64,
    /// The followed input has begun and not ended: damage read now may
    /// have held its output.
    only_open: std::cell::Cell<bool>,
}

/// What became of one entry of a feed.
#[derive(PartialEq)]
enum Passed {
    /// Not the followed input's.
    Skipped,
    Sent,
    /// The client is gone, or the followed input has ended: the feed ends.
    Done,
}

impl Feed {
    /// Send `entry` if the feed wants it.
    fn pass_on(&self, entry: Entry) -> Passed {
        // Only the followed input's entries are sent; its end ends the follow.
        let only = self.only;
        let own = only.is_none_or(|input| log_query::belongs_to(&entry, input));
        if !(own || self.only_open.get() && log_query::is_damage_notice(&entry)) {
            return Passed::Skipped;
        }
        let end = only.is_some_and(|input| log_query::ends(&entry, input));
        if own {
            self.only_open.set(!end);
        }
        if self.tx.send(Response::Entry(entry)).is_err() || end {
            return Passed::Done;
        }
        Passed::Sent
    }

    /// Send the replayed `entries`, then `Replayed`; whether the feed goes on.
    async fn send_replay(&mut self, entries: impl Iterator<Item = Entry>) -> bool {
        for entry in entries {
            self.last = entry.seq;
            match self.pass_on(entry) {
                Passed::Skipped => {}
                Passed::Sent => self.tx.below(REPLAY_AHEAD_BYTES).await,
                Passed::Done => return false,
            }
        }
        let _ = self.tx.send(Response::Replayed);
        true
    }

    /// Send live entries, from the file while the client is behind.
    async fn follow_live(&mut self, mut live: UnboundedReceiver<Response>) {
        while let Some(response) = live.recv().await {
            let Response::Entry(entry) = response else {
                continue;
            };
            if entry.seq <= self.last {
                continue;
            }
            if self.tx.pending() < LAG_BYTES {
                self.last = entry.seq;
                if self.pass_on(entry) == Passed::Done {
                    return;
                }
                continue;
            }
            // Behind: this entry and every later one come from the file.
            if !self.catch_up(&mut live, entry.seq).await {
                return;
            }
        }
    }

    /// Feed the client from the file until it has caught up; whether the feed goes on.
    async fn catch_up(&mut self, live: &mut UnboundedReceiver<Response>, mut owed: u64) -> bool {
        loop {
            tokio::select! {
                _ = self.tx.below(REPLAY_AHEAD_BYTES) => {}
                more = live.recv() => match more {
                    Some(Response::Entry(e)) => owed = owed.max(e.seq),
                    Some(_) => {}
                    None => return false,
                },
            }
            if self.tx.is_closed() {
                return false;
            }
            if self.tx.pending() >= REPLAY_AHEAD_BYTES {
                continue;
            }
            let Ok(mut entries) = transcript::stream_at(&self.path, self.resume_at, self.last + 1)
            else {
                return false;
            };
            while self.tx.pending() < REPLAY_AHEAD_BYTES {
                let Ok(Some((entry, end))) = entries.next_with_end() else {
                    break;
                };
                self.last = entry.seq;
                self.resume_at = end;
                if self.pass_on(entry) == Passed::Done {
                    return false;
                }
            }
            // Live again once everything dropped is sent: what the live
            // channel still holds is newer and follows in order.
            if self.last >= owed {
                return true;
            }
        }
    }
}

/// User bash runs at once in the kernel, beside any run in progress; the
/// kernel merges the shell state it leaves when it ends.
fn user_bash(
    worker: &Rc<RefCell<Worker>>,
    command: String,
    stdin: Option<u32>,
    tx: &Outbox,
) -> Option<u64> {
    let mut w = worker.borrow_mut();
    if w.stopping {
        let message = "the session's worker is stopping".to_string();
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // User bash is work like a run: a worker quiesced for an idle shutdown
    // starts none, so the shutdown's stop never meets one.
    if !w.core.bash_admitted(mono_us()) {
        let message = format!(
            "session {}: the daemon is shutting down because it was idle; run the command again",
            w.meta.id
        );
        let _ = tx.send(Response::Error { message });
        return None;
    }
    // Acknowledged only by its end, which is stored durably after it.
    let number = w.core.take_input_number();
    let stored = w.reserve_input(number).and_then(|()| {
        w.append_unacknowledged(EntryBody::Bash {
            command: command.clone(),
            bash: Some(number),
        })
    });
    if let Err(message) = stored {
        let _ = tx.send(Response::Error {
            message: message.into(),
        });
        return None;
    }
    // The client learns the number, so it can follow the bash in the
    // transcript if its connection drops.
    let _ = tx.send(Response::Queued { input: number });
    let client = w.add_client(tx.clone(), number);
    let actions = w.core.bash(&command, stdin, (client, wall_ms()), number);
    w.apply(actions);
    w.work_changed();
    Some(number)
}

async fn run_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    loop {
        let started = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            let next = w.core.next_start(mono_us());
            next.map(|run| w.start_run(run))
        };
        match started {
            // Not stored (a full disk): retry once there may be room.
            Some(Err(e)) => {
                tracing::error!("{e}");
                tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)).await;
            }
            Some(Ok(())) => {}
            None => {
                tokio::select! {
                    _ = signals.run.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)) => {}
                }
            }
        }
    }
}

impl Worker {
    /// Start queued input `run`: its start is stored first, then the kernel
    /// is given it (the input leaves the queue only once its start is
    /// stored: on a full disk it waits).
    fn start_run(&mut self, run: u64) -> Result<(), WorkerError> {
        self.append(EntryBody::RunStarted { input: run })
            .map_err(|e| e.within(format!("cannot start run {run}")))?;
        tracing::info!(run, "run {run} started");
        let actions = self.core.run_start_stored(run);
        self.apply(actions);
        self.work_changed();
        Ok(())
    }
}

/// Carry out `actions`; an end that cannot be stored yet (a full disk) is
/// retried until it is (it must be on record, or a restart would call a
/// finished run interrupted), and nothing after it, the waiters told of
/// that end among them, happens before. Gives up only when the worker
/// stops.
pub async fn apply_until_stored(worker: &Rc<RefCell<Worker>>, actions: Vec<Action>) {
    let mut held = worker.borrow_mut().apply(actions);
    while !held.is_empty() {
        if worker.borrow().stopping {
            tracing::error!(
                "the worker is stopping: {} actions not carried out",
                held.len()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(WORKER_RETRY_MS)).await;
        held = worker.borrow_mut().apply(held);
    }
}

/// Record busy evidence whenever the work changes, as the refresh law says:
/// one record at a time, in order, each written off this thread (on the
/// process backend it waits for the disk, which must hold neither the run
/// that just started nor the end just told).
async fn record_evidence(worker: Rc<RefCell<Worker>>) {
    let evidence = worker.borrow().evidence.clone();
    loop {
        evidence.due.notified().await;
        let _writing = evidence.writing.lock().await;
        // `stop` writes the last record (it may have, while this waited).
        if worker.borrow().stopping {
            return;
        }
        let Some((journal, line, state, now)) = worker.borrow().evidence_to_write() else {
            continue;
        };
        let written = tokio::task::spawn_blocking(move || journal.record(&line))
            .await
            .unwrap_or_else(|e| Err(HostError::Journal(format!("the busy evidence writer: {e}"))));
        worker.borrow_mut().evidence_written(written, state, now);
    }
}

/// The group commit: output written since the last fsync is made durable
/// `output_sync_ms` after the first of it, or at once in a flood (see
/// `page_cache::COMMIT_EARLY_BYTES`).
async fn output_sync_loop(worker: Rc<RefCell<Worker>>) {
    let (signals, wait) = {
        let w = worker.borrow();
        (w.commit_signals.clone(), w.output_sync)
    };
    loop {
        signals.due.notified().await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = signals.now.notified() => {}
        }
        let Some(commit) = worker.borrow_mut().group_commit() else {
            continue;
        };
        if let Err(e) = tokio::task::spawn_blocking(commit).await {
            tracing::warn!("transcript: group commit: {e}");
        }
    }
}

async fn tick_loop(worker: Rc<RefCell<Worker>>, signals: Signals) {
    loop {
        tokio::time::sleep(Duration::from_millis(WORKER_TICK_MS)).await;
        let actions = {
            let mut w = worker.borrow_mut();
            if w.stopping {
                return;
            }
            w.core.tick(mono_us());
            if let Some(silence) = w.link_owes.watch.tick(mono_ms()) {
                w.tell_kernel_silence(silence);
            }
            let work = w.work();
            w.books.tick(mono_ms(), work)
        };
        for action in actions {
            match action {
                TickAction::SignOfLife => worker.borrow().sign_of_life(),
                TickAction::WatchdogPing => systemd::notify("WATCHDOG=1"),
                // Written by `record_evidence`, off this thread and in
                // order with the records the work's changes make.
                TickAction::Record(_) => worker.borrow().evidence.due.notify_one(),
                TickAction::ExitResumable => {
                    tracing::warn!(
                        "no supervisor for the lost-exit window: exiting; the kernel keeps its runs"
                    );
                    // `stop` records busy now.
                    stop(&worker, &signals).await;
                    return;
                }
                TickAction::CloseSession => {
                    tracing::info!("no supervisor and no work: closing the session");
                    let _ = worker.borrow_mut().append(EntryBody::Notice {
                        text: "no supervisor and no work: the worker closed the session".into(),
                        restore: None,
                        restore_id: None,
                    });
                    // Nothing runs: the idle kernel goes too (the snapshot
                    // keeps its state for the next one).
                    stop_with_kernel(&worker, &signals).await;
                    return;
                }
            }
        }
        worker.borrow_mut().report_output_line();
    }
}

/// Tell the supervisor whenever the number of client connections changes,
/// so it knows when the last client left (the idle-stop clock starts).
async fn tell_client_changes(worker: Rc<RefCell<Worker>>) {
    let changed = worker.borrow().clients_changed.clone();
    loop {
        changed.notified().await;
        let w = worker.borrow();
        if w.stopping {
            return;
        }
        w.sign_of_life();
    }
}

/// SIGTERM (StopUnit, a shutdown of the machine) is a stop like the
/// supervisor's: queued input stays for the next worker.
async fn stop_on_sigterm(worker: Rc<RefCell<Worker>>, signals: Signals) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut terms) = signal(SignalKind::terminate()) else {
        return;
    };
    if terms.recv().await.is_some() {
        tracing::info!("stopping on SIGTERM");
        stop(&worker, &signals).await;
    }
}

/// Stop: close the gate for good and end the process's loops. The kernel
/// and its runs keep running (a worker that leaves aborts nothing); queued
/// input stays for the next worker.
async fn stop(worker: &Rc<RefCell<Worker>>, signals: &Signals) {
    // Its record of busy comes after any still being written, never
    // before it.
    let evidence = worker.borrow().evidence.clone();
    let _writing = evidence.writing.lock().await;
    {
        let mut w = worker.borrow_mut();
        if w.stopping {
            return;
        }
        w.gate_event(GateEvent::Stop);
        systemd::notify("STOPPING=1");
        w.record_busy_now();
        w.stopping = true;
    }
    signals.exit.notify_one();
}

/// The harness close: what the transcript holds is made durable before the
/// worker exits, within `harness_close` (the stop grace covers it after the
/// kernel's teardown); a commit still running then ends with the process.
async fn close_transcript(worker: &Rc<RefCell<Worker>>) {
    let Some(commit) = worker.borrow_mut().group_commit() else {
        return;
    };
    let within = Duration::from_millis(TM.harness_close);
    if tokio::time::timeout(within, tokio::task::spawn_blocking(commit))
        .await
        .is_err()
    {
        tracing::warn!(
            "the transcript's last output was not stored within {}",
            duration_in_words(TM.harness_close)
        );
    }
}

/// Stop the session's kernel (every process of the session ends), then the
/// worker: `shutdown --force`.
async fn stop_with_kernel(worker: &Rc<RefCell<Worker>>, signals: &Signals) {
    let kernel = {
        let mut w = worker.borrow_mut();
        w.link_owes.stop_asked = true;
        w.send_kernel(ToKernel::Stop);
        read_json::<KernelRecord>(&w.files.kernel())
            .ok()
            .flatten()
            .map(|k| k.identity)
    };
    // Until the kernel process is gone, so nobody finds it alive after:
    // its teardown, once, inside the stop grace with the transcript's close.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.kernel_teardown);
    while kernel.is_some_and(is_alive) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    stop(worker, signals).await;
}
