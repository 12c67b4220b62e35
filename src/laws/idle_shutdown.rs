//! Idle shutdown: a daemon is replaced or shut down "if idle" only when no
//! worker has work, and never by aborting a run.
//!
//! Model: `bend/launcher.bend`. Law: `idle_shutdown_never_aborts`.
//!
//! Worker side ([`run_gate_step`]): the run gate admits new runs while open.
//! Asked to quiesce, an idle worker (no work) closes its gate and answers
//! quiesced; a busy one answers busy and leaves the gate as it was. A
//! quiesced gate reopens on release, or by itself once `QUIESCE_HOLD_MS`
//! have fully passed since it closed (strictly after the hold) when neither
//! a stop nor a release came. A stop closes it for good.
//!
//! Supervisor side ([`idle_shutdown_commits`]): stop the workers only when
//! every worker answered quiesced within `QUIESCE_ANSWER_MS` of the question;
//! otherwise reopen every gate and answer busy. The client never decides.

use serde::{Deserialize, Serialize};

use super::timing::{QUIESCE_ANSWER_MS, QUIESCE_HOLD_MS};
use super::work::{session_work, Activity, WorkKind, WorkSet};

/// A worker's run gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunGate {
    /// New runs start.
    Open,
    /// Closed by a quiesce at `since_ms`; reopens after the hold.
    Quiesced {
        /// When it closed (monotonic milliseconds).
        since_ms: u64,
    },
    /// Closed for good: the worker is stopping.
    Stopping,
}

/// Something that happens at a worker's run gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateEvent {
    /// The supervisor asks the worker to quiesce; `work` is its work now.
    Quiesce {
        /// The worker's work now.
        work: WorkSet,
    },
    /// The supervisor reopens the gate (the shutdown did not commit).
    Release,
    /// The supervisor stops the worker (any stop: it closes the gate).
    Stop,
    /// The idle shutdown's stop. The worker enforces the shutdown's
    /// deadline itself: only a gate still quiesced (its hold not passed, so
    /// no run or user bash was admitted since its idle answer) or already
    /// stopping takes it; an open gate refuses it and the worker keeps
    /// serving.
    IdleStop,
    /// A run wants to start.
    RunRequest,
}

/// The worker's answer to a quiesce request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuiesceAnswer {
    /// No work and the gate is closed: the shutdown may go ahead.
    Quiesced,
    /// Work is in hand: the shutdown must not stop this worker.
    Busy,
}

/// What a gate event produces besides the new gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateOutput {
    /// The answer to a quiesce request.
    Answer(QuiesceAnswer),
    /// Whether a run request was admitted.
    Run {
        /// Whether it may start.
        admitted: bool,
    },
    /// Whether an idle shutdown's stop was taken.
    IdleStop {
        /// Whether the worker stops.
        taken: bool,
    },
    /// Nothing to report.
    Done,
}

/// The gate as it stands at `now_ms`: a quiesced gate whose hold ran out
/// is open again.
pub fn gate_at(gate: RunGate, now_ms: u64) -> RunGate {
    match gate {
        // Strictly after the hold: at its last millisecond the gate is still
        // closed, so a stop sent `QUIESCE_ANSWER_MS + kill route` after the
        // question (the ordering law's `>=`) always meets a closed gate.
        RunGate::Quiesced { since_ms } if now_ms.saturating_sub(since_ms) > QUIESCE_HOLD_MS => {
            RunGate::Open
        }
        other => other,
    }
}

/// One event at the run gate at `now_ms`.
pub fn run_gate_step(gate: RunGate, event: GateEvent, now_ms: u64) -> (RunGate, GateOutput) {
    let gate = gate_at(gate, now_ms);
    match event {
        GateEvent::Quiesce { work } if !work.is_empty() => {
            (gate, GateOutput::Answer(QuiesceAnswer::Busy))
        }
        GateEvent::Quiesce { .. } => {
            let closed = match gate {
                RunGate::Stopping => RunGate::Stopping,
                _ => RunGate::Quiesced { since_ms: now_ms },
            };
            (closed, GateOutput::Answer(QuiesceAnswer::Quiesced))
        }
        GateEvent::Release => {
            let opened = match gate {
                RunGate::Stopping => RunGate::Stopping,
                _ => RunGate::Open,
            };
            (opened, GateOutput::Done)
        }
        GateEvent::Stop => (RunGate::Stopping, GateOutput::Done),
        GateEvent::IdleStop => match gate {
            RunGate::Open => (gate, GateOutput::IdleStop { taken: false }),
            RunGate::Quiesced { .. } | RunGate::Stopping => {
                (RunGate::Stopping, GateOutput::IdleStop { taken: true })
            }
        },
        GateEvent::RunRequest => (
            gate,
            GateOutput::Run {
                admitted: gate == RunGate::Open,
            },
        ),
    }
}

/// One worker's reply to the supervisor's quiesce question.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case", deny_unknown_fields)]
pub enum QuiesceReply {
    /// The worker answered at `at_ms`.
    Answered {
        /// Quiesced or busy.
        answer: QuiesceAnswer,
        /// When (monotonic milliseconds).
        at_ms: u64,
    },
    /// No answer came.
    Silent,
}

/// The supervisor's decision once the answer window has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownCommit {
    /// Every worker is quiesced: stop them all.
    StopWorkers,
    /// Some worker is busy or silent: reopen every gate, answer busy.
    ReopenAndAnswerBusy,
}

/// Whether an idle shutdown asked at `asked_at_ms` commits.
pub fn idle_shutdown_commits(asked_at_ms: u64, replies: &[QuiesceReply]) -> ShutdownCommit {
    let quiesced_in_time = |reply: &QuiesceReply| match *reply {
        QuiesceReply::Answered {
            answer: QuiesceAnswer::Quiesced,
            at_ms,
        } => at_ms.saturating_sub(asked_at_ms) <= QUIESCE_ANSWER_MS,
        _ => false,
    };
    if replies.iter().all(quiesced_in_time) {
        ShutdownCommit::StopWorkers
    } else {
        ShutdownCommit::ReopenAndAnswerBusy
    }
}

/// Where a session's worker stands when the idle shutdown asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerStanding {
    /// Running or starting: it can be asked.
    Up,
    /// Being stopped for idleness or removed right now.
    Stopping,
    /// None: the session rests, waits out a restart pause or was given up.
    Gone,
}

/// Who answers the idle shutdown's question for one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answerer {
    /// Its worker, whose gate closes if it is idle.
    Worker,
    /// Its live kernel, by the kernel's own work: no worker can be asked,
    /// and none drives the kernel, so no run starts there before the stop.
    Kernel,
    /// No process of the session lives: nothing to ask, nothing to stop.
    Nobody,
    /// A stop of its own is under way: busy until it is over.
    Busy,
}

/// Who answers for a session whose worker stands as `worker`.
pub fn answerer(worker: WorkerStanding, kernel_lives: bool) -> Answerer {
    match (worker, kernel_lives) {
        (WorkerStanding::Up, _) => Answerer::Worker,
        (WorkerStanding::Stopping, _) => Answerer::Busy,
        (WorkerStanding::Gone, true) => Answerer::Kernel,
        (WorkerStanding::Gone, false) => Answerer::Nobody,
    }
}

/// A live kernel's answer for its session: busy while a job of it runs or
/// a run left a process running, quiesced otherwise.
pub fn kernel_answer(running_jobs: usize, background: u32) -> QuiesceAnswer {
    let mut activities = Vec::new();
    if running_jobs > 0 {
        activities.push(Activity::Work(WorkKind::Run));
    }
    if background > 0 {
        activities.push(Activity::Work(WorkKind::BackgroundJob));
    }
    if session_work(&activities).is_empty() {
        QuiesceAnswer::Quiesced
    } else {
        QuiesceAnswer::Busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_closes_busy_answers_busy() {
        let (gate, out) = run_gate_step(
            RunGate::Open,
            GateEvent::Quiesce {
                work: WorkSet::EMPTY,
            },
            10,
        );
        assert_eq!(gate, RunGate::Quiesced { since_ms: 10 });
        assert_eq!(out, GateOutput::Answer(QuiesceAnswer::Quiesced));
        let busy = WorkSet::EMPTY.with(WorkKind::Run);
        let (gate, out) = run_gate_step(RunGate::Open, GateEvent::Quiesce { work: busy }, 10);
        assert_eq!(gate, RunGate::Open);
        assert_eq!(out, GateOutput::Answer(QuiesceAnswer::Busy));
    }

    #[test]
    fn a_quiesced_gate_reopens_after_the_hold_without_stop_or_release() {
        let closed = RunGate::Quiesced { since_ms: 0 };
        let (_, out) = run_gate_step(closed, GateEvent::RunRequest, QUIESCE_HOLD_MS);
        assert_eq!(out, GateOutput::Run { admitted: false });
        let (gate, out) = run_gate_step(closed, GateEvent::RunRequest, QUIESCE_HOLD_MS + 1);
        assert_eq!(
            (gate, out),
            (RunGate::Open, GateOutput::Run { admitted: true })
        );
        let (gate, _) = run_gate_step(RunGate::Stopping, GateEvent::Release, u64::MAX);
        assert_eq!(gate, RunGate::Stopping);
    }

    #[test]
    fn the_idle_stop_is_taken_only_through_a_gate_still_quiesced() {
        let closed = RunGate::Quiesced { since_ms: 0 };
        let (gate, out) = run_gate_step(closed, GateEvent::IdleStop, QUIESCE_HOLD_MS);
        assert_eq!(
            (gate, out),
            (RunGate::Stopping, GateOutput::IdleStop { taken: true })
        );
        // Past the hold the gate has reopened (a run may have started):
        // the stop is refused and the gate stays open.
        let (gate, out) = run_gate_step(closed, GateEvent::IdleStop, QUIESCE_HOLD_MS + 1);
        assert_eq!(
            (gate, out),
            (RunGate::Open, GateOutput::IdleStop { taken: false })
        );
        let (_, out) = run_gate_step(RunGate::Stopping, GateEvent::IdleStop, u64::MAX);
        assert_eq!(out, GateOutput::IdleStop { taken: true });
    }

    #[test]
    fn the_supervisor_stops_only_when_all_quiesced_in_time() {
        let quiesced = |at_ms| QuiesceReply::Answered {
            answer: QuiesceAnswer::Quiesced,
            at_ms,
        };
        assert_eq!(idle_shutdown_commits(100, &[]), ShutdownCommit::StopWorkers);
        assert_eq!(
            idle_shutdown_commits(100, &[quiesced(100), quiesced(100 + QUIESCE_ANSWER_MS)]),
            ShutdownCommit::StopWorkers
        );
        assert_eq!(
            idle_shutdown_commits(100, &[quiesced(100), quiesced(101 + QUIESCE_ANSWER_MS)]),
            ShutdownCommit::ReopenAndAnswerBusy
        );
        let busy = QuiesceReply::Answered {
            answer: QuiesceAnswer::Busy,
            at_ms: 100,
        };
        assert_eq!(
            idle_shutdown_commits(100, &[quiesced(100), busy]),
            ShutdownCommit::ReopenAndAnswerBusy
        );
        assert_eq!(
            idle_shutdown_commits(100, &[QuiesceReply::Silent]),
            ShutdownCommit::ReopenAndAnswerBusy
        );
    }

    #[test]
    fn idle_shutdown_wire_round_trips_and_rejects_unknown_tags() {
        let reply = QuiesceReply::Answered {
            answer: QuiesceAnswer::Busy,
            at_ms: 7,
        };
        let json = serde_json::to_string(&reply).unwrap();
        assert_eq!(serde_json::from_str::<QuiesceReply>(&json).unwrap(), reply);
        assert!(serde_json::from_str::<QuiesceReply>(r#"{"reply":"maybe"}"#).is_err());
        assert!(serde_json::from_str::<QuiesceReply>(
            r#"{"reply":"answered","answer":"dozing","at_ms":1}"#
        )
        .is_err());
        assert!(serde_json::from_str::<ShutdownCommit>(r#""stop_some""#).is_err());
    }

    #[test]
    fn a_session_without_a_worker_is_asked_through_its_live_kernel() {
        assert_eq!(answerer(WorkerStanding::Up, false), Answerer::Worker);
        assert_eq!(answerer(WorkerStanding::Up, true), Answerer::Worker);
        assert_eq!(answerer(WorkerStanding::Gone, true), Answerer::Kernel);
        assert_eq!(answerer(WorkerStanding::Gone, false), Answerer::Nobody);
        assert_eq!(answerer(WorkerStanding::Stopping, false), Answerer::Busy);
        assert_eq!(answerer(WorkerStanding::Stopping, true), Answerer::Busy);
    }

    #[test]
    fn a_kernel_with_a_running_job_or_a_background_job_answers_busy() {
        assert_eq!(kernel_answer(0, 0), QuiesceAnswer::Quiesced);
        assert_eq!(kernel_answer(1, 0), QuiesceAnswer::Busy);
        assert_eq!(kernel_answer(0, 1), QuiesceAnswer::Busy);
        assert_eq!(kernel_answer(2, 3), QuiesceAnswer::Busy);
    }

    #[test]
    fn a_kernel_that_answers_busy_keeps_the_daemon_serving() {
        let idle_worker = QuiesceReply::Answered {
            answer: QuiesceAnswer::Quiesced,
            at_ms: 5,
        };
        let busy_kernel = QuiesceReply::Answered {
            answer: kernel_answer(0, 1),
            at_ms: 5,
        };
        assert_eq!(
            idle_shutdown_commits(0, &[idle_worker, busy_kernel]),
            ShutdownCommit::ReopenAndAnswerBusy
        );
    }
}
