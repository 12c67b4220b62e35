//! A benchmark, not a test: session start under systemd against
//! `systemd-run --user`, run by bench/run.

use super::skip;
use crate::support::installed::Installed;

/// A benchmark, not a test (bench/run runs it): session start through
/// `eukhe@.service` against `systemd-run --user` starting a trivial
/// transient service, alternated round by round inside by bench/run's
/// spawner (`EUKHE_BENCH_SPAWN`, bench/spawn.c), which also times a process
/// that does nothing (`EUKHE_BENCH_NOTHING`): its own cost. Prints
/// `BENCH {"name": [microseconds, ...]}`, index i of each from round i.
#[test]
#[ignore = "a benchmark: bench/run runs it"]
fn bench_systemd_session_start() {
    if skip() {
        return;
    }
    let rounds: usize = std::env::var("EUKHE_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let warmup = 2;
    // A second of quiet before each start, as in benchmark 1: a session
    // started by a person or an agent, not a loop (back to back, a `new`
    // comes before the spare the last one claimed is made again).
    let quiet_ms: u64 = std::env::var("EUKHE_BENCH_QUIET_MS")
        .ok()
        .and_then(|q| q.parse().ok())
        .unwrap_or(1000);
    let helper = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: bench/run sets it"))
    };
    let eukhe = Installed::boot("bench", &[]);
    for (from, inside) in [
        (
            helper("EUKHE_BENCH_SPAWN"),
            "/usr/local/bin/eukhe-bench-spawn",
        ),
        (
            helper("EUKHE_BENCH_NOTHING"),
            "/usr/local/bin/eukhe-bench-nothing",
        ),
    ] {
        eukhe
            .systemd
            .install(std::path::Path::new(&from), inside, 0o755)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // A warm supervisor.
    eukhe.eukhe("status");
    // The plan of bench/spawn.c; the heredoc finds each program's path.
    let plan = [
        format!("rounds {rounds}"),
        format!("warmup {warmup}"),
        format!("quiet {quiet_ms}"),
        "subject nothing (the harness's own cost)".to_string(),
        "run /usr/local/bin/eukhe-bench-nothing".to_string(),
        "subject eukhe new (eukhe@.service)".to_string(),
        "run $(command -v eukhe)\tnew".to_string(),
        "subject eukhe new + bash true".to_string(),
        "runout $(command -v eukhe)\tnew".to_string(),
        "run $(command -v eukhe)\tbash\t%o\t--\ttrue".to_string(),
        "subject systemd-run --user --wait true".to_string(),
        "run $(command -v systemd-run)\t--user\t--wait\t--quiet\ttrue".to_string(),
    ]
    .join("\n");
    let script = format!(
        "plan=$(mktemp)\ncat > \"$plan\" <<PLAN\n{plan}\nPLAN\n/usr/local/bin/eukhe-bench-spawn \"$plan\""
    );
    // The spawner ends at the first start that fails (a failed start would
    // be timed as a fast one); each made its session.
    let out = eukhe.user_ok(&script);
    let made = eukhe.sessions().as_array().map_or(0, Vec::len);
    assert_eq!(made, 2 * (rounds + warmup), "sessions made by the starts");
    let mut samples: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in out.lines() {
        // `ROUND NANOSECONDS CPU NAME` (bench/spawn.c).
        let mut fields = line.splitn(4, ' ');
        let (nanoseconds, name) = (fields.nth(1), fields.nth(1));
        let nanoseconds: u64 = nanoseconds.and_then(|n| n.parse().ok()).expect(line);
        samples
            .entry(name.expect(line).to_string())
            .or_default()
            .push(nanoseconds / 1000);
    }
    println!("BENCH {}", serde_json::json!(samples));
}
