//! Restart budget: when a failed worker is restarted, and when it is given up.
//!
//! Model: `bend/supervise.bend`. Laws: `restart_gives_up`,
//! `restart_decide_window`, `restart_decide_verdict`.
//!
//! A failure counts while it is younger than the restart window (monotonic
//! milliseconds: `now - at < RESTART_WINDOW_MS`). On a failure, with `n`
//! failures in the window counting the new one, the worker is given up when
//! `n > RESTART_GIVE_UP_AFTER` (the sixth failure); otherwise it restarts after
//! [`restart_pause_ms`]`(n)`: 250 ms, doubling per failure, at most 30 s.

use serde::{Deserialize, Serialize};

use super::timing::{RESTART_WINDOW_MS, TM};

/// Failures tolerated inside one window; the next one gives the worker up.
pub const RESTART_GIVE_UP_AFTER: u32 = 5;
/// The pause before the first restart in a window.
pub const RESTART_PAUSE_MIN_MS: u64 = 250;
/// The longest pause before a restart.
pub const RESTART_PAUSE_MAX_MS: u64 = TM.supervisor.restart_pause_max;

/// What the supervisor does about a worker that just failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RestartVerdictWire", into = "RestartVerdictWire")]
pub enum RestartVerdict {
    /// Start it again after `pause_ms`.
    Restart {
        /// How long to wait first.
        pause_ms: u64,
        /// Failures counted in the budget's window, this one included.
        failures_in_window: u32,
    },
    /// Stop restarting: the session is listed as given up.
    GiveUp {
        /// Failures counted in the budget's window, this one included.
        failures_in_window: u32,
    },
}

/// The pause before a restart when `failures_in_window` failures (counting
/// the latest) are in the window: `250 ms * 2^(n-1)`, capped at 30 s.
/// No failure, no pause.
pub fn restart_pause_ms(failures_in_window: u32) -> u64 {
    if failures_in_window == 0 {
        return 0;
    }
    let doublings = failures_in_window - 1;
    // 250 << 7 already exceeds the cap; stop shifting before it can overflow.
    if doublings >= 7 {
        return RESTART_PAUSE_MAX_MS;
    }
    (RESTART_PAUSE_MIN_MS << doublings).min(RESTART_PAUSE_MAX_MS)
}

/// Whether a failure at `failed_at_ms` still counts at `now_ms`.
pub fn in_restart_window(failed_at_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(failed_at_ms) < RESTART_WINDOW_MS
}

/// The verdict for `failures_in_window` failures counting the latest.
pub fn restart_verdict(failures_in_window: u32) -> RestartVerdict {
    if failures_in_window > RESTART_GIVE_UP_AFTER {
        RestartVerdict::GiveUp { failures_in_window }
    } else {
        RestartVerdict::Restart {
            pause_ms: restart_pause_ms(failures_in_window),
            failures_in_window,
        }
    }
}

/// A worker failed at `now_ms`, after the earlier failures `history`:
/// the verdict, counting only the failures inside the window.
pub fn restart_decide(history: &[u64], now_ms: u64) -> RestartVerdict {
    let earlier = history
        .iter()
        .filter(|&&at| in_restart_window(at, now_ms))
        .count();
    let count = u32::try_from(earlier).unwrap_or(u32::MAX).saturating_add(1);
    restart_verdict(count)
}

/// One worker's failures inside the restart window (the supervisor's clock
/// is passed in; this type never reads one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestartBudget {
    failures: Vec<u64>,
}

impl RestartBudget {
    /// A fresh budget: a new restart window with no failures.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record a failure at `now_ms` and decide what to do about it.
    pub fn record_failure(&mut self, now_ms: u64) -> RestartVerdict {
        let verdict = restart_decide(&self.failures, now_ms);
        self.failures.retain(|&at| in_restart_window(at, now_ms));
        self.failures.push(now_ms);
        verdict
    }

    /// Failures that still count at `now_ms`.
    pub fn failures_in_window(&self, now_ms: u64) -> u32 {
        let n = self
            .failures
            .iter()
            .filter(|&&at| in_restart_window(at, now_ms))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case", deny_unknown_fields)]
enum RestartVerdictWire {
    Restart { pause_ms: u64, failures: u32 },
    GiveUp { failures: u32 },
}

impl From<RestartVerdict> for RestartVerdictWire {
    fn from(verdict: RestartVerdict) -> Self {
        match verdict {
            RestartVerdict::Restart {
                pause_ms,
                failures_in_window,
            } => Self::Restart {
                pause_ms,
                failures: failures_in_window,
            },
            RestartVerdict::GiveUp { failures_in_window } => Self::GiveUp {
                failures: failures_in_window,
            },
        }
    }
}

/// A restart verdict from the wire that no decision could have made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestartWireError {
    /// A restart counts 1 to `RESTART_GIVE_UP_AFTER` failures.
    #[error(
        "restart verdict with {failures} failures: a restart has 1 to {}",
        RESTART_GIVE_UP_AFTER
    )]
    RestartFailures {
        /// The failures it names.
        failures: u32,
    },
    /// The pause is not the one the failures give.
    #[error("restart verdict pause {pause_ms} ms does not match {failures} failures")]
    Pause {
        /// The pause it names.
        pause_ms: u64,
        /// The failures it names.
        failures: u32,
    },
    /// Giving up needs more than `RESTART_GIVE_UP_AFTER` failures.
    #[error(
        "give-up verdict with {failures} failures: giving up needs more than {}",
        RESTART_GIVE_UP_AFTER
    )]
    GiveUpFailures {
        /// The failures it names.
        failures: u32,
    },
}

impl TryFrom<RestartVerdictWire> for RestartVerdict {
    type Error = RestartWireError;

    fn try_from(wire: RestartVerdictWire) -> Result<Self, RestartWireError> {
        match wire {
            RestartVerdictWire::Restart { pause_ms, failures } => {
                if failures == 0 || failures > RESTART_GIVE_UP_AFTER {
                    return Err(RestartWireError::RestartFailures { failures });
                }
                if pause_ms != restart_pause_ms(failures) {
                    return Err(RestartWireError::Pause { pause_ms, failures });
                }
                Ok(Self::Restart {
                    pause_ms,
                    failures_in_window: failures,
                })
            }
            RestartVerdictWire::GiveUp { failures } => {
                if failures <= RESTART_GIVE_UP_AFTER {
                    return Err(RestartWireError::GiveUpFailures { failures });
                }
                Ok(Self::GiveUp {
                    failures_in_window: failures,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_gives_up_at_the_sixth_failure_in_the_window() {
        let mut budget = RestartBudget::new();
        let pauses: Vec<RestartVerdict> = (0..6).map(|i| budget.record_failure(i * 1000)).collect();
        assert_eq!(
            pauses[..5]
                .iter()
                .map(|v| match v {
                    RestartVerdict::Restart { pause_ms, .. } => *pause_ms,
                    RestartVerdict::GiveUp { .. } => 0,
                })
                .collect::<Vec<_>>(),
            vec![250, 500, 1000, 2000, 4000]
        );
        assert_eq!(
            pauses[5],
            RestartVerdict::GiveUp {
                failures_in_window: 6
            }
        );
    }

    #[test]
    fn failures_older_than_the_window_no_longer_count() {
        let mut budget = RestartBudget::new();
        for i in 0..5 {
            budget.record_failure(i);
        }
        let verdict = budget.record_failure(4 + RESTART_WINDOW_MS);
        // Failures at 0..=4 are exactly one window old at 4 + window for the
        // one at 4 and older for the rest: none of them counts any more.
        assert_eq!(
            verdict,
            RestartVerdict::Restart {
                pause_ms: 250,
                failures_in_window: 1
            }
        );
        assert_eq!(budget.failures_in_window(4 + RESTART_WINDOW_MS), 1);
    }

    #[test]
    fn the_budget_counts_the_failures_inside_the_window() {
        let mut budget = RestartBudget::new();
        assert_eq!(budget.failures_in_window(0), 0);
        for at in [0, 10, 20] {
            budget.record_failure(at);
        }
        assert_eq!(budget.failures_in_window(20), 3);
        assert_eq!(budget.failures_in_window(10 + RESTART_WINDOW_MS), 1);
        assert_eq!(budget.failures_in_window(20 + RESTART_WINDOW_MS), 0);
    }

    #[test]
    fn the_pause_doubles_and_is_capped() {
        assert_eq!(restart_pause_ms(0), 0);
        assert_eq!(restart_pause_ms(1), 250);
        assert_eq!(restart_pause_ms(7), 16_000);
        assert_eq!(restart_pause_ms(8), 30_000);
        assert_eq!(restart_pause_ms(u32::MAX), 30_000);
    }

    #[test]
    fn restart_wire_round_trips() {
        for n in 1..=8 {
            let verdict = restart_verdict(n);
            let json = serde_json::to_string(&verdict).unwrap();
            assert_eq!(
                serde_json::from_str::<RestartVerdict>(&json).unwrap(),
                verdict
            );
        }
    }

    #[test]
    fn restart_wire_rejects_unknown_tags_and_out_of_range_numbers() {
        for bad in [
            r#"{"verdict":"retry","failures":1}"#,
            r#"{"verdict":"restart","pause_ms":250,"failures":0}"#,
            r#"{"verdict":"restart","pause_ms":251,"failures":1}"#,
            r#"{"verdict":"restart","pause_ms":250,"failures":6}"#,
            r#"{"verdict":"restart","pause_ms":8000,"failures":6}"#,
            r#"{"verdict":"restart","pause_ms":0,"failures":0}"#,
            r#"{"verdict":"give_up","failures":5}"#,
            r#"{"verdict":"give_up","failures":-1}"#,
            r#"{"verdict":"give_up","failures":6,"extra":1}"#,
        ] {
            assert!(
                serde_json::from_str::<RestartVerdict>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
