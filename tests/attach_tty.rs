//! `eukhe attach` onto a terminal run (issue 53, item 2), in a real
//! terminal: tmux is the person's terminal (`support::terminal`), its keys
//! typed with `send-keys`, its screen read with `capture-pane`. The
//! programs run on the session's terminal with `TERM=screen`, the outer
//! tmux's own kind.

use std::path::Path;
use std::time::Duration;

use crate::support::terminal::{start_run, Terminal};
use crate::support::{kill9, never, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(20);

/// vim on `file`, no settings of the user's, no swap file.
fn vim(file: &Path) -> String {
    format!("TERM=screen vim -u NONE -N -n -i NONE '{}'", file.display())
}

/// The attach ended with status 0, having said `words`.
fn left(terminal: &Terminal, words: &str) {
    let ended = terminal.wait_exit(WITHIN, "the attach");
    assert_eq!(ended, Some(0), "{}", terminal.screen());
    assert!(terminal.screen().contains(words), "{}", terminal.screen());
    let modes = terminal.modes_after();
    assert!(
        modes.split_whitespace().any(|w| w == "icanon"),
        "the terminal was left raw: {modes}"
    );
}

#[test]
fn attach_shows_vim_as_it_is_and_an_edit_goes_on_across_a_detach() {
    let env = Env::new("attach-tty-vim");
    env.ok(&["new", "--name", "a"]);
    let file = env.dir.join("notes.txt");
    std::fs::write(&file, "first line\n").unwrap();
    start_run(&env, "a", &vim(&file), "first line");
    let Some(terminal) = Terminal::attach(&env, "a", (24, 80), &[]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "vim's screen", |s| {
        s.contains("first line") && s.contains('~')
    });
    assert!(!terminal.screen().contains("attached to"), "the line view");
    terminal.type_text("osecond line");
    terminal.keys(&["Escape"]);
    terminal.wait_screen(WITHIN, "the edit", |s| s.contains("second line"));
    terminal.keys(&["C-\\"]);
    left(&terminal, "detached");

    let Some(again) = Terminal::attach(&env, "a", (24, 80), &[]) else {
        return;
    };
    again.wait_screen(WITHIN, "the same screen", |s| {
        s.contains("first line\nsecond line") && s.contains('~')
    });
    again.type_text("othird line");
    again.keys(&["Escape"]);
    again.type_text(":wq");
    again.keys(&["Enter"]);
    left(&again, "run 1 exited 0");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "first line\nsecond line\nthird line\n"
    );
}

#[test]
fn less_pages_and_quits_through_attach() {
    let env = Env::new("attach-tty-less");
    env.ok(&["new", "--name", "a"]);
    let file = env.dir.join("lines.txt");
    let text: String = (1..=100).map(|n| format!("line-{n}\n")).collect();
    std::fs::write(&file, text).unwrap();
    start_run(
        &env,
        "a",
        &format!("TERM=screen less '{}'", file.display()),
        "line-1\n",
    );
    let Some(terminal) = Terminal::attach(&env, "a", (24, 80), &[]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the first page", |s| {
        s.contains("line-1\n") && !s.contains("line-40")
    });
    terminal.keys(&["Space"]);
    terminal.wait_screen(WITHIN, "the next page", |s| {
        s.contains("line-40") && !s.contains("line-1\n")
    });
    terminal.keys(&["q"]);
    left(&terminal, "run 1 exited 0");
}

#[test]
fn two_attaches_see_one_screen_and_a_read_only_one_writes_nothing() {
    let env = Env::new("attach-tty-two");
    env.ok(&["new", "--name", "a"]);
    start_run(
        &env,
        "a",
        "echo ready; read x; echo \"got $x\"; read y; echo \"then $y\"",
        "ready",
    );
    let Some(writer) = Terminal::attach(&env, "a", (24, 90), &[]) else {
        return;
    };
    writer.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    let Some(reader) = Terminal::attach(&env, "a", (30, 100), &["--read-only"]) else {
        return;
    };
    reader.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    // The terminal took the size of the attach that may write, not the
    // read-only one's.
    let cols = || {
        let out = env.ok(&["screen", "a", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["cols"].clone()
    };
    wait_until(WITHIN, "the writer's width", || cols() == 90);
    reader.type_text("from-the-reader");
    reader.keys(&["Enter"]);
    never(
        Duration::from_secs(2),
        "a read-only attach's keys arrive",
        || env.ok(&["screen", "a"]).contains("from-the-reader") || cols() != 90,
    );
    writer.type_text("one");
    writer.keys(&["Enter"]);
    writer.wait_screen(WITHIN, "the answer", |s| s.contains("got one"));
    reader.wait_screen(WITHIN, "the answer", |s| s.contains("got one"));
    assert!(!reader.screen().contains("from-the-reader"));
    writer.type_text("two");
    writer.keys(&["Enter"]);
    left(&writer, "run 1 exited 0");
    left(&reader, "run 1 exited 0");
    assert!(reader.screen().contains("then two"), "{}", reader.screen());
}

#[test]
fn an_attach_to_vim_rides_through_a_sigkilled_worker_and_daemon() {
    let env = Env::new("attach-tty-crash");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let file = env.dir.join("notes.txt");
    std::fs::write(&file, "first line\n").unwrap();
    start_run(&env, "a", &vim(&file), "first line");
    let Some(terminal) = Terminal::attach(&env, "a", (24, 100), &[]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "vim's screen", |s| s.contains("first line"));
    let cols = || {
        let out = env.ok(&["screen", "a", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["cols"].clone()
    };
    wait_until(WITHIN, "the attach's width", || cols() == 100);

    let worker = env.worker(&id);
    kill9(worker);
    wait_until(WITHIN, "a new worker serves", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
            && env.run(&["screen", "a"]).status.success()
    });
    // The attach is painted again from the new worker's screen, then keys
    // reach vim through it.
    terminal.type_text("oafter the worker");
    terminal.keys(&["Escape"]);
    terminal.wait_screen(WITHIN, "the edit", |s| s.contains("after the worker"));
    // The new worker rebuilt the screen at the run's first size; the
    // attach that typed gave it its own again.
    assert_eq!(cols(), 100);

    kill9(env.daemon());
    terminal.type_text("oafter the daemon");
    terminal.keys(&["Escape"]);
    terminal.wait_screen(WITHIN, "the edit", |s| s.contains("after the daemon"));
    terminal.type_text(":wq");
    terminal.keys(&["Enter"]);
    left(&terminal, "run 1 exited 0");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "first line\nafter the worker\nafter the daemon\n"
    );
}

#[test]
fn the_terminal_takes_the_size_of_the_client_that_attached_or_typed_last() {
    let env = Env::new("attach-tty-size");
    env.ok(&["new", "--name", "a"]);
    start_run(
        &env,
        "a",
        "echo ready; while read x; do echo \"cols $(tput cols)\"; done",
        "ready",
    );
    let cols = || {
        let out = env.ok(&["screen", "a", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["cols"].clone()
    };
    let Some(narrow) = Terminal::attach(&env, "a", (24, 90), &[]) else {
        return;
    };
    narrow.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    wait_until(WITHIN, "the first attach's width", || cols() == 90);
    let Some(wide) = Terminal::attach(&env, "a", (24, 120), &[]) else {
        return;
    };
    wide.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    wait_until(WITHIN, "the last attach's width", || cols() == 120);
    // Typing makes the typist's window the terminal's size, before the
    // program reads what was typed.
    narrow.keys(&["Enter"]);
    narrow.wait_screen(WITHIN, "the program's width", |s| s.contains("cols 90"));
    assert_eq!(cols(), 90);
    wide.keys(&["Enter"]);
    wide.wait_screen(WITHIN, "the program's width", |s| s.contains("cols 120"));
    narrow.keys(&["C-\\"]);
    left(&narrow, "detached");
    wide.keys(&["C-d"]);
    left(&wide, "run 1 exited 0");
}

#[test]
fn a_forced_shutdown_ends_the_attach_and_no_daemon_comes_back() {
    let env = Env::new("attach-tty-shut");
    env.ok(&["new", "--name", "a"]);
    start_run(&env, "a", "echo ready; read x", "ready");
    let Some(terminal) = Terminal::attach(&env, "a", (24, 120), &[]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    env.ok(&["shutdown", "--force"]);
    let ended = terminal.wait_exit(WITHIN, "the attach");
    let screen = terminal.screen();
    assert!(
        screen.contains(
            "eukhe: the daemon was shut down (`eukhe shutdown`); detached from a (`eukhe attach a` starts it again)"
        ),
        "{screen}"
    );
    assert_eq!(ended, Some(125), "{screen}");
    let modes = terminal.modes_after();
    assert!(
        modes.split_whitespace().any(|w| w == "icanon"),
        "the terminal was left raw: {modes}"
    );
    env.stays_shut_down();
}

#[test]
fn after_a_shutdown_of_the_daemon_alone_the_attach_goes_on_through_its_worker() {
    let env = Env::new("attach-tty-shut-alone");
    env.ok(&["new", "--name", "a"]);
    start_run(&env, "a", "echo ready; read x; echo \"got $x\"", "ready");
    let Some(terminal) = Terminal::attach(&env, "a", (24, 100), &[]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the run", |s| s.contains("ready"));
    let daemon = env.daemon_pid();
    env.ok(&["shutdown"]);
    let socket = env.dir.join("run/eukhe.sock");
    wait_until(WITHIN, "the daemon ends", || !crate::support::alive(daemon));
    never(
        Duration::from_secs(3),
        "a daemon serves the socket again",
        || std::os::unix::net::UnixStream::connect(&socket).is_ok(),
    );
    terminal.type_text("hello");
    terminal.keys(&["Enter"]);
    left(&terminal, "got hello");
    left(&terminal, "run 1 exited 0");
    assert!(
        std::os::unix::net::UnixStream::connect(&socket).is_err(),
        "no daemon was started again"
    );
}
