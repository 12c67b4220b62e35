//! Which sessions come back under systemd: after a reboot, after an idle
//! stop, and never after `rm`.

use std::time::Duration;

use eukhe::host::busy_journal::BUSY_MESSAGE_ID;

use super::{kernel, runs, shell_quote, skip, worker};
use crate::support::installed::{self, Installed};
use crate::support::wait_until;

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
