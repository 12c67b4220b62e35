//! The run core's books of user bash that run now: what `cancel` and
//! `queue` reach, and the hang-up of one whose client went away.

use super::{Action, JobKind, QueuedInput, RunCore, RunId};
use crate::protocol::kernel::ToKernel;

impl RunCore {
    /// The user bash that run now (their end not stored), by number, with
    /// their kernel jobs.
    /// The user bash that run now, by number, with their jobs.
    pub fn running_bash_jobs(&self) -> Vec<(RunId, String)> {
        self.running_bash()
    }

    pub(super) fn running_bash(&self) -> Vec<(RunId, String)> {
        let mut running: Vec<(RunId, String)> = self
            .jobs
            .iter()
            .filter_map(|(job, followed)| match followed.kind {
                JobKind::Bash { number, .. } if !followed.ended => Some((number, job.clone())),
                _ => None,
            })
            .collect();
        running.sort();
        running
    }

    /// Whether user bash `number` runs now (its end not stored).
    pub fn bash_runs(&self, number: RunId) -> bool {
        self.running_bash().iter().any(|(n, _)| *n == number)
    }

    /// The user bash that run now, as `queue` lists them (one an earlier
    /// worker started is listed by its number alone).
    pub fn bash_list(&self) -> Vec<QueuedInput> {
        self.running_bash()
            .into_iter()
            .map(|(number, _)| {
                self.bash_listed
                    .get(&number)
                    .cloned()
                    .unwrap_or(QueuedInput {
                        run: number,
                        text: String::new(),
                        at_ms: 0,
                        bash: true,
                        tty: None,
                    })
            })
            .collect()
    }

    /// The client of user bash `number` went away (`laws::client_left`):
    /// hang it up, as a command whose `ssh` client left.
    pub fn hang_up(&self, number: RunId) -> Vec<Action> {
        self.running_bash()
            .into_iter()
            .filter(|(n, _)| *n == number)
            .map(|(_, job)| Action::Kernel(ToKernel::HangUp { job }))
            .collect()
    }
}
