//! The supervisor's socket: hello, then one request per connection.
//! Session requests go to the session's worker with the client's
//! connection (`host::handoff`): the worker serves the client directly. A
//! worker that cannot take a connection (another build) gets the request
//! forwarded and the two connections spliced.

use super::SupervisorError;
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::backend;
use super::events;
use super::launch::{ask_worker, connect_worker, greet_worker, launch, worker_hello, Shared};
use super::manage::{self, settle, InFlight};
use super::slots::{Slot, SlotState};
use super::spare;
use crate::build_id::{build_id, version};
use crate::clock::{mono_ms, wall_ms};
use crate::host::handoff;
use crate::host::process::is_alive;
use crate::host::systemd;
use crate::laws::idle_shutdown::{idle_shutdown_commits, QuiesceReply, ShutdownCommit};
use crate::laws::restart::RestartBudget;
use crate::laws::timing::{
    duration_in_words, give_up_in_words, ACCEPT_WAKE_MS, POLL_MS, QUIESCE_ANSWER_MS, TM,
};
use crate::protocol::event::EventKind;
use crate::protocol::hello::{check_protocol, Capability, Role};
use crate::protocol::message::{Request, Response, SessionRequest, ShutdownMode, StatusInfo};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};
use crate::session::env::SessionEnv;
use crate::session::log_query::{self, LogQuery};
use crate::session::store::{
    create_session_dir, new_id, normalize_name, read_json, validate_name, write_session,
    SessionMeta,
};
use crate::session::transcript::Entry;

pub async fn serve(supervisor: Shared, listener: UnixListener) -> Result<(), SupervisorError> {
    let own_uid = nix::unistd::getuid().as_raw();
    let watchdog = systemd::watchdog_ping_interval();
    let mut last_ping = tokio::time::Instant::now();
    let mut last_status = String::new();
    let mut terms = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| SupervisorError::io("cannot handle SIGTERM", e))?;
    loop {
        // The watchdog is fed from this loop, so a hung loop gets killed.
        if let Some(interval) = watchdog {
            if last_ping.elapsed() >= interval {
                systemd::notify("WATCHDOG=1");
                last_ping = tokio::time::Instant::now();
            }
        }
        let status = supervisor.borrow().status_line();
        if status != last_status {
            systemd::notify(&format!("STATUS={status}"));
            last_status = status;
        }
        // End only once the shutdown's answer is out: ending earlier would
        // cut the connection that is still stopping workers and answering.
        if supervisor.borrow().answered_shutdown {
            return Ok(());
        }
        if supervisor.borrow().shutting_down {
            tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
            continue;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = terms.recv() => {
                // A clean stop of the supervisor alone: workers keep running
                // (they are units of their own, or detached processes) and
                // the next supervisor adopts them.
                systemd::notify("STOPPING=1");
                tracing::info!("stopping on SIGTERM; workers keep running");
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_millis(ACCEPT_WAKE_MS)) => continue,
        };
        let Ok((mut stream, _)) = accepted else {
            continue;
        };
        if let Err(message) = same_user(&stream, own_uid) {
            let message = message.to_string();
            let _ = write_frame(&mut stream, &Response::Error { message }).await;
            continue;
        }
        tokio::task::spawn_local(connection(supervisor.clone(), stream));
    }
}

/// Whether the peer of `stream` runs as `own_uid`; else why it is refused.
fn same_user(stream: &UnixStream, own_uid: u32) -> Result<(), SupervisorError> {
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == own_uid => Ok(()),
        Ok(cred) => Err(SupervisorError::Refused(format!(
            "connection refused: uid {} is not the daemon's uid {own_uid}",
            cred.uid()
        ))),
        Err(e) => Err(SupervisorError::io("connection refused", e)),
    }
}

fn hello(socket_activated: bool) -> Hello {
    let mut capabilities = vec![
        Capability::IdleShutdown.name().into(),
        Capability::Workers.name().into(),
    ];
    if socket_activated {
        capabilities.push(Capability::SocketActivated.name().into());
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

async fn connection(supervisor: Shared, mut stream: UnixStream) {
    let activated = supervisor.borrow().socket_activated;
    let Some((theirs, compatible)) = greet(&mut stream, activated).await else {
        return;
    };
    let request = match read_frame::<Request, _>(&mut stream).await {
        Ok(request) => request,
        Err(FrameError::Closed) => return,
        Err(e) => {
            let _ = write_frame(&mut stream, &error(e.to_string())).await;
            return;
        }
    };
    if let Err(message) = compatible {
        if !matches!(request, Request::Shutdown { .. }) {
            let _ = write_frame(&mut stream, &error(message)).await;
            return;
        }
    }
    let response = match request {
        Request::Session { session, request } => {
            let zero_runs = theirs.has(Capability::ZeroRuns);
            route(&supervisor, stream, &session, request, zero_runs).await;
            return;
        }
        Request::Events { session } => {
            events::serve(&supervisor, stream, session).await;
            return;
        }
        Request::New { name, cwd, env } => new_session(&supervisor, name, cwd, env).await,
        Request::List => Response::Sessions {
            sessions: supervisor.borrow().info(mono_ms()),
        },
        Request::Status => status(&supervisor),
        Request::Restart { session } => restart(&supervisor, &session).await,
        Request::Remove { session, force } => remove(&supervisor, &session, force).await,
        Request::Rename { session, name } => rename(&supervisor, &session, &name),
        Request::Shutdown { mode } => shutdown(&supervisor, mode).await,
        other => Response::Error {
            message: format!("the daemon does not serve {other:?}"),
        },
    };
    let stopped = matches!(response, Response::Shutdown { stopped: true, .. });
    if let Response::Shutdown {
        stopped: true,
        message,
    } = &response
    {
        events::daemon_stopping(&supervisor, message).await;
    }
    let _ = write_frame(&mut stream, &response).await;
    if stopped {
        supervisor.borrow_mut().answered_shutdown = true;
    }
}

/// Exchange hellos. The hello and `shutdown` are the part of the wire
/// every protocol version shares: a client of another protocol still
/// learns who runs here (so the replacement law can decide) and may still
/// ask an idle daemon to go; anything else needs the same protocol. `None`
/// when the connection is over; else the client's hello and whether its
/// protocol is this one (or why not).
async fn greet(
    stream: &mut UnixStream,
    activated: bool,
) -> Option<(Hello, Result<(), SupervisorError>)> {
    match read_frame::<Request, _>(stream).await {
        Ok(Request::Hello(theirs)) => {
            let answered = write_frame(stream, &Response::Hello(hello(activated))).await;
            let compatible = check_protocol(theirs.protocol).map_err(SupervisorError::Refused);
            answered.is_ok().then_some((theirs, compatible))
        }
        Ok(_) => {
            let _ = write_frame(stream, &error("expected hello first")).await;
            None
        }
        Err(FrameError::Closed) => None,
        Err(e) => {
            let _ = write_frame(stream, &error(e.to_string())).await;
            None
        }
    }
}

/// `eukhe rm`, told to the event stream once it is done.
async fn remove(supervisor: &Shared, session: &str, force: bool) -> Response {
    let response = manage::remove(supervisor, session, force).await;
    if let Response::Removed { id, name } = &response {
        let s = supervisor.borrow();
        s.events.session(id, name, EventKind::Removed);
        s.events.forget(id);
    }
    response
}

/// `eukhe rename`, told to the event stream once it is done.
fn rename(supervisor: &Shared, session: &str, name: &str) -> Response {
    let before = supervisor.borrow().resolve(session).ok().and_then(|id| {
        let from = supervisor.borrow().slots.get(&id)?.meta.name.clone();
        Some((id, from))
    });
    let response = manage::rename(supervisor, session, name);
    if let (Response::Ok, Some((id, from))) = (&response, before) {
        let from = EventKind::Renamed { from };
        supervisor.borrow().events.session(&id, name, from);
    }
    response
}

fn error(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
    }
}

async fn new_session(
    supervisor: &Shared,
    name: Option<String>,
    cwd: Option<String>,
    env: Option<SessionEnv>,
) -> Response {
    let id = fresh_id(supervisor);
    let name = name.map_or_else(|| id.clone(), |name| normalize_name(&name));
    if let Err(message) = name_free(supervisor, &name) {
        return error(message);
    }
    let cwd = match cwd {
        Some(cwd) => cwd,
        None => std::env::var("HOME").unwrap_or_else(|_| "/".into()),
    };
    let cwd_path = std::path::Path::new(&cwd);
    if !cwd_path.is_absolute() || !cwd_path.is_dir() {
        return error(format!(
            "working directory {cwd:?} is not an existing absolute directory"
        ));
    }
    let meta = SessionMeta {
        id: id.clone(),
        name: name.clone(),
        cwd,
        created_ms: wall_ms(),
        engine: "shell".into(),
    };
    if spare::wanted(supervisor) {
        if let Some(id) = spare::claim(supervisor, meta.clone(), env.as_ref()).await {
            let name = supervisor.borrow().slots[&id].meta.name.clone();
            let created = EventKind::Created {
                cwd: meta.cwd.clone(),
            };
            supervisor.borrow().events.session(&id, &name, created);
            supervisor.borrow().state_changed(&id);
            return Response::Created { id, name };
        }
    }
    let files = supervisor.borrow().files(&id);
    let written =
        create_session_dir(&files.dir).and_then(|_| write_session(&files, env.as_ref(), &meta));
    if let Err(message) = written {
        // No session was made: nothing of it stays (its id is fresh).
        let _ = std::fs::remove_dir_all(&files.dir);
        return error(message);
    }
    let created = EventKind::Created {
        cwd: meta.cwd.clone(),
    };
    supervisor
        .borrow_mut()
        .slots
        .insert(id.clone(), Slot::new(meta, SlotState::Saved));
    supervisor.borrow().events.session(&id, &name, created);
    launch(supervisor, &id).await;
    match wait_running(supervisor, &id).await {
        Ok(()) => Response::Created { id, name },
        Err(message) => error(message),
    }
}

/// A fresh session id: no other session's id, nor another session's name
/// (that name would stop reaching its session); a removed session's id is
/// never given again.
pub(super) fn fresh_id(supervisor: &Shared) -> String {
    let s = supervisor.borrow();
    loop {
        let id = new_id();
        let taken = s.slots.contains_key(&id)
            || s.removed.contains(&id)
            || s.slots.values().any(|slot| slot.meta.name == id);
        if !taken {
            return id;
        }
    }
}

/// Whether `name` may name a new session: valid, not another session's id
/// (a reference is an id first, so it would never reach this session) and
/// not another session's name.
fn name_free(supervisor: &Shared, name: &str) -> Result<(), SupervisorError> {
    let refused = |why: String| Err(SupervisorError::Refused(why));
    validate_name(name)?;
    let s = supervisor.borrow();
    if s.slots.contains_key(name) {
        return refused(format!(
            "session name {name:?} is the id of another session: choose another name"
        ));
    }
    let taken = s
        .slots
        .values()
        .find(|slot| slot.meta.name == name)
        .map(|slot| (slot.meta.id.clone(), slot.state == SlotState::GivenUp));
    match taken {
        Some((id, true)) => refused(format!(
            "a session named {name:?} exists ({id}) and was given up; `eukhe restart {id}` starts it afresh"
        )),
        Some((id, false)) => refused(format!("a session named {name:?} exists already ({id})")),
        None => Ok(()),
    }
}

/// Wait until the session's worker is under supervision.
pub(super) async fn wait_running(supervisor: &Shared, id: &str) -> Result<(), SupervisorError> {
    let refused = |why: String| Err(SupervisorError::Refused(why));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.worker_start_wait);
    let changed = supervisor.borrow().changed.clone();
    loop {
        // Registered before the state is read, so no change slips between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let state = supervisor.borrow().slots.get(id).map(|s| s.state.clone());
        // A failure while this client waited says why it waited in vain.
        let failure = || {
            let since = crate::clock::mono_ms().saturating_sub(TM.worker_start_wait);
            let s = supervisor.borrow();
            let (at, why) = s.slots.get(id)?.last_failure.as_ref()?;
            (*at >= since).then(|| format!(" (the last attempt: {why})"))
        };
        match state {
            Some(SlotState::Running { .. }) => return Ok(()),
            Some(SlotState::GivenUp) => {
                return refused(given_up(id, &failure().unwrap_or_default()))
            }
            Some(SlotState::Damaged { problem }) => return refused(damaged(id, &problem)),
            None => return refused(format!("no session {id}")),
            _ if tokio::time::Instant::now() >= deadline => {
                return refused(format!(
                    "session {id}: its worker did not start within {}{}",
                    duration_in_words(TM.worker_start_wait),
                    failure().unwrap_or_default()
                ))
            }
            _ => {
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
    }
}

/// How a request reached the running worker.
enum Reached {
    /// A worker of this build took the client over.
    Handed,
    /// A worker of another build, greeted: `hand_over` decides how it
    /// gets the request.
    Greeted(UnixStream, Hello),
}

/// Reach the running worker of `id` with `request` and its `client`. A
/// worker of this build is known to take clients over, so the hand-over
/// follows the hello at once and the worker's answer is read after it; a
/// worker of another build is greeted first. A worker that died a moment
/// ago (its failure not noticed yet) is waited for as a start is: once its
/// end is seen and the next worker runs, the request goes to that one.
async fn reach_running_worker(
    supervisor: &Shared,
    id: &str,
    client: &UnixStream,
    request: &SessionRequest,
    zero_runs: bool,
) -> Result<Reached, SupervisorError> {
    loop {
        let (running, same_build) = match supervisor.borrow().slots.get(id).map(|s| &s.state) {
            Some(SlotState::Running { identity, build }) => (Some(*identity), build == build_id()),
            _ => (None, false),
        };
        let reached = if same_build {
            hand_over_greeting(supervisor, id, client, request, zero_runs)
                .await
                .map(|()| Reached::Handed)
        } else {
            let greeted = connect_worker(supervisor, id).await;
            greeted.map(|(stream, hello)| Reached::Greeted(stream, hello))
        };
        let error = match reached {
            Ok(reached) => return Ok(reached),
            Err(error) => error,
        };
        // A worker that was killed closes its connections a moment before
        // its process is gone: that moment is waited out, so a request
        // sent just then waits for the next worker instead of failing.
        if let Some(identity) = running {
            backend::wait_gone(supervisor, id, identity, TM.child_drain).await;
        }
        let Some(dead) = running.filter(|identity| !is_alive(*identity)) else {
            return Err(error);
        };
        tracing::info!(
            session = id,
            "a request for session {id} waits for its worker {} to be replaced",
            dead.pid
        );
        let changed = supervisor.borrow().changed.clone();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.worker_start_wait);
        loop {
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let still = matches!(
                supervisor.borrow().slots.get(id).map(|s| &s.state),
                Some(SlotState::Running { identity, .. }) if *identity == dead
            );
            if !still {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(error);
            }
        }
        wait_running(supervisor, id).await?;
    }
}

fn damaged(id: &str, problem: &str) -> String {
    format!("session {id} cannot start: {problem} (mend or move the file; the next request reads it again)")
}

/// Why a request for `id` is refused once it was given up; `because` (may
/// be empty) says what its last failure was.
fn given_up(id: &str, because: &str) -> String {
    format!(
        "session {id} was given up after failing {}{because}; `eukhe restart {id}` starts it afresh",
        give_up_in_words()
    )
}

/// `zero_runs`: the client reads zero-run frames (its hello said so).
async fn route(
    supervisor: &Shared,
    mut client: UnixStream,
    reference: &str,
    request: SessionRequest,
    zero_runs: bool,
) {
    let resolved = supervisor.borrow().resolve(reference);
    let id = match resolved {
        Ok(id) => id,
        Err(message) => {
            let _ = write_frame(&mut client, &error(message)).await;
            return;
        }
    };
    // A damaged session is read again: mended files let it start.
    let damaged_now = matches!(
        supervisor.borrow().slots.get(&id).map(|s| &s.state),
        Some(SlotState::Damaged { .. })
    );
    if damaged_now {
        let kernel_lives = backend::kernel_lives(supervisor, &id);
        let _ = supervisor.borrow_mut().recheck(&id, kernel_lives);
    }
    // A session being stopped or removed right now is waited for, then
    // woken (or found gone). From then on the request is counted until it
    // is handed over: the session is in use (no idle stop begins), and a
    // removal waits for it to reach the worker.
    if let Err(message) = settle(supervisor, &id).await {
        let _ = write_frame(&mut client, &error(message)).await;
        return;
    }
    let _in_flight = InFlight::begin(supervisor, &id);
    let state = supervisor.borrow().slots.get(&id).map(|s| s.state.clone());
    let resting = matches!(
        state,
        Some(SlotState::GivenUp | SlotState::Saved | SlotState::Damaged { .. })
    );
    if let (
        true,
        SessionRequest::Log {
            tail,
            input,
            after,
            follow: false,
        },
    ) = (resting, &request)
    {
        let query = LogQuery {
            tail: *tail,
            input: *input,
            after: *after,
        };
        serve_resting_log(supervisor, &id, &mut client, query).await;
        return;
    }
    match running_worker(supervisor, &id, state, &client, &request, zero_runs).await {
        Ok(Reached::Handed) => {}
        Ok(Reached::Greeted(worker, hello)) => {
            hand_over(client, worker, &hello, &id, request, zero_runs).await
        }
        Err(message) => {
            let _ = write_frame(&mut client, &error(message)).await;
        }
    }
}

/// A resting session's transcript, read from disk: no worker is started
/// just to read it, and a given-up one keeps it readable.
async fn serve_resting_log(
    supervisor: &Shared,
    id: &str,
    client: &mut UnixStream,
    query: LogQuery,
) {
    let files = supervisor.borrow().files(id);
    // The worker's index of restore notices (none yet: an empty one).
    let notices = read_json::<Vec<Entry>>(&files.restore_notices())
        .ok()
        .flatten()
        .unwrap_or_default();
    match log_query::entries_with_notices(&files.transcript(), query, notices) {
        Ok(entries) => {
            // An input's entries start with its own: none, no such input.
            let mut found = query.input.is_none();
            for entry in entries {
                found = true;
                if write_frame(client, &Response::Entry(entry)).await.is_err() {
                    return;
                }
            }
            let last = match query.input {
                Some(input) if !found => error(log_query::no_input(input)),
                _ => Response::Replayed,
            };
            let _ = write_frame(client, &last).await;
        }
        Err(message) => {
            let _ = write_frame(client, &error(message)).await;
        }
    }
}

/// Reach the worker of `id` with `request` and its `client`, launched first
/// if the session was resting (`state`); why not, for a session given up
/// or damaged, or one whose worker does not come up.
async fn running_worker(
    supervisor: &Shared,
    id: &str,
    state: Option<SlotState>,
    client: &UnixStream,
    request: &SessionRequest,
    zero_runs: bool,
) -> Result<Reached, SupervisorError> {
    match &state {
        Some(SlotState::GivenUp) => return Err(SupervisorError::Refused(given_up(id, ""))),
        Some(SlotState::Damaged { problem }) => {
            return Err(SupervisorError::Refused(damaged(id, problem)))
        }
        Some(SlotState::Saved) => launch(supervisor, id).await,
        _ => {}
    }
    wait_running(supervisor, id).await?;
    reach_running_worker(supervisor, id, client, request, zero_runs).await
}

/// Hand `client` and `request` to a worker of this build without waiting
/// for its hello: hello, hand-over and the client's socket go out at once,
/// then its answer to the hello is read. Until that answer the request
/// counts as in flight (so an idle stop's quiesce never falls between the
/// two), and a worker that never answers never took the client: it
/// answers the hello before it reads the hand-over, and serves the client
/// only after its answer is written, so the request may go to the next
/// worker without running twice.
async fn hand_over_greeting(
    supervisor: &Shared,
    id: &str,
    client: &UnixStream,
    request: &SessionRequest,
    zero_runs: bool,
) -> Result<(), SupervisorError> {
    let mut worker = greet_worker(supervisor, id).await?;
    let handoff = Request::Handoff {
        session: id.to_string(),
        request: request.clone(),
        zero_runs,
    };
    write_frame(&mut worker, &handoff)
        .await
        .map_err(|e| SupervisorError::worker(id, e))?;
    handoff::send_fd(&worker, client.as_fd())
        .await
        .map_err(|e| SupervisorError::worker(id, e))?;
    // The worker may have the client now: its answer is waited for as long
    // as the worker may live silent (its watchdog, then the kill that ends
    // it and closes this connection), never cut short while it might serve.
    let hung_ms = supervisor.borrow().config.worker_watchdog_ms + TM.kill_route + TM.child_drain;
    match tokio::time::timeout(
        Duration::from_millis(hung_ms),
        worker_hello(&mut worker, id),
    )
    .await
    {
        Ok(answer) => answer.map(|_| ()),
        Err(_) => Err(SupervisorError::worker(
            id,
            format!(
                "its worker has not answered for {} and outlived its watchdog",
                duration_in_words(hung_ms)
            ),
        )),
    }
}

/// Hand `request` and its `client` to a worker of another build: it
/// takes the client's connection over if it can (from then on they talk
/// directly, in zero-run frames if both read them), else the request is
/// forwarded and the two connections spliced.
async fn hand_over(
    mut client: UnixStream,
    mut worker: UnixStream,
    hello: &Hello,
    id: &str,
    request: SessionRequest,
    zero_runs: bool,
) {
    let session = id.to_string();
    if hello.has(Capability::Handoff) {
        let handoff = Request::Handoff {
            session,
            request,
            zero_runs: zero_runs && hello.has(Capability::ZeroRuns),
        };
        let handed = match write_frame(&mut worker, &handoff).await {
            Ok(()) => handoff::send_fd(&worker, client.as_fd())
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = handed {
            let _ = write_frame(&mut client, &error(format!("session {id}: {e}"))).await;
        }
        return;
    }
    let forwarded = Request::Session { session, request };
    if let Err(e) = write_frame(&mut worker, &forwarded).await {
        let _ = write_frame(&mut client, &error(format!("session {id}: {e}"))).await;
        return;
    }
    // Large buffers: output streams through here at pipe speed (the
    // default 8 KiB would take a pair of syscalls per 8 KiB).
    let _ = tokio::io::copy_bidirectional_with_sizes(
        &mut client,
        &mut worker,
        SPLICE_BYTES,
        SPLICE_BYTES,
    )
    .await;
}

/// The splice's buffer, each way.
const SPLICE_BYTES: usize = 256 * 1024;

fn status(supervisor: &Shared) -> Response {
    let s = supervisor.borrow();
    let count = |f: fn(&Slot) -> bool| s.sessions().filter(|slot| f(slot)).count() as u32;
    Response::Status(StatusInfo {
        version: version().to_string(),
        build_id: build_id().to_string(),
        pid: std::process::id(),
        backend: s.host.kind().name().into(),
        protocol: PROTOCOL_VERSION,
        capabilities: hello(s.socket_activated).capabilities,
        sessions: s.sessions().count() as u32,
        running: count(|slot| matches!(slot.state, SlotState::Running { .. })),
        busy: count(|slot| {
            matches!(slot.state, SlotState::Running { .. }) && !slot.work.is_empty()
        }),
        given_up: count(|slot| slot.state == SlotState::GivenUp),
        socket: s.paths.socket.display().to_string(),
        state_dir: s.paths.state.display().to_string(),
    })
}

async fn restart(supervisor: &Shared, reference: &str) -> Response {
    let resolved = supervisor.borrow().resolve(reference);
    let id = match resolved {
        Ok(id) => id,
        Err(message) => return error(message),
    };
    let was_damaged = matches!(
        supervisor.borrow().slots.get(&id).map(|s| &s.state),
        Some(SlotState::Damaged { .. })
    );
    let kernel_lives = backend::kernel_lives(supervisor, &id);
    if let Err(problem) = supervisor.borrow_mut().recheck(&id, kernel_lives) {
        return error(damaged(&id, &problem.to_string()));
    }
    if was_damaged {
        // A mended session starts now, afresh.
        {
            let mut s = supervisor.borrow_mut();
            let _ = std::fs::remove_file(s.files(&id).given_up());
            if let Some(slot) = s.slots.get_mut(&id) {
                slot.budget = RestartBudget::new();
            }
            s.set_state(&id, SlotState::Saved);
        }
        launch(supervisor, &id).await;
        return match wait_running(supervisor, &id).await {
            Ok(()) => Response::Ok,
            Err(message) => error(message),
        };
    }
    {
        let mut s = supervisor.borrow_mut();
        let files = s.files(&id);
        let slot = s.slots.get_mut(&id).expect("resolved");
        if slot.state != SlotState::GivenUp {
            return error(format!("session {id} is not given up; nothing to restart"));
        }
        let _ = std::fs::remove_file(files.given_up());
        slot.budget = RestartBudget::new();
        slot.state = SlotState::Saved;
    }
    launch(supervisor, &id).await;
    match wait_running(supervisor, &id).await {
        Ok(()) => Response::Ok,
        Err(message) => error(message),
    }
}

fn running_ids(supervisor: &Shared) -> Vec<String> {
    supervisor
        .borrow()
        .slots
        .iter()
        .filter(|(_, slot)| matches!(slot.state, SlotState::Running { .. } | SlotState::Starting))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Stop accepting connections: the socket goes first, so no client
/// connects to a daemon that is going away.
fn stop_serving(supervisor: &Shared) {
    let mut s = supervisor.borrow_mut();
    s.shutting_down = true;
    systemd::notify("STOPPING=1");
    // An activated socket belongs to the service manager, which keeps
    // listening and starts the next daemon on the next connection.
    if !s.socket_activated {
        let _ = std::fs::remove_file(&s.paths.socket);
    }
}

async fn shutdown(supervisor: &Shared, mode: ShutdownMode) -> Response {
    match mode {
        ShutdownMode::Normal => {
            stop_serving(supervisor);
            Response::Shutdown {
                stopped: true,
                message: "the daemon stopped; running workers keep their sessions".into(),
            }
        }
        ShutdownMode::Force => {
            stop_serving(supervisor);
            stop_all(
                supervisor,
                &running_ids(supervisor),
                Request::StopWithKernel,
            )
            .await;
            let ids: Vec<String> = supervisor.borrow().slots.keys().cloned().collect();
            for id in ids {
                backend::stop_lone_kernel(supervisor, &id).await;
            }
            Response::Shutdown {
                stopped: true,
                message: "the daemon, every worker and every kernel stopped".into(),
            }
        }
        ShutdownMode::IfIdle => {
            let ids = running_ids(supervisor);
            let asked_at = mono_ms();
            // Ask every worker at once; each answer is timed when it comes.
            let replies: Vec<QuiesceReply> =
                ask_each(supervisor, &ids, Request::Quiesce, QUIESCE_ANSWER_MS)
                    .await
                    .into_iter()
                    .map(|reply| match reply {
                        Some((Response::Quiesce { answer }, at_ms)) => {
                            QuiesceReply::Answered { answer, at_ms }
                        }
                        _ => QuiesceReply::Silent,
                    })
                    .collect();
            match idle_shutdown_commits(asked_at, &replies) {
                ShutdownCommit::StopWorkers => {
                    stop_serving(supervisor);
                    stop_all(supervisor, &ids, Request::IdleStop).await;
                    Response::Shutdown {
                        stopped: true,
                        message: "the daemon was idle and stopped".into(),
                    }
                }
                ShutdownCommit::ReopenAndAnswerBusy => {
                    ask_each(supervisor, &ids, Request::Release, QUIESCE_ANSWER_MS).await;
                    Response::Shutdown {
                        stopped: false,
                        message: "the daemon is busy: it keeps serving".into(),
                    }
                }
            }
        }
    }
}

/// Send `request` to each worker at once, each on its own connection; a
/// reply is kept with the monotonic time it arrived, if it came within
/// `within_ms`.
async fn ask_each(
    supervisor: &Shared,
    ids: &[String],
    request: Request,
    within_ms: u64,
) -> Vec<Option<(Response, u64)>> {
    let asks: Vec<_> = ids
        .iter()
        .map(|id| {
            let (supervisor, id, request) = (supervisor.clone(), id.clone(), request.clone());
            tokio::task::spawn_local(async move {
                let reply = tokio::time::timeout(
                    Duration::from_millis(within_ms),
                    ask_worker(&supervisor, &id, request),
                )
                .await;
                match reply {
                    Ok(Ok(response)) => Some((response, mono_ms())),
                    _ => None,
                }
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(asks.len());
    for ask in asks {
        replies.push(ask.await.unwrap_or(None));
    }
    replies
}

/// Stop workers, all at once: each is asked to stop and ended by force
/// (by identity, or through its unit) if it outlives the stop grace.
async fn stop_all(supervisor: &Shared, ids: &[String], request: Request) {
    let stops: Vec<_> = ids
        .iter()
        .filter_map(
            |id| match supervisor.borrow().slots.get(id).map(|s| s.state.clone()) {
                Some(SlotState::Running { identity, .. }) => Some((id.clone(), identity)),
                _ => None,
            },
        )
        .map(|(id, identity)| {
            let (supervisor, request) = (supervisor.clone(), request.clone());
            tokio::task::spawn_local(async move {
                backend::stop_worker(&supervisor, &id, identity, request).await
            })
        })
        .collect();
    // Each stop's escalation fits in the supervisor drain
    // (`timeouts_ordered`); the drain bounds them all, so a hung host call
    // cannot hold the shutdown's answer past the launcher's wait.
    let _ = tokio::time::timeout(Duration::from_millis(TM.supervisor_drain), async {
        for stop in stops {
            let _ = stop.await;
        }
    })
    .await;
}
