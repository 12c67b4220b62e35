//! Revival at the next daemon start on the process backend (a machine
//! boot, simulated: every process of the session killed), through the real
//! binary.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{alive, kill9, wait_until, Env};

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The busy evidence of `id` in `busy.log` recorded at or after `since`.
fn records_since(env: &Env, id: &str, since: u64) -> Vec<serde_json::Value> {
    std::fs::read_to_string(env.state_dir().join("busy.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|r| r["session"] == id && r["at_ms"].as_u64().is_some_and(|at| at >= since))
        .collect()
}

/// A kernel left without its worker hears of the queued input before the
/// worker goes, so its own busy evidence counts it: once its run has ended
/// and only the queued input is left, the session is still busy, and the
/// next daemon start after a "boot" revives it and runs that input once.
#[test]
fn a_kernel_alone_with_only_queued_input_keeps_the_session_revivable() {
    let env = Env::new("queued-evidence");
    let id = env.ok(&["new"]).trim().to_string();
    let started = env.dir.join("started");
    let release = env.dir.join("release");
    let first = env.dir.join("first");
    let queued = env.dir.join("queued");
    env.ok(&[
        "send",
        &id,
        &format!(
            "touch {}; until [ -e {} ]; do sleep 0.1; done; echo done >> {}",
            started.display(),
            release.display(),
            first.display()
        ),
    ]);
    env.ok(&["send", &id, &format!("echo ran >> {}", queued.display())]);
    // The run executes in the kernel: the worker is linked to its kernel
    // and has told it what waits behind the run. (A busy session alone is
    // not that: queued input makes it busy before the link is up.)
    wait_until(
        Duration::from_secs(10),
        "the run starts in the kernel",
        || started.exists(),
    );
    assert_eq!(env.session(&id)["state"], "busy");
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.kernel_pid(&id).unwrap();
    // No supervisor to restart the worker, then no worker: the kernel
    // keeps the session's evidence alone.
    kill9(env.daemon_pid());
    // The kernel records as soon as its worker's connection ends, which
    // may be before this test sees the worker gone: its records count from
    // the kill. (The worker's busy record is fresh: it writes none before.)
    let gone_at = wall_ms();
    kill9(worker);
    wait_until(Duration::from_secs(5), "the worker is gone", || {
        !alive(worker)
    });
    wait_until(
        Duration::from_secs(10),
        "the kernel records busy evidence",
        || !records_since(&env, &id, gone_at).is_empty(),
    );
    let record = records_since(&env, &id, gone_at).remove(0);
    assert_eq!(record["state"], "busy", "{record}");
    let work: Vec<&str> = record["work"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        work.contains(&"queued_input"),
        "the kernel's evidence leaves out the queued input: {record}"
    );

    // The run ends with no worker: only the queued input is left, and the
    // kernel's evidence must not turn idle.
    std::fs::write(&release, "").unwrap();
    wait_until(Duration::from_secs(10), "the run ends", || first.exists());
    let end = env
        .state_dir()
        .join("sessions")
        .join(&id)
        .join("spool/r1.end");
    wait_until(
        Duration::from_secs(10),
        "the kernel stores the run's end",
        || end.exists(),
    );
    // The machine goes down: the kernel with it.
    kill9(kernel);
    wait_until(Duration::from_secs(5), "the kernel is gone", || {
        !alive(kernel)
    });
    let evidence = records_since(&env, &id, gone_at);
    assert!(
        evidence.iter().all(|r| r["state"] == "busy"),
        "the kernel recorded the session idle with input queued: {evidence:?}"
    );

    // The next daemon start revives it: the queued input runs, once.
    env.sessions();
    wait_until(Duration::from_secs(20), "the queued input ran", || {
        queued.exists()
    });
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "done\n");
    // Its file is written a moment before its end is stored.
    wait_until(Duration::from_secs(10), "run 2's end is stored", || {
        env.log(&id).contains("[run 2 exited 0]")
    });
    let log = env.log(&id);
    assert!(!log.contains("interrupted"), "{log}");
    let worker_log = std::fs::read_to_string(
        env.state_dir()
            .join("sessions")
            .join(&id)
            .join("worker.log"),
    )
    .unwrap_or_default();
    assert!(
        worker_log.contains(&format!("session {id} revived over its snapshot")),
        "{worker_log}"
    );
    wait_until(Duration::from_secs(5), "the queued input ran once", || {
        std::fs::read_to_string(&queued).unwrap() == "ran\n"
    });
}
