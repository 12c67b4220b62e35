//! Adoption: what a starting supervisor does with the workers it finds, and
//! how a failed launch is retried without ever running two workers for one
//! session.
//!
//! Model: `bend/launcher.bend`. Law: `adopt_same_build`.
//!
//! - [`adoption_verdict`]: a live, reachable worker of the supervisor's own
//!   build is adopted. Any other live worker (another build, or one that does
//!   not answer) is stopped the way a lost worker stops (its work stays
//!   resumable) and its session is launched again on this build.
//! - [`survivor_step`]: before each launch of a session that had a process,
//!   look at that earlier process by identity (pid plus start time, never a
//!   pid alone). Gone (or its pid now belongs to another process): launch.
//!   Alive and not yet asked to stop: stop it first. Alive after its stop: it
//!   survived, which counts as one more failure in the restart budget, and
//!   nothing is launched beside it.

use serde::{Deserialize, Serialize};

/// A process named by pid and start time (clock ticks after boot, as in
/// `/proc/<pid>/stat`), so a reused pid is never mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Its start time, clock ticks after boot.
    pub start_time: u64,
}

/// A worker found alive when the supervisor starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveWorker<'a> {
    /// The build id the worker reported (or that its unit was started with).
    pub build: &'a str,
    /// Whether it answered on its socket.
    pub reachable: bool,
}

/// What the starting supervisor does with a live worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdoptionVerdict {
    /// Same build, answering: supervise it as if this supervisor started it.
    Adopt,
    /// Stop it as a lost worker stops (work stays resumable), then launch
    /// the session on this build under the restart budget.
    StopAndRelaunch,
}

/// The adoption decision for one live worker.
pub fn adoption_verdict(own_build: &str, live: &LiveWorker<'_>) -> AdoptionVerdict {
    if live.reachable && live.build == own_build {
        AdoptionVerdict::Adopt
    } else {
        AdoptionVerdict::StopAndRelaunch
    }
}

/// The next step before (re)launching a session's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchStep {
    /// No earlier process lives: launch.
    Launch,
    /// The earlier process lives: stop it (by identity) before anything else.
    StopEarlier,
    /// The earlier process survived its stop: one more failure; launch nothing.
    CountFailure,
}

/// The step before a launch. `earlier` is the session's previous process,
/// `holder` the process now holding that pid (if any), and `stop_sent`
/// whether the earlier process was already asked to stop.
pub fn survivor_step(
    earlier: Option<ProcessIdentity>,
    holder: Option<ProcessIdentity>,
    stop_sent: bool,
) -> LaunchStep {
    match earlier {
        Some(earlier) if holder == Some(earlier) => {
            if stop_sent {
                LaunchStep::CountFailure
            } else {
                LaunchStep::StopEarlier
            }
        }
        _ => LaunchStep::Launch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adopts_only_a_reachable_worker_of_the_same_build() {
        let same = LiveWorker {
            build: "b1",
            reachable: true,
        };
        assert_eq!(adoption_verdict("b1", &same), AdoptionVerdict::Adopt);
        let other = LiveWorker {
            build: "b0",
            reachable: true,
        };
        assert_eq!(
            adoption_verdict("b1", &other),
            AdoptionVerdict::StopAndRelaunch
        );
        let silent = LiveWorker {
            build: "b1",
            reachable: false,
        };
        assert_eq!(
            adoption_verdict("b1", &silent),
            AdoptionVerdict::StopAndRelaunch
        );
    }

    #[test]
    fn never_launches_beside_a_survivor_and_never_trusts_a_pid_alone() {
        let earlier = ProcessIdentity {
            pid: 42,
            start_time: 1000,
        };
        let reused = ProcessIdentity {
            pid: 42,
            start_time: 2000,
        };
        assert_eq!(
            survivor_step(Some(earlier), Some(earlier), false),
            LaunchStep::StopEarlier
        );
        assert_eq!(
            survivor_step(Some(earlier), Some(earlier), true),
            LaunchStep::CountFailure
        );
        assert_eq!(
            survivor_step(Some(earlier), Some(reused), true),
            LaunchStep::Launch
        );
        assert_eq!(survivor_step(Some(earlier), None, true), LaunchStep::Launch);
        assert_eq!(survivor_step(None, Some(reused), false), LaunchStep::Launch);
    }

    #[test]
    fn adoption_wire_round_trips_and_rejects_unknown_tags() {
        let id = ProcessIdentity {
            pid: 7,
            start_time: 9,
        };
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<ProcessIdentity>(&json).unwrap(), id);
        assert!(serde_json::from_str::<ProcessIdentity>(r#"{"pid":7}"#).is_err());
        assert!(serde_json::from_str::<ProcessIdentity>(r#"{"pid":-7,"start_time":1}"#).is_err());
        assert!(
            serde_json::from_str::<ProcessIdentity>(r#"{"pid":4294967296,"start_time":1}"#)
                .is_err()
        );
        assert!(serde_json::from_str::<LaunchStep>(r#""launch_twice""#).is_err());
        assert!(serde_json::from_str::<AdoptionVerdict>(r#""adopt""#).is_ok());
    }
}
