//! Terminal runs (issue 53, item 1) through the real binary: `bash --tty`
//! and `send --tty` run on a pseudo-terminal the session's kernel holds,
//! `keys` types into it, and the terminal outlives the worker as the run
//! does. These clients have no terminal of their own, so the size is
//! 24x80.

use std::process::Output;
use std::time::Duration;

use crate::support::process::still;
use crate::support::{kill9, wait_for, wait_until, Env};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `eukhe bash --tty ID -- COMMAND`, expected to succeed.
fn bash_tty(t: &Env, id: &str, command: &str) -> Output {
    let out = t.run(&["bash", "--tty", id, "--", command]);
    assert!(
        out.status.success(),
        "bash --tty {command:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Queue `command` as a terminal run of session `id`.
fn send_tty(t: &Env, id: &str, command: &str) {
    t.ok(&["send", "--tty", id, "--", command]);
}

/// Type `keys` into the session's current terminal run, retrying while a
/// worker restarts (it refuses requests until it serves again).
fn type_keys(t: &Env, id: &str, keys: &str) {
    let mut last = String::new();
    let typed = wait_for(Duration::from_secs(20), || {
        let out = t.run(&["keys", id, "--", keys]);
        last = text(&out.stderr);
        out.status.success()
    });
    assert!(typed, "`eukhe keys` never succeeded: {last}");
}

#[test]
fn a_terminal_run_has_a_terminal_of_24x80_without_one_of_its_own() {
    let t = Env::new("tty-size");
    let id = t.new_session();
    let out = bash_tty(&t, &id, "test -t 0 && test -t 1 && tty && stty size");
    let shown = text(&out.stdout);
    assert!(shown.starts_with("/dev/pts/"), "{shown:?}");
    assert!(shown.ends_with("24 80\r\n"), "{shown:?}");
    // A queued terminal run streams its output and exits with its status.
    let sent = t.run(&["send", "--tty", "--wait", &id, "--", "test -t 1 && exit 3"]);
    assert_eq!(sent.status.code(), Some(3), "{}", text(&sent.stderr));
    // Without --tty, the same test says no terminal.
    let plain = t.run(&["bash", "-n", &id, "--", "test -t 0 || test -t 1"]);
    assert!(!plain.status.success(), "a plain run had a terminal");
}

#[test]
fn a_terminal_runs_command_is_its_terminals_foreground() {
    let t = Env::new("tty-foreground");
    let id = t.new_session();
    let out = bash_tty(
        &t,
        &id,
        "[ $(ps -o tpgid= $$) -eq $(ps -o pgid= $$) ] && echo foreground",
    );
    assert_eq!(text(&out.stdout), "foreground\r\n");
}

#[test]
fn terminal_output_is_the_bytes_a_terminal_driver_writes() {
    let t = Env::new("tty-bytes");
    let id = t.new_session();
    let out = bash_tty(&t, &id, "printf 'a\\tb\\n'; printf 'err\\n' >&2");
    assert_eq!(out.stdout, b"a\tb\r\nerr\r\n");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn a_terminal_runs_shell_state_persists_for_a_plain_bash() {
    let t = Env::new("tty-state");
    // The second session may be a spare made ahead, whose first job a
    // prepared template would take: a terminal run is not taken by it.
    for _ in 0..2 {
        let id = t.new_session();
        bash_tty(&t, &id, "cd /tmp; KEPT=yes");
        assert_eq!(t.bash(&id, "pwd; echo $KEPT"), "/tmp\nyes\n");
        bash_tty(&t, &id, "cd /; KEPT=again");
        assert_eq!(t.bash(&id, "pwd; echo $KEPT"), "/\nagain\n");
    }
}

#[test]
fn a_prompt_in_a_queued_terminal_run_is_answered_by_keys() {
    let t = Env::new("tty-keys");
    let id = t.new_session();
    send_tty(&t, &id, "read -p 'name? ' n; echo \"hi $n\"");
    // The prompt, not the command line that holds it too.
    t.log_with(&id, "\nname? ", Duration::from_secs(20));
    let typed = t.run(&["keys", &id, "--", "bob\r"]);
    assert!(
        typed.status.success(),
        "{}\n{}",
        text(&typed.stderr),
        t.log(&id)
    );
    let log = t.log_with(&id, "[run 1 exited 0]", Duration::from_secs(20));
    assert!(log.contains("bob\r\nhi bob\r\n"), "{log}");
}

#[test]
fn keys_without_a_running_run_say_what_to_do() {
    let t = Env::new("tty-no-run");
    let id = t.new_session();
    let out = t.run(&["keys", &id, "--", "x"]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(said.contains("--tty"), "{said}");
    // A plain run takes no keys: it has no terminal.
    t.ok(&["send", &id, "--", "echo started; sleep 30"]);
    t.log_with(&id, "\nstarted", Duration::from_secs(20));
    let out = t.run(&["keys", &id, "--", "x"]);
    assert!(!out.status.success());
    let said = text(&out.stderr);
    assert!(said.contains("terminal"), "{said}");
    t.ok(&["cancel", &id]);
}

#[test]
fn cancel_ends_a_terminal_run() {
    let t = Env::new("tty-cancel");
    let id = t.new_session();
    t.ok(&["send", "--tty", &id, "--", "sleep 100"]);
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 100");
    t.ok(&["cancel", &id]);
    t.log_with(&id, "[run 1 cancelled", Duration::from_secs(20));
    wait_until(Duration::from_secs(10), "the run's sleep ends", || {
        !still(run)
    });
}

#[test]
fn a_terminal_run_outlives_a_sigkilled_worker_and_keys_still_reach_it() {
    let t = Env::new("tty-worker-kill");
    let id = t.new_session();
    send_tty(&t, &id, "echo ready; read x; echo got $x");
    t.log_with(&id, "\nready", Duration::from_secs(20));
    let worker = t.worker(&id);
    kill9(worker);
    wait_until(Duration::from_secs(20), "a new worker serves", || {
        t.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    t.worker(&id);
    type_keys(&t, &id, "yes\r");
    let log = t.log_with(&id, "[run 1 exited 0]", Duration::from_secs(20));
    assert!(log.contains("got yes"), "{log}");
    assert!(!log.contains("interrupted"), "{log}");
}

#[test]
fn a_terminal_run_is_interrupted_once_when_its_kernel_dies() {
    let t = Env::new("tty-kernel-kill");
    let id = t.new_session();
    // Deaf to the hang-up its terminal's end sends: the next kernel ends
    // it, as it ends what any dead kernel's run left.
    t.ok(&["send", "--tty", &id, "--", "trap '' HUP; sleep 77"]);
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 77");
    kill9(kernel.pid);
    let log = t.log_with(&id, "[run 1 interrupted]", Duration::from_secs(20));
    assert_eq!(log.matches("interrupted").count(), 1, "{log}");
    wait_until(Duration::from_secs(10), "the run's sleep ends", || {
        !still(run)
    });
    let out = bash_tty(&t, &id, "echo after");
    assert_eq!(text(&out.stdout), "after\r\n");
}

/// A client that speaks the wire by hand, as a passthrough client will:
/// `bash --tty`, then a new window size and keys on the same connection.
/// Returns the output and the exit message.
fn bash_tty_typing(t: &Env, id: &str, command: &str) -> (Vec<u8>, serde_json::Value) {
    use crate::support::wire::frame;
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(t.dir.join("run/eukhe.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let hello = serde_json::json!({
        "type": "hello", "protocol": eukhe::protocol::PROTOCOL_VERSION, "version": "0",
        "build_id": "raw", "role": "interactive", "capabilities": [],
    });
    let request = serde_json::json!({
        "type": "session", "session": id,
        "request": {"op": "bash", "command": command, "tty": {"rows": 24, "cols": 80}},
    });
    let resize = serde_json::json!({
        "type": "terminal_input", "input": {"type": "resize", "size": {"rows": 30, "cols": 100}},
    });
    let keys = serde_json::json!({
        "type": "terminal_input", "input": {"type": "keys", "data": "eA0="},
    });
    let mut send = |message: &serde_json::Value| {
        stream
            .write_all(&frame(message.to_string().as_bytes()))
            .unwrap()
    };
    send(&hello);
    send(&request);
    let mut typed = false;
    let mut output = Vec::new();
    loop {
        let mut header = [0u8; 4];
        stream.read_exact(&mut header).unwrap();
        let mut payload = vec![0u8; u32::from_be_bytes(header) as usize];
        stream.read_exact(&mut payload).unwrap();
        if payload[0] == 0x01 {
            output.extend_from_slice(&payload[2..]);
            continue;
        }
        let message: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        match message["type"].as_str() {
            Some("queued") if !typed => {
                typed = true;
                let mut send = |message: &serde_json::Value| {
                    stream
                        .write_all(&frame(message.to_string().as_bytes()))
                        .unwrap()
                };
                send(&resize);
                send(&keys);
            }
            Some("exit") => return (output, message),
            Some("error") => panic!("{message}"),
            _ => {}
        }
    }
}

#[test]
fn keys_and_a_new_size_reach_a_terminal_run_from_its_own_connection() {
    let t = Env::new("tty-connection");
    let id = t.new_session();
    let (output, exit) = bash_tty_typing(&t, &id, "read -r a; stty size; echo \"got $a\"");
    assert_eq!(exit["status"], 0, "{exit}");
    assert_eq!(text(&output), "x\r\n30 100\r\ngot x\r\n");
}

#[test]
fn a_queued_terminal_run_is_still_one_after_a_worker_restart() {
    let t = Env::new("tty-queued-restart");
    let id = t.new_session();
    let go = t.dir.join("go");
    t.ok(&[
        "send",
        &id,
        "--",
        &format!("while [ ! -e {} ]; do sleep 0.05; done", go.display()),
    ]);
    send_tty(&t, &id, "tty");
    let worker = t.worker(&id);
    kill9(worker);
    wait_until(Duration::from_secs(20), "a new worker serves", || {
        t.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    t.worker(&id);
    std::fs::write(&go, "").unwrap();
    let log = t.log_with(&id, "[run 2 exited 0]", Duration::from_secs(20));
    assert!(log.contains("\n/dev/pts/"), "{log}");
}

#[test]
fn a_terminal_bash_whose_client_goes_away_is_hung_up() {
    use std::io::{BufRead, BufReader};
    let t = Env::new("tty-hang-up");
    let id = t.new_session();
    let mut client = t.command(&["bash", "--tty", &id, "--", "echo ready; sleep 101"]);
    client.stdout(std::process::Stdio::piped());
    let mut client = client.spawn().expect("eukhe bash --tty");
    let mut first = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "ready\r\n");
    let run = t.run_process(t.kernel(&id), "sleep 101");
    kill9(client.id());
    let _ = client.wait();
    wait_until(Duration::from_secs(10), "the command is hung up", || {
        !still(run)
    });
}
