//! Socket activation under systemd: the first connect starts the
//! supervisor, a session is a worker unit, and a killed supervisor or a
//! replacement comes back through the socket.

use std::time::Duration;

use super::{skip, worker};
use crate::support::installed::Installed;
use crate::support::wait_until;

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
