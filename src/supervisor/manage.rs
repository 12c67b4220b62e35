//! Managing sessions as a person does: remove (`eukhe rm`), rename, and
//! the idle stop that gives back an unused session's processes. Each
//! decision is a call into `laws` (`removal`, `idle_stop`, and the run gate
//! of `idle_shutdown` that both stops go through).

use super::SupervisorError;
use std::time::Duration;

use super::backend;
use super::launch::{ask_worker, launch, wait_for_change, Shared};
use super::session_core::{IdleStops, Settle, SettleSees, SettleStep, Sighting};
use super::slots::SlotState;
use crate::clock::{mono_ms, wall_ms};
use crate::laws::idle_shutdown::{
    idle_shutdown_commits, QuiesceAnswer, QuiesceReply, ShutdownCommit,
};
use crate::laws::removal::{removal_verdict, RemovalVerdict};
use crate::laws::timing::{QUIESCE_ANSWER_MS, TM};
use crate::laws::work::WorkSet;
use crate::protocol::message::{Request, Response};
use crate::session::removed::{RemovalRecord, Removals};
use crate::session::store::{normalize_name, validate_name, write_json};

/// A request naming a session, counted from the moment the supervisor
/// takes it (once the session is not stopping) until it is handed to the
/// worker: no idle stop begins meanwhile, and a removal waits for it to be
/// handed before it asks the worker whether it is busy.
pub struct InFlight {
    supervisor: Shared,
    id: String,
}

impl InFlight {
    /// Count a request naming `id` (it also makes the session active now).
    pub fn begin(supervisor: &Shared, id: &str) -> InFlight {
        if let Some(slot) = supervisor.borrow_mut().slots.get_mut(id) {
            slot.requests_in_flight += 1;
            slot.last_active_ms = slot.last_active_ms.max(mono_ms());
        }
        InFlight {
            supervisor: supervisor.clone(),
            id: id.to_string(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Never held across a borrow of the books; `try_` all the same, so
        // a drop can never panic.
        if let Ok(mut s) = self.supervisor.try_borrow_mut() {
            if let Some(slot) = s.slots.get_mut(&self.id) {
                slot.requests_in_flight = slot.requests_in_flight.saturating_sub(1);
                // The idle time counts from the end of the last request.
                slot.last_active_ms = slot.last_active_ms.max(mono_ms());
            }
            s.changed.notify_waiters();
        }
    }
}

/// Wait while the session `id` is being stopped for idleness or removed:
/// a request that arrives meanwhile is answered once that is over (an idle
/// stop's then wakes the session; a removal's finds no session), or
/// refused at `session_settle` (`session_core::Settle` decides).
pub async fn settle(supervisor: &Shared, id: &str) -> Result<(), SupervisorError> {
    let mut wait = Settle::new(mono_ms(), TM.supervisor.session_settle);
    let changed = supervisor.borrow().changed.clone();
    loop {
        // Registered before the state is read, so no change slips between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let sees = match supervisor.borrow().slots.get(id).map(|s| &s.state) {
            None => SettleSees::Gone,
            Some(SlotState::IdleStopping | SlotState::Removing) => SettleSees::Stopping,
            Some(_) => SettleSees::Settled,
        };
        match wait.step(sees, mono_ms()) {
            SettleStep::Proceed => return Ok(()),
            SettleStep::Gone => return Err(SupervisorError::Removed { id: id.to_string() }),
            SettleStep::TimedOut => {
                return Err(SupervisorError::StopTooLong { id: id.to_string() })
            }
            SettleStep::Wait { first } => {
                if first {
                    tracing::info!(
                        session = id,
                        "a request for session {id} waits for its stop to finish"
                    );
                }
                let _ = tokio::time::timeout_at(instant_at(wait.poll_timeout()), notified).await;
            }
        }
    }
}

/// The tokio instant of the monotonic millisecond `at_ms`.
pub(super) fn instant_at(at_ms: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_millis(at_ms.saturating_sub(mono_ms()))
}

/// Wait until every request naming `id` that the supervisor took before
/// the session began to stop has been handed to its worker (the worker
/// then counts it in its work or its clients), within `session_settle`.
async fn wait_handed(supervisor: &Shared, id: &str) {
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(TM.supervisor.session_settle);
    wait_for_change(supervisor, deadline, |s| {
        s.slots.get(id).map_or(0, |slot| slot.requests_in_flight) == 0
    })
    .await;
}

/// Stop each session due for an idle stop (the gated stop runs on its
/// own; requests wait for it). The core (`session_core::IdleStops`) says
/// which are due and when the next falls due; between looks this sleeps
/// until then or until a session changes, and ends with the shutdown.
pub async fn idle_stop_loop(supervisor: Shared) {
    let (changed, mut shutdown, setting) = {
        let s = supervisor.borrow();
        (
            s.changed.clone(),
            s.shutdown.subscribe(),
            s.config.idle_stop_ms,
        )
    };
    let mut books = IdleStops::new(setting);
    loop {
        // Registered before the sessions are read, so no change slips
        // between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if supervisor.borrow().shutdown.decided() {
            return;
        }
        let now = mono_ms();
        let due = {
            let mut s = supervisor.borrow_mut();
            let running: Vec<Sighting> = s
                .slots
                .iter()
                // A spare is idle by nature; it is there to be claimed.
                .filter(|(_, slot)| !slot.spare && matches!(slot.state, SlotState::Running { .. }))
                .map(|(id, slot)| Sighting {
                    id: id.clone(),
                    seen: slot.seen(),
                    last_active_ms: slot.last_active_ms,
                })
                .collect();
            let due = books.look(&running, now);
            // Marked in the same step as the decision: a request that comes
            // after it waits for the stop (`settle`), one that came before
            // it kept the session in use.
            due.into_iter()
                .map(|stop| {
                    let previous = s.slots[&stop.id].state.clone();
                    s.set_state(&stop.id, SlotState::IdleStopping);
                    (stop, previous)
                })
                .collect::<Vec<_>>()
        };
        for (stop, previous) in due {
            let task = idle_stop(supervisor.clone(), stop.id, previous, stop.idle_ms);
            tokio::task::spawn_local(task);
        }
        let next = books.poll_timeout();
        tokio::select! {
            _ = &mut notified => {}
            _ = shutdown.recv() => return,
            _ = sleep_until_ms(next) => {}
        }
    }
}

/// Until the monotonic millisecond `at_ms` (never: `None`).
async fn sleep_until_ms(at_ms: Option<u64>) {
    match at_ms {
        Some(at_ms) => tokio::time::sleep_until(instant_at(at_ms)).await,
        None => std::future::pending().await,
    }
}

/// Ask the worker of `id` to quiesce for an idle stop; stop it with its
/// kernel only if it did (no work, no client), else reopen its gate.
async fn idle_stop(supervisor: Shared, id: String, previous: SlotState, idle_ms: u64) {
    let SlotState::Running { identity, .. } = previous else {
        return;
    };
    let asked_at = mono_ms();
    let reply = quiesce(&supervisor, &id, Request::QuiesceIdle).await;
    match idle_shutdown_commits(asked_at, &[reply]) {
        ShutdownCommit::StopWorkers => {
            {
                let mut s = supervisor.borrow_mut();
                let Some(slot) = s.slots.get_mut(&id) else {
                    return;
                };
                // The watcher is stale from here: the worker's end is no
                // failure.
                slot.generation += 1;
            }
            backend::stop_worker(&supervisor, &id, identity, Request::StopWithKernel).await;
            backend::stop_lone_kernel(&supervisor, &id).await;
            tracing::info!(
                session = id,
                "session {id} was left alone for {idle_ms} ms: its worker and kernel stopped in {} ms (it is saved; the next request wakes it)",
                mono_ms().saturating_sub(asked_at)
            );
            let mut s = supervisor.borrow_mut();
            if let Some(slot) = s.slots.get_mut(&id) {
                slot.work = WorkSet::EMPTY;
                slot.background = 0;
                slot.kernel_pid = None;
                slot.clients = 0;
                slot.last_active_ms = mono_ms();
            }
            s.set_state(&id, SlotState::Saved);
        }
        ShutdownCommit::ReopenAndAnswerBusy => {
            release(&supervisor, &id).await;
            let mut s = supervisor.borrow_mut();
            if let Some(slot) = s.slots.get_mut(&id) {
                // In use after all (a client, work): the clock starts again.
                slot.last_active_ms = mono_ms();
                if slot.state == SlotState::IdleStopping {
                    s.set_state(&id, previous);
                }
            }
        }
    }
}

/// Ask the worker of `id` to quiesce (`request`: for an idle shutdown or
/// an idle stop), within `QUIESCE_ANSWER_MS`; the answer is timed when it
/// comes.
async fn quiesce(supervisor: &Shared, id: &str, request: Request) -> QuiesceReply {
    let answer = tokio::time::timeout(
        Duration::from_millis(QUIESCE_ANSWER_MS),
        ask_worker(supervisor, id, request),
    )
    .await;
    match answer {
        Ok(Ok(Response::Quiesce { answer })) => QuiesceReply::Answered {
            answer,
            at_ms: mono_ms(),
        },
        _ => QuiesceReply::Silent,
    }
}

/// The stop did not go ahead: reopen the worker's run gate.
async fn release(supervisor: &Shared, id: &str) {
    let _ = tokio::time::timeout(
        Duration::from_millis(QUIESCE_ANSWER_MS),
        ask_worker(supervisor, id, Request::Release),
    )
    .await;
}

/// The session's work in words, for a refusal.
fn work_words(work: WorkSet) -> String {
    let kinds: Vec<String> = work
        .kinds()
        .into_iter()
        .filter_map(|kind| serde_json::to_value(kind).ok())
        .filter_map(|value| value.as_str().map(|s| s.replace('_', " ")))
        .collect();
    if kinds.is_empty() {
        "it has work".into()
    } else {
        kinds.join(", ")
    }
}

/// `eukhe rm`: remove the session `reference` names, as
/// `laws::removal::removal_verdict` says.
pub async fn remove(supervisor: &Shared, reference: &str, force: bool) -> Response {
    let (id, state, name) = match removable(supervisor, reference).await {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    // From here requests naming the session wait (`settle`); those taken
    // before are handed first, so the worker's answer counts their work.
    supervisor.borrow_mut().set_state(&id, SlotState::Removing);
    wait_handed(supervisor, &id).await;
    let asked_at = mono_ms();
    let running = match state {
        SlotState::Running { identity, .. } => Some(identity),
        _ => None,
    };
    let reply = removal_reply(supervisor, &id, running.is_some(), asked_at).await;
    let verdict = removal_verdict(asked_at, reply, force);
    if verdict == RemovalVerdict::RefuseBusy {
        abandon_removal(supervisor, &id, running.is_some(), state).await;
        let why = busy_reason(supervisor, &id, reply, running.is_some());
        return error(format!(
            "session {name} ({id}) is busy ({why}): `eukhe rm --force {reference}` cancels its work and removes it"
        ));
    }
    if let Err(message) = record_removal(supervisor, &id, &name) {
        // Nothing was stopped yet: the session stays as it was.
        abandon_removal(supervisor, &id, running.is_some(), state).await;
        return error(format!("session {id} was not removed: {message}"));
    }
    if verdict == RemovalVerdict::CancelWorkAndRemove {
        tracing::warn!(
            session = id,
            "removing session {id} with its work (--force): every process of the session ends"
        );
    }
    let outcome = end_and_delete(supervisor, &id, running).await;
    {
        let mut s = supervisor.borrow_mut();
        s.slots.remove(&id);
        s.changed.notify_waiters();
    }
    match outcome {
        Ok(()) => {
            tracing::info!(session = id, "removed session {name} ({id})");
            Response::Removed { id, name }
        }
        Err(message) => error(format!(
            "session {id} is removed for good, but {message}; the next daemon start finishes the removal"
        )),
    }
}

/// A removal that does not go ahead: the worker (if it `runs`) is released
/// from its quiesce, and the session is as it was (`state`).
async fn abandon_removal(supervisor: &Shared, id: &str, runs: bool, state: SlotState) {
    if runs {
        release(supervisor, id).await;
    }
    reinstate(supervisor, id, state);
}

/// Why a removal was refused as busy, in words.
fn busy_reason(supervisor: &Shared, id: &str, reply: Option<QuiesceReply>, runs: bool) -> String {
    match reply {
        Some(QuiesceReply::Silent) => "its worker did not answer".to_string(),
        _ if !runs => "its kernel is still running".to_string(),
        _ => {
            let work = supervisor.borrow().slots.get(id).map(|s| s.work);
            work_words(work.unwrap_or_default())
        }
    }
}

/// Whether session `id` is busy, for its removal: its worker's answer to a
/// quiesce question if it `runs`; a kernel alive without a worker (given
/// up, or its worker would not start) cannot be asked, so it counts as
/// busy; `None` when nothing of it runs.
async fn removal_reply(
    supervisor: &Shared,
    id: &str,
    runs: bool,
    asked_at: u64,
) -> Option<QuiesceReply> {
    if runs {
        Some(quiesce(supervisor, id, Request::Quiesce).await)
    } else if backend::kernel_lives(supervisor, id) {
        Some(QuiesceReply::Answered {
            answer: QuiesceAnswer::Busy,
            at_ms: asked_at,
        })
    } else {
        None
    }
}

/// The session `reference` names, once it may be asked about a removal:
/// settled, a worker brought up over a kernel that runs without one, and
/// not already being stopped or removed. Its id, state and name; or the
/// refusal.
async fn removable(
    supervisor: &Shared,
    reference: &str,
) -> Result<(String, SlotState, String), Response> {
    let resolved = supervisor.borrow().resolve(reference);
    let id = resolved.map_err(error)?;
    settle(supervisor, &id).await.map_err(error)?;
    let state = supervisor.borrow().slots.get(&id).map(|s| s.state.clone());
    let resting_with_kernel =
        state == Some(SlotState::Saved) && backend::kernel_lives(supervisor, &id);
    if resting_with_kernel {
        // A kernel without a worker may be running work: a worker over it
        // can say (and its gate can hold new runs back).
        launch(supervisor, &id).await;
    }
    if matches!(state, Some(SlotState::Starting | SlotState::Restarting)) || resting_with_kernel {
        let _ = super::routing::wait_running(supervisor, &id).await;
    }
    let (state, name) = match supervisor.borrow().slots.get(&id) {
        Some(slot) => (slot.state.clone(), slot.meta.name.clone()),
        None => {
            return Err(error(format!(
                "no session {reference:?}: `eukhe ls` lists them"
            )))
        }
    };
    if matches!(state, SlotState::Removing | SlotState::IdleStopping) {
        return Err(error(format!(
            "session {name} ({id}) is being stopped or removed already"
        )));
    }
    Ok((id, state, name))
}

/// Record the removal of `id` for good (`session::removed`): from here it
/// is never listed, launched or revived again, and its watcher is stale
/// (the worker's end is no failure).
fn record_removal(supervisor: &Shared, id: &str, name: &str) -> Result<(), SupervisorError> {
    let removals = Removals::new(&supervisor.borrow().paths.state);
    let record = RemovalRecord {
        session: id.to_string(),
        name: name.to_string(),
        at_ms: wall_ms(),
    };
    removals.record(&record)?;
    let mut s = supervisor.borrow_mut();
    s.removed.insert(id.to_string());
    if let Some(slot) = s.slots.get_mut(id) {
        slot.generation += 1;
    }
    Ok(())
}

/// A removal that did not go ahead: the session is as it was, unless
/// something else (a failure of its worker) changed it meanwhile.
fn reinstate(supervisor: &Shared, id: &str, state: SlotState) {
    let mut s = supervisor.borrow_mut();
    if s.slots.get(id).map(|slot| &slot.state) == Some(&SlotState::Removing) {
        s.set_state(id, state);
    }
}

/// End every process of session `id` (its worker, if `worker` runs, is
/// asked to stop with its kernel) and delete its directory and sockets.
async fn end_and_delete(
    supervisor: &Shared,
    id: &str,
    worker: Option<crate::laws::adoption::ProcessIdentity>,
) -> Result<(), SupervisorError> {
    let worker = match worker {
        Some(identity) => Some(identity),
        None => backend::surviving_worker(supervisor, id).await,
    };
    if let Some(identity) = worker {
        backend::stop_worker(supervisor, id, identity, Request::StopWithKernel).await;
    }
    backend::stop_lone_kernel(supervisor, id).await;
    backend::forget_session(supervisor, id).await?;
    if let Some(left) = backend::processes_left(supervisor, id).await {
        // Its directory holds the records that find those processes again.
        return Err(SupervisorError::ProcessesLeft(left));
    }
    let (paths, dir) = {
        let s = supervisor.borrow();
        (s.paths.clone(), s.files(id).dir)
    };
    Removals::new(&paths.state).delete_dir(id, &dir)?;
    for socket in [paths.worker_socket(id), paths.kernel_socket(id)] {
        let _ = std::fs::remove_file(socket);
    }
    Ok(())
}

/// At start, before adoption and revival: finish removals cut short. A
/// removed session whose directory is still there (or, under systemd,
/// whose units still run) has its processes ended and its directory
/// deleted; nothing of it is adopted, resumed or revived.
pub async fn finish_removals(supervisor: &Shared) {
    let (removed, paths) = {
        let s = supervisor.borrow();
        (s.removed.clone(), s.paths.clone())
    };
    if removed.is_empty() {
        return;
    }
    let removals = Removals::new(&paths.state);
    for problem in removals.finish_cut_short() {
        tracing::warn!("{problem}");
    }
    let mut left: Vec<String> = removed
        .iter()
        .filter(|id| paths.session_dir(id).exists())
        .cloned()
        .collect();
    for id in backend::sessions_running(supervisor).await {
        if removed.contains(&id) && !left.contains(&id) {
            left.push(id);
        }
    }
    for id in left {
        tracing::info!(session = id, "finishing the removal of session {id}");
        if let Err(e) = end_and_delete(supervisor, &id, None).await {
            tracing::error!(session = id, "session {id} was removed, but {e}");
        }
    }
}

/// `eukhe rename`: the session `reference` names is called `name` from
/// now on (its id never changes).
pub fn rename(supervisor: &Shared, reference: &str, name: &str) -> Response {
    let resolved = supervisor.borrow().resolve(reference);
    let id = match resolved {
        Ok(id) => id,
        Err(message) => return error(message),
    };
    let normalized = normalize_name(name);
    let name = normalized.as_str();
    if let Err(message) = validate_name(name) {
        return error(message);
    }
    let mut s = supervisor.borrow_mut();
    if let Some(other) = s
        .slots
        .values()
        .find(|slot| slot.meta.id != id && slot.meta.name == name)
    {
        return error(format!(
            "the name {name:?} is taken by session {}",
            other.meta.id
        ));
    }
    if name != id && s.slots.contains_key(name) {
        return error(format!(
            "{name:?} is another session's id: a name may not be one"
        ));
    }
    let files = s.files(&id);
    let Some(slot) = s.slots.get_mut(&id) else {
        return error(format!("no session {id}"));
    };
    if slot.state == SlotState::Removing {
        return error(format!("session {id} is being removed"));
    }
    let mut meta = slot.meta.clone();
    meta.name = name.to_string();
    if let Err(message) = write_json(&files.meta(), &meta) {
        return error(format!("session {id} was not renamed: {message}"));
    }
    tracing::info!(
        session = id,
        "session {id} renamed from {:?} to {name:?}",
        slot.meta.name
    );
    slot.meta = meta;
    Response::Ok
}

fn error(message: impl Into<String>) -> Response {
    Response::Error {
        message: message.into(),
    }
}
