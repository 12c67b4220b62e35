//! `shutdown --if-idle`: ask every session that has a live process whether
//! it is idle, and stop the daemon with every worker and kernel only when
//! all are (`laws::idle_shutdown`). A session whose worker cannot be asked
//! (a restart pause, given up, resting) answers through its live kernel,
//! by the kernel's own work. The kernels of the sessions stopped end, their
//! snapshot kept: the next request wakes each session as an idle stop does.

use std::time::Duration;

use tokio::net::UnixStream;

use super::backend;
use super::launch::{ask_worker, Shared};
use super::manage::instant_at;
use super::session_core::Drain;
use super::slots::SlotState;
use crate::build_id::build_id;
use crate::clock::mono_ms;
use crate::laws::idle_shutdown::{
    answerer, idle_shutdown_commits, kernel_answer, Answerer, QuiesceAnswer, QuiesceReply,
    ShutdownCommit, WorkerStanding,
};
use crate::laws::timing::{QUIESCE_ANSWER_MS, TM};
use crate::protocol::frame::{read_frame, write_frame};
use crate::protocol::kernel::{FromKernel, JobState, ToKernel, KERNEL_PROTOCOL};
use crate::protocol::message::{Request, Response};

/// The sessions whose worker runs or is starting.
pub(super) fn running_ids(supervisor: &Shared) -> Vec<String> {
    supervisor
        .borrow()
        .slots
        .iter()
        .filter(|(_, slot)| matches!(slot.state, SlotState::Running { .. } | SlotState::Starting))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Who answers for each session, as `laws::idle_shutdown::answerer` says.
fn answerers(supervisor: &Shared) -> Vec<(String, Answerer)> {
    let standings: Vec<(String, WorkerStanding)> = supervisor
        .borrow()
        .slots
        .iter()
        .map(|(id, slot)| {
            let standing = match slot.state {
                SlotState::Running { .. } | SlotState::Starting => WorkerStanding::Up,
                SlotState::IdleStopping | SlotState::Removing => WorkerStanding::Stopping,
                _ => WorkerStanding::Gone,
            };
            (id.clone(), standing)
        })
        .collect();
    standings
        .into_iter()
        .map(|(id, standing)| {
            let kernel_lives = backend::kernel_lives(supervisor, &id);
            (id, answerer(standing, kernel_lives))
        })
        .collect()
}

/// The idle shutdown: `stop_serving` is called once it commits.
pub(super) async fn shutdown_if_idle(supervisor: &Shared, stop_serving: fn(&Shared)) -> Response {
    let asked = answerers(supervisor);
    let asked_at = mono_ms();
    // Every session is asked at once; each answer is timed when it comes.
    let replies = ask_all(supervisor, &asked).await;
    let quiesced = |reply: &QuiesceReply| {
        idle_shutdown_commits(asked_at, std::slice::from_ref(reply)) == ShutdownCommit::StopWorkers
    };
    let busy: Vec<String> = asked
        .iter()
        .zip(&replies)
        .filter(|(_, reply)| !quiesced(reply))
        .map(|((id, answerer), reply)| busy_words(supervisor, id, *answerer, reply))
        .collect();
    let workers: Vec<String> = asked
        .iter()
        .filter(|(_, answerer)| *answerer == Answerer::Worker)
        .map(|(id, _)| id.clone())
        .collect();
    match idle_shutdown_commits(asked_at, &replies) {
        ShutdownCommit::StopWorkers => {
            stop_serving(supervisor);
            let drained =
                tokio::time::Instant::now() + Duration::from_millis(TM.supervisor.supervisor_drain);
            // Kernels no worker drives stop beside the workers.
            let lone: Vec<String> = asked
                .iter()
                .filter(|(_, answerer)| *answerer == Answerer::Kernel)
                .map(|(id, _)| id.clone())
                .collect();
            let mut kernel_stops = stop_kernels(supervisor, &lone);
            let stopped = stop_all(supervisor, &workers, Request::IdleStop).await;
            // A worker not known gone (it refused the stop, or was still
            // starting) keeps its kernel. One that stopped ended its own
            // (one of an earlier build may not have: it is ended here).
            let (gone, left): (Vec<String>, Vec<String>) = workers
                .iter()
                .cloned()
                .partition(|id| stopped.iter().any(|(done, gone)| done == id && *gone));
            kernel_stops.extend(stop_kernels(supervisor, &gone));
            // Within the same drain as the workers' stops.
            let _ = tokio::time::timeout_at(drained, async {
                for stop in kernel_stops {
                    let _ = stop.await;
                }
            })
            .await;
            Response::Shutdown {
                stopped: true,
                message: stopped_words(supervisor, &left),
            }
        }
        ShutdownCommit::ReopenAndAnswerBusy => {
            ask_each(supervisor, &workers, Request::Release, QUIESCE_ANSWER_MS).await;
            Response::Shutdown {
                stopped: false,
                message: format!("the daemon is busy ({}): it keeps serving", busy.join("; ")),
            }
        }
    }
}

/// Stop the kernels of `ids` that live, all at once (every process of
/// each session ends).
fn stop_kernels(supervisor: &Shared, ids: &[String]) -> Vec<tokio::task::JoinHandle<()>> {
    ids.iter()
        .map(|id| {
            let (supervisor, id) = (supervisor.clone(), id.clone());
            tokio::task::spawn_local(
                async move { backend::stop_lone_kernel(&supervisor, &id).await },
            )
        })
        .collect()
}

/// Ask each session's answerer at once, within `QUIESCE_ANSWER_MS`; in the
/// order of `asked`.
async fn ask_all(supervisor: &Shared, asked: &[(String, Answerer)]) -> Vec<QuiesceReply> {
    let asks: Vec<_> = asked
        .iter()
        .map(|(id, answerer)| {
            let (supervisor, id, answerer) = (supervisor.clone(), id.clone(), *answerer);
            tokio::task::spawn_local(async move {
                let answer = tokio::time::timeout(
                    Duration::from_millis(QUIESCE_ANSWER_MS),
                    answer_of(&supervisor, &id, answerer),
                )
                .await;
                match answer {
                    Ok(Some(answer)) => QuiesceReply::Answered {
                        answer,
                        at_ms: mono_ms(),
                    },
                    _ => QuiesceReply::Silent,
                }
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(asks.len());
    for ask in asks {
        replies.push(ask.await.unwrap_or(QuiesceReply::Silent));
    }
    replies
}

/// One session's answer (none: no answer came).
async fn answer_of(supervisor: &Shared, id: &str, answerer: Answerer) -> Option<QuiesceAnswer> {
    match answerer {
        Answerer::Worker => match ask_worker(supervisor, id, Request::Quiesce).await {
            Ok(Response::Quiesce { answer }) => Some(answer),
            _ => None,
        },
        Answerer::Kernel => {
            let (running_jobs, background) = kernel_work(supervisor, id).await?;
            Some(kernel_answer(running_jobs, background))
        }
        Answerer::Nobody => Some(QuiesceAnswer::Quiesced),
        Answerer::Busy => Some(QuiesceAnswer::Busy),
    }
}

/// What the kernel of `id` says of its work in its hello: its running
/// jobs and the processes runs left running. Greeting a kernel takes
/// nothing from it (a restore stays offered to the next worker).
async fn kernel_work(supervisor: &Shared, id: &str) -> Option<(usize, u32)> {
    let socket = supervisor.borrow().paths.kernel_socket(id);
    let mut stream = UnixStream::connect(socket).await.ok()?;
    let hello = ToKernel::Hello {
        protocol: KERNEL_PROTOCOL,
        build_id: build_id().to_string(),
    };
    write_frame(&mut stream, &hello).await.ok()?;
    match read_frame::<FromKernel, _>(&mut stream).await.ok()? {
        FromKernel::Hello {
            jobs, background, ..
        } => {
            let running = jobs
                .values()
                .filter(|job| matches!(job, JobState::Running))
                .count();
            Some((running, background))
        }
        _ => None,
    }
}

/// Why one session kept the daemon serving, in words.
fn busy_words(supervisor: &Shared, id: &str, answerer: Answerer, reply: &QuiesceReply) -> String {
    let name = supervisor
        .borrow()
        .slots
        .get(id)
        .map(|slot| slot.meta.name.clone())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| id.to_string());
    let why = match (answerer, reply) {
        (Answerer::Busy, _) => "it is being stopped",
        (Answerer::Kernel, QuiesceReply::Silent) => "its kernel did not answer",
        (Answerer::Kernel, _) => "its kernel has work and no worker",
        (_, QuiesceReply::Silent) => "its worker did not answer",
        _ => "it has work",
    };
    format!("session {name}: {why}")
}

/// What the shutdown stopped, and what it left running and why.
fn stopped_words(supervisor: &Shared, left: &[String]) -> String {
    if left.is_empty() {
        return "the daemon was idle and stopped, with every session's worker and kernel".into();
    }
    let names: Vec<String> = left
        .iter()
        .map(|id| {
            let s = supervisor.borrow();
            let name = s.slots.get(id).map(|slot| slot.meta.name.clone());
            name.filter(|name| !name.is_empty())
                .unwrap_or_else(|| id.clone())
        })
        .collect();
    format!(
        "the daemon was idle and stopped; left running: the worker and kernel of {} (work came in after its idle answer; the next daemon adopts it)",
        names.join(", ")
    )
}

/// Send `request` to each worker at once, each on its own connection; a
/// reply is kept with the monotonic time it arrived, if it came within
/// `within_ms`.
pub(super) async fn ask_each(
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
/// Returns, for each worker that was running, whether it is gone.
pub(super) async fn stop_all(
    supervisor: &Shared,
    ids: &[String],
    request: Request,
) -> Vec<(String, bool)> {
    let running: Vec<(String, crate::laws::adoption::ProcessIdentity)> = ids
        .iter()
        .filter_map(
            |id| match supervisor.borrow().slots.get(id).map(|s| s.state.clone()) {
                Some(SlotState::Running { identity, .. }) => Some((id.clone(), identity)),
                _ => None,
            },
        )
        .collect();
    // Each stop's escalation fits in the supervisor drain
    // (`timeouts_ordered`); the drain bounds them all, so a hung host call
    // cannot hold the shutdown's answer past the launcher's wait.
    let mut drain = Drain::begin(
        running.iter().map(|(id, _)| id.clone()),
        mono_ms(),
        TM.supervisor.supervisor_drain,
    );
    let (ended, mut ends) = tokio::sync::mpsc::unbounded_channel();
    for (id, identity) in running {
        let (supervisor, request, ended) = (supervisor.clone(), request.clone(), ended.clone());
        tokio::task::spawn_local(async move {
            let gone = backend::stop_worker(&supervisor, &id, identity, request).await;
            let _ = ended.send((id, gone));
        });
    }
    drop(ended);
    while !drain.over(mono_ms()) {
        tokio::select! {
            end = ends.recv() => match end {
                Some((id, gone)) => drain.stop_ended(&id, gone),
                None => break,
            },
            _ = tokio::time::sleep_until(instant_at(drain.poll_timeout())) => {}
        }
    }
    drain.outcomes()
}
