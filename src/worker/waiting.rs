//! Which terminal runs wait for input, as the kernel tells
//! (`FromKernel::Waiting`, decided by `laws::waiting`): kept per job, told
//! to the supervisor (`ls`: the worker's info) and to the event stream
//! (`events`, `top`). Only a change is told; a job's end clears it.

use std::collections::BTreeSet;

use crate::clock::wall_ms;
use crate::protocol::event::EventKind;
use crate::protocol::message::Response;
use crate::worker::core::JobKind;
use crate::worker::state::Worker;

/// The jobs that wait for input now (kept in the worker's `Clients`: who
/// hears of it is theirs).
#[derive(Debug, Default)]
pub struct Waiting {
    jobs: BTreeSet<String>,
}

impl Waiting {
    /// Whether any job waits for input.
    pub fn any(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Whether `job` waits for input now.
    pub fn has(&self, job: &str) -> bool {
        self.jobs.contains(job)
    }

    /// Record `job`'s state; whether it changed.
    fn set(&mut self, job: &str, waiting: bool) -> bool {
        match waiting {
            true => self.jobs.insert(job.to_string()),
            false => self.jobs.remove(job),
        }
    }
}

/// The kernel says whether terminal job `job` waits for input: record it,
/// and on a change tell the supervisor and the event stream.
pub fn waiting_changed(worker: &mut Worker, job: &str, waiting: bool) {
    let kind = worker.core.job_kind(job);
    // A word that crossed the job's end (told on another channel than
    // the end) is stale: a job no longer followed waits for nothing.
    if waiting && kind.is_none() {
        return;
    }
    if !worker.clients.waiting.set(job, waiting) {
        return;
    }
    worker.screens.set_waiting(job, waiting);
    tracing::debug!(job, waiting, "{job} waiting for input: {waiting}");
    let number = match kind {
        Some(JobKind::Run { input, .. }) => Some((input, false)),
        Some(JobKind::Bash { number, .. }) => Some((number, true)),
        None => None,
    };
    if let Some((input, bash)) = number {
        let kind = match waiting {
            true => EventKind::WaitingForInput { input, bash },
            false => EventKind::InputTaken { input, bash },
        };
        worker.tell_event(wall_ms(), kind);
    }
    let info = worker.info();
    worker.clients.to_supervisor(Response::Worker(info));
}
