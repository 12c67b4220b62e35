//! Cancel, queue and withdraw, and the clients waiting on them: each does
//! what it says, ends its processes and refuses clearly.

use std::collections::BTreeSet;
use std::process::Output;
use std::time::{Duration, Instant};

use super::{lines_equal, text, OutputInThread};
use crate::support::process::{descendants_running, still, Signal};
use crate::support::{signal, wait_for, wait_until, Env};

// Done when 8: cancel ends the running run within the grace; its end says
// cancelled with its signal, the next input runs, and nothing of it is left.
#[test]
fn cancel_ends_the_running_run_within_the_grace_and_leaves_no_process() {
    let t = Env::new("cancel");
    let id = t.new_session();
    // A session in use: a command has run before (user bash 1; the runs
    // are inputs 2 and 3).
    assert_eq!(t.bash(&id, "cd /tmp && echo ready"), "ready\n");
    t.send(&id, "sleep 1000; echo not-reached");
    t.send(&id, "echo after-cancel");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 1000");
    let start = Instant::now();
    let out = t.run(&["cancel", &id]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("cancelling run 2"));
    let log = t.log_with(&id, "[run 2 cancelled", Duration::from_secs(10));
    let took = start.elapsed();
    // The default cancel grace is 1 s; SIGINT ends `sleep` at once.
    assert!(took < Duration::from_secs(3), "took {took:?}:\n{log}");
    let log = t.log_with(&id, "[run 3 exited 0]", Duration::from_secs(10));
    assert_eq!(lines_equal(&log, "after-cancel"), 1, "{log}");
    assert_eq!(
        lines_equal(&log, "not-reached"),
        0,
        "the cancelled run went on after its `sleep`:\n{log}"
    );
    assert!(!still(run), "the run's sleep is still there");
    assert!(
        descendants_running(kernel.pid, "sleep 1000").is_empty(),
        "a `sleep 1000` is left under the kernel"
    );
    assert_eq!(t.session(&id)["state"], "idle");
    let json: serde_json::Value = serde_json::from_str(&t.ok(&["log", &id, "--json"])).unwrap();
    let end = json
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "run_finished" && e["input"] == 2)
        .cloned()
        .unwrap();
    assert_eq!(end["cancelled"], true, "{end}");
    assert!(
        log.contains("[run 2 cancelled: signal 2]"),
        "the end does not name SIGINT ({end}):\n{log}"
    );
}

// Done when 8: a run that ignores SIGINT gets SIGTERM after the grace.
#[test]
fn cancel_escalates_to_sigterm_after_the_grace_for_a_run_that_ignores_sigint() {
    let t = Env::new("runs-cancel-term").with_config("cancel_grace_ms = 500\n");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "cd /tmp && echo ready"), "ready\n");
    t.send(&id, "trap '' INT; sleep 1000; echo not-reached");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 1000");
    let start = Instant::now();
    assert!(t.run(&["cancel", &id]).status.success());
    let log = t.log_with(&id, "[run 2 cancelled", Duration::from_secs(10));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(500),
        "ended before the grace ({took:?}): SIGINT is ignored"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(log.contains("[run 2 cancelled: signal 15]"), "{log}");
    assert_eq!(lines_equal(&log, "not-reached"), 0, "{log}");
    assert!(!still(run));
    assert!(descendants_running(kernel.pid, "sleep 1000").is_empty());
}

// Done when 8: nothing to cancel exits 1; `cancel --all` withdraws the
// queue; `queue --json` lists inputs; `withdraw` refuses a running run.
#[test]
fn cancel_queue_and_withdraw_do_what_they_say_and_refuse_clearly() {
    let t = Env::new("queue");
    let id = t.new_session();
    let nothing = t.run(&["cancel", &id]);
    assert_eq!(nothing.status.code(), Some(1));
    assert_eq!(text(&nothing.stdout), "nothing to cancel\n");

    t.send(&id, "sleep 1000");
    let kernel = t.kernel(&id);
    t.run_process(kernel, "sleep 1000");
    let marker = |n: u64| t.dir.join(format!("ran-{n}"));
    for n in 2..=4 {
        t.send(&id, &format!("touch {}", marker(n).display()));
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let queue: serde_json::Value = serde_json::from_str(&t.ok(&["queue", &id, "--json"])).unwrap();
    let queue = queue.as_array().expect("a JSON array").clone();
    assert_eq!(queue.len(), 3, "{queue:?}");
    for (entry, n) in queue.iter().zip(2u64..) {
        let keys: BTreeSet<&str> = entry
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(["run", "text", "at_ms"]), "{entry}");
        assert_eq!(entry["run"], n, "{entry}");
        assert_eq!(
            entry["text"],
            format!("touch {}", marker(n).display()),
            "{entry}"
        );
        let at = entry["at_ms"].as_u64().expect("at_ms is a number");
        assert!(
            at <= now_ms + 1000 && at + 60_000 >= now_ms,
            "at_ms {at} is not wall-clock milliseconds of now ({now_ms})"
        );
    }

    let refused = t.run(&["withdraw", &id, "1"]);
    assert!(!refused.status.success());
    let why = text(&refused.stderr);
    assert!(
        why.contains("run 1") && why.contains("started"),
        "withdrawing the running run: {why:?}"
    );
    t.ok(&["withdraw", &id, "3"]);
    let queue: serde_json::Value = serde_json::from_str(&t.ok(&["queue", &id, "--json"])).unwrap();
    let runs: Vec<u64> = queue
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["run"].as_u64().unwrap())
        .collect();
    assert_eq!(runs, vec![2, 4]);

    let all = t.run(&["cancel", &id, "--all"]);
    assert_eq!(all.status.code(), Some(0), "{}", text(&all.stderr));
    let said = text(&all.stdout);
    for line in ["cancelling run 1", "withdrew run 2", "withdrew run 4"] {
        assert!(said.contains(line), "{said}");
    }
    let log = t.log_with(&id, "[run 1 cancelled", Duration::from_secs(10));
    for n in 2..=4 {
        assert!(log.contains(&format!("[run {n} withdrawn]")), "{log}");
    }
    assert_eq!(t.ok(&["queue", &id]), "nothing queued\n");
    let later = t.run(&["send", &id, "echo later", "--wait"]);
    assert_eq!(text(&later.stdout), "later\n");
    wait_until(Duration::from_secs(5), "the session is idle", || {
        t.session(&id)["state"] == "idle"
    });
    for n in 2..=4 {
        assert!(!marker(n).exists(), "withdrawn run {n} ran");
    }
}

// Bad input: an empty command line is refused in one line, by `send` and
// `bash` alike, and takes no number (the next input gets the next one).
#[test]
fn an_empty_command_is_refused_and_takes_no_run_number() {
    let t = Env::new("empty-command");
    let id = t.new_session();
    for words in [
        vec!["send", &id, ""],
        vec!["send", &id, "  \n"],
        vec!["bash", &id, "--", ""],
        vec!["bash", &id, "--", "\t"],
    ] {
        let refused = t.run(&words);
        assert!(!refused.status.success(), "{words:?} was accepted");
        assert_eq!(
            text(&refused.stderr),
            "eukhe: the command is empty: nothing to run\n",
            "{words:?}"
        );
    }
    assert_eq!(t.ok(&["send", &id, "true"]), "queued as run 1\n");
    let log = t.ok(&["log", &id]);
    assert!(!log.contains("$ \n"), "an empty input was recorded: {log}");
}

// A client that follows an input (`bash`, `send --wait`, `log --follow`)
// of a session removed under it ends at once, saying so: it does not
// retry for the minute a lost worker or daemon gets.
#[test]
fn a_client_whose_session_is_removed_ends_at_once_saying_so() {
    let t = Env::new("removed-under");
    const COMMAND: &str = "echo following; sleep 30";
    for words in [
        &["bash", "{id}", "--", COMMAND][..],
        &["send", "--wait", "{id}", COMMAND],
        &["log", "{id}", "--follow"],
        &["attach", "{id}"],
    ] {
        let id = t.new_session();
        if words[0] == "log" || words[0] == "attach" {
            t.send(&id, COMMAND);
        }
        let words: Vec<String> = words.iter().map(|w| w.replace("{id}", &id)).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        // The client's output goes to a file, so the removal comes only
        // once the client follows the session (a `log` started later
        // than the `send` may not have reached the daemon yet).
        let shown = t.dir.join(format!("shown-{}", words[0]));
        let mut command = t.command(&words);
        command.stdout(std::fs::File::create(&shown).unwrap());
        // An attach stays while its input is open: one end of a socket
        // pair the test holds until the client is done.
        let (input, _held) = std::os::unix::net::UnixStream::pair().unwrap();
        if words[0] == "attach" {
            command.stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(input)));
        }
        let client = command.output_in_thread();
        wait_until(
            Duration::from_secs(10),
            "the client follows the session",
            || std::fs::read_to_string(&shown).is_ok_and(|s| s.contains("following\n")),
        );
        assert_eq!(t.session(&id)["state"], "busy");
        let removed = Instant::now();
        t.ok(&["rm", "--force", &id]);
        let out = client.join().unwrap();
        let took = removed.elapsed();
        assert!(took < Duration::from_secs(5), "{words:?} took {took:?}");
        // `send --wait` said first which run it queued.
        let queued = match words[0] {
            "send" => "eukhe: queued as run 1\n",
            _ => "",
        };
        assert_eq!(out.status.code(), Some(125), "{words:?}");
        assert_eq!(
            text(&out.stderr),
            format!("{queued}eukhe: session {id} no longer exists: it was removed\n"),
            "{words:?}"
        );
    }
}

// Ctrl-C on `eukhe bash` cancels its command in the session (as `eukhe
// cancel` would) and exits with the command's status; it does not leave
// the command running with nobody waiting for it.
#[test]
fn ctrl_c_on_bash_cancels_its_command_and_exits_with_its_status() {
    let t = Env::new("bash-ctrl-c");
    let id = t.new_session();
    let marker = t.dir.join("after");
    let command = format!("echo start; sleep 30; touch {}", marker.display());
    let mut client = t.command(&["bash", &id, "--", &command]);
    client
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // As from a terminal: SIGINT not ignored, whatever this test inherited
    // (a client started with it ignored keeps ignoring it).
    // SAFETY: signal(2) between fork and exec, async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt as _;
        client.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let client = client.spawn().expect("eukhe bash");
    wait_until(Duration::from_secs(10), "the session is busy", || {
        t.session(&id)["state"] == "busy"
    });
    t.run_process(t.kernel(&id), "sleep 30");
    let interrupted = Instant::now();
    signal(client.id(), Signal::SIGINT);
    let out = client.wait_with_output().unwrap();
    let took = interrupted.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "start\n");
    assert!(
        text(&out.stderr).contains("cancelling bash 1"),
        "{}",
        text(&out.stderr)
    );
    wait_until(Duration::from_secs(5), "the session is idle", || {
        t.session(&id)["state"] == "idle"
    });
    assert!(!marker.exists(), "the command went on after Ctrl-C");
    let log = t.ok(&["log", &id]);
    assert!(log.contains("[bash 1 cancelled: signal 2]"), "{log}");
}

// `send --wait` for a run that is withdrawn (by `withdraw` or `cancel
// --all`) before it runs ends at once, saying so: it does not wait for an
// end that never comes.
#[test]
fn a_client_waiting_for_a_withdrawn_run_ends_at_once_saying_so() {
    let t = Env::new("wait-withdrawn");
    let id = t.new_session();
    t.send(&id, "sleep 30");
    for (n, withdraw) in [
        (2, vec!["withdraw", &id, "2"]),
        (3, vec!["cancel", &id, "--all"]),
    ] {
        let waiting = t
            .command(&["send", "--wait", &id, "echo never"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("eukhe send --wait");
        wait_until(Duration::from_secs(10), "the run is queued", || {
            t.ok(&["queue", &id]).contains(&format!("run {n} "))
        });
        let withdrawn = Instant::now();
        t.ok(&withdraw);
        let out = output_within(waiting, Duration::from_secs(10), "the waiting client ends");
        assert!(withdrawn.elapsed() < Duration::from_secs(3), "{withdraw:?}");
        assert_eq!(out.status.code(), Some(125), "{withdraw:?}");
        assert_eq!(
            text(&out.stderr),
            format!("eukhe: queued as run {n}\neukhe: run {n} was withdrawn: it never ran\n"),
            "{withdraw:?}"
        );
        assert_eq!(text(&out.stdout), "");
    }
}

/// `child`'s output once it ends, which it must within `within` (else it
/// is killed and the test fails, rather than hang).
fn output_within(mut child: std::process::Child, within: Duration, what: &str) -> Output {
    if !wait_for(within, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        panic!("timed out waiting until {what}");
    }
    child.wait_with_output().unwrap()
}

// `log --raw N` of an input the session never numbered is refused in one
// line, whether the session runs or rests (read from disk by the daemon).
#[test]
fn log_raw_of_an_input_that_never_was_is_refused_running_or_resting() {
    let t = Env::new("raw-no-input");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo one"), "one\n");
    for state in ["running", "resting"] {
        if state == "resting" {
            t.ok(&["shutdown", "--force"]);
            wait_until(Duration::from_secs(10), "the session rests", || {
                t.session(&id)["state"] == "saved"
            });
        }
        assert_eq!(t.ok(&["log", &id, "--raw", "1"]), "one\n", "{state}");
        for n in ["0", "2"] {
            let refused = t.run(&["log", &id, "--raw", n]);
            assert_fails_saying(
                &refused,
                &format!("the session has no input {n}"),
                &format!("{state} {n}"),
            );
        }
    }
}

/// `out` is eukhe's own failure (status 125) with `line` as its one line
/// on standard error.
fn assert_fails_saying(out: &Output, line: &str, what: &str) {
    assert_eq!(out.status.code(), Some(125), "{what}");
    assert_eq!(text(&out.stderr), format!("eukhe: {line}\n"), "{what}");
}

// A cancel escalates on the documented times: SIGINT, SIGTERM one cancel
// grace later, SIGKILL one more grace later, and a command that ignores
// the first two ends then, not a grace after.
#[test]
fn a_cancel_kills_a_command_that_ignores_it_two_graces_after_asking() {
    let t = Env::new("cancel-times");
    let id = t.new_session();
    t.send(&id, "trap '' INT TERM; echo trapped; sleep 30");
    wait_until(Duration::from_secs(10), "the run traps", || {
        t.ok(&["log", &id]).contains("trapped\n")
    });
    let asked = Instant::now();
    t.ok(&["cancel", &id]);
    wait_until(Duration::from_secs(10), "the run ends", || {
        t.ok(&["log", &id]).contains("[run 1 cancelled: signal 9]")
    });
    let took = asked.elapsed();
    let grace = Duration::from_millis(eukhe::laws::timing::CANCEL_GRACE_MS);
    eprintln!("a trapping command ended {took:?} after its cancel");
    assert!(took >= 2 * grace, "killed early: {took:?}");
    assert!(
        took < 2 * grace + Duration::from_millis(900),
        "killed late: {took:?}"
    );
}
