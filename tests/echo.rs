//! Small output (a keystroke's echo) travels from the kernel to the worker
//! inline, large output through the spool file: a run whose output mixes
//! both reaches its client and the transcript exactly once and in order,
//! across a worker restart too.

use std::time::Duration;

use crate::support::{kill9, wait_for, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(30);

/// Shell text writing `k<first>.` to `k<last>.` one write at a time, a
/// pause after each when `paced` (each its own small record).
fn counted(first: u32, last: u32, paced: bool) -> String {
    let pause = if paced { "; sleep 0.005" } else { "" };
    format!("for i in $(seq {first} {last}); do printf 'k%d.' $i{pause}; done")
}

/// What `counted` writes.
fn counted_text(first: u32, last: u32) -> String {
    (first..=last).map(|i| format!("k{i}.")).collect()
}

/// Shell text writing `len` bytes of `letter` at once (large records).
fn block(letter: char, len: usize) -> String {
    format!("head -c {len} /dev/zero | tr '\\0' {letter}")
}

/// `text` near where it first differs from `other`.
fn around<'a>(text: &'a str, other: &str) -> &'a str {
    let at = text
        .bytes()
        .zip(other.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    &text[at.saturating_sub(20)..(at + 60).min(text.len())]
}

/// The terminal's output processing off (`-opost`): what the program
/// writes is what the terminal gives, so the expected bytes are exact.
const PLAIN: &str = "stty -opost";

#[test]
fn small_and_large_terminal_output_reach_the_client_exactly_once_in_order() {
    let t = Env::new("echo-mixed-client");
    let id = t.new_session();
    let command = [
        PLAIN.to_string(),
        counted(1, 40, true),
        block('y', 60_000),
        counted(41, 80, false),
        counted(81, 120, true),
    ]
    .join("; ");
    let out = t.run(&["bash", "--tty", &id, "--", &command]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = [
        counted_text(1, 40),
        "y".repeat(60_000),
        counted_text(41, 120),
    ]
    .concat();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen == expected,
        "the client saw {} bytes, {} expected; first difference at {:?}",
        seen.len(),
        expected.len(),
        seen.bytes().zip(expected.bytes()).position(|(a, b)| a != b)
    );
}

#[test]
fn a_terminal_runs_transcript_holds_every_byte_once_across_a_worker_kill() {
    let t = Env::new("echo-mixed-worker-kill");
    let id = t.new_session();
    let command = [
        PLAIN.to_string(),
        counted(1, 40, true),
        block('y', 60_000),
        counted(41, 60, true),
        "echo ready-$((6*7))".to_string(),
        "read x".to_string(),
        counted(61, 100, true),
        block('z', 60_000),
        "echo done-b".to_string(),
    ]
    .join("; ");
    t.ok(&["send", "--tty", &id, "--", &command]);
    // Its output, not its command line, says it.
    t.log_with(&id, "ready-42", WITHIN);
    let worker = t.worker(&id);
    kill9(worker);
    wait_until(WITHIN, "a new worker serves", || {
        t.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    t.worker(&id);
    let typed = wait_for(WITHIN, || {
        t.run(&["keys", &id, "--", "go\r"]).status.success()
    });
    assert!(typed, "`eukhe keys` never succeeded");
    t.log_with(&id, "[run 1 exited 0]", WITHIN);
    let raw = t.run(&["log", &id, "--raw", "1"]).stdout;
    // The typed line's echo (its return read as a newline) sits between.
    let expected = [
        counted_text(1, 40),
        "y".repeat(60_000),
        counted_text(41, 60),
        "ready-42\ngo\n".to_string(),
        counted_text(61, 100),
        "z".repeat(60_000),
        "done-b\n".to_string(),
    ]
    .concat();
    let raw = String::from_utf8_lossy(&raw);
    assert!(
        raw == expected,
        "log --raw has {} bytes, {} expected; they differ from {:?}:\n{:?}\n{:?}",
        raw.len(),
        expected.len(),
        raw.bytes().zip(expected.bytes()).position(|(a, b)| a != b),
        around(&raw, &expected),
        around(&expected, &raw),
    );
}
