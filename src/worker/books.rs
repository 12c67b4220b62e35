//! The worker's books kept on its tick, without I/O: when it tells its
//! supervisor it lives, when it pings the service manager's watchdog,
//! which busy evidence is due, and what a supervisor lost for a while
//! means now. The decisions are the laws' (`laws::revival::busy_refresh`,
//! `laws::orphan::orphan_decision`); these books keep the times they are
//! taken from. `serve::loops::tick_loop` drives them with the monotonic clock and
//! performs the actions [`Books::tick`] returns, in their order.

use crate::laws::orphan::{orphan_decision, LostExitWindow, OrphanVerdict};
use crate::laws::revival::{busy_refresh, busy_refresh_due, BusyState, OwnRecord, RefreshAction};
use crate::laws::timing::{TM, WORKER_RETRY_MS};
use crate::laws::work::WorkSet;

/// What the tick asks of its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickAction {
    /// Tell the supervisor this worker lives (the process backend's
    /// watchdog hears from the worker's own loop: a hung worker falls
    /// silent).
    SignOfLife,
    /// Ping the service manager's watchdog (`WATCHDOG=1`).
    WatchdogPing,
    /// Write busy evidence in this state ([`Books::recorded`] once it is
    /// written).
    Record(BusyState),
    /// The supervisor stayed lost with work: record busy and exit,
    /// aborting nothing (the kernel keeps its runs).
    ExitResumable,
    /// The supervisor stayed lost and there is no work: close the session.
    CloseSession,
}

/// The times the worker's tick decides from.
#[derive(Debug)]
pub struct Books {
    /// How long the worker may wait before the service manager's
    /// watchdog hears from it (none: no watchdog).
    watchdog_every_ms: Option<u64>,
    lost_window: LostExitWindow,
    last_sign_of_life_ms: u64,
    last_ping_ms: u64,
    /// Since when no supervisor has been connected (none while one is).
    lost_since_ms: Option<u64>,
    /// The latest busy evidence this worker wrote.
    latest_record: Option<OwnRecord>,
    /// The tick asked for a record that is not written yet: it asks no
    /// second time meanwhile.
    record_asked: bool,
    /// A record that could not be written is asked for again no earlier.
    retry_at_ms: Option<u64>,
}

impl Books {
    /// The books of a worker that starts at `now_ms`: no supervisor has
    /// connected yet, so its lost-exit clock runs from its start.
    pub fn new(now_ms: u64, lost_window: LostExitWindow, watchdog_every_ms: Option<u64>) -> Books {
        Books {
            watchdog_every_ms,
            lost_window,
            last_sign_of_life_ms: now_ms,
            last_ping_ms: now_ms,
            lost_since_ms: Some(now_ms),
            latest_record: None,
            record_asked: false,
            retry_at_ms: None,
        }
    }

    /// A supervisor connected.
    pub fn supervised(&mut self) {
        self.lost_since_ms = None;
    }

    /// The supervisor's connection ended at `now_ms` (an earlier loss
    /// still counts from its own time).
    pub fn supervisor_lost(&mut self, now_ms: u64) {
        self.lost_since_ms.get_or_insert(now_ms);
    }

    /// Busy evidence in `state` was written at `now_ms`.
    pub fn recorded(&mut self, state: BusyState, now_ms: u64) {
        self.latest_record = Some(OwnRecord {
            state,
            at_ms: now_ms,
        });
        self.record_asked = false;
        self.retry_at_ms = None;
    }

    /// Busy evidence could not be written at `now_ms`: asked for again
    /// after the retry pause.
    pub fn record_failed(&mut self, now_ms: u64) {
        self.record_asked = false;
        self.retry_at_ms = Some(now_ms.saturating_add(WORKER_RETRY_MS));
    }

    /// The evidence task found nothing to write (another record came
    /// first): the tick may ask again.
    pub fn record_not_needed(&mut self) {
        self.record_asked = false;
    }

    /// The busy evidence due at `now_ms` for `work`, if any (on the tick,
    /// and at once when the work changes).
    pub fn evidence_due(&self, work: WorkSet, now_ms: u64) -> Option<BusyState> {
        match busy_refresh(work, self.latest_record, now_ms) {
            RefreshAction::Nothing => None,
            RefreshAction::RecordBusy => Some(BusyState::Busy),
            RefreshAction::RecordIdle => Some(BusyState::Idle),
        }
    }

    /// One tick at `now_ms` with `work`: what to do, in order (an exit or
    /// a close comes last, and ends the tick loop).
    pub fn tick(&mut self, now_ms: u64, work: WorkSet) -> Vec<TickAction> {
        let mut actions = Vec::new();
        if now_ms.saturating_sub(self.last_sign_of_life_ms) >= TM.worker.sign_of_life {
            actions.push(TickAction::SignOfLife);
            self.last_sign_of_life_ms = now_ms;
        }
        if let Some(every) = self.watchdog_every_ms {
            if now_ms.saturating_sub(self.last_ping_ms) >= every {
                actions.push(TickAction::WatchdogPing);
                self.last_ping_ms = now_ms;
            }
        }
        let retry_waits = self.retry_at_ms.is_some_and(|at| now_ms < at);
        if let (Some(state), false, false) = (
            self.evidence_due(work, now_ms),
            self.record_asked,
            retry_waits,
        ) {
            actions.push(TickAction::Record(state));
            self.record_asked = true;
        }
        let verdict = match self.lost_since_ms {
            None => OrphanVerdict::Wait,
            Some(since) => orphan_decision(since, now_ms, self.lost_window, work),
        };
        match verdict {
            OrphanVerdict::Wait => {}
            OrphanVerdict::ExitResumable => actions.push(TickAction::ExitResumable),
            OrphanVerdict::CloseSession => actions.push(TickAction::CloseSession),
        }
        actions
    }

    /// The earliest instant (monotonic milliseconds) at which [`Books::tick`]
    /// has something to do for `work`, as long as nothing else changes:
    /// the next sign of life, watchdog ping, busy evidence due or
    /// lost-supervisor verdict. A record asked for and not yet written
    /// needs no time: its writing ends the wait.
    pub fn poll_timeout(&self, work: WorkSet) -> u64 {
        let sign_of_life = self
            .last_sign_of_life_ms
            .saturating_add(TM.worker.sign_of_life);
        let ping = self
            .watchdog_every_ms
            .map(|every| self.last_ping_ms.saturating_add(every));
        [
            Some(sign_of_life),
            ping,
            self.evidence_at(work),
            self.lost_exit_at(work),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(sign_of_life)
    }

    /// When busy evidence for `work` is next due (the refresh law: at once
    /// when the work's state is not on record, else a refresh after
    /// `busy_refresh`), no earlier than a retry's pause.
    fn evidence_at(&self, work: WorkSet) -> Option<u64> {
        if self.record_asked {
            return None;
        }
        let due = busy_refresh_due(work, self.latest_record)?;
        Some(due.max(self.retry_at_ms.unwrap_or(0)))
    }

    /// When a lost supervisor's window ends for `work` (the orphan law:
    /// one window without work, two with it).
    fn lost_exit_at(&self, work: WorkSet) -> Option<u64> {
        let (since, LostExitWindow::After(window)) = (self.lost_since_ms?, self.lost_window) else {
            return None;
        };
        let windows = if work.is_empty() { 1 } else { 2 };
        Some(since.saturating_add(window.saturating_mul(windows)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::timing::BUSY_REFRESH_MS;
    use crate::laws::work::WorkKind;

    const WINDOW_MS: u64 = 300_000;
    /// A fixed period to step the books by, as a ticking driver would (the
    /// worker's own driver sleeps to their deadline): within `busy_tick`,
    /// so a due refresh seen on it is late by at most what the law allows.
    const WORKER_TICK_MS: u64 = 250;
    const _: () = assert!(WORKER_TICK_MS <= TM.evidence.busy_tick);

    fn busy() -> WorkSet {
        WorkSet::EMPTY.with(WorkKind::QueuedInput)
    }

    /// Drive `books` tick by tick from `from_ms` to `to_ms` (the real
    /// tick's period), recording what it asks to record, until it exits
    /// or closes; every action with the time it came.
    fn run(books: &mut Books, from_ms: u64, to_ms: u64, work: WorkSet) -> Vec<(u64, TickAction)> {
        drive(books, from_ms, to_ms, work, |_, now| now + WORKER_TICK_MS)
    }

    /// Look at `books` at `from_ms`, then at each time `next` gives, up to
    /// `to_ms`, recording what they ask to record, until they exit or
    /// close; every action with the time it came.
    fn drive(
        books: &mut Books,
        from_ms: u64,
        to_ms: u64,
        work: WorkSet,
        mut next: impl FnMut(&mut Books, u64) -> u64,
    ) -> Vec<(u64, TickAction)> {
        let mut seen = Vec::new();
        let mut now = from_ms;
        while now <= to_ms {
            for action in books.tick(now, work) {
                seen.push((now, action));
                match action {
                    TickAction::Record(state) => books.recorded(state, now),
                    TickAction::ExitResumable | TickAction::CloseSession => return seen,
                    _ => {}
                }
            }
            now = next(books, now);
        }
        seen
    }

    fn times(seen: &[(u64, TickAction)], wanted: TickAction) -> Vec<u64> {
        seen.iter()
            .filter(|(_, action)| *action == wanted)
            .map(|(at, _)| *at)
            .collect()
    }

    #[test]
    fn a_worker_lost_with_work_records_busy_every_five_minutes_and_exits_after_two_windows() {
        let mut books = Books::new(0, LostExitWindow::After(WINDOW_MS), None);
        let seen = run(&mut books, 0, 3 * WINDOW_MS, busy());
        // Busy at once, then every five minutes, the last one just before
        // the exit (which ends the loop).
        let records = times(&seen, TickAction::Record(BusyState::Busy));
        assert_eq!(records, [0, BUSY_REFRESH_MS, 2 * BUSY_REFRESH_MS]);
        assert_eq!(times(&seen, TickAction::ExitResumable), [2 * WINDOW_MS]);
        assert_eq!(
            seen.last().map(|(_, action)| *action),
            Some(TickAction::ExitResumable)
        );
        assert!(times(&seen, TickAction::CloseSession).is_empty());
    }

    #[test]
    fn a_worker_lost_without_work_closes_its_session_after_one_window() {
        let mut books = Books::new(0, LostExitWindow::After(WINDOW_MS), None);
        let seen = run(&mut books, 0, 3 * WINDOW_MS, WorkSet::EMPTY);
        assert_eq!(times(&seen, TickAction::CloseSession), [WINDOW_MS]);
        assert!(times(&seen, TickAction::Record(BusyState::Busy)).is_empty());
    }

    #[test]
    fn a_supervisor_that_connects_stops_the_lost_clock_and_a_new_loss_starts_it_again() {
        let mut books = Books::new(0, LostExitWindow::After(WINDOW_MS), None);
        books.supervised();
        assert!(run(&mut books, 0, 3 * WINDOW_MS, busy())
            .iter()
            .all(|(_, action)| *action != TickAction::ExitResumable));
        let lost_at = 3 * WINDOW_MS + 1_000;
        books.supervisor_lost(lost_at);
        // A second report of the same loss does not move its start.
        books.supervisor_lost(lost_at + 60_000);
        let seen = run(&mut books, lost_at, lost_at + 3 * WINDOW_MS, busy());
        let exit = times(&seen, TickAction::ExitResumable);
        assert_eq!(exit.len(), 1);
        assert!(exit[0] >= lost_at + 2 * WINDOW_MS);
        assert!(exit[0] < lost_at + 2 * WINDOW_MS + WORKER_TICK_MS);
    }

    #[test]
    fn a_window_past_the_cap_never_ends_a_lost_worker() {
        let mut books = Books::new(0, LostExitWindow::Never, None);
        let seen = run(&mut books, 0, 10 * WINDOW_MS, WorkSet::EMPTY);
        assert!(seen
            .iter()
            .all(|(_, action)| !matches!(action, TickAction::CloseSession)));
    }

    #[test]
    fn signs_of_life_and_watchdog_pings_keep_their_periods() {
        let watchdog_ms = 5_000;
        let mut books = Books::new(0, LostExitWindow::Never, Some(watchdog_ms));
        books.supervised();
        let seen = run(&mut books, 0, 20_000, WorkSet::EMPTY);
        let lives = times(&seen, TickAction::SignOfLife);
        let expected: Vec<u64> = (1..=20_000 / TM.worker.sign_of_life)
            .map(|n| n * TM.worker.sign_of_life)
            .collect();
        assert_eq!(lives, expected);
        assert_eq!(
            times(&seen, TickAction::WatchdogPing),
            [5_000, 10_000, 15_000, 20_000]
        );
    }

    /// Drive `books` as the worker does now: it sleeps until the books'
    /// own deadline, ticks there, and each record asked for is written at
    /// once. Every action with the time it came; also every instant it
    /// woke, so a test can see nothing came between them.
    fn run_by_deadlines(
        books: &mut Books,
        from_ms: u64,
        to_ms: u64,
        work: WorkSet,
    ) -> Vec<(u64, TickAction)> {
        drive(books, from_ms, to_ms, work, |books, now| {
            let next = books.poll_timeout(work);
            assert!(next > now, "the books ask for time ahead, not at {next}");
            // A fake clock read just before the deadline: nothing is due.
            assert_eq!(
                books.tick(next - 1, work),
                Vec::<TickAction>::new(),
                "nothing happens just before the deadline {next}"
            );
            next
        })
    }

    #[test]
    fn the_busy_refresh_is_due_at_busy_refresh_and_not_before() {
        let mut books = Books::new(0, LostExitWindow::Never, None);
        books.supervised();
        books.recorded(BusyState::Busy, 0);
        assert_eq!(books.evidence_due(busy(), BUSY_REFRESH_MS - 1), None);
        assert_eq!(
            books.evidence_due(busy(), BUSY_REFRESH_MS),
            Some(BusyState::Busy)
        );
        let seen = run_by_deadlines(&mut books, 1, 3 * BUSY_REFRESH_MS, busy());
        assert_eq!(
            times(&seen, TickAction::Record(BusyState::Busy)),
            [BUSY_REFRESH_MS, 2 * BUSY_REFRESH_MS, 3 * BUSY_REFRESH_MS]
        );
    }

    #[test]
    fn a_lost_worker_exits_at_its_window_and_not_before() {
        // With work: two windows; without: one.
        for (work, windows, wanted) in [
            (busy(), 2, TickAction::ExitResumable),
            (WorkSet::EMPTY, 1, TickAction::CloseSession),
        ] {
            let mut books = Books::new(0, LostExitWindow::After(WINDOW_MS), None);
            books.supervised();
            let lost_at = 7_000;
            books.supervisor_lost(lost_at);
            let seen = run_by_deadlines(&mut books, lost_at, 10 * WINDOW_MS, work);
            assert_eq!(times(&seen, wanted), [lost_at + windows * WINDOW_MS]);
            assert_eq!(seen.last().map(|(_, action)| *action), Some(wanted));
        }
    }

    #[test]
    fn a_record_not_written_is_asked_for_once_and_again_after_a_failure() {
        let mut books = Books::new(0, LostExitWindow::Never, None);
        books.supervised();
        assert_eq!(books.tick(0, busy()), [TickAction::Record(BusyState::Busy)]);
        // Asked, not written yet: not asked again, and no time needed for it.
        assert!(books.tick(10, busy()).is_empty());
        assert_eq!(books.poll_timeout(busy()), TM.worker.sign_of_life);
        books.record_failed(20);
        assert!(books.tick(20 + WORKER_RETRY_MS - 1, busy()).is_empty());
        assert_eq!(books.poll_timeout(busy()), 20 + WORKER_RETRY_MS);
        assert_eq!(
            books.tick(20 + WORKER_RETRY_MS, busy()),
            [TickAction::Record(BusyState::Busy)]
        );
    }

    #[test]
    fn work_that_ends_is_recorded_idle_once() {
        let mut books = Books::new(0, LostExitWindow::Never, None);
        books.supervised();
        let first = run(&mut books, 0, 1_000, busy());
        assert_eq!(times(&first, TickAction::Record(BusyState::Busy)), [0]);
        let after = run(&mut books, 1_250, 20_000, WorkSet::EMPTY);
        assert_eq!(times(&after, TickAction::Record(BusyState::Idle)), [1_250]);
        assert_eq!(books.evidence_due(WorkSet::EMPTY, 30_000), None);
    }
}
