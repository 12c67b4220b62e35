use super::ordering::*;
use super::*;

/// The relation of [`ORDERING`] in which `waiter` waits for exactly
/// `waits_for` (in any order).
fn relation(waiter: usize, waits_for: &[usize]) -> usize {
    let mut wanted = waits_for.to_vec();
    wanted.sort_unstable();
    ORDERING
        .iter()
        .position(|r| {
            let mut have = r.waits_for.to_vec();
            have.sort_unstable();
            r.waiter == waiter && have == wanted
        })
        .unwrap_or_else(|| {
            panic!(
                "no relation orders {} over {:?}",
                TIMEOUT_NAMES[waiter],
                waits_for
                    .iter()
                    .map(|&i| TIMEOUT_NAMES[i])
                    .collect::<Vec<_>>()
            )
        })
}

/// The relation holds for the daemon's timeouts and fails once what it
/// waits for grows by one ms more than the room its waiter leaves.
fn holds_and_is_sharp(index: usize) {
    assert!(relations_hold(&TM)[index], "{}", ORDERING[index].why);
    let mut values = TM.values();
    let r = &ORDERING[index];
    let needed: u64 = r.waits_for.iter().map(|&i| values[i]).sum();
    values[r.waits_for[0]] += values[r.waiter] - needed + 1;
    assert!(
        !relations_hold(&Tm::from_values(values))[index],
        "{}",
        r.why
    );
}

#[test]
fn a_request_waits_out_a_whole_stop_of_its_session() {
    // The quiesce answer, the worker's stop (asked and left within one stop
    // grace, else killed: the kill route and the child drain), then its
    // kernel's stop on either backend, and the slack.
    holds_and_is_sharp(relation(
        SESSION_SETTLE,
        &[
            QUIESCE_ANSWER,
            STOP_GRACE,
            KILL_ROUTE,
            CHILD_DRAIN,
            KERNEL_STOP_WAIT,
            SCHEDULING_SLACK,
        ],
    ));
    holds_and_is_sharp(relation(
        KERNEL_STOP_WAIT,
        &[KERNEL_UNIT_STOP, KILL_ROUTE, CHILD_DRAIN],
    ));
    holds_and_is_sharp(relation(
        KERNEL_STOP_WAIT,
        &[KERNEL_TERM_WAIT, KILL_ROUTE, CHILD_DRAIN],
    ));
}

/// The worker's orderly stop as the code runs it: it waits once for its
/// kernel's teardown (the kernel's processes' SIGTERM grace, then their
/// reaping after SIGKILL), then closes the transcript; all of it, with the
/// slack, inside the stop grace the supervisor gives before it kills.
#[test]
fn the_workers_orderly_stop_fits_in_its_stop_grace() {
    holds_and_is_sharp(relation(
        KERNEL_TEARDOWN,
        &[RUN_TERM_GRACE, CHILD_DRAIN, SCHEDULING_SLACK],
    ));
    holds_and_is_sharp(relation(
        STOP_GRACE,
        &[KERNEL_TEARDOWN, HARNESS_CLOSE, SCHEDULING_SLACK],
    ));
    // The manager's stop of the unit outlasts it too.
    holds_and_is_sharp(relation(WORKER_UNIT_STOP, &[STOP_GRACE, SCHEDULING_SLACK]));
}

#[test]
fn every_relation_states_one_of_the_seven_sentences_and_each_is_stated() {
    for relation in &ORDERING {
        assert!(
            SENTENCES.iter().any(|s| relation.why.starts_with(s)),
            "{}: not one of the specification's sentences",
            relation.why
        );
    }
    for sentence in SENTENCES {
        assert!(
            ORDERING.iter().any(|r| r.why.starts_with(sentence)),
            "no relation states {sentence:?}"
        );
    }
}

/// A tight sum has the stated slack: no waiter sits within the slack of
/// the sum of what it waits for unless a slack is one of its terms.
#[test]
fn no_waiter_sits_at_its_sum_without_the_slack() {
    let values = TM.values();
    assert!(values[SCHEDULING_SLACK] > 0);
    for relation in &ORDERING {
        let needed: u64 = relation.waits_for.iter().map(|&i| values[i]).sum();
        // The busy tick is the lateness a due refresh is allowed: that
        // relation's slack.
        let has_slack = relation.waits_for.contains(&SCHEDULING_SLACK)
            || relation.waits_for.contains(&BUSY_TICK);
        assert!(
            has_slack || values[relation.waiter] >= needed + values[SCHEDULING_SLACK],
            "{} waits {} ms for {needed} ms: no room for a late wake-up",
            TIMEOUT_NAMES[relation.waiter],
            values[relation.waiter]
        );
    }
}

#[test]
fn lengthening_any_waited_for_timeout_past_its_waiter_breaks_the_order() {
    for (index, relation) in ORDERING.iter().enumerate() {
        for &i in relation.waits_for {
            let mut values = TM.values();
            let needed: u64 = relation.waits_for.iter().map(|&j| values[j]).sum();
            values[i] += values[relation.waiter] - needed + 1;
            let tm = Tm::from_values(values);
            assert!(!relations_hold(&tm)[index], "{}", relation.why);
            assert!(!timeouts_ordered(&tm));
        }
    }
}

#[test]
fn durations_are_words_only_when_whole() {
    assert_eq!(duration_in_words(0), "0 ms");
    assert_eq!(duration_in_words(999), "999 ms");
    assert_eq!(duration_in_words(60_000), "1 minute");
    assert_eq!(duration_in_words(900_000), "15 minutes");
    assert_eq!(duration_in_words(90_000), "90 s");
    assert_eq!(duration_in_words(120_500), "120500 ms");
    assert_eq!(give_up_in_words(), "6 times in 15 minutes");
}

#[test]
fn the_daemon_timeouts_are_ordered() {
    assert!(timeouts_ordered(&TM), "{:?}", relations_hold(&TM));
}

#[test]
fn shortening_any_waiter_below_its_sum_breaks_the_order() {
    for (index, relation) in ORDERING.iter().enumerate() {
        let mut values = TM.values();
        let needed: u64 = relation.waits_for.iter().map(|&i| values[i]).sum();
        values[relation.waiter] = needed - 1;
        let tm = Tm::from_values(values);
        assert!(!relations_hold(&tm)[index], "{}", relation.why);
    }
}

#[test]
fn the_specification_constants() {
    assert_eq!(CLIENT_RELAUNCH_WITHIN_MS, 60_000);
    assert_eq!(WORKER_LOST_EXIT_DEFAULT_MS, 300_000);
    assert_eq!(BUSY_REFRESH_MS, 300_000);
    assert_eq!(REVIVAL_WINDOW_MS, 1_500_000);
    assert_eq!(RESTART_WINDOW_MS, 900_000);
}

#[test]
fn a_stop_outlasts_a_cancel_first_grace_and_its_kill() {
    let stop_relation = ORDERING
        .iter()
        .position(|r| r.waiter == STOP_GRACE && r.waits_for.contains(&CANCEL_GRACE))
        .expect("the cancel grace is ordered against the stop grace");
    let mut tm = TM;
    tm.kernel.cancel_grace = tm.worker.stop_grace - tm.supervisor.kill_route;
    assert!(relations_hold(&tm)[stop_relation]);
    tm.kernel.cancel_grace += 1;
    assert!(!relations_hold(&tm)[stop_relation]);
    assert!(!timeouts_ordered(&tm));
}

#[test]
fn tm_wire_rejects_unknown_fields() {
    let json = serde_json::to_value(TM).unwrap();
    let back: Tm = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, TM);
    let mut extra = json;
    extra["surprise"] = 1.into();
    assert!(serde_json::from_value::<Tm>(extra).is_err());
}

/// Every Rust source file of the daemon under `src/`, with its text
/// up to its test module (tests may wait as they like).
fn shell_sources() -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "tests") {
                    continue;
                }
                walk(&path, out);
            } else if path.file_name().is_some_and(|n| n == "tests.rs") {
                continue; // a test module in its own file
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // Up to the test module: a test-only item before it (a
                // constructor for tests) hides none of the code after it.
                let code = match text.find("#[cfg(test)]\nmod ") {
                    Some(at) => text[..at].to_string(),
                    None => text,
                };
                out.push((path.display().to_string(), code));
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    assert!(out.len() > 20, "found only {} source files", out.len());
    out
}

fn is_timing_home(path: &str) -> bool {
    path.ends_with("src/laws/timing.rs") || path.ends_with("src/config.rs")
}

/// No shell writes a duration as a number: every wait is a `TM` field
/// or a named interval of this module (or a configuration default).
#[test]
fn no_duration_literal_outside_timing_and_config() {
    let mut literals = Vec::new();
    for (path, code) in shell_sources() {
        if is_timing_home(&path) {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            for call in [
                "from_millis(",
                "from_secs(",
                "from_micros(",
                "from_nanos(",
                "Duration::new(",
            ] {
                let mut rest = line;
                while let Some(at) = rest.find(call) {
                    rest = &rest[at + call.len()..];
                    if rest.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
                        literals.push(format!("{path}:{}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        literals.is_empty(),
        "duration literals outside laws::timing and config:\n{}",
        literals.join("\n")
    );
}

/// The timeouts the code waits: every `Tm` field is read by some code
/// outside this module (the shells, or a law module through its
/// specification name), so none is a number the laws are proved over
/// that the daemon does not obey. The list printed is every timeout
/// the shells use.
#[test]
fn every_timeout_is_used_and_every_use_is_a_tm_field() {
    const GROUPS: [&str; 5] = ["worker", "kernel", "supervisor", "client", "evidence"];
    let aliases = [
        ("CLIENT_RELAUNCH_WITHIN_MS", "client_relaunch_within"),
        ("WORKER_LOST_EXIT_DEFAULT_MS", "worker_lost_exit"),
        ("QUIESCE_ANSWER_MS", "quiesce_answer"),
        ("QUIESCE_HOLD_MS", "quiesce_hold"),
        ("REVIVAL_CLOCK_SKEW_MS", "revival_clock_skew"),
        ("BUSY_REFRESH_MS", "busy_refresh"),
        ("REVIVAL_WINDOW_MS", "revival_window"),
        ("RESTART_WINDOW_MS", "restart_window"),
        ("CANCEL_GRACE_MS", "cancel_grace"),
        ("RESTART_PAUSE_MAX_MS", "restart_pause_max"),
        ("WORKER_LOST_EXIT_MIN_MS", "worker_lost_exit"),
    ];
    let mut used: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (path, code) in shell_sources() {
        if path.ends_with("src/laws/timing.rs") {
            continue;
        }
        let short = path.rsplit("src/").next().unwrap_or(&path).to_string();
        for prefix in ["TM.", "tm."] {
            let mut rest = code.as_str();
            while let Some(at) = rest.find(prefix) {
                let before = &code[..code.len() - rest.len() + at];
                rest = &rest[at + prefix.len()..];
                if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                // `TM.group.field`: the group, then the field.
                let ident = |text: &str| -> String {
                    text.chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect()
                };
                let group = ident(rest);
                if !GROUPS.contains(&group.as_str()) {
                    if prefix == "tm." {
                        continue; // another value called `tm`
                    }
                    assert!(
                        rest[group.len()..].starts_with('('),
                        "{path} reads TM.{group}, which is no group of Tm"
                    );
                    continue; // a method (`TM.values()`)
                }
                rest = &rest[group.len()..];
                let Some(after) = rest.strip_prefix('.') else {
                    continue; // the whole group, passed on
                };
                rest = after;
                let field = ident(rest);
                assert!(
                    TIMEOUT_NAMES.contains(&field.as_str()),
                    "{path} reads TM.{group}.{field}, which is no Tm field"
                );
                used.entry(field).or_default().push(short.clone());
            }
        }
        for (alias, field) in aliases {
            if code.contains(alias) {
                used.entry(field.to_string())
                    .or_default()
                    .push(short.clone());
            }
        }
    }
    for (unit, key, field) in UNIT_TIMEOUTS {
        used.entry(field.to_string())
            .or_default()
            .push(format!("units/{unit} {key}"));
    }
    for (field, users) in &used {
        let mut users = users.clone();
        users.dedup();
        eprintln!("{field}: {}", users.join(", "));
    }
    // A timeout that only a used waiter waits for is obeyed through it
    // (the revival window and the tick through busy_evidence_ttl, the
    // harness close through the stop grace, a unit's stop timeout
    // through the wait for its unit).
    let mut covered: std::collections::BTreeSet<&str> = used
        .keys()
        .map(|k| TIMEOUT_NAMES[TIMEOUT_NAMES.iter().position(|n| n == k).unwrap()])
        .collect();
    for relation in &ORDERING {
        if covered.contains(TIMEOUT_NAMES[relation.waiter]) {
            covered.extend(relation.waits_for.iter().map(|&i| TIMEOUT_NAMES[i]));
        }
    }
    let unused: Vec<&str> = TIMEOUT_NAMES
        .iter()
        .copied()
        .filter(|name| !covered.contains(name))
        .collect();
    assert!(unused.is_empty(), "Tm fields no code waits: {unused:?}");
}

/// Every timeout the units set, as the `Tm` field it is.
const UNIT_TIMEOUTS: [(&str, &str, &str); 5] = [
    ("eukhe@.service", "TimeoutStopSec", "worker_unit_stop"),
    ("eukhe@.service", "WatchdogSec", "worker_watchdog"),
    (
        "eukhe-kernel@.service",
        "TimeoutStopSec",
        "kernel_unit_stop",
    ),
    ("eukhe.service", "WatchdogSec", "supervisor_watchdog"),
    ("eukhe.service", "TimeoutStopSec", "supervisor_unit_stop"),
];

/// A unit file's time span in ms (`30s`, `500ms`, `1min`), as systemd
/// reads the forms the units use.
fn unit_span_ms(value: &str) -> Option<u64> {
    let digits: String = value.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits.parse().ok()?;
    match &value[digits.len()..] {
        "ms" => Some(n),
        "" | "s" => Some(n * 1_000),
        "min" => Some(n * 60_000),
        _ => None,
    }
}

/// Every `Timeout...Sec=`, `WatchdogSec=` (and the like) line of every unit:
/// (unit, key, value in ms).
fn unit_timeouts() -> Vec<(String, String, u64)> {
    let units = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("units");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&units).unwrap() {
        let path = entry.unwrap().path();
        let unit = path.file_name().unwrap().to_string_lossy().to_string();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            if key.starts_with('#') || !(key.ends_with("Sec") || key.ends_with("USec")) {
                continue;
            }
            let ms = unit_span_ms(value.trim())
                .unwrap_or_else(|| panic!("{unit}: {key}={value} is no time span this test reads"));
            out.push((unit.clone(), key.to_string(), ms));
        }
    }
    out
}

/// The units' timeouts are the `Tm` fields the law orders, and no unit
/// sets a timeout the law does not know.
#[test]
fn unit_timeouts_are_tm_fields() {
    let values = TM.values();
    let found = unit_timeouts();
    for (unit, key, field) in UNIT_TIMEOUTS {
        let index = TIMEOUT_NAMES.iter().position(|n| *n == field).unwrap();
        let set: Vec<u64> = found
            .iter()
            .filter(|(u, k, _)| u == unit && k == key)
            .map(|(_, _, ms)| *ms)
            .collect();
        assert_eq!(
            set,
            [values[index]],
            "{unit} should set {key} once, to TM.{field} ({} ms)",
            values[index]
        );
    }
    for (unit, key, ms) in &found {
        assert!(
            UNIT_TIMEOUTS.iter().any(|(u, k, _)| u == unit && k == key),
            "{unit} sets {key}={ms} ms, which no Tm field names"
        );
    }
}

/// A unit timeout moved outside its relation fails the law: each one a
/// millisecond below what its relation needs.
#[test]
fn a_unit_timeout_below_its_relation_breaks_the_order() {
    for (unit, key, field) in UNIT_TIMEOUTS {
        let index = TIMEOUT_NAMES.iter().position(|n| *n == field).unwrap();
        let relation = ORDERING
            .iter()
            .position(|r| r.waiter == index)
            .unwrap_or_else(|| panic!("{unit} {key} (TM.{field}) is in no relation"));
        let mut values = TM.values();
        let needed: u64 = ORDERING[relation]
            .waits_for
            .iter()
            .map(|&i| values[i])
            .sum();
        values[index] = needed - 1;
        assert!(!timeouts_ordered(&Tm::from_values(values)), "{unit} {key}");
    }
}

/// Every wait the code performs is a named entry, never a multiple or a
/// sum with a number written where it waits (`2 * TM.worker.stop_grace`,
/// `TM.supervisor.kill_route + 500`): such a wait is outside the relation the law
/// checks.
#[test]
fn no_wait_is_a_multiple_written_at_its_call_site() {
    let mut found = Vec::new();
    for (path, code) in shell_sources() {
        if path.ends_with("src/laws/timing.rs") {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(why) = scaled_timeout(line) {
                found.push(format!("{path}:{}: {} ({why})", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "waits written as multiples or sums with numbers at their call site:\n{}",
        found.join("\n")
    );
}

/// Whether `line` scales a timeout (a `TM` field or a `*_MS` constant):
/// multiplies it, or adds a number to it.
fn scaled_timeout(line: &str) -> Option<&'static str> {
    let bytes = line.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut at = 0;
    while at < bytes.len() {
        if !is_ident(bytes[at]) || (at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b'.')) {
            at += 1;
            continue;
        }
        let mut end = at;
        while end < bytes.len() && (is_ident(bytes[end]) || bytes[end] == b'.') {
            end += 1;
        }
        let word = &line[at..end];
        let timeout = word.starts_with("TM.")
            || (word.ends_with("_MS") && word.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        if timeout {
            let before = line[..at].trim_end();
            let after = line[end..].trim_start();
            if before.ends_with('*') || after.starts_with('*') {
                return Some("a multiple");
            }
            let number_after = after
                .strip_prefix('+')
                .is_some_and(|rest| rest.trim_start().starts_with(|c: char| c.is_ascii_digit()));
            let number_before = before.strip_suffix('+').is_some_and(|rest| {
                rest.trim_end().ends_with(|c: char| c.is_ascii_digit())
                    && !rest.trim_end().ends_with(')')
            });
            if number_after || number_before {
                return Some("a sum with a number");
            }
        }
        at = end;
    }
    None
}

#[test]
fn the_scan_finds_what_it_forbids() {
    assert!(scaled_timeout("Duration::from_millis(TM.kernel.kernel_teardown * 2)").is_some());
    assert!(scaled_timeout("let x = 2 * TM.worker.stop_grace;").is_some());
    assert!(scaled_timeout("deadline(TM.supervisor.kill_route + 500)").is_some());
    assert!(scaled_timeout("deadline(POLL_MS * 3)").is_some());
    assert!(scaled_timeout("TM.supervisor.kill_route + TM.supervisor.child_drain").is_none());
    assert!(scaled_timeout("duration_in_words(TM.client.launcher_wait)").is_none());
}

#[test]
fn messages_say_the_restart_budget_from_the_constants() {
    assert_eq!(give_up_in_words(), "6 times in 15 minutes");
    assert_eq!(duration_in_words(TM.client.launcher_wait), "9 s");
    assert_eq!(duration_in_words(60_000), "1 minute");
    assert_eq!(duration_in_words(1_500), "1500 ms");
}
