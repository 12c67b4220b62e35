//! Handing a session request and its client to the session's worker:
//! waiting until the worker runs (launching a resting one), handing the
//! client's connection over (`host::handoff`), or, to a worker of another
//! build that cannot take it, forwarding the request and splicing the two
//! connections.

use super::SupervisorError;
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::net::UnixStream;

use super::backend;
use super::launch::{connect_worker, greet_worker, launch, worker_hello, Shared};
use super::routing::error;
use super::slots::SlotState;
use crate::build_id::build_id;
use crate::host::handoff;
use crate::host::process::is_alive;
use crate::laws::timing::{duration_in_words, TM};
use crate::protocol::hello::Capability;
use crate::protocol::message::{Request, SessionRequest};
use crate::protocol::{write_frame, Hello};

/// Wait until the session's worker is under supervision.
pub(super) async fn wait_running(supervisor: &Shared, id: &str) -> Result<(), SupervisorError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.worker.worker_start_wait);
    let changed = supervisor.borrow().changed.clone();
    loop {
        // Registered before the state is read, so no change slips between.
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let state = supervisor.borrow().slots.get(id).map(|s| s.state.clone());
        // A failure while this client waited says why it waited in vain.
        let because = || {
            let since = crate::clock::mono_ms().saturating_sub(TM.worker.worker_start_wait);
            let s = supervisor.borrow();
            let failure = s.slots.get(id).and_then(|slot| slot.last_failure.as_ref());
            failure
                .filter(|(at, _)| *at >= since)
                .map(|(_, why)| format!(" (the last attempt: {why})"))
                .unwrap_or_default()
        };
        let id = id.to_string();
        match state {
            Some(SlotState::Running { .. }) => return Ok(()),
            Some(SlotState::GivenUp) => {
                let because = because();
                return Err(SupervisorError::GivenUp { id, because });
            }
            Some(SlotState::Damaged { problem }) => {
                return Err(SupervisorError::Damaged { id, problem })
            }
            None => return Err(SupervisorError::Vanished { id }),
            _ if tokio::time::Instant::now() >= deadline => {
                let because = because();
                return Err(SupervisorError::NotStarted { id, because });
            }
            _ => {
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
    }
}

/// How a request reached the running worker.
pub(super) enum Reached {
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
            backend::wait_gone(supervisor, id, identity, TM.supervisor.child_drain).await;
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
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(TM.worker.worker_start_wait);
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

/// Reach the worker of `id` with `request` and its `client`, launched first
/// if the session was resting (`state`); why not, for a session given up
/// or damaged, or one whose worker does not come up.
pub(super) async fn running_worker(
    supervisor: &Shared,
    id: &str,
    state: Option<SlotState>,
    client: &UnixStream,
    request: &SessionRequest,
    zero_runs: bool,
) -> Result<Reached, SupervisorError> {
    match &state {
        Some(SlotState::GivenUp) => {
            return Err(SupervisorError::GivenUp {
                id: id.into(),
                because: String::new(),
            })
        }
        Some(SlotState::Damaged { problem }) => {
            return Err(SupervisorError::Damaged {
                id: id.into(),
                problem: problem.clone(),
            })
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
    let hung_ms = supervisor.borrow().config.worker_watchdog_ms
        + TM.supervisor.kill_route
        + TM.supervisor.child_drain;
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
pub(super) async fn hand_over(
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
