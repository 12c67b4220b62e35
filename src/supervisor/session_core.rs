//! The supervisor's session core: when an idle session is to be stopped,
//! how long a request waits for a session that is stopping or being
//! removed, and how long a shutdown waits for its workers' stops. Sans-IO:
//! the driver says what it sees and what time it is (monotonic
//! milliseconds); the core answers with actions and `poll_timeout()`, the
//! moment it next needs the driver. No clock is read and nothing waits
//! here, so each sequence is tested with a fake clock.

use std::collections::BTreeMap;

use crate::laws::idle_stop::{idle_stop_due, IdleStop, Seen};

/// One running session (never a spare) as the idle stop's driver sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The session.
    pub id: String,
    /// Its work, clients and requests in flight.
    pub seen: Seen,
    /// When it was last active.
    pub last_active_ms: u64,
}

/// An idle stop to begin: the driver marks the session stopping in the
/// same step, so a request that comes after it waits (`Settle`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopIdle {
    /// The session.
    pub id: String,
    /// How long it was left alone.
    pub idle_ms: u64,
}

/// The idle stop's books: the setting and the earliest moment a session
/// seen at the last look falls due.
#[derive(Clone, Debug)]
pub struct IdleStops {
    setting: IdleStop,
    next_due_ms: Option<u64>,
}

impl IdleStops {
    /// Books under the `idle_stop_ms` setting.
    pub fn new(setting: IdleStop) -> IdleStops {
        IdleStops {
            setting,
            next_due_ms: None,
        }
    }

    /// The driver looked at the running sessions at `now_ms`: the stops to
    /// begin now. A session in use has no deadline: its use ending is a
    /// change the driver is woken by.
    pub fn look(&mut self, running: &[Sighting], now_ms: u64) -> Vec<StopIdle> {
        self.next_due_ms = None;
        let IdleStop::After(after_ms) = self.setting else {
            return Vec::new();
        };
        let mut due = Vec::new();
        for sighting in running {
            if idle_stop_due(self.setting, sighting.seen, sighting.last_active_ms, now_ms) {
                due.push(StopIdle {
                    id: sighting.id.clone(),
                    idle_ms: now_ms.saturating_sub(sighting.last_active_ms),
                });
            } else if !sighting.seen.in_use() {
                let at = sighting.last_active_ms.saturating_add(after_ms);
                self.next_due_ms = Some(self.next_due_ms.map_or(at, |next| next.min(at)));
            }
        }
        due
    }

    /// When the driver is to look again though nothing changed (none: only
    /// a change can make a stop due).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_due_ms
    }
}

/// What a request waiting to settle sees of its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleSees {
    /// The session is no more (removed).
    Gone,
    /// It is being stopped for idleness or removed.
    Stopping,
    /// Anything else: the request may go on.
    Settled,
}

/// The settle's answer for one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleStep {
    /// Go on with the request.
    Proceed,
    /// The session was removed meanwhile.
    Gone,
    /// Its stop did not finish within `session_settle`.
    TimedOut,
    /// Wait for a change or until `poll_timeout()`; `first` the first wait
    /// (the driver says once that the request waits).
    Wait {
        /// Whether this request waits for the first time.
        first: bool,
    },
}

/// A request waiting while its session stops: answered when the stop is
/// over, or refused at its deadline.
#[derive(Clone, Copy, Debug)]
pub struct Settle {
    deadline_ms: u64,
    waited: bool,
}

impl Settle {
    /// A request taken at `now_ms` that waits at most `settle_ms`.
    pub fn new(now_ms: u64, settle_ms: u64) -> Settle {
        Settle {
            deadline_ms: now_ms.saturating_add(settle_ms),
            waited: false,
        }
    }

    /// The driver looked at the session at `now_ms`.
    pub fn step(&mut self, sees: SettleSees, now_ms: u64) -> SettleStep {
        match sees {
            SettleSees::Gone => SettleStep::Gone,
            SettleSees::Settled => SettleStep::Proceed,
            SettleSees::Stopping if now_ms >= self.deadline_ms => SettleStep::TimedOut,
            SettleSees::Stopping => {
                let first = !self.waited;
                self.waited = true;
                SettleStep::Wait { first }
            }
        }
    }

    /// When the driver is to look again though nothing changed.
    pub fn poll_timeout(&self) -> u64 {
        self.deadline_ms
    }
}

/// A shutdown's stops of its workers: each is asked to stop (and killed
/// by its own escalation if it outlives its grace); the shutdown answers
/// once every stop ended or at the supervisor drain, whichever is first,
/// counting a worker not known gone as left running.
#[derive(Clone, Debug)]
pub struct Drain {
    until_ms: u64,
    /// Each worker's stop: `None` while under way, else whether it is gone.
    stops: BTreeMap<String, Option<bool>>,
}

impl Drain {
    /// The stops of `ids` began at `now_ms`, bounded by `drain_ms`.
    pub fn begin(ids: impl IntoIterator<Item = String>, now_ms: u64, drain_ms: u64) -> Drain {
        Drain {
            until_ms: now_ms.saturating_add(drain_ms),
            stops: ids.into_iter().map(|id| (id, None)).collect(),
        }
    }

    /// The stop of `id` ended (`gone`: its worker is known gone).
    pub fn stop_ended(&mut self, id: &str, gone: bool) {
        if let Some(stop) = self.stops.get_mut(id) {
            *stop = Some(gone);
        }
    }

    /// Whether the shutdown may answer at `now_ms`: every stop ended, or
    /// the drain is over.
    pub fn over(&self, now_ms: u64) -> bool {
        now_ms >= self.until_ms || self.stops.values().all(Option::is_some)
    }

    /// Each worker and whether it is known gone (a stop still under way is
    /// not), in the order of their ids.
    pub fn outcomes(&self) -> Vec<(String, bool)> {
        self.stops
            .iter()
            .map(|(id, stop)| (id.clone(), stop.unwrap_or(false)))
            .collect()
    }

    /// When the drain ends, unless every stop ends first.
    pub fn poll_timeout(&self) -> u64 {
        self.until_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::timing::TM;
    use crate::laws::work::{WorkKind, WorkSet};

    const IDLE: Seen = Seen {
        work: WorkSet::EMPTY,
        clients: 0,
        requests_in_flight: 0,
    };

    fn sighting(id: &str, seen: Seen, last_active_ms: u64) -> Sighting {
        Sighting {
            id: id.into(),
            seen,
            last_active_ms,
        }
    }

    #[test]
    fn an_idle_session_is_stopped_at_its_deadline_and_not_before() {
        let mut books = IdleStops::new(IdleStop::After(1_000));
        let running = [sighting("a", IDLE, 5_000)];
        assert!(books.look(&running, 5_000).is_empty());
        assert_eq!(books.poll_timeout(), Some(6_000));
        // Woken early (a change elsewhere): still not due.
        assert!(books.look(&running, 5_999).is_empty());
        assert_eq!(books.poll_timeout(), Some(6_000));
        let due = books.look(&running, 6_000);
        assert_eq!(
            due,
            vec![StopIdle {
                id: "a".into(),
                idle_ms: 1_000
            }]
        );
        assert_eq!(books.poll_timeout(), None);
    }

    #[test]
    fn the_earliest_deadline_of_the_idle_sessions_is_the_next_look() {
        let mut books = IdleStops::new(IdleStop::After(1_000));
        let busy = Seen {
            work: WorkSet::EMPTY.with(WorkKind::BackgroundJob),
            ..IDLE
        };
        let running = [
            sighting("late", IDLE, 4_000),
            sighting("early", IDLE, 3_000),
            sighting("busy", busy, 0),
            sighting("attached", Seen { clients: 1, ..IDLE }, 0),
        ];
        assert!(books.look(&running, 3_500).is_empty());
        assert_eq!(books.poll_timeout(), Some(4_000));
        let due = books.look(&running, 4_000);
        assert_eq!(
            due.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["early"]
        );
        assert_eq!(books.poll_timeout(), Some(5_000));
    }

    #[test]
    fn a_session_in_use_or_never_setting_has_no_deadline() {
        let mut books = IdleStops::new(IdleStop::After(1));
        let asked = Seen {
            requests_in_flight: 1,
            ..IDLE
        };
        assert!(books.look(&[sighting("a", asked, 0)], u64::MAX).is_empty());
        assert_eq!(books.poll_timeout(), None);
        let mut never = IdleStops::new(IdleStop::Never);
        assert!(never.look(&[sighting("a", IDLE, 0)], u64::MAX).is_empty());
        assert_eq!(never.poll_timeout(), None);
    }

    #[test]
    fn a_request_waiting_for_a_stop_goes_on_when_the_stop_completes() {
        let mut settle = Settle::new(1_000, TM.supervisor.session_settle);
        assert_eq!(
            settle.step(SettleSees::Stopping, 1_000),
            SettleStep::Wait { first: true }
        );
        assert_eq!(settle.poll_timeout(), 1_000 + TM.supervisor.session_settle);
        assert_eq!(
            settle.step(SettleSees::Stopping, 2_000),
            SettleStep::Wait { first: false }
        );
        // The idle stop is over: the request wakes the session.
        assert_eq!(settle.step(SettleSees::Settled, 2_500), SettleStep::Proceed);
        // A removal's end finds no session.
        let mut removed = Settle::new(1_000, TM.supervisor.session_settle);
        assert!(matches!(
            removed.step(SettleSees::Stopping, 1_000),
            SettleStep::Wait { .. }
        ));
        assert_eq!(removed.step(SettleSees::Gone, 1_500), SettleStep::Gone);
    }

    #[test]
    fn a_request_waiting_for_a_stop_is_refused_at_session_settle() {
        let mut settle = Settle::new(1_000, TM.supervisor.session_settle);
        let last = 1_000 + TM.supervisor.session_settle - 1;
        assert!(matches!(
            settle.step(SettleSees::Stopping, last),
            SettleStep::Wait { .. }
        ));
        assert_eq!(
            settle.step(SettleSees::Stopping, last + 1),
            SettleStep::TimedOut
        );
    }

    #[test]
    fn a_shutdown_answers_once_every_stop_ended() {
        let mut drain = Drain::begin(
            ["a".to_string(), "b".to_string()],
            0,
            TM.supervisor.supervisor_drain,
        );
        assert!(!drain.over(10));
        drain.stop_ended("b", true);
        assert!(!drain.over(20));
        drain.stop_ended("a", false);
        assert!(drain.over(30));
        assert_eq!(
            drain.outcomes(),
            vec![("a".to_string(), false), ("b".to_string(), true)]
        );
    }

    #[test]
    fn a_shutdown_answers_at_the_supervisor_drain_counting_a_stop_under_way_as_left() {
        let mut drain = Drain::begin(
            ["a".to_string(), "b".to_string()],
            100,
            TM.supervisor.supervisor_drain,
        );
        drain.stop_ended("a", true);
        assert_eq!(drain.poll_timeout(), 100 + TM.supervisor.supervisor_drain);
        assert!(!drain.over(100 + TM.supervisor.supervisor_drain - 1));
        assert!(drain.over(100 + TM.supervisor.supervisor_drain));
        assert_eq!(
            drain.outcomes(),
            vec![("a".to_string(), true), ("b".to_string(), false)]
        );
    }

    #[test]
    fn a_shutdown_with_no_worker_answers_at_once() {
        assert!(Drain::begin(Vec::new(), 0, TM.supervisor.supervisor_drain).over(0));
    }
}
