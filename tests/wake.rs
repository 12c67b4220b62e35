//! `eukhe wait` and `eukhe events --since` through the real binary: a
//! session's events are its transcript's entries, so a wait or a replay
//! from a cursor finds what was stored while the daemon was gone.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{kill9, wait_until, Env};

/// The session's transcript entries, as `log --json` gives them.
fn entries(env: &Env, id: &str) -> Vec<serde_json::Value> {
    serde_json::from_str(&env.ok(&["log", id, "--json"])).expect("log --json")
}

/// The cursor of now: the seq of the session's last entry.
fn cursor(env: &Env, id: &str) -> u64 {
    entries(env, id)
        .last()
        .map_or(0, |entry| entry["seq"].as_u64().unwrap())
}

/// Queue `command`; its run number and the seq of its input entry.
fn send(env: &Env, id: &str, command: &str) -> (u64, u64) {
    env.ok(&["send", id, command]);
    let entries = entries(env, id);
    let input = entries
        .iter()
        .rev()
        .find(|entry| entry["kind"] == "input" && entry["text"] == command)
        .expect("the input is stored");
    (
        input["input"].as_u64().unwrap(),
        input["seq"].as_u64().unwrap(),
    )
}

/// `eukhe wait` with `args`: its exit code and its stdout read as JSON.
fn wait_json(env: &Env, args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["wait"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = env.run(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("wait {args:?}: {e}: {stdout:?} {stderr:?}"));
    (out.status.code().expect("an exit code"), value, stderr)
}

#[test]
fn a_wait_for_a_run_rides_through_a_killed_daemon_and_exits_with_its_status() {
    let env = Env::new("wake-daemon-lost");
    let id = env.new_session();
    let (run, since) = send(&env, &id, "sleep 3; exit 4");
    let daemon = env.daemon();
    kill9(daemon);
    // This wait starts the next daemon, which adopts the worker.
    let (code, answer, stderr) = wait_json(
        &env,
        &[
            &id,
            "--run",
            &run.to_string(),
            "--since",
            &since.to_string(),
            "--timeout",
            "60000",
        ],
    );
    assert_eq!(code, 4, "{answer} {stderr}");
    assert_ne!(env.daemon_pid(), daemon, "a new daemon serves");
    let events = answer["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{answer}");
    assert_eq!(events[0]["event"]["kind"], "run_finished", "{answer}");
    assert_eq!(events[0]["event"]["input"], run, "{answer}");
    assert_eq!(events[0]["event"]["status"], 4, "{answer}");
    let seq = events[0]["seq"].as_u64().unwrap();
    assert!(seq > since, "{answer}");
    assert_eq!(answer["next_since"], seq, "{answer}");
    assert_eq!(answer["status"], 4);
    // A run that already ended answers at once, in text too.
    let out = env.run(&["wait", &id, "--run", &run.to_string()]);
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("run {run} exited 4")) && text.contains("next --since"),
        "{text}"
    );
}

#[test]
fn a_wait_that_times_out_exits_124_and_leaves_the_run_running() {
    let env = Env::new("wake-timeout");
    let id = env.new_session();
    let (run, _) = send(&env, &id, "sleep 60");
    let out = env.run(&["wait", &id, "--run", &run.to_string(), "--timeout", "300"]);
    assert_eq!(out.status.code(), Some(124));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("timed out after 300 ms") && stderr.contains("goes on running"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(env.session(&id)["state"], "busy", "the run still runs");
}

#[test]
fn any_run_and_match_wake_on_what_came_after_the_cursor() {
    let env = Env::new("wake-any-match");
    let id = env.new_session();
    env.run(&["send", "--wait", &id, "exit 2"]);
    let since = cursor(&env, &id);
    // The run that ended before the cursor does not wake it; this one does.
    send(&env, &id, "exit 3");
    let (code, answer, _) = wait_json(&env, &[&id, "--any-run", "--since", &since.to_string()]);
    assert_eq!(code, 3, "{answer}");
    assert_eq!(answer["events"][0]["event"]["status"], 3, "{answer}");

    let since = answer["next_since"].as_u64().unwrap();
    send(
        &env,
        &id,
        "echo warming; sleep 1; echo ready on 4242; sleep 60",
    );
    let (code, answer, _) = wait_json(
        &env,
        &[
            &id,
            "--match",
            "ready on [0-9]+",
            "--since",
            &since.to_string(),
        ],
    );
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["events"][0]["event"]["kind"], "output", "{answer}");
    assert_eq!(answer["events"][0]["event"]["line"], "ready on 4242");
    assert_eq!(answer["status"], serde_json::Value::Null);
}

#[test]
fn events_since_replay_the_stored_events_then_follow_without_a_duplicate() {
    let env = Env::new("wake-events-since");
    let id = env.new_session();
    let since = cursor(&env, &id);
    env.run(&["send", "--wait", &id, "exit 6"]);
    let mut child = env
        .command(&[
            "events",
            "--since",
            &since.to_string(),
            "--session",
            &id,
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start eukhe events");
    env.note(child.id());
    let lines = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
    let stdout = child.stdout.take().unwrap();
    let collected = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(value) = serde_json::from_str(&line) {
                collected.lock().unwrap().push(value);
            }
        }
    });
    let ended = |status: i64| {
        let lines = lines.lock().unwrap();
        lines
            .iter()
            .filter(|e| e["event"]["kind"] == "run_finished" && e["event"]["status"] == status)
            .count()
    };
    wait_until(
        Duration::from_secs(20),
        "the stored end is replayed",
        || ended(6) == 1,
    );
    env.run(&["send", "--wait", &id, "exit 7"]);
    wait_until(Duration::from_secs(20), "the live end follows", || {
        ended(7) == 1
    });
    kill9(child.id());
    let _ = child.wait();
    assert_eq!((ended(6), ended(7)), (1, 1));
    let lines = lines.lock().unwrap();
    let seqs: Vec<u64> = lines.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "each stored event once, in order: {lines:?}"
    );
    assert!(seqs.iter().all(|&seq| seq > since), "{seqs:?}");
}

/// Under a private systemd: a run's end stored before a reboot is replayed
/// by `events --since` after it, and `wait --run` answers it at once.
#[test]
fn after_a_reboot_events_since_replays_a_runs_end() {
    use crate::support::installed::{Installed, USER};
    use crate::support::skip::skip_unless_ci;
    use crate::support::systemd::unavailable;
    if let Some(why) = unavailable() {
        skip_unless_ci(&format!("a private systemd cannot run here: {why}"));
        return;
    }
    let mut eukhe = Installed::boot("wake-reboot", &[]);
    let id = eukhe.eukhe("new").trim().to_string();
    let log: Vec<serde_json::Value> =
        serde_json::from_str(&eukhe.eukhe(&format!("log {id} --json"))).unwrap();
    let since = log.last().map_or(0, |e| e["seq"].as_u64().unwrap());
    eukhe.eukhe(&format!("send {id} 'sleep 3; exit 4'"));
    let waited = eukhe.user(&format!("eukhe wait {id} --run 1 --since {since} --json"));
    assert_eq!(waited.status.code(), Some(4), "{waited:?}");
    eukhe.reboot();
    // Followed in the background (it never ends by itself; `timeout`
    // bounds it), its lines read from a file as they come.
    let out = format!("/home/{USER}/events.json");
    eukhe.user_ok(&format!(
        "setsid timeout 60 eukhe events --since {since} --session {id} --json > {out} 2>&1 < /dev/null &"
    ));
    let mut replayed = String::new();
    wait_until(
        Duration::from_secs(30),
        "the end is replayed after the reboot",
        || {
            replayed = eukhe.root(&format!("cat {out}"));
            replayed.contains("\"run_finished\"")
        },
    );
    let end = replayed
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|e| e["event"]["kind"] == "run_finished")
        .unwrap();
    assert_eq!(end["event"]["status"], 4, "{replayed}");
    assert!(end["seq"].as_u64().unwrap() > since, "{replayed}");
    assert_eq!(end["id"], id.as_str(), "{replayed}");
}
