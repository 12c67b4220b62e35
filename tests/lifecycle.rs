//! Using sessions from the command line, through the real binary: `log`'s
//! tail, since, follow and timestamps, marked standard error, standard
//! input for `bash`, eukhe's own exit status, a closed standard output,
//! a client started with standard descriptors closed,
//! and commands that ride through a lost worker or daemon.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use crate::support::{kill9, wait_until, Env};

/// eukhe's own failures (as `env` and `timeout` exit).
const EUKHE_FAILED: i32 = 125;

fn session(env: &Env) -> String {
    env.ok(&["new"]).trim().to_string()
}

/// A child's stdout, line by line, on a channel (so a test can wait for a
/// line with a deadline).
fn lines_of(child: &mut Child) -> Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Read lines until one equals `wanted`; every line read is returned.
fn read_until(lines: &Receiver<String>, wanted: &str, seen: &mut Vec<String>) {
    loop {
        match lines.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => {
                let done = line == wanted;
                seen.push(line);
                if done {
                    return;
                }
            }
            Err(e) => panic!("no line {wanted:?} ({e}); read so far: {seen:#?}"),
        }
    }
}

fn end(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn log_shows_the_last_entries_those_since_an_entry_and_timestamps() {
    let env = Env::new("logopts");
    let id = session(&env);
    for word in ["one", "two", "three"] {
        env.ok(&["bash", &id, "--", &format!("echo {word}")]);
    }
    assert_eq!(
        env.ok(&["log", &id, "--tail", "3"]),
        "[bash 3] $ echo three\nthree\n[bash 3 exited 0]\n"
    );
    let entries: serde_json::Value =
        serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 9, "{entries:#?}");
    let sixth = entries[5]["seq"].as_u64().unwrap();
    assert_eq!(
        env.ok(&["log", &id, "--since", &sixth.to_string()]),
        "[bash 3] $ echo three\nthree\n[bash 3 exited 0]\n",
        "--since N prints the entries after entry N"
    );
    let stamped = env.ok(&["log", &id, "--timestamps", "--tail", "2"]);
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 2, "{stamped}");
    for (line, rest) in lines.iter().zip([" three", " [bash 3 exited 0]"]) {
        // 2026-12-01T19:42:01.123Z
        let (stamp, text) = line.split_at(24);
        assert_eq!(text, rest, "{line}");
        assert!(
            stamp.len() == 24
                && stamp.as_bytes()[10] == b'T'
                && stamp.ends_with('Z')
                && stamp[..4].parse::<u32>().unwrap() >= 2024,
            "not a UTC timestamp: {line}"
        );
    }
}

#[test]
fn standard_error_is_marked_and_output_without_a_newline_ends_before_the_mark() {
    let env = Env::new("stderrmark");
    let id = session(&env);
    // (Apart in time: the two streams are two pipes, read side by side.)
    env.ok(&[
        "bash",
        &id,
        "--",
        "echo out; sleep 0.3; echo oops >&2; sleep 0.3; printf 'no newline'",
    ]);
    let log = env.log(&id);
    assert!(
        log.ends_with("out\n[stderr] oops\nno newline\n[bash 1 exited 0]\n"),
        "{log}"
    );
    // The exact bytes are still there, unmarked.
    assert_eq!(env.ok(&["log", &id, "--raw", "1"]), "out\noops\nno newline");
}

#[test]
fn log_follow_prints_what_is_written_after_it_started_and_rides_through_a_worker_kill() {
    let env = Env::new("follow");
    let id = session(&env);
    env.ok(&["bash", &id, "--", "echo before"]);
    let mut follow = env
        .command(&["log", &id, "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut follow);
    let mut seen = Vec::new();
    read_until(&lines, "[bash 1 exited 0]", &mut seen);
    env.ok(&["send", &id, "echo later"]);
    read_until(&lines, "[run 2 exited 0]", &mut seen);
    assert!(seen.contains(&"later".to_string()), "{seen:#?}");

    let worker = env.worker_pid(&id).expect("a worker");
    kill9(worker);
    wait_until(Duration::from_secs(20), "a new worker", || {
        env.worker_pid(&id).is_some_and(|pid| pid != worker)
    });
    env.ok(&["send", &id, "echo after the kill"]);
    read_until(&lines, "[run 3 exited 0]", &mut seen);
    end(follow);
    assert!(seen.contains(&"after the kill".to_string()), "{seen:#?}");
    let once = |line: &str| seen.iter().filter(|l| *l == line).count() == 1;
    assert!(
        once("[bash 1] $ echo before") && once("[run 2] $ echo later"),
        "after reconnecting, entries already shown are not shown again: {seen:#?}"
    );
}

#[test]
fn bash_reads_standard_input_unless_told_not_to() {
    let env = Env::new("stdin");
    let id = session(&env);
    let piped = |args: &[&str], input: &[u8]| {
        let mut child = env
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    };
    let out = piped(&["bash", &id, "--", "cat"], b"hi\n");
    assert_eq!(out.stdout, b"hi\n");
    assert!(out.status.success());

    // Read by the command itself, in the session's shell: what it reads
    // stays in the shell.
    piped(&["bash", &id, "--", "read -r line"], b"kept line\n");
    assert_eq!(env.ok(&["bash", &id, "--", "echo $line"]), "kept line\n");

    let out = piped(&["bash", "-n", &id, "--", "cat; echo end"], b"not read\n");
    assert_eq!(out.stdout, b"end\n", "-n gives the command /dev/null");

    // 8 MiB of bytes, exactly.
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let out = piped(&["bash", &id, "--", "wc -c; echo done"], &big);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "8388608\ndone\n");

    // A socket on standard input (as some agents' harnesses give) too.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let child = env
        .command(&["bash", &id, "--", "cat"])
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ours = ours;
    ours.write_all(b"through a socket\n").unwrap();
    drop(ours);
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through a socket\n");
}

#[test]
fn send_takes_a_command_and_its_arguments() {
    let env = Env::new("sendargv");
    let id = session(&env);
    let out = env.run(&[
        "send",
        "--wait",
        &id,
        "--",
        "sh",
        "-c",
        "echo \"$0\"; exit 4",
        "a b",
    ]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a b\n");
}

#[test]
fn eukhes_own_failures_exit_125_and_a_commands_status_is_its_own() {
    let env = Env::new("status125");
    let id = session(&env);
    let unknown = env.run(&["bash", "no-such-session", "--", "true"]);
    assert_eq!(unknown.status.code(), Some(EUKHE_FAILED));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("no-such-session"), "{stderr}");
    let usage = env.run(&["log", &id, "--no-such-option"]);
    assert_eq!(usage.status.code(), Some(EUKHE_FAILED));
    let run_status = env.run(&["bash", &id, "--", "exit 125"]);
    assert_eq!(run_status.status.code(), Some(125), "the command's own 125");
    let one = env.run(&["bash", &id, "--", "sh", "-c", "exit 1"]);
    assert_eq!(one.status.code(), Some(1));
    assert!(env.run(&["--help"]).status.success());
}

#[test]
fn a_closed_standard_output_ends_a_command_quietly() {
    let env = Env::new("closedout");
    let id = session(&env);
    env.ok(&["bash", &id, "--", "seq 1 300000 >/dev/null; seq 1 300000"]);
    for args in [
        vec!["log", id.as_str()],
        vec!["log", id.as_str(), "--json"],
        vec!["bash", id.as_str(), "--", "seq 1 300000"],
    ] {
        let mut child = env
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        // The reader is gone (as `| head -c 1`).
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?} ends as a filter does: {:?}",
            out.status
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?} says nothing: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_client_started_with_its_standard_descriptors_closed_still_runs_a_command() {
    use std::os::unix::process::CommandExt as _;
    let env = Env::new("closedfds");
    let id = session(&env);
    for closed in [[0, 1].as_slice(), &[1], &[0, 2]] {
        let closed = closed.to_vec();
        let mut command = env.command(&["bash", &id, "--", "echo hi; echo there >&2"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let to_close = closed.clone();
        // SAFETY: only close(2), async-signal-safe, runs in the child.
        unsafe {
            command.pre_exec(move || {
                for &fd in &to_close {
                    libc::close(fd);
                }
                Ok(())
            });
        }
        let out = command.output().unwrap();
        // A socket or file of the client's own that took a closed
        // descriptor's number would get the command's output instead.
        assert_eq!(out.status.code(), Some(0), "fds {closed:?} closed: {out:?}");
        let expect = |fd: i32, text: &'static str| if closed.contains(&fd) { "" } else { text };
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            expect(1, "hi\n"),
            "{closed:?}"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            expect(2, "there\n"),
            "{closed:?}"
        );
    }
}

#[test]
fn send_wait_and_bash_ride_through_a_lost_daemon_and_a_lost_worker() {
    let env = Env::new("ridethrough");
    let id = session(&env);
    let waiting = |args: &[&str]| {
        env.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for lose in ["daemon", "worker"] {
        let marker = env.dir.join(format!("go-{lose}"));
        let marker = marker.display().to_string();
        let script = format!(
            "echo before-{lose}; while [ ! -e {marker} ]; do sleep 0.05; done; echo after; exit 7"
        );
        let send = waiting(&["send", "--wait", &id, &script]);
        let bash = waiting(&["bash", "-n", &id, "--", &script.replace("exit 7", "exit 5")]);
        wait_until(Duration::from_secs(20), "both print before", || {
            let wanted = format!("before-{lose}");
            env.log(&id).lines().filter(|l| *l == wanted).count() == 2
        });
        match lose {
            "daemon" => kill9(env.daemon_pid()),
            _ => kill9(env.worker_pid(&id).expect("a worker")),
        }
        std::fs::write(&marker, "").unwrap();
        let (send, bash) = (
            send.wait_with_output().unwrap(),
            bash.wait_with_output().unwrap(),
        );
        for (out, status) in [(send, 7), (bash, 5)] {
            assert_eq!(
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).as_ref()
                ),
                (Some(status), format!("before-{lose}\nafter\n").as_str()),
                "after losing the {lose}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::fs::remove_file(&marker).unwrap();
    }
}

#[test]
fn a_tail_shows_one_line_per_earlier_restore_whether_the_session_runs_or_rests() {
    let env = Env::new("tailnotices");
    let id = session(&env);
    env.ok(&["bash", &id, "--", "greet() { echo hello; }"]);
    for restore in 1..=2 {
        let kernel = env.kernel_pid(&id).expect("a kernel");
        kill9(kernel);
        wait_until(Duration::from_secs(20), "a new kernel", || {
            env.kernel_pid(&id).is_some_and(|k| k != kernel)
        });
        assert_eq!(env.ok(&["bash", &id, "--", "greet"]), "hello\n");
        assert_eq!(
            env.log(&id)
                .matches("kernel restored from its snapshot")
                .count(),
            restore
        );
    }
    for n in 0..5 {
        env.ok(&["bash", &id, "--", &format!("echo {n}")]);
    }
    let expect_tail = |tail: &str| {
        let lines: Vec<&str> = tail.lines().collect();
        assert_eq!(lines.len(), 4, "{tail}");
        assert!(
            lines[..2]
                .iter()
                .all(|l| l.starts_with("! ") && l.contains("kernel restored from its snapshot")),
            "{tail}"
        );
        assert_eq!(lines[2..], ["4", "[bash 8 exited 0]"], "{tail}");
    };
    expect_tail(&env.ok(&["log", &id, "--tail", "2"]));
    // Resting (no worker), the tail is read from disk by the daemon.
    env.ok(&["shutdown", "--force"]);
    expect_tail(&env.ok(&["log", &id, "--tail", "2"]));
    assert!(
        env.worker_pid(&id).is_none(),
        "no worker started to read it"
    );
}

#[test]
fn a_command_line_over_the_request_limit_says_what_to_do_in_one_line() {
    let env = Env::new("huge-command");
    let id = session(&env);
    // Each word stays under the kernel's limit for one argument.
    let word = "x".repeat(110_000);
    let mut args = vec!["bash", id.as_str(), "--", "echo"];
    args.extend(std::iter::repeat_n(word.as_str(), 10));
    let refused = env.run(&args);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{said}");
    assert_eq!(
        said,
        "eukhe: the command line is 1100014 bytes, over the 1020 KiB a request carries: put it in a script file and run that\n"
    );
    args[0] = "send";
    let refused = env.run(&args);
    assert_eq!(refused.status.code(), Some(125));
    // Just under the limit, it runs.
    args.truncate(4 + 9);
    args[0] = "bash";
    assert_eq!(env.ok(&args).len(), 9 * 110_001);
}

#[test]
fn ls_help_names_every_state_ls_shows() {
    let env = Env::new("ls-help");
    let help = env.ok(&["ls", "--help"]);
    for state in [
        "idle",
        "busy",
        "running",
        "restarting",
        "saved",
        "given-up",
        "damaged",
        "stopping",
        "removing",
    ] {
        assert!(help.contains(state), "ls --help omits {state}: {help}");
    }
}
