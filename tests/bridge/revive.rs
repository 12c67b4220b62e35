//! Bridge scenarios for bend/revive.bend: the work set (`session_work`), the
//! busy refresh tick (`busy_refresh`), freshness (`busy_evidence_fresh`) and
//! the revival gate (`revival_veto`).
//!
//! Scenario terms are `(tag, numbers, times)` (see bend/bridge/revive.bend),
//! times as Wide limbs: tag 0 an activity list, tag 1 refresh ticks, tag 2
//! boots, tag 3 freshness checks; several steps per scenario.

use eukhe::laws::revival::{
    busy_evidence_fresh, busy_refresh, revival_veto, BusyRecord, BusyState, OwnRecord,
    RecordOrigin, RefreshAction, RevivalVeto,
};
use eukhe::laws::timing::{BUSY_REFRESH_MS, REVIVAL_CLOCK_SKEW_MS, TM};
use eukhe::laws::work::{session_work, Activity, WorkKind, WorkSet};

use super::harness::{self, limbs, list, Rng, Scenario};

const R: u64 = BUSY_REFRESH_MS;
const SKEW: u64 = REVIVAL_CLOCK_SKEW_MS;
const TTL: u64 = TM.evidence.busy_evidence_ttl;

/// Steps per scenario: a result string must stay short (the runtime prints
/// it through a small stack).
const PER_SCENARIO: usize = 12;

fn activity(tag: u64) -> Activity {
    match tag {
        8 => Activity::WithdrawnInput,
        t => Activity::Work(WorkKind::ALL[t as usize]),
    }
}

fn work_scenario(tags: &[u64]) -> Scenario {
    let activities: Vec<Activity> = tags.iter().map(|&t| activity(t)).collect();
    let mut s = Scenario::new(format!(
        "(0, {}, [])",
        list(tags.iter().map(|t| t.to_string()))
    ));
    s.step(
        format!("activities {activities:?}"),
        format!("work {}", session_work(&activities).bits()),
    );
    s
}

/// Work sets by their bits, built from activities.
fn work_set(bits: u64) -> WorkSet {
    let activities: Vec<Activity> = (0..8)
        .filter(|i| bits >> i & 1 == 1)
        .map(activity)
        .collect();
    let set = session_work(&activities);
    assert_eq!(u64::from(set.bits()), bits);
    set
}

/// Steps of one tag, each `(numbers, (time, now), inputs, verdict)`, packed
/// into scenarios of PER_SCENARIO steps.
type Step = (Vec<u64>, u64, u64, String, String);

fn pack(tag: u32, steps: Vec<Step>) -> Vec<Scenario> {
    steps
        .chunks(PER_SCENARIO)
        .map(|chunk| {
            let nums = chunk
                .iter()
                .flat_map(|(n, ..)| n.iter().map(|x| x.to_string()));
            let times = chunk
                .iter()
                .flat_map(|(_, at, now, ..)| [limbs(*at), limbs(*now)]);
            let mut s = Scenario::new(format!("({tag}, {}, {})", list(nums), list(times)));
            for (_, _, _, inputs, verdict) in chunk {
                s.step(inputs.clone(), verdict.clone());
            }
            s
        })
        .collect()
}

fn refresh_step(work: u64, kind: u64, at: u64, now: u64) -> Step {
    let latest = match kind {
        0 => None,
        1 => Some(OwnRecord {
            state: BusyState::Busy,
            at_ms: at,
        }),
        _ => Some(OwnRecord {
            state: BusyState::Idle,
            at_ms: at,
        }),
    };
    let verdict = match busy_refresh(work_set(work), latest, now) {
        RefreshAction::Nothing => "nothing",
        RefreshAction::RecordBusy => "record-busy",
        RefreshAction::RecordIdle => "record-idle",
    };
    (
        vec![work, kind],
        at,
        now,
        format!("refresh work={work} latest={latest:?} now={now}"),
        verdict.to_string(),
    )
}

fn origin(code: u64) -> RecordOrigin {
    if code == 0 {
        RecordOrigin::ThisProcess
    } else {
        RecordOrigin::OtherProcess
    }
}

fn revival_step(kind: u64, origin_code: u64, at: u64, now: u64) -> Step {
    let latest = match kind {
        0 => None,
        1 => Some(BusyRecord {
            state: BusyState::Busy,
            at_ms: None,
        }),
        2 => Some(BusyRecord {
            state: BusyState::Idle,
            at_ms: None,
        }),
        3 => Some(BusyRecord {
            state: BusyState::Busy,
            at_ms: Some(at),
        }),
        _ => Some(BusyRecord {
            state: BusyState::Idle,
            at_ms: Some(at),
        }),
    };
    let verdict = match revival_veto(latest, now, origin(origin_code)) {
        None => "revive",
        Some(RevivalVeto::NoBusyRecord) => "veto no-busy-record",
        Some(RevivalVeto::NoRecordTime) => "veto no-record-time",
        Some(RevivalVeto::LastRecordIdle) => "veto last-record-idle",
        Some(RevivalVeto::NotFresh) => "veto not-fresh",
    };
    (
        vec![kind, origin_code],
        at,
        now,
        format!(
            "boot latest={latest:?} now={now} origin={:?}",
            origin(origin_code)
        ),
        verdict.to_string(),
    )
}

fn fresh_step(origin_code: u64, at: u64, now: u64) -> Step {
    let fresh = busy_evidence_fresh(at, now, origin(origin_code));
    (
        vec![origin_code],
        at,
        now,
        format!("fresh at={at} now={now} origin={:?}", origin(origin_code)),
        if fresh { "fresh" } else { "stale" }.to_string(),
    )
}

/// Record times at the edges of the u64 range and of the thresholds.
fn record_times(threshold: u64) -> Vec<u64> {
    vec![
        0,
        1,
        threshold - 1,
        threshold,
        threshold + 1,
        1 << 40,
        u64::MAX - threshold - 1,
        u64::MAX - 1,
        u64::MAX,
    ]
}

/// `now` for a record at `at`: offsets around each threshold, either way,
/// where they stay inside u64; and the ends of the range.
fn nows(at: u64, thresholds: &[u64]) -> Vec<u64> {
    let mut out = vec![0, u64::MAX, at];
    for &t in thresholds {
        for d in [t.wrapping_sub(1), t, t + 1] {
            out.extend(at.checked_add(d));
            out.extend(at.checked_sub(d));
        }
    }
    out.extend(at.checked_add(1));
    out.extend(at.checked_sub(1));
    out.sort_unstable();
    out.dedup();
    out
}

fn work_scenarios() -> Vec<Scenario> {
    let mut out = vec![work_scenario(&[])];
    // Every list of one or two activities.
    for a in 0..9 {
        out.push(work_scenario(&[a]));
        for b in 0..9 {
            out.push(work_scenario(&[a, b]));
        }
    }
    out.push(work_scenario(&(0..9).collect::<Vec<_>>()));
    let mut rng = Rng::new(0x5EED_0003);
    for _ in 0..200 {
        let len = rng.below(12);
        let tags: Vec<u64> = (0..len).map(|_| rng.below(9)).collect();
        out.push(work_scenario(&tags));
    }
    out
}

fn refresh_scenarios() -> Vec<Scenario> {
    let mut steps = Vec::new();
    for work in [0, 1, 128, 255] {
        for kind in 0..3 {
            for at in record_times(R) {
                for now in nows(at, &[R]) {
                    steps.push(refresh_step(work, kind, at, now));
                }
            }
        }
    }
    let mut rng = Rng::new(0x5EED_0004);
    for _ in 0..1200 {
        let work = if rng.chance(30) { 0 } else { rng.below(256) };
        let at = random_time(&mut rng);
        let now = near(&mut rng, at, &[R]);
        steps.push(refresh_step(work, rng.below(3), at, now));
    }
    pack(1, steps)
}

fn revival_scenarios() -> Vec<Scenario> {
    let mut steps = Vec::new();
    let edges = [SKEW, TTL, TTL + SKEW];
    for kind in 0..5 {
        for origin in 0..2 {
            let times = if kind == 3 {
                record_times(TTL)
            } else {
                vec![0, TTL, u64::MAX]
            };
            for at in times {
                for now in nows(at, &edges) {
                    steps.push(revival_step(kind, origin, at, now));
                }
            }
        }
    }
    let mut rng = Rng::new(0x5EED_0005);
    for _ in 0..1200 {
        let at = random_time(&mut rng);
        let now = near(&mut rng, at, &edges);
        let kind = if rng.chance(60) { 3 } else { rng.below(5) };
        steps.push(revival_step(kind, rng.below(2), at, now));
    }
    pack(2, steps)
}

fn fresh_scenarios() -> Vec<Scenario> {
    let mut steps = Vec::new();
    let edges = [SKEW, TTL, TTL + SKEW];
    for origin in 0..2 {
        for at in record_times(TTL + SKEW) {
            for now in nows(at, &edges) {
                steps.push(fresh_step(origin, at, now));
            }
        }
    }
    let mut rng = Rng::new(0x5EED_0006);
    for _ in 0..600 {
        let at = random_time(&mut rng);
        let now = near(&mut rng, at, &edges);
        steps.push(fresh_step(rng.below(2), at, now));
    }
    pack(3, steps)
}

fn random_time(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => rng.below(4 * TTL),
        1 => rng.next(),
        2 => u64::MAX - rng.below(4 * TTL),
        // wall-clock milliseconds of this century
        _ => 1_600_000_000_000 + rng.below(1 << 40),
    }
}

/// A `now` near `at`: a threshold away (give or take a little), or anywhere.
fn near(rng: &mut Rng, at: u64, thresholds: &[u64]) -> u64 {
    if rng.chance(10) {
        return rng.next();
    }
    let t = thresholds[rng.below(thresholds.len() as u64) as usize];
    let d = match rng.below(3) {
        0 => t + rng.below(3) - 1,
        1 => rng.below(2 * t),
        _ => t + rng.below(2 * R),
    };
    let d = d.saturating_sub(if rng.chance(50) { R } else { 0 });
    if rng.chance(30) {
        at.saturating_sub(d)
    } else {
        at.saturating_add(d)
    }
}

#[test]
fn revive_bridge() {
    let mut scenarios = work_scenarios();
    scenarios.extend(refresh_scenarios());
    scenarios.extend(revival_scenarios());
    scenarios.extend(fresh_scenarios());
    harness::check("revive", &scenarios);
}
