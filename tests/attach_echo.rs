//! An attach that types gets a terminal run's output on two paths at once:
//! the worker's, and the kernel's own echo on the typist's connection
//! (issue 53). In a real terminal (tmux), with `script` recording exactly
//! what the attach wrote, every byte arrives once and in order: with both
//! paths running, with the worker stopped (the kernel's path goes on, and
//! the worker catching up repeats nothing), and with the worker killed
//! and a new one serving the run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::process::signal;
use crate::support::terminal::Terminal;
use crate::support::{kill9, skip, wait_for, wait_until, Env};

pub(crate) const WITHIN: Duration = Duration::from_secs(30);

/// A run that shows it is ready, prints `lines` numbers once it reads a
/// line, then answers one more line.
fn numbers(lines: u32) -> String {
    format!("echo ready; read go; seq 1 {lines}; echo END; read more; echo \"got $more\"; read x")
}

/// Session `a`'s new terminal run of `command`, once its screen shows
/// `ready`; then `eukhe attach a` in a terminal, recorded by `script` to
/// the returned file.
fn attach_recorded(env: &Env, command: &str) -> Option<(Terminal, PathBuf)> {
    if Command::new("script").arg("--version").output().is_err() {
        skip::skip_unless_ci("script (util-linux) is not installed");
        return None;
    }
    env.ok(&["send", "--tty", "a", "--", command]);
    wait_until(WITHIN, "the run's prompt", || {
        String::from_utf8_lossy(&env.run(&["screen", "a"]).stdout).contains("ready")
    });
    let record = env.dir.join("attach.typescript");
    let attach = format!("{} attach a", env!("CARGO_BIN_EXE_eukhe"));
    let record_arg = record.display().to_string();
    let argv = ["script", "-q", "-f", "-c", &attach, &record_arg];
    let terminal = Terminal::open(env, 24, 100, &argv)?;
    terminal.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    // The attach's typist took its window: its keys go to the kernel.
    wait_until(WITHIN, "the attach's width", || {
        let out = env.ok(&["screen", "a", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["cols"] == 100
    });
    Some((terminal, record))
}

pub(crate) fn recorded(record: &Path) -> Vec<u8> {
    std::fs::read(record).unwrap_or_default()
}

pub(crate) fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// Wait until the attach has written `text`.
pub(crate) fn wait_recorded(record: &Path, text: &str, what: &str) {
    let shown = wait_for(WITHIN, || count(&recorded(record), text.as_bytes()) > 0);
    let tail = String::from_utf8_lossy(&recorded(record))
        .chars()
        .rev()
        .take(300)
        .collect::<String>();
    assert!(
        shown,
        "the attach never wrote {what}; it wrote, last first: {tail:?}"
    );
}

/// The run's stored output from the line typed as `from` through `to`,
/// exactly as the transcript holds it.
fn stored_between(env: &Env, from: &str, to: &str) -> Vec<u8> {
    let out = env.run(&["log", "a", "--raw", "1"]).stdout;
    let start = find(&out, from.as_bytes()).expect("the typed line is stored");
    let end = find(&out, to.as_bytes()).expect("the last line is stored") + to.len();
    out[start..end].to_vec()
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The attach wrote the stored bytes `stored` once, whole and in order.
pub(crate) fn written_once(record: &Path, stored: &[u8]) {
    let written = recorded(record);
    assert_eq!(
        count(&written, stored),
        1,
        "the attach did not write the run's {} stored bytes once, in order ({} bytes written)",
        stored.len(),
        written.len()
    );
}

/// What an attach clears the terminal with before it paints a screen.
const PAINT: &[u8] = b"\x1b[?1049l\x1b[m\x1b[H\x1b[2J";

/// How many times the attach painted a worker's screen.
fn paints(record: &Path) -> usize {
    count(&recorded(record), PAINT)
}

/// A stopped process, continued however the test ends.
pub(crate) struct Stopped(pub(crate) u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, Signal::SIGCONT);
    }
}

#[test]
fn a_large_output_through_an_attach_is_written_once_in_order() {
    let env = Env::new("attach-echo-large");
    env.ok(&["new", "--name", "a"]);
    let Some((terminal, record)) = attach_recorded(&env, &numbers(20_000)) else {
        return;
    };
    terminal.type_text("go");
    terminal.keys(&["Enter"]);
    wait_recorded(&record, "END\r\n", "the output's end");
    terminal.type_text("more");
    terminal.keys(&["Enter"]);
    wait_recorded(&record, "got more\r\n", "the answer");
    written_once(&record, &stored_between(&env, "go\r\n", "got more\r\n"));
    assert_eq!(count(&recorded(&record), b"\r\n12345\r\n"), 1);
}

#[test]
fn with_the_worker_stopped_the_kernel_s_echo_arrives_and_the_worker_repeats_nothing() {
    let env = Env::new("attach-echo-stopped");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let Some((terminal, record)) = attach_recorded(&env, &numbers(200)) else {
        return;
    };
    let worker = env.worker(&id);
    signal(worker, Signal::SIGSTOP);
    let stopped = Stopped(worker);
    terminal.type_text("go");
    terminal.keys(&["Enter"]);
    // Neither the keys nor their output wait for the worker (nor for a
    // new one painting the screen again).
    wait_recorded(&record, "END\r\n", "the output with its worker stopped");
    assert_eq!(paints(&record), 1, "the output came from a new worker");
    drop(stopped);
    terminal.type_text("more");
    terminal.keys(&["Enter"]);
    wait_recorded(&record, "got more\r\n", "the answer");
    written_once(&record, &stored_between(&env, "go\r\n", "got more\r\n"));
    terminal.wait_screen(WITHIN, "the answer", |s| s.contains("got more"));
}

#[test]
fn with_the_worker_killed_the_output_arrives_and_a_new_worker_paints_it_once() {
    let env = Env::new("attach-echo-killed");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let Some((terminal, record)) = attach_recorded(&env, &numbers(200)) else {
        return;
    };
    let worker = env.worker(&id);
    // No new worker comes while the daemon is stopped.
    let daemon = env.daemon();
    signal(daemon, Signal::SIGSTOP);
    let stopped = Stopped(daemon);
    kill9(worker);
    terminal.type_text("go");
    terminal.keys(&["Enter"]);
    wait_recorded(&record, "END\r\n", "the output with its worker gone");
    assert_eq!(paints(&record), 1, "the output came from a new worker");
    drop(stopped);
    wait_until(WITHIN, "a new worker stores the output", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
            && env.run(&["screen", "a"]).status.success()
            && find(&env.run(&["log", "a", "--raw", "1"]).stdout, b"END").is_some()
    });
    written_once(&record, &stored_between(&env, "go\r\n", "END\r\n"));
    terminal.type_text("more");
    terminal.keys(&["Enter"]);
    wait_recorded(&record, "got more\r\n", "the answer");
    // Whether or not the new worker's screen was painted, what followed
    // came once.
    assert_eq!(count(&recorded(&record), b"got more"), 1);
    terminal.wait_screen(WITHIN, "the answer", |s| {
        s.matches("got more").count() == 1 && s.contains("199\n200\nEND")
    });
}
