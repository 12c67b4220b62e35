//! The ordering law of the timeouts: each timeout is at least the sum of
//! the timeouts it waits for, relation by relation, in the order the Bend
//! model (`bend/supervise.bend`, `Tm`) shares.

use super::Tm;

/// One ordering relation: `waiter >= sum(waits_for)`.
pub struct Relation {
    /// Index into [`TIMEOUT_NAMES`] of the timeout that waits.
    pub waiter: usize,
    /// Indices of the timeouts it waits for.
    pub waits_for: &'static [usize],
    /// Why the waiter waits for them, in the specification's words.
    pub why: &'static str,
}

pub(super) const STOP_GRACE: usize = 0;
pub(super) const KERNEL_TEARDOWN: usize = 1;
pub(super) const HARNESS_CLOSE: usize = 2;
pub(super) const LAUNCHER_WAIT: usize = 3;
pub(super) const SUPERVISOR_DRAIN: usize = 4;
pub(super) const KILL_ROUTE: usize = 5;
pub(super) const CHILD_DRAIN: usize = 6;
pub(super) const CLIENT_RELAUNCH_WITHIN: usize = 7;
pub(super) const WORKER_LOST_EXIT: usize = 8;
pub(super) const BUSY_REFRESH: usize = 9;
pub(super) const BUSY_TICK: usize = 10;
pub(super) const REVIVAL_WINDOW: usize = 11;
pub(super) const BUSY_EVIDENCE_TTL: usize = 12;
pub(super) const QUIESCE_ANSWER: usize = 14;
pub(super) const QUIESCE_HOLD: usize = 15;
pub(super) const RESTART_WINDOW: usize = 16;
pub(super) const RESTART_PAUSE_MAX: usize = 17;
pub(super) const CANCEL_GRACE: usize = 18;
pub(super) const DAEMON_START_WAIT: usize = 20;
pub(super) const WORKER_START_WAIT: usize = 21;
pub(super) const KERNEL_START_WAIT: usize = 22;
pub(super) const KERNEL_STOP_WAIT: usize = 23;
pub(super) const WORKER_UNIT_STOP: usize = 24;
pub(super) const KERNEL_UNIT_STOP: usize = 25;
pub(super) const SIGN_OF_LIFE: usize = 26;
pub(super) const SCHEDULING_SLACK: usize = 27;
pub(super) const RUN_TERM_GRACE: usize = 28;
pub(super) const KERNEL_TERM_WAIT: usize = 29;
pub(super) const WORKER_STOP_WAIT: usize = 30;
pub(super) const STATE_LOCK_HANDOVER: usize = 31;
pub(super) const SESSION_SETTLE: usize = 32;
pub(super) const WORKER_WATCHDOG: usize = 33;
pub(super) const SUPERVISOR_WATCHDOG: usize = 34;
pub(super) const SUPERVISOR_UNIT_STOP: usize = 35;
pub(super) const WORKER_ANSWER: usize = 36;

/// The specification's seven sentences, each relation of [`ORDERING`]
/// instantiates one of them (its `why` starts with it).
pub const SENTENCES: [&str; 7] = [
    "stop grace covers kernel teardown and harness close",
    "launcher waits for the whole supervisor drain",
    "a parent's kill of a child covers kill route and child drain",
    "a lost worker sees a relaunched supervisor before exit",
    "busy evidence outlives one refresh",
    "a quiesced gate stays closed after the answer phase",
    "the restart window holds the give-up count of crash-loop steps",
];

/// The ordering relations, in the order the model checks them. Each is a
/// wait the code performs (the waiter) over the waits it covers; where
/// the sum is tight, `scheduling_slack` is one of them.
pub const ORDERING: [Relation; 24] = [
    Relation {
        // The worker's orderly stop: its kernel's teardown, then closing
        // the transcript.
        waiter: STOP_GRACE,
        waits_for: &[KERNEL_TEARDOWN, HARNESS_CLOSE, SCHEDULING_SLACK],
        why: "stop grace covers kernel teardown and harness close",
    },
    Relation {
        waiter: STOP_GRACE,
        waits_for: &[CANCEL_GRACE, KILL_ROUTE],
        why: "stop grace covers kernel teardown and harness close: a cancelled run's first grace and its kill's delivery",
    },
    Relation {
        waiter: SUPERVISOR_DRAIN,
        waits_for: &[STOP_GRACE, KILL_ROUTE, CHILD_DRAIN, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: the supervisor's drain of its workers",
    },
    Relation {
        waiter: LAUNCHER_WAIT,
        waits_for: &[QUIESCE_ANSWER, SUPERVISOR_DRAIN, SCHEDULING_SLACK],
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
    Relation {
        waiter: KERNEL_STOP_WAIT,
        waits_for: &[KERNEL_UNIT_STOP, KILL_ROUTE, CHILD_DRAIN],
        why: "a parent's kill of a child covers kill route and child drain: a kernel unit's stop",
    },
    Relation {
        // The kernel's own teardown: SIGTERM to its processes, their
        // grace, SIGKILL to what is left and its reaping.
        waiter: KERNEL_TEARDOWN,
        waits_for: &[RUN_TERM_GRACE, CHILD_DRAIN, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: a kernel ending its processes",
    },
    Relation {
        waiter: KERNEL_TERM_WAIT,
        waits_for: &[KERNEL_TEARDOWN, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: SIGTERM to a kernel process waits out its teardown",
    },
    Relation {
        waiter: KERNEL_UNIT_STOP,
        waits_for: &[KERNEL_TEARDOWN, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: the manager's stop of a kernel unit waits out its teardown",
    },
    Relation {
        waiter: KERNEL_STOP_WAIT,
        waits_for: &[KERNEL_TERM_WAIT, KILL_ROUTE, CHILD_DRAIN],
        why: "a parent's kill of a child covers kill route and child drain: a kernel process's stop",
    },
    Relation {
        waiter: WORKER_UNIT_STOP,
        waits_for: &[STOP_GRACE, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: the manager's stop of a worker unit waits out its stop grace",
    },
    Relation {
        waiter: WORKER_STOP_WAIT,
        waits_for: &[WORKER_UNIT_STOP, KILL_ROUTE, CHILD_DRAIN],
        why: "a parent's kill of a child covers kill route and child drain: a worker unit's stop",
    },
    Relation {
        waiter: WORKER_START_WAIT,
        waits_for: &[WORKER_STOP_WAIT, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: a worker started again after a stop",
    },
    Relation {
        waiter: KERNEL_START_WAIT,
        waits_for: &[KERNEL_STOP_WAIT, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: a kernel started again after a stop",
    },
    Relation {
        waiter: STATE_LOCK_HANDOVER,
        waits_for: &[SUPERVISOR_DRAIN, SCHEDULING_SLACK],
        why: "launcher waits for the whole supervisor drain: the next daemon waits for the old one's lock",
    },
    Relation {
        waiter: DAEMON_START_WAIT,
        waits_for: &[STATE_LOCK_HANDOVER, SCHEDULING_SLACK],
        why: "launcher waits for the whole supervisor drain: a client waits for the daemon it started",
    },
    Relation {
        waiter: SESSION_SETTLE,
        waits_for: &[
            QUIESCE_ANSWER,
            STOP_GRACE,
            KILL_ROUTE,
            CHILD_DRAIN,
            KERNEL_STOP_WAIT,
            SCHEDULING_SLACK,
        ],
        why: "a parent's kill of a child covers kill route and child drain: a request waits out its session's whole stop",
    },
    Relation {
        waiter: WORKER_WATCHDOG,
        waits_for: &[SIGN_OF_LIFE, SIGN_OF_LIFE, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: a watchdog hears two signs of life before it kills",
    },
    Relation {
        waiter: SUPERVISOR_WATCHDOG,
        waits_for: &[SUPERVISOR_DRAIN, SCHEDULING_SLACK],
        why: "launcher waits for the whole supervisor drain: the manager's watchdog outlasts it",
    },
    Relation {
        waiter: SUPERVISOR_UNIT_STOP,
        waits_for: &[SUPERVISOR_DRAIN, SCHEDULING_SLACK],
        why: "launcher waits for the whole supervisor drain: the manager's stop of the supervisor",
    },
    Relation {
        waiter: WORKER_START_WAIT,
        waits_for: &[WORKER_ANSWER, SCHEDULING_SLACK],
        why: "a parent's kill of a child covers kill route and child drain: a launched worker's start wait covers one hello it never answers",
    },
];

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
