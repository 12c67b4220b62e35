//! Workers and kernels that die, hang or lose their supervisor: they are
//! restarted, given up after six failures, or exit when their work is done.

use std::time::{Duration, Instant};

use super::crash_times;
use crate::support::process::Signal;
use crate::support::{alive, kill9, never, signal, wait_for, wait_until, Env};

#[test]
fn a_request_sent_the_moment_its_worker_dies_waits_for_the_next_worker() {
    let env = Env::new("just-died");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "export KEPT=1"]);
    // The worker is held still while the daemon hands it a request, then
    // dies before answering: the request is served by the next worker,
    // not refused with the dead one's connection error.
    let worker = env.worker_pid(&id).unwrap();
    signal(worker, Signal::SIGSTOP);
    let client = env
        .command(&["bash", &id, "--", "echo $KEPT"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Time for the daemon to hand the request to the stopped worker: a
    // request in a socket's buffer shows nowhere a test could wait on.
    std::thread::sleep(Duration::from_millis(300));
    kill9(worker);
    let out = client.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
}

#[test]
fn a_killed_worker_restarts_after_the_pause_and_its_kernel_keeps_the_shell() {
    let env = Env::new("restart");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "cd /tmp; f() { echo kept; }"]);
    let first = env.worker_pid(&id).unwrap();
    let kernel = env.kernel_pid(&id).unwrap();
    let killed_at = Instant::now();
    kill9(first);
    wait_until(Duration::from_secs(10), "the worker restarts", || {
        env.worker_pid(&id).is_some_and(|pid| pid != first)
    });
    assert!(
        killed_at.elapsed() >= Duration::from_millis(250),
        "restarted before the 250 ms pause"
    );
    assert_eq!(env.session(&id)["failures_in_window"], 1);
    assert_eq!(env.ok(&["bash", &id, "--", "pwd; f"]), "/tmp\nkept\n");
    assert_eq!(env.kernel_pid(&id), Some(kernel), "the kernel lived on");
    let log = env.log(&id);
    assert!(!log.contains("kernel restored"), "{log}");
}

#[test]
fn a_killed_kernel_is_started_again_over_the_snapshot_with_one_restore_notice() {
    let env = Env::new("kernel-restart");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&[
        "bash",
        &id,
        "--",
        "cd /tmp; f() { echo kept; }; alias a='echo aliased'",
    ]);
    let kernel = env.kernel_pid(&id).unwrap();
    kill9(kernel);
    wait_until(Duration::from_secs(10), "a new kernel serves", || {
        env.kernel_pid(&id).is_some_and(|pid| pid != kernel)
    });
    assert_eq!(
        env.ok(&["bash", &id, "--", "pwd; f; a"]),
        "/tmp\nkept\naliased\n"
    );
    // A kernel failure counts in the session's restart budget.
    assert_eq!(env.session(&id)["failures_in_window"], 1);
    let log = env.log(&id);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("background jobs and open file descriptors do not come back"),
        "{log}"
    );
}

#[test]
fn six_failures_in_the_window_give_the_session_up_and_keep_its_transcript() {
    let env = Env::new("giveup");
    let id = env.ok(&["new", "--name", "crashy"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo before the crashes"]);
    crash_times(&env, &id, 6);
    wait_until(Duration::from_secs(5), "the session is given up", || {
        env.session(&id)["state"] == "given-up"
    });
    assert_eq!(env.session(&id)["failures_in_window"], 6);
    let refused = env.run(&["bash", &id, "--", "true"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("was given up") && stderr.contains("eukhe restart"),
        "{stderr}"
    );
    // The give-up notice is written once the last worker is gone (the
    // transcript has one writer), a moment after the state says given up.
    let mut log = String::new();
    wait_for(Duration::from_secs(5), || {
        log = env.log(&id);
        log.contains("given up")
    });
    assert!(
        log.contains("before the crashes") && log.contains("given up"),
        "{log}"
    );
    env.ok(&["restart", &id]);
    assert_eq!(env.ok(&["bash", &id, "--", "echo back"]), "back\n");
    assert_eq!(env.session(&id)["failures_in_window"], 0);
}

#[test]
fn a_lost_worker_with_work_exits_and_its_run_goes_on_until_the_next_supervisor_resumes_it() {
    let env = Env::new("revive")
        .with("EUKHE_WORKER_LOST_EXIT_MS", "700")
        .with("EUKHE_TEST_SHORT_WINDOWS", "1");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 4; echo first done"]);
    env.ok(&["send", &id, "echo resumed after revival"]);
    wait_until(Duration::from_secs(5), "the run is busy", || {
        env.session(&id)["state"] == "busy"
    });
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.kernel_pid(&id).unwrap();
    kill9(env.daemon_pid());
    wait_until(Duration::from_secs(10), "the orphaned worker exits", || {
        !alive(worker)
    });
    // The worker left; its run did not stop.
    assert!(alive(kernel), "the kernel ended with its worker");
    wait_until(Duration::from_secs(15), "the queued run runs", || {
        env.log(&id).contains("[run 2 exited 0]")
    });
    let log = env.log(&id);
    assert!(!log.contains("interrupted"), "{log}");
    assert!(log.contains("\nresumed after revival\n"), "{log}");
    assert_eq!(
        log.lines().filter(|l| *l == "first done").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    assert!(log.contains("[run 2 exited 0]"), "{log}");
}

#[test]
fn a_lost_idle_worker_closes_its_session_after_one_window() {
    let env = Env::new("orphan-idle")
        .with("EUKHE_WORKER_LOST_EXIT_MS", "500")
        .with("EUKHE_TEST_SHORT_WINDOWS", "1");
    let id = env.ok(&["new"]).trim().to_string();
    let worker = env.worker_pid(&id).unwrap();
    kill9(env.daemon_pid());
    wait_until(Duration::from_secs(10), "the idle orphan closes", || {
        !alive(worker)
    });
    assert_eq!(env.session(&id)["state"], "saved");
    assert_eq!(env.ok(&["bash", &id, "--", "echo woke"]), "woke\n");
}

#[test]
fn a_hung_worker_is_killed_by_the_supervisors_watchdog_and_counted() {
    let env = Env::new("watchdog").with_config("worker_watchdog_ms = 2000\n");
    let id = env.ok(&["new"]).trim().to_string();
    // Well past the interval, a live worker is left alone.
    never(
        Duration::from_millis(3000),
        "a live worker was counted a failure",
        || env.session(&id)["failures_in_window"] != 0,
    );
    let hung = env.worker_pid(&id).unwrap();
    signal(hung, Signal::SIGSTOP);
    wait_until(
        Duration::from_secs(15),
        "the hung worker is replaced",
        || {
            let session = env.session(&id);
            session["state"] == "idle" && session["pid"].as_u64() != Some(hung as u64)
        },
    );
    assert!(!alive(hung), "the hung worker was killed");
    assert_eq!(env.session(&id)["failures_in_window"], 1);
    assert_eq!(env.ok(&["bash", &id, "--", "echo back"]), "back\n");
}
