//! Timing (`Tm`): every timeout of the daemon in one place, and the ordering
//! law `timeouts_ordered`.
//!
//! Each timeout must be at least the sum of the timeouts it waits for; if it
//! were shorter, the waiter would give up (and kill, or exit) while the thing
//! it waits for is still doing its job. The relations are listed in
//! [`ORDERING`], in a fixed order that the Bend model (`bend/supervise.bend`,
//! `Tm`) shares, so the bridge can compare the verdict relation by relation.
//!
//! All values are milliseconds.

use serde::{Deserialize, Serialize};

/// Names of the timeouts, in the order [`Tm::values`] returns them.
pub const TIMEOUT_NAMES: [&str; 20] = [
    "stop_grace",
    "kernel_teardown",
    "harness_close",
    "launcher_wait",
    "supervisor_drain",
    "kill_route",
    "child_drain",
    "client_relaunch_within",
    "worker_lost_exit",
    "busy_refresh",
    "busy_tick",
    "revival_window",
    "busy_evidence_ttl",
    "revival_clock_skew",
    "quiesce_answer",
    "quiesce_hold",
    "restart_window",
    "restart_pause_max",
    "cancel_grace",
    "template_idle",
];

/// Every timeout constant of the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tm {
    /// A worker asked to stop gets this long before it is killed.
    pub stop_grace: u64,
    /// The kernel (persistent shell) gets this long to exit after SIGTERM.
    pub kernel_teardown: u64,
    /// The engine harness gets this long to flush and close the transcript.
    pub harness_close: u64,
    /// A client replacing a daemon waits this long for it to go away.
    pub launcher_wait: u64,
    /// The supervisor's whole shutdown: stop every worker, then kill survivors.
    pub supervisor_drain: u64,
    /// Delivering a kill order to a child (signal or `KillUnit`).
    pub kill_route: u64,
    /// A killed child is reaped within this long.
    pub child_drain: u64,
    /// An attached client relaunches a lost supervisor within this long.
    pub client_relaunch_within: u64,
    /// A worker gives a lost supervisor this long before it acts alone.
    pub worker_lost_exit: u64,
    /// A worker with work re-records busy evidence this often.
    pub busy_refresh: u64,
    /// The worker's busy-evidence tick: how late a due refresh may be written.
    pub busy_tick: u64,
    /// A boot within this long of a crash revives the worker.
    pub revival_window: u64,
    /// How long a busy record stays fresh evidence.
    pub busy_evidence_ttl: u64,
    /// Bound on wall-clock disagreement between processes (journal timestamps).
    pub revival_clock_skew: u64,
    /// The supervisor waits this long for every worker's quiesce answer.
    pub quiesce_answer: u64,
    /// A quiesced run gate reopens by itself after this long.
    pub quiesce_hold: u64,
    /// Failures inside this monotonic window count towards giving up.
    pub restart_window: u64,
    /// The longest pause before restarting a failed worker.
    pub restart_pause_max: u64,
    /// A cancelled run gets this long after SIGINT before SIGTERM, and again
    /// before SIGKILL.
    pub cancel_grace: u64,
    /// A kernel keeps the shell it prepared for the next job (a template,
    /// the snapshot already restored) this long after its last job: an idle
    /// session holds no shell beyond its own.
    pub template_idle: u64,
}

/// The daemon's timeouts.
pub const TM: Tm = Tm {
    stop_grace: 3_000,
    kernel_teardown: 2_000,
    harness_close: 1_000,
    launcher_wait: 7_000,
    supervisor_drain: 5_000,
    kill_route: 1_000,
    child_drain: 1_000,
    client_relaunch_within: 60_000,
    worker_lost_exit: 300_000,
    busy_refresh: 300_000,
    busy_tick: 10_000,
    revival_window: 1_500_000,
    busy_evidence_ttl: 1_810_000,
    revival_clock_skew: 60_000,
    quiesce_answer: 2_000,
    quiesce_hold: 5_000,
    restart_window: 900_000,
    restart_pause_max: 30_000,
    cancel_grace: 1_000,
    template_idle: 60_000,
};

/// `CLIENT_RELAUNCH_WITHIN_MS` of the specification.
pub const CLIENT_RELAUNCH_WITHIN_MS: u64 = TM.client_relaunch_within;
/// `WORKER_LOST_EXIT_DEFAULT_MS` of the specification.
pub const WORKER_LOST_EXIT_DEFAULT_MS: u64 = TM.worker_lost_exit;
/// `QUIESCE_ANSWER_MS` of the specification.
pub const QUIESCE_ANSWER_MS: u64 = TM.quiesce_answer;
/// `QUIESCE_HOLD_MS` of the specification.
pub const QUIESCE_HOLD_MS: u64 = TM.quiesce_hold;
/// `REVIVAL_CLOCK_SKEW_MS` of the specification.
pub const REVIVAL_CLOCK_SKEW_MS: u64 = TM.revival_clock_skew;
/// The busy refresh interval (5 minutes).
pub const BUSY_REFRESH_MS: u64 = TM.busy_refresh;
/// The revival window (25 minutes).
pub const REVIVAL_WINDOW_MS: u64 = TM.revival_window;
/// The restart window (15 minutes, monotonic).
pub const RESTART_WINDOW_MS: u64 = TM.restart_window;
/// The cancel grace: SIGINT, this long, SIGTERM, this long, SIGKILL.
pub const CANCEL_GRACE_MS: u64 = TM.cancel_grace;
/// Output is group-committed: fsynced at most this long after it was
/// written (and at its run's end). Not a law's timeout: it bounds what a
/// power cut can take, never what a crash of a process can.
pub const OUTPUT_SYNC_MS: u64 = 200;
/// The longest `output_sync_ms` a configuration may set.
pub const OUTPUT_SYNC_MAX_MS: u64 = 60_000;
/// How long the worker waits for a live client to read its output before
/// it stops waiting and the client catches up from the transcript.
pub const FOLLOWER_PATIENCE_MS: u64 = 100;
/// How long the kernel holds the first bytes of a UTF-8 character cut at
/// the end of a read for the rest of it, before storing them as they are.
pub const UTF8_HOLD_MS: u64 = 50;
/// How long a catch-up that found nothing new waits before reading again.
pub const CATCH_UP_RETRY_MS: u64 = 50;
/// How long a daemon starting on the socket of a daemon that is ending
/// (a replacement: the old one removed its socket and is stopping) waits
/// for it to release the state directory's lock. Not a law's timeout: a
/// daemon on another socket is refused at once.
pub const STATE_LOCK_HANDOVER_MS: u64 = 10_000;
/// `idle_stop_ms` by default: a session left alone for an hour gives back
/// its worker and kernel (its shell state waits in the snapshot). Not a
/// law's timeout: nothing waits for it.
pub const IDLE_STOP_DEFAULT_MS: u64 = 3_600_000;
/// How often the supervisor looks for sessions due for an idle stop: how
/// late past `idle_stop_ms` a stop may begin.
pub const IDLE_STOP_TICK_MS: u64 = 250;
/// How long `eukhe mcp`'s `bash` tool waits for its command by default
/// before it answers with the output so far, the command still running in
/// the session. Not a law's timeout: it stays below the request timeouts
/// MCP clients commonly use (60 s), so the agent hears back before its
/// client gives up on the call.
pub const MCP_BASH_TIMEOUT_DEFAULT_MS: u64 = 30_000;
/// How long a request naming a session waits for that session's idle stop
/// or removal to finish before it is answered: the quiesce answer, the
/// worker's stop (asked, then forced, each within the stop grace, then the
/// kill route and the child drain) and up to 20 s more for a kernel unit
/// to go down under systemd (its `TimeoutStopSec`, 6 s, then SIGKILL).
pub const SESSION_SETTLE_MS: u64 =
    TM.quiesce_answer + 2 * TM.stop_grace + TM.kill_route + TM.child_drain + 20_000;

/// The latest output line of a session goes out on the event stream at
/// most this often (`eukhe events`, `eukhe top`): a flood of output never
/// floods the stream. Not a law's timeout: nothing waits for it.
pub const EVENT_OUTPUT_LINE_MS: u64 = 1_000;
/// How often `eukhe top` redraws without an event: elapsed times tick.
pub const TOP_TICK_MS: u64 = 1_000;
/// How often a client that lost the daemon's event stream tries again.
pub const EVENTS_RECONNECT_MS: u64 = 200;
/// How long a stopping daemon gives its event subscribers to read the
/// last events (its own stop) before it ends.
pub const EVENTS_FLUSH_MS: u64 = 200;

/// One ordering relation: `waiter >= sum(waits_for)`.
pub struct Relation {
    /// Index into [`TIMEOUT_NAMES`] of the timeout that waits.
    pub waiter: usize,
    /// Indices of the timeouts it waits for.
    pub waits_for: &'static [usize],
    /// Why the waiter waits for them, in the specification's words.
    pub why: &'static str,
}

const STOP_GRACE: usize = 0;
const KERNEL_TEARDOWN: usize = 1;
const HARNESS_CLOSE: usize = 2;
const LAUNCHER_WAIT: usize = 3;
const SUPERVISOR_DRAIN: usize = 4;
const KILL_ROUTE: usize = 5;
const CHILD_DRAIN: usize = 6;
const CLIENT_RELAUNCH_WITHIN: usize = 7;
const WORKER_LOST_EXIT: usize = 8;
const BUSY_REFRESH: usize = 9;
const BUSY_TICK: usize = 10;
const REVIVAL_WINDOW: usize = 11;
const BUSY_EVIDENCE_TTL: usize = 12;
const QUIESCE_ANSWER: usize = 14;
const QUIESCE_HOLD: usize = 15;
const RESTART_WINDOW: usize = 16;
const RESTART_PAUSE_MAX: usize = 17;
const CANCEL_GRACE: usize = 18;

/// The ordering relations, in the order the model checks them.
pub const ORDERING: [Relation; 8] = [
    Relation {
        waiter: STOP_GRACE,
        waits_for: &[KERNEL_TEARDOWN, HARNESS_CLOSE],
        why: "stop grace covers kernel teardown and harness close",
    },
    Relation {
        waiter: STOP_GRACE,
        waits_for: &[CANCEL_GRACE, KILL_ROUTE],
        why: "a stop outlasts a cancel's first grace plus the delivery of its kill",
    },
    Relation {
        waiter: SUPERVISOR_DRAIN,
        waits_for: &[STOP_GRACE, KILL_ROUTE, CHILD_DRAIN],
        why: "a parent's kill of a child covers kill route and child drain",
    },
    Relation {
        waiter: LAUNCHER_WAIT,
        waits_for: &[QUIESCE_ANSWER, SUPERVISOR_DRAIN],
        why: "launcher waits for the whole supervisor drain",
    },
    Relation {
        waiter: WORKER_LOST_EXIT,
        waits_for: &[CLIENT_RELAUNCH_WITHIN, LAUNCHER_WAIT],
        why: "a lost worker sees a relaunched supervisor before exit",
    },
    Relation {
        waiter: BUSY_EVIDENCE_TTL,
        waits_for: &[REVIVAL_WINDOW, BUSY_REFRESH, BUSY_TICK],
        why: "busy evidence outlives one refresh",
    },
    Relation {
        waiter: QUIESCE_HOLD,
        waits_for: &[QUIESCE_ANSWER, KILL_ROUTE],
        why: "a quiesced gate stays closed after the answer phase",
    },
    Relation {
        waiter: RESTART_WINDOW,
        // Six crash-loop steps (the give-up count), each a whole stop grace
        // and the longest pause: a crash loop is given up, never restarted
        // forever because its failures aged out of the window.
        waits_for: &[
            STOP_GRACE,
            RESTART_PAUSE_MAX,
            STOP_GRACE,
            RESTART_PAUSE_MAX,
            STOP_GRACE,
            RESTART_PAUSE_MAX,
            STOP_GRACE,
            RESTART_PAUSE_MAX,
            STOP_GRACE,
            RESTART_PAUSE_MAX,
            STOP_GRACE,
            RESTART_PAUSE_MAX,
        ],
        why: "the restart window holds the give-up count of crash-loop steps",
    },
];

impl Tm {
    /// The values in [`TIMEOUT_NAMES`] order.
    pub fn values(&self) -> [u64; 20] {
        [
            self.stop_grace,
            self.kernel_teardown,
            self.harness_close,
            self.launcher_wait,
            self.supervisor_drain,
            self.kill_route,
            self.child_drain,
            self.client_relaunch_within,
            self.worker_lost_exit,
            self.busy_refresh,
            self.busy_tick,
            self.revival_window,
            self.busy_evidence_ttl,
            self.revival_clock_skew,
            self.quiesce_answer,
            self.quiesce_hold,
            self.restart_window,
            self.restart_pause_max,
            self.cancel_grace,
            self.template_idle,
        ]
    }

    /// The timeouts from values in [`TIMEOUT_NAMES`] order (the inverse of
    /// [`Tm::values`]).
    pub fn from_values(v: [u64; 20]) -> Tm {
        Tm {
            stop_grace: v[0],
            kernel_teardown: v[1],
            harness_close: v[2],
            launcher_wait: v[3],
            supervisor_drain: v[4],
            kill_route: v[5],
            child_drain: v[6],
            client_relaunch_within: v[7],
            worker_lost_exit: v[8],
            busy_refresh: v[9],
            busy_tick: v[10],
            revival_window: v[11],
            busy_evidence_ttl: v[12],
            revival_clock_skew: v[13],
            quiesce_answer: v[14],
            quiesce_hold: v[15],
            restart_window: v[16],
            restart_pause_max: v[17],
            cancel_grace: v[18],
            template_idle: v[19],
        }
    }
}

/// Whether each relation of [`ORDERING`] holds for `tm`, in order.
/// Sums saturate, so no choice of values can overflow.
pub fn relations_hold(tm: &Tm) -> [bool; ORDERING.len()] {
    let values = tm.values();
    ORDERING.map(|relation| {
        let needed = relation
            .waits_for
            .iter()
            .fold(0u64, |sum, &i| sum.saturating_add(values[i]));
        values[relation.waiter] >= needed
    })
}

/// The ordering law: every timeout is at least the sum of those it waits for.
pub fn timeouts_ordered(tm: &Tm) -> bool {
    relations_hold(tm).iter().all(|&holds| holds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_timeouts_are_ordered() {
        assert!(timeouts_ordered(&TM), "{:?}", relations_hold(&TM));
    }

    #[test]
    fn shortening_any_waiter_below_its_sum_breaks_the_order() {
        for (index, relation) in ORDERING.iter().enumerate() {
            let mut values = TM.values();
            let needed: u64 = relation.waits_for.iter().map(|&i| values[i]).sum();
            values[relation.waiter] = needed - 1;
            let tm = Tm::from_values(values);
            assert!(!relations_hold(&tm)[index], "{}", relation.why);
        }
    }

    #[test]
    fn the_specification_constants() {
        assert_eq!(CLIENT_RELAUNCH_WITHIN_MS, 60_000);
        assert_eq!(WORKER_LOST_EXIT_DEFAULT_MS, 300_000);
        assert_eq!(BUSY_REFRESH_MS, 300_000);
        assert_eq!(REVIVAL_WINDOW_MS, 1_500_000);
        assert_eq!(RESTART_WINDOW_MS, 900_000);
    }

    #[test]
    fn a_stop_outlasts_a_cancel_first_grace_and_its_kill() {
        let stop_relation = ORDERING
            .iter()
            .position(|r| r.waiter == STOP_GRACE && r.waits_for.contains(&CANCEL_GRACE))
            .expect("the cancel grace is ordered against the stop grace");
        let mut tm = TM;
        tm.cancel_grace = tm.stop_grace - tm.kill_route;
        assert!(relations_hold(&tm)[stop_relation]);
        tm.cancel_grace += 1;
        assert!(!relations_hold(&tm)[stop_relation]);
        assert!(!timeouts_ordered(&tm));
    }

    #[test]
    fn tm_wire_rejects_unknown_fields() {
        let json = serde_json::to_value(TM).unwrap();
        let back: Tm = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, TM);
        let mut extra = json;
        extra["surprise"] = 1.into();
        assert!(serde_json::from_value::<Tm>(extra).is_err());
    }
}
