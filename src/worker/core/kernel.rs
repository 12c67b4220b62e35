//! The run core and its kernel: settling the runs the transcript left
//! open when a kernel greets the worker, then each job's output, end and
//! settling, and the processes runs left behind.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::{Action, ClientId, JobKind, RunBooks, RunCore};
use crate::laws::runs::{
    end_is_recorded, reconcile, KernelView, RunAction, RunId, RunRecord, SpoolRun,
};
use crate::protocol::entry::LostOutput;
use crate::protocol::kernel::{JobEnd, JobState, ToKernel};
use crate::protocol::message::Response;
use crate::session::entry::Stream;
use crate::session::notices;
use crate::session::transcript::EntryBody;
use crate::worker::shell_marks;

/// The number of the user bash a kernel job runs: `b<number>-<tag>-<seq>`
/// (earlier builds named them `b<tag>-<seq>`, without the number).
fn bash_number(job: &str) -> Option<RunId> {
    let mut parts = job.strip_prefix('b')?.split('-');
    let number = parts.next()?.parse().ok()?;
    (parts.count() == 2).then_some(number)
}

impl RunCore {
    // ---- the kernel ------------------------------------------------------

    /// The kernel greeted this worker: settle every run the transcript
    /// left open, as `laws::runs::reconcile` decides (runs a gone kernel
    /// accepted against a dead kernel, the rest against this live one).
    pub fn kernel_hello(
        &mut self,
        pid: u32,
        jobs: &BTreeMap<String, JobState>,
        background: u32,
    ) -> Vec<Action> {
        self.connected = true;
        self.kernel_pid = Some(pid);
        self.background = background;
        let mut actions = self.settle_open_runs(jobs);
        // User bash of an earlier worker goes on: its output and end are
        // stored (its client follows them in the transcript). One the live
        // kernel does not know was cut short: its kernel is gone, or its
        // worker was lost before handing it over.
        let (following, followed) = self.follow_earlier_bash(jobs);
        actions.extend(following);
        actions.extend(self.cut_short_bash(&followed));
        // The spool's leftovers: user bash whose end is stored, and runs
        // whose end the transcript already holds.
        actions.extend(self.forget_leftovers(jobs, &followed));
        actions
    }

    /// Reconcile the open runs with the kernel's jobs and follow each.
    fn settle_open_runs(&mut self, jobs: &BTreeMap<String, JobState>) -> Vec<Action> {
        let (lost, live) = self.books_by_kernel(jobs);
        let mut decided = reconcile(
            &lost.0,
            KernelView {
                alive: false,
                spool: &lost.1,
            },
        );
        decided.extend(reconcile(
            &live.0,
            KernelView {
                alive: true,
                spool: &live.1,
            },
        ));
        let mut actions = Vec::new();
        for action in decided {
            let (run, command, lost) = match action {
                RunAction::Hand(run) => (run, self.started_text.get(&run).cloned(), false),
                RunAction::Follow(run) | RunAction::RecordEnd(run, _) => (run, None, false),
                RunAction::RecordInterrupted(run) => (run, None, true),
            };
            let kind = JobKind::Run { input: run, lost };
            let (command, tty) = command.map_or((None, None), |(text, tty)| (Some(text), tty));
            actions.extend(self.follow(&format!("r{run}"), command.as_deref(), (None, tty), kind));
        }
        actions
    }

    /// The run books split between runs a gone kernel accepted and the rest.
    fn books_by_kernel(&self, jobs: &BTreeMap<String, JobState>) -> (RunBooks, RunBooks) {
        let mut lost = (BTreeMap::new(), BTreeMap::new());
        let mut live = (BTreeMap::new(), BTreeMap::new());
        for (run, record) in &self.book {
            match jobs.get(&format!("r{run}")) {
                Some(JobState::Lost) => {
                    lost.0.insert(*run, *record);
                    lost.1.insert(*run, SpoolRun::Accepted);
                }
                Some(JobState::Running) => {
                    live.0.insert(*run, *record);
                    live.1.insert(*run, SpoolRun::Accepted);
                }
                Some(JobState::Ended { end }) => {
                    live.0.insert(*run, *record);
                    live.1.insert(*run, SpoolRun::Ended { status: end.status });
                }
                None => {
                    live.0.insert(*run, *record);
                }
            }
        }
        (lost, live)
    }

    /// Follow the open user bash the live kernel runs: the actions and the numbers followed.
    fn follow_earlier_bash(
        &mut self,
        jobs: &BTreeMap<String, JobState>,
    ) -> (Vec<Action>, BTreeSet<RunId>) {
        let mut actions = Vec::new();
        let mut followed = BTreeSet::new();
        for (job, state) in jobs {
            let Some(number) = bash_number(job) else {
                continue;
            };
            if self.open_bash.contains_key(&number) && *state != JobState::Lost {
                followed.insert(number);
                let kind = JobKind::Bash {
                    client: None,
                    number,
                };
                actions.extend(self.follow(job, None, (None, None), kind));
            }
        }
        (actions, followed)
    }

    /// Store the end of every open user bash not `followed`, with a notice.
    fn cut_short_bash(&mut self, followed: &BTreeSet<RunId>) -> Vec<Action> {
        let cut_short: Vec<RunId> = self
            .open_bash
            .keys()
            .filter(|number| !followed.contains(number))
            .copied()
            .collect();
        let mut actions = Vec::new();
        for number in cut_short {
            self.open_bash.remove(&number);
            actions.extend(bash_ended(number, None, None));
        }
        actions
    }

    /// Ask the kernel to forget the jobs whose end is already stored.
    fn forget_leftovers(
        &self,
        jobs: &BTreeMap<String, JobState>,
        followed: &BTreeSet<RunId>,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        for job in jobs.keys() {
            let stored_run = job
                .strip_prefix('r')
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|run| self.book.get(&run) == Some(&RunRecord::Ended));
            let stored_bash = bash_number(job).is_some_and(|n| !followed.contains(&n));
            if stored_bash || (job.starts_with('b') && bash_number(job).is_none()) || stored_run {
                actions.push(Action::Kernel(ToKernel::Forget { job: job.clone() }));
            }
        }
        actions
    }

    /// Whether `job`'s output is being stored (a job not followed is
    /// nobody's: its output is not stored).
    pub fn follows(&self, job: &str) -> bool {
        self.jobs.contains_key(job)
    }

    /// The link to the kernel is gone.
    pub fn kernel_lost(&mut self) {
        self.connected = false;
        self.kernel_pid = None;
        self.jobs.clear();
    }

    /// Output of `job`: stored, then shown. `end` is the spool offset after
    /// it; a reconnect resumes there. A UTF-8 character cut by a record
    /// boundary waits for its rest.
    pub fn output(&mut self, job: &str, stream: Stream, end: u64, data: Bytes) -> Vec<Action> {
        let Some(followed) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        // The kernel cut its records at UTF-8 character boundaries: each
        // chunk is stored and shown as it is.
        if data.is_empty() {
            return Vec::new();
        }
        // Where the output is in the spool goes with it: an attach (a run's
        // waiter) or a `bash --tty` (a user bash's client) merges it with
        // the kernel's own echo; a client that did not ask hears `Output`
        // (`Outbox::send`).
        let response = Response::OutputAt {
            stream,
            data: data.clone(),
            end,
        };
        match followed.kind {
            JobKind::Run { input, .. } => {
                self.spool_offsets.insert(input, end);
                if let Some(marks) = followed.marks.as_mut() {
                    let found = marks.scan(&data);
                    if !found.is_empty() {
                        let entries = shell_marks::split(input, stream, (data, end), found);
                        let mut actions: Vec<Action> =
                            entries.into_iter().map(Action::Store).collect();
                        actions.push(Action::Waiters(input, response));
                        return actions;
                    }
                }
                vec![
                    Action::Store(EntryBody::Output {
                        input: Some(input),
                        stream,
                        data,
                        spool_end: Some(end),
                        bash: None,
                    }),
                    Action::Waiters(input, response),
                ]
            }
            JobKind::Bash { client, number } => {
                if let Some(offset) = self.open_bash.get_mut(&number) {
                    *offset = end;
                }
                let mut actions = vec![Action::Store(EntryBody::Output {
                    input: None,
                    stream,
                    data,
                    spool_end: Some(end),
                    bash: Some(number),
                })];
                actions.extend(client.map(|client| Action::Client(client, response)));
                actions
            }
        }
    }

    /// `job` ended (`None`: the kernel that ran it is gone). A run's end is
    /// stored once: only while the book has it started.
    pub fn ended(&mut self, job: &str, end: Option<&JobEnd>) -> Vec<Action> {
        let Some(followed) = self.jobs.get_mut(job) else {
            return Vec::new();
        };
        if followed.ended {
            return Vec::new();
        }
        followed.ended = true;
        let mut actions = Vec::new();
        match followed.kind {
            JobKind::Run { input, .. } => {
                if !end_is_recorded(&self.book, input) {
                    return actions;
                }
                self.book.insert(input, RunRecord::Ended);
                self.started_text.remove(&input);
                actions.extend(run_ended(input, end));
            }
            JobKind::Bash { client, number } => {
                self.open_bash.remove(&number);
                self.bash_listed.remove(&number);
                actions.extend(bash_ended(number, client, end));
            }
        }
        if let Some(text) = end.and_then(|e| e.notice.clone()) {
            actions.push(Action::Store(EntryBody::Notice {
                text,
                restore: None,
                restore_id: None,
            }));
        }
        // Told settled: no child of it is left, so none counts as work
        // once its client has its answer (the kernel's word follows).
        if end.is_some_and(|e| e.settled) {
            actions.extend(self.settled(job));
        }
        actions
    }

    /// Every writer of `job`'s output closed: the kernel may forget it.
    pub fn settled(&mut self, job: &str) -> Vec<Action> {
        match self.jobs.remove(job) {
            Some(_) => vec![Action::Kernel(ToKernel::Forget {
                job: job.to_string(),
            })],
            None => Vec::new(),
        }
    }

    /// The kernel counted the processes runs left behind.
    pub fn background_jobs(&mut self, count: u32) -> Vec<Action> {
        let before = std::mem::replace(&mut self.background, count);
        if before > 0 && count == 0 {
            vec![Action::Store(EntryBody::Notice {
                text: "the last background job ended".into(),
                restore: None,
                restore_id: None,
            })]
        } else {
            Vec::new()
        }
    }
}

/// What run `input` ending with `end` (`None`: its kernel is gone) stores
/// and tells its waiters. Without an end, why is said: kept as surely as
/// the end (a full disk retries both), and told to the waiters with it.
fn run_ended(input: RunId, end: Option<&JobEnd>) -> Vec<Action> {
    let mut actions = Vec::new();
    let lost = lost_output(&format!("run {input}"), end, &mut actions);
    let (status, cut_short) = match end {
        Some(end) => {
            actions.push(Action::StoreUntilStored(EntryBody::RunFinished {
                input,
                status: end.status,
                signal: end.signal,
                cancelled: end.cancelled,
                lost_output: lost.clone(),
            }));
            (end.status, None)
        }
        None => {
            let why = format!(
                "run {input} was cut short: the kernel running it is gone; it does not run again"
            );
            actions.push(Action::StoreUntilStored(EntryBody::RunInterrupted {
                input,
            }));
            actions.push(Action::StoreUntilStored(EntryBody::Notice {
                text: why.clone(),
                restore: None,
                restore_id: None,
            }));
            (255, Some(why))
        }
    };
    let exit = Response::Exit {
        status,
        lost,
        cut_short,
    };
    actions.push(Action::EndWaiters(input, exit));
    actions
}

/// What user bash `number` ending with `end` (`None`: its kernel is gone,
/// or never had it) stores and tells its client, if one waits. Without an
/// end, why is said: stored before the end, as surely (a full disk
/// retries both), and told to the client with the end.
fn bash_ended(number: RunId, client: Option<ClientId>, end: Option<&JobEnd>) -> Vec<Action> {
    let status = end.map_or(255, |e| e.status);
    let mut actions = Vec::new();
    let cut_short = match end {
        Some(_) => None,
        None => {
            actions.push(Action::StoreUntilStored(notices::bash_cut_short(number)));
            Some(notices::bash_cut_short_text(number))
        }
    };
    let lost = lost_output(&format!("bash {number}"), end, &mut actions);
    actions.push(Action::StoreUntilStored(EntryBody::BashFinished {
        status,
        bash: Some(number),
        signal: end.and_then(|e| e.signal),
        cancelled: end.is_some_and(|e| e.cancelled),
        lost_output: lost.clone(),
    }));
    if let Some(client) = client {
        let exit = Response::Exit {
            status,
            lost,
            cut_short,
        };
        actions.push(Action::Client(client, exit));
    }
    actions
}

/// Output of `subject` ("run 3", "bash 2") that its kernel could not
/// spool: said in the transcript just before its end (stored as surely as
/// the end, so the end never reads as complete output without it), and
/// returned for the clients that followed it.
fn lost_output(
    subject: &str,
    end: Option<&JobEnd>,
    actions: &mut Vec<Action>,
) -> Option<LostOutput> {
    let lost = end?.lost_output.clone()?;
    actions.push(Action::StoreUntilStored(EntryBody::Notice {
        text: format!(
            "{} bytes of the output of {subject} could not be kept: {}",
            lost.bytes, lost.error
        ),
        restore: None,
        restore_id: None,
    }));
    Some(lost)
}
