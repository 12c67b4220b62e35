//! Idle stop: a session left alone long enough gives back its processes.
//!
//! Not a law of the specification: a setting (`idle_stop_ms`) that keeps
//! hundreds of sessions from holding hundreds of live workers and kernels.
//! A session with no work (the work set of [`super::work`]: background jobs
//! are work), no client connected to its worker and no request naming it
//! for `idle_stop_ms` has its worker and kernel stopped; it is `saved`, and
//! the next request naming it starts them again over the snapshot.
//!
//! The stop itself is gated as the idle shutdown is
//! ([`super::idle_shutdown`]): the supervisor asks the worker to quiesce;
//! only a worker with no work and no client ([`idle_stop_answer`]) closes its
//! gate and answers quiesced, and only then is it stopped
//! (`idle_shutdown_commits` over that one reply). Requests that arrive
//! meanwhile wait at the supervisor and wake the session once it is down.
//!
//! - [`last_active`]: when the session was last seen active. The supervisor
//!   calls it on every report from the worker and on every request naming
//!   the session.
//! - [`idle_stop_due`]: whether the supervisor should try the stop now.

use serde::{Deserialize, Serialize};

use super::idle_shutdown::{run_gate_step, GateEvent, GateOutput, QuiesceAnswer, RunGate};
use super::work::WorkSet;

/// The `idle_stop_ms` setting: a number of milliseconds, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "IdleStopWire", into = "IdleStopWire")]
pub enum IdleStop {
    /// Stop a session left alone this many milliseconds (at least 1).
    After(u64),
    /// Never stop an idle session.
    Never,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum IdleStopWire {
    Ms(u64),
    #[serde(skip_serializing)]
    Negative(i64),
    Word(String),
    /// Anything else (a fraction, a boolean, a table): refused by name.
    #[serde(skip_serializing)]
    Other(serde::de::IgnoredAny),
}

impl From<IdleStop> for IdleStopWire {
    fn from(setting: IdleStop) -> Self {
        match setting {
            IdleStop::After(ms) => IdleStopWire::Ms(ms),
            IdleStop::Never => IdleStopWire::Word("never".to_string()),
        }
    }
}

/// An `idle_stop_ms` value refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdleStopError {
    /// Zero would stop a session the moment its last client left,
    /// between two commands of one script.
    #[error(
        "idle_stop_ms = 0: a session needs some time between two requests; give milliseconds or \"never\""
    )]
    Zero,
    /// A word other than `never`.
    #[error("idle_stop_ms {0:?}: expected milliseconds or \"never\"")]
    Word(String),
    /// A negative number.
    #[error("idle_stop_ms = {0}: expected milliseconds (a whole number above 0) or \"never\"")]
    Negative(i64),
    /// Neither a number nor a word.
    #[error("idle_stop_ms: expected milliseconds (a whole number above 0) or \"never\"")]
    NotANumber,
}

impl TryFrom<IdleStopWire> for IdleStop {
    type Error = IdleStopError;

    fn try_from(wire: IdleStopWire) -> Result<Self, IdleStopError> {
        match wire {
            IdleStopWire::Ms(0) => Err(IdleStopError::Zero),
            IdleStopWire::Ms(ms) => Ok(IdleStop::After(ms)),
            IdleStopWire::Word(word) if word == "never" => Ok(IdleStop::Never),
            IdleStopWire::Word(word) => Err(IdleStopError::Word(word)),
            IdleStopWire::Negative(ms) => Err(IdleStopError::Negative(ms)),
            IdleStopWire::Other(_) => Err(IdleStopError::NotANumber),
        }
    }
}

/// What the supervisor knows of a running session at a moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The session's work, as its worker last reported it.
    pub work: WorkSet,
    /// Client connections open at the worker (attached clients, requests
    /// being served), as its worker last reported them.
    pub clients: u32,
    /// Requests naming the session that the supervisor is still handing to
    /// its worker.
    pub requests_in_flight: u32,
}

impl Seen {
    /// Whether anything keeps the session in use right now.
    pub fn in_use(&self) -> bool {
        !self.work.is_empty() || self.clients > 0 || self.requests_in_flight > 0
    }
}

/// When the session was last active, after seeing `now` at `now_ms`: a
/// session in use now, or one that was in use at the previous sighting
/// (`was_in_use`: its use ended since), is active now; otherwise it stays
/// as it was. Times never go back.
pub fn last_active(previous_ms: u64, was_in_use: bool, now: Seen, now_ms: u64) -> u64 {
    if was_in_use || now.in_use() {
        previous_ms.max(now_ms)
    } else {
        previous_ms
    }
}

/// Whether a session seen as `now`, last active at `last_active_ms`, is due
/// for an idle stop at `now_ms` under `setting`: not in use, and left alone
/// for the whole `idle_stop_ms` (at its last millisecond it is not due yet).
pub fn idle_stop_due(setting: IdleStop, now: Seen, last_active_ms: u64, now_ms: u64) -> bool {
    let IdleStop::After(after_ms) = setting else {
        return false;
    };
    !now.in_use() && now_ms.saturating_sub(last_active_ms) >= after_ms
}

/// The worker's answer when asked to quiesce for an idle stop: with a
/// client connected it answers busy and leaves its gate as it is (that
/// client's request must be served); without one, the run gate decides as
/// for an idle shutdown (work answers busy, no work closes the gate).
pub fn idle_stop_answer(
    gate: RunGate,
    work: WorkSet,
    clients: u32,
    now_ms: u64,
) -> (RunGate, QuiesceAnswer) {
    if clients > 0 {
        return (gate, QuiesceAnswer::Busy);
    }
    match run_gate_step(gate, GateEvent::Quiesce { work }, now_ms) {
        (gate, GateOutput::Answer(answer)) => (gate, answer),
        // A quiesce always answers; keep the gate and call it busy if the
        // gate's law ever says otherwise.
        (gate, _) => (gate, QuiesceAnswer::Busy),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::work::WorkKind;

    const IDLE: Seen = Seen {
        work: WorkSet::EMPTY,
        clients: 0,
        requests_in_flight: 0,
    };

    #[test]
    fn an_idle_session_is_due_once_the_whole_setting_has_passed() {
        let setting = IdleStop::After(1_000);
        assert!(!idle_stop_due(setting, IDLE, 5_000, 5_999));
        assert!(idle_stop_due(setting, IDLE, 5_000, 6_000));
        assert!(idle_stop_due(setting, IDLE, 5_000, u64::MAX));
        // A clock read before the last activity is never due.
        assert!(!idle_stop_due(setting, IDLE, 5_000, 4_000));
    }

    #[test]
    fn never_is_never_due() {
        assert!(!idle_stop_due(IdleStop::Never, IDLE, 0, u64::MAX));
    }

    #[test]
    fn work_a_client_or_a_request_in_flight_keep_a_session() {
        let setting = IdleStop::After(1);
        for kind in WorkKind::ALL {
            let busy = Seen {
                work: WorkSet::EMPTY.with(kind),
                ..IDLE
            };
            assert!(!idle_stop_due(setting, busy, 0, u64::MAX), "{kind:?}");
        }
        let attached = Seen { clients: 1, ..IDLE };
        assert!(!idle_stop_due(setting, attached, 0, u64::MAX));
        let asked = Seen {
            requests_in_flight: 1,
            ..IDLE
        };
        assert!(!idle_stop_due(setting, asked, 0, u64::MAX));
    }

    #[test]
    fn the_idle_time_counts_from_the_end_of_the_last_use() {
        let busy = Seen {
            work: WorkSet::EMPTY.with(WorkKind::BackgroundJob),
            ..IDLE
        };
        // Busy at 100: active at 100.
        assert_eq!(last_active(0, false, busy, 100), 100);
        // Seen idle at 900 after being busy: the use ended by then.
        assert_eq!(last_active(100, true, IDLE, 900), 900);
        // Idle again later: unchanged.
        assert_eq!(last_active(900, false, IDLE, 5_000), 900);
        // Never backwards.
        assert_eq!(last_active(900, true, IDLE, 800), 900);
    }

    #[test]
    fn only_a_worker_without_clients_and_work_quiesces_for_an_idle_stop() {
        let (gate, answer) = idle_stop_answer(RunGate::Open, WorkSet::EMPTY, 0, 7);
        assert_eq!(answer, QuiesceAnswer::Quiesced);
        assert_eq!(gate, RunGate::Quiesced { since_ms: 7 });
        let (gate, answer) = idle_stop_answer(RunGate::Open, WorkSet::EMPTY, 1, 7);
        assert_eq!((gate, answer), (RunGate::Open, QuiesceAnswer::Busy));
        let work = WorkSet::EMPTY.with(WorkKind::UserBash);
        let (gate, answer) = idle_stop_answer(RunGate::Open, work, 0, 7);
        assert_eq!((gate, answer), (RunGate::Open, QuiesceAnswer::Busy));
    }

    #[test]
    fn the_setting_reads_milliseconds_or_never_and_refuses_zero() {
        let parse = |text: &str| serde_json::from_str::<IdleStop>(text);
        assert_eq!(parse("3600000").unwrap(), IdleStop::After(3_600_000));
        assert_eq!(parse("\"never\"").unwrap(), IdleStop::Never);
        assert!(parse("0")
            .unwrap_err()
            .to_string()
            .contains("idle_stop_ms = 0"));
        assert!(parse("\"soon\"").unwrap_err().to_string().contains("soon"));
        for refused in ["-1", "1.5", "true"] {
            let said = parse(refused).unwrap_err().to_string();
            assert!(
                said.contains("expected milliseconds (a whole number above 0) or \"never\""),
                "{refused}: {said}"
            );
        }
        let json = serde_json::to_string(&IdleStop::Never).unwrap();
        assert_eq!(json, "\"never\"");
    }
}
