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
    crate::support::wait_until(WITHIN, "attach ended", || terminal.exit_status().is_some());
    assert_eq!(terminal.exit_status(), Some(0), "{}", terminal.screen());
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
    crate::support::wait_until(WITHIN, "top ended", || terminal.exit_status().is_some());
    assert_eq!(terminal.exit_status(), Some(0), "{}", terminal.screen());
    env.ok(&["rm", "--force", "a"]);
}
