//! Runs: the decisions of a run's lifecycle between the worker, which owns
//! the transcript, and the session's kernel, which holds the shell and
//! executes the runs handed to it.
//!
//! Model: `bend/runs.bend`. Laws (`LAWS.bend`, section runs):
//! `run_starts_once`, `run_end_recorded_once`, `live_run_never_interrupted`,
//! `orphan_exit_keeps_runs`, `withdrawn_input_never_runs`,
//! `runs_one_at_a_time_in_order`.
//!
//! The specification (D1) says a worker whose supervisor stays lost exits
//! "with work: records busy, aborts nothing; a later supervisor resumes",
//! and that a live worker of another build stops "as lost workers do (work
//! stays resumable)". Its reading notes: "Aborts nothing" is read literally:
//! a worker that leaves stops no run; the run's processes keep running and
//! their output keeps being kept, and a later worker resumes recording it.
//! "Marking a run interrupted is right only when its processes are really
//! gone (the kernel died, the machine rebooted)." And "Withdrawn input
//! (cancelled before it ran) is not work and never runs."
//!
//! Issue 11 (items 4 and 5) makes this durable: a worker reconnects to a
//! live kernel and "records the run's end exactly once. No run is ever
//! executed twice." "Only when the kernel itself is gone (reboot, kernel
//! crash, `shutdown --force`) is the run in flight marked interrupted (never
//! rerun)."
//!
//! Two durable records meet here:
//! - the transcript's *book*: for each input, the latest of its records
//!   ([`RunRecord`]); a run's start is stored before it is handed to the
//!   kernel, so a worker that crashes between the two leaves a start that no
//!   kernel ever accepted;
//! - the kernel's *spool* ([`SpoolRun`]): "accepted run N" is on disk before
//!   the kernel executes N, "ended N with status S" when it ends. The spool
//!   outlives the kernel, so the worker that starts the next kernel can
//!   still read it.
//!
//! From these the worker decides, on every (re)connect, what to do with each
//! run in flight ([`reconcile`]): a run no kernel accepted is handed (it
//! never ran); a run the live kernel accepted is followed; a run the kernel
//! ended while no worker was there has its end stored; a run accepted by a
//! kernel that is gone is stored as interrupted and never runs again. The
//! kernel accepts a run only once ([`kernel_accepts`]) and the book stores
//! an end only once ([`end_is_recorded`]), so a hand or an end delivered
//! twice (a worker that crashed after handing, a kernel catching a new
//! worker up from its spool) does nothing the second time.
//!
//! All of it is pure: no I/O, no clock.

use std::collections::BTreeMap;

/// A run's number in its session (runs are numbered in input order).
pub type RunId = u64;

/// What the transcript holds of one input (the latest of its records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunRecord {
    /// Sent, waiting for its turn.
    Queued,
    /// Withdrawn before it started: not work, never runs.
    Withdrawn,
    /// Its start is stored; its end is not.
    Started,
    /// Finished with a status (cancelled too) or interrupted.
    Ended,
}

/// What a kernel's spool holds of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpoolRun {
    /// The kernel accepted it (and so began executing it); no end yet.
    Accepted,
    /// It ended with this exit status.
    Ended {
        /// The run's exit status.
        status: i32,
    },
}

/// The kernel as a worker finds it when it (re)connects.
#[derive(Clone, Copy, Debug)]
pub struct KernelView<'a> {
    /// Whether the kernel process lives (its processes, and so its runs).
    pub alive: bool,
    /// Its spool, read from disk: a dead kernel's spool is still there.
    pub spool: &'a BTreeMap<RunId, SpoolRun>,
}

/// What a (re)connecting worker does with one run in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAction {
    /// Its start is stored but no kernel ever accepted it: hand it to the
    /// kernel now (it never ran).
    Hand(RunId),
    /// The live kernel runs it still: follow its output and wait for its end.
    Follow(RunId),
    /// The kernel ended it while no worker was there: store this end (once).
    RecordEnd(RunId, i32),
    /// A kernel that is gone accepted it and never ended it: store it as
    /// interrupted (it never runs again).
    RecordInterrupted(RunId),
}

/// What to do, on (re)connecting to the session's kernel, with every run
/// whose start is stored and whose end is not (in run order).
///
/// The spool decides, not the worker's memory (which a crash loses): no
/// record, the run never ran and is handed; accepted, it is followed while
/// its kernel lives and interrupted once it is gone (its processes are gone
/// with it); ended, its end is stored whether or not the kernel still lives.
pub fn reconcile(book: &BTreeMap<RunId, RunRecord>, kernel: KernelView) -> Vec<RunAction> {
    book.iter()
        .filter(|&(_, &record)| record == RunRecord::Started)
        .map(|(&run, _)| match kernel.spool.get(&run) {
            None => RunAction::Hand(run),
            Some(SpoolRun::Accepted) if kernel.alive => RunAction::Follow(run),
            Some(SpoolRun::Accepted) => RunAction::RecordInterrupted(run),
            Some(&SpoolRun::Ended { status }) => RunAction::RecordEnd(run, status),
        })
        .collect()
}

/// The next queued input to start: the oldest `Queued` one, only when no
/// run is `Started` (one run at a time, in order) and the run gate admits a
/// run.
pub fn next_run(book: &BTreeMap<RunId, RunRecord>, gate_admits: bool) -> Option<RunId> {
    if !gate_admits || book.values().any(|&record| record == RunRecord::Started) {
        return None;
    }
    book.iter()
        .find(|&(_, &record)| record == RunRecord::Queued)
        .map(|(&run, _)| run)
}

/// Whether `run` may be withdrawn now: only while it is `Queued` (a started
/// run is cancelled, not withdrawn).
pub fn may_withdraw(book: &BTreeMap<RunId, RunRecord>, run: RunId) -> bool {
    book.get(&run) == Some(&RunRecord::Queued)
}

/// Whether a kernel accepts `run`: only when its spool has no record of it
/// (a run handed twice, e.g. by a worker that crashed after handing it,
/// never executes twice).
pub fn kernel_accepts(spool: &BTreeMap<RunId, SpoolRun>, run: RunId) -> bool {
    !spool.contains_key(&run)
}

/// Whether an end reported for `run` is stored: only when the book has it
/// `Started` (an end is recorded once, however often it is reported).
pub fn end_is_recorded(book: &BTreeMap<RunId, RunRecord>, run: RunId) -> bool {
    book.get(&run) == Some(&RunRecord::Started)
}

#[cfg(test)]
mod tests {
    use super::*;

    use RunRecord::{Ended, Queued, Started, Withdrawn};

    fn book(records: &[(RunId, RunRecord)]) -> BTreeMap<RunId, RunRecord> {
        records.iter().copied().collect()
    }

    fn spool(runs: &[(RunId, SpoolRun)]) -> BTreeMap<RunId, SpoolRun> {
        runs.iter().copied().collect()
    }

    #[test]
    fn a_reconnect_hands_only_what_no_kernel_accepted() {
        // The worker stored the start of 3 and crashed before handing it.
        let b = book(&[(1, Ended), (2, Withdrawn), (3, Started), (4, Queued)]);
        for alive in [true, false] {
            let s = spool(&[(1, SpoolRun::Ended { status: 0 })]);
            assert_eq!(
                reconcile(&b, KernelView { alive, spool: &s }),
                [RunAction::Hand(3)],
                "alive={alive}"
            );
        }
    }

    #[test]
    fn a_live_kernel_keeps_its_run_and_a_dead_one_interrupts_it() {
        let b = book(&[(7, Started)]);
        let s = spool(&[(7, SpoolRun::Accepted)]);
        assert_eq!(
            reconcile(
                &b,
                KernelView {
                    alive: true,
                    spool: &s
                }
            ),
            [RunAction::Follow(7)]
        );
        assert_eq!(
            reconcile(
                &b,
                KernelView {
                    alive: false,
                    spool: &s
                }
            ),
            [RunAction::RecordInterrupted(7)]
        );
    }

    #[test]
    fn an_end_the_spool_kept_is_stored_even_when_its_kernel_is_gone() {
        let b = book(&[(2, Started)]);
        let s = spool(&[(2, SpoolRun::Ended { status: 130 })]);
        for alive in [true, false] {
            assert_eq!(
                reconcile(&b, KernelView { alive, spool: &s }),
                [RunAction::RecordEnd(2, 130)]
            );
        }
    }

    #[test]
    fn reconcile_looks_only_at_runs_in_flight_in_run_order() {
        // Runs already ended, withdrawn or queued are left alone whatever the
        // spool says of them; those in flight come out in run order.
        let b = book(&[
            (1, Ended),
            (2, Withdrawn),
            (3, Queued),
            (10, Started),
            (11, Started),
            (12, Started),
        ]);
        let s = spool(&[
            (1, SpoolRun::Accepted),
            (2, SpoolRun::Ended { status: 1 }),
            (3, SpoolRun::Accepted),
            (10, SpoolRun::Ended { status: -1 }),
            (11, SpoolRun::Accepted),
        ]);
        assert_eq!(
            reconcile(
                &b,
                KernelView {
                    alive: true,
                    spool: &s
                }
            ),
            [
                RunAction::RecordEnd(10, -1),
                RunAction::Follow(11),
                RunAction::Hand(12)
            ]
        );
        assert!(reconcile(
            &BTreeMap::new(),
            KernelView {
                alive: false,
                spool: &s
            }
        )
        .is_empty());
    }

    #[test]
    fn runs_start_one_at_a_time_in_order_through_the_gate() {
        let b = book(&[(1, Ended), (2, Withdrawn), (3, Queued), (4, Queued)]);
        assert_eq!(next_run(&b, true), Some(3));
        assert_eq!(next_run(&b, false), None);
        let busy = book(&[(3, Started), (4, Queued)]);
        assert_eq!(next_run(&busy, true), None);
        assert_eq!(next_run(&book(&[(1, Ended), (2, Withdrawn)]), true), None);
        assert_eq!(next_run(&BTreeMap::new(), true), None);
    }

    #[test]
    fn only_queued_input_is_withdrawn() {
        let b = book(&[(1, Queued), (2, Started), (3, Ended), (4, Withdrawn)]);
        assert!(may_withdraw(&b, 1));
        for run in [2, 3, 4, 5] {
            assert!(!may_withdraw(&b, run), "run {run}");
        }
    }

    #[test]
    fn a_kernel_executes_a_run_handed_twice_once() {
        assert!(kernel_accepts(&BTreeMap::new(), 1));
        let s = spool(&[(1, SpoolRun::Accepted), (2, SpoolRun::Ended { status: 0 })]);
        assert!(!kernel_accepts(&s, 1));
        assert!(!kernel_accepts(&s, 2));
        assert!(kernel_accepts(&s, 3));
    }

    #[test]
    fn an_end_reported_twice_is_stored_once() {
        let mut b = book(&[(1, Started)]);
        assert!(end_is_recorded(&b, 1));
        b.insert(1, Ended);
        assert!(!end_is_recorded(&b, 1));
        // Nor for a run that never started, or one the book does not know.
        let b = book(&[(2, Queued), (3, Withdrawn)]);
        assert!(!end_is_recorded(&b, 2));
        assert!(!end_is_recorded(&b, 3));
        assert!(!end_is_recorded(&b, 4));
    }
}
