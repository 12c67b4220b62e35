//! The decisions about a run's end, on captures made by hand.

use super::*;
use crate::session::snapshot::Snapshot;

fn capture() -> Capture {
    Capture {
        snapshot: Snapshot::fresh("/", std::iter::empty()),
        dropped: Vec::new(),
        status: Some(0),
        has_jobs: false,
        not_run: false,
        lost_cwd: None,
    }
}

#[test]
fn a_whole_capture_is_merged_and_tells_nothing() {
    let plan = plan_end(Captured::Whole(&capture()), 3, false);
    let quiet = EndPlan {
        merge: true,
        signal: None,
        notice: None,
    };
    assert_eq!(plan, quiet);
}

#[test]
fn functions_that_shadow_builtins_are_told_and_the_rest_merged() {
    let mut dropped = capture();
    dropped.dropped = vec!["cd".into()];
    let plan = plan_end(Captured::Whole(&dropped), 0, false);
    assert!(plan.merge);
    assert_eq!(plan.notice, Some(EndNotice::NotKept(vec!["cd".into()])));
}

#[test]
fn a_command_that_did_not_run_leaves_the_state_and_says_why() {
    let mut lost = capture();
    lost.not_run = true;
    lost.lost_cwd = Some("/gone".into());
    let plan = plan_end(Captured::Whole(&lost), 1, false);
    assert!(!plan.merge);
    assert_eq!(plan.notice, Some(EndNotice::LostCwd("/gone".into())));
    lost.lost_cwd = None;
    assert_eq!(plan_end(Captured::Whole(&lost), 1, false).notice, None);
}

#[test]
fn an_unreadable_capture_keeps_nothing_and_says_so() {
    let plan = plan_end(Captured::Unreadable, 0, false);
    assert!(!plan.merge);
    assert_eq!(plan.notice, Some(EndNotice::Unreadable));
}

#[test]
fn no_capture_is_a_signal_or_a_shell_the_command_ended() {
    let killed = plan_end(Captured::Nothing, 128 + 9, false);
    assert_eq!(
        (killed.merge, killed.signal, killed.notice),
        (false, Some(9), None)
    );
    let exited = plan_end(Captured::Nothing, 1, false);
    assert_eq!(exited.signal, None);
    assert_eq!(exited.notice, Some(EndNotice::EndedItsShell));
    assert_eq!(
        plan_end(Captured::Nothing, 1, true).notice,
        None,
        "cancelled"
    );
    assert_eq!(plan_end(Captured::Nothing, 128, false).signal, None);
    assert_eq!(plan_end(Captured::Nothing, 128 + 65, false).signal, None);
}

#[test]
fn the_last_close_looks_for_the_end_or_settles_it() {
    assert_eq!(on_close(1, false), OnClose::Wait);
    assert_eq!(on_close(1, true), OnClose::Wait);
    assert_eq!(on_close(0, false), OnClose::LookForEnd);
    assert_eq!(on_close(0, true), OnClose::Settle);
}

#[test]
fn a_run_ends_at_its_close_only_after_a_whole_capture_with_no_jobs_left() {
    let mut whole = capture();
    whole.status = Some(4);
    assert_eq!(ends_at_close(&whole), Some(4));
    whole.has_jobs = true;
    assert_eq!(ends_at_close(&whole), None, "its own jobs still run");
    whole.has_jobs = false;
    whole.status = None;
    assert_eq!(ends_at_close(&whole), None, "its command closed them");
}

#[test]
fn a_job_is_forgotten_only_once_ended_and_read() {
    assert!(forgettable(true, 0));
    assert!(!forgettable(true, 1));
    assert!(!forgettable(false, 0));
}
