//! Bridge scenarios for bend/runs.bend: a run's lifecycle decisions
//! (`reconcile`, `next_run`, `may_withdraw`, `kernel_accepts`,
//! `end_is_recorded`).
//!
//! A scenario term is `(book, alive, spool, probes)` (see
//! bend/bridge/runs.bend): a transcript book, whether the kernel lives, its
//! spool, and runs to ask about. Its steps: reconcile's actions; next_run
//! with the gate open, then closed; then for each probe whether it may be
//! withdrawn, whether the kernel accepts it and whether an end reported for
//! it is stored. Run ids are below 2^24 and statuses in 0..2^23 (the model's
//! numbers are 24 bits; the decisions pass both through untouched).

use std::collections::BTreeMap;

use eukhe::laws::runs::{
    end_is_recorded, kernel_accepts, may_withdraw, next_run, reconcile, KernelView, RunAction,
    RunId, RunRecord, SpoolRun,
};

use super::harness::{self, list, Rng, Scenario};

const RECORDS: [RunRecord; 4] = [
    RunRecord::Queued,
    RunRecord::Withdrawn,
    RunRecord::Started,
    RunRecord::Ended,
];

fn record_code(record: RunRecord) -> u8 {
    match record {
        RunRecord::Queued => 0,
        RunRecord::Withdrawn => 1,
        RunRecord::Started => 2,
        RunRecord::Ended => 3,
    }
}

fn action_text(action: RunAction) -> String {
    match action {
        RunAction::Hand(run) => format!("hand {run}"),
        RunAction::Follow(run) => format!("follow {run}"),
        RunAction::RecordEnd(run, status) => format!("end {run}:{status}"),
        RunAction::RecordInterrupted(run) => format!("interrupted {run}"),
    }
}

fn next_text(next: Option<RunId>) -> String {
    match next {
        Some(run) => format!("run {run}"),
        None => "none".into(),
    }
}

fn bit(b: bool) -> u8 {
    u8::from(b)
}

fn scenario(
    book: &BTreeMap<RunId, RunRecord>,
    alive: bool,
    spool: &BTreeMap<RunId, SpoolRun>,
    probes: &[RunId],
) -> Scenario {
    let book_term = list(
        book.iter()
            .map(|(run, &record)| format!("({run}, {})", record_code(record))),
    );
    let spool_term = list(spool.iter().map(|(run, s)| match s {
        SpoolRun::Accepted => format!("({run}, 0, 0)"),
        SpoolRun::Ended { status } => {
            assert!((0..1 << 23).contains(status), "status {status}");
            format!("({run}, 1, {status})")
        }
    }));
    let probes_term = list(probes.iter().map(|p| p.to_string()));
    let mut s = Scenario::new(format!(
        "({book_term}, {}, {spool_term}, {probes_term})",
        u8::from(alive)
    ));
    let state = format!("book={book:?} alive={alive} spool={spool:?}");
    let actions = reconcile(book, KernelView { alive, spool });
    let actions_text = if actions.is_empty() {
        "nothing".to_string()
    } else {
        actions
            .iter()
            .map(|&a| action_text(a))
            .collect::<Vec<_>>()
            .join(", ")
    };
    s.step(format!("reconcile {state}"), actions_text);
    s.step("next_run gate open", next_text(next_run(book, true)));
    s.step("next_run gate closed", next_text(next_run(book, false)));
    for &p in probes {
        s.step(
            format!("probe {p}"),
            format!(
                "w{} a{} e{}",
                bit(may_withdraw(book, p)),
                bit(kernel_accepts(spool, p)),
                bit(end_is_recorded(book, p))
            ),
        );
    }
    s
}

/// What the spool may hold of a run in the exhaustive scenarios: nothing,
/// accepted, ended 0, ended 130 (a cancel).
const SPOOLED: [Option<SpoolRun>; 4] = [
    None,
    Some(SpoolRun::Accepted),
    Some(SpoolRun::Ended { status: 0 }),
    Some(SpoolRun::Ended { status: 130 }),
];

/// Every book over runs 1 and 2 (each absent or in any record) against
/// every spool over them (each absent, accepted, ended 0 or 130), the
/// kernel alive or dead, probing runs 0 to 3: 25 x 16 x 2 = 800.
fn exhaustive() -> Vec<Scenario> {
    let mut out = Vec::new();
    let book_states: Vec<Option<RunRecord>> =
        std::iter::once(None).chain(RECORDS.map(Some)).collect();
    for &b1 in &book_states {
        for &b2 in &book_states {
            let book: BTreeMap<RunId, RunRecord> = [(1, b1), (2, b2)]
                .into_iter()
                .filter_map(|(run, r)| r.map(|r| (run, r)))
                .collect();
            for s1 in SPOOLED {
                for s2 in SPOOLED {
                    let spool: BTreeMap<RunId, SpoolRun> = [(1, s1), (2, s2)]
                        .into_iter()
                        .filter_map(|(run, s)| s.map(|s| (run, s)))
                        .collect();
                    for alive in [true, false] {
                        out.push(scenario(&book, alive, &spool, &[0, 1, 2, 3]));
                    }
                }
            }
        }
    }
    out
}

/// Seeded random books and spools: up to six runs, ids small or up to
/// 2^24 - 1, several runs in flight at once (a book no worker writes, but
/// the decisions must still agree), statuses anywhere in 0..2^23.
fn random(seed: u64, n: usize) -> Vec<Scenario> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let runs = rng.below(7) as usize;
            let top = if rng.chance(50) { 12 } else { (1 << 24) - 1 };
            let mut ids: Vec<RunId> = (0..runs).map(|_| rng.below(top + 1)).collect();
            ids.sort_unstable();
            ids.dedup();
            let book: BTreeMap<RunId, RunRecord> = ids
                .iter()
                .map(|&run| (run, RECORDS[rng.below(4) as usize]))
                .collect();
            let mut spool = BTreeMap::new();
            for &run in &ids {
                match rng.below(4) {
                    0 => {}
                    1 => {
                        spool.insert(run, SpoolRun::Accepted);
                    }
                    _ => {
                        let status = match rng.below(3) {
                            0 => 0,
                            1 => rng.below(256) as i32,
                            _ => rng.below(1 << 23) as i32,
                        };
                        spool.insert(run, SpoolRun::Ended { status });
                    }
                }
            }
            // A spooled run the book does not know (another worker's book).
            if rng.chance(20) {
                spool.insert(rng.below(top + 1), SpoolRun::Accepted);
            }
            let mut probes: Vec<RunId> = ids.iter().take(3).copied().collect();
            probes.push(rng.below(top + 1));
            scenario(&book, rng.chance(50), &spool, &probes)
        })
        .collect()
}

#[test]
fn runs_bridge() {
    let mut scenarios = exhaustive();
    scenarios.extend(random(0x00e0_4125, 600));
    harness::check("runs", &scenarios);
}
