//! Bridge scenarios for bend/replace.bend: version rank (`version_rank`,
//! which reads versions with the `semver` crate), the relation
//! (`replace_relation`), the verdict (`replace_verdict`),
//! `busy_daemon_kept` and the remote verdict (`remote_verdict`).
//!
//! A scenario term is a list of step tuples `(form, client_version,
//! client_id, client_protocol, interactive, daemon_version, daemon_id,
//! daemon_protocol, idle_shutdown)` (see bend/bridge/replace.bend). Verdicts:
//! - rank (form 0): `rank <M>.<m>.<p>.<1 if release else 0>` or `invalid`;
//! - verdict (form 1): `<relation> <action> | <message or ->`, or `invalid`
//!   when either version is not a version;
//! - busy (form 2): `<action> | <message or ->`;
//! - remote (form 4): `<action> | <message or ->` (or `invalid`) for a
//!   daemon on host `REMOTE_HOSTS[interactive]`.
//!
//! The Bend model parses version strings itself, so the rank scenarios are
//! also the check that it accepts and rejects exactly what the semver crate
//! does on this domain (3691 strings): every string of length 1 to 5 over
//! `0 1 .`, `1.2.3` followed by every string of length 1 to 4 over
//! `0 1 a . - +`, the listed invalid forms, `m.n.m` and `n.m.n-dev` for
//! boundary numbers, and 1500 versions from the grammar (see
//! [`grammar_version`]).
//!
//! Verdicts: every client x daemon version of [`BOUNDARY_VERSIONS`], same
//! or other build id, protocols agreeing or not, both kinds, with and
//! without idle_shutdown (784), the busy answer for every version pair
//! (98), and 300 seeded random starts from the grammar, every sixth a busy
//! answer (protocols below 2^24: the model's numbers are u24). Remote
//! verdicts: every client x daemon version of [`BOUNDARY_VERSIONS`], same
//! or other build id, protocols agreeing or not, each on one of
//! [`REMOTE_HOSTS`] in turn (196), and 200 seeded random ones.

use eukhe::laws::replace::{
    busy_daemon_kept, remote_verdict, replace_relation, replace_verdict, start_kind, version_rank,
    Build, ClientKind, ClientStart, DaemonHello, Relation, ReplaceAction, ReplaceVerdict,
};

use super::harness::{self, list, Rng, Scenario};

/// Rank steps per scenario (model lines stay short).
const RANKS_PER_SCENARIO: usize = 12;

/// Versions that are not versions (the semver crate rejects each).
const INVALID: &[&str] = &[
    "1.2",
    "01.2.3",
    "1.2.3-",
    "1.2.3-01",
    "v1.2.3",
    "",
    "1.2.3+",
    "1..3",
    "1.2.3.4",
    "1.02.3",
    "1.2.03",
    "00.1.2",
    "1.2.3-a..b",
    "1.2.3-a.",
    "1.2.3-.a",
    "1.2.3+a..b",
    "1.2.3+a.",
    "1.2.3-+a",
    "1.2.3+a+b",
    "1.2.3-a_b",
    "1.2.3-a b",
    "1.2.3 ",
    " 1.2.3",
    "-1.2.3",
    "1.2.3a",
    "1.2.-3",
    "1.2.3-00",
    "1.2.3-rc.01",
    "1",
    ".1.2",
    "1.2.",
    "a.b.c",
];

/// Pre-release identifier lists the grammar draws from.
const PRE: &[&str] = &[
    "dev", "main.46", "rc.1", "alpha-2", "0", "1", "10", "alpha", "beta.2", "x-y", "a.b.c", "--",
    "0a", "01a", "1.0", "999", "main.0", "rc.0.1", "-", "A-Z.9",
];

/// Build metadata the grammar draws from (leading zeros allowed).
const BUILD: &[&str] = &[
    "build",
    "5",
    "001",
    "sha.abc123",
    "x-y",
    "0",
    "20240101.a",
    "-",
];

/// Boundary numbers for components.
const NUMBERS: &[u64] = &[0, 1, 2, 9, 10, 11, 99, 100, 101, 999, 1000];

/// A version from the grammar: components 0..=1000 without leading zeros
/// (boundary numbers half the time), an optional pre-release, optional
/// build metadata.
fn grammar_version(rng: &mut Rng) -> String {
    let number = |rng: &mut Rng| {
        if rng.chance(50) {
            NUMBERS[rng.below(NUMBERS.len() as u64) as usize]
        } else {
            rng.below(1001)
        }
    };
    let mut v = format!("{}.{}.{}", number(rng), number(rng), number(rng));
    if rng.chance(50) {
        v.push('-');
        v.push_str(PRE[rng.below(PRE.len() as u64) as usize]);
    }
    if rng.chance(30) {
        v.push('+');
        v.push_str(BUILD[rng.below(BUILD.len() as u64) as usize]);
    }
    v
}

/// Every string of length 1..=max over `alphabet`.
fn strings(alphabet: &[char], max: usize) -> Vec<String> {
    let mut all = Vec::new();
    let mut layer = vec![String::new()];
    for _ in 0..max {
        layer = layer
            .iter()
            .flat_map(|p| {
                alphabet.iter().map(move |&c| {
                    let mut s = p.clone();
                    s.push(c);
                    s
                })
            })
            .collect();
        all.extend(layer.iter().cloned());
    }
    all
}

fn rank_text(version: &str) -> String {
    match version_rank(version) {
        Ok(r) => format!(
            "rank {}.{}.{}.{}",
            r.major, r.minor, r.patch, r.release as u8
        ),
        Err(_) => "invalid".into(),
    }
}

fn relation_text(r: Relation) -> &'static str {
    match r {
        Relation::ClientNewer => "client-newer",
        Relation::ClientOlder => "client-older",
        Relation::SameBuild => "same-build",
        Relation::OtherBuild => "other-build",
    }
}

fn verdict_text(v: &ReplaceVerdict) -> String {
    let action = match v.action {
        ReplaceAction::Use => "use",
        ReplaceAction::ReplaceIfIdle => "replace-if-idle",
        ReplaceAction::Stop => "stop",
    };
    format!("{action} | {}", v.message.as_deref().unwrap_or("-"))
}

/// A Bend string literal (the domain has no `"` or `\`).
fn lit(s: &str) -> String {
    assert!(!s.contains(['"', '\\']), "{s:?}");
    format!("\"{s}\"")
}

/// One start: client and daemon builds, protocols, kind, capability.
#[derive(Clone)]
struct Start {
    client: (String, String),
    client_protocol: u32,
    interactive: bool,
    daemon: (String, String),
    daemon_protocol: u32,
    idle_shutdown: bool,
}

impl Start {
    fn term(&self, form: u32) -> String {
        self.term_with(form, u64::from(self.interactive))
    }

    /// The step term with `interactive`'s field set to `fifth` (an index
    /// for the forms that take one).
    fn term_with(&self, form: u32, fifth: u64) -> String {
        format!(
            "({form}, {}, {}, {}, {fifth}, {}, {}, {}, {})",
            lit(&self.client.0),
            lit(&self.client.1),
            self.client_protocol,
            lit(&self.daemon.0),
            lit(&self.daemon.1),
            self.daemon_protocol,
            self.idle_shutdown as u8
        )
    }

    fn inputs(&self) -> String {
        format!(
            "client={}/{} p{} {} daemon={}/{} p{} idle_shutdown={}",
            self.client.0,
            self.client.1,
            self.client_protocol,
            if self.interactive {
                "interactive"
            } else {
                "background"
            },
            self.daemon.0,
            self.daemon.1,
            self.daemon_protocol,
            self.idle_shutdown
        )
    }

    fn builds(&self) -> (Build, DaemonHello) {
        let client = Build {
            version: self.client.0.clone(),
            build_id: self.client.1.clone(),
        };
        let daemon = DaemonHello {
            build: Build {
                version: self.daemon.0.clone(),
                build_id: self.daemon.1.clone(),
            },
            protocol: self.daemon_protocol,
            idle_shutdown: self.idle_shutdown,
        };
        (client, daemon)
    }

    fn verdict_scenario(&self) -> Scenario {
        let (client, daemon) = self.builds();
        let kind = if self.interactive {
            ClientKind::Interactive
        } else {
            ClientKind::Background
        };
        let verdict = match (
            replace_relation(&client, &daemon.build),
            replace_verdict(&client, self.client_protocol, kind, &daemon),
        ) {
            (Ok(r), Ok(v)) => format!("{} {}", relation_text(r), verdict_text(&v)),
            (Err(_), Err(_)) => "invalid".into(),
            _ => panic!("relation and verdict disagree on validity"),
        };
        let mut s = Scenario::new(list([self.term(1)]));
        s.step(format!("verdict {}", self.inputs()), verdict);
        s
    }

    /// The remote verdict on host `REMOTE_HOSTS[host]` (carried in the
    /// step's `interactive` field).
    fn remote_scenario(&self, host: usize) -> Scenario {
        let (client, daemon) = self.builds();
        let name = REMOTE_HOSTS[host];
        let verdict = match remote_verdict(&client, self.client_protocol, &daemon, name) {
            Ok(v) => verdict_text(&v),
            Err(_) => "invalid".into(),
        };
        let mut s = Scenario::new(list([self.term_with(4, host as u64)]));
        s.step(format!("remote on {name} {}", self.inputs()), verdict);
        s
    }

    fn busy_scenario(&self) -> Scenario {
        let (client, daemon) = self.builds();
        let verdict = busy_daemon_kept(&client, self.client_protocol, &daemon);
        let mut s = Scenario::new(list([self.term(2)]));
        s.step(format!("busy {}", self.inputs()), verdict_text(&verdict));
        s
    }
}

fn rank_scenarios(versions: &[String]) -> Vec<Scenario> {
    versions
        .chunks(RANKS_PER_SCENARIO)
        .map(|chunk| {
            let terms = chunk
                .iter()
                .map(|v| format!("(0, {}, \"\", 0, 0, \"\", \"\", 0, 0)", lit(v)));
            let mut s = Scenario::new(list(terms));
            for v in chunk {
                s.step(format!("rank {v:?}"), rank_text(v));
            }
            s
        })
        .collect()
}

/// Versions at the order's boundaries: a series' pre-releases (-dev and
/// the older scheme), its release with and without build metadata, the
/// series below, the series above (a minor 9/10 step), and a non-version.
const BOUNDARY_VERSIONS: &[&str] = &[
    "0.9.8",
    "0.9.9-main.46",
    "0.9.9-dev",
    "0.9.9",
    "0.9.9+meta.1",
    "0.10.0",
    "1.2",
];

/// The hosts a remote verdict names (bend/bridge/replace.bend
/// `replace_bridge_hosts`, in that order).
const REMOTE_HOSTS: &[&str] = &["build1", "ann@box.example:2222", "[::1]:22", "127.0.0.1"];

/// One test, so the harness runs (which share a scratch directory) never
/// overlap.
#[test]
fn replace_bridge() {
    replace_rank_bridge();
    replace_verdict_bridge();
    replace_start_table_bridge();
    replace_remote_bridge();
}

/// The remote verdict (`remote_verdict`) is the model's
/// (`replace_remote_verdict`).
fn replace_remote_bridge() {
    let mut scenarios = Vec::new();
    let mut host = 0;
    for &cv in BOUNDARY_VERSIONS {
        for &dv in BOUNDARY_VERSIONS {
            for did in ["a", "b"] {
                for dp in [1, 2] {
                    let start = Start {
                        client: (cv.into(), "a".into()),
                        client_protocol: 1,
                        interactive: false,
                        daemon: (dv.into(), did.into()),
                        daemon_protocol: dp,
                        idle_shutdown: true,
                    };
                    scenarios.push(start.remote_scenario(host));
                    host = (host + 1) % REMOTE_HOSTS.len();
                }
            }
        }
    }
    let mut rng = Rng::new(0x7265_6d6f);
    let ids = ["a", "b", "git-3f2c1e9", "0"];
    for _ in 0..200 {
        let version = |rng: &mut Rng| {
            if rng.chance(5) {
                INVALID[rng.below(INVALID.len() as u64) as usize].to_string()
            } else {
                grammar_version(rng)
            }
        };
        let cv = version(&mut rng);
        let dv = if rng.chance(30) {
            cv.clone()
        } else {
            version(&mut rng)
        };
        let start = Start {
            client: (cv, ids[rng.below(4) as usize].into()),
            client_protocol: 1 + rng.below(3) as u32,
            interactive: false,
            daemon: (dv, ids[rng.below(4) as usize].into()),
            daemon_protocol: 1 + rng.below(3) as u32,
            idle_shutdown: rng.chance(50),
        };
        let host = rng.below(REMOTE_HOSTS.len() as u64) as usize;
        scenarios.push(start.remote_scenario(host));
    }
    harness::check("replace", &scenarios);
}

/// The command-to-kind table the client uses (`start_kind` over
/// `ClientStart::ALL`) is the model's, entry by entry and in length.
fn replace_start_table_bridge() {
    let scenarios: Vec<Scenario> = (0..=ClientStart::ALL.len())
        .map(|i| {
            let expected = match ClientStart::ALL.get(i) {
                Some(&start) => format!(
                    "{} {}",
                    start.name(),
                    match start_kind(start) {
                        ClientKind::Interactive => "interactive",
                        ClientKind::Background => "background",
                    }
                ),
                None => "none".to_string(),
            };
            let mut s = Scenario::new(list([format!("(3, \"\", \"\", 0, {i}, \"\", \"\", 0, 0)")]));
            s.step(format!("table entry {i}"), expected);
            s
        })
        .collect();
    harness::check("replace", &scenarios);
}

fn replace_rank_bridge() {
    let mut versions: Vec<String> = INVALID.iter().map(|s| s.to_string()).collect();
    versions.extend(strings(&['0', '1', '.'], 5));
    versions.extend(
        strings(&['0', '1', 'a', '.', '-', '+'], 4)
            .into_iter()
            .map(|s| format!("1.2.3{s}")),
    );
    for &m in NUMBERS {
        for &n in NUMBERS {
            versions.push(format!("{m}.{n}.{m}"));
            versions.push(format!("{n}.{m}.{n}-dev"));
        }
    }
    let mut rng = Rng::new(0x7665_7273);
    for _ in 0..1500 {
        versions.push(grammar_version(&mut rng));
    }
    let accepted = versions.iter().filter(|v| version_rank(v).is_ok()).count();
    assert!(accepted > 1000 && versions.len() - accepted > 500);
    harness::check("replace", &rank_scenarios(&versions));
}

fn replace_verdict_bridge() {
    let mut starts = Vec::new();
    // Exhaustive over the boundary versions: every client x daemon version,
    // same or other build id, protocols agreeing or not, both kinds, with
    // and without idle_shutdown.
    for &cv in BOUNDARY_VERSIONS {
        for &dv in BOUNDARY_VERSIONS {
            for did in ["a", "b"] {
                for dp in [1, 2] {
                    for interactive in [true, false] {
                        for idle_shutdown in [true, false] {
                            starts.push(Start {
                                client: (cv.into(), "a".into()),
                                client_protocol: 1,
                                interactive,
                                daemon: (dv.into(), did.into()),
                                daemon_protocol: dp,
                                idle_shutdown,
                            });
                        }
                    }
                }
            }
        }
    }
    let mut scenarios: Vec<Scenario> = starts.iter().map(Start::verdict_scenario).collect();
    // Busy answers: every client x daemon version, protocols agreeing or not.
    for &cv in BOUNDARY_VERSIONS {
        for &dv in BOUNDARY_VERSIONS {
            for dp in [1, 2] {
                let start = Start {
                    client: (cv.into(), "a".into()),
                    client_protocol: 1,
                    interactive: true,
                    daemon: (dv.into(), "b".into()),
                    daemon_protocol: dp,
                    idle_shutdown: true,
                };
                scenarios.push(start.busy_scenario());
            }
        }
    }
    // Seeded random starts from the grammar (and a few non-versions), with
    // equal versions often enough that build ids decide, protocols up to
    // the model's u24 range.
    let mut rng = Rng::new(0x7265_706c);
    let ids = ["a", "b", "git-3f2c1e9", "0"];
    for i in 0..300 {
        let version = |rng: &mut Rng| {
            if rng.chance(5) {
                INVALID[rng.below(INVALID.len() as u64) as usize].to_string()
            } else {
                grammar_version(rng)
            }
        };
        let cv = version(&mut rng);
        let dv = if rng.chance(30) {
            cv.clone()
        } else {
            version(&mut rng)
        };
        let protocol = |rng: &mut Rng| {
            if rng.chance(80) {
                1 + rng.below(3) as u32
            } else {
                rng.below(1 << 24) as u32
            }
        };
        let start = Start {
            client: (cv, ids[rng.below(4) as usize].into()),
            client_protocol: protocol(&mut rng),
            interactive: rng.chance(50),
            daemon: (dv, ids[rng.below(4) as usize].into()),
            daemon_protocol: protocol(&mut rng),
            idle_shutdown: rng.chance(50),
        };
        scenarios.push(if i % 6 == 5 {
            start.busy_scenario()
        } else {
            start.verdict_scenario()
        });
    }
    harness::check("replace", &scenarios);
}
