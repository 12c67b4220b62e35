//! Runaway commands, through the real binary: an `eukhe bash` whose client
//! went away (its reader closed, or the client killed) is hung up as a
//! command whose `ssh` client left is (its output closes, then SIGHUP);
//! a running user bash is work that `cancel` ends and `queue` lists. A
//! lost daemon hangs up nothing (`tests/lifecycle.rs`,
//! `send_wait_and_bash_ride_through_a_lost_daemon_and_a_lost_worker`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{kill9, wait_until, Env};

/// A client this test started, killed (by pid) if the test ends first.
struct Client(Option<std::process::Child>);

impl Client {
    fn wait_with_output(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn session(env: &Env) -> String {
    env.ok(&["new"]).trim().to_string()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `pipeline` run by `sh`, with `$EUKHE` the binary, `$S` the session and
/// this installation's environment.
fn shell(env: &Env, id: &str, pipeline: &str) -> Output {
    let mut sh = Command::new("sh");
    sh.args(["-c", pipeline])
        .env("EUKHE", env!("CARGO_BIN_EXE_eukhe"))
        .env("S", id);
    for (name, value) in &env.vars {
        sh.env(name, value);
    }
    sh.output().expect("run sh")
}

/// The line of the log's last entries that ends user bash `number`, once
/// there is one (the last entries only: a flood before it is long).
fn end_of(env: &Env, id: &str, number: u64) -> Option<String> {
    let wanted = format!("[bash {number} ");
    env.ok(&["log", id, "--tail", "6"])
        .lines()
        .find(|line| line.starts_with(&wanted) && line.ends_with(']'))
        .map(str::to_string)
}

/// Wait (up to `within`) for user bash `number` to end; its end line.
fn ended_within(env: &Env, id: &str, number: u64, within: Duration) -> String {
    let mut end = None;
    wait_until(within, &format!("bash {number} ends"), || {
        end = end_of(env, id, number);
        end.is_some()
    });
    end.unwrap_or_default()
}

/// The bytes the session's files take, as their lengths say (output of
/// zero bytes is stored as holes: its length still counts here).
fn stored_bytes(env: &Env, id: &str) -> u64 {
    fn walk(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&env.state_dir().join("sessions").join(id))
}

/// The most a hung-up command may have stored: it wrote for a moment
/// after its client left, never for seconds.
const SMALL_BYTES: u64 = 2 << 30;

/// How long a hung-up command's end may take to be stored: the output it
/// wrote before is stored first (a debug build on a busy machine is slow
/// at it); one never hung up never ends.
const HUNG_UP_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn a_bash_whose_reader_closed_is_hung_up_and_stores_little() {
    let env = Env::new("runaway-reader");
    let id = session(&env);
    let out = shell(
        &env,
        &id,
        r#""$EUKHE" bash "$S" -- cat </dev/zero | head -c5 | od -An -c"#,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).split_whitespace().count(), 5);
    let end = ended_within(&env, &id, 1, HUNG_UP_WITHIN);
    assert!(
        end == "[bash 1 killed by signal 1]" || end == "[bash 1 killed by signal 13]",
        "{end}"
    );
    let stored = stored_bytes(&env, &id);
    assert!(stored < SMALL_BYTES, "the session stored {stored} bytes");

    // A command that would run to its end is cut short as under `ssh`.
    let out = shell(
        &env,
        &id,
        r#""$EUKHE" bash "$S" -- 'seq 1 100000000' | head -2"#,
    );
    assert_eq!(text(&out.stdout), "1\n2\n", "{}", text(&out.stderr));
    let end = ended_within(&env, &id, 2, HUNG_UP_WITHIN);
    assert!(
        end == "[bash 2 killed by signal 1]" || end == "[bash 2 killed by signal 13]",
        "seq ran on after its client left: {end}"
    );
    let stored = stored_bytes(&env, &id);
    assert!(stored < SMALL_BYTES, "the session stored {stored} bytes");
    wait_until(Duration::from_secs(10), "the session is idle", || {
        env.session(&id)["state"] == "idle"
    });
}

#[test]
fn a_killed_client_hangs_up_its_bash() {
    let env = Env::new("runaway-killed");
    let id = session(&env);
    let mut client = env
        .command(&["bash", "-n", &id, "--", "echo started; sleep 60; echo late"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eukhe bash");
    let mut first = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "started\n");
    kill9(client.id());
    let _ = client.wait();
    let end = ended_within(&env, &id, 1, HUNG_UP_WITHIN);
    assert_eq!(end, "[bash 1 killed by signal 1]");
    assert!(!env.log(&id).lines().any(|line| line == "late"));
}

/// A client of `eukhe bash -n ID -- sleep 60`, its output piped.
fn sleeping_bash(env: &Env, id: &str) -> Client {
    Client(Some(
        env.command(&["bash", "-n", id, "--", "sleep 60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("eukhe bash"),
    ))
}

#[test]
fn cancel_ends_a_running_bash_that_queue_lists_with_its_number() {
    let env = Env::new("runaway-cancel");
    let id = session(&env);
    let client = sleeping_bash(&env, &id);
    wait_until(Duration::from_secs(20), "queue lists bash 1", || {
        env.ok(&["queue", &id]) == "bash 1     sleep 60 (running)\n"
    });
    let listed: serde_json::Value =
        serde_json::from_str(&env.ok(&["queue", &id, "--json"])).unwrap();
    assert_eq!(listed[0]["run"], 1, "{listed}");
    assert_eq!(listed[0]["bash"], true, "{listed}");
    assert_eq!(listed[0]["text"], "sleep 60", "{listed}");
    wait_until(Duration::from_secs(10), "ls --json lists bash 1", || {
        env.session(&id)["bash"] == serde_json::json!([1])
    });
    let cancelled = env.run(&["cancel", &id]);
    assert_eq!(
        (cancelled.status.code(), text(&cancelled.stdout)),
        (Some(0), "cancelling bash 1\n".to_string()),
        "{}",
        text(&cancelled.stderr)
    );
    let out = client.wait_with_output();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let end = ended_within(&env, &id, 1, Duration::from_secs(5));
    assert_eq!(end, "[bash 1 cancelled: signal 2]");
    wait_until(Duration::from_secs(10), "ls --json lists no bash", || {
        env.session(&id).get("bash").is_none()
    });
    assert_eq!(env.ok(&["queue", &id]), "nothing queued\n");

    // `cancel --all` reaches a running user bash too.
    let client = sleeping_bash(&env, &id);
    wait_until(Duration::from_secs(20), "queue lists bash 2", || {
        env.ok(&["queue", &id]) == "bash 2     sleep 60 (running)\n"
    });
    let all = env.run(&["cancel", &id, "--all"]);
    assert_eq!(
        (all.status.code(), text(&all.stdout)),
        (Some(0), "cancelling bash 2\n".to_string()),
        "{}",
        text(&all.stderr)
    );
    assert_eq!(client.wait_with_output().status.code(), Some(130));
    let end = ended_within(&env, &id, 2, Duration::from_secs(5));
    assert_eq!(end, "[bash 2 cancelled: signal 2]");
    let nothing = env.run(&["cancel", &id]);
    assert_eq!(nothing.status.code(), Some(1));
    assert_eq!(text(&nothing.stdout), "nothing to cancel\n");
}
