//! The template decisions, with names for handles and a liveness the test
//! sets: which shell takes a job, what an end asks, what a claim does.

use super::*;

fn alive(_: &&str) -> bool {
    true
}

fn dead(_: &&str) -> bool {
    false
}

/// A book with a current template `t1` made over version 0, whose shell
/// said it is ready.
fn ready_book() -> TemplateBook<&'static str> {
    let mut book = TemplateBook::default();
    assert_eq!(book.made("t1"), None);
    assert_eq!(book.reported_ready(|t| *t == "t1"), None);
    book
}

#[test]
fn a_job_goes_to_the_shell_until_a_template_reports_ready() {
    let mut book = TemplateBook::default();
    assert_eq!(book.take_job(alive), Taker::Shell);
    book.made("t1");
    assert_eq!(book.take_job(alive), Taker::Shell, "not ready yet");
    assert_eq!(book.reported_ready(|t| *t == "other"), None);
    assert_eq!(book.take_job(alive), Taker::Shell, "another said ready");
    book.reported_ready(|t| *t == "t1");
    assert_eq!(book.take_job(alive), Taker::Current { arm_first: false });
}

#[test]
fn a_template_whose_shell_died_or_whose_snapshot_is_old_takes_no_job() {
    let mut book = ready_book();
    assert_eq!(book.take_job(dead), Taker::Shell);
    book.snapshot_changed();
    assert!(book.needs_template());
    assert_eq!(book.take_job(alive), Taker::Shell);
}

#[test]
fn the_second_job_before_an_end_asks_for_a_job_shell_first() {
    let mut book = ready_book();
    assert_eq!(book.take_job(alive), Taker::Current { arm_first: false });
    assert_eq!(book.take_job(alive), Taker::Current { arm_first: true });
}

#[test]
fn an_end_arms_a_ready_template_once_and_makes_a_missing_or_stale_one() {
    let book: TemplateBook<&str> = TemplateBook::default();
    assert_eq!(book.after_end(alive), AfterEnd::Make);
    let mut book = ready_book();
    assert_eq!(
        book.after_end(alive),
        AfterEnd::Nothing,
        "a job shell waits"
    );
    book.take_job(alive);
    assert_eq!(book.after_end(alive), AfterEnd::Arm);
    assert_eq!(book.after_end(dead), AfterEnd::Nothing);
    book.armed();
    assert_eq!(book.after_end(alive), AfterEnd::Nothing);
    book.snapshot_changed();
    assert_eq!(book.after_end(alive), AfterEnd::Make);
    assert_eq!(book.made("t2"), Some("t1"), "the stale one is retired");
    assert!(!book.needs_template());
}

#[test]
fn a_claim_turns_the_spares_template_into_the_first_jobs_taker() {
    let mut book = ready_book();
    let spare = book
        .claim()
        .expect("the spare's template over the blank state");
    assert!(
        book.needs_template(),
        "the session's own is made after a job"
    );
    book.restored_ahead(spare);
    assert_eq!(book.take_job(alive), Taker::Claim);
    assert_eq!(
        book.take_job(alive),
        Taker::Shell,
        "its one job shell is used"
    );
}

#[test]
fn the_claims_template_goes_once_the_sessions_own_is_ready() {
    let mut book = ready_book();
    let spare = book.claim().unwrap();
    book.restored_ahead(spare);
    assert_eq!(book.after_end(alive), AfterEnd::Make);
    assert_eq!(book.made("t2"), None);
    assert_eq!(book.take_job(alive), Taker::Claim, "t2 is not ready yet");
    assert_eq!(book.reported_ready(|t| *t == "t2"), Some("t1"));
    assert_eq!(book.handle_mut(Slot::Claim), None);
    assert_eq!(book.take_job(alive), Taker::Current { arm_first: false });
}

#[test]
fn a_claim_leaves_a_template_over_anything_but_the_blank_state() {
    let mut book = ready_book();
    book.snapshot_changed();
    assert!(book.claim().is_none());
    assert_eq!(book.handle_mut(Slot::Current), Some(&mut "t1"));
}

#[test]
fn an_idle_drop_retires_both_templates() {
    let mut book = ready_book();
    let spare = book.claim().unwrap();
    book.restored_ahead(spare);
    book.made("t2");
    assert_eq!(book.drop_all(), vec!["t2", "t1"]);
    assert_eq!(book.take_job(alive), Taker::Shell);
    assert_eq!(book.after_end(alive), AfterEnd::Make);
    assert!(book.drop_all().is_empty());
}

#[test]
fn a_claimed_sessions_templates_stay_until_the_idle_deadline_then_both_go() {
    use crate::kernel::core::{Action, CoreTiming, KernelCore};
    let timing = CoreTiming {
        cancel_grace: 2_000,
        template_idle: 60_000,
    };
    let mut core = KernelCore::new(timing, false, 0);
    let mut book = ready_book();
    assert_eq!(core.poll_timeout(), None, "a spare waits for its claim");
    core.claimed(5_000);
    let spare = book.claim().unwrap();
    book.restored_ahead(spare);
    assert_eq!(book.made("t2"), None);
    let deadline = core.poll_timeout().expect("idle from the claim");
    assert_eq!(deadline, 5_000 + 60_000 + 1);
    core.handle_timeout(deadline - 1);
    assert_eq!(core.poll_action(), None, "nothing before the deadline");
    assert!(book.handle_mut(Slot::Claim).is_some());
    assert!(book.handle_mut(Slot::Current).is_some());
    core.handle_timeout(deadline);
    assert_eq!(core.poll_action(), Some(Action::DropIdleTemplates));
    assert_eq!(book.drop_all(), vec!["t2", "t1"]);
    assert_eq!(core.poll_timeout(), None, "once per idle spell");
}
