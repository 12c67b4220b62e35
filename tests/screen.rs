//! `eukhe screen` (issue 53, item 3) through the real binary: the worker
//! keeps the screen of a terminal run, shows it as text or JSON, keeps the
//! last one that ended with its status, and rebuilds it after a worker
//! SIGKILL. These clients have no terminal, so the size is 24x80.

use std::time::Duration;

use serde_json::Value;

use crate::support::{kill9, wait_for, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(20);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `eukhe screen ID --json`, once `shows` holds of it (retried while a
/// worker restarts or the run has not drawn yet).
fn screen_until(t: &Env, id: &str, what: &str, shows: impl Fn(&Value) -> bool) -> Value {
    let mut last = String::new();
    let mut screen = Value::Null;
    let shown = wait_for(WITHIN, || {
        let out = t.run(&["screen", id, "--json"]);
        last = format!("{}{}", text(&out.stdout), text(&out.stderr));
        if !out.status.success() {
            return false;
        }
        screen = serde_json::from_slice(&out.stdout).expect("screen --json is JSON");
        shows(&screen)
    });
    assert!(shown, "the screen never showed {what}; last: {last}");
    screen
}

fn line(screen: &Value, row: usize) -> &str {
    screen["lines"][row].as_str().unwrap_or_default()
}

/// Type `keys` into the session's current terminal run, retrying while a
/// worker restarts.
fn type_keys(t: &Env, id: &str, keys: &str) {
    let typed = wait_for(WITHIN, || t.run(&["keys", id, "--", keys]).status.success());
    assert!(typed, "`eukhe keys` never succeeded");
}

#[test]
fn screen_shows_a_terminal_runs_rows_cursor_title_and_then_its_end() {
    let t = Env::new("screen-rows");
    let id = t.new_session();
    let none = t.run(&["screen", &id]);
    assert!(!none.status.success());
    let said = text(&none.stderr);
    assert!(said.contains("eukhe send --tty"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");

    t.ok(&[
        "send",
        "--tty",
        &id,
        "--",
        r"printf '\033]2;my title\007\033[2J\033[Hone\033[3;5Htwo'; read x; exit 3",
    ]);
    let screen = screen_until(&t, &id, "two on row 3", |s| line(s, 2) == "    two");
    assert_eq!(line(&screen, 0), "one");
    assert_eq!(line(&screen, 1), "");
    assert_eq!(screen["rows"], 24);
    assert_eq!(screen["cols"], 80);
    assert_eq!(screen["lines"].as_array().map(Vec::len), Some(24));
    assert_eq!(screen["cursor"]["row"], 2);
    assert_eq!(screen["cursor"]["col"], 7);
    assert_eq!(screen["title"], "my title");
    assert_eq!(screen["alternate"], false);
    assert_eq!(screen["input"], 1);
    assert!(screen.get("ended").is_none(), "{screen}");

    let shown = text(&t.run(&["screen", &id]).stdout);
    assert_eq!(
        shown,
        "one\n\n    two\n[run 1 · 80x24 · cursor row 3 column 8 · title \"my title\" · \
         main screen · running]\n"
    );

    type_keys(&t, &id, "done\r");
    let ended = screen_until(&t, &id, "the run's end", |s| s["ended"] == 3);
    assert_eq!(line(&ended, 2), "    twodone");
    assert_eq!(ended["input"], 1);
    let shown = t.ok(&["screen", &id, "1"]);
    assert!(shown.ends_with("ended with status 3]\n"), "{shown}");
    let other = t.run(&["screen", &id, "7"]);
    assert!(!other.status.success());
    assert!(text(&other.stderr).contains("input 7 has no screen"));
}

#[test]
fn screen_says_when_a_program_is_on_the_alternate_screen() {
    let t = Env::new("screen-alternate");
    let id = t.new_session();
    t.ok(&[
        "send",
        "--tty",
        &id,
        "--",
        r"echo before; printf '\033[?1049h\033[Hin alt'; read x; printf '\033[?1049l'; read y",
    ]);
    let screen = screen_until(&t, &id, "the alternate screen", |s| {
        s["alternate"] == true && line(s, 0) == "in alt"
    });
    assert!(!screen.to_string().contains("before"), "{screen}");
    type_keys(&t, &id, "\r");
    let screen = screen_until(&t, &id, "the main screen again", |s| {
        s["alternate"] == false
    });
    assert_eq!(line(&screen, 0), "before");
    type_keys(&t, &id, "\r");
    screen_until(&t, &id, "the run's end", |s| s["ended"] == 0);
}

#[test]
fn a_screen_is_the_same_after_its_worker_is_sigkilled() {
    let t = Env::new("screen-worker-kill");
    let id = t.new_session();
    t.ok(&[
        "send",
        "--tty",
        &id,
        "--",
        r"printf '\033[2J\033[Hkept\033[5;10Hrows\033[?25l'; read x; echo got $x",
    ]);
    let before = screen_until(&t, &id, "the drawing", |s| line(s, 4).ends_with("rows"));
    let worker = t.worker(&id);
    kill9(worker);
    wait_until(WITHIN, "a new worker serves", || {
        t.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    t.worker(&id);
    let after = screen_until(&t, &id, "the rebuilt drawing", |s| {
        line(s, 4).ends_with("rows")
    });
    assert_eq!(after["lines"], before["lines"]);
    assert_eq!(after["cursor"], before["cursor"]);
    assert_eq!(after["cursor"]["visible"], false);
    // The rebuilt screen goes on taking the run's output.
    type_keys(&t, &id, "yes\r");
    let ended = screen_until(&t, &id, "the run's end", |s| s["ended"] == 0);
    assert!(ended.to_string().contains("got yes"), "{ended}");
}
