//! `attach`: it replays then follows, typed lines are input, and it follows
//! a kernel restart or a lost supervisor.

use std::time::{Duration, Instant};

use crate::support::process::Signal;
use crate::support::{alive, kill9, signal, wait_until, Env};

/// An attached client on its own thread, with its output lines in a channel.
struct Attached {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
    /// Where its standard error goes.
    errors: std::path::PathBuf,
}

impl Attached {
    fn start(env: &Env, id: &str) -> Attached {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let errors = env
            .dir
            .join(format!("attach-{}.err", crate::support::unique()));
        let mut child = env
            .command(&["attach", id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&errors).unwrap())
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
            errors,
        }
    }

    /// Its exit status once it ended by itself within `within`.
    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let mut status = None;
        let ended = crate::support::wait_for(within, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        assert!(ended, "the attach did not end; it said {:?}", self.said());
        status.unwrap()
    }

    /// What it wrote on standard error.
    fn said(&self) -> String {
        std::fs::read_to_string(&self.errors).unwrap_or_default()
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
fn a_deliberate_shutdown_is_not_undone_by_an_attached_client() {
    let env = Env::new("attach-shut");
    let id = env.ok(&["new"]).trim().to_string();
    let mut attached = Attached::start(&env, &id);
    env.ok(&["bash", &id, "--", "echo hello"]);
    attached.expect("hello");
    env.ok(&["shutdown", "--force"]);
    // It detaches saying why (a client relaunching the daemon would stay).
    let status = attached.wait_exit(Duration::from_secs(30));
    let said = attached.said();
    assert!(
        said.contains(&format!(
            "eukhe: the daemon was shut down (`eukhe shutdown`); detached from {id} (`eukhe attach {id}` starts it again)"
        )),
        "{said}"
    );
    assert_eq!(status.code(), Some(125), "{said}");
    env.stays_shut_down();
}
