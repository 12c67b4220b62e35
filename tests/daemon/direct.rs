//! The direct route: `bash`, `send` and `log` of a running session reach
//! its worker without the supervisor (served with the supervisor stopped),
//! and whatever the route cannot serve still goes through the supervisor
//! (a stopped session revives, a lost supervisor is started again).

use std::process::{Child, Output, Stdio};
use std::time::Duration;

use crate::support::process::Signal;
use crate::support::{kill9, signal, wait_for, wait_until, Env};

/// A supervisor stopped with SIGSTOP until this is dropped, whatever the
/// test's outcome.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        signal(pid, Signal::SIGSTOP);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, Signal::SIGCONT);
    }
}

/// Run `args` as a client and wait for its end within `within`; a client
/// still waiting then is killed, and the test fails saying `what`.
fn finishes(env: &Env, args: &[&str], within: Duration, what: &str) -> Output {
    let mut child: Child = env
        .command(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ended = wait_for(within, || matches!(child.try_wait(), Ok(Some(_))));
    if !ended {
        let _ = child.kill();
    }
    let output = child.wait_with_output().unwrap();
    assert!(
        ended,
        "{what}: `eukhe {}` did not end within {within:?} (stderr: {})",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn a_running_sessions_bash_send_and_log_are_served_with_the_supervisor_stopped() {
    let env = Env::new("direct-stopped");
    let id = env.ok(&["new", "--name", "direct"]).trim().to_string();
    env.ok(&["bash", "direct", "--", "x=kept"]);
    let daemon = env.daemon();
    let stopped = Stopped::new(daemon);
    let within = Duration::from_secs(10);
    let bash = finishes(
        &env,
        &["bash", "direct", "--", "echo $x; exit 3"],
        within,
        "bash by name with the supervisor stopped",
    );
    assert_eq!(String::from_utf8_lossy(&bash.stdout), "kept\n");
    assert_eq!(bash.status.code(), Some(3));
    let by_id = finishes(
        &env,
        &["bash", &id, "--", "echo by id"],
        within,
        "bash by id with the supervisor stopped",
    );
    assert_eq!(String::from_utf8_lossy(&by_id.stdout), "by id\n");
    let send = finishes(
        &env,
        &["send", "--wait", "direct", "echo sent"],
        within,
        "send --wait with the supervisor stopped",
    );
    assert!(send.status.success(), "{send:?}");
    assert_eq!(String::from_utf8_lossy(&send.stdout), "sent\n");
    let log = finishes(
        &env,
        &["log", "direct"],
        within,
        "log with the supervisor stopped",
    );
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("sent"),
        "{log:?}"
    );
    drop(stopped);
    // The supervisor, continued, still knows the session and serves it.
    assert_eq!(env.ok(&["bash", "direct", "--", "echo $x"]), "kept\n");
    assert_eq!(env.daemon_pid(), daemon, "the same supervisor serves");
}

#[test]
fn a_stopped_session_is_revived_through_the_supervisor() {
    let env = Env::new("direct-revive").with_config("idle_stop_ms = 1000\n");
    let id = env.ok(&["new", "--name", "back"]).trim().to_string();
    env.ok(&["bash", "back", "--", "cd /tmp"]);
    // A stopped session has no worker: the supervisor revives it.
    wait_until(Duration::from_secs(10), "the session is saved", || {
        env.session(&id)["state"] == "saved"
    });
    assert_eq!(env.ok(&["bash", "back", "--", "pwd"]), "/tmp\n");
    assert!(env.worker_pid(&id).is_some(), "revived");
}

#[test]
fn a_killed_worker_or_a_lost_supervisor_leaves_the_client_to_the_supervisor() {
    let env = Env::new("direct-fallback");
    let id = env.ok(&["new", "--name", "back"]).trim().to_string();
    env.ok(&["bash", "back", "--", "cd /tmp"]);
    // A worker killed leaves its socket refusing: the supervisor waits for
    // the next worker and hands the request to it.
    let worker = env.worker(&id);
    kill9(worker);
    assert_eq!(env.ok(&["bash", "back", "--", "pwd"]), "/tmp\n");
    assert!(env.worker_pid(&id).is_some_and(|pid| pid != worker));
    // A lost supervisor: once its worker knows, it leaves the client to
    // the supervisor's route, which starts a new one that adopts it.
    let worker = env.worker(&id);
    let daemon = env.daemon();
    kill9(daemon);
    let worker_log = env.session_dir(&id).join("worker.log");
    wait_until(
        Duration::from_secs(10),
        "the worker knows its supervisor is lost",
        || {
            std::fs::read_to_string(&worker_log)
                .is_ok_and(|log| log.contains("lost its supervisor"))
        },
    );
    assert_eq!(env.ok(&["bash", "back", "--", "pwd"]), "/tmp\n");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.state_dir().join("daemon.json")).unwrap())
            .unwrap();
    let relaunched = record["pid"].as_u64().unwrap() as u32;
    assert_ne!(relaunched, daemon, "the client started a new supervisor");
    assert!(crate::support::alive(relaunched));
    assert_eq!(env.worker_pid(&id), Some(worker), "the worker was adopted");
}
