//! The kernel's sans-IO core: which jobs run, when the last one started or
//! ended, the cancel escalation (SIGINT, SIGTERM after the cancel grace,
//! SIGKILL after another), the hang-up of a job whose shell has not said
//! its process group yet, the idle template's drop, and busy evidence while
//! no worker is connected (`evidence`), and whether each terminal job waits
//! for input (`waiting`). Events come in with
//! the time they happen at; actions come out of [`KernelCore::poll_action`];
//! [`KernelCore::poll_timeout`] says when it next needs the time
//! ([`KernelCore::handle_timeout`]). It reads no clock and does no I/O: the
//! driver (`serve`) signals, probes and drops as it is told.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::laws::revival::BusyState;
use crate::laws::timing::POLL_MS;
use crate::laws::work::WorkSet;

pub mod ends;
pub mod evidence;
pub mod jobs;
pub mod templates;
pub mod waiting;

use evidence::EvidenceBook;
use waiting::WaitingBook;

/// A signal the core asks to be sent to a job's process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
    Kill,
}

/// What a request waits for a job's process group to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Want {
    Cancel,
    HangUp,
}

/// What the driver does for the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send `signal` to `job`'s process group.
    Signal {
        job: String,
        group: u32,
        signal: Signal,
    },
    /// Close `job`'s output, then SIGHUP its process group.
    HangUp { job: String, group: u32 },
    /// Look whether any process of `group` is left; if none is, tell
    /// [`KernelCore::group_gone`].
    ProbeGroup { job: String, group: u32 },
    /// A cancelled job was killed whole (its reporter with it, so no end
    /// comes): record its end with SIGKILL's status.
    EndKilled { job: String },
    /// `job`'s shell never said its process group within the cancel grace:
    /// what `want` asked for is not done.
    GroupNeverReported { job: String, want: Want },
    /// The session has been idle for `template_idle`: drop its templates.
    DropIdleTemplates,
    /// No worker is connected and busy evidence is due: write a record in
    /// `state` for `work`, then tell [`KernelCore::evidence_recorded`] or
    /// [`KernelCore::evidence_failed`].
    RecordEvidence { state: BusyState, work: WorkSet },
    /// Look whether terminal job `job` waits for input
    /// (`host::tty_wait`), then tell [`KernelCore::waiting_looked`].
    LookWaiting { job: String },
    /// Tell the workers whether terminal job `job` waits for input.
    TellWaiting { job: String, waiting: bool },
}

/// Where a cancel stands: the signal sent last, and when the next step is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// SIGINT sent; SIGTERM is due.
    Interrupted,
    /// SIGTERM sent; SIGKILL is due.
    Terminated,
    /// SIGKILL sent; the end is recorded at `until` (or once the group is
    /// gone), and the group is probed at `next_at` until then.
    Killed { until: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Escalation {
    group: u32,
    step: Step,
    next_at: u64,
}

/// The windows the core keeps, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreTiming {
    /// Between SIGINT and SIGTERM, SIGTERM and SIGKILL, SIGKILL and the
    /// recorded end; also how long a request waits for a group.
    pub cancel_grace: u64,
    /// How long an idle session keeps its templates.
    pub template_idle: u64,
}

/// The kernel's job books and its deadlines.
pub struct KernelCore {
    timing: CoreTiming,
    /// Jobs started and not ended.
    running: BTreeSet<String>,
    /// When the last job started or ended (or the session was claimed).
    last_job_ms: u64,
    /// A spare's kernel is unclaimed: its template waits for the claim.
    claimed: bool,
    /// The templates went in this idle spell: nothing to drop until a job.
    idle_dropped: bool,
    /// Requests waiting for a job's group, with their deadlines.
    group_waits: BTreeMap<(String, Want), u64>,
    escalations: BTreeMap<String, Escalation>,
    /// The process groups of runs ended as their output closed, whose
    /// reporters have not said `finished` yet.
    ended_before_reporter: Vec<u32>,
    /// Processes that runs left behind (children of the kernel other than
    /// its shell).
    background: u32,
    evidence: EvidenceBook,
    waiting: WaitingBook,
    stopping: bool,
    actions: VecDeque<Action>,
}

impl KernelCore {
    /// A core at `now`; `claimed` is false for a spare's kernel.
    pub fn new(timing: CoreTiming, claimed: bool, now: u64) -> KernelCore {
        KernelCore {
            timing,
            running: BTreeSet::new(),
            last_job_ms: now,
            claimed,
            idle_dropped: false,
            group_waits: BTreeMap::new(),
            escalations: BTreeMap::new(),
            ended_before_reporter: Vec::new(),
            background: 0,
            evidence: EvidenceBook::default(),
            waiting: WaitingBook::default(),
            stopping: false,
            actions: VecDeque::new(),
        }
    }

    /// The next thing the driver does, oldest first.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The earliest instant (monotonic ms) the core needs
    /// [`KernelCore::handle_timeout`]; `None` while nothing is due.
    pub fn poll_timeout(&self) -> Option<u64> {
        let waits = self.group_waits.values().copied();
        let steps = self.escalations.values().map(|e| e.next_at);
        let evidence = self.evidence.due_at().filter(|_| !self.stopping);
        let looks = self.waiting.poll_timeout().filter(|_| !self.stopping);
        waits
            .chain(steps)
            .chain(self.template_deadline())
            .chain(evidence)
            .chain(looks)
            .min()
    }

    /// Everything due at `now`.
    pub fn handle_timeout(&mut self, now: u64) {
        let expired: Vec<(String, Want)> = self
            .group_waits
            .iter()
            .filter(|(_, &until)| until <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for (job, want) in expired {
            self.group_waits.remove(&(job.clone(), want));
            self.actions
                .push_back(Action::GroupNeverReported { job, want });
        }
        let due: Vec<String> = self
            .escalations
            .iter()
            .filter(|(_, e)| e.next_at <= now)
            .map(|(job, _)| job.clone())
            .collect();
        for job in due {
            self.step(&job, now);
        }
        if self.template_deadline().is_some_and(|at| at <= now) {
            self.idle_dropped = true;
            self.actions.push_back(Action::DropIdleTemplates);
        }
        if self.stopping {
            return;
        }
        if let Some(state) = self.evidence.take_due(now) {
            let work = self.evidence.work();
            self.actions
                .push_back(Action::RecordEvidence { state, work });
        }
        for job in self.waiting.take_due(now) {
            self.actions.push_back(Action::LookWaiting { job });
        }
    }

    /// The next step of `job`'s cancel, due at `now`.
    fn step(&mut self, job: &str, now: u64) {
        let Some(escalation) = self.escalations.get_mut(job) else {
            return;
        };
        let grace = self.timing.cancel_grace;
        let group = escalation.group;
        let signal = |signal| Action::Signal {
            job: job.to_string(),
            group,
            signal,
        };
        match escalation.step {
            Step::Interrupted => {
                escalation.step = Step::Terminated;
                escalation.next_at = now + grace;
                self.actions.push_back(signal(Signal::Terminate));
            }
            Step::Terminated => {
                let until = now + grace;
                escalation.step = Step::Killed { until };
                escalation.next_at = probe_at(now, until);
                self.actions.push_back(signal(Signal::Kill));
            }
            Step::Killed { until } if now >= until => {
                self.escalations.remove(job);
                self.actions.push_back(Action::EndKilled {
                    job: job.to_string(),
                });
            }
            Step::Killed { until } => {
                escalation.next_at = probe_at(now, until);
                self.actions.push_back(Action::ProbeGroup {
                    job: job.to_string(),
                    group,
                });
            }
        }
    }

    /// When the idle templates go: `template_idle` after the last job, in
    /// a claimed session with no job running, once per idle spell.
    fn template_deadline(&self) -> Option<u64> {
        let idle = self.claimed && !self.idle_dropped && self.running.is_empty();
        idle.then(|| self.last_job_ms + self.timing.template_idle + 1)
    }

    /// `job` was handed to a shell at `now`.
    pub fn job_started(&mut self, job: &str, now: u64) {
        self.running.insert(job.to_string());
        self.job_activity(now);
    }

    /// `job` ended at `now`: nothing waits on it any more.
    pub fn job_ended(&mut self, job: &str, now: u64) {
        self.running.remove(job);
        self.escalations.remove(job);
        self.group_waits.retain(|(waiting, _), _| waiting != job);
        let told = self.waiting.ended(job);
        self.tell_waiting(job, told);
        self.job_activity(now);
    }

    /// Terminal job `job` started at `now`: whether it waits for input is
    /// watched until it ends.
    pub fn watch_waiting(&mut self, job: &str, now: u64) {
        self.waiting.watch(job, now);
    }

    /// Terminal job `job` wrote to its terminal at `now`.
    pub fn terminal_output(&mut self, job: &str, now: u64) {
        let told = self.waiting.output(job, now);
        self.tell_waiting(job, told);
    }

    /// Keys were written to `job`'s terminal, or it was resized, at `now`.
    pub fn terminal_nudged(&mut self, job: &str, now: u64) {
        let told = self.waiting.nudged(job, now);
        self.tell_waiting(job, told);
    }

    /// What the look [`Action::LookWaiting`] asked for saw, at `now`.
    pub fn waiting_looked(&mut self, job: &str, seen: crate::laws::waiting::Seen, now: u64) {
        let told = self.waiting.looked(job, seen, now);
        self.tell_waiting(job, told);
    }

    /// The terminal jobs that wait for input now, as last told.
    pub fn waiting_jobs(&self) -> Vec<String> {
        self.waiting.waiting_jobs()
    }

    fn tell_waiting(&mut self, job: &str, told: Option<bool>) {
        if let Some(waiting) = told {
            self.actions.push_back(Action::TellWaiting {
                job: job.to_string(),
                waiting,
            });
        }
    }

    fn job_activity(&mut self, now: u64) {
        self.last_job_ms = now;
        self.idle_dropped = false;
    }

    /// Whether a job has not ended yet.
    pub fn job_running(&self) -> bool {
        !self.running.is_empty()
    }

    /// A spare's kernel became a session at `now`: from here its templates
    /// are the session's, idle since the claim.
    pub fn claimed(&mut self, now: u64) {
        self.claimed = true;
        self.job_activity(now);
    }

    pub fn is_claimed(&self) -> bool {
        self.claimed
    }

    /// Cancel the running `job`, whose process group is `group` (`None`:
    /// its shell has not said it yet).
    pub fn cancel(&mut self, job: &str, group: Option<u32>, now: u64) {
        if !self.running.contains(job) || self.escalations.contains_key(job) {
            return;
        }
        match group {
            Some(group) => self.interrupt(job, group, now),
            None => self.wait_for_group(job, Want::Cancel, now),
        }
    }

    /// Hang up the running `job` (its client went away).
    pub fn hang_up(&mut self, job: &str, group: Option<u32>, now: u64) {
        if !self.running.contains(job) {
            return;
        }
        match group {
            Some(group) => self.actions.push_back(Action::HangUp {
                job: job.to_string(),
                group,
            }),
            None => self.wait_for_group(job, Want::HangUp, now),
        }
    }

    fn wait_for_group(&mut self, job: &str, want: Want, now: u64) {
        let until = now + self.timing.cancel_grace;
        self.group_waits
            .entry((job.to_string(), want))
            .or_insert(until);
    }

    fn interrupt(&mut self, job: &str, group: u32, now: u64) {
        self.escalations.insert(
            job.to_string(),
            Escalation {
                group,
                step: Step::Interrupted,
                next_at: now + self.timing.cancel_grace,
            },
        );
        self.actions.push_back(Action::Signal {
            job: job.to_string(),
            group,
            signal: Signal::Interrupt,
        });
    }

    /// `job`'s shell said its process group: what waited for it goes on.
    pub fn group_started(&mut self, job: &str, group: u32, now: u64) {
        if self
            .group_waits
            .remove(&(job.to_string(), Want::HangUp))
            .is_some()
        {
            self.actions.push_back(Action::HangUp {
                job: job.to_string(),
                group,
            });
        }
        if self
            .group_waits
            .remove(&(job.to_string(), Want::Cancel))
            .is_some()
        {
            self.interrupt(job, group, now);
        }
    }

    /// No process of killed `job`'s group is left: its end is recorded now.
    pub fn group_gone(&mut self, job: &str) {
        let killed = self
            .escalations
            .get(job)
            .is_some_and(|e| matches!(e.step, Step::Killed { .. }));
        if killed {
            self.escalations.remove(job);
            self.actions.push_back(Action::EndKilled {
                job: job.to_string(),
            });
        }
    }

    /// Run `group` ended as its output closed, before its reporter's word.
    pub fn ended_before_reporter(&mut self, group: u32) {
        self.ended_before_reporter.push(group);
    }

    /// Whether `group`'s reporter comes after its run ended as its output
    /// closed (not a job shell of a dropped template, which took no job).
    pub fn reporter_after_end(&mut self, group: u32) -> bool {
        let before = self.ended_before_reporter.len();
        self.ended_before_reporter.retain(|&g| g != group);
        self.ended_before_reporter.len() < before
    }

    pub fn background(&self) -> u32 {
        self.background
    }

    /// The count of background processes; whether it changed.
    pub fn set_background(&mut self, count: u32) -> bool {
        let changed = self.background != count;
        self.background = count;
        changed
    }

    /// Whether a worker is connected (it writes busy evidence while it is).
    pub fn worker_connected(&mut self, connected: bool) {
        self.evidence.set_worker(connected);
    }

    /// The session's work as the work law reads it, told whenever it may
    /// have changed: busy evidence may be due at once.
    pub fn set_work(&mut self, work: WorkSet) {
        self.evidence.set_work(work);
    }

    /// The busy evidence asked for was written at `now`.
    pub fn evidence_recorded(&mut self, state: BusyState, now: u64) {
        self.evidence.recorded(state, now);
    }

    /// The busy evidence asked for could not be written at `now`.
    pub fn evidence_failed(&mut self, now: u64) {
        self.evidence.failed(now);
    }

    pub fn stopping(&self) -> bool {
        self.stopping
    }

    /// The kernel stops: no job starts and no template is made from here.
    pub fn stop(&mut self) {
        self.stopping = true;
    }
}

/// The next look at a killed group: soon, but not past the end's deadline.
fn probe_at(now: u64, until: u64) -> u64 {
    (now + POLL_MS).min(until)
}

#[cfg(test)]
mod tests;
