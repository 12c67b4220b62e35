//! A remote `eukhe bash` (issue 55) against a real sshd (`support::sshd`):
//! its command rides through a dropped SSH connection as through a lost
//! daemon (the client reconnects and prints what it had not), a client
//! that leaves (a signal, a closed reader) hangs its command up at once
//! as a local client does, and one killed outright leaves it to the
//! reconnection grace, after which it is hung up. Standard input reaches
//! a remote command as a local one's. `eukhe mcp`'s `bash` over a host
//! is such a client too.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use crate::mcp::raw::{tool_call, Server};
use crate::support::remote::{ssh_children, text, Remote};
use crate::support::{kill9, never, signal, wait_until, Env};

/// The reconnection grace under `EUKHE_TEST_SHORT_WINDOWS=1`
/// (`laws::timing::TEST_REMOTE_RECONNECT_GRACE_MS`).
const SHORT_GRACE: Duration = Duration::from_millis(2_000);

/// How long a command hung up at once may take to show its end: far
/// below the law's grace (over a minute), which a test never waits out.
const AT_ONCE: Duration = Duration::from_secs(30);

impl Remote {
    /// The remote session `s`.
    fn ok_new(&self) {
        self.ok(&["new", "--name", "s"]);
    }

    /// A remote `bash -n s -- COMMAND`, its output piped; started once
    /// its first line (`started`) came.
    fn bash(&self, command: &str) -> Child {
        let mut child = self
            .command(&["bash", "-n", "s", "--", command])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("eukhe bash");
        let mut first = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert_eq!(first, "started\n");
        child
    }

    /// The line that ends user bash `number` in the remote log, once there
    /// is one.
    fn end_of(&self, number: u64) -> Option<String> {
        let wanted = format!("[bash {number} ");
        self.env
            .ok(&["log", "s", "--tail", "6"])
            .lines()
            .find(|line| line.starts_with(&wanted) && line.ends_with(']'))
            .map(str::to_string)
    }

    /// Wait (up to `within`) for user bash `number` to end; its end line.
    fn ended_within(&self, number: u64, within: Duration) -> String {
        let mut end = None;
        wait_until(within, &format!("bash {number} ends"), || {
            end = self.end_of(number);
            end.is_some()
        });
        end.unwrap_or_default()
    }
}

#[test]
fn a_remote_bash_rides_through_a_killed_ssh_printing_each_line_once() {
    let Some(r) = Remote::start_in(Env::new("remote-bash-drop"), "bash-drop", "") else {
        return;
    };
    r.ok_new();
    let mut gated = r.start_gated(&["bash", "-n", "s", "--"], "done", 3);
    let within = Duration::from_secs(20);
    let killed = ssh_children(gated.client.id());
    assert!(!killed.is_empty(), "no ssh under the client");
    for &pid in &killed {
        kill9(pid);
    }
    wait_until(within, "a new ssh", || {
        ssh_children(gated.client.id())
            .iter()
            .any(|pid| !killed.contains(pid))
    });
    // The command still runs: it was not hung up with the connection.
    assert_eq!(r.end_of(1), None, "{}", r.env.log("s"));
    gated.open();
    let (status, stderr) = gated.finish();
    assert_eq!(status, Some(3), "{stderr}");
    assert_eq!(gated.printed(), "before\ndone\n", "{stderr}");
    assert_eq!(r.end_of(1).as_deref(), Some("[bash 1 exited 3]"));
}

#[test]
fn a_remote_bash_client_that_leaves_ends_its_command_at_once() {
    let Some(r) = Remote::start_in(Env::new("remote-bash-leave"), "bash-leave", "") else {
        return;
    };
    r.ok_new();
    // SIGTERM (and SIGHUP, caught alike): the command is hung up, as a
    // local client's end hangs it up, not after the grace.
    let client = r.bash("echo started; sleep 600");
    signal(client.id(), Signal::SIGTERM);
    let out = client.wait_with_output().unwrap();
    assert!(!out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        r.ended_within(1, AT_ONCE),
        "[bash 1 killed by signal 1]",
        "{}",
        text(&out.stderr)
    );
    // Ctrl-C cancels it there, as it does here.
    let client = r.bash("echo started; sleep 600");
    signal(client.id(), Signal::SIGINT);
    let out = client.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert_eq!(r.ended_within(2, AT_ONCE), "[bash 2 cancelled: signal 2]");
    // A reader that goes away: the command is hung up as locally.
    let out = client_shell(
        &r,
        r#""$EUKHE" --host "$H" bash -n s -- 'seq 1 100000000' | head -2"#,
    );
    assert_eq!(text(&out.stdout), "1\n2\n", "{}", text(&out.stderr));
    let end = r.ended_within(3, AT_ONCE);
    assert!(
        end == "[bash 3 killed by signal 1]" || end == "[bash 3 killed by signal 13]",
        "seq ran on after its client left: {end}"
    );
}

#[test]
fn a_killed_remote_bash_client_has_its_command_hung_up_after_the_grace() {
    let env = Env::new("remote-bash-killed").with("EUKHE_TEST_SHORT_WINDOWS", "1");
    let Some(r) = Remote::start_in(env, "bash-killed", "") else {
        return;
    };
    r.ok_new();
    let client = r.bash("echo started; sleep 600");
    let killed_at = kill9_with_its_ssh(client.id());
    let _ = client.wait_with_output();
    let end = r.ended_within(1, AT_ONCE);
    assert_eq!(end, "[bash 1 killed by signal 1]");
    // Not at once: its client might have come back until the grace ended.
    assert!(
        killed_at.elapsed() >= SHORT_GRACE,
        "hung up {:?} after its client was killed",
        killed_at.elapsed()
    );
}

/// Kill a client outright, and its ssh with it (nothing is left to say
/// it leaves): when.
fn kill9_with_its_ssh(client: u32) -> Instant {
    let ssh = ssh_children(client);
    let killed_at = Instant::now();
    kill9(client);
    for pid in ssh {
        kill9(pid);
    }
    killed_at
}

/// `pipeline` run by `sh`, with `$EUKHE` the binary and `$H` the host, in
/// the client's environment.
fn client_shell(r: &Remote, pipeline: &str) -> std::process::Output {
    let mut sh = Command::new("sh");
    sh.args(["-c", pipeline])
        .env("EUKHE", env!("CARGO_BIN_EXE_eukhe"))
        .env("H", r.sshd.host());
    for (name, value) in &r.client.vars {
        sh.env(name, value);
    }
    sh.output().unwrap()
}

#[test]
fn standard_input_reaches_a_remote_bash_whole() {
    let Some(r) = Remote::start_in(Env::new("remote-bash-stdin"), "bash-stdin", "") else {
        return;
    };
    r.ok_new();
    let out = client_shell(
        &r,
        r#"printf 'a\nb\n' | "$EUKHE" --host "$H" bash s -- 'wc -l'"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "2", "{}", text(&out.stderr));
    // 50 MB, through a pipe and from a file, read there as here.
    let input = r.client.dir.join("input");
    let mut bytes = Vec::with_capacity(50 << 20);
    let mut x: u32 = 0x9e37_79b9;
    while bytes.len() < 50 << 20 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&input, &bytes).unwrap();
    let here = Command::new("sha256sum").arg(&input).output().unwrap();
    let here = text(&here.stdout);
    let here = here.split_whitespace().next().unwrap();
    let path = input.display();
    for pipeline in [
        format!(r#""$EUKHE" --host "$H" bash s -- sha256sum < '{path}'"#),
        format!(r#"cat '{path}' | "$EUKHE" --host "$H" bash s -- sha256sum"#),
    ] {
        let out = client_shell(&r, &pipeline);
        assert!(out.status.success(), "{pipeline}: {}", text(&out.stderr));
        let there = text(&out.stdout);
        assert_eq!(there.split_whitespace().next(), Some(here), "{pipeline}");
    }
}

/// `eukhe --host H mcp`'s `bash`: past the call's timeout its command goes
/// on (the call leaves it on purpose), past the reconnection grace too;
/// a server killed during its call leaves its command the grace, as a
/// killed `eukhe --host H bash` does.
#[test]
fn an_mcp_bash_over_a_host_goes_on_past_its_timeout_and_a_killed_one_gets_the_grace() {
    let env = Env::new("remote-bash-mcp").with("EUKHE_TEST_SHORT_WINDOWS", "1");
    let Some(r) = Remote::start_in(env, "bash-mcp", "") else {
        return;
    };
    r.ok_new();
    let mut server = Server::spawn(r.command(&["mcp"]));
    server.initialize();
    let arguments = |timeout_ms: u64| json!({ "session": "s", "command": "echo started; sleep 600", "timeout_ms": timeout_ms });
    let answer = server.ask(&tool_call(2, "bash", arguments(1_000)));
    assert_eq!(
        answer["result"]["structuredContent"]["running"], true,
        "{answer}"
    );
    never(SHORT_GRACE * 3, "the timed-out command ends", || {
        r.end_of(1).is_some()
    });
    server.close();
    let mut server = Server::spawn(r.command(&["mcp"]));
    server.initialize();
    server.send(&tool_call(2, "bash", arguments(600_000)));
    wait_until(AT_ONCE, "the second command runs", || {
        r.env.log("s").contains("[bash 2] $")
    });
    let killed_at = kill9_with_its_ssh(server.child.id());
    let _ = server.child.wait();
    assert_eq!(r.ended_within(2, AT_ONCE), "[bash 2 killed by signal 1]");
    assert!(
        killed_at.elapsed() >= SHORT_GRACE,
        "hung up {:?} after its server was killed",
        killed_at.elapsed()
    );
}
