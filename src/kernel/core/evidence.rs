//! Busy evidence a kernel writes while no worker is connected (a worker
//! writes its own): so a reboot revives a session whose work goes on
//! without a worker. When a record is due is the refresh law's
//! (`laws::revival::busy_refresh_due`); these books keep what it is
//! decided from, and say when that is ([`EvidenceBook::due_at`]).

use crate::laws::revival::{busy_refresh_due, BusyState, OwnRecord};
use crate::laws::timing::KERNEL_EVIDENCE_RETRY_MS;
use crate::laws::work::WorkSet;

/// The kernel's busy-evidence books.
#[derive(Debug, Default)]
pub struct EvidenceBook {
    /// A worker is connected: it writes the evidence.
    worker: bool,
    /// The session's work, as last told.
    work: WorkSet,
    /// What this kernel last recorded since its last worker left.
    latest: Option<OwnRecord>,
    /// A record is being written: none is asked for meanwhile.
    asked: bool,
    /// A record that could not be written is asked for again no earlier.
    retry_at: Option<u64>,
}

impl EvidenceBook {
    /// Whether a worker is connected. While one is, it records; once it
    /// leaves, the kernel records afresh, whatever it recorded before.
    pub fn set_worker(&mut self, connected: bool) {
        if connected {
            self.latest = None;
        }
        self.worker = connected;
    }

    pub fn set_work(&mut self, work: WorkSet) {
        self.work = work;
    }

    pub fn work(&self) -> WorkSet {
        self.work
    }

    /// When a record is next due (monotonic ms), as long as nothing
    /// changes; `None` while a worker records, one is being written, or
    /// the latest record says what there is.
    pub fn due_at(&self) -> Option<u64> {
        if self.worker || self.asked {
            return None;
        }
        let due = busy_refresh_due(self.work, self.latest)?;
        Some(due.max(self.retry_at.unwrap_or(0)))
    }

    /// The record due at `now`, if any: asked for once, until
    /// [`EvidenceBook::recorded`] or [`EvidenceBook::failed`].
    pub fn take_due(&mut self, now: u64) -> Option<BusyState> {
        if self.due_at()? > now {
            return None;
        }
        self.asked = true;
        Some(match self.work.is_empty() {
            true => BusyState::Idle,
            false => BusyState::Busy,
        })
    }

    /// A record in `state` was written at `now`.
    pub fn recorded(&mut self, state: BusyState, now: u64) {
        self.latest = Some(OwnRecord { state, at_ms: now });
        self.asked = false;
        self.retry_at = None;
    }

    /// A record could not be written at `now`: asked for again after the
    /// retry pause.
    pub fn failed(&mut self, now: u64) {
        self.asked = false;
        self.retry_at = Some(now.saturating_add(KERNEL_EVIDENCE_RETRY_MS));
    }
}
