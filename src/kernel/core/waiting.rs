//! Whether each terminal job waits for input (`laws::waiting`), as the
//! kernel's core keeps it: one [`WaitingWatch`] per running terminal job,
//! told of the job's output and of keys written to its terminal, looked at
//! when its watch says (the driver does the look: `host::tty_wait`), and
//! what the worker was last told, so only a change is told.

use std::collections::BTreeMap;

use crate::laws::waiting::{Seen, WaitingWatch};

/// One terminal job's watch.
#[derive(Clone, Debug)]
struct Watched {
    watch: WaitingWatch,
    /// A look was asked for and has not been reported yet: its deadline is
    /// not asked again meanwhile.
    asked: bool,
    /// What the worker was last told (false until told otherwise).
    told: bool,
}

/// The watches of the kernel's running terminal jobs, by job.
#[derive(Clone, Debug, Default)]
pub struct WaitingBook {
    by_job: BTreeMap<String, Watched>,
}

impl WaitingBook {
    /// Terminal job `job` started at `now`.
    pub fn watch(&mut self, job: &str, now: u64) {
        let watched = Watched {
            watch: WaitingWatch::new(now),
            asked: false,
            told: false,
        };
        self.by_job.insert(job.to_string(), watched);
    }

    /// `job` wrote to its terminal at `now`. Returns `Some(false)` when the
    /// worker was told it waits: it does not any more.
    pub fn output(&mut self, job: &str, now: u64) -> Option<bool> {
        let watched = self.by_job.get_mut(job)?;
        watched.watch.output(now);
        watched.untell()
    }

    /// Keys were written to `job`'s terminal, or it was resized, at `now`.
    pub fn nudged(&mut self, job: &str, now: u64) -> Option<bool> {
        let watched = self.by_job.get_mut(job)?;
        watched.watch.nudged(now);
        watched.untell()
    }

    /// `job` ended: its watch goes; `Some(false)` if it was told waiting.
    pub fn ended(&mut self, job: &str) -> Option<bool> {
        self.by_job.remove(job)?.untell()
    }

    /// The earliest look wanted and not yet asked for (monotonic ms).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.by_job
            .values()
            .filter(|w| !w.asked)
            .map(|w| w.watch.poll_timeout())
            .min()
    }

    /// The jobs whose look is due at `now`, each asked for once until
    /// [`WaitingBook::looked`].
    pub fn take_due(&mut self, now: u64) -> Vec<String> {
        let mut due = Vec::new();
        for (job, watched) in &mut self.by_job {
            if !watched.asked && watched.watch.due(now) {
                watched.asked = true;
                due.push(job.clone());
            }
        }
        due
    }

    /// What a look at `job`'s terminal at `now` saw. Returns the waiting
    /// state to tell, when it changed.
    pub fn looked(&mut self, job: &str, seen: Seen, now: u64) -> Option<bool> {
        let watched = self.by_job.get_mut(job)?;
        watched.asked = false;
        let waiting = watched.watch.looked(seen, now).is_waiting();
        (waiting != watched.told).then(|| {
            watched.told = waiting;
            waiting
        })
    }

    /// The jobs the worker was told wait now (a worker that connects is
    /// told them).
    pub fn waiting_jobs(&self) -> Vec<String> {
        self.by_job
            .iter()
            .filter(|(_, w)| w.told)
            .map(|(job, _)| job.clone())
            .collect()
    }
}

impl Watched {
    /// The watch started over: `Some(false)` if the worker was told waiting.
    fn untell(&mut self) -> Option<bool> {
        // A look asked before the event is stale: its answer is taken as
        // any other, and the watch's next deadline stands.
        std::mem::take(&mut self.told).then_some(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::waiting::{Foreground, WAITING_QUIET_MS, WAITING_RECHECK_FIRST_MS};

    const BLOCKED: Seen = Seen {
        foreground: Foreground::BlockedOnInput,
        unread_key_bytes: 0,
    };
    const BUSY: Seen = Seen {
        foreground: Foreground::Busy,
        unread_key_bytes: 0,
    };

    #[test]
    fn a_look_is_asked_once_at_its_deadline_and_a_change_is_told_once() {
        let mut book = WaitingBook::default();
        book.watch("r1", 1_000);
        let first = 1_000 + WAITING_QUIET_MS;
        assert_eq!(book.poll_timeout(), Some(first));
        assert!(book.take_due(first - 1).is_empty());
        assert_eq!(book.take_due(first), vec!["r1".to_string()]);
        // Asked: not asked again, and no deadline until it is answered.
        assert!(book.take_due(first).is_empty());
        assert_eq!(book.poll_timeout(), None);
        assert_eq!(book.looked("r1", BLOCKED, first), Some(true));
        assert_eq!(book.waiting_jobs(), vec!["r1".to_string()]);
        let again = first + WAITING_RECHECK_FIRST_MS;
        assert_eq!(book.poll_timeout(), Some(again));
        book.take_due(again);
        assert_eq!(book.looked("r1", BLOCKED, again), None, "no change");
    }

    #[test]
    fn output_or_keys_untell_a_waiting_job_and_a_busy_one_is_never_told() {
        let mut book = WaitingBook::default();
        book.watch("r2", 0);
        book.take_due(WAITING_QUIET_MS);
        assert_eq!(book.looked("r2", BUSY, WAITING_QUIET_MS), None);
        assert_eq!(book.output("r2", 700), None, "never told waiting");
        let quiet = 700 + WAITING_QUIET_MS;
        assert_eq!(book.poll_timeout(), Some(quiet));
        book.take_due(quiet);
        assert_eq!(book.looked("r2", BLOCKED, quiet), Some(true));
        assert_eq!(book.nudged("r2", quiet + 10), Some(false));
        assert!(book.waiting_jobs().is_empty());
        assert_eq!(book.poll_timeout(), Some(quiet + 10 + WAITING_QUIET_MS));
    }

    #[test]
    fn an_end_untells_and_forgets() {
        let mut book = WaitingBook::default();
        book.watch("r3", 0);
        book.take_due(WAITING_QUIET_MS);
        book.looked("r3", BLOCKED, WAITING_QUIET_MS);
        assert_eq!(book.ended("r3"), Some(false));
        assert_eq!(book.poll_timeout(), None);
        assert_eq!(book.ended("r3"), None);
        assert_eq!(book.output("r9", 1), None, "no watch: nothing to tell");
    }
}
