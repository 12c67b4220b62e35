//! A terminal run's screen after its worker is lost (issue 53, item 5): a
//! program that was resized (vim, which draws again at the new size) is
//! rebuilt at the size its terminal has now, from the first screen request
//! after the restart, not at the size it started with. tmux is the
//! person's terminal that attaches and gives the run its size.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::terminal::Terminal;
use crate::support::{kill9, wait_for, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(20);

/// `eukhe screen a --json`, once it answers (a new worker answers once its
/// kernel link is up and the screen rebuilt).
fn screen(env: &Env) -> Value {
    let mut last = String::new();
    let mut screen = Value::Null;
    let answered = wait_for(WITHIN, || {
        let out = env.run(&["screen", "a", "--json"]);
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return false;
        }
        screen = serde_json::from_slice(&out.stdout).expect("screen --json is JSON");
        true
    });
    assert!(answered, "`eukhe screen` never answered; last: {last}");
    screen
}

/// vim on `file` as a terminal run of session `a` (24x80: queued by a
/// client without a terminal), then attached from a 30x100 terminal,
/// which makes that the terminal's size, and detached: the screen vim drew
/// again at 30x100.
fn vim_resized(env: &Env, file: &Path) -> Option<Value> {
    std::fs::write(file, "first line\nsecond line\n").unwrap();
    let vim = format!("TERM=screen vim -u NONE -N -n -i NONE '{}'", file.display());
    env.ok(&["send", "--tty", "a", "--", &vim]);
    wait_until(WITHIN, "vim's first screen", || {
        screen(env)["lines"][0] == "first line"
    });
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let terminal = Terminal::open(env, 30, 100, &[eukhe, "attach", "a"])?;
    terminal.wait_screen(WITHIN, "vim through the attach", |s| {
        s.contains("second line")
    });
    // vim's empty lines reach the 29th row: it drew at the new size.
    wait_until(WITHIN, "vim drawn again at 30x100", || {
        let now = screen(env);
        now["rows"] == 30 && now["cols"] == 100 && now["lines"][28] == "~"
    });
    terminal.keys(&["C-\\"]);
    wait_until(WITHIN, "the attach detached", || {
        terminal.exit_status().is_some()
    });
    Some(screen(env))
}

/// The screen after a restart is `before`'s: its rows, size and cursor.
fn same_screen(after: &Value, before: &Value) {
    assert_eq!(after["rows"], 30, "{after}");
    assert_eq!(after["cols"], 100, "{after}");
    assert_eq!(after["lines"], before["lines"], "{after}\n{before}");
    assert_eq!(after["cursor"], before["cursor"], "{after}\n{before}");
}

/// vim's edit goes on after the restart, and the file is saved.
fn edit_goes_on(env: &Env, file: &Path) {
    let typed = wait_for(WITHIN, || {
        env.run(&[
            "keys",
            "a",
            "--",
            "Goafter the restart",
            "Escape",
            ":wq",
            "Enter",
        ])
        .status
        .success()
    });
    assert!(typed, "`eukhe keys` never succeeded");
    wait_until(WITHIN, "vim saved and ended", || screen(env)["ended"] == 0);
    assert_eq!(
        std::fs::read_to_string(file).unwrap(),
        "first line\nsecond line\nafter the restart\n"
    );
}

#[test]
fn screen_of_a_resized_vim_is_the_same_after_its_worker_is_sigkilled() {
    let env = Env::new("screen-restart-worker");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let file = env.dir.join("notes.txt");
    let Some(before) = vim_resized(&env, &file) else {
        return;
    };
    let worker = env.worker(&id);
    kill9(worker);
    wait_until(WITHIN, "a new worker serves", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    // The first answer of the new worker is the rebuilt screen: nothing
    // new was drawn to fill it.
    same_screen(&screen(&env), &before);
    edit_goes_on(&env, &file);
}

#[test]
fn screen_of_a_resized_vim_is_the_same_after_the_daemon_and_worker_are_sigkilled() {
    let env = Env::new("screen-restart-daemon");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let file = env.dir.join("notes.txt");
    let Some(before) = vim_resized(&env, &file) else {
        return;
    };
    let worker = env.worker(&id);
    kill9(env.daemon());
    kill9(worker);
    // A client relaunches the daemon, which starts the session's worker.
    same_screen(&screen(&env), &before);
    assert_ne!(env.worker_pid(&id), Some(worker));
    edit_goes_on(&env, &file);
}
