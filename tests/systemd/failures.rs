//! Failing units under systemd: a killed or hung worker unit is restarted
//! and counted, and a run lives on in its kernel unit.

use std::time::Duration;

use eukhe::host::busy_journal::BUSY_MESSAGE_ID;

use super::{kernel, runs, shell_quote, skip, worker};
use crate::support::installed::{self, Installed};
use crate::support::{never, wait_until};

/// Scenario 2: a killed worker is restarted after the pause; the sixth
/// failure in the window gives the session up.
#[test]
fn a_killed_worker_unit_restarts_after_the_pause_and_the_sixth_failure_gives_up() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("restart", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    for failure in 1..=5u64 {
        let before = eukhe.main_pid(&worker(&id));
        eukhe.kill("KILL", before);
        wait_until(
            Duration::from_secs(20),
            &format!("the worker runs again after failure {failure}"),
            || {
                let session = eukhe.session(&id);
                session["failures_in_window"] == failure
                    && session["state"] == "idle"
                    && session["pid"].as_u64().map(|p| p as u32) != Some(before)
            },
        );
        assert_eq!(eukhe.unit(&worker(&id), "ActiveState"), "active");
    }
    let supervisor_log = eukhe.journal("eukhe.service");
    for pause in [250, 500, 1000, 2000, 4000] {
        assert!(
            supervisor_log.contains(&format!("restarting it in {pause} ms")),
            "no {pause} ms pause in:\n{supervisor_log}"
        );
    }
    assert!(supervisor_log.contains("its worker unit was killed by a signal"));
    eukhe.kill("KILL", eukhe.main_pid(&worker(&id)));
    wait_until(Duration::from_secs(10), "the session is given up", || {
        eukhe.session(&id)["state"] == "given-up"
    });
    assert_eq!(eukhe.session(&id)["failures_in_window"], 6);
    assert_ne!(eukhe.unit(&worker(&id), "ActiveState"), "active");
    assert!(eukhe
        .journal("eukhe.service")
        .contains("given up after 6 failures"));
    never(
        Duration::from_millis(500),
        "systemd restarted a given-up worker",
        || eukhe.unit(&worker(&id), "ActiveState") == "active",
    );
}

/// Scenario 3: a hung worker is killed by the watchdog and counted.
#[test]
fn a_hung_worker_is_killed_by_the_watchdog_and_counted_as_a_failure() {
    if skip() {
        return;
    }
    // A short watchdog keeps the test short; the shipped unit says 30 s.
    let eukhe = Installed::boot(
        "watchdog",
        &[(
            "/etc/systemd/user/eukhe@.service.d/watchdog.conf",
            "[Service]\nWatchdogSec=2s\n",
        )],
    );
    let id = eukhe.eukhe("new").trim().to_string();
    // Alive and pinging: well past the interval, it still runs.
    let hung = eukhe.main_pid(&worker(&id));
    never(
        Duration::from_secs(3),
        "the watchdog ended a worker that pings it",
        || eukhe.main_pid(&worker(&id)) != hung || eukhe.session(&id)["failures_in_window"] != 0,
    );
    eukhe.kill("STOP", hung);
    wait_until(
        Duration::from_secs(30),
        "the hung worker is replaced",
        || {
            let session = eukhe.session(&id);
            session["state"] == "idle" && session["pid"].as_u64().map(|p| p as u32) != Some(hung)
        },
    );
    assert_eq!(eukhe.session(&id)["failures_in_window"], 1);
    let supervisor_log = eukhe.journal("eukhe.service");
    assert!(
        supervisor_log.contains("killed by the watchdog"),
        "{supervisor_log}"
    );
    assert!(eukhe.journal(&worker(&id)).contains("Watchdog timeout"));
    assert_eq!(eukhe.eukhe(&format!("bash {id} -- echo back")), "back\n");
}

/// Scenario 7: the run lives in the session's kernel unit, not in its
/// worker unit. A worker SIGKILLed mid-run is restarted; the run completes
/// and is recorded exactly once, never rerun. `cancel` ends a run and
/// leaves nothing of it in the kernel's cgroup; a forced shutdown stops the
/// kernel unit and nothing a run started outlives it.
#[test]
fn a_run_outlives_its_killed_worker_unit_in_the_kernel_unit_and_cancel_empties_its_cgroup() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("kernel", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    wait_until(Duration::from_secs(10), "the kernel unit is up", || {
        eukhe.unit(&kernel(&id), "ActiveState") == "active"
    });
    let kernel_pid = eukhe.main_pid(&kernel(&id));
    assert_eq!(
        eukhe.session(&id)["kernel_pid"].as_u64().unwrap() as u32,
        kernel_pid,
        "the session's kernel is its unit's main process"
    );
    let file = format!("/home/{}/F", installed::USER);
    let sent = std::time::Instant::now();
    eukhe.eukhe(&format!(
        "send {id} {}",
        shell_quote(&format!("sleep 3; echo x >> {file}; echo done"))
    ));
    wait_until(
        Duration::from_secs(3),
        "the run's process is in the kernel unit",
        || runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 3"),
    );
    assert!(
        !runs(&eukhe.cgroup_processes(&worker(&id)), "sleep 3"),
        "the run is not in the worker unit"
    );
    let status = eukhe.user(&format!(
        "systemctl --user status --no-pager --lines=0 {}",
        kernel(&id)
    ));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("sleep 3"),
        "systemctl status shows the run's process:\n{}",
        String::from_utf8_lossy(&status.stdout)
    );
    // The kill lands a second into the run, not at its very start: time in
    // the run, which no state of the session shows.
    std::thread::sleep(Duration::from_secs(1).saturating_sub(sent.elapsed()));
    let first_worker = eukhe.main_pid(&worker(&id));
    eukhe.user_ok(&format!("systemctl --user kill -s KILL {}", worker(&id)));
    assert!(
        sent.elapsed() < Duration::from_millis(2_500),
        "the worker was killed mid-run ({:?} after the send)",
        sent.elapsed()
    );
    wait_until(Duration::from_secs(20), "the run's end is recorded", || {
        eukhe
            .eukhe(&format!("log {id}"))
            .contains("[run 1 exited 0]")
    });
    let log = eukhe.eukhe(&format!("log {id}"));
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    assert_eq!(log.lines().filter(|l| *l == "done").count(), 1, "{log}");
    assert!(!log.contains("interrupted"), "{log}");
    assert_eq!(
        eukhe.root(&format!("cat {file}")),
        "x\n",
        "the run ran once"
    );
    let session = eukhe.session(&id);
    assert_eq!(session["failures_in_window"], 1);
    assert_ne!(
        session["pid"].as_u64().unwrap() as u32,
        first_worker,
        "the worker was restarted"
    );
    assert_eq!(
        eukhe.main_pid(&kernel(&id)),
        kernel_pid,
        "the kernel unit lived on"
    );
    assert!(eukhe
        .journal("eukhe.service")
        .contains("its worker unit was killed by a signal"));

    // Cancel: SIGINT to the run's group; nothing of it is left.
    eukhe.eukhe(&format!("send {id} 'sleep 1000'"));
    wait_until(
        Duration::from_secs(10),
        "sleep 1000 runs in the kernel unit",
        || runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 1000"),
    );
    let cancelled = std::time::Instant::now();
    eukhe.eukhe(&format!("cancel {id}"));
    wait_until(Duration::from_secs(10), "the run ends cancelled", || {
        eukhe
            .eukhe(&format!("log {id}"))
            .contains("[run 2 cancelled")
    });
    assert!(
        cancelled.elapsed() < Duration::from_secs(5),
        "the cancel took {:?}",
        cancelled.elapsed()
    );
    let left = eukhe.cgroup_processes(&kernel(&id));
    assert!(
        !left.iter().any(|line| line.starts_with("sleep")),
        "a process of the cancelled run is left in the kernel's cgroup: {left:?}"
    );
    assert_eq!(eukhe.main_pid(&kernel(&id)), kernel_pid);
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- echo after the cancel")),
        "after the cancel\n"
    );
    let nothing = eukhe.user(&format!("eukhe cancel {id}"));
    assert_eq!(nothing.status.code(), Some(1), "nothing left to cancel");

    // Stopping the kernel unit ends every process of the session, a
    // process that left the run's group (setsid) included, within the
    // unit's stop timeout; the session then gets a new kernel.
    eukhe.eukhe(&format!("send {id} 'setsid sleep 2001 & sleep 1001'"));
    wait_until(
        Duration::from_secs(10),
        "both sleeps run in the kernel unit",
        || {
            let processes = eukhe.cgroup_processes(&kernel(&id));
            runs(&processes, "sleep 1001") && runs(&processes, "sleep 2001")
        },
    );
    eukhe.user_ok(&format!("systemctl --user stop {}", kernel(&id)));
    assert_eq!(
        eukhe.unit(&kernel(&id), "Result"),
        "success",
        "the kernel's teardown fits in TimeoutStopSec"
    );
    let processes = eukhe.processes();
    assert!(
        !runs(&processes, "sleep 1001") && !runs(&processes, "sleep 2001"),
        "a process a run started outlived the kernel unit's stop: {processes:?}"
    );
    wait_until(
        Duration::from_secs(30),
        "the session is served by a new kernel",
        || eukhe.user(&format!("eukhe bash {id} -- echo again")).stdout == b"again\n",
    );
    assert_ne!(eukhe.main_pid(&kernel(&id)), kernel_pid);
    let log = eukhe.eukhe(&format!("log {id}"));
    // Runs 1 and 2, user bash 3, then run 4: the one the stop ended.
    assert_eq!(
        log.matches("[run 4 ").count(),
        1,
        "run 4 ended once:\n{log}"
    );
    assert_eq!(
        log.lines().filter(|l| *l == "done").count(),
        1,
        "run 1's output outlives its kernel:\n{log}"
    );

    // A forced shutdown stops the kernel unit: a process that left the
    // run's group (setsid) still ends with it.
    eukhe.eukhe(&format!("send {id} 'setsid sleep 2000 & sleep 1000'"));
    wait_until(
        Duration::from_secs(10),
        "both sleeps run in the kernel unit",
        || {
            let processes = eukhe.cgroup_processes(&kernel(&id));
            runs(&processes, "sleep 1000") && runs(&processes, "sleep 2000")
        },
    );
    eukhe.eukhe("shutdown --force");
    wait_until(Duration::from_secs(15), "the kernel unit is down", || {
        let state = eukhe.unit(&kernel(&id), "ActiveState");
        state == "inactive" || state == "failed"
    });
    let processes = eukhe.processes();
    assert!(
        !runs(&processes, "sleep 1000") && !runs(&processes, "sleep 2000"),
        "a process a run started outlived the kernel unit: {processes:?}"
    );
}

/// Scenario 9: a kernel left alone with a run (no supervisor, no worker)
/// keeps busy evidence fresh itself, from its own unit, and a reboot then
/// revives the session.
#[test]
fn a_kernel_alone_with_a_run_records_busy_evidence_from_its_unit() {
    if skip() {
        return;
    }
    let mut eukhe = Installed::boot("alone", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    eukhe.eukhe(&format!("send {id} 'sleep 600'"));
    eukhe.eukhe(&format!("send {id} 'echo queued ran'"));
    wait_until(
        Duration::from_secs(10),
        "the run is busy in the kernel unit",
        || runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 600"),
    );
    eukhe.user_ok("systemctl --user kill -s KILL eukhe.service");
    wait_until(Duration::from_secs(10), "the supervisor is dead", || {
        eukhe.unit("eukhe.service", "ActiveState") != "active"
    });
    eukhe.user_ok(&format!("systemctl --user kill -s KILL {}", worker(&id)));
    wait_until(
        Duration::from_secs(15),
        "the kernel records busy evidence",
        || {
            eukhe
                .user_ok(&format!(
                    "journalctl --user MESSAGE_ID={BUSY_MESSAGE_ID} EUKHE_SESSION={id} EUKHE_BUSY=busy _SYSTEMD_USER_UNIT={} _UID={} -o cat --no-pager",
                    kernel(&id),
                    installed::UID
                ))
                .contains("busy evidence: busy")
        },
    );
    assert_eq!(eukhe.unit(&kernel(&id), "ActiveState"), "active");
    eukhe.reboot();
    eukhe.sessions();
    wait_until(Duration::from_secs(30), "the queued input ran", || {
        eukhe.eukhe(&format!("log {id}")).contains("queued ran")
    });
    eukhe.assert_revived(&id);
}
