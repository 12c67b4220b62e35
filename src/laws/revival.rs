//! Busy evidence and revival: when a worker records that it is busy, and
//! whether a boot revives a dead worker from its latest record.
//!
//! Model: `bend/revive.bend`. Law: `revive_after_refresh`.
//!
//! - Refresh tick ([`busy_refresh`]): with work, record busy when there is no
//!   record yet, when the latest record says idle (work started after a run
//!   ended), or when the latest busy record is `BUSY_REFRESH_MS` old. Without
//!   work, record idle once when the latest record says busy.
//! - Freshness ([`busy_evidence_fresh`]): a record is fresh evidence while it
//!   is at most `busy_evidence_ttl` old (revival window + one refresh + one
//!   tick, so a boot within 25 minutes of a crash still finds it fresh,
//!   however long the run). A record from another process may disagree with
//!   this clock by up to `REVIVAL_CLOCK_SKEW_MS` either way; one from this
//!   process may not come from the future at all.
//! - Veto ([`revival_veto`]): revive only on a fresh busy record that has a
//!   time. No record, no record time, an idle record or a stale one vetoes.

use serde::{Deserialize, Serialize};

use super::timing::{BUSY_REFRESH_MS, REVIVAL_CLOCK_SKEW_MS, TM};
use super::work::WorkSet;

/// What the latest busy-evidence record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BusyState {
    /// The session had work.
    Busy,
    /// The session had none.
    Idle,
}

/// The worker's own latest record, timed by the worker's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnRecord {
    /// What it recorded.
    pub state: BusyState,
    /// When, on the worker's wall clock.
    pub at_ms: u64,
}

/// What the refresh tick writes to the busy-evidence journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefreshAction {
    /// Write nothing: the latest record still holds.
    Nothing,
    /// Write a busy record.
    RecordBusy,
    /// Write an idle record.
    RecordIdle,
}

/// The refresh tick at `now_ms` for a worker with `work` whose latest
/// record is `latest`.
pub fn busy_refresh(work: WorkSet, latest: Option<OwnRecord>, now_ms: u64) -> RefreshAction {
    match (work.is_empty(), latest) {
        (false, None) => RefreshAction::RecordBusy,
        (false, Some(record)) => match record.state {
            BusyState::Idle => RefreshAction::RecordBusy,
            BusyState::Busy if now_ms.saturating_sub(record.at_ms) >= BUSY_REFRESH_MS => {
                RefreshAction::RecordBusy
            }
            BusyState::Busy => RefreshAction::Nothing,
        },
        (
            true,
            Some(OwnRecord {
                state: BusyState::Busy,
                ..
            }),
        ) => RefreshAction::RecordIdle,
        (true, _) => RefreshAction::Nothing,
    }
}

/// When [`busy_refresh`] next asks for a record for `work` after `latest`,
/// as long as the work stays as it is: at once (0) when the work's state is
/// not on record, `BUSY_REFRESH_MS` after a busy record while there is
/// work, never (`None`) while the record already says what there is.
pub fn busy_refresh_due(work: WorkSet, latest: Option<OwnRecord>) -> Option<u64> {
    match (work.is_empty(), latest) {
        (false, Some(record)) if record.state == BusyState::Busy => {
            Some(record.at_ms.saturating_add(BUSY_REFRESH_MS))
        }
        (false, _) => Some(0),
        (true, Some(record)) if record.state == BusyState::Busy => Some(0),
        (true, _) => None,
    }
}

/// Who wrote a record, relative to the clock reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOrigin {
    /// Written by this process, on this clock.
    ThisProcess,
    /// Written by another process (a worker, before a crash or a reboot).
    OtherProcess,
}

/// Whether a record written at `at_ms` (wall clock) is fresh at `now_ms`.
pub fn busy_evidence_fresh(at_ms: u64, now_ms: u64, origin: RecordOrigin) -> bool {
    let skew = match origin {
        RecordOrigin::ThisProcess => 0,
        RecordOrigin::OtherProcess => REVIVAL_CLOCK_SKEW_MS,
    };
    let from_future = at_ms.saturating_sub(now_ms);
    let age = now_ms.saturating_sub(at_ms);
    from_future <= skew && age <= TM.evidence.busy_evidence_ttl + skew
}

/// The latest busy-evidence record of a session, as read back at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusyRecord {
    /// What it recorded.
    pub state: BusyState,
    /// Wall-clock milliseconds; `None` when the record carries no time.
    pub at_ms: Option<u64>,
}

/// Why a dead worker is not revived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevivalVeto {
    /// The session never recorded busy evidence.
    NoBusyRecord,
    /// The latest record has no time: never revive on it.
    NoRecordTime,
    /// The latest record says the session was idle.
    LastRecordIdle,
    /// The latest busy record is too old (or too far in the future).
    NotFresh,
}

/// Whether a boot at `now_ms` leaves a dead worker dead; `None` revives it.
pub fn revival_veto(
    latest: Option<BusyRecord>,
    now_ms: u64,
    origin: RecordOrigin,
) -> Option<RevivalVeto> {
    let Some(record) = latest else {
        return Some(RevivalVeto::NoBusyRecord);
    };
    let Some(at_ms) = record.at_ms else {
        return Some(RevivalVeto::NoRecordTime);
    };
    if record.state == BusyState::Idle {
        return Some(RevivalVeto::LastRecordIdle);
    }
    if !busy_evidence_fresh(at_ms, now_ms, origin) {
        return Some(RevivalVeto::NotFresh);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::work::WorkKind;

    const BUSY: WorkSet = WorkSet::EMPTY;

    fn busy_work() -> WorkSet {
        BUSY.with(WorkKind::Run)
    }

    #[test]
    fn work_after_an_idle_record_records_busy_at_once() {
        let idle = OwnRecord {
            state: BusyState::Idle,
            at_ms: 100,
        };
        assert_eq!(
            busy_refresh(busy_work(), Some(idle), 101),
            RefreshAction::RecordBusy
        );
        assert_eq!(
            busy_refresh(busy_work(), None, 0),
            RefreshAction::RecordBusy
        );
    }

    #[test]
    fn busy_is_rerecorded_every_refresh_interval() {
        let busy = OwnRecord {
            state: BusyState::Busy,
            at_ms: 1_000,
        };
        assert_eq!(
            busy_refresh(busy_work(), Some(busy), 1_000 + BUSY_REFRESH_MS - 1),
            RefreshAction::Nothing
        );
        assert_eq!(
            busy_refresh(busy_work(), Some(busy), 1_000 + BUSY_REFRESH_MS),
            RefreshAction::RecordBusy
        );
        assert_eq!(
            busy_refresh(WorkSet::EMPTY, Some(busy), 1_001),
            RefreshAction::RecordIdle
        );
    }

    /// The due time agrees with the refresh itself: nothing just before
    /// it, a record at it, and no due time while nothing would be written.
    #[test]
    fn the_refresh_is_due_exactly_when_the_refresh_law_records() {
        let records = [
            None,
            Some(OwnRecord {
                state: BusyState::Busy,
                at_ms: 1_000,
            }),
            Some(OwnRecord {
                state: BusyState::Idle,
                at_ms: 1_000,
            }),
        ];
        for work in [busy_work(), WorkSet::EMPTY] {
            for latest in records {
                let now = 1_000 + 3 * BUSY_REFRESH_MS;
                match busy_refresh_due(work, latest) {
                    None => {
                        assert_eq!(busy_refresh(work, latest, now), RefreshAction::Nothing)
                    }
                    Some(due) => {
                        assert_ne!(busy_refresh(work, latest, due), RefreshAction::Nothing);
                        if due > 0 {
                            let early = busy_refresh(work, latest, due - 1);
                            assert_eq!(early, RefreshAction::Nothing, "{work:?} {latest:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_boot_within_the_window_of_the_crash_revives_however_long_the_run() {
        // A run that has refreshed for ten hours crashes just before its
        // next refresh; the boot comes a whole revival window later.
        let last_refresh = 10 * 3_600_000;
        let crash = last_refresh + BUSY_REFRESH_MS + TM.evidence.busy_tick - 1;
        let boot = crash + TM.evidence.revival_window;
        let record = BusyRecord {
            state: BusyState::Busy,
            at_ms: Some(last_refresh),
        };
        assert_eq!(
            revival_veto(Some(record), boot, RecordOrigin::ThisProcess),
            None
        );
    }

    #[test]
    fn never_revives_without_a_busy_record_time() {
        let timeless = BusyRecord {
            state: BusyState::Busy,
            at_ms: None,
        };
        assert_eq!(
            revival_veto(Some(timeless), 0, RecordOrigin::OtherProcess),
            Some(RevivalVeto::NoRecordTime)
        );
        assert_eq!(
            revival_veto(None, 0, RecordOrigin::OtherProcess),
            Some(RevivalVeto::NoBusyRecord)
        );
    }

    #[test]
    fn the_skew_bound_applies_only_to_records_from_another_process() {
        let ahead = 1_000 + REVIVAL_CLOCK_SKEW_MS;
        assert!(busy_evidence_fresh(
            ahead,
            1_000,
            RecordOrigin::OtherProcess
        ));
        assert!(!busy_evidence_fresh(
            ahead + 1,
            1_000,
            RecordOrigin::OtherProcess
        ));
        assert!(!busy_evidence_fresh(
            1_001,
            1_000,
            RecordOrigin::ThisProcess
        ));
        let old = TM.evidence.busy_evidence_ttl + REVIVAL_CLOCK_SKEW_MS;
        assert!(busy_evidence_fresh(0, old, RecordOrigin::OtherProcess));
        assert!(!busy_evidence_fresh(0, old, RecordOrigin::ThisProcess));
        assert!(!busy_evidence_fresh(
            0,
            u64::MAX,
            RecordOrigin::OtherProcess
        ));
    }

    #[test]
    fn revival_wire_round_trips_and_rejects_unknown_tags() {
        let record = BusyRecord {
            state: BusyState::Busy,
            at_ms: Some(42),
        };
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<BusyRecord>(&json).unwrap(), record);
        assert!(serde_json::from_str::<BusyRecord>(r#"{"state":"sleepy","at_ms":1}"#).is_err());
        assert!(serde_json::from_str::<BusyRecord>(r#"{"state":"busy","at_ms":-1}"#).is_err());
        let veto = serde_json::to_string(&RevivalVeto::NoRecordTime).unwrap();
        assert_eq!(veto, r#""no_record_time""#);
        assert!(serde_json::from_str::<RevivalVeto>(r#""maybe""#).is_err());
    }
}
