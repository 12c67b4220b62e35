//! `eukhe bash --tty` from a terminal gets its command's output on two
//! paths at once, as an attach does (issue 53): the worker's, and the
//! kernel's own echo on the typist's connection, merged by spool offset.
//! In a real terminal (tmux), with `script` recording exactly what the
//! client wrote, every byte arrives once and in order: with both paths
//! running, and with the worker stopped (the kernel's path goes on, and
//! the worker catching up repeats nothing).

use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::Signal;

use crate::attach_echo::{count, find, recorded, wait_recorded, written_once, Stopped, WITHIN};
use crate::support::process::signal;
use crate::support::terminal::Terminal;
use crate::support::{skip, Env};

/// `eukhe bash --tty a -- COMMAND` in a terminal, recorded by `script` to
/// the returned file, once it shows `ready`.
fn bash_recorded(env: &Env, command: &str) -> Option<(Terminal, PathBuf)> {
    if Command::new("script").arg("--version").output().is_err() {
        skip::skip_unless_ci("script (util-linux) is not installed");
        return None;
    }
    let record = env.dir.join("bash.typescript");
    let bash = format!(
        "{} bash --tty a -- '{command}'",
        env!("CARGO_BIN_EXE_eukhe")
    );
    let record_arg = record.display().to_string();
    let argv = ["script", "-q", "-f", "-c", &bash, &record_arg];
    let terminal = Terminal::open(env, 24, 100, &argv)?;
    wait_recorded(&record, "ready", "the command's first line");
    Some((terminal, record))
}

/// The command's stored output from the line typed as `from` through
/// `to`, exactly as the transcript holds it.
fn stored_between(env: &Env, from: &str, to: &str) -> Vec<u8> {
    let out = env.run(&["log", "a", "--raw", "1"]).stdout;
    let start = find(&out, from.as_bytes()).expect("the typed line is stored");
    let end = find(&out, to.as_bytes()).expect("the last line is stored") + to.len();
    out[start..end].to_vec()
}

/// Type `text` and Enter.
fn type_line(terminal: &Terminal, text: &str) {
    terminal.type_text(text);
    terminal.keys(&["Enter"]);
}

/// Type `more` and wait for its answer; then every byte from the line
/// typed as `go` through the answer was written once, in order.
fn answered_and_written_once(env: &Env, terminal: &Terminal, record: &Path) {
    type_line(terminal, "more");
    wait_recorded(record, "got more\r\n", "the answer");
    written_once(record, &stored_between(env, "go\r\n", "got more\r\n"));
}

#[test]
fn a_large_output_through_bash_tty_is_written_once_in_order() {
    let env = Env::new("bash-tty-echo-large");
    env.ok(&["new", "--name", "a"]);
    let command =
        "echo ready; read go; seq 1 20000; echo END; read more; echo \"got $more\"; read x";
    let Some((terminal, record)) = bash_recorded(&env, command) else {
        return;
    };
    type_line(&terminal, "go");
    wait_recorded(&record, "END\r\n", "the output's end");
    answered_and_written_once(&env, &terminal, &record);
    assert_eq!(count(&recorded(&record), b"\r\n12345\r\n"), 1);
}

#[test]
fn with_the_worker_stopped_bash_tty_output_arrives_and_the_worker_repeats_nothing() {
    let env = Env::new("bash-tty-echo-stopped");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let command = "echo ready; read a; echo \"first $a\"; read go; seq 1 200; echo END; \
                   read more; echo \"got $more\"; read x";
    let Some((terminal, record)) = bash_recorded(&env, command) else {
        return;
    };
    // A line answered: the client reads its keys, so its typist's
    // connection is open.
    type_line(&terminal, "a");
    wait_recorded(&record, "first a\r\n", "the first answer");
    let worker = env.worker(&id);
    signal(worker, Signal::SIGSTOP);
    let stopped = Stopped(worker);
    type_line(&terminal, "go");
    // Neither the keys nor their output wait for the worker.
    wait_recorded(&record, "END\r\n", "the output with its worker stopped");
    drop(stopped);
    answered_and_written_once(&env, &terminal, &record);
    terminal.wait_screen(WITHIN, "the answer", |s| {
        s.matches("got more").count() == 1 && s.contains("199\n200\nEND")
    });
}
