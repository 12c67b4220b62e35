//! The core on a fake clock: every deadline is met exactly, and nothing
//! happens before it.

use super::*;

const GRACE: u64 = 2_000;
const IDLE: u64 = 60_000;

fn core(claimed: bool, now: u64) -> KernelCore {
    KernelCore::new(
        CoreTiming {
            cancel_grace: GRACE,
            template_idle: IDLE,
        },
        claimed,
        now,
    )
}

fn actions(core: &mut KernelCore) -> Vec<Action> {
    std::iter::from_fn(|| core.poll_action()).collect()
}

fn signal(signal: Signal) -> Action {
    Action::Signal {
        job: "r1".into(),
        group: 77,
        signal,
    }
}

/// Advance to `now` the way a driver does: nothing is handled before the
/// core's deadline.
fn advance(core: &mut KernelCore, now: u64) -> Vec<Action> {
    if core.poll_timeout().is_some_and(|at| at <= now) {
        core.handle_timeout(now);
    }
    actions(core)
}

#[test]
fn a_cancel_escalates_at_exactly_its_deadlines_and_nothing_before() {
    let mut core = core(true, 0);
    core.job_started("r1", 1_000);
    core.cancel("r1", Some(77), 1_000);
    assert_eq!(actions(&mut core), vec![signal(Signal::Interrupt)]);
    assert_eq!(core.poll_timeout(), Some(1_000 + GRACE));
    assert_eq!(advance(&mut core, 1_000 + GRACE - 1), vec![]);
    assert_eq!(
        advance(&mut core, 1_000 + GRACE),
        vec![signal(Signal::Terminate)]
    );
    assert_eq!(advance(&mut core, 1_000 + 2 * GRACE - 1), vec![]);
    assert_eq!(
        advance(&mut core, 1_000 + 2 * GRACE),
        vec![signal(Signal::Kill)]
    );
    // Killed, the group is probed until the grace is over, then the end is
    // recorded whether or not it was seen gone.
    let killed_at = 1_000 + 2 * GRACE;
    assert_eq!(core.poll_timeout(), Some(killed_at + POLL_MS));
    let mut now = killed_at;
    let mut probes = 0;
    while let Some(at) = core.poll_timeout() {
        assert!(at > now, "a deadline that does not move on");
        now = at;
        match advance(&mut core, now).as_slice() {
            [Action::ProbeGroup { group: 77, .. }] => probes += 1,
            [Action::EndKilled { job }] => {
                assert_eq!(job, "r1");
                break;
            }
            other => panic!("unexpected {other:?} at {now}"),
        }
    }
    assert_eq!(
        now,
        killed_at + GRACE,
        "the end is recorded at the deadline"
    );
    assert_eq!(probes, GRACE.div_ceil(POLL_MS) - 1);
}

#[test]
fn a_killed_group_seen_gone_ends_at_once_and_an_ended_job_stops_the_escalation() {
    let mut core = core(true, 0);
    core.job_started("r1", 0);
    core.cancel("r1", Some(77), 0);
    advance(&mut core, GRACE);
    advance(&mut core, 2 * GRACE);
    core.group_gone("r1");
    assert_eq!(
        actions(&mut core),
        vec![Action::EndKilled { job: "r1".into() }]
    );
    assert_eq!(advance(&mut core, 10 * GRACE), vec![]);

    // A group gone before SIGKILL is left to its reporter.
    core.job_started("r2", 0);
    core.cancel("r2", Some(78), 0);
    actions(&mut core);
    core.group_gone("r2");
    assert_eq!(actions(&mut core), vec![]);
    // Its end came: no SIGTERM follows.
    core.job_ended("r2", GRACE - 1);
    assert_eq!(advance(&mut core, GRACE), vec![]);
}

#[test]
fn a_cancel_before_the_group_is_known_waits_for_it_up_to_the_grace() {
    let mut core = core(true, 0);
    core.job_started("r1", 0);
    core.cancel("r1", None, 0);
    assert_eq!(actions(&mut core), vec![]);
    core.group_started("r1", 77, 500);
    assert_eq!(actions(&mut core), vec![signal(Signal::Interrupt)]);
    assert_eq!(core.poll_timeout(), Some(500 + GRACE));

    core.job_started("r2", 0);
    core.hang_up("r2", None, 0);
    core.cancel("r2", None, 0);
    assert_eq!(advance(&mut core, GRACE - 1), vec![]);
    let mut given_up = advance(&mut core, GRACE);
    given_up.retain(|a| matches!(a, Action::GroupNeverReported { .. }));
    assert_eq!(
        given_up,
        vec![
            Action::GroupNeverReported {
                job: "r2".into(),
                want: Want::Cancel
            },
            Action::GroupNeverReported {
                job: "r2".into(),
                want: Want::HangUp
            },
        ]
    );
    // Too late: the group said after the grace changes nothing.
    core.group_started("r2", 78, GRACE + 1);
    assert_eq!(actions(&mut core), vec![]);
}

#[test]
fn a_hang_up_goes_once_the_group_is_known() {
    let mut core = core(true, 0);
    core.job_started("b1", 0);
    core.hang_up("b1", Some(9), 0);
    assert_eq!(
        actions(&mut core),
        vec![Action::HangUp {
            job: "b1".into(),
            group: 9
        }]
    );
    core.job_started("b2", 0);
    core.hang_up("b2", None, 0);
    core.group_started("b2", 10, 1);
    assert_eq!(
        actions(&mut core),
        vec![Action::HangUp {
            job: "b2".into(),
            group: 10
        }]
    );
    // A job that is not running is not hung up nor cancelled.
    core.hang_up("b3", Some(11), 0);
    core.cancel("b3", Some(11), 0);
    assert_eq!(actions(&mut core), vec![]);
}

#[test]
fn an_idle_sessions_templates_go_at_template_idle_and_not_before_nor_again() {
    let mut core = core(true, 0);
    core.job_started("b1", 1_000);
    assert_eq!(core.poll_timeout(), None, "a job runs: nothing is due");
    assert_eq!(advance(&mut core, 10 * IDLE), vec![]);
    core.job_ended("b1", 2_000);
    // Idle means more than `template_idle` since the last job.
    assert_eq!(core.poll_timeout(), Some(2_000 + IDLE + 1));
    assert_eq!(advance(&mut core, 2_000 + IDLE), vec![]);
    assert_eq!(
        advance(&mut core, 2_000 + IDLE + 1),
        vec![Action::DropIdleTemplates]
    );
    // Not again while the session stays idle.
    assert_eq!(core.poll_timeout(), None);
    assert_eq!(advance(&mut core, 100 * IDLE), vec![]);
    // The next job starts the idle clock again.
    core.job_started("b2", 200 * IDLE);
    core.job_ended("b2", 200 * IDLE + 5);
    assert_eq!(core.poll_timeout(), Some(200 * IDLE + 5 + IDLE + 1));
}

#[test]
fn a_spares_template_waits_for_the_claim_however_long_and_idles_from_it() {
    let mut core = core(false, 0);
    assert_eq!(core.poll_timeout(), None);
    assert_eq!(advance(&mut core, 100 * IDLE), vec![]);
    core.claimed(100 * IDLE);
    assert_eq!(core.poll_timeout(), Some(101 * IDLE + 1));
}

#[test]
fn a_job_is_running_from_its_start_to_its_end() {
    let mut core = core(true, 0);
    assert!(!core.job_running());
    core.job_started("r1", 1);
    core.job_started("b1", 1);
    core.job_ended("r1", 2);
    assert!(core.job_running());
    core.job_ended("b1", 3);
    assert!(!core.job_running());
    core.ended_before_reporter(5);
    assert!(core.reporter_after_end(5));
    assert!(!core.reporter_after_end(5), "told once");
    assert!(core.set_background(2));
    assert!(!core.set_background(2));
    assert_eq!(core.background(), 2);
}

#[test]
fn a_jobs_end_ends_what_waited_on_it_and_starts_the_idle_clock() {
    let mut core = core(true, 0);
    core.job_started("r1", 100);
    core.job_started("b1", 100);
    core.cancel("r1", Some(77), 200);
    core.hang_up("b1", None, 200);
    actions(&mut core);
    // Both end before any deadline: nothing more is sent, nothing waits.
    core.job_ended("r1", 300);
    core.job_ended("b1", 400);
    assert_eq!(
        core.poll_timeout(),
        Some(400 + IDLE + 1),
        "only the idle clock"
    );
    core.group_started("b1", 9, 500);
    core.group_gone("r1");
    assert_eq!(advance(&mut core, 400 + IDLE), vec![]);
    // A cancel of an ended job does nothing.
    core.cancel("r1", Some(77), 600);
    assert_eq!(actions(&mut core), vec![]);
}

fn running() -> WorkSet {
    WorkSet::EMPTY.with(crate::laws::work::WorkKind::Run)
}

fn record(state: BusyState, work: WorkSet) -> Action {
    Action::RecordEvidence { state, work }
}

#[test]
fn without_a_worker_busy_evidence_is_written_at_once_then_at_each_refresh_and_never_between() {
    use crate::laws::timing::BUSY_REFRESH_MS;
    let mut core = core(true, 0);
    core.worker_connected(false);
    // No work, nothing on record: nothing is ever due.
    assert_eq!(
        core.poll_timeout(),
        Some(IDLE + 1),
        "only the templates' drop"
    );
    core.job_started("r1", 1_000);
    core.set_work(running());
    // Work that is not on record: due at once.
    assert!(core.poll_timeout().is_some_and(|at| at <= 1_000));
    assert_eq!(
        advance(&mut core, 1_000),
        vec![record(BusyState::Busy, running())]
    );
    // Being written: asked for no second time.
    assert_eq!(core.poll_timeout(), None);
    assert_eq!(advance(&mut core, 1_500), vec![]);
    core.evidence_recorded(BusyState::Busy, 1_000);
    let refresh = 1_000 + BUSY_REFRESH_MS;
    assert_eq!(core.poll_timeout(), Some(refresh));
    assert_eq!(advance(&mut core, refresh - 1), vec![]);
    assert_eq!(
        advance(&mut core, refresh),
        vec![record(BusyState::Busy, running())]
    );
    // A failed write is asked for again after the retry pause, not before.
    core.evidence_failed(refresh);
    let retry = refresh + crate::laws::timing::KERNEL_EVIDENCE_RETRY_MS;
    assert_eq!(core.poll_timeout(), Some(retry));
    assert_eq!(advance(&mut core, retry - 1), vec![]);
    assert_eq!(
        advance(&mut core, retry),
        vec![record(BusyState::Busy, running())]
    );
    core.evidence_recorded(BusyState::Busy, retry);
    // The work ends: idle is due at once, then nothing more.
    core.job_ended("r1", retry + 10);
    core.set_work(WorkSet::EMPTY);
    assert_eq!(
        advance(&mut core, retry + 10),
        vec![record(BusyState::Idle, WorkSet::EMPTY)]
    );
    core.evidence_recorded(BusyState::Idle, retry + 10);
    assert_eq!(core.poll_timeout(), Some(retry + 10 + IDLE + 1));
}

#[test]
fn a_connected_worker_or_a_stop_leaves_busy_evidence_to_others() {
    let mut core = core(false, 0);
    core.set_work(running());
    core.worker_connected(true);
    assert_eq!(core.poll_timeout(), None);
    assert_eq!(advance(&mut core, 10 * IDLE), vec![]);
    // The worker leaves: the kernel records at once, whatever it recorded
    // before the worker came.
    core.worker_connected(false);
    assert_eq!(
        advance(&mut core, 10 * IDLE),
        vec![record(BusyState::Busy, running())]
    );
    core.evidence_recorded(BusyState::Busy, 10 * IDLE);
    core.worker_connected(true);
    core.worker_connected(false);
    assert_eq!(
        advance(&mut core, 10 * IDLE + 1),
        vec![record(BusyState::Busy, running())]
    );
    core.evidence_recorded(BusyState::Busy, 10 * IDLE + 1);
    core.stop();
    assert_eq!(core.poll_timeout(), None);
    assert_eq!(advance(&mut core, 100 * IDLE), vec![]);
}

#[test]
fn a_terminal_job_is_looked_at_once_quiet_and_its_waiting_is_told_on_change() {
    use crate::laws::waiting::{Foreground, Seen, WAITING_QUIET_MS};
    let blocked = Seen {
        foreground: Foreground::BlockedOnInput,
        unread_key_bytes: 0,
    };
    let look = Action::LookWaiting { job: "r1".into() };
    let tell = |waiting| Action::TellWaiting {
        job: "r1".into(),
        waiting,
    };
    let mut core = core(true, 0);
    core.job_started("r1", 1_000);
    core.watch_waiting("r1", 1_000);
    let quiet = 1_000 + WAITING_QUIET_MS;
    assert_eq!(core.poll_timeout(), Some(quiet));
    assert_eq!(advance(&mut core, quiet - 1), vec![]);
    assert_eq!(advance(&mut core, quiet), vec![look.clone()]);
    // Asked and not answered yet: the driver does not wake for it again.
    assert_eq!(core.poll_timeout(), None);
    core.waiting_looked("r1", blocked, quiet);
    assert_eq!(actions(&mut core), vec![tell(true)]);
    assert_eq!(core.waiting_jobs(), vec!["r1".to_string()]);
    // Output: not waiting, told at once, and the next look once quiet.
    core.terminal_output("r1", quiet + 100);
    assert_eq!(actions(&mut core), vec![tell(false)]);
    assert_eq!(core.poll_timeout(), Some(quiet + 100 + WAITING_QUIET_MS));
    let later = quiet + 100 + WAITING_QUIET_MS;
    assert_eq!(advance(&mut core, later), vec![look]);
    core.waiting_looked("r1", blocked, later);
    assert_eq!(actions(&mut core), vec![tell(true)]);
    // Its end clears it, and nothing is looked at after.
    core.job_ended("r1", later + 1);
    assert_eq!(actions(&mut core), vec![tell(false)]);
    assert!(core.waiting_jobs().is_empty());
    assert_eq!(
        core.poll_timeout(),
        Some(later + 1 + IDLE + 1),
        "the template's only"
    );
}

#[test]
fn keys_untell_waiting_and_a_stopping_kernel_looks_no_more() {
    use crate::laws::waiting::{Foreground, Seen, WAITING_QUIET_MS};
    let blocked = Seen {
        foreground: Foreground::BlockedOnInput,
        unread_key_bytes: 0,
    };
    let mut core = core(true, 0);
    core.job_started("r2", 0);
    core.watch_waiting("r2", 0);
    advance(&mut core, WAITING_QUIET_MS);
    core.waiting_looked("r2", blocked, WAITING_QUIET_MS);
    actions(&mut core);
    core.terminal_nudged("r2", 600);
    assert_eq!(
        actions(&mut core),
        vec![Action::TellWaiting {
            job: "r2".into(),
            waiting: false
        }]
    );
    core.stop();
    assert_eq!(core.poll_timeout(), None);
}
