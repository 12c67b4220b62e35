//! Bridge scenarios for bend/launcher.bend: the run gate (`run_gate_step`),
//! the supervisor's commit (`idle_shutdown_commits`), adoption
//! (`adoption_verdict`) and the survivor step (`survivor_step`).
//!
//! Scenario terms are `(kind, head, steps)` with every step a 7-tuple
//! `(a, b, c, x, y, z, v)`, u64 values as limb triples (see
//! bend/bridge/launcher.bend): kind 0 a sequence of gate events from an open
//! gate, kind 1 a question time and its replies, kind 2 adoption cases,
//! kind 3 survivor cases.

use eukhe::laws::adoption::{
    adoption_verdict, survivor_step, AdoptionVerdict, LaunchStep, LiveWorker, ProcessIdentity,
};
use eukhe::laws::idle_shutdown::{
    idle_shutdown_commits, run_gate_step, GateEvent, GateOutput, QuiesceAnswer, QuiesceReply,
    RunGate, ShutdownCommit,
};
use eukhe::laws::restart::RestartVerdict;
use eukhe::laws::timing::{QUIESCE_ANSWER_MS, QUIESCE_HOLD_MS};
use eukhe::laws::work::{WorkKind, WorkSet};
use eukhe::session::SessionMeta;
use eukhe::supervisor::lifecycle::{handle, Action, Event};
use eukhe::supervisor::{Slot, SlotState};

use super::harness::{self, limbs, list, Rng, Scenario};

const HOLD: u64 = QUIESCE_HOLD_MS;
const ANSWER: u64 = QUIESCE_ANSWER_MS;

fn step_term(a: u64, b: u64, c: u64, x: u64, y: u64, z: u64, v: u64) -> String {
    format!(
        "({a}, {b}, {c}, {}, {}, {}, {})",
        limbs(x),
        limbs(y),
        limbs(z),
        limbs(v)
    )
}

fn term(kind: u32, head: u64, steps: Vec<String>) -> String {
    format!("({kind}, {}, {})", limbs(head), list(steps))
}

fn work_set(bits: u8) -> WorkSet {
    WorkKind::ALL
        .into_iter()
        .filter(|&kind| bits & kind as u8 != 0)
        .fold(WorkSet::EMPTY, |set, kind| set.with(kind))
}

// ---------------------------------------------------------------- run gate

#[derive(Clone, Copy)]
enum Ev {
    Quiesce(u8),
    Release,
    Stop,
    RunRequest,
    IdleStop,
}

const EVENTS: [Ev; 8] = [
    Ev::Quiesce(0),
    Ev::Quiesce(1),
    Ev::Quiesce(16),
    Ev::Quiesce(32),
    Ev::Release,
    Ev::Stop,
    Ev::RunRequest,
    Ev::IdleStop,
];

fn gate_name(gate: RunGate) -> &'static str {
    match gate {
        RunGate::Open => "open",
        RunGate::Quiesced { .. } => "quiesced",
        RunGate::Stopping => "stopping",
    }
}

fn output_name(out: GateOutput) -> &'static str {
    match out {
        GateOutput::Answer(QuiesceAnswer::Quiesced) => "answer-quiesced",
        GateOutput::Answer(QuiesceAnswer::Busy) => "answer-busy",
        GateOutput::Run { admitted: true } => "admitted",
        GateOutput::Run { admitted: false } => "refused",
        GateOutput::IdleStop { taken: true } => "stop-taken",
        GateOutput::IdleStop { taken: false } => "stop-refused",
        GateOutput::Done => "done",
    }
}

/// Events at the given times, from an open gate.
fn gate_scenario(events: &[(Ev, u64)]) -> Scenario {
    let steps = events
        .iter()
        .map(|&(ev, now)| match ev {
            Ev::Quiesce(work) => step_term(0, work as u64, 0, now, 0, 0, 0),
            Ev::Release => step_term(1, 0, 0, now, 0, 0, 0),
            Ev::Stop => step_term(2, 0, 0, now, 0, 0, 0),
            Ev::RunRequest => step_term(3, 0, 0, now, 0, 0, 0),
            Ev::IdleStop => step_term(4, 0, 0, now, 0, 0, 0),
        })
        .collect();
    let mut s = Scenario::new(term(0, 0, steps));
    let mut gate = RunGate::Open;
    for &(ev, now) in events {
        let (event, label) = match ev {
            Ev::Quiesce(work) => (
                GateEvent::Quiesce {
                    work: work_set(work),
                },
                format!("quiesce(work={work})"),
            ),
            Ev::Release => (GateEvent::Release, "release".to_string()),
            Ev::Stop => (GateEvent::Stop, "stop".to_string()),
            Ev::RunRequest => (GateEvent::RunRequest, "run-request".to_string()),
            Ev::IdleStop => (GateEvent::IdleStop, "idle-stop".to_string()),
        };
        let (next, out) = run_gate_step(gate, event, now);
        gate = next;
        s.step(
            format!("{label}@{now}"),
            format!("{} {}", output_name(out), gate_name(gate)),
        );
    }
    s
}

/// Every pair of events, the second one below/at/above the hold after the
/// first (and one before it), from two base times (0 and near u64::MAX);
/// every triple of events (without the busy background job) with the
/// second and third at +0 or +hold.
fn gate_exhaustive() -> Vec<Scenario> {
    let mut out = Vec::new();
    for base in [0, u64::MAX - HOLD - 1] {
        for &e1 in &EVENTS {
            for &e2 in &EVENTS {
                for delta in [-1i64, 0, 1, HOLD as i64 - 1, HOLD as i64, HOLD as i64 + 1] {
                    let t2 = base.checked_add_signed(delta).unwrap_or(0);
                    out.push(gate_scenario(&[(e1, base), (e2, t2)]));
                }
            }
        }
    }
    let five = [
        Ev::Quiesce(0),
        Ev::Quiesce(1),
        Ev::Release,
        Ev::Stop,
        Ev::RunRequest,
        Ev::IdleStop,
    ];
    for &e1 in &five {
        for &e2 in &five {
            for &e3 in &five {
                for (d2, d3) in [(0, 0), (0, HOLD), (HOLD, 0), (HOLD - 1, 1)] {
                    let t1 = 100;
                    out.push(gate_scenario(&[
                        (e1, t1),
                        (e2, t1 + d2),
                        (e3, t1 + d2 + d3),
                    ]));
                }
            }
        }
    }
    out
}

fn gate_random(seed: u64, n: usize) -> Vec<Scenario> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let mut now = if rng.chance(80) {
                rng.below(1 << 30)
            } else {
                u64::MAX - rng.below(4 * HOLD)
            };
            let len = 2 + rng.below(6) as usize;
            let events: Vec<(Ev, u64)> = (0..len)
                .map(|_| {
                    let ev = match rng.below(6) {
                        0 => Ev::Quiesce(0),
                        1 => Ev::Quiesce(rng.below(256) as u8),
                        2 => Ev::Release,
                        3 if rng.chance(40) => Ev::Stop,
                        4 if rng.chance(40) => Ev::IdleStop,
                        _ => Ev::RunRequest,
                    };
                    let step = match rng.below(5) {
                        0 => 0,
                        1 => HOLD - 1 + rng.below(3),
                        2 => rng.below(2 * HOLD),
                        3 => rng.below(100),
                        _ => rng.below(1 << 40),
                    };
                    now = if rng.chance(10) {
                        now.saturating_sub(rng.below(HOLD))
                    } else {
                        now.saturating_add(step)
                    };
                    (ev, now)
                })
                .collect();
            gate_scenario(&events)
        })
        .collect()
}

// ------------------------------------------------------------------ commit

#[derive(Clone, Copy)]
enum Reply {
    Quiesced(u64),
    Busy(u64),
    Silent,
}

fn commit_scenario(asked: u64, replies: &[Reply]) -> Scenario {
    let steps = replies
        .iter()
        .map(|&r| match r {
            Reply::Quiesced(at) => step_term(0, 0, 0, at, 0, 0, 0),
            Reply::Busy(at) => step_term(1, 0, 0, at, 0, 0, 0),
            Reply::Silent => step_term(2, 0, 0, 0, 0, 0, 0),
        })
        .collect();
    let rust: Vec<QuiesceReply> = replies
        .iter()
        .map(|&r| match r {
            Reply::Quiesced(at_ms) => QuiesceReply::Answered {
                answer: QuiesceAnswer::Quiesced,
                at_ms,
            },
            Reply::Busy(at_ms) => QuiesceReply::Answered {
                answer: QuiesceAnswer::Busy,
                at_ms,
            },
            Reply::Silent => QuiesceReply::Silent,
        })
        .collect();
    let label: Vec<String> = replies
        .iter()
        .map(|&r| match r {
            Reply::Quiesced(at) => format!("quiesced@{at}"),
            Reply::Busy(at) => format!("busy@{at}"),
            Reply::Silent => "silent".to_string(),
        })
        .collect();
    let mut s = Scenario::new(term(1, asked, steps));
    let verdict = match idle_shutdown_commits(asked, &rust) {
        ShutdownCommit::StopWorkers => "stop-workers",
        ShutdownCommit::ReopenAndAnswerBusy => "reopen-busy",
    };
    s.step(format!("asked@{asked} [{}]", label.join(", ")), verdict);
    s
}

/// Up to two replies of every kind: quiesced one before, at and after the
/// question, one before, at and one after the end of the answer window;
/// busy; silent. The question at 0, 100 and near u64::MAX (where the
/// window's end passes u64::MAX).
fn commit_exhaustive() -> Vec<Scenario> {
    let mut out = Vec::new();
    for asked in [0, 100, u64::MAX - ANSWER, u64::MAX - 1] {
        let mut kinds: Vec<Reply> = [
            asked.saturating_sub(1),
            asked,
            asked.saturating_add(1),
            asked.saturating_add(ANSWER - 1),
            asked.saturating_add(ANSWER),
            asked.saturating_add(ANSWER + 1),
        ]
        .into_iter()
        .map(Reply::Quiesced)
        .collect();
        kinds.push(Reply::Busy(asked));
        kinds.push(Reply::Silent);
        out.push(commit_scenario(asked, &[]));
        for &r1 in &kinds {
            out.push(commit_scenario(asked, &[r1]));
            for &r2 in &kinds {
                out.push(commit_scenario(asked, &[r1, r2]));
            }
        }
    }
    out
}

fn commit_random(seed: u64, n: usize) -> Vec<Scenario> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let asked = if rng.chance(85) {
                rng.below(1 << 40)
            } else {
                u64::MAX - rng.below(2 * ANSWER)
            };
            let len = rng.below(6) as usize;
            let replies: Vec<Reply> = (0..len)
                .map(|_| {
                    let at = match rng.below(3) {
                        0 => asked.saturating_add(ANSWER - 1 + rng.below(3)),
                        1 => asked.saturating_add(rng.below(2 * ANSWER)),
                        _ => asked.saturating_sub(rng.below(3)),
                    };
                    match rng.below(10) {
                        0 => Reply::Busy(at),
                        1 => Reply::Silent,
                        _ => Reply::Quiesced(at),
                    }
                })
                .collect();
            commit_scenario(asked, &replies)
        })
        .collect()
}

// ---------------------------------------------------------------- adoption

fn adoption_scenario(cases: &[(u64, u64, bool)]) -> Scenario {
    let steps = cases
        .iter()
        .map(|&(own, live, reachable)| step_term(own, live, reachable as u64, 0, 0, 0, 0))
        .collect();
    let mut s = Scenario::new(term(2, 0, steps));
    for &(own, live, reachable) in cases {
        let own_build = format!("b{own}");
        let live_build = format!("b{live}");
        let worker = LiveWorker {
            build: &live_build,
            reachable,
        };
        let verdict = match adoption_verdict(&own_build, &worker) {
            AdoptionVerdict::Adopt => "adopt",
            AdoptionVerdict::StopAndRelaunch => "stop-and-relaunch",
        };
        s.step(
            format!("own={own_build} live={live_build} reachable={reachable}"),
            verdict,
        );
    }
    s
}

/// Builds 0..4 against 0..4 (so "b1" against "b10" too), reachable or not.
fn adoption_all() -> Vec<Scenario> {
    let mut cases = Vec::new();
    for own in [0, 1, 2, 10] {
        for live in [0, 1, 2, 10] {
            for reachable in [false, true] {
                cases.push((own, live, reachable));
            }
        }
    }
    cases.chunks(8).map(adoption_scenario).collect()
}

// ---------------------------------------------------------------- survivor

type Ident = Option<(u32, u64)>;

fn survivor_scenario(cases: &[(Ident, Ident, bool)]) -> Scenario {
    let parts = |id: Ident| match id {
        Some((pid, start)) => (1, pid as u64, start),
        None => (0, 0, 0),
    };
    let steps = cases
        .iter()
        .map(|&(earlier, holder, stop_sent)| {
            let (a, x, y) = parts(earlier);
            let (b, z, v) = parts(holder);
            step_term(a, b, stop_sent as u64, x, y, z, v)
        })
        .collect();
    let mut s = Scenario::new(term(3, 0, steps));
    let ident = |id: Ident| id.map(|(pid, start_time)| ProcessIdentity { pid, start_time });
    for &(earlier, holder, stop_sent) in cases {
        let verdict = match survivor_step(ident(earlier), ident(holder), stop_sent) {
            LaunchStep::Launch => "launch",
            LaunchStep::StopEarlier => "stop-earlier",
            LaunchStep::CountFailure => "count-failure",
        };
        s.step(
            format!("earlier={earlier:?} holder={holder:?} stop_sent={stop_sent}"),
            verdict,
        );
    }
    s
}

/// Every pairing of: none, one process, the same pid with another start
/// time, another pid with the same start time, the largest identity.
fn survivor_all() -> Vec<Scenario> {
    let ids: [Ident; 6] = [
        None,
        Some((42, 1000)),
        Some((42, 2000)),
        Some((43, 1000)),
        Some((42, 1000 + (1 << 24))),
        Some((u32::MAX, u64::MAX)),
    ];
    let mut cases = Vec::new();
    for &earlier in &ids {
        for &holder in &ids {
            for stop_sent in [false, true] {
                cases.push((earlier, holder, stop_sent));
            }
        }
    }
    cases.chunks(10).map(survivor_scenario).collect()
}

fn survivor_random(seed: u64, n: usize) -> Vec<Scenario> {
    let mut rng = Rng::new(seed);
    let id = |rng: &mut Rng| -> Ident {
        if rng.chance(15) {
            None
        } else {
            Some((
                rng.below(3) as u32 + 100,
                rng.below(3) + (rng.below(2) << 40),
            ))
        }
    };
    let cases: Vec<(Ident, Ident, bool)> = (0..n)
        .map(|_| {
            let earlier = id(&mut rng);
            let holder = if rng.chance(40) {
                earlier
            } else {
                id(&mut rng)
            };
            (earlier, holder, rng.chance(50))
        })
        .collect();
    cases.chunks(10).map(survivor_scenario).collect()
}

#[test]
fn launcher_bridge() {
    let mut scenarios = gate_exhaustive();
    scenarios.extend(gate_random(0x1a0c_4e55, 250));
    scenarios.extend(commit_exhaustive());
    scenarios.extend(commit_random(0xc0_3317, 250));
    scenarios.extend(adoption_all());
    scenarios.extend(survivor_all());
    scenarios.extend(survivor_random(0x5e_7f17, 300));
    harness::check("launcher", &scenarios);
}

// ------------------------------------------------------------ launch world

/// One session's launches over time, driven through the supervisor's own
/// launch sequence (`supervisor::lifecycle::handle`, the sans-IO core
/// `src/supervisor/launch.rs` performs) with a fake host: each attempt's
/// environment says whether an earlier worker lives (`survivor`: 0 none,
/// 1 one that ends when stopped, 2 one that survives its stop, 3 its pid
/// held by another process) and whether the start brings a worker up
/// (`ok`). One line per attempt: the time, whether a stop was sent,
/// whether a start happened, and the failure's verdict.
fn launch_world_rust(start: u64, envs: &[(u8, bool)]) -> Vec<String> {
    let earlier = ProcessIdentity {
        pid: 42,
        start_time: 1000,
    };
    let reused = ProcessIdentity {
        pid: 42,
        start_time: 2000,
    };
    let holder = |survivor: u8, stop_sent: bool| match survivor {
        0 => None,
        3 => Some(reused),
        1 if stop_sent => None,
        _ => Some(earlier),
    };
    let meta = SessionMeta {
        id: "1a2b3c4d".into(),
        name: "world".into(),
        cwd: "/".into(),
        created_ms: 0,
        engine: "shell".into(),
        limits: Default::default(),
    };
    let mut slot = Slot::new(meta, SlotState::Saved);
    let mut now = start;
    let mut lines = Vec::new();
    let mut event = Some(Event::Launch);
    for &(survivor, ok) in envs {
        let at = format!(
            "@{}:{}:{}",
            now >> 48,
            (now >> 24) & 0xFF_FFFF,
            now & 0xFF_FFFF
        );
        let (mut stopped, mut launched, mut verdict) = (false, false, None);
        while let Some(next) = event.take() {
            for action in handle(&mut slot, next, now) {
                event = match action {
                    Action::FindSurvivor => {
                        let found = (survivor != 0).then_some(earlier);
                        Some(Event::Survivor {
                            earlier: found,
                            holder: holder(survivor, false),
                            stop_sent: false,
                        })
                    }
                    Action::StopEarlier(worker) => {
                        stopped = true;
                        Some(Event::Survivor {
                            earlier: Some(worker),
                            holder: holder(survivor, true),
                            stop_sent: true,
                        })
                    }
                    Action::Start => {
                        launched = true;
                        let started = if ok { Ok(()) } else { Err("no".into()) };
                        Some(Event::Started(started))
                    }
                    Action::Failed { verdict: v, .. } => {
                        verdict = Some(v);
                        event.take()
                    }
                    // The next attempt's environment answers the next launch.
                    Action::Pause { ms } => {
                        now += ms;
                        None
                    }
                    _ => event.take(),
                };
            }
        }
        let (s, l) = (stopped as u8, launched as u8);
        match verdict {
            None => {
                lines.push(format!("{at} s{s} l{l} f0 -"));
                break;
            }
            Some(RestartVerdict::Restart {
                pause_ms,
                failures_in_window,
            }) => {
                lines.push(format!(
                    "{at} s{s} l{l} f1 restart {pause_ms} {failures_in_window}"
                ));
                event = Some(Event::PauseOver);
            }
            Some(RestartVerdict::GiveUp { failures_in_window }) => {
                lines.push(format!("{at} s{s} l{l} f1 give-up {failures_in_window}"));
                break;
            }
        }
    }
    lines
}

#[test]
fn launch_world_bridge() {
    let all: [(u8, bool); 7] = [
        (0, false),
        (0, true),
        (1, false),
        (1, true),
        (2, false),
        (3, false),
        (3, true),
    ];
    let failing: [(u8, bool); 4] = [(0, false), (1, false), (2, false), (3, false)];
    let mut histories: Vec<Vec<(u8, bool)>> = vec![vec![]];
    for _ in 0..4 {
        histories = histories
            .iter()
            .flat_map(|h| {
                all.iter().map(move |&e| {
                    let mut h = h.clone();
                    h.push(e);
                    h
                })
            })
            .collect();
    }
    let mut rng = Rng::new(0x5EED_0777);
    for _ in 0..400 {
        histories.push((0..7).map(|_| failing[rng.below(4) as usize]).collect());
    }
    let mut scenarios = Vec::new();
    for start in [0u64, u64::MAX - 1_000_000] {
        for envs in &histories {
            let term = format!(
                "({}, {})",
                limbs(start),
                list(envs.iter().map(|(s, ok)| format!("({s}, {})", *ok as u8)))
            );
            let mut s = Scenario::new(term);
            s.step(
                format!("launches from {start} through {envs:?}"),
                launch_world_rust(start, envs).join(" | "),
            );
            scenarios.push(s);
        }
    }
    harness::check("launch_world", &scenarios);
}
