//! Tests against a real systemd, booted privately (see `support/systemd.rs`).
//! They need root; elsewhere each says why it did not run.

mod spare;

use std::time::Duration;

use eukhe::host::busy_journal::BUSY_MESSAGE_ID;

use crate::support::installed::{self, Installed};
use crate::support::skip::skip_unless_ci;
use crate::support::systemd::{unavailable, PrivateSystemd};
use crate::support::{never, wait_until};

/// Why these tests cannot run here, printed as the reason they did not.
pub(crate) fn skip() -> bool {
    match unavailable() {
        Some(why) => {
            skip_unless_ci(&format!("a private systemd cannot run here: {why}"));
            true
        }
        None => false,
    }
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn worker(id: &str) -> String {
    format!("eukhe@{id}.service")
}

fn kernel(id: &str) -> String {
    format!("eukhe-kernel@{id}.service")
}

/// Whether some command line in `processes` runs `command` (e.g. `sleep 3`).
fn runs(processes: &[String], command: &str) -> bool {
    processes.iter().any(|line| line == command)
}

/// Scenario 1: the first connect activates the supervisor; a new session
/// is a worker unit; commands run; its journal reads as a session's log.
#[test]
fn the_first_connect_activates_the_supervisor_and_a_session_is_a_worker_unit() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("activate", &[]);
    assert_eq!(eukhe.unit("eukhe.socket", "ActiveState"), "active");
    assert_eq!(
        eukhe.unit("eukhe.service", "ActiveState"),
        "inactive",
        "nothing runs before the first client"
    );
    let id = eukhe.eukhe("new --name first").trim().to_string();
    assert_eq!(eukhe.unit("eukhe.service", "ActiveState"), "active");
    assert_eq!(eukhe.unit(&worker(&id), "ActiveState"), "active");
    let status = eukhe.status();
    assert_eq!(status["backend"], "systemd");
    assert_eq!(
        status["pid"].as_u64().unwrap() as u32,
        eukhe.main_pid("eukhe.service"),
        "the client talks to the activated service"
    );
    assert_eq!(
        eukhe.session(&id)["pid"].as_u64().unwrap() as u32,
        eukhe.main_pid(&worker(&id)),
        "the session's worker is its unit's main process"
    );
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'cd /tmp && echo hello'")),
        "hello\n"
    );
    assert_eq!(eukhe.eukhe(&format!("bash {id} -- pwd")), "/tmp\n");
    eukhe.eukhe(&format!("send {id} 'echo from a run'"));
    // The two user bashes were inputs 1 and 2: the run is input 3.
    wait_until(Duration::from_secs(10), "run 3 is in the journal", || {
        eukhe.journal(&worker(&id)).contains("run 3 exited 0")
    });
    let journal = eukhe.journal(&worker(&id));
    for line in [
        &format!("serving session {id}"),
        "supervised",
        "run 3 started",
        "busy evidence: busy",
        "busy evidence: idle",
    ] {
        assert!(
            journal.contains(line),
            "no {line:?} in the worker's journal:\n{journal}"
        );
    }
    let structured = eukhe.user_ok(&format!(
        "journalctl --user -u {} EUKHE_SESSION={id} EUKHE_RUN=3 -o cat --no-pager",
        worker(&id)
    ));
    assert!(structured.contains("run 3 started"), "{structured}");
    assert!(eukhe.eukhe(&format!("log {id}")).contains("from a run"));
}

/// A session's environment under systemd: the client's, and with
/// `--clean-env` the user manager's, never the kernel unit's own
/// variables (its invocation, notification socket, eukhe's backend).
#[test]
fn a_sessions_environment_is_the_clients_and_never_a_units_own_under_systemd() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("environment", &[]);
    let show = "'echo ${FOO-unset} ${HOME-unset} ${INVOCATION_ID-unset} ${NOTIFY_SOCKET-unset} ${JOURNAL_STREAM-unset} ${EUKHE_HOST-unset}'";
    let id = eukhe
        .user_ok("FOO=from-client eukhe new")
        .trim()
        .to_string();
    let home = eukhe.user_ok("echo $HOME").trim().to_string();
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- {show}")),
        format!("from-client {home} unset unset unset unset\n")
    );
    let clean = eukhe
        .user_ok("FOO=from-client eukhe new --clean-env --env FOO=set")
        .trim()
        .to_string();
    assert_eq!(
        eukhe.eukhe(&format!("bash {clean} -- {show}")),
        format!("set {home} unset unset unset unset\n")
    );
}

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

/// Scenario 4: the supervisor dies while a run is busy; the worker unit
/// keeps running, the next connect activates a supervisor that adopts it.
#[test]
fn a_killed_supervisor_is_reactivated_and_adopts_the_busy_worker_unit() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("adopt", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    eukhe.eukhe(&format!(
        "send {id} 'until [ -e ~/release ]; do sleep 0.1; done; echo survived'"
    ));
    wait_until(Duration::from_secs(10), "the run is busy", || {
        eukhe.session(&id)["state"] == "busy"
    });
    let worker_pid = eukhe.main_pid(&worker(&id));
    let supervisor = eukhe.main_pid("eukhe.service");
    eukhe.kill("KILL", supervisor);
    wait_until(Duration::from_secs(10), "the supervisor is dead", || {
        eukhe.unit("eukhe.service", "ActiveState") != "active"
    });
    assert_eq!(eukhe.unit(&worker(&id), "ActiveState"), "active");
    assert_eq!(eukhe.main_pid(&worker(&id)), worker_pid);
    let session = eukhe.session(&id);
    let successor = eukhe.main_pid("eukhe.service");
    assert_ne!(
        successor, supervisor,
        "the connect activated a new supervisor"
    );
    assert_eq!(
        session["pid"].as_u64().unwrap() as u32,
        worker_pid,
        "adopted, not relaunched"
    );
    assert_eq!(session["failures_in_window"], 0);
    assert_eq!(session["state"], "busy", "the run is still going");
    eukhe.user_ok("touch ~/release");
    wait_until(Duration::from_secs(15), "the run finishes", || {
        eukhe
            .eukhe(&format!("log {id}"))
            .contains("[run 1 exited 0]")
    });
    assert!(eukhe.eukhe(&format!("log {id}")).contains("survived"));
    assert!(eukhe
        .journal("eukhe.service")
        .contains(&format!("adopted the worker of session {id}")));
}

/// Scenario 5: a "reboot" while a run is busy: the busy session is revived
/// from its journald evidence and its queued work resumes; an idle one is not.
#[test]
fn after_a_reboot_a_busy_session_is_revived_from_the_journal_and_an_idle_one_is_not() {
    if skip() {
        return;
    }
    let mut eukhe = Installed::boot("reboot", &[]);
    let busy = eukhe.eukhe("new --name busy").trim().to_string();
    let idle = eukhe.eukhe("new --name idle").trim().to_string();
    eukhe.eukhe(&format!("bash {idle} -- true"));
    eukhe.eukhe(&format!("send {busy} 'sleep 60'"));
    eukhe.eukhe(&format!("send {busy} 'echo resumed after the reboot'"));
    wait_until(Duration::from_secs(10), "the run is busy", || {
        eukhe.session(&busy)["state"] == "busy"
    });
    // Forged evidence that the idle session is busy, written to the journal
    // by the same user: from a command inside the other session's worker,
    // and from a unit of its own. Neither may revive it.
    let forge = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"MESSAGE=forged\\nMESSAGE_ID={BUSY_MESSAGE_ID}\\nEUKHE_SESSION={idle}\\nEUKHE_BUSY=busy\\n\", \"/run/systemd/journal/socket\")'"
    );
    eukhe.eukhe(&format!("bash {busy} -- {}", shell_quote(&forge)));
    eukhe.user_ok(&format!(
        "systemd-run --user --wait --quiet sh -c {}",
        shell_quote(&forge)
    ));
    wait_until(
        Duration::from_secs(10),
        "both forgeries are in the journal",
        || {
            eukhe
            .user_ok(&format!(
                "journalctl --user MESSAGE_ID={BUSY_MESSAGE_ID} EUKHE_SESSION={idle} EUKHE_BUSY=busy -o cat --no-pager"
            ))
            .matches("forged")
            .count()
            == 2
        },
    );
    eukhe.reboot();
    assert_eq!(
        eukhe.unit("eukhe.socket", "ActiveState"),
        "active",
        "the enabled socket is back after the reboot"
    );
    assert_eq!(eukhe.unit(&worker(&busy), "ActiveState"), "inactive");
    // The first connect activates a supervisor, which revives before serving.
    let sessions = eukhe.sessions();
    assert_eq!(sessions.as_array().unwrap().len(), 2);
    wait_until(Duration::from_secs(20), "the queued input ran", || {
        eukhe
            .eukhe(&format!("log {busy}"))
            .contains("resumed after the reboot")
    });
    assert_eq!(eukhe.unit(&worker(&busy), "ActiveState"), "active");
    assert_eq!(
        eukhe.session(&idle)["state"],
        "saved",
        "an idle session is not revived"
    );
    assert_eq!(eukhe.unit(&worker(&idle), "ActiveState"), "inactive");
    eukhe.assert_revived(&busy);
}

/// Scenario 6: builds on the socket: a busy older daemon is kept, an idle
/// one is replaced through socket activation, an older client uses a newer
/// daemon; the session and its transcript survive.
#[test]
fn replacement_rules_hold_through_socket_activation() {
    if skip() {
        return;
    }
    let old = "[Service]\nEnvironment=EUKHE_VERSION=0.0.1 EUKHE_BUILD_ID=old-build\n";
    let eukhe = Installed::boot(
        "replace",
        &[
            ("/etc/systemd/user/eukhe.service.d/old.conf", old),
            ("/etc/systemd/user/eukhe@.service.d/old.conf", old),
        ],
    );
    let as_old = "EUKHE_VERSION=0.0.1 EUKHE_BUILD_ID=old-build eukhe";
    let id = eukhe.user_ok(&format!("{as_old} new")).trim().to_string();
    // The run holds until the test releases it, so it is busy for as long
    // as the test needs, however slow the machine.
    eukhe.user_ok(&format!(
        "{as_old} send {id} 'until [ -e ~/release ]; do sleep 0.1; done; echo old run done'"
    ));
    wait_until(Duration::from_secs(10), "the run is busy", || {
        eukhe.session(&id)["state"] == "busy"
    });
    // The newer build is installed (the drop-ins go away); the old daemon runs on.
    eukhe.root("rm -r /etc/systemd/user/eukhe.service.d /etc/systemd/user/eukhe@.service.d");
    eukhe.user_ok("systemctl --user daemon-reload");
    let old_daemon = eukhe.main_pid("eukhe.service");
    let background = eukhe.user("eukhe ls");
    assert!(background.status.success());
    assert!(
        String::from_utf8_lossy(&background.stderr)
            .contains("`eukhe attach` (or `eukhe shutdown --if-idle`) replaces it when it is idle"),
        "{}",
        String::from_utf8_lossy(&background.stderr)
    );
    let served = eukhe.user(&format!("eukhe bash {id} -- echo still served"));
    assert_eq!(String::from_utf8_lossy(&served.stdout), "still served\n");
    // Only `eukhe attach` on a terminal (script(1) gives it one) asks the
    // older daemon to shut down if idle.
    let kept = eukhe.attach_interactively(&id);
    // The terminal carries the client's standard error too.
    let said = String::from_utf8_lossy(&kept.stdout);
    assert!(
        said.contains("is busy: it keeps serving until it is idle"),
        "a busy older daemon is kept, and the client says so: {said}"
    );
    assert_eq!(eukhe.main_pid("eukhe.service"), old_daemon);
    eukhe.user_ok("touch ~/release");
    wait_until(Duration::from_secs(15), "the run finishes", || {
        eukhe
            .user_ok(&format!("{as_old} log {id}"))
            .contains("[run 1 exited 0]")
    });
    let attached = eukhe.attach_interactively(&id);
    let said = String::from_utf8_lossy(&attached.stdout);
    assert!(attached.status.success(), "{said}");
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- echo on the new build")),
        "on the new build\n"
    );
    let status = eukhe.status();
    assert_eq!(
        status["version"],
        env!("CARGO_PKG_VERSION"),
        "replaced when idle"
    );
    let new_daemon = status["pid"].as_u64().unwrap() as u32;
    assert_ne!(new_daemon, old_daemon);
    assert_eq!(
        eukhe.main_pid("eukhe.service"),
        new_daemon,
        "the new daemon came through socket activation"
    );
    assert!(eukhe.eukhe(&format!("log {id}")).contains("old run done"));
    assert_ne!(
        eukhe.session(&id)["build"],
        "old-build",
        "the worker was replaced too"
    );
    let older = eukhe.user(&format!("{as_old} ls"));
    assert!(older.status.success());
    assert!(
        String::from_utf8_lossy(&older.stderr).contains("is older than the running daemon"),
        "{}",
        String::from_utf8_lossy(&older.stderr)
    );
    assert_eq!(
        eukhe.main_pid("eukhe.service"),
        new_daemon,
        "an older client replaces nothing"
    );
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

/// Scenario 8: a reboot while a run is busy: the revived session marks the
/// run in flight interrupted once (never reruns it), restores the shell
/// state (function, alias, variable) from the snapshot with one notice, and
/// runs the queued input in the new kernel unit.
#[test]
fn after_a_reboot_the_run_in_flight_is_interrupted_once_and_the_shell_state_is_restored() {
    if skip() {
        return;
    }
    let mut eukhe = Installed::boot("restore", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    eukhe.eukhe(&format!(
        "bash {id} -- {}",
        shell_quote("f() { echo from f; }; alias a='echo from a'; v='from v'")
    ));
    let file = format!("/home/{}/G", installed::USER);
    eukhe.eukhe(&format!(
        "send {id} {}",
        shell_quote(&format!("echo started >> {file}; sleep 600"))
    ));
    eukhe.eukhe(&format!("send {id} 'echo queued ran'"));
    wait_until(
        Duration::from_secs(10),
        "the run is busy in the kernel unit",
        || runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 600"),
    );
    eukhe.reboot();
    assert_eq!(eukhe.unit(&kernel(&id), "ActiveState"), "inactive");
    // The first connect activates a supervisor, which revives the session.
    eukhe.sessions();
    wait_until(Duration::from_secs(30), "the queued input ran", || {
        eukhe.eukhe(&format!("log {id}")).contains("queued ran")
    });
    eukhe.assert_revived(&id);
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'f; a; echo \"$v\"'")),
        "from f\nfrom a\nfrom v\n"
    );
    let log = eukhe.eukhe(&format!("log {id}"));
    assert_eq!(log.matches("interrupted]").count(), 1, "{log}");
    // User bash 1 set the state; the run in flight was input 2.
    assert!(log.contains("[run 2 interrupted]"), "{log}");
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    assert_eq!(
        eukhe.root(&format!("cat {file}")),
        "started\n",
        "the interrupted run was not run again"
    );
    assert_eq!(eukhe.unit(&kernel(&id), "ActiveState"), "active");
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

/// Idle stop under systemd: a session left alone for `idle_stop_ms` has
/// its worker and kernel units stopped (cleanly: no failure counted, no
/// failed unit), is `saved`, and the next `bash` starts both units again
/// with the shell state restored once.
#[test]
fn an_idle_session_stops_its_units_and_the_next_bash_wakes_it() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("idle-stop", &[]);
    // Written before the first client starts the supervisor, which reads it.
    eukhe.user_ok(
        "mkdir -p ~/.config/eukhe && printf 'idle_stop_ms = 1500\\n' > ~/.config/eukhe/config.toml",
    );
    let id = eukhe.eukhe("new").trim().to_string();
    eukhe.eukhe(&format!("bash {id} -- 'cd /tmp; f() {{ echo kept; }}'"));
    wait_until(Duration::from_secs(10), "the session is saved", || {
        eukhe.session(&id)["state"] == "saved"
    });
    for unit in [worker(&id), kernel(&id)] {
        wait_until(Duration::from_secs(10), &format!("{unit} is down"), || {
            eukhe.unit(&unit, "ActiveState") == "inactive"
        });
        assert_eq!(eukhe.unit(&unit, "Result"), "success", "{unit}");
    }
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'pwd; f'")),
        "/tmp\nkept\n"
    );
    for unit in [worker(&id), kernel(&id)] {
        assert_eq!(eukhe.unit(&unit, "ActiveState"), "active", "{unit}");
    }
    let log = eukhe.eukhe(&format!("log {id}"));
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    let failures = eukhe.session(&id)["failures_in_window"].clone();
    if failures != 0 {
        let daemon = eukhe.journal("eukhe.service");
        panic!("the idle stop and the wake counted {failures} failures; the daemon's journal:\n{daemon}");
    }
}

/// `rm` under systemd: a busy session is refused; `--force` stops both of
/// its units (nothing it ran is left, no failed unit stays behind) and
/// deletes its directory; its busy evidence stays in the journal, and a
/// reboot revives nothing of it, even with its directory put back.
#[test]
fn rm_stops_both_units_and_no_reboot_brings_the_session_back() {
    if skip() {
        return;
    }
    let mut eukhe = Installed::boot("rm", &[]);
    let id = eukhe.eukhe("new --name doomed").trim().to_string();
    let kept = eukhe.eukhe("new --name kept").trim().to_string();
    eukhe.eukhe(&format!("send {id} 'sleep 600'"));
    wait_until(
        Duration::from_secs(10),
        "the run is in the kernel unit",
        || runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 600"),
    );
    let busy_evidence = format!(
        "journalctl --user MESSAGE_ID={BUSY_MESSAGE_ID} EUKHE_SESSION={id} EUKHE_BUSY=busy -o cat --no-pager"
    );
    wait_until(
        Duration::from_secs(10),
        "busy evidence is in the journal",
        || {
            eukhe
                .user_ok(&busy_evidence)
                .contains("busy evidence: busy")
        },
    );
    let refused = eukhe.user(&format!("eukhe rm {id}"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("is busy") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(eukhe.unit(&worker(&id), "ActiveState"), "active");
    assert!(runs(&eukhe.cgroup_processes(&kernel(&id)), "sleep 600"));
    let state_dir = format!("/home/{}/.local/state/eukhe/sessions", installed::USER);
    // What a removal cut short by a crash could leave behind.
    eukhe.root(&format!("cp -a {state_dir}/{id} /root/{id}"));

    assert_eq!(
        eukhe.eukhe(&format!("rm --force {id}")),
        format!("removed doomed ({id})\n")
    );
    for unit in [worker(&id), kernel(&id)] {
        assert_eq!(eukhe.unit(&unit, "ActiveState"), "inactive", "{unit}");
    }
    let failed = eukhe.user_ok("systemctl --user list-units --failed --plain --no-legend");
    assert!(
        !failed.contains(&id),
        "a unit of the removed session failed:\n{failed}"
    );
    assert!(
        !runs(&eukhe.processes(), "sleep 600"),
        "the run outlived rm --force"
    );
    assert_eq!(
        eukhe.root(&format!(
            "test -e {state_dir}/{id} && echo present || echo absent"
        )),
        "absent\n"
    );
    assert!(!eukhe.eukhe("ls").contains(&id));

    eukhe.reboot();
    eukhe.root(&format!("cp -a /root/{id} {state_dir}/{id}"));
    assert!(
        eukhe
            .user_ok(&busy_evidence)
            .contains("busy evidence: busy"),
        "the journal keeps its entries"
    );
    let sessions = eukhe.sessions();
    let ids: Vec<&str> = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![kept.as_str()], "only the kept session is listed");
    for unit in [worker(&id), kernel(&id)] {
        assert_eq!(eukhe.unit(&unit, "ActiveState"), "inactive", "{unit}");
    }
    wait_until(
        Duration::from_secs(10),
        "the leftover directory is deleted",
        || {
            eukhe.root(&format!(
                "test -e {state_dir}/{id} && echo present || echo absent"
            )) == "absent\n"
        },
    );
    assert!(!eukhe
        .journal("eukhe.service")
        .contains(&format!("reviving session {id}")));
}

#[test]
fn a_private_systemd_boots_its_minimal_target_and_leaves_the_host_alone() {
    if skip() {
        return;
    }
    let host_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let systemd = PrivateSystemd::boot("boot").unwrap_or_else(|e| panic!("{e}"));
    let units = systemd.exec(&["systemctl", "list-units", "--no-legend", "--plain"]);
    let units = String::from_utf8_lossy(&units.stdout);
    assert!(units.contains("eukhe-test.target"), "{units}");
    assert!(!units.contains("getty"), "gettys must stay masked: {units}");
    let out = systemd.exec(&[
        "sh",
        "-c",
        "echo written inside > /etc/eukhe-harness-probe && hostname",
    ]);
    assert!(out.status.success());
    assert!(
        systemd.path("/etc/eukhe-harness-probe").exists(),
        "writes land in the overlay"
    );
    assert!(
        !std::path::Path::new("/etc/eukhe-harness-probe").exists(),
        "the host's /etc is untouched"
    );
    let dir = systemd.dir.clone();
    let cgroup = systemd.cgroup().to_path_buf();
    assert!(
        cgroup.exists(),
        "the private systemd runs in its own cgroup"
    );
    drop(systemd);
    assert!(!dir.exists(), "teardown removes the harness directory");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_hostname
    );
    assert!(
        !cgroup.exists(),
        "teardown removes the test's cgroup: {}",
        cgroup.display()
    );
}

#[test]
fn the_units_verify_clean_with_systemd_analyze() {
    if skip() {
        return;
    }
    let systemd = PrivateSystemd::boot("verify").unwrap_or_else(|e| panic!("{e}"));
    // Install the built binary and the repository's units where the units
    // expect them, inside (the overlay) only.
    let install = |from: &str, inside: &str, mode| {
        systemd
            .install(std::path::Path::new(from), inside, mode)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    install(env!("CARGO_BIN_EXE_eukhe"), "/usr/bin/eukhe", 0o755);
    for unit in crate::support::systemd::UNITS {
        let from = format!("{}/units/{unit}", env!("CARGO_MANIFEST_DIR"));
        install(&from, &format!("/usr/lib/systemd/user/{unit}"), 0o644);
    }
    // The man pages come with the packages: tests/packages.rs verifies the
    // installed units with their man:eukhe(1) link.
    systemd
        .verify_units(false)
        .unwrap_or_else(|report| panic!("{report}"));
    assert!(
        !std::path::Path::new("/usr/lib/systemd/user/eukhe.socket").exists(),
        "nothing installed on the host"
    );
}

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
