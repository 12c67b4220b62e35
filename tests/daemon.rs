//! The daemon on the process backend, driven through the real binary:
//! real processes, real sockets, temporary directories.

#[path = "daemon/sessions.rs"]
mod sessions;

#[path = "daemon/diag.rs"]
mod diag;

#[path = "daemon/events.rs"]
mod events;

#[path = "daemon/stop.rs"]
mod stop;

#[path = "daemon/revival.rs"]
mod revival;

#[path = "daemon/stuck.rs"]
mod stuck;

#[path = "daemon/quiesce.rs"]
mod quiesce;

#[path = "daemon/restore.rs"]
mod restore;

#[path = "daemon/messages.rs"]
mod messages;

use std::time::{Duration, Instant};

use crate::support::process::Signal;
use crate::support::wire::frame;
use crate::support::{alive, kill9, never, signal, wait_for, wait_until, Env};

#[test]
fn sessions_run_commands_and_keep_their_namespace() {
    let env = Env::new("basics");
    let id = env
        .ok(&["new", "--name", "basics", "--cwd", "/"])
        .trim()
        .to_string();
    assert_eq!(id.len(), 8, "{id}");
    let out = env.ok(&[
        "bash",
        &id,
        "--",
        "cd /tmp && export GREETING=hello && echo moved",
    ]);
    assert_eq!(out, "moved\n");
    let out = env.ok(&["bash", "basics", "--", "echo $GREETING from $(pwd)"]);
    assert_eq!(out, "hello from /tmp\n");
    let failing = env.run(&["send", &id, "echo run output; exit 3", "--wait"]);
    assert_eq!(failing.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&failing.stdout), "run output\n");
    let log = env.log(&id);
    assert!(
        // Two user bashes took inputs 1 and 2: inputs share one sequence.
        log.contains("[run 3] $ echo run output; exit 3\nrun output\n[run 3 exited 3]"),
        "{log}"
    );
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    assert!(json
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "run_finished" && e["status"] == 3));
    assert_eq!(env.session(&id)["state"], "idle");
}

#[test]
fn several_words_after_the_separator_are_a_command_and_its_arguments() {
    let env = Env::new("argv");
    let id = env.ok(&["new"]).trim().to_string();
    let printed = env.ok(&["bash", &id, "--", "printf", "%s\n", "a b", "c", "it's"]);
    assert_eq!(printed, "a b\nc\nit's\n");
    let status = env.run(&["bash", &id, "--", "sh", "-c", "exit 3"]).status;
    assert_eq!(status.code(), Some(3));
    // One argument is a command line, as before.
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo one && echo two"]),
        "one\ntwo\n"
    );
}

#[test]
fn queued_runs_go_one_at_a_time_in_order() {
    let env = Env::new("order");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["send", &id, &format!("sleep 0.1; echo run {i}")]);
    }
    let last = env.run(&["send", &id, "echo last", "--wait"]);
    assert!(last.status.success());
    let log = env.log(&id);
    let positions: Vec<usize> = (1..=3)
        .map(|i| log.find(&format!("\nrun {i}\n")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{log}");
}

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

/// Kill `id`'s worker `times` times, the next only once it was restarted,
/// and the last without waiting for its restart.
fn crash_times(env: &Env, id: &str, times: u32) {
    for failure in 1..=times {
        let pid = env.worker_pid(id).unwrap();
        kill9(pid);
        if failure < times {
            wait_until(Duration::from_secs(15), "the worker restarts", || {
                env.worker_pid(id).is_some_and(|p| p != pid)
            });
        }
    }
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
fn bad_names_and_directories_are_refused_clearly() {
    let env = Env::new("names");
    for (name, why) in [
        ("a/b", "path separator"),
        ("..", "\"..\""),
        ("tab\there", "control character"),
    ] {
        let out = env.run(&["new", "--name", name]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{name:?}"
        );
    }
    let out = env.run(&["new", "--cwd", "/definitely/not/here"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/definitely/not/here"));
    let out = env.run(&["bash", "nosuch", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session \"nosuch\""));
}

/// Send raw bytes to the daemon's socket and read what comes back.
fn raw_exchange(env: &Env, bytes: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let socket = env.dir.join("run/eukhe.sock");
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    reply
}

/// The message of the first error frame in `reply`.
fn error_message(reply: &[u8]) -> String {
    let mut rest = reply;
    while rest.len() > 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let value: serde_json::Value = serde_json::from_slice(&rest[4..4 + len]).unwrap();
        if value["type"] == "error" {
            return value["message"].as_str().unwrap().to_string();
        }
        rest = &rest[4 + len..];
    }
    panic!("no error frame in {reply:?}");
}

#[test]
fn garbage_oversized_truncated_and_future_frames_get_clear_errors_and_the_daemon_keeps_serving() {
    let env = Env::new("frames");
    env.ok(&["status"]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (frame(b"this is not json"), "malformed message"),
        (frame(&[0xff, 0xfe, 0xfd]), "invalid UTF-8"),
        (frame(br#"{"type":"teleport"}"#), "unknown variant"),
        (((1u32 << 20) + 1).to_be_bytes().to_vec(), "over the limit"),
        (0u32.to_be_bytes().to_vec(), "empty frame"),
        ({ let mut b = 100u32.to_be_bytes().to_vec(); b.extend_from_slice(b"{\"ty"); b }, "truncated frame"),
        (
            [
                frame(br#"{"type":"hello","protocol":99,"version":"9.9.9","build_id":"x","role":"interactive"}"#),
                frame(br#"{"type":"list"}"#),
            ]
            .concat(),
            "from the future",
        ),
    ];
    for (bytes, expected) in cases {
        let message = error_message(&raw_exchange(&env, &bytes));
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    let id = env.ok(&["new"]).trim().to_string();
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo still serving"]),
        "still serving\n"
    );
}

#[test]
fn another_uid_is_refused() {
    if crate::support::skip::not_root("another_uid_is_refused needs root to play a second uid") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::new("uid");
    env.ok(&["status"]);
    // Open the directory and socket to everyone: only the peer-uid check
    // stands between the other user and the daemon now.
    let run = env.dir.join("run");
    std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        run.join("eukhe.sock"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let out = env
        .command(&["status"])
        .env("HOME", "/tmp")
        .env("EUKHE_STATE_DIR", "/tmp/eukhe-nobody-state-never-created")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("uid 65534 is not the daemon's uid 0"),
        "{stderr}"
    );
    // And with the directory private, as the daemon leaves it, the other
    // user cannot even reach the socket.
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = env
        .command(&["status"])
        .env("HOME", "/tmp")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn attach_replays_then_follows_and_typed_lines_are_input() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let env = Env::new("attach");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo before attach"]);
    let mut attached = env
        .command(&["attach", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = attached.stdin.take().unwrap();
    let stdout = attached.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut expect = |text: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !seen.iter().any(|l: &String| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("attach never showed {text:?}; saw {seen:?}"),
            }
        }
    };
    expect("before attach");
    env.ok(&["bash", &id, "--", "echo from elsewhere"]);
    expect("from elsewhere");
    writeln!(stdin, "echo typed input").unwrap();
    // After user bashes 1 and 2, the typed line is input 3.
    expect("[run 3] $ echo typed input");
    expect("[run 3 exited 0]");
    drop(stdin);
    let _ = attached.kill();
    let _ = attached.wait();
}

/// An attached client on its own thread, with its output lines in a channel.
struct Attached {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Attached {
    fn start(env: &Env, id: &str) -> Attached {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = env
            .command(&["attach", id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Attached {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.seen.iter().any(|l| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("attach never showed {text:?}; saw {:?}", self.seen),
            }
        }
    }

    fn count(&self, text: &str) -> usize {
        self.seen.iter().filter(|l| l.contains(text)).count()
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn in_attach_ctrl_c_cancels_the_running_run_ctrl_backslash_detaches_and_eof_waits_for_its_inputs() {
    use std::io::Write;
    let env = Env::new("attach-keys");
    let id = env.ok(&["new"]).trim().to_string();
    let mut attached = Attached::start(&env, &id);
    let stdin = attached.child.stdin.as_mut().unwrap();
    writeln!(stdin, "sleep 1000").unwrap();
    writeln!(stdin, "echo after the cancel").unwrap();
    // Running, not only queued (a session is busy from its first queued
    // input): Ctrl-C cancels the running run.
    attached.expect("[run 1] $ sleep 1000");
    wait_until(Duration::from_secs(10), "the run is busy", || {
        env.session(&id)["state"] == "busy"
    });
    let client = attached.child.id();
    signal(client, Signal::SIGINT);
    // SIGINT, or SIGTERM a cancel grace later when SIGINT fell between
    // bash's fork and its exec of `sleep` (the child drops a signal its
    // parent's handler took there; seen on a loaded machine).
    attached.expect("[run 1 cancelled: signal ");
    attached.expect("after the cancel");
    assert!(
        alive(client),
        "Ctrl-C ended the client instead of cancelling"
    );
    signal(client, Signal::SIGQUIT);
    let status = attached.child.wait().unwrap();
    assert!(status.success(), "Ctrl-\\ should detach cleanly: {status}");

    // End of input: the client leaves once what it sent has run.
    let mut attached = Attached::start(&env, &id);
    let mut stdin = attached.child.stdin.take().unwrap();
    writeln!(stdin, "sleep 1; echo sent before the end").unwrap();
    drop(stdin);
    let started = Instant::now();
    let status = attached.child.wait().unwrap();
    assert!(status.success());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "left before its input ran"
    );
    attached.expect("sent before the end");
}

#[test]
fn an_attached_client_follows_a_kernel_restart_and_shows_each_notice_once() {
    let env = Env::new("attach-restart");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo first"]);
    let mut attached = Attached::start(&env, &id);
    attached.expect("first");
    let kernel = env.kernel_pid(&id).unwrap();
    kill9(kernel);
    attached.expect("kernel restored from its snapshot");
    env.ok(&["bash", &id, "--", "echo after the restart"]);
    attached.expect("after the restart");
    assert_eq!(attached.count("kernel restored"), 1, "{:?}", attached.seen);
    assert_eq!(
        attached.seen.iter().filter(|l| *l == "first").count(),
        1,
        "{:?}",
        attached.seen
    );
}

#[test]
fn an_attached_client_relaunches_a_lost_supervisor_within_a_minute() {
    let env = Env::new("attach-relaunch");
    let id = env.ok(&["new"]).trim().to_string();
    let mut attached = Attached::start(&env, &id);
    env.ok(&["bash", &id, "--", "echo hello"]);
    attached.expect("hello");
    let daemon = env.daemon_pid();
    let worker = env.worker_pid(&id).unwrap();
    kill9(daemon);
    let socket = env.dir.join("run/eukhe.sock");
    let lost_at = Instant::now();
    // Only the attached client may start the next supervisor here.
    wait_until(
        Duration::from_secs(60),
        "the attached client relaunches the supervisor",
        || !alive(daemon) && std::os::unix::net::UnixStream::connect(&socket).is_ok(),
    );
    eprintln!(
        "relaunched {} ms after the loss",
        lost_at.elapsed().as_millis()
    );
    assert_eq!(
        env.worker_pid(&id),
        Some(worker),
        "the relaunched supervisor adopts the worker"
    );
    env.ok(&["bash", &id, "--", "echo through the new supervisor"]);
    attached.expect("through the new supervisor");
}

#[test]
fn a_config_file_with_a_wrong_type_is_named_in_one_line() {
    let env = Env::new("config").with_config("worker_lost_exit_ms = \"soon\"\n");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("config.toml: line 1: worker_lost_exit_ms = \"soon\": expected milliseconds (at least 69000) or \"never\""),
        "{stderr}"
    );
    let doctor = env.run(&["doctor", "--json"]);
    assert!(!doctor.status.success());
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let config = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "config")
        .unwrap();
    assert_eq!(config["ok"], false);
}

#[test]
fn a_lost_exit_window_below_the_minimum_is_refused_in_one_line_and_past_the_cap_means_never() {
    let env = Env::new("short-window").with_config("worker_lost_exit_ms = 500\n");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("worker_lost_exit_ms = 500 is shorter than the minimum 69000"),
        "{stderr}"
    );
    // The same from the environment.
    let env = Env::new("short-window-env").with("EUKHE_WORKER_LOST_EXIT_MS", "500");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("EUKHE_WORKER_LOST_EXIT_MS: worker_lost_exit_ms = 500 is shorter than the minimum 69000"),
        "{stderr}"
    );
    // Past the wire's range (10^14 ms) a window never expires, from the
    // file as from the environment: both start sessions.
    let past = "100000000000001";
    let file = Env::new("capped-window").with_config(&format!("worker_lost_exit_ms = {past}\n"));
    file.ok(&["new"]);
    let environment = Env::new("capped-window-env").with("EUKHE_WORKER_LOST_EXIT_MS", past);
    environment.ok(&["new"]);
}

#[test]
fn a_torn_transcript_tail_is_cut_and_reported_once() {
    use std::io::Write;
    let env = Env::new("torn");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo acknowledged"]);
    env.ok(&["shutdown", "--force"]);
    let transcript = env.dir.join("state/sessions").join(&id).join("transcript3");
    let good = std::fs::metadata(&transcript).unwrap().len();
    // A record header promising 200 bytes, and only a few of them: what a
    // crash in the middle of an append leaves (the file's sync marker is
    // bytes 8..16 of its header).
    let marker = std::fs::read(&transcript).unwrap()[8..16].to_vec();
    let mut torn = marker;
    torn.extend_from_slice(&1000u64.to_be_bytes());
    torn.push(1);
    torn.extend_from_slice(&200u32.to_be_bytes());
    torn.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, b'{', b'"']);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&transcript)
        .unwrap();
    file.write_all(&torn).unwrap();
    drop(file);
    // A reader of the resting session says so, at its end.
    let resting = env.log(&id);
    assert_eq!(resting.matches("torn tail").count(), 1, "{resting}");
    assert!(
        resting.ends_with(&format!(
            "27 bytes at offset {good}; the session's next start cuts them off and keeps them in {}\n",
            transcript.with_file_name(format!("transcript.damaged-{good}")).display()
        )),
        "{resting}"
    );
    assert_eq!(env.ok(&["bash", &id, "--", "echo after"]), "after\n");
    let log = env.log(&id);
    assert!(log.contains("acknowledged"), "{log}");
    assert_eq!(log.matches("torn tail").count(), 1, "{log}");
    assert!(
        log.contains(&format!("27 bytes at offset {good} were cut off")),
        "{log}"
    );
    // Cut off, but kept aside first, where the notice says.
    let kept = transcript.with_file_name(format!("transcript.damaged-{good}"));
    assert!(log.contains(&kept.display().to_string()), "{log}");
    assert_eq!(std::fs::read(&kept).unwrap(), torn);
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

#[test]
fn a_watchdog_shorter_than_the_sign_of_life_is_refused() {
    let env = Env::new("watchdog-config").with_config("worker_watchdog_ms = 500\n");
    let out = env.run(&["status"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("worker_watchdog_ms = 500 is below the minimum 2000"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn state_is_private_and_no_environment_value_reaches_a_log() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("private");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "export API_TOKEN=s3cr3t-t0ken-value"]);
    env.ok(&["send", &id, "echo run with the token set"]);
    wait_until(Duration::from_secs(10), "the run finishes", || {
        env.log(&id).contains("[run 2 exited 0]")
    });
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let state = env.dir.join("state");
    let session = state.join("sessions").join(&id);
    for dir in [
        &state,
        &session,
        &session.join("spool"),
        &session.join("scratch"),
    ] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in [
        "meta.json",
        "transcript3",
        "snapshot.json",
        "worker.json",
        "kernel.json",
    ] {
        assert_eq!(mode(&session.join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&state.join("busy.log")), 0o600, "busy evidence");
    // The kernel's spool and scratch files (output, ends, restore scripts,
    // the template's): nobody else's to read.
    for dir in ["spool", "scratch"] {
        for entry in std::fs::read_dir(session.join(dir)).unwrap().flatten() {
            let path = entry.path();
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                use std::os::unix::fs::PermissionsExt as _;
                let bits = meta.permissions().mode() & 0o777;
                assert_eq!(bits & 0o077, 0, "{} is {bits:o}", path.display());
            }
        }
    }
    // The snapshot keeps the value (0600, for the kernel); no log does.
    let mut logs = vec![state.join("busy.log"), state.join("daemon.log")];
    for entry in std::fs::read_dir(&session).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            logs.push(entry.path());
        }
    }
    assert!(
        logs.len() >= 4,
        "the worker's and kernel's logs are among {logs:?}"
    );
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains("s3cr3t-t0ken-value"),
            "{} holds an environment value",
            log.display()
        );
    }
}
