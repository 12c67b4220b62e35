//! Waiting for input (issue 53, item 3) through the real binary: a
//! terminal run whose program is blocked reading its terminal, and quiet,
//! shows as waiting in `ls` (text and `--json`) and in `events`; keys
//! that answer it end that; a program that sleeps, or writes all the time,
//! never waits.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eukhe::laws::timing::WAITING_QUIET_MS;

use crate::support::skip::skip_unless_ci;
use crate::support::{kill9, never, wait_for, wait_until, Env};

/// Long enough for any verdict the rule reaches on a loaded machine.
const WITHIN: Duration = Duration::from_secs(20);

/// An `eukhe events --json --session ID` client, its lines collected.
struct Events {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Events {
    /// Follow `id`'s events, once the stream is known to reach this client
    /// (a rename it has seen).
    fn follow(t: &Env, id: &str) -> Events {
        let mut child = t
            .command(&["events", "--json", "--session", id])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start eukhe events");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().unwrap();
        let collected = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        let events = Events { child, lines };
        let mut round = 0;
        wait_until(WITHIN, "the events client subscribed", || {
            round += 1;
            t.ok(&["rename", id, &format!("waiting-{round}")]);
            wait_for(Duration::from_millis(200), || events.has("renamed", None))
        });
        events
    }

    /// Whether an event of `kind` (for run `input`, if given) came.
    fn has(&self, kind: &str, input: Option<u64>) -> bool {
        self.lines.lock().unwrap().iter().any(|line| {
            let event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            event["event"]["kind"] == kind
                && input.is_none_or(|input| event["event"]["input"] == input)
        })
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        kill9(self.child.id());
        let _ = self.child.wait();
    }
}

fn waiting(t: &Env, id: &str) -> bool {
    t.session(id)["waiting"] == true
}

/// The run's number `send` printed.
fn send_tty(t: &Env, id: &str, command: &str) -> u64 {
    let said = t.ok(&["send", "--tty", id, "--", command]);
    said.split(|c: char| !c.is_ascii_digit())
        .find_map(|word| word.parse().ok())
        .unwrap_or_else(|| panic!("no run number in {said:?}"))
}

#[test]
fn a_prompt_waits_for_input_until_keys_answer_it() {
    let t = Env::new("waiting-prompt");
    let id = t.new_session();
    let events = Events::follow(&t, &id);
    let run = send_tty(&t, &id, "read -p 'name? ' x; echo \"hi $x\"");
    wait_until(WITHIN, "ls --json says waiting", || waiting(&t, &id));
    let table = t.ok(&["ls"]);
    assert!(table.contains(" waiting "), "{table}");
    assert_eq!(t.session(&id)["state"], "busy", "waiting is busy");
    wait_until(WITHIN, "events carry the wait", || {
        events.has("waiting_for_input", Some(run))
    });
    t.ok(&["keys", &id, "--", "bob", "Enter"]);
    wait_until(WITHIN, "the run ended", || {
        t.log(&id).contains(&format!("[run {run} exited 0]"))
    });
    assert!(t.log(&id).contains("hi bob"), "{}", t.log(&id));
    wait_until(WITHIN, "an ended run waits for nothing", || {
        !waiting(&t, &id)
    });
    wait_until(WITHIN, "events carry the input taken", || {
        events.has("input_taken", Some(run))
    });
}

#[test]
fn a_sleeping_or_writing_program_never_waits() {
    let t = Env::new("waiting-never");
    let sleeping = t.new_session();
    let writing = t.new_session();
    send_tty(&t, &sleeping, "echo asleep; sleep 30");
    // Blocked reading its terminal, but never quiet: a helper in its group
    // writes every tenth of a second.
    send_tty(
        &t,
        &writing,
        "(while :; do echo tick; sleep 0.1; done) & echo reading; read x",
    );
    for id in [&sleeping, &writing] {
        let word = if id == &sleeping { "asleep" } else { "reading" };
        t.log_with(id, &format!("\n{word}"), WITHIN);
    }
    never(
        Duration::from_millis(3 * WAITING_QUIET_MS),
        "a sleeping or writing terminal run waited for input",
        || waiting(&t, &sleeping) || waiting(&t, &writing),
    );
    for id in [&sleeping, &writing] {
        t.ok(&["cancel", id]);
    }
}

#[test]
fn a_python_repl_at_its_prompt_waits() {
    let found = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        return skip_unless_ci("python3 is not installed");
    }
    let t = Env::new("waiting-python");
    let id = t.new_session();
    let run = send_tty(&t, &id, "python3 -q");
    wait_until(WITHIN, "the REPL waits at its prompt", || waiting(&t, &id));
    t.ok(&["keys", &id, "--", "import time; time.sleep(30)", "Enter"]);
    wait_until(WITHIN, "the REPL is busy", || !waiting(&t, &id));
    never(
        Duration::from_millis(3 * WAITING_QUIET_MS),
        "a REPL running a statement waited for input",
        || waiting(&t, &id),
    );
    t.ok(&["keys", &id, "--", "C-c"]);
    wait_until(WITHIN, "the REPL waits again", || waiting(&t, &id));
    t.ok(&["keys", &id, "--", "exit()", "Enter"]);
    wait_until(WITHIN, "the REPL ended", || {
        t.log(&id).contains(&format!("[run {run} exited 0]"))
    });
    wait_until(WITHIN, "the ended REPL waits no more", || !waiting(&t, &id));
}

#[test]
fn a_waiting_run_waits_again_after_a_worker_restart_and_its_end_clears_it() {
    let t = Env::new("waiting-restart");
    let id = t.new_session();
    let events = Events::follow(&t, &id);
    let run = send_tty(&t, &id, "read -p 'answer? ' x");
    wait_until(WITHIN, "ls --json says waiting", || waiting(&t, &id));
    let worker = t.worker_pid(&id).expect("a worker serves the session");
    kill9(worker);
    // The new worker hears from the kernel, which holds the terminal,
    // that the run still waits.
    wait_until(WITHIN, "a new worker says the run waits", || {
        t.worker_pid(&id).is_some_and(|pid| pid != worker) && waiting(&t, &id)
    });
    t.ok(&["cancel", &id]);
    wait_until(WITHIN, "the cancelled run waits no more", || {
        !waiting(&t, &id) && t.session(&id)["state"] == "idle"
    });
    wait_until(WITHIN, "events carry the input taken", || {
        events.has("input_taken", Some(run))
    });
}
