//! Clients in a real terminal: tmux is the person's terminal
//! (`support::terminal`), its keys typed with `send-keys`, its screen read
//! with `capture-pane`.

use std::time::Duration;

use crate::support::terminal::Terminal;
use crate::support::Env;

const WITHIN: Duration = Duration::from_secs(20);

#[test]
fn attach_in_a_terminal_runs_a_typed_line_and_ctrl_d_detaches() {
    let env = Env::new("terminal-attach");
    env.ok(&["new", "--name", "a"]);
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let Some(terminal) = Terminal::open(&env, 24, 80, &[eukhe, "attach", "a"]) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the attach banner", |s| s.contains("attached to a"));
    terminal.type_text("echo typed-$((6*7))");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the run's output and end", |s| {
        s.contains("typed-42") && s.contains("[run 1 exited 0]")
    });
    terminal.keys(&["C-d"]);
    ended_with(&terminal, 0);
    let log = env.ok(&["log", "a"]);
    assert!(log.contains("typed-42"), "{log}");
}

#[test]
fn top_in_a_terminal_draws_again_at_the_new_width_when_resized() {
    let env = Env::new("terminal-top-resize");
    env.ok(&["new", "--name", "a"]);
    env.ok(&["send", "a", "echo start-$(printf '%0100d' 0)-end; sleep 60"]);
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let Some(terminal) = Terminal::open(&env, 24, 80, &[eukhe, "top"]) else {
        return;
    };
    // The session's row: the detail lines below show the command itself.
    let row = |screen: &str| {
        let line = screen.lines().find(|l| l.contains(" busy ")).unwrap_or("");
        line.to_string()
    };
    terminal.wait_screen(WITHIN, "the busy run's last output, cut", |s| {
        row(s).contains("start-0000") && !row(s).contains("-end")
    });
    terminal.resize(24, 220);
    terminal.wait_screen(WITHIN, "the whole last output", |s| {
        row(s).contains(&format!("start-{}-end", "0".repeat(100)))
    });
    terminal.keys(&["q"]);
    ended_with(&terminal, 0);
    env.ok(&["rm", "--force", "a"]);
}

/// A terminal run from a terminal: `eukhe bash --tty` in tmux.
fn tty_run(env: &Env, rows: u16, cols: u16, command: &str) -> Option<Terminal> {
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    Terminal::open(
        env,
        rows,
        cols,
        &[eukhe, "bash", "--tty", "a", "--", command],
    )
}

fn ended_with(terminal: &Terminal, status: i32) {
    let ended = terminal.wait_exit(WITHIN, "the client");
    assert_eq!(ended, Some(status), "{}", terminal.screen());
    // However the client ended, the terminal is cooked again.
    let modes = terminal.modes_after();
    for mode in ["icanon", "echo", "isig", "opost"] {
        let on = modes
            .split(|c: char| c.is_whitespace() || c == ';')
            .any(|w| w == mode);
        assert!(on, "{mode} not restored: {modes}");
    }
}

#[test]
fn a_terminal_run_answers_what_is_typed_and_follows_the_window_size() {
    let env = Env::new("terminal-tty-prompt");
    env.ok(&["new", "--name", "a"]);
    let command = "read -p 'name? ' n; echo \"hi $n\"; \
                   while read x; do [ \"$x\" = q ] && exit 3; tput cols; done";
    let Some(terminal) = tty_run(&env, 24, 80, command) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the prompt", |s| s.contains("name?"));
    terminal.type_text("bob");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the answer", |s| s.contains("hi bob"));
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the first width", |s| {
        s.lines().any(|l| l.trim() == "80")
    });
    terminal.resize(30, 100);
    // Each Enter asks the program for the width it has now.
    crate::support::wait_until(WITHIN, "the new width reached the program", || {
        terminal.keys(&["Enter"]);
        terminal.screen().lines().any(|l| l.trim() == "100")
    });
    terminal.type_text("q");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 3);
}

#[test]
fn a_terminal_run_that_ends_at_once_shows_its_output_and_status() {
    let env = Env::new("terminal-tty-quick");
    env.ok(&["new", "--name", "a"]);
    let Some(terminal) = tty_run(&env, 24, 80, "echo quick-$((40+2)); exit 4") else {
        return;
    };
    ended_with(&terminal, 4);
    assert!(
        terminal.screen().contains("quick-42"),
        "{}",
        terminal.screen()
    );
}

#[test]
fn ctrl_c_in_a_terminal_run_reaches_the_program_not_the_client() {
    let env = Env::new("terminal-tty-ctrl-c");
    env.ok(&["new", "--name", "a"]);
    let command = "trap 'echo got-int; exit 7' INT; echo ready; read x";
    let Some(terminal) = tty_run(&env, 24, 80, command) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the program ready", |s| s.contains("ready"));
    terminal.keys(&["C-c"]);
    terminal.wait_screen(WITHIN, "the program's own trap", |s| s.contains("got-int"));
    ended_with(&terminal, 7);
}

#[test]
fn the_detach_key_leaves_a_terminal_run_going_and_keys_still_reach_it() {
    let env = Env::new("terminal-tty-detach");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let out = env.dir.join("answer");
    let command = format!("read -p 'name? ' n; echo \"hi $n\" > '{}'", out.display());
    let Some(terminal) = tty_run(&env, 24, 80, &command) else {
        return;
    };
    terminal.wait_screen(WITHIN, "the prompt", |s| s.contains("name?"));
    terminal.keys(&["C-\\"]);
    ended_with(&terminal, 0);
    assert_eq!(env.session(&id)["state"], "busy", "the run goes on");
    env.ok(&["keys", "a", "--", "carol", "Enter"]);
    crate::support::wait_until(WITHIN, "the run read the keys", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t == "hi carol\n")
    });
}

#[test]
fn vim_in_a_terminal_run_edits_and_saves_a_file() {
    let env = Env::new("terminal-tty-vim");
    env.ok(&["new", "--name", "a"]);
    let file = env.dir.join("notes.txt");
    let command = format!("vim -u NONE -N '{}'", file.display());
    let Some(terminal) = tty_run(&env, 24, 80, &command) else {
        return;
    };
    terminal.wait_screen(WITHIN, "vim's empty buffer", |s| s.contains('~'));
    terminal.type_text("ihello from vim");
    terminal.keys(&["Escape"]);
    terminal.type_text(":wq");
    terminal.keys(&["Enter"]);
    ended_with(&terminal, 0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello from vim\n");
}

#[test]
fn a_python_repl_in_a_terminal_run_keeps_its_variables_across_a_worker_kill() {
    let env = Env::new("terminal-tty-python");
    let id = env.ok(&["new", "--name", "a"]).trim().to_string();
    let Some(terminal) = tty_run(&env, 24, 80, "python3 -q") else {
        return;
    };
    terminal.wait_screen(WITHIN, "the REPL's prompt", |s| s.contains(">>>"));
    terminal.type_text("x = 41");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the assignment taken", |s| {
        s.contains(">>> x = 41\n>>>")
    });
    let worker = env.session(&id)["pid"].as_u64().unwrap() as u32;
    crate::support::kill9(worker);
    crate::support::wait_until(WITHIN, "a new worker", || {
        env.session(&id)["pid"]
            .as_u64()
            .is_some_and(|pid| pid as u32 != worker)
    });
    terminal.type_text("print(x + 1)");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(WITHIN, "the variable kept", |s| {
        s.lines().any(|l| l.trim() == "42")
    });
    terminal.keys(&["C-d"]);
    ended_with(&terminal, 0);
}
