//! Bridge scenarios for bend/orphan.bend: the lost-supervisor decision
//! (`orphan_decision` with `LostExitWindow::from_ms`).
//!
//! A scenario term is a list of `(lost_since, now, window_ms, work_bits)`
//! tuples, times as limb triples (see bend/bridge/orphan.bend); each tuple is one step, decided
//! independently. The model applies the wire cap (10^14 ms) itself.

use eukhe::laws::orphan::{orphan_decision, LostExitWindow, OrphanVerdict, WIRE_MS_MAX};
use eukhe::laws::work::{WorkKind, WorkSet};

use super::harness::{self, limbs, list, Rng, Scenario};

/// Steps per scenario: keeps each model line well under 300 characters.
const STEPS: usize = 12;

fn work_set(bits: u8) -> WorkSet {
    WorkKind::ALL
        .into_iter()
        .filter(|&kind| bits & kind as u8 != 0)
        .fold(WorkSet::EMPTY, |set, kind| set.with(kind))
}

fn verdict_text(verdict: OrphanVerdict) -> &'static str {
    match verdict {
        OrphanVerdict::Wait => "wait",
        OrphanVerdict::ExitResumable => "exit-resumable",
        OrphanVerdict::CloseSession => "close-session",
    }
}

type Case = (u64, u64, u64, u8);

fn scenarios(cases: &[Case]) -> Vec<Scenario> {
    cases
        .chunks(STEPS)
        .map(|chunk| {
            let term = list(chunk.iter().map(|&(lost, now, window, work)| {
                format!(
                    "({}, {}, {}, {work})",
                    limbs(lost),
                    limbs(now),
                    limbs(window)
                )
            }));
            let mut s = Scenario::new(term);
            for &(lost, now, window, work) in chunk {
                let verdict =
                    orphan_decision(lost, now, LostExitWindow::from_ms(window), work_set(work));
                assert_eq!(work_set(work).bits(), work);
                s.step(
                    format!("lost={lost} now={now} window={window} work={work}"),
                    verdict_text(verdict),
                );
            }
            s
        })
        .collect()
}

/// Every window boundary (0, 1, the default, the 24- and 48-bit limb
/// edges, the wire cap one below/at/above, u64::MAX) against every elapsed
/// boundary (one below/at/above w and 2w, 0, huge), from several lost_since
/// values (0, limb edges, near u64::MAX), with a clock reading before
/// lost_since, for no work, each single kind and all kinds.
fn boundary_cases() -> Vec<Case> {
    let windows = [
        0,
        1,
        2,
        299_999,
        300_000,
        300_001,
        (1 << 24) - 1,
        1 << 24,
        (1 << 48) - 1,
        1 << 48,
        WIRE_MS_MAX / 2,
        WIRE_MS_MAX - 1,
        WIRE_MS_MAX,
        WIRE_MS_MAX + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    let lost_sinces = [
        0,
        1,
        1 << 24,
        WIRE_MS_MAX,
        u64::MAX - 2 * WIRE_MS_MAX - 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    let works: [u8; 4] = [0, 1, 16, 255];
    let mut cases = Vec::new();
    for &window in &windows {
        let w2 = window.saturating_mul(2);
        let mut elapsed = vec![
            0,
            1,
            window.saturating_sub(1),
            window,
            window.saturating_add(1),
            w2.saturating_sub(1),
            w2,
            w2.saturating_add(1),
            u64::MAX,
        ];
        elapsed.sort_unstable();
        elapsed.dedup();
        for &lost in &lost_sinces {
            let mut nows: Vec<u64> = elapsed
                .iter()
                .filter_map(|&e| lost.checked_add(e))
                .collect();
            // a clock reading before lost_since (and the max reading)
            nows.extend([lost.saturating_sub(1), 0, u64::MAX]);
            nows.sort_unstable();
            nows.dedup();
            for &work in &works {
                for &now in &nows {
                    cases.push((lost, now, window, work));
                }
            }
        }
    }
    cases
}

fn random_cases(seed: u64, n: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed);
    let scales = [1_000u64, 1 << 24, 1_000_000_000, 1 << 48, WIRE_MS_MAX * 3];
    let scaled = |rng: &mut Rng| {
        let scale = scales[rng.below(5) as usize];
        rng.below(scale)
    };
    (0..n)
        .map(|_| {
            let window = match rng.below(4) {
                0 => 300_000,
                1 => scaled(&mut rng),
                2 => WIRE_MS_MAX - 2 + rng.below(5),
                _ => rng.next(),
            };
            let lost = if rng.chance(70) {
                scaled(&mut rng)
            } else {
                rng.next()
            };
            let now = match rng.below(4) {
                // around one or two windows after lost_since
                0 => lost
                    .saturating_add(window)
                    .saturating_add(rng.below(3))
                    .saturating_sub(1),
                1 => lost
                    .saturating_add(window.saturating_mul(2))
                    .saturating_add(rng.below(3))
                    .saturating_sub(1),
                2 => lost.saturating_add(scaled(&mut rng)),
                _ => rng.next(),
            };
            let work = if rng.chance(40) {
                0
            } else {
                rng.below(256) as u8
            };
            (lost, now, window, work)
        })
        .collect()
}

#[test]
fn orphan_bridge() {
    let mut cases = boundary_cases();
    cases.extend(random_cases(0x0e0a_4a11, 2_000));
    harness::check("orphan", &scenarios(&cases));
}

// ------------------------------------------------------------ wire form

/// The form the lost-exit window crosses processes in: the text of
/// `EUKHE_WORKER_LOST_EXIT_MS`, written by the supervisor
/// (`LostExitWindow::to_text`) and read by a worker
/// (`LostExitWindow::parse_text`), against the model's
/// `orphan_window_text` and `orphan_window_parse`: the same texts are read
/// alike or refused alike, and every window is written the same.
#[test]
fn orphan_wire_bridge() {
    let limb_words =
        |ms: u64| format!("{} {} {}", ms >> 48, (ms >> 24) & 0xFF_FFFF, ms & 0xFF_FFFF);
    let read = |text: &str| match LostExitWindow::parse_text(text) {
        Ok(LostExitWindow::Never) => "ok never".to_string(),
        Ok(LostExitWindow::After(ms)) => format!("ok {}", limb_words(ms)),
        Err(_) => "rejected".to_string(),
    };
    let mut texts: Vec<String> = [
        "never",
        "Never",
        "NEVER",
        "forever",
        "never ",
        " never",
        "",
        " ",
        "0",
        "00",
        "007",
        "+5",
        "-5",
        "+0",
        "5 ",
        " 5",
        "5ms",
        "3e5",
        "0x10",
        "3.5",
        "1_000",
        "5 minutes",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let edges = [
        0,
        1,
        9,
        10,
        300_000,
        (1 << 24) - 1,
        1 << 24,
        (1 << 48) - 1,
        1 << 48,
        WIRE_MS_MAX - 1,
        WIRE_MS_MAX,
        WIRE_MS_MAX + 1,
        u64::MAX / 10,
        u64::MAX - 1,
        u64::MAX,
    ];
    for ms in edges {
        texts.push(ms.to_string());
        texts.push(format!("0{ms}"));
    }
    // Past u64::MAX: refused, as a number no u64 holds.
    texts.push("18446744073709551616".into());
    texts.push("99999999999999999999".into());
    texts.push("100000000000000000000000".into());
    let mut rng = Rng::new(0x0e0a_7e47);
    for _ in 0..200 {
        texts.push(rng.next().to_string());
        texts.push((rng.next() % (WIRE_MS_MAX * 2)).to_string());
    }
    let mut scenarios = Vec::new();
    for text in &texts {
        let mut s = Scenario::new(format!("(0, {text:?}, (0, 0, 0))"));
        s.step(format!("read {text:?}"), read(text));
        scenarios.push(s);
    }
    for ms in edges.into_iter().filter(|&ms| ms <= WIRE_MS_MAX) {
        let mut s = Scenario::new(format!("(1, \"\", {})", limbs(ms)));
        s.step(
            format!("text of {ms}"),
            format!("text {}", LostExitWindow::After(ms).to_text()),
        );
        scenarios.push(s);
    }
    let mut s = Scenario::new("(2, \"\", (0, 0, 0))".to_string());
    s.step(
        "text of never",
        format!("text {}", LostExitWindow::Never.to_text()),
    );
    scenarios.push(s);
    harness::check("orphan_wire", &scenarios);
}
