//! Replacing the daemon: adoption of busy workers, workers and clients of
//! another build, the idle shutdown and socket activation.

use std::time::Duration;

use crate::support::{alive, kill9, wait_until, Env};

#[test]
fn a_new_supervisor_adopts_a_busy_worker_without_aborting_its_run() {
    let env = Env::new("adopt");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 2; echo survived"]);
    wait_until(Duration::from_secs(5), "the run is busy", || {
        env.session(&id)["state"] == "busy"
    });
    let worker = env.worker_pid(&id).unwrap();
    kill9(env.daemon_pid());
    let sessions = env.sessions();
    let adopted = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap();
    wait_until(Duration::from_secs(5), "the worker is adopted", || {
        env.worker_pid(&id) == Some(worker)
    });
    assert_eq!(adopted["failures_in_window"], 0);
    wait_until(Duration::from_secs(10), "the run finishes", || {
        env.log(&id).contains("[run 1 exited 0]")
    });
    assert!(env.log(&id).contains("survived"));
    assert_eq!(env.worker_pid(&id), Some(worker));
}

#[test]
fn a_worker_of_another_build_is_replaced_on_this_build() {
    let old = Env::new("builds").with("EUKHE_BUILD_ID", "old-build");
    let id = old.ok(&["new"]).trim().to_string();
    old.ok(&["bash", &id, "--", "export KEPT=yes"]);
    let old_worker = old.worker_pid(&id).unwrap();
    kill9(old.daemon_pid());
    let new = old.sharing().with("EUKHE_BUILD_ID", "new-build");
    wait_until(
        Duration::from_secs(10),
        "the session runs on the new build",
        || new.session(&id)["build"] == "new-build",
    );
    assert!(!alive(old_worker));
    assert_eq!(new.ok(&["bash", &id, "--", "echo $KEPT"]), "yes\n");
    std::mem::forget(old);
}

#[test]
fn shutdown_if_idle_refuses_while_busy_and_stops_when_idle() {
    let env = Env::new("ifidle");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 4; echo finished"]);
    wait_until(Duration::from_secs(5), "the run is busy", || {
        env.session(&id)["state"] == "busy"
    });
    let refused = env.run(&["shutdown", "--if-idle"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("busy"));
    wait_until(Duration::from_secs(10), "the run finishes", || {
        env.log(&id).contains("[run 1 exited 0]")
    });
    let daemon = env.daemon_pid();
    let worker = env.worker_pid(&id).unwrap();
    let stopped = env.run(&["shutdown", "--if-idle"]);
    assert!(
        stopped.status.success(),
        "{}",
        String::from_utf8_lossy(&stopped.stdout)
    );
    wait_until(
        Duration::from_secs(10),
        "daemon and worker are gone",
        || !alive(daemon) && !alive(worker),
    );
    assert!(env.log(&id).contains("finished"));
}

#[test]
fn an_older_client_uses_a_newer_daemon_and_says_so() {
    let newer = Env::new("older-client").with("EUKHE_VERSION", "9.0.0");
    newer.ok(&["status"]);
    let older = newer.sharing().with("EUKHE_VERSION", "1.0.0");
    let out = older.run(&["ls"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("this eukhe (v1.0.0) is older than the running daemon (v9.0.0): update or run `eukhe shutdown`"));
    std::mem::forget(older);
}

#[test]
fn eukhe_send_keeps_an_older_idle_daemon_and_names_the_way_to_upgrade() {
    let older = Env::new("send-keeps").with("EUKHE_VERSION", "1.0.0");
    let id = older.ok(&["new"]).trim().to_string();
    let old_daemon = older.daemon_pid();
    let newer = older.sharing().with("EUKHE_VERSION", "2.0.0");
    // A background start (a cron job's `eukhe send`) never replaces.
    let out = newer.run(&["send", &id, "echo from cron", "--wait"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from cron\n");
    let said = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = said
        .lines()
        .filter(|line| !line.starts_with("eukhe: queued as run "))
        .collect();
    assert_eq!(
        said,
        ["eukhe: the running daemon (v1.0.0) is older than this eukhe (v2.0.0): keeping it; `eukhe attach` (or `eukhe shutdown --if-idle`) replaces it when it is idle"],
        "one line naming the way to upgrade"
    );
    assert!(alive(old_daemon), "the older daemon keeps serving");
    assert_eq!(newer.daemon_pid(), old_daemon);
    std::mem::forget(older);
}

#[test]
fn a_newer_interactive_client_replaces_an_idle_daemon_and_sessions_survive() {
    let older = Env::new("newer-client").with("EUKHE_VERSION", "1.0.0");
    let id = older.ok(&["new"]).trim().to_string();
    older.ok(&["bash", &id, "--", "export KEPT=1"]);
    let old_daemon = older.daemon_pid();
    let newer = older.sharing().with("EUKHE_VERSION", "2.0.0");
    // An attach without a terminal (from cron, or fed by a pipe) is a
    // background start: it keeps the older daemon.
    newer.ok(&["attach", &id]);
    assert_eq!(
        newer.daemon_pid(),
        old_daemon,
        "kept by an attach from a pipe"
    );
    // `eukhe attach` on a terminal is the interactive start: it replaces
    // the idle older daemon (its input is empty, so it detaches at once).
    on_a_terminal(&newer, &["attach", &id]);
    let status: serde_json::Value = serde_json::from_str(&newer.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["version"], "2.0.0");
    assert_eq!(newer.ok(&["bash", &id, "--", "echo $KEPT"]), "1\n");
    // It answered the shutdown before ending; it ends right after.
    wait_until(Duration::from_secs(5), "the old daemon ends", || {
        !alive(old_daemon)
    });
    std::mem::forget(older);
}

/// Run eukhe with a pseudo-terminal on its standard input and output
/// (util-linux `script`), its input ending at once.
fn on_a_terminal(env: &Env, args: &[&str]) {
    let mut line = env!("CARGO_BIN_EXE_eukhe").to_string();
    for arg in args {
        line.push_str(&format!(" '{arg}'"));
    }
    let mut command = std::process::Command::new("script");
    command.args(["-qec", &line, "/dev/null"]);
    command.stdin(std::process::Stdio::null());
    command.env_remove("EUKHE_BUILD_ID");
    for (name, value) in &env.vars {
        command.env(name, value);
    }
    let out = command.output().expect("run script(1)");
    assert!(
        out.status.success(),
        "eukhe {args:?} on a terminal: {out:?}"
    );
}

#[test]
fn socket_activation_starts_the_daemon_and_it_notifies_the_manager() {
    use std::os::unix::net::UnixDatagram;
    let env = Env::new("activation");
    let socket = env.dir.join("run/eukhe.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let notify_path = env.dir.join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // systemd's own activator: it listens, and starts the daemon with the
    // listening socket (LISTEN_FDS) on the first connection.
    let mut activator = std::process::Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg(format!(
            "--setenv=EUKHE_STATE_DIR={}",
            env.dir.join("state").display()
        ))
        .arg(format!("--setenv=EUKHE_SOCKET={}", socket.display()))
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg(env!("CARGO_BIN_EXE_eukhe"))
        .arg("daemon")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (from the systemd package)");
    wait_until(Duration::from_secs(5), "the activator listens", || {
        socket.exists()
    });
    let id = env.ok(&["new"]).trim().to_string();
    let mut messages = Vec::new();
    let mut buf = [0u8; 512];
    while !messages.iter().any(|m: &String| m.contains("READY=1")) {
        let n = notify.recv(&mut buf).expect("READY=1 from the daemon");
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    let daemon = env.daemon_pid();
    // The activator execs the daemon in its own place on the first
    // connection: the daemon is the process this test started.
    assert_eq!(
        daemon,
        activator.id(),
        "the daemon runs from the activation"
    );
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo activated"]),
        "activated\n"
    );
    env.ok(&["shutdown", "--force"]);
    while !messages.iter().any(|m| m.contains("STOPPING=1")) {
        let n = notify.recv(&mut buf).expect("STOPPING=1 from the daemon");
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("STATUS=") || m.contains("\nSTATUS=")),
        "{messages:?}"
    );
    wait_until(Duration::from_secs(10), "the daemon ends", || {
        !alive(daemon)
    });
    assert!(
        socket.exists(),
        "the activated socket stays with its manager"
    );
    let _ = activator.kill();
    let _ = activator.wait();
}
