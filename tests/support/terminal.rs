//! A person at a real terminal: a private tmux server (its own socket in
//! the test's directory, no configuration) whose one pane runs a command.
//! The test types with `send-keys` and reads what the person sees with
//! `capture-pane`, so a client's raw mode, its window size and what it
//! draws are those of a real terminal. The server is ended by its pid.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use super::{process, skip, wait_for, Env};

/// One tmux server with one window, ended when dropped.
pub struct Terminal {
    socket: PathBuf,
    server: Option<u32>,
}

impl Terminal {
    /// A `rows` x `cols` terminal running `command` with the variables of
    /// `env`; None (the test says why it did not run) without tmux.
    pub fn open(env: &Env, rows: u16, cols: u16, command: &[&str]) -> Option<Terminal> {
        if Command::new("tmux").arg("-V").output().is_err() {
            skip::skip_unless_ci("tmux is not installed (scripts/setup installs it)");
            return None;
        }
        let socket = env.dir.join(format!("tmux-{}", super::unique()));
        let mut terminal = Terminal {
            socket,
            server: None,
        };
        let mut new = terminal.tmux();
        new.args(["new-session", "-d", "-x", &cols.to_string()])
            .args(["-y", &rows.to_string()]);
        for (name, value) in &env.vars {
            new.arg("-e").arg(format!("{name}={value}"));
        }
        // The exit status as the program's own shell sees it (tmux may
        // take a while to notice a pane's program has ended); then the
        // pane stays, so tmux reads all the program wrote, until the
        // server is killed.
        let status = terminal.status_file();
        let wrapper = format!(
            "\"$@\"; s=$?; stty -a > '{}' 2>&1; echo $s > '{}'; exec sleep 3600",
            terminal.socket.with_extension("modes").display(),
            status.display()
        );
        new.args(["--", "sh", "-c", &wrapper, "sh"]).args(command);
        for (name, value) in &env.vars {
            new.env(name, value);
        }
        checked(new.output(), "start tmux");
        terminal.server = terminal
            .query("#{pid}")
            .and_then(|pid| pid.trim().parse().ok());
        terminal.run(&["set-option", "-g", "history-limit", "0"]);
        Some(terminal)
    }

    /// `eukhe attach SESSION FLAGS...` in a `rows` x `cols` terminal.
    pub fn attach(
        env: &Env,
        session: &str,
        (rows, cols): (u16, u16),
        flags: &[&str],
    ) -> Option<Terminal> {
        let mut command = vec![env!("CARGO_BIN_EXE_eukhe"), "attach", session];
        command.extend_from_slice(flags);
        Terminal::open(env, rows, cols, &command)
    }

    fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"]);
        command
    }

    fn run(&self, args: &[&str]) -> String {
        let out = checked(self.tmux().args(args).output(), "run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn query(&self, format: &str) -> Option<String> {
        let out = self.tmux().args(["display", "-p", format]).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Keys as tmux names them (`Enter`, `C-c`, `Escape`, `Up`, ...).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", ":0"];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// `text` typed as it is, no key names.
    pub fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-t", ":0", "-l", text]);
    }

    /// What the terminal shows, one line per row.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", ":0"])
    }

    /// Wait until the screen satisfies `holds`, failing with the screen.
    pub fn wait_screen(&self, within: Duration, what: &str, holds: impl Fn(&str) -> bool) {
        let mut last = String::new();
        if !wait_for(within, || {
            last = self.screen();
            holds(&last)
        }) {
            panic!("timed out waiting until the screen shows {what}; it shows:\n{last}");
        }
    }

    /// Give the window a new size, as a person resizing their terminal.
    pub fn resize(&self, rows: u16, cols: u16) {
        self.run(&[
            "resize-window",
            "-t",
            ":0",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }

    fn status_file(&self) -> PathBuf {
        self.socket.with_extension("status")
    }

    /// The terminal's modes (`stty -a`) once the pane's program ended.
    pub fn modes_after(&self) -> String {
        std::fs::read_to_string(self.socket.with_extension("modes")).unwrap_or_default()
    }

    /// The exit status of the pane's program once it has ended.
    pub fn exit_status(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.status_file()).ok()?;
        text.trim().parse().ok()
    }

    /// Wait (up to `within`) for the pane's program, `what`, to end: its
    /// exit status. The test fails, showing the screen, if it does not.
    pub fn wait_exit(&self, within: Duration, what: &str) -> Option<i32> {
        if !wait_for(within, || self.exit_status().is_some()) {
            panic!("{what} did not end; the screen:\n{}", self.screen());
        }
        self.exit_status()
    }
}

fn checked(out: std::io::Result<Output>, what: &str) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
        if let Some(pid) = self.server {
            if process::alive(pid) {
                process::kill9(pid);
            }
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// How long a terminal run is given to show what a test waits for.
const RUN_SHOWS_WITHIN: Duration = Duration::from_secs(20);

/// Queue `command` as a terminal run of `session`, and wait until its
/// screen shows `shows`.
pub fn start_run(env: &Env, session: &str, command: &str, shows: &str) {
    env.ok(&["send", "--tty", session, "--", command]);
    let mut last = String::new();
    let shown = wait_for(RUN_SHOWS_WITHIN, || {
        last = String::from_utf8_lossy(&env.run(&["screen", session]).stdout).into_owned();
        last.contains(shows)
    });
    assert!(shown, "the run never showed {shows:?}:\n{last}");
}
