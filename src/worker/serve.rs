//! The worker's socket: accepting connections, the hello, each
//! connection's request loop. Its requests (`requests`), the log and attach
//! replays (`replays`) and the background loops (`loops`: the run loop, and
//! the tick that refreshes busy evidence, reopens an expired gate and
//! watches for a lost supervisor) live beside it.

use super::WorkerError;
use crate::host::HostError;
use std::cell::RefCell;
use std::rc::Rc;

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;

use super::client_left::{self, from_remote_client, BashOfConnection, Peer};
use super::outbox::Outbox;
use super::state::{ClientConnection, Worker};
use crate::build_id::{build_id, version};
use crate::host::socket::{from_own_user, listen_private};
use crate::host::systemd;
use crate::paths::Paths;
use crate::protocol::hello::{check_protocol, Capability, Role};
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};

mod direct;
mod loops;
mod replays;
mod requests;
mod windows;

pub use loops::apply_until_stored;
use loops::{
    close_transcript, output_sync_loop, record_evidence, run_loop, stop, stop_on_sigterm,
    tell_client_changes, tick_loop,
};
use requests::{session_request, supervisor_request, take_handed_client};

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
            if let Err(e) =
                super::reset::keep_linked(worker.clone(), paths, signals.run.clone()).await
            {
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
    let status = worker.borrow().unit_status();
    systemd::notify(&format!("READY=1\nSTATUS={status}"));
    tracing::info!("serving session {id} on {}", socket.display());
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                if !from_own_user(&stream) {
                    refuse(stream, "eukhe: connection refused: another user's process").await;
                    continue;
                }
                let counted = ClientConnection::open(&worker.borrow().clients);
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

use crate::worker::terminal::TerminalOfConnection;

/// A client the supervisor handed over after its hello and first request:
/// that request, then the client's next ones, as on any connection.
async fn handed_client(
    worker: Rc<RefCell<Worker>>,
    stream: UnixStream,
    first: SessionRequest,
    signals: Signals,
    counted: Option<ClientConnection>,
    zero_runs: bool,
) {
    let peer = stream
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let (read, write) = stream.into_split();
    let link = ClientLink {
        read,
        write,
        peer,
        zero_runs,
    };
    serve_client(worker, link, first, signals, counted).await;
}

/// A client's own connection, served by the worker: handed over by the
/// supervisor, or come by the direct route.
struct ClientLink {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
    /// The client's pid, from the socket's peer credentials.
    peer: Option<u32>,
    /// The client reads zero-run frames.
    zero_runs: bool,
}

/// Serve a client's first request, then its next ones, until its
/// connection ends (`client_left` decides what that end hangs up).
async fn serve_client(
    worker: Rc<RefCell<Worker>>,
    link: ClientLink,
    first: SessionRequest,
    signals: Signals,
    _counted: Option<ClientConnection>,
) {
    let ClientLink {
        read,
        write,
        peer,
        zero_runs,
    } = link;
    let mut read = crate::protocol::frame::frame_reader(read);
    let tx = Outbox::spawn_writer(write, zero_runs);
    // The user bash asked for here, and who asked, for the end of this
    // connection.
    let mut taken = BashOfConnection::new(peer);
    // The terminal run this connection asked for, if it asked for one.
    let mut terminal = TerminalOfConnection::default();
    let before = terminal.before(&worker.borrow(), &first);
    let remote = from_remote_client(&first);
    let number = session_request(&worker, first, &tx, &signals, peer).await;
    terminal.after(before, number);
    taken.asked(number, remote, &worker.borrow());
    let mut detached = false;
    loop {
        match read_frame::<Request, _>(&mut read).await {
            Ok(Request::Session {
                request: SessionRequest::Detach,
                ..
            }) => detached = true,
            Ok(Request::Session { request, .. }) => {
                let before = terminal.before(&worker.borrow(), &request);
                let remote = from_remote_client(&request);
                let number = session_request(&worker, request, &tx, &signals, peer).await;
                terminal.after(before, number);
                taken.asked(number, remote, &worker.borrow())
            }
            Ok(Request::TerminalInput { input }) => {
                terminal.input(&mut worker.borrow_mut(), input);
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
    let (client, bash) = taken.ended(detached);
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
    let (mut read, mut write) = stream.into_split();
    let Some(hello) = read_hello(&mut read, &mut write).await else {
        return;
    };
    if hello.has(Capability::Direct) {
        direct::direct_client(worker, (read, write), hello, signals, counted).await;
        return;
    }
    let tx = Outbox::spawn_writer(write, false);
    let _ = tx.send(Response::Hello(own_hello(false)));
    serve_requests(worker, read, tx, hello, signals, counted).await;
}

/// A connection's requests after its hello: the supervisor's, a hand-over,
/// or session requests relayed by a supervisor of another build.
async fn serve_requests(
    worker: Rc<RefCell<Worker>>,
    mut read: OwnedReadHalf,
    tx: Outbox,
    hello: Hello,
    signals: Signals,
    counted: ClientConnection,
) {
    let mut counted = Some(counted);
    // A peer of another protocol (a supervisor of another build) still gets
    // the hello and may still stop this worker; nothing else.
    let compatible = check_protocol(hello.protocol).map_err(WorkerError::Protocol);
    let mut supervising = false;
    // The user bash asked for on this connection: relayed by the
    // supervisor, whose loss may be what ends it.
    let mut bash: Vec<client_left::Taken> = Vec::new();
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
                let number = session_request(&worker, request, &tx, &signals, None).await;
                bash.extend(number.map(|n| (n, 0)));
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
                w.supervised_by(tx.clone(), build_id);
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

/// The peer's hello (none: it sent something else or nothing, and was told).
async fn read_hello(read: &mut OwnedReadHalf, write: &mut OwnedWriteHalf) -> Option<Hello> {
    let message = match read_frame::<Request, _>(read).await {
        Ok(Request::Hello(hello)) => return Some(hello),
        Ok(_) => "expected hello first".to_string(),
        Err(e) => e.to_string(),
    };
    let _ = write_frame(write, &Response::Error { message }).await;
    None
}

/// This worker's hello; `direct`: it serves the client that asked for the
/// direct route.
fn own_hello(direct: bool) -> Hello {
    let mut capabilities = vec![
        Capability::Handoff.name().to_string(),
        Capability::ZeroRuns.name().to_string(),
    ];
    if direct {
        capabilities.push(Capability::Direct.name().to_string());
    }
    Hello {
        protocol: PROTOCOL_VERSION,
        version: version().to_string(),
        build_id: build_id().to_string(),
        role: Role::Daemon,
        capabilities,
        pid: Some(std::process::id()),
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
