//! The stuck world: peers that live but never answer (a stopped worker, a
//! worker that accepts and never replies, a stopped kernel, a stopped
//! supervisor). Each test states the bound it asserts: generous, as CI
//! machines are slow, and far below the minutes a wait without a deadline
//! took. The figures each measured are printed (`--nocapture`).

use std::time::{Duration, Instant};

use crate::support::process::Signal;
use crate::support::{alive, kill9, signal, wait_until, Env};

/// What "answers" means here: a command that needs no stuck peer.
const ANSWERS_WITHIN: Duration = Duration::from_secs(5);

/// The worker watchdog (30 s), the longest restart pause of a first
/// failure and a stop grace, with room for a slow machine.
const SERVED_AGAIN_WITHIN: Duration = Duration::from_secs(45);

/// Run `args`, timed; fails the test if it fails.
fn timed(env: &Env, args: &[&str]) -> (String, Duration) {
    let started = Instant::now();
    let out = env.ok(args);
    (out, started.elapsed())
}

fn kill_daemon(env: &Env) {
    let daemon = env.daemon_pid();
    kill9(daemon);
    wait_until(Duration::from_secs(5), "the daemon is gone", || {
        !alive(daemon)
    });
}

#[test]
fn a_stopped_worker_freezes_no_other_session_when_the_daemon_restarts() {
    let env = Env::new("stuck-worker");
    let stuck = env.ok(&["new", "--name", "a"]).trim().to_string();
    let other = env.ok(&["new", "--name", "b"]).trim().to_string();
    let worker = env.worker_pid(&stuck).expect("a's worker");
    signal(worker, Signal::SIGSTOP);
    kill_daemon(&env);

    let (_, ls) = timed(&env, &["ls"]);
    let (out, bash) = timed(&env, &["bash", &other, "--", "echo b answers"]);
    assert_eq!(out, "b answers\n");
    eprintln!("stopped worker at daemon start: ls {ls:?}, bash on another session {bash:?}");
    assert!(ls < ANSWERS_WITHIN, "ls took {ls:?}");
    assert!(
        bash < ANSWERS_WITHIN,
        "bash on another session took {bash:?}"
    );

    let (out, served) = timed(&env, &["bash", &stuck, "--", "echo a again"]);
    assert_eq!(out, "a again\n");
    eprintln!("the stuck session served again after {served:?}");
    assert!(served < SERVED_AGAIN_WITHIN, "took {served:?}");
    let session = env.session(&stuck);
    assert_eq!(session["failures_in_window"], 1, "{session}");
    assert_ne!(session["pid"].as_u64(), Some(u64::from(worker)));
    assert!(
        !alive(worker),
        "the unreachable worker was stopped by identity"
    );
}

/// A process that holds a session's worker socket and its `worker.json`,
/// accepts every connection and never answers.
struct SilentWorker {
    child: std::process::Child,
}

impl SilentWorker {
    fn start(env: &Env, id: &str) -> SilentWorker {
        let socket = env.dir.join("run/workers").join(format!("{id}.sock"));
        let record = env
            .state_dir()
            .join("sessions")
            .join(id)
            .join("worker.json");
        let script = r#"
import json, os, socket, sys, time
path, record = sys.argv[1], sys.argv[2]
try:
    os.unlink(path)
except FileNotFoundError:
    pass
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(64)
start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
with open(record + ".tmp", "w") as f:
    json.dump({"identity": {"pid": os.getpid(), "start_time": start}, "build_id": "silent"}, f)
os.rename(record + ".tmp", record)
print("listening", flush=True)
held = []
while True:
    connection, _ = server.accept()
    held.append(connection)
"#;
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&socket)
            .arg(&record)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line.trim(), "listening");
        SilentWorker { child }
    }
}

impl Drop for SilentWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_worker_that_accepts_and_never_answers_is_a_failure_and_is_replaced() {
    let env = Env::new("silent-worker");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    env.ok(&["bash", &id, "--", "export KEPT=1"]);
    let other = env.ok(&["new", "--name", "b"]).trim().to_string();
    let worker = env.worker_pid(&id).expect("a's worker");
    kill_daemon(&env);
    kill9(worker);
    wait_until(Duration::from_secs(5), "the worker is gone", || {
        !alive(worker)
    });
    let mut silent = SilentWorker::start(&env, &id);

    let (_, ls) = timed(&env, &["ls"]);
    let (_, bash) = timed(&env, &["bash", &other, "--", "true"]);
    eprintln!("silent worker at daemon start: ls {ls:?}, bash on another session {bash:?}");
    assert!(ls < ANSWERS_WITHIN, "ls took {ls:?}");
    assert!(bash < ANSWERS_WITHIN, "bash took {bash:?}");

    let (out, served) = timed(&env, &["bash", &id, "--", "echo $KEPT"]);
    assert_eq!(out, "1\n", "served by a new worker over the live kernel");
    eprintln!("the silent worker's session served again after {served:?}");
    assert!(served < SERVED_AGAIN_WITHIN, "took {served:?}");
    assert_eq!(env.session(&id)["failures_in_window"], 1);
    let ended = silent.child.try_wait().unwrap();
    assert!(
        ended.is_some(),
        "the silent worker was stopped before the relaunch"
    );
}

#[test]
fn a_stopped_supervisor_leaves_a_streaming_client_going_and_a_new_one_gets_one_line() {
    let env = Env::new("stuck-daemon");
    let id = env.ok(&["new"]).trim().to_string();
    let daemon = env.daemon_pid();
    let mut run = env.command(&[
        "send",
        &id,
        "--wait",
        "--",
        "sleep 1; echo finished; exit 7",
    ]);
    // The run's client was handed to the worker: the daemon is not on its
    // path. Stopped while the run goes on, it is not missed.
    let streaming = std::thread::spawn(move || run.output());
    wait_until(Duration::from_secs(10), "the run runs", || {
        env.session(&id)["state"] == "busy"
    });
    signal(daemon, Signal::SIGSTOP);
    let out = streaming.join().unwrap().unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "finished\n");

    let started = Instant::now();
    let refused = env.run(&["ls"]);
    let took = started.elapsed();
    signal(daemon, Signal::SIGCONT);
    eprintln!("ls against a stopped daemon answered in {took:?}");
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("accepted but did not answer within 10 s: it is stopped or wedged"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    env.ok(&["ls"]);
}

#[test]
fn a_stopped_kernel_under_a_busy_run_leaves_ls_log_and_cancel_answering_and_says_what_waits() {
    let env = Env::new("stuck-kernel");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "--", "echo started; sleep 60"]);
    wait_until(Duration::from_secs(10), "the run has started", || {
        env.log(&id).contains("started\n")
    });
    let kernel = env.kernel_pid(&id).expect("a live kernel");
    signal(kernel, Signal::SIGSTOP);

    let (_, ls) = timed(&env, &["ls"]);
    let (log, log_took) = timed(&env, &["log", &id]);
    assert!(log.contains("started\n"), "{log}");
    let (_, cancel) = timed(&env, &["cancel", &id]);
    eprintln!("stopped kernel: ls {ls:?}, log {log_took:?}, cancel {cancel:?}");
    for took in [ls, log_took, cancel] {
        assert!(took < ANSWERS_WITHIN, "took {took:?}");
    }

    let mut late = env.command(&["bash", &id, "--", "echo late"]);
    let waiting = std::thread::spawn(move || late.output());
    let silent = format!(
        "! the kernel (pid {kernel}) has not started bash 2 for 5 s: it is stopped or wedged, and bash 2 waits for it (`kill -CONT {kernel}` resumes a stopped one)"
    );
    wait_until(
        Duration::from_secs(20),
        "the worker says what waits",
        || env.log(&id).contains(&silent),
    );
    assert_eq!(env.log(&id).matches(&silent).count(), 1, "said once");
    signal(kernel, Signal::SIGCONT);
    let out = waiting.join().unwrap().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "late\n", "{out:?}");
    let log = env.log(&id);
    assert!(
        log.contains(&format!("! the kernel (pid {kernel}) answers again after")),
        "{log}"
    );
    // The cancel asked while it was stopped takes effect once it runs.
    wait_until(Duration::from_secs(20), "the cancelled run ends", || {
        env.session(&id)["state"] == "idle"
    });
}

#[test]
fn a_full_state_disk_during_adoption_freezes_nothing_and_a_session_comes_back_with_room() {
    let env = Env::new("stuck-full-disk");
    let Some(disk) = crate::support::small_disk::for_test(&env.dir.join("state")) else {
        return;
    };
    let env = env.with("EUKHE_STATE_DIR", &disk.path.display().to_string());
    let busy = env.ok(&["new", "--name", "a"]).trim().to_string();
    let other = env.ok(&["new", "--name", "b"]).trim().to_string();
    env.ok(&["send", &busy, "--", "sleep 3; echo run done"]);
    let worker = env.worker_pid(&busy).expect("a's worker");
    kill_daemon(&env);
    kill9(worker);
    let filler = crate::support::small_disk::fill(&disk);

    let started = Instant::now();
    let listed = env.run(&["ls"]);
    let ls = started.elapsed();
    let started = Instant::now();
    let asked = env.run(&["bash", &other, "--", "echo b answers"]);
    let bash = started.elapsed();
    eprintln!("full state disk at daemon start: ls {ls:?}, bash on another session {bash:?}");
    assert!(listed.status.success(), "{listed:?}");
    assert!(ls < ANSWERS_WITHIN, "ls took {ls:?}");
    assert!(bash < ANSWERS_WITHIN, "bash took {bash:?}");
    // On a full disk the command runs, or cannot start (126: no room for
    // its scratch files, and the transcript says why), or runs and its
    // output finds no room (125, said in one line).
    match asked.status.code() {
        Some(0) => assert_eq!(String::from_utf8_lossy(&asked.stdout), "b answers\n"),
        Some(126) => assert!(
            env.log(&other).contains("bash 1 did not start: "),
            "{asked:?}"
        ),
        // It ran, and its output found no room: said in one line.
        Some(125) => {
            let said = String::from_utf8_lossy(&asked.stderr);
            assert_eq!(said.lines().count(), 1, "{said}");
            assert!(said.contains("No space left on device"), "{said}");
        }
        _ => panic!("{asked:?}"),
    }

    std::fs::remove_file(filler).unwrap();
    let (_, served) = timed(&env, &["bash", &busy, "--", "true"]);
    eprintln!("the session came back {served:?} after the disk had room");
    assert!(served < SERVED_AGAIN_WITHIN, "took {served:?}");
    wait_until(
        Duration::from_secs(20),
        "the run's end is stored once",
        || env.log(&busy).matches("run done\n").count() == 1,
    );
}
