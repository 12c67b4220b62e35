//! `eukhe attach S --shell` in a real terminal (tmux, `support::terminal`):
//! an interactive bash whose typed commands are recorded, and whose state
//! is the session's.

use std::time::Duration;

use crate::support::terminal::Terminal;
use crate::support::Env;

const WITHIN: Duration = Duration::from_secs(20);

/// The prompt the session's shell state gives the interactive shell.
const PROMPT: &str = "sh> ";

/// A session `a` whose prompt is [`PROMPT`], and a terminal attached to
/// its shell (None: no tmux, the test said why).
fn attached(env: &Env) -> Option<(Terminal, String)> {
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    // Its history goes in the test's directory, not the user's.
    let history = env.dir.join("history");
    let state = format!("PS1='{PROMPT}'; HISTFILE='{}'", history.display());
    env.ok(&["bash", "a", "--", &state]);
    Some((attach_again(env)?, id))
}

fn attach_again(env: &Env) -> Option<Terminal> {
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let terminal = Terminal::open(env, 24, 80, &[eukhe, "attach", "a", "--shell"])?;
    terminal.wait_screen(WITHIN, "the shell's prompt", |s| prompts(s) >= 1);
    Some(terminal)
}

fn prompts(screen: &str) -> usize {
    screen
        .lines()
        .filter(|l| l.starts_with(PROMPT.trim_end()))
        .count()
}

/// Type `line` and Enter, and wait for the next prompt.
fn typed(terminal: &Terminal, line: &str) {
    let before = prompts(&terminal.screen());
    terminal.type_text(line);
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, &format!("the prompt after `{line}`"), |s| {
        prompts(s) > before
    });
}

fn ended_with(terminal: &Terminal, status: i32) {
    let ended = terminal.wait_exit(WITHIN, "the client");
    assert_eq!(ended, Some(status), "{}", terminal.screen());
}

/// The commands `log --json` shows typed in shell run `a`'s shell: each
/// text with its status once ended.
fn typed_commands(env: &Env) -> Vec<(String, Option<i64>)> {
    let log: serde_json::Value = serde_json::from_str(&env.ok(&["log", "a", "--json"])).unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "shell_command")
        .map(|e| {
            (
                e["text"].as_str().unwrap().to_string(),
                e["status"].as_i64(),
            )
        })
        .collect()
}

/// The output `log --json` shows between typed command `text`'s start
/// and its end.
fn output_of(env: &Env, text: &str) -> String {
    let log: serde_json::Value = serde_json::from_str(&env.ok(&["log", "a", "--json"])).unwrap();
    let mut output = String::new();
    let mut inside = false;
    for entry in log.as_array().unwrap() {
        if entry["kind"] == "shell_command" && entry["text"] == text {
            inside = entry["status"].is_null();
        } else if inside && entry["kind"] == "output" {
            output += entry["text"].as_str().unwrap();
        }
    }
    output
}

fn ended(commands: &[(String, Option<i64>)]) -> Vec<(&str, i64)> {
    commands
        .iter()
        .filter_map(|(text, status)| Some((text.as_str(), (*status)?)))
        .collect()
}

#[test]
fn commands_typed_in_the_shell_are_recorded_and_what_they_change_is_kept() {
    let env = Env::new("shell-attach-state");
    let Some((terminal, _)) = attached(&env) else {
        return;
    };
    typed(&terminal, "cd /tmp");
    typed(&terminal, "export X=1");
    typed(&terminal, "f() { echo f; }");
    typed(&terminal, "false");
    typed(&terminal, "echo out-$((1+1))");
    terminal.type_text("exit");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 0);
    let out = env.ok(&["bash", "a", "--", "pwd; echo $X; f"]);
    assert_eq!(out, "/tmp\n1\nf\n");
    let commands = typed_commands(&env);
    assert_eq!(
        ended(&commands),
        [
            ("cd /tmp", 0),
            ("export X=1", 0),
            ("f() { echo f; }", 0),
            ("false", 1),
            ("echo out-$((1+1))", 0),
            // The line that leaves is recorded as ended too.
            ("exit", 0)
        ],
        "{commands:?}"
    );
    assert_eq!(output_of(&env, "echo out-$((1+1))"), "out-2\r\n");
    // Each command's start comes before its end, with its output between.
    let log = env.ok(&["log", "a"]);
    assert!(log.contains("$ false"), "{log}");
    assert!(log.contains("shell: exited 1]"), "{log}");
    assert!(
        !log.contains("__eukhe"),
        "eukhe's own words never show: {log}"
    );
}

#[test]
fn a_detached_shell_goes_on_and_its_state_is_kept_before_it_ends() {
    let env = Env::new("shell-attach-detach");
    let Some((terminal, id)) = attached(&env) else {
        return;
    };
    typed(&terminal, "cd /tmp");
    terminal.keys(&["C-\\"]);
    ended_with(&terminal, 0);
    // The shell still runs, and the directory it entered is the session's.
    assert_eq!(env.session(&id)["state"], "busy", "the shell goes on");
    assert_eq!(env.ok(&["bash", "a", "--", "pwd"]), "/tmp\n");
    drop(terminal);
    let Some(terminal) = attach_again(&env) else {
        return;
    };
    terminal.type_text("echo again-$((2+3))");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the same shell answering", |s| {
        s.contains("again-5")
    });
    terminal.type_text("exit");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 0);
    let runs: Vec<_> = typed_commands(&env);
    assert!(
        ended(&runs).contains(&("echo again-$((2+3))", 0)),
        "one shell run took both: {runs:?}"
    );
}

#[test]
fn ctrl_c_ends_the_command_typed_and_the_shell_goes_on() {
    let env = Env::new("shell-attach-ctrl-c");
    let Some((terminal, _)) = attached(&env) else {
        return;
    };
    terminal.type_text("sleep 100");
    terminal.keys(&["Enter"]);
    crate::support::wait_until(WITHIN, "the sleep started", || {
        typed_commands(&env).contains(&("sleep 100".to_string(), None))
    });
    terminal.keys(&["C-c"]);
    crate::support::wait_until(WITHIN, "the sleep's end recorded", || {
        ended(&typed_commands(&env)).contains(&("sleep 100", 130))
    });
    typed(&terminal, "echo still-$((40+2))");
    assert!(terminal.screen().contains("still-42"));
    terminal.keys(&["C-d"]);
    ended_with(&terminal, 0);
}

#[test]
fn the_shell_answers_after_its_worker_is_killed_at_the_prompt() {
    let env = Env::new("shell-attach-worker-kill");
    let Some((terminal, id)) = attached(&env) else {
        return;
    };
    typed(&terminal, "Y=5");
    let worker = env.session(&id)["pid"].as_u64().unwrap() as u32;
    crate::support::kill9(worker);
    crate::support::wait_until(WITHIN, "a new worker", || {
        env.session(&id)["pid"]
            .as_u64()
            .is_some_and(|pid| pid as u32 != worker)
    });
    // Through the client that rode through the worker's loss, then
    // through a new attach.
    typed(&terminal, "echo y-$((Y+1))");
    assert!(terminal.screen().contains("y-6"));
    terminal.keys(&["C-\\"]);
    ended_with(&terminal, 0);
    drop(terminal);
    let Some(terminal) = attach_again(&env) else {
        return;
    };
    terminal.type_text("echo z-$((Y+2))");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the shell answering", |s| s.contains("z-7"));
    terminal.type_text("exit");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 0);
    assert_eq!(env.ok(&["bash", "a", "--", "echo $Y"]), "5\n");
}

#[test]
fn what_a_line_that_exits_changes_is_kept() {
    let env = Env::new("shell-attach-exit-line");
    let Some((terminal, _)) = attached(&env) else {
        return;
    };
    typed(&terminal, "(cd /; exit 3)");
    terminal.type_text("cd /tmp; export Z=9; exit 4");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 0);
    // The line's changes are the session's; the subshell's exit saved
    // nothing of its own.
    assert_eq!(env.ok(&["bash", "a", "--", "pwd; echo $Z"]), "/tmp\n9\n");
    let commands = typed_commands(&env);
    assert!(
        ended(&commands).contains(&("(cd /; exit 3)", 3)),
        "{commands:?}"
    );
    assert!(
        ended(&commands).contains(&("cd /tmp; export Z=9; exit 4", 4)),
        "the exiting line is recorded as ended: {commands:?}"
    );
    // `exit` stays a builtin for later commands: no function of eukhe's.
    assert_eq!(env.ok(&["bash", "a", "--", "type -t exit"]), "builtin\n");
}
