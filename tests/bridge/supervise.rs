//! Bridge scenarios for bend/supervise.bend: the restart budget
//! (`restart_decide`, `restart_pause_ms`) and the timeouts (`relations_hold`,
//! `timeouts_ordered`, and the daemon's own `TM`).
//!
//! Scenario terms are `(tag, numbers, times)` (see bend/bridge/supervise.bend),
//! times as Wide limbs:
//! tag 0 a worker's failure times, tag 1 failure counts for the pause, tag 2 a
//! Tm's 37 values, tag 3 a Tm compared with the model's own constants.

use eukhe::laws::restart::{restart_decide, restart_pause_ms, RestartVerdict};
use eukhe::laws::timing::{
    relations_hold, timeouts_ordered, Tm, ORDERING, RESTART_WINDOW_MS, TIMEOUT_COUNT, TM,
};

use super::harness::{self, limbs, list, Rng, Scenario};

const W: u64 = RESTART_WINDOW_MS;

fn verdict_text(verdict: RestartVerdict) -> String {
    match verdict {
        RestartVerdict::Restart {
            pause_ms,
            failures_in_window,
        } => format!("restart {pause_ms} {failures_in_window}"),
        RestartVerdict::GiveUp { failures_in_window } => format!("give-up {failures_in_window}"),
    }
}

/// One worker failing at `times`, in that order: each failure is decided with
/// all earlier ones as its history.
fn failures(times: &[u64]) -> Scenario {
    let mut s = Scenario::new(format!(
        "(0, [], {})",
        list(times.iter().map(|&t| limbs(t)))
    ));
    for (i, &now) in times.iter().enumerate() {
        s.step(
            format!("fail@{now} after {:?}", &times[..i]),
            verdict_text(restart_decide(&times[..i], now)),
        );
    }
    s
}

fn pauses(ns: &[u32]) -> Scenario {
    let mut s = Scenario::new(format!(
        "(1, {}, [])",
        list(ns.iter().map(|n| n.to_string()))
    ));
    for &n in ns {
        s.step(
            format!("pause n={n}"),
            format!("pause {}", restart_pause_ms(n)),
        );
    }
    s
}

fn tm_term(tag: u32, v: [u64; TIMEOUT_COUNT]) -> String {
    format!("({tag}, [], {})", list(v.iter().map(|&x| limbs(x))))
}

fn timing(v: [u64; TIMEOUT_COUNT]) -> Scenario {
    let tm = Tm::from_values(v);
    let bits: String = relations_hold(&tm)
        .iter()
        .map(|&b| if b { '1' } else { '0' })
        .collect();
    let word = if timeouts_ordered(&tm) {
        "ordered"
    } else {
        "unordered"
    };
    let mut s = Scenario::new(tm_term(2, v));
    s.step(format!("tm {v:?}"), format!("{bits} {word}"));
    s
}

fn same_as_daemon(v: [u64; TIMEOUT_COUNT]) -> Scenario {
    let mut s = Scenario::new(tm_term(3, v));
    let word = if v == TM.values() { "same" } else { "differs" };
    s.step(format!("tm {v:?} vs the daemon's"), word);
    s
}

fn needed(v: &[u64; TIMEOUT_COUNT], relation: usize) -> u64 {
    ORDERING[relation].waits_for.iter().map(|&i| v[i]).sum()
}

/// The relations of `ORDERING` in an order where a relation comes after
/// every relation whose waiter it waits for.
fn waited_for_first() -> Vec<usize> {
    let mut order: Vec<usize> = Vec::new();
    while order.len() < ORDERING.len() {
        let before = order.len();
        for (r, relation) in ORDERING.iter().enumerate() {
            let ready = !order.contains(&r)
                && relation.waits_for.iter().all(|&i| {
                    (0..ORDERING.len())
                        .filter(|&q| ORDERING[q].waiter == i)
                        .all(|q| order.contains(&q))
                });
            if ready {
                order.push(r);
            }
        }
        assert!(order.len() > before, "ORDERING has a cycle");
    }
    order
}

/// Gaps between consecutive failures that sit on the window's boundaries.
const GAPS: [u64; 5] = [0, 1, W - 1, W, W + 1];

fn restart_scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    // Every sequence of five failures whose gaps are boundary gaps (625).
    for code in 0..GAPS.len().pow(4) {
        let mut times = vec![0u64];
        let mut c = code;
        for _ in 0..4 {
            let t = times.last().unwrap() + GAPS[c % GAPS.len()];
            times.push(t);
            c /= GAPS.len();
        }
        out.push(failures(&times));
    }
    // Crash loops of 8 failures inside one window, 0/1 ms apart (128).
    for code in 0..(1u64 << 7) {
        let times: Vec<u64> = (0..8)
            .scan(5u64, |t, i| {
                if i > 0 {
                    *t += (code >> (i - 1)) & 1;
                }
                Some(*t)
            })
            .collect();
        out.push(failures(&times));
    }
    // The window edge seen from earlier failures, near 0 and near u64::MAX.
    for base in [0, W - 1, W, W + 1, u64::MAX - 3 * W - 2] {
        for d in [W - 2, W - 1, W, W + 1] {
            out.push(failures(&[base, base + 1, base + 1 + d]));
            out.push(failures(&[
                base,
                base,
                base,
                base,
                base,
                base + d,
                base + d,
            ]));
        }
        // Six failures in one window, then one more at each boundary gap.
        for gap in GAPS {
            out.push(failures(&[
                base,
                base,
                base,
                base,
                base,
                base + 1,
                base + 1 + gap,
            ]));
        }
    }
    out.push(failures(&[u64::MAX - 1, u64::MAX, u64::MAX]));
    out.push(failures(&[0, u64::MAX]));
    // Seeded random failure sequences at the real constants.
    let mut rng = Rng::new(0x5EED_0001);
    for _ in 0..600 {
        let len = 1 + rng.below(10) as usize;
        let mut t = match rng.below(4) {
            0 => 0,
            1 => rng.below(10 * W),
            2 => rng.below(u64::MAX / 2),
            _ => u64::MAX - rng.below(20 * W) - 12 * W,
        };
        let mut times = Vec::new();
        for _ in 0..len {
            times.push(t);
            let gap = match rng.below(3) {
                0 => GAPS[rng.below(GAPS.len() as u64) as usize],
                1 => rng.below(W / 3),
                _ => rng.below(2 * W),
            };
            t = t.saturating_add(gap);
        }
        if rng.chance(5) {
            // Out of order (a clock that went back): decided all the same.
            times.reverse();
        }
        out.push(failures(&times));
    }
    out
}

fn pause_scenarios() -> Vec<Scenario> {
    // A result string must stay short (the runtime prints it through a
    // small stack): ten counts per scenario.
    let ns: Vec<u32> = (0..=40).collect();
    let mut out: Vec<Scenario> = ns.chunks(10).map(pauses).collect();
    out.push(pauses(&[100, 1000, 65_535, 1 << 20, (1 << 24) - 1]));
    out
}

fn timing_scenarios() -> Vec<Scenario> {
    let real = TM.values();
    let mut out = vec![timing(real), same_as_daemon(real)];
    // Each relation at its edge: the waiter one below, at and one above the
    // sum; each waited-for timeout one longer.
    for r in 0..ORDERING.len() {
        let need = needed(&real, r);
        for waiter in [need - 1, need, need + 1] {
            let mut v = real;
            v[ORDERING[r].waiter] = waiter;
            out.push(timing(v));
        }
        for &i in ORDERING[r].waits_for {
            let mut v = real;
            v[i] += 1;
            out.push(timing(v));
        }
    }
    // Any one constant changed is not the daemon's.
    for i in 0..real.len() {
        for delta in [1i64, -1] {
            let mut v = real;
            v[i] = (v[i] as i64 + delta) as u64;
            out.push(same_as_daemon(v));
        }
    }
    // Seeded random Tms: free values below 2^16, each waiter set near its
    // sum (relations in an order where every waited-for value is set
    // first), so every value stays below 2^21.
    let order = waited_for_first();
    let mut rng = Rng::new(0x5EED_0002);
    for _ in 0..400 {
        let mut v = [0u64; TIMEOUT_COUNT];
        for x in v.iter_mut() {
            *x = rng.below(1 << 16);
        }
        if rng.chance(90) {
            for &r in &order {
                let need = needed(&v, r);
                let w = match rng.below(5) {
                    0 => need.saturating_sub(1),
                    1 => need,
                    2 => need + 1,
                    3 => need.saturating_sub(rng.below(1000)),
                    _ => need + rng.below(1000),
                };
                v[ORDERING[r].waiter] = w;
            }
        }
        assert!(v.iter().all(|&x| x < 1 << 21));
        out.push(timing(v));
    }
    out
}

#[test]
fn supervise_bridge() {
    let mut scenarios = restart_scenarios();
    scenarios.extend(pause_scenarios());
    scenarios.extend(timing_scenarios());
    harness::check("supervise", &scenarios);
}

// ------------------------------------------------------------ wire forms

/// The decoded verdict as the bridge words it.
fn wire_text(decoded: Result<RestartVerdict, serde_json::Error>) -> String {
    match decoded {
        Ok(RestartVerdict::Restart {
            pause_ms,
            failures_in_window,
        }) => format!("ok restart {pause_ms} {failures_in_window}"),
        Ok(RestartVerdict::GiveUp { failures_in_window }) => {
            format!("ok give-up {failures_in_window}")
        }
        Err(_) => "rejected".into(),
    }
}

/// The restart verdict's serde form (src/laws/restart.rs) against the
/// model's `restart_wire_decode`/`restart_wire_encode`: the same JSON
/// object text (fields repeated or in any order, as written) is accepted
/// or refused alike and decodes to the same verdict; each verdict the
/// budget gives serializes to the text the model writes. The numbers stay
/// below 2^24 or at and past 2^32 (the model carries a give-up's count in
/// 24 bits; both refuse 2^32 as a u32).
#[test]
fn restart_wire_bridge() {
    let tags = ["restart", "give_up", "retry", "Restart", ""];
    let keys = ["pause_ms", "failures", "extra"];
    let numbers: [u64; 10] = [0, 1, 5, 6, 250, 251, 4000, 8000, 30_000, 1 << 32];
    let mut objects: Vec<(&str, Vec<(&str, u64)>)> = Vec::new();
    for tag in tags {
        objects.push((tag, vec![]));
        for k1 in keys {
            for &v1 in &numbers {
                objects.push((tag, vec![(k1, v1)]));
                for k2 in keys {
                    for &v2 in &numbers {
                        objects.push((tag, vec![(k1, v1), (k2, v2)]));
                    }
                }
            }
        }
        objects.push((
            tag,
            vec![("pause_ms", 250), ("failures", 1), ("failures", 1)],
        ));
    }
    let mut scenarios: Vec<Scenario> = objects
        .iter()
        .map(|(tag, fields)| {
            let json = format!(
                "{{\"verdict\":{tag:?}{}}}",
                fields
                    .iter()
                    .map(|(k, v)| format!(",\"{k}\":{v}"))
                    .collect::<String>()
            );
            let term = format!(
                "(0, 0, {tag:?}, {})",
                list(
                    fields
                        .iter()
                        .map(|(k, v)| format!("({k:?}, {})", limbs(*v)))
                )
            );
            let mut s = Scenario::new(term);
            s.step(
                format!("decode {json}"),
                wire_text(serde_json::from_str::<RestartVerdict>(&json)),
            );
            s
        })
        .collect();
    for n in 1..=12u32 {
        let mut s = Scenario::new(format!("(1, {n}, \"\", [])"));
        s.step(
            format!("encode restart_verdict({n})"),
            serde_json::to_string(&eukhe::laws::restart::restart_verdict(n))
                .unwrap()
                .replace('"', "'"),
        );
        scenarios.push(s);
    }
    harness::check("restart_wire", &scenarios);
}
