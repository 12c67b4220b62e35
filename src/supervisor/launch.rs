//! Launching, watching, restarting, adopting and reviving workers, on
//! either backend (see `backend`). Every decision is a call into `laws`.

use super::SupervisorError;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::UnixStream;

use super::backend;
use super::events;
use super::lifecycle::{self, Action, Event, StartFailed};
use super::slots::{SlotState, Supervisor};
use crate::build_id::{build_id, version};
use crate::clock::{mono_ms, wall_ms};
use crate::laws::adoption::{adoption_verdict, AdoptionVerdict, LiveWorker, ProcessIdentity};
use crate::laws::idle_stop::last_active;
use crate::laws::restart::RestartVerdict;
use crate::laws::revival::{revival_veto, RecordOrigin};
use crate::laws::timing::{duration_in_words, STARTS_SETTLE_MS, TM, WORKER_CONNECT_RETRY_MS};
use crate::protocol::event::EventKind;
use crate::protocol::hello::Role;
use crate::protocol::message::WorkerInfo;
use crate::protocol::message::{Request, Response};
use crate::protocol::{read_frame, write_frame, FrameError, Hello, PROTOCOL_VERSION};
use crate::session::store::check_files;
use crate::session::transcript::{EntryBody, OutputBytes, Transcript};

pub type Shared = Rc<RefCell<Supervisor>>;

/// Connect to a worker's socket and exchange hellos, within the worker
/// answer deadline: a worker that is stopped, wedged or accepts and never
/// answers is unreachable, and nothing waits on it longer.
pub async fn connect_worker(
    supervisor: &Shared,
    id: &str,
) -> Result<(UnixStream, Hello), SupervisorError> {
    within_answer(id, async {
        let mut stream = greet_worker(supervisor, id).await?;
        let hello = worker_hello(&mut stream, id).await?;
        Ok((stream, hello))
    })
    .await
}

/// `step`, or an error once the worker answer deadline passed.
async fn within_answer<T>(
    id: &str,
    step: impl std::future::Future<Output = Result<T, SupervisorError>>,
) -> Result<T, SupervisorError> {
    match tokio::time::timeout(Duration::from_millis(TM.worker.worker_answer), step).await {
        Ok(result) => result,
        Err(_) => Err(SupervisorError::worker(
            id,
            format!(
                "its worker did not answer within {}",
                duration_in_words(TM.worker.worker_answer)
            ),
        )),
    }
}

/// Connect to a worker's socket and send the hello, without waiting for
/// the worker's: a caller that knows what the worker serves sends its
/// request behind the hello and reads the answer later
/// ([`worker_hello`]).
pub async fn greet_worker(supervisor: &Shared, id: &str) -> Result<UnixStream, SupervisorError> {
    let socket = supervisor.borrow().paths.worker_socket(id);
    within_answer(id, greet_at(&socket, id)).await
}

async fn greet_at(socket: &std::path::Path, id: &str) -> Result<UnixStream, SupervisorError> {
    let mut stream = UnixStream::connect(socket).await.map_err(|e| {
        SupervisorError::worker(
            id,
            format!("cannot reach its worker at {}: {e}", socket.display()),
        )
    })?;
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        version: version().to_string(),
        build_id: build_id().to_string(),
        role: Role::Supervisor,
        capabilities: Vec::new(),
        pid: Some(std::process::id()),
    };
    write_frame(&mut stream, &Request::Hello(hello))
        .await
        .map_err(|e| SupervisorError::worker(id, e))?;
    Ok(stream)
}

/// The worker's answer to [`greet_worker`]'s hello.
pub async fn worker_hello(stream: &mut UnixStream, id: &str) -> Result<Hello, SupervisorError> {
    match read_frame::<Response, _>(stream).await {
        Ok(Response::Hello(theirs)) => Ok(theirs),
        Ok(Response::Error { message }) => Err(SupervisorError::worker(
            id,
            format!("worker refused: {message}"),
        )),
        Ok(other) => Err(SupervisorError::worker(
            id,
            format!("worker answered {other:?} to hello"),
        )),
        Err(e) => Err(SupervisorError::worker(id, format!("worker hello: {e}"))),
    }
}

/// Send one request to a worker on a fresh connection and read one answer,
/// each step within the worker answer deadline.
pub async fn ask_worker(
    supervisor: &Shared,
    id: &str,
    request: Request,
) -> Result<Response, SupervisorError> {
    let (mut stream, _) = connect_worker(supervisor, id).await?;
    within_answer(id, async {
        write_frame(&mut stream, &request)
            .await
            .map_err(|e| SupervisorError::worker(id, e))?;
        read_frame(&mut stream)
            .await
            .map_err(|e| SupervisorError::worker(id, e))
    })
    .await
}

/// Launch the worker of `id` (after dealing with any earlier process the
/// way `survivor_step` says) and start watching it; a launch that fails is
/// restarted after its pause or given up, as `lifecycle` says, before this
/// returns.
pub async fn launch(supervisor: &Shared, id: &str) {
    drive(supervisor, id, Event::Launch).await;
}

/// Feed `event` to the slot's lifecycle and perform its actions, feeding
/// back what they found, until none is left.
async fn drive(supervisor: &Shared, id: &str, event: Event) {
    let mut next = Some(event);
    while let Some(event) = next.take() {
        let actions = {
            let mut s = supervisor.borrow_mut();
            let Some(slot) = s.slots.get_mut(id) else {
                return;
            };
            lifecycle::handle(slot, event, mono_ms())
        };
        for action in actions {
            if let Some(event) = perform(supervisor, id, action).await {
                next = Some(event);
            }
        }
    }
}

/// The survivor of an earlier worker of `id`, once its files are known to
/// read. A session whose files cannot be read would fail at every start (a
/// crash loop saying only that the worker did not start): it is marked
/// damaged instead, with the file and what is wrong, and not launched.
async fn find_survivor(supervisor: &Shared, id: &str) -> Option<Event> {
    let files = supervisor.borrow().files(id);
    let kernel_lives = backend::kernel_lives(supervisor, id);
    if let Err(problem) = check_files(&files, !kernel_lives) {
        tracing::error!(session = id, "session {id} cannot start: {problem}");
        supervisor.borrow_mut().set_state(
            id,
            SlotState::Damaged {
                problem: problem.to_string(),
            },
        );
        return None;
    }
    let earlier = backend::surviving_worker(supervisor, id).await;
    Some(Event::Survivor {
        earlier,
        holder: earlier,
        stop_sent: false,
    })
}

/// Perform one lifecycle action; the event it leads to, if any.
async fn perform(supervisor: &Shared, id: &str, action: Action) -> Option<Event> {
    match action {
        Action::FindSurvivor => find_survivor(supervisor, id).await,
        Action::StopEarlier(earlier) => {
            backend::stop_worker(supervisor, id, earlier, Request::Stop).await;
            let holder = backend::surviving_worker(supervisor, id).await;
            Some(Event::Survivor {
                earlier: Some(earlier),
                holder,
                stop_sent: true,
            })
        }
        // The core keeps a failed start's reason as its line.
        Action::Start => Some(Event::Started(
            backend::start_worker(supervisor, id)
                .await
                .map_err(|e| StartFailed(e.to_string())),
        )),
        Action::Watch { generation } => {
            tokio::task::spawn_local(watch(supervisor.clone(), id.to_string(), generation));
            None
        }
        Action::Kill(identity) => {
            backend::kill_worker(supervisor, id, identity).await;
            None
        }
        Action::Failed { why, verdict } => {
            tell_failure(supervisor, id, why, verdict);
            None
        }
        Action::StateChanged => {
            supervisor.borrow().state_changed(id);
            None
        }
        Action::Pause { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            (!supervisor.borrow().shutdown.decided()).then_some(Event::PauseOver)
        }
        Action::GiveUp { failures_in_window } => {
            record_give_up(supervisor, id, failures_in_window).await;
            None
        }
    }
}

/// Hold a control connection to the worker; when it ends, the worker has
/// failed (unless it was stopped on purpose).
async fn watch(supervisor: Shared, id: String, generation: u64) {
    let ended = |why: &str| Event::Ended {
        generation,
        why: why.to_string(),
    };
    let (mut stream, hello) = match connect_soon(&supervisor, &id).await {
        Ok(connection) => connection,
        Err(why) => {
            drive(&supervisor, &id, ended(&why.to_string())).await;
            return;
        }
    };
    let supervise = Request::Supervise {
        build_id: build_id().to_string(),
    };
    if write_frame(&mut stream, &supervise).await.is_err() {
        drive(&supervisor, &id, ended("its worker hung up")).await;
        return;
    }
    // Where the supervisor is the watchdog, a worker silent for the
    // watchdog interval is hung (a host may watch it itself instead).
    let watchdog = {
        let s = supervisor.borrow();
        s.host.watchdog(&s.config)
    };
    loop {
        match next_frame(&mut stream, watchdog).await {
            Ok(Ok(Response::Worker(info))) => {
                if !take_report(&supervisor, &id, generation, &info, &hello.build_id) {
                    return;
                }
            }
            Ok(Ok(Response::Event(event))) => {
                let s = supervisor.borrow();
                if let Some(slot) = s.slots.get(&id).filter(|slot| !slot.spare) {
                    s.events
                        .stored(&id, &slot.meta.name, event.event, event.seq);
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(_)) => break,
            Err(silent) => {
                let hung = Event::Hung {
                    generation,
                    silent_ms: silent.as_millis() as u64,
                };
                drive(&supervisor, &id, hung).await;
                return;
            }
        }
    }
    let current = supervisor.borrow().slots.get(&id).map(|s| s.generation) == Some(generation);
    if current && !supervisor.borrow().shutdown.decided() {
        let why = backend::why_worker_ended(&supervisor, &id).await;
        drive(&supervisor, &id, ended(&why)).await;
    }
}

/// Connect to a worker that is starting: it binds its socket within
/// milliseconds, so a short retry keeps session start fast, up to the
/// worker-start wait, or until the host saw it exit (the failure's why).
async fn connect_soon(supervisor: &Shared, id: &str) -> Result<(UnixStream, Hello), NoAnswer> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.worker.worker_start_wait);
    let since = crate::clock::mono_ms();
    loop {
        if let Ok(connection) = connect_worker(supervisor, id).await {
            return Ok(connection);
        }
        // A worker that exited will never answer (one that cannot write its
        // record on a full disk exits at once).
        if let Some(exit) = backend::worker_exit(supervisor, id, since) {
            return Err(NoAnswer::Exited(exit));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(NoAnswer::Silent);
        }
        // No event says a socket accepts (its file exists before the
        // worker listens): tried again until the start wait's deadline.
        tokio::time::sleep(Duration::from_millis(WORKER_CONNECT_RETRY_MS)).await;
    }
}

/// Why a starting worker was never reached.
#[derive(Debug, thiserror::Error)]
enum NoAnswer {
    /// The host saw it exit (how, in the host's words).
    #[error("{0}")]
    Exited(String),
    /// It never answered within the worker-start wait.
    #[error("its worker never answered on its socket")]
    Silent,
}

/// The worker's next frame, or `Err(interval)` when a `watchdog` interval
/// passed without one.
async fn next_frame(
    stream: &mut UnixStream,
    watchdog: Option<Duration>,
) -> Result<Result<Response, FrameError>, Duration> {
    match watchdog {
        Some(interval) => tokio::time::timeout(interval, read_frame::<Response, _>(stream))
            .await
            .map_err(|_| interval),
        None => Ok(read_frame::<Response, _>(stream).await),
    }
}

/// Take a worker's report of itself into its slot (work, background jobs,
/// kernel, clients, activity; running, unless an idle stop or a removal
/// owns the state). False when the watcher is stale: the slot is gone or
/// was launched again since.
fn take_report(
    supervisor: &Shared,
    id: &str,
    generation: u64,
    info: &WorkerInfo,
    build: &str,
) -> bool {
    let mut s = supervisor.borrow_mut();
    let Some(slot) = s.slots.get_mut(id) else {
        return false;
    };
    if slot.generation != generation {
        return false;
    }
    let was_in_use = slot.seen().in_use();
    let jobs_before = slot.background;
    slot.work = info.work;
    slot.background = info.background;
    let name = slot.meta.name.clone();
    events::jobs_changed(&s.events, id, &name, jobs_before, info.background);
    let slot = s.slots.get_mut(id).expect("looked up above");
    slot.kernel_pid = info.kernel_pid;
    slot.clients = info.clients;
    slot.bash = info.bash.clone();
    slot.waiting = info.waiting;
    slot.last_active_ms = last_active(slot.last_active_ms, was_in_use, slot.seen(), mono_ms());
    // An idle stop or a removal under way owns the state until it is over.
    if matches!(slot.state, SlotState::IdleStopping | SlotState::Removing) {
        return true;
    }
    let running = SlotState::Running {
        identity: ProcessIdentity {
            pid: info.pid,
            start_time: info.start_time,
        },
        build: build.to_string(),
    };
    s.set_state(id, running);
    true
}

/// Tell a worker's failure: the event stream and the log.
fn tell_failure(supervisor: &Shared, id: &str, why: String, verdict: RestartVerdict) {
    if let Some(slot) = supervisor.borrow_mut().slots.get_mut(id) {
        slot.last_failure = Some((crate::clock::mono_ms(), why.clone()));
    }
    {
        let s = supervisor.borrow();
        if let Some(slot) = s.slots.get(id).filter(|slot| !slot.spare) {
            let failed = EventKind::WorkerFailed {
                why: why.clone(),
                verdict,
            };
            s.events.session(id, &slot.meta.name, failed);
        }
    }
    match verdict {
        RestartVerdict::Restart {
            pause_ms,
            failures_in_window,
        } => tracing::warn!(
            session = id,
            failures = failures_in_window,
            "session {id}: {why}; restarting it in {pause_ms} ms (failure {failures_in_window} in the window)"
        ),
        RestartVerdict::GiveUp { failures_in_window } => tracing::error!(
            session = id,
            failures = failures_in_window,
            "session {id}: {why}; given up after {failures_in_window} failures in the window"
        ),
    }
}

/// Record a give-up: the `given-up` file, and a notice in the transcript
/// once no worker of the session is left.
async fn record_give_up(supervisor: &Shared, id: &str, failures_in_window: u32) {
    let files = supervisor.borrow().files(id);
    let _ = std::fs::write(files.given_up(), format!("{failures_in_window}\n"));
    // A transcript has one writer, its worker: one that survived (it never
    // answered, or outlived its stop) may still write, so the notice is
    // then only logged.
    if !backend::no_worker_left(supervisor, id).await {
        tracing::warn!(
            session = id,
            "session {id}: a worker of it still runs, so the give-up notice is not written to its transcript"
        );
    } else if let Ok(opened) =
        Transcript::open_with(&files.transcript(), OutputBytes::Left, None, &mut |_| {})
    {
        // Damage is shown where it is by every reader.
        let mut transcript = opened.transcript;
        let _ = transcript.append(
            wall_ms(),
            EntryBody::Notice {
                text: format!(
                    "given up: the worker failed {failures_in_window} times in {}; `eukhe restart {id}` starts it afresh",
                    duration_in_words(TM.supervisor.restart_window)
                ),
                restore: None,
                restore_id: None,
            },
        );
    }
}

/// What a starting supervisor does with one session it found.
#[derive(Clone, Copy, Debug)]
enum AtStart {
    /// A live worker serves it: adopted if it answers and runs this build.
    Adopt(ProcessIdentity),
    /// Its kernel lives: work in progress or its record, resumed now.
    Resume,
    /// Its busy evidence is fresh: revived.
    Revive,
}

/// At start: adopt live workers of this build, replace the others, resume
/// sessions whose kernel lives and revive those whose busy evidence is
/// fresh. What each session needs is decided here, before the daemon
/// serves, and each such session is marked starting (a request for it
/// waits for the outcome, and never launches it beside its survivor);
/// the work itself runs beside serving, each session on its own, so a
/// worker that never answers delays no other session and no `ls`.
pub async fn adopt_and_revive(supervisor: &Shared) {
    let plan = plan_start(supervisor).await;
    if !plan.is_empty() {
        let by = tokio::time::Instant::now() + Duration::from_millis(STARTS_SETTLE_MS);
        supervisor.borrow_mut().starts_settle_by = Some(by);
    }
    for (id, step) in plan {
        {
            let mut s = supervisor.borrow_mut();
            let Some(slot) = s.slots.get_mut(&id) else {
                continue;
            };
            if matches!(step, AtStart::Adopt(_)) {
                slot.generation += 1;
            }
            s.set_state(&id, SlotState::Starting);
        }
        let supervisor = supervisor.clone();
        tokio::task::spawn_local(async move {
            match step {
                AtStart::Adopt(identity) => adopt_or_replace(&supervisor, &id, identity).await,
                AtStart::Resume => {
                    tracing::info!(session = id, "resuming session {id}: its kernel lives");
                    events::revived(&supervisor, &id, "its kernel lives");
                    launch(&supervisor, &id).await;
                }
                AtStart::Revive => {
                    tracing::info!(session = id, "reviving session {id} from its busy evidence");
                    events::revived(&supervisor, &id, "its busy evidence is fresh");
                    launch(&supervisor, &id).await;
                }
            }
        });
    }
}

/// Wait until the sessions a starting daemon adopts, resumes or revives
/// are no longer starting, or until their settle time: a first `ls`
/// shows adopted workers with their pids, and a stuck one delays it no
/// longer than that.
pub async fn starts_settled(supervisor: &Shared) {
    let Some(by) = supervisor.borrow().starts_settle_by else {
        return;
    };
    wait_for_change(supervisor, by, |s| {
        !s.slots
            .values()
            .any(|slot| slot.state == SlotState::Starting)
    })
    .await;
    supervisor.borrow_mut().starts_settle_by = None;
}

/// Wait until `done` holds of the supervisor's books, looked at again at
/// each change of a slot's state, or until `deadline`.
pub async fn wait_for_change(
    supervisor: &Shared,
    deadline: tokio::time::Instant,
    mut done: impl FnMut(&Supervisor) -> bool,
) {
    let changed = supervisor.borrow().changed.clone();
    loop {
        // Registered before the books are read, so no change slips between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if done(&supervisor.borrow()) || tokio::time::timeout_at(deadline, notified).await.is_err()
        {
            return;
        }
    }
}

/// Which sessions a starting supervisor adopts, resumes or revives.
async fn plan_start(supervisor: &Shared) -> Vec<(String, AtStart)> {
    let ids: Vec<String> = supervisor
        .borrow()
        .slots
        .iter()
        .filter(|(_, slot)| !matches!(slot.state, SlotState::GivenUp | SlotState::Damaged { .. }))
        .map(|(id, _)| id.clone())
        .collect();
    let evidence = {
        let s = supervisor.borrow();
        s.host.busy_journal().latest()
    };
    let evidence = evidence.unwrap_or_else(|e| {
        tracing::error!("cannot read busy evidence, so no session is revived: {e}");
        Default::default()
    });
    let mut live = backend::live_workers(supervisor).await.unwrap_or_else(|e| {
        tracing::error!("cannot list live workers: {e}");
        Default::default()
    });
    let mut plan = Vec::new();
    for id in ids {
        if let Some(identity) = live.remove(&id) {
            plan.push((id, AtStart::Adopt(identity)));
        } else if backend::kernel_lives(supervisor, &id) {
            // A live kernel is resumable now, however long ago its worker
            // left.
            plan.push((id, AtStart::Resume));
        } else if revival_veto(
            evidence.get(&id).copied(),
            wall_ms(),
            RecordOrigin::OtherProcess,
        )
        .is_none()
        {
            plan.push((id, AtStart::Revive));
        }
    }
    for (id, identity) in live {
        tracing::warn!(
            session = id,
            pid = identity.pid,
            "a live worker serves {id:?}, which is no session of this state directory; left alone"
        );
    }
    plan
}

/// A live worker of `id` found at start (its slot already starting, as
/// launch `generation`): adopted if it answers within the worker answer
/// deadline and runs this build; replaced if it runs another; a failure
/// under the restart budget if it does not answer (stopped by identity
/// before the next launch, never launched beside).
async fn adopt_or_replace(supervisor: &Shared, id: &str, identity: ProcessIdentity) {
    let generation = match supervisor.borrow().slots.get(id) {
        Some(slot) => slot.generation,
        None => return,
    };
    let reachable = connect_worker(supervisor, id).await;
    let build = match &reachable {
        Ok((_, hello)) => hello.build_id.clone(),
        Err(_) => String::new(),
    };
    let worker = LiveWorker {
        build: &build,
        reachable: reachable.is_ok(),
    };
    let verdict = adoption_verdict(build_id(), &worker);
    let unreachable = reachable.err();
    match (verdict, unreachable) {
        (AdoptionVerdict::Adopt, _) => {
            tracing::info!(
                session = id,
                pid = identity.pid,
                "adopted the worker of session {id}"
            );
            watch(supervisor.clone(), id.to_string(), generation).await;
        }
        (AdoptionVerdict::StopAndRelaunch, Some(error)) => {
            tracing::warn!(
                session = id,
                pid = identity.pid,
                "the worker of session {id} (pid {}) is unreachable: {error}",
                identity.pid
            );
            let why = format!(
                "its live worker (pid {}) did not answer within {}",
                identity.pid,
                duration_in_words(TM.worker.worker_answer)
            );
            drive(supervisor, id, Event::Ended { generation, why }).await;
        }
        (AdoptionVerdict::StopAndRelaunch, None) => {
            tracing::info!(
                session = id,
                "the worker of session {id} is another build ({build:?}): replacing it"
            );
            launch(supervisor, id).await;
        }
    }
}
