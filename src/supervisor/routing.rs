//! The supervisor's socket: hello, then one request per connection.
//! Session requests go to the session's worker with the client's
//! connection (`handover`): the worker serves the client directly.

use super::SupervisorError;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};

use super::backend;
use super::events;
/// `manage` waits for a worker through this module.
pub(super) use super::handover::wait_running;
use super::handover::{hand_over, running_worker, Reached};
use super::launch::{launch, Shared};
use super::manage::{self, settle, InFlight};
use super::shutdown::shutdown;
use super::slots::{Slot, SlotState};
use super::spare;
use crate::build_id::{build_id, version};
use crate::clock::{mono_ms, wall_ms};
use crate::host::systemd;
use crate::laws::limits::ResourceLimits;
use crate::laws::restart::RestartBudget;
use crate::laws::timing::SHUTDOWN_WORD_MS;
use crate::protocol::event::EventKind;
use crate::protocol::hello::{check_protocol, Capability, Role};
use crate::protocol::message::{Request, Response, SessionRequest, StatusInfo};
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
    let mut watchdog = Watchdog::new();
    let mut last_status = String::new();
    let mut terms = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| SupervisorError::io("cannot handle SIGTERM", e))?;
    let (mut decided, changed) = {
        let s = supervisor.borrow();
        (s.shutdown.subscribe(), s.changed.clone())
    };
    loop {
        // Registered before the status is read, so no change slips between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        watchdog.feed();
        let status = supervisor.borrow().status_line();
        if status != last_status {
            systemd::notify(&format!("STATUS={status}"));
            last_status = status;
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
            _ = decided.recv() => break,
            // The status line changes only with a slot's state.
            _ = &mut notified => continue,
            _ = watchdog.due() => continue,
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
    // End only once every shutdown's answer is out: ending earlier would
    // cut the connection that is still stopping workers and answering.
    let all_answered = {
        let mut s = supervisor.borrow_mut();
        s.shutdown.stop_accepting();
        s.shutdown.all_answered()
    };
    let Some(mut all_answered) = all_answered else {
        return Ok(());
    };
    loop {
        tokio::select! {
            // Closed: every sender is dropped.
            _ = all_answered.recv() => return Ok(()),
            _ = watchdog.due() => watchdog.feed(),
        }
    }
}

/// The service manager's watchdog, fed from the accept loop (and while a
/// shutdown finishes), so a hung loop gets killed.
struct Watchdog {
    interval: Option<Duration>,
    last_ping: tokio::time::Instant,
}

impl Watchdog {
    fn new() -> Watchdog {
        Watchdog {
            interval: systemd::watchdog_ping_interval(),
            last_ping: tokio::time::Instant::now(),
        }
    }

    /// Ping if an interval passed since the last ping.
    fn feed(&mut self) {
        if let Some(interval) = self.interval {
            if self.last_ping.elapsed() >= interval {
                systemd::notify("WATCHDOG=1");
                self.last_ping = tokio::time::Instant::now();
            }
        }
    }

    /// Until the next ping is due (never, without a watchdog).
    async fn due(&self) {
        match self.interval {
            Some(interval) => tokio::time::sleep_until(self.last_ping + interval).await,
            None => std::future::pending().await,
        }
    }
}

/// Whether the peer of `stream` runs as `own_uid`; else why it is refused.
fn same_user(stream: &UnixStream, own_uid: u32) -> Result<(), SupervisorError> {
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == own_uid => Ok(()),
        Ok(cred) => Err(SupervisorError::ForeignUser {
            uid: cred.uid(),
            own_uid,
        }),
        Err(e) => Err(SupervisorError::io("connection refused", e)),
    }
}

fn hello(socket_activated: bool) -> Hello {
    let mut capabilities = vec![
        Capability::IdleShutdown.name().into(),
        Capability::Workers.name().into(),
        Capability::RemoteClients.name().into(),
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
    let request = match first_request(&supervisor, &mut stream).await {
        First::Request(request) => request,
        First::Over => return,
        First::Told => {
            supervisor.borrow_mut().shutdown.hold_until_exit(stream);
            return;
        }
    };
    if let Err(message) = compatible {
        if !matches!(request, Request::Shutdown { .. }) {
            let _ = write_frame(&mut stream, &error(message)).await;
            return;
        }
    }
    // A connection answering a shutdown keeps the daemon until its answer
    // is out.
    let _answering = matches!(request, Request::Shutdown { .. })
        .then(|| supervisor.borrow().shutdown.answering());
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
        Request::New {
            name,
            cwd,
            env,
            limits,
        } => new_session(&supervisor, name, cwd, env, limits).await,
        Request::List => list(&supervisor).await,
        Request::Status => {
            super::launch::starts_settled(&supervisor).await;
            status(&supervisor)
        }
        Request::Restart { session } => restart(&supervisor, &session).await,
        Request::Remove { session, force } => remove(&supervisor, &session, force).await,
        Request::Rename { session, name } => rename(&supervisor, &session, &name),
        Request::Shutdown { mode } => shutdown(&supervisor, mode).await,
        other => Response::Error {
            message: format!("the daemon does not serve {other:?}"),
        },
    };
    if let Response::Shutdown {
        stopped: true,
        message,
    } = &response
    {
        events::daemon_stopping(&supervisor, message).await;
    }
    let _ = write_frame(&mut stream, &response).await;
}

/// What came first on a connection after the hellos.
enum First {
    Request(Request),
    /// The client hung up, or sent what is no request (it was told).
    Over,
    /// A shutdown was decided while the client waited to ask: it was told.
    Told,
}

/// The connection's request. A client still waiting to ask when a
/// shutdown is decided (an attached client's watch waits there) is told
/// that the daemon is shut down on purpose, so it starts no daemon again;
/// the daemon ends only once that is written (or `SHUTDOWN_WORD_MS`
/// passed). A client of an earlier build takes the word for a lost
/// daemon, as it took the closed connection.
async fn first_request(supervisor: &Shared, stream: &mut UnixStream) -> First {
    let (mut decided, answering, already) = {
        let s = supervisor.borrow();
        let shutdown = &s.shutdown;
        (
            shutdown.subscribe(),
            shutdown.answering(),
            shutdown.decided(),
        )
    };
    let read = match already {
        true => None,
        // A request already sent is served.
        false => tokio::select! {
            biased;
            read = read_frame::<Request, _>(&mut *stream) => Some(read),
            _ = decided.recv() => None,
        },
    };
    match read {
        Some(Ok(request)) => First::Request(request),
        Some(Err(FrameError::Closed)) => First::Over,
        Some(Err(e)) => {
            let _ = write_frame(stream, &error(e.to_string())).await;
            First::Over
        }
        None => {
            let word = Response::Shutdown {
                stopped: true,
                message: "the daemon is shutting down (`eukhe shutdown`)".into(),
            };
            let within = Duration::from_millis(SHUTDOWN_WORD_MS);
            let _ = tokio::time::timeout(within, write_frame(stream, &word)).await;
            drop(answering);
            First::Told
        }
    }
}

/// `ls`: every session, once a starting daemon's adoptions settled.
async fn list(supervisor: &Shared) -> Response {
    super::launch::starts_settled(supervisor).await;
    Response::Sessions {
        sessions: supervisor.borrow().info(mono_ms()),
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
            let compatible = check_protocol(theirs.protocol).map_err(SupervisorError::Protocol);
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

pub(super) fn error(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
    }
}

async fn new_session(
    supervisor: &Shared,
    name: Option<String>,
    cwd: Option<String>,
    env: Option<SessionEnv>,
    limits: ResourceLimits,
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
    let (limits, warning) = match session_limits(supervisor, limits) {
        Ok(found) => found,
        Err(message) => return error(message),
    };
    let meta = SessionMeta {
        id: id.clone(),
        name: name.clone(),
        cwd,
        created_ms: wall_ms(),
        engine: "shell".into(),
        limits,
    };
    // A spare's kernel started without limits.
    if limits.is_none() && spare::wanted(supervisor) {
        if let Some(id) = spare::claim(supervisor, meta.clone(), env.as_ref()).await {
            let name = supervisor.borrow().slots[&id].meta.name.clone();
            let created = EventKind::Created {
                cwd: meta.cwd.clone(),
            };
            supervisor.borrow().events.session(&id, &name, created);
            supervisor.borrow().state_changed(&id);
            return Response::Created { id, name, warning };
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
        Ok(()) => Response::Created { id, name, warning },
        Err(message) => error(message),
    }
}

/// The limits a new session gets (its own, else the configured ones) and
/// the warning to pass on, or the one line refusing them on this backend.
fn session_limits(
    supervisor: &Shared,
    limits: ResourceLimits,
) -> Result<(ResourceLimits, Option<String>), String> {
    let limits = limits.or(supervisor.borrow().config.limits);
    let warning = backend::limits_apply(supervisor, &limits)?;
    if let Some(warning) = &warning {
        tracing::warn!("{warning}");
    }
    Ok((limits, warning))
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
    validate_name(name)?;
    let s = supervisor.borrow();
    if s.slots.contains_key(name) {
        return Err(SupervisorError::NameIsId { name: name.into() });
    }
    let taken = s
        .slots
        .values()
        .find(|slot| slot.meta.name == name)
        .map(|slot| (slot.meta.id.clone(), slot.state == SlotState::GivenUp));
    match taken {
        Some((id, given_up)) => Err(SupervisorError::NameTaken {
            name: name.into(),
            id,
            given_up,
        }),
        None => Ok(()),
    }
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
    if let (true, SessionRequest::Window { .. }) = (resting, &request) {
        super::windows::serve_resting_window(supervisor, &id, &mut client, request).await;
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
    // An unreadable mark is no mark (as the worker reads it).
    let mark = read_json(&files.numbers()).ok().flatten();
    let transcript = files.transcript();
    let entries =
        log_query::entries_with_notices(&transcript, query, notices).and_then(|selected| {
            log_query::with_history_lost_at_rest(&transcript, query, mark.as_ref(), selected)
        });
    match entries {
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
        let problem = problem.to_string();
        return error(SupervisorError::Damaged { id, problem });
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
