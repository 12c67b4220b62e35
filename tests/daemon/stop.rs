//! The worker's orderly stop as the timing law orders it, through the real
//! binary on the process backend: the worker waits its kernel's teardown
//! once, then closes its transcript, all inside the stop grace the
//! supervisor gives it before it would kill.

use std::time::{Duration, Instant};

use eukhe::laws::timing::TM;

use crate::support::{alive, wait_until, Env};

/// The children of `pid` (its main thread's), as the kernel sees them.
fn children(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|text| text.split_whitespace().count())
        .unwrap_or(0)
}

/// The hardest teardown a kernel meets: a run whose processes ignore
/// SIGTERM (the kernel's grace for them runs out) and keep forking while
/// the kernel kills them. `rm --force` stops the worker with its kernel;
/// the worker leaves on its own inside its stop grace, so the supervisor
/// ends nothing by force, and every process of the session is gone.
#[test]
fn a_workers_stop_with_a_stubborn_busy_kernel_ends_inside_its_stop_grace() {
    let env = Env::new("stop-in-grace");
    let id = env.ok(&["new"]).trim().to_string();
    // A FIFO held open for reading and writing: `read -t` on it waits
    // without forking, so the loop forks at a steady pace.
    let fifo = env.dir.join("never-written");
    let script = format!(
        "trap '' TERM; mkfifo {f}; exec 9<>{f}; \
         while :; do (sleep 3 &); read -t 0.01 -u 9; done >/dev/null 2>&1 &",
        f = fifo.display()
    );
    env.ok(&["bash", &id, "--", &script]);
    let worker = env.worker_pid(&id).expect("the session's worker");
    let kernel = env.kernel_pid(&id).expect("the session's kernel");
    // The loop runs and its orphans (reparented to the kernel) pile up.
    wait_until(
        Duration::from_secs(10),
        "the kernel has the loop and its orphans",
        || children(kernel) >= 4,
    );

    let started = Instant::now();
    let out = env.ok(&["rm", "--force", &id]);
    let took = started.elapsed();
    assert_eq!(out, format!("removed {id} ({id})\n"));
    assert!(!alive(worker), "the worker outlived rm --force");
    assert!(!alive(kernel), "the kernel outlived rm --force");

    let log = std::fs::read_to_string(env.state_dir().join("daemon.log")).unwrap();
    assert!(
        !log.contains("outlived its stop grace"),
        "the supervisor killed the worker in the middle of its orderly stop \
         (rm took {took:?}):\n{log}"
    );
    // The worker's stop, its kernel's included, fits in the stop grace.
    assert!(
        took < Duration::from_millis(TM.worker.stop_grace),
        "rm --force took {took:?}, past the stop grace of {} ms",
        TM.worker.stop_grace
    );
}
