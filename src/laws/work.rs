//! Work: the one set of things that make a session busy, and `session_work`.
//!
//! Model: `bend/revive.bend` (the work set is shared by revival, the orphan
//! decision and idle shutdown, which all import it from there).
//!
//! Work is: a run, a compaction, queued input, an admitted run start, a
//! background job, user bash, an unsettled child or a workflow run.
//! Withdrawn input is not work.

use serde::{Deserialize, Serialize};

/// One kind of work. The discriminant is the kind's bit in a [`WorkSet`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkKind {
    /// A run executing (or its output still open).
    Run = 1,
    /// A compaction (none is produced yet; part of the specification's work set).
    Compaction = 2,
    /// Input waiting in the queue.
    QueuedInput = 4,
    /// A run start admitted but not yet handed to the kernel (none is produced yet).
    AdmittedRunStart = 8,
    /// Processes a run left running.
    BackgroundJob = 16,
    /// An `eukhe bash` command executing.
    UserBash = 32,
    /// A job whose shell ended while processes still write its output.
    UnsettledChild = 64,
    /// A workflow run (none is produced yet; part of the specification's work set).
    WorkflowRun = 128,
}

impl WorkKind {
    /// Every kind, in bit order.
    pub const ALL: [WorkKind; 8] = [
        WorkKind::Run,
        WorkKind::Compaction,
        WorkKind::QueuedInput,
        WorkKind::AdmittedRunStart,
        WorkKind::BackgroundJob,
        WorkKind::UserBash,
        WorkKind::UnsettledChild,
        WorkKind::WorkflowRun,
    ];
}

/// Something a session is doing or holding, as its worker reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activity {
    /// An activity that is work of this kind.
    Work(WorkKind),
    /// Input the user queued and then withdrew: not work.
    WithdrawnInput,
}

/// The kinds of work a session has: a set, so two runs are one `run`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<WorkKind>", into = "Vec<WorkKind>")]
pub struct WorkSet(u8);

impl WorkSet {
    /// No work at all.
    pub const EMPTY: WorkSet = WorkSet(0);

    /// Whether the session has no work.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether the set holds `kind`.
    pub fn contains(self, kind: WorkKind) -> bool {
        self.0 & kind as u8 != 0
    }

    /// The set with `kind` added.
    pub fn with(self, kind: WorkKind) -> WorkSet {
        WorkSet(self.0 | kind as u8)
    }

    /// The set as its bits (bit values are the [`WorkKind`] discriminants).
    pub fn bits(self) -> u8 {
        self.0
    }

    /// The kinds in the set, in bit order.
    pub fn kinds(self) -> Vec<WorkKind> {
        WorkKind::ALL
            .into_iter()
            .filter(|&kind| self.contains(kind))
            .collect()
    }
}

/// A list of work kinds that names one twice: no set reads so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a work set names a kind twice")]
pub struct RepeatedKind;

impl TryFrom<Vec<WorkKind>> for WorkSet {
    type Error = RepeatedKind;

    fn try_from(kinds: Vec<WorkKind>) -> Result<Self, RepeatedKind> {
        let set = kinds
            .iter()
            .fold(WorkSet::EMPTY, |set, &kind| set.with(kind));
        if set.kinds().len() != kinds.len() {
            return Err(RepeatedKind);
        }
        Ok(set)
    }
}

impl From<WorkSet> for Vec<WorkKind> {
    fn from(set: WorkSet) -> Self {
        set.kinds()
    }
}

/// The work of a session with these activities.
pub fn session_work(activities: &[Activity]) -> WorkSet {
    activities
        .iter()
        .fold(WorkSet::EMPTY, |set, activity| match activity {
            Activity::Work(kind) => set.with(*kind),
            Activity::WithdrawnInput => set,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn withdrawn_input_is_not_work() {
        assert!(session_work(&[Activity::WithdrawnInput]).is_empty());
        assert!(session_work(&[]).is_empty());
    }

    #[test]
    fn every_kind_is_work() {
        for kind in WorkKind::ALL {
            let set = session_work(&[Activity::WithdrawnInput, Activity::Work(kind)]);
            assert_eq!(set.kinds(), vec![kind]);
        }
    }

    #[test]
    fn work_wire_round_trips_and_rejects_unknown_kinds() {
        let set = session_work(&[
            Activity::Work(WorkKind::Run),
            Activity::Work(WorkKind::UserBash),
        ]);
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, r#"["run","user_bash"]"#);
        assert_eq!(serde_json::from_str::<WorkSet>(&json).unwrap(), set);
        assert!(serde_json::from_str::<WorkSet>(r#"["run","nap"]"#).is_err());
        assert!(serde_json::from_str::<WorkSet>(r#"["run","run"]"#).is_err());
        assert!(serde_json::from_str::<WorkSet>(r#"[1]"#).is_err());
    }
}
