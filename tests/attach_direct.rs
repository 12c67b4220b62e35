//! An attached client's keys go straight to the kernel that holds the
//! run's terminal (issue 53, keystroke echo), in a real terminal: tmux is
//! the person's terminal (`support::terminal`). The worker is not on the
//! keys' way: they reach the program while it is stopped; a kernel's
//! death still interrupts the run once and the attach says so; several
//! attached clients type into one run and each sees every byte.

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::process::signal;
use crate::support::terminal::{start_run, Terminal};
use crate::support::{kill9, wait_for, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(20);

/// The width of session `a`'s terminal, as its screen says.
fn cols(env: &Env) -> serde_json::Value {
    let out = env.ok(&["screen", "a", "--json"]);
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["cols"].clone()
}

/// A stopped process, continued however the test ends.
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        signal(pid, Signal::SIGSTOP);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, Signal::SIGCONT);
    }
}

/// A command that says `ready`, then writes the first line it reads to
/// `file` (without its newline).
fn writes_first_line(file: &Path) -> String {
    format!(
        "echo ready; read x; printf '%s' \"$x\" > '{}'",
        file.display()
    )
}

/// Wait until `terminal` shows the run's `ready`.
fn wait_ready(terminal: &Terminal) {
    terminal.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
}

/// Type `text` and Enter.
fn type_line(terminal: &Terminal, text: &str) {
    terminal.type_text(text);
    terminal.keys(&["Enter"]);
}

/// With session `id`'s worker stopped, a line typed into `terminal`
/// reaches the program, which writes it to `file`; the worker stays
/// stopped until the returned guard is dropped.
fn typed_with_the_worker_stopped(env: &Env, id: &str, terminal: &Terminal, file: &Path) -> Stopped {
    let worker = Stopped::stop(env.worker(id));
    type_line(terminal, "straight");
    let mut seen = String::new();
    let written = wait_for(WITHIN, || {
        seen = std::fs::read_to_string(file).unwrap_or_default();
        seen == "straight"
    });
    assert!(
        written,
        "the keys did not reach the program with its worker stopped: {seen:?}"
    );
    worker
}

#[test]
fn attached_keys_reach_the_program_while_the_worker_is_stopped() {
    let env = Env::new("attach-direct-stopped");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let file = env.dir.join("typed.txt");
    let command = writes_first_line(&file) + "; read y; echo \"then $y\"";
    start_run(&env, "a", &command, "ready");
    let Some(terminal) = Terminal::attach(&env, "a", (24, 90), &[]) else {
        return;
    };
    wait_ready(&terminal);
    wait_until(WITHIN, "the attach's width", || cols(&env) == 90);

    drop(typed_with_the_worker_stopped(&env, &id, &terminal, &file));
    // The worker, going on, got every byte: the echo reaches the screen.
    terminal.wait_screen(WITHIN, "the echo", |s| s.contains("straight"));
    type_line(&terminal, "done");
    terminal.wait_screen(WITHIN, "the end", |s| s.contains("run 1 exited 0"));
    assert!(
        terminal.screen().contains("then done"),
        "{}",
        terminal.screen()
    );
}

#[test]
fn an_attached_run_whose_kernel_dies_is_interrupted_once_and_the_attach_says_so() {
    let env = Env::new("attach-direct-kernel");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    start_run(
        &env,
        "a",
        "trap '' HUP; echo ready; while read x; do echo \"got $x\"; done",
        "ready",
    );
    let Some(terminal) = Terminal::attach(&env, "a", (24, 90), &[]) else {
        return;
    };
    wait_ready(&terminal);
    type_line(&terminal, "one");
    terminal.wait_screen(WITHIN, "the answer", |s| s.contains("got one"));
    kill9(env.kernel(&id).pid);
    type_line(&terminal, "two");
    terminal.wait_screen(WITHIN, "the attach's end", |s| {
        s.contains("run 1 was cut short: the kernel running it is gone")
    });
    assert_eq!(
        terminal.wait_exit(WITHIN, "the attach"),
        Some(0),
        "{}",
        terminal.screen()
    );
    let log = env.log_with(&id, "[run 1 interrupted]", WITHIN);
    assert_eq!(log.matches("interrupted").count(), 1, "{log}");
}

#[test]
fn two_attached_clients_type_into_one_run_and_each_sees_every_byte() {
    let env = Env::new("attach-direct-two");
    env.ok(&["new", "--name", "a"]);
    start_run(
        &env,
        "a",
        "echo ready; read x; echo \"got $x\"; read y; echo \"then $y\"",
        "ready",
    );
    let Some(first) = Terminal::attach(&env, "a", (24, 90), &[]) else {
        return;
    };
    wait_ready(&first);
    let Some(second) = Terminal::attach(&env, "a", (30, 100), &[]) else {
        return;
    };
    wait_ready(&second);
    wait_until(WITHIN, "the last attach's width", || cols(&env) == 100);
    // The first types: the terminal takes its size before its keys.
    type_line(&first, "one");
    for terminal in [&first, &second] {
        terminal.wait_screen(WITHIN, "the first's answer", |s| s.contains("got one"));
    }
    assert_eq!(cols(&env), 90);
    type_line(&second, "two");
    for terminal in [&first, &second] {
        terminal.wait_screen(WITHIN, "the end", |s| s.contains("run 1 exited 0"));
        let screen = terminal.screen();
        for line in ["ready", "one", "got one", "two", "then two"] {
            assert!(screen.contains(line), "{line:?} missing:\n{screen}");
        }
    }
    assert_eq!(cols(&env), 100);
}

#[test]
fn a_bash_tty_clients_keys_reach_the_program_while_the_worker_is_stopped() {
    let env = Env::new("attach-direct-bash-tty");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let file = env.dir.join("typed.txt");
    let command = writes_first_line(&file);
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let Some(terminal) =
        Terminal::open(&env, 24, 90, &[eukhe, "bash", "--tty", "a", "--", &command])
    else {
        return;
    };
    wait_ready(&terminal);
    drop(typed_with_the_worker_stopped(&env, &id, &terminal, &file));
    assert_eq!(
        terminal.wait_exit(WITHIN, "the client"),
        Some(0),
        "{}",
        terminal.screen()
    );
}
