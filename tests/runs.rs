//! Durable runs (issue 11) on the process backend, through the real binary:
//! a run outlives its worker, its lost supervisor and a replacement by
//! another build; the session's shell keeps its whole state; background
//! jobs; cancel, queue and withdraw.
//!
//! Every process a test starts is ended when it ends, by pid: the daemon,
//! workers and kernels of its private installation (found by the state
//! directory in their environment, and in `worker.json` and `kernel.json`),
//! and every process left in a kernel's session (runs and their children).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::process::{descendants, descendants_running, recorded, still, Signal};
use crate::support::{alive, kill9, never, signal, skip, wait_for, wait_until, Env};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Run 1 (`sleep N; echo x >> F; echo done`) ran once, to its end, and
/// its end is recorded once and is not an interruption.
fn ran_once_and_whole(log: &str, file: &std::path::Path) {
    assert_eq!(lines_equal(log, "done"), 1, "{log}");
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    assert!(!log.contains("interrupted"), "{log}");
    assert!(!log.contains("cut short"), "{log}");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "x\n", "F");
}

/// How many lines of `log` are exactly `line`.
fn lines_equal(log: &str, line: &str) -> usize {
    log.lines().filter(|l| *l == line).count()
}

// Done when 1: a SIGKILLed worker leaves its run running; the next worker
// records its end once.
#[test]
fn a_run_outlives_a_sigkilled_worker_and_its_end_is_recorded_once() {
    let t = Env::new("worker-kill");
    let id = t.new_session();
    let file = t.dir.join("F");
    t.send(
        &id,
        &format!("sleep 3; echo x >> {}; echo done", file.display()),
    );
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 3");
    let worker = t.worker(&id);
    kill9(worker);
    assert!(still(run), "the run's process died with its worker");
    t.log_with(&id, "[run 1 exited 0]", Duration::from_secs(20));
    // One more run: a late duplicate of the end would be stored by now.
    let out = t.run(&["send", &id, "echo later", "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = t.log(&id);
    ran_once_and_whole(&log, &file);
    let restarted = t.worker(&id);
    assert_ne!(restarted, worker, "a new worker serves the session");
    assert!(still(kernel), "the kernel outlived the worker");
    assert_eq!(t.session(&id)["kernel_pid"], kernel.pid);
}

// A kernel's death cuts its run short, and the run is recorded so: on the
// process backend its jobs would outlive it (they are not its children but
// its shell's), so the next kernel ends what it left running.
#[test]
fn a_run_cut_short_by_its_kernels_death_does_not_go_on() {
    kill_the_kernel_of_a_busy_run("kernel-kill", |_, _| {});
}

// The same when the kernel dies between its shell starting the job and its
// recording the job's process group (`<job>.group`, removed here to stand
// for that moment): the next kernel finds the job's processes by the dead
// kernel's session.
#[test]
fn a_run_whose_group_its_dead_kernel_never_recorded_does_not_go_on() {
    kill_the_kernel_of_a_busy_run("kernel-kill-unrecorded", |t, id| {
        let group = t.session_dir(id).join("spool").join("r1.group");
        wait_until(
            Duration::from_secs(5),
            "the run's group is recorded",
            || group.exists(),
        );
        std::fs::remove_file(&group).unwrap();
    });
}

/// SIGKILL the kernel of a run that writes a file after 3 s (`before_kill`
/// runs just before), then check the run is recorded interrupted, never
/// writes the file, and the session serves the next input.
fn kill_the_kernel_of_a_busy_run(name: &str, before_kill: impl Fn(&Env, &str)) {
    let t = Env::new(name);
    let id = t.new_session();
    let file = t.dir.join("F");
    t.send(&id, &format!("sleep 3; echo x >> {}", file.display()));
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 3");
    before_kill(&t, &id);
    kill9(kernel.pid);
    t.log_with(&id, "[run 1 interrupted]", Duration::from_secs(20));
    wait_until(Duration::from_secs(5), "the run's process ends", || {
        !still(run)
    });
    never(
        Duration::from_secs(4),
        &format!(
            "the run went on after its kernel died: {} was written",
            file.display()
        ),
        || file.exists(),
    );
    let out = t.run(&["send", &id, "echo later", "--wait"]);
    assert_eq!(text(&out.stdout), "later\n", "{}", text(&out.stderr));
}

// A run that ends while the state disk is full ends once space returns,
// told once to its `send --wait` client: the worker retries its end, and
// the kernel's log line about it (its log file is on that disk) failing to
// be written ends nothing (it used to end the kernel's reader of its shell's
// reports, and the run stayed busy for good).
#[test]
fn a_run_that_ends_on_a_full_disk_ends_once_space_returns() {
    if skip::not_root("needs root to mount a small tmpfs as the state directory") {
        return;
    }
    let t = Env::new("full-disk");
    let state = t.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs"])
        .arg(&state)
        .status()
        .expect("mount");
    assert!(
        mounted.success(),
        "cannot mount a tmpfs on {}",
        state.display()
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(state.clone());
    let id = t.new_session();
    // The marker is outside the small disk: the command has started (a
    // busy session may still be handing its run to the kernel).
    let started = t.dir.join("started");
    let command = format!("touch '{}'; sleep 2", started.display());
    let mut client = t
        .command(&["send", "--wait", &id, &command])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("eukhe send --wait");
    wait_until(Duration::from_secs(10), "the command runs", || {
        started.exists()
    });
    let filler = state.join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    // The run ends in the kernel while the disk is full: its end is the
    // kernel's, which shows nowhere until the disk has room again.
    std::thread::sleep(Duration::from_secs(3));
    std::fs::remove_file(&filler).unwrap();
    let mut status = None;
    wait_until(Duration::from_secs(15), "the client exits", || {
        status = client.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success(), "{status:?}");
    let log = t.log(&id);
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    wait_until(Duration::from_secs(10), "the session is idle", || {
        t.session(&id)["state"] == "idle"
    });
}

// Done when 2: the supervisor is lost past the lost-exit windows; the
// worker exits, the run goes on, the next client's supervisor resumes it.
#[test]
fn a_run_outlives_its_lost_supervisor_and_the_next_supervisor_resumes_it() {
    let mut t = Env::new("orphan");
    t.set_var("EUKHE_WORKER_LOST_EXIT_MS", "500");
    t.set_var("EUKHE_TEST_SHORT_WINDOWS", "1");
    let id = t.new_session();
    let file = t.dir.join("F");
    t.send(
        &id,
        &format!("sleep 5; echo x >> {}; echo done", file.display()),
    );
    t.send(&id, "echo second");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 5");
    let worker = t.worker(&id);
    kill9(t.daemon());
    // No client may speak now: it would start the next supervisor.
    wait_until(Duration::from_secs(10), "the orphaned worker exits", || {
        !alive(worker)
    });
    assert!(still(kernel), "the kernel left with its worker");
    assert!(
        still(run),
        "the run's process ended with the worker (or the run was too short)"
    );
    let log = t.log_with(&id, "[run 2 exited 0]", Duration::from_secs(20));
    ran_once_and_whole(&log, &file);
    assert_eq!(lines_equal(&log, "second"), 1, "{log}");
    assert_eq!(t.session(&id)["kernel_pid"], kernel.pid);
}

// Done when 2: a worker of another build is replaced while its run is busy;
// the run goes on under the new worker and its end is recorded once.
#[test]
fn a_busy_run_survives_the_replacement_of_another_builds_worker() {
    let mut t = Env::new("builds");
    t.set_var("EUKHE_BUILD_ID", "old-build");
    let id = t.new_session();
    let file = t.dir.join("F");
    t.send(
        &id,
        &format!("sleep 5; echo x >> {}; echo done", file.display()),
    );
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 5");
    let old_worker = t.worker(&id);
    assert_eq!(t.session(&id)["build"], "old-build");
    kill9(t.daemon());
    t.set_var("EUKHE_BUILD_ID", "new-build");
    wait_until(
        Duration::from_secs(15),
        "the session runs on the new build",
        || t.session(&id)["build"] == "new-build",
    );
    assert!(still(run), "the run's process ended with the replacement");
    wait_until(Duration::from_secs(5), "the old worker ends", || {
        !alive(old_worker)
    });
    t.log_with(&id, "[run 1 exited 0]", Duration::from_secs(20));
    let out = t.run(&["send", &id, "echo later", "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let log = t.log(&id);
    ran_once_and_whole(&log, &file);
    assert!(still(kernel), "the kernel outlived the replacement");
    t.worker(&id);
}

// Done when (spool): output written while no worker is connected is kept,
// once and in order.
#[test]
fn output_written_while_no_worker_is_connected_is_kept_once_in_order() {
    let t = Env::new("spool");
    let id = t.new_session();
    t.send(
        &id,
        "for i in $(seq 1 50); do echo line$i; sleep 0.05; done",
    );
    let log = t.log_with(&id, "\nline10\n", Duration::from_secs(10));
    assert!(
        !log.contains("[run 1 exited"),
        "the run ended too soon:\n{log}"
    );
    let worker = t.worker(&id);
    kill9(worker);
    let log = t.log_with(&id, "[run 1 exited 0]", Duration::from_secs(20));
    let lines: Vec<&str> = log.lines().filter(|l| l.starts_with("line")).collect();
    let expected: Vec<String> = (1..=50).map(|i| format!("line{i}")).collect();
    assert_eq!(lines, expected, "{log}");
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    assert_ne!(t.worker(&id), worker);
}

const SET_STATE: &str = "f() { echo \"fn:$1\"; }; alias hi='echo alias-hi'; secret='a b'; \
                         umask 027; set -o pipefail; shopt -s extglob; trap 'echo got-usr1' USR1";

const SHOW_STATE: &str = "f x; hi; echo \"secret:$secret\"; \
                          bash -c 'echo \"child:${secret-unset}\"'; umask; \
                          [[ -o pipefail ]] && echo pipefail-on; \
                          shopt -q extglob && echo extglob-on; trap -p USR1";

const STATE_SHOWN: &str = "fn:x\nalias-hi\nsecret:a b\nchild:unset\n0027\npipefail-on\n\
                           extglob-on\ntrap -- 'echo got-usr1' SIGUSR1\n";

// Done when 4: functions, aliases, unexported variables, umask, set -o and
// shopt options and traps persist between commands, and come back when the
// kernel is killed.
#[test]
fn shell_state_persists_between_commands_and_across_a_kernel_kill() {
    let t = Env::new("state");
    let id = t.new_session();
    assert_eq!(t.bash(&id, SET_STATE), "");
    assert_eq!(t.bash(&id, SHOW_STATE), STATE_SHOWN);
    let queued = t.run(&["send", &id, SHOW_STATE, "--wait"]);
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    assert_eq!(text(&queued.stdout), STATE_SHOWN, "in a queued run");
    let kernel = t.kernel(&id);
    assert_eq!(t.session(&id)["kernel_pid"], kernel.pid);
    assert!(
        !t.log(&id).contains("kernel restored"),
        "a first kernel restores nothing"
    );
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert!(!alive(kernel.pid));
    assert_eq!(t.bash(&id, SHOW_STATE), STATE_SHOWN, "after the restore");
    let log = t.log(&id);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    assert_ne!(t.session(&id)["state"], "given-up");
}

// A command that leaves the options as it found them does not list them
// (the kernel keeps those it began with); one that changes them back
// lists them again, and the change holds.
#[test]
fn options_turned_on_then_off_again_stay_off() {
    let t = Env::new("options");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "set -o pipefail; shopt -s extglob"), "");
    assert_eq!(t.bash(&id, "true"), "");
    let shown = "[[ -o pipefail ]] && echo pipefail; shopt -q extglob && echo extglob; :";
    assert_eq!(t.bash(&id, shown), "pipefail\nextglob\n");
    assert_eq!(t.bash(&id, "set +o pipefail; shopt -u extglob"), "");
    assert_eq!(t.bash(&id, "true"), "");
    assert_eq!(t.bash(&id, shown), "");
}

// Done when 4: a run queued right behind another starts from the state
// that one left, even when listing that state takes a while (four thousand
// variables): its end is told only once the state is merged, or (if that
// ever changes) the next run must wait for the merge.
#[test]
fn a_run_queued_right_behind_another_starts_from_the_state_it_left() {
    let t = Env::new("behind");
    let id = t.new_session();
    let fill = "for i in {1..4000}; do declare \"filler_$i=$i\"; done";
    assert_eq!(t.bash(&id, fill), "");
    for round in 0..5 {
        let first = t.run(&["send", &id, &format!("export MARK={round}")]);
        assert!(first.status.success(), "{}", text(&first.stderr));
        let second = t.run(&["send", &id, "echo \"mark=$MARK\"", "--wait"]);
        assert!(second.status.success(), "{}", text(&second.stderr));
        assert_eq!(
            text(&second.stdout),
            format!("mark={round}\n"),
            "round {round}"
        );
    }
    assert_eq!(t.bash(&id, "echo $filler_4000"), "4000\n");
}

// Done when 4 (What to build 2: eukhe's shell code is immune to the user's
// state, and leaves nothing in it): the user's shell has exactly the traps
// the user set.
#[test]
fn the_users_shell_has_only_the_traps_the_user_set() {
    let t = Env::new("traps");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "trap -p"), "", "in a new session");
    assert_eq!(t.bash(&id, "trap -p"), "", "in the next command");
    t.bash(&id, "trap 'echo bye' USR1");
    assert_eq!(t.bash(&id, "trap -p"), "trap -- 'echo bye' SIGUSR1\n");
}

/// Standard error of `send --wait` without its own first line, `eukhe:
/// queued as run N`: what the command wrote there.
fn without_queued_line(stderr: &[u8]) -> String {
    text(stderr)
        .lines()
        .filter(|line| !line.starts_with("eukhe: queued as run "))
        .map(|line| format!("{line}\n"))
        .collect()
}

// Under the user's `set -x` the trace shows the user's commands and none
// of eukhe's own (its `eval`, its stdin redirection, its capture), for a
// queued run and for a user bash with and without a file on stdin; a
// command that never started (a syntax error) leaves the trace on. Under
// `set -v` the command's text is echoed once.
#[test]
fn under_set_x_the_trace_shows_only_the_users_commands() {
    let t = Env::new("xtrace");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "set -x"), "");
    let only_traced = |what: &str, stderr: &[u8], command: &str| {
        let stderr = text(stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(!lines.is_empty(), "{what}: nothing traced");
        for line in &lines {
            let traced = line.trim_start_matches('+');
            assert!(
                line.starts_with('+') && traced.starts_with(' ') && command.contains(traced.trim()),
                "{what}: a trace line that is not the user's command: {line:?} in {stderr:?}"
            );
        }
    };
    let bash = t.run(&["bash", &id, "--", "echo one; echo two"]);
    assert_eq!(text(&bash.stdout), "one\ntwo\n");
    only_traced("user bash", &bash.stderr, "echo one; echo two");
    let input = t.dir.join("input");
    std::fs::write(&input, "from a file\n").unwrap();
    let piped = t
        .command(&["bash", &id, "--", "cat"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(text(&piped.stdout), "from a file\n");
    only_traced("user bash reading a file", &piped.stderr, "cat");
    let queued = t.run(&["send", &id, "echo queued", "--wait"]);
    assert_eq!(text(&queued.stdout), "queued\n");
    only_traced(
        "queued run",
        without_queued_line(&queued.stderr).as_bytes(),
        "echo queued",
    );
    let broken = t.run(&["bash", &id, "--", "if"]);
    assert!(text(&broken.stderr).contains("syntax error"), "{broken:?}");
    let on = "[[ -o xtrace ]] && echo on";
    let after = t.run(&["bash", &id, "--", on]);
    assert_eq!(text(&after.stdout), "on\n", "set -x lost: {after:?}");
    only_traced("after a syntax error", &after.stderr, on);
    // Under `set -v` the command's text is echoed, and nothing of eukhe's.
    t.run(&["bash", &id, "--", "set +x -v"]);
    for args in [
        ["bash", &id, "--", "echo v"],
        ["send", &id, "echo v", "--wait"],
    ] {
        let verbose = t.run(&args);
        assert_eq!(text(&verbose.stdout), "v\n", "{args:?}");
        assert_eq!(without_queued_line(&verbose.stderr), "echo v\n", "{args:?}");
    }
    // Nothing of eukhe's reaches the environment of the user's programs.
    let ours = t.bash(&id, "set +v; env | grep -c __eukhe || :");
    assert_eq!(ours, "0\n");
}

// eukhe's restore is immune to aliases of any name: `set`, `trap`,
// `builtin` and `alias` aliased, and a function named `alias`, leave every
// option, trap and alias restored in the next command (its shell restores
// the snapshot: a template's or its own).
#[test]
fn aliases_and_functions_named_like_the_restores_commands_change_nothing() {
    let t = Env::new("aliased");
    let id = t.new_session();
    let setup = "shopt -s expand_aliases; set -o pipefail; trap 'echo usr1' USR1; \
                 alias ll='echo listed' set=false trap=false builtin=false; \
                 alias() { echo not-reached; }";
    assert_eq!(t.bash(&id, setup), "");
    let check = "[[ -o pipefail ]] && echo pipefail; \\trap -p USR1; ll; \\unset -f alias; \
                 \\builtin alias set";
    let expected = "pipefail\ntrap -- 'echo usr1' SIGUSR1\nlisted\nalias set='false'\n";
    assert_eq!(t.bash(&id, check), expected);
    // The same, restored by a kernel started again over the snapshot.
    t.bash(&id, "alias() { echo not-reached; }");
    let kernel = t.kernel(&id);
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert_eq!(t.bash(&id, check), expected, "after the restore");
}

// A killed kernel cannot clean up after itself: the next kernel removes
// what it left in the session's scratch directory (a retired template's
// script, a job's capture), and the session works on.
#[test]
fn a_new_kernel_removes_what_a_killed_one_left_in_scratch() {
    let t = Env::new("sweep");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo one"), "one\n");
    let scratch = t.session_dir(&id).join("scratch");
    let left = scratch.join("template-99.late");
    std::fs::write(&left, "echo left\n").unwrap();
    let kernel = t.kernel(&id);
    kill9(kernel.pid);
    t.wait_for_kernel_after(&id, kernel);
    assert_eq!(t.bash(&id, "echo two"), "two\n");
    assert!(!left.exists(), "{} is still there", left.display());
}

// A worker's log file does not grow without bound: past 8 MiB it is
// renamed `worker.log.1` and the worker logs on into a new `worker.log`.
#[test]
fn a_full_worker_log_is_rotated_and_the_worker_logs_on() {
    let t = Env::new("logrotate");
    let id = t.new_session();
    let sent = t.run(&["send", &id, "echo one", "--wait"]);
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let log = t.session_dir(&id).join("worker.log");
    // Its worker's standard error is this file: grow it past the bound.
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, &vec![b'.'; 9 * 1024 * 1024]).unwrap();
    let sent = t.run(&["send", &id, "echo two", "--wait"]);
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let older = t.session_dir(&id).join("worker.log.1");
    wait_until(Duration::from_secs(5), "the log is rotated", || {
        older.exists()
            && std::fs::read_to_string(&log).is_ok_and(|now| now.contains("run 2 exited 0"))
    });
    assert!(std::fs::metadata(&log).unwrap().len() < 4096);
    assert!(std::fs::metadata(&older).unwrap().len() > 9 * 1024 * 1024);
}

// Done when 4: a command that ends its shell or sets hostile options ends
// or affects only its own run; eukhe's shell code is immune.
#[test]
fn a_command_that_ends_or_bends_its_shell_affects_only_its_own_run() {
    let t = Env::new("hostile");
    let id = t.new_session();
    t.bash(&id, "KEEP=kept");
    let cases: [(&str, Option<i32>); 7] = [
        ("exit 3", Some(3)),
        ("exec true", Some(0)),
        ("set -e; false; echo not-reached", None),
        ("set -u; echo $nope; echo not-reached", None),
        ("set -C", Some(0)),
        ("builtin() { :; }", Some(0)),
        ("set() { echo not-reached; }", Some(0)),
    ];
    for (n, (command, status)) in cases.iter().enumerate() {
        let out = t.run(&["send", &id, command, "--wait"]);
        match status {
            Some(status) => assert_eq!(out.status.code(), Some(*status), "{command}"),
            None => assert!(
                !out.status.success() && out.status.code().is_some(),
                "{command}: {:?}",
                out.status
            ),
        }
        assert!(!text(&out.stdout).contains("not-reached"), "{command}");
        // The next command works, sees the state, and its own changes keep.
        let next = t.run(&[
            "bash",
            &id,
            "--",
            &format!("echo \"next:$KEEP\"; AFTER{n}={n}"),
        ]);
        assert!(
            next.status.success(),
            "after {command}: {}",
            text(&next.stderr)
        );
        assert_eq!(text(&next.stdout), "next:kept\n", "after {command}");
        wait_until(
            Duration::from_secs(5),
            &format!("the session is idle after {command}"),
            || t.session(&id)["state"] == "idle",
        );
        assert_eq!(t.session(&id)["failures_in_window"], 0, "after {command}");
    }
    let kept = t.bash(
        &id,
        "echo $AFTER0 $AFTER1 $AFTER2 $AFTER3 $AFTER4 $AFTER5 $AFTER6; [[ -o noclobber ]] && echo noclobber",
    );
    // `set -C` is the user's option (set -o options persist); it does not
    // stop eukhe from keeping the state.
    assert_eq!(kept, "0 1 2 3 4 5 6\nnoclobber\n");
    let log = t.log(&id);
    // User bash 1 (`KEEP=kept`) took input 1: `exit 3` was run 2.
    assert!(log.contains("[run 2 exited 3]"), "{log}");
    assert!(log.contains("not kept: function builtin"), "{log}");
    assert!(log.contains("not kept: function set"), "{log}");
    assert!(!log.contains("given up"), "{log}");
}

// Done when 4: a queued run's stdin is /dev/null: `read` cannot swallow
// the inputs queued behind it.
#[test]
fn a_queued_read_does_not_swallow_the_inputs_queued_behind_it() {
    let t = Env::new("read");
    let id = t.new_session();
    t.send(&id, "sleep 0.5");
    t.send(&id, "read x; echo \"got:$x\"");
    t.send(&id, "echo after");
    let last = t.run(&["send", &id, "echo last", "--wait"]);
    assert!(last.status.success(), "{}", text(&last.stderr));
    assert_eq!(text(&last.stdout), "last\n");
    let log = t.log(&id);
    assert_eq!(lines_equal(&log, "got:"), 1, "{log}");
    assert_eq!(lines_equal(&log, "after"), 1, "{log}");
    for run in 1..=4 {
        assert!(log.contains(&format!("[run {run} exited 0]")), "{log}");
    }
}

// Done when 5: `export PATH=/nowhere` loses nothing.
#[test]
fn resetting_path_after_export_path_nowhere_keeps_home_and_the_exports() {
    let t = Env::new("path");
    let id = t.new_session();
    let home = std::env::var("HOME").expect("HOME is set for the tests");
    assert_eq!(t.bash(&id, "export PATH=/nowhere; export KEEP=1"), "");
    assert_eq!(
        t.bash(&id, "PATH=/usr/bin:/bin; echo \"$HOME $KEEP\""),
        format!("{home} 1\n")
    );
    assert_eq!(
        t.bash(&id, "ls / >/dev/null && echo found; printenv KEEP"),
        "found\n1\n"
    );
}

// Done when 6: user bash beside a busy run; every change is kept.
#[test]
fn twenty_parallel_exports_beside_a_busy_run_are_all_kept() {
    let t = Env::new("parallel");
    let id = t.new_session();
    t.send(&id, "sleep 5");
    let kernel = t.kernel(&id);
    let run = t.run_process(kernel, "sleep 5");
    let children: Vec<_> = (1..=20)
        .map(|i| {
            t.command(&["bash", &id, "--", &format!("export V{i}={i}")])
                .output_in_thread()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.join().unwrap();
        assert!(out.status.success(), "V{}: {}", i + 1, text(&out.stderr));
        // Each began in the shell state of its time, traps and options
        // too (a template dropped under it once took its `late` script).
        assert_eq!(text(&out.stderr), "", "V{}", i + 1);
    }
    let show = "for i in $(seq 1 20); do v=V$i; printf '%s ' \"${!v}\"; done; echo";
    let expected: String = (1..=20).map(|i| format!("{i} ")).collect::<String>() + "\n";
    assert!(still(run), "the run was no longer busy");
    assert_eq!(t.bash(&id, show), expected, "beside the run");
    // After the run ends, in a queued run: the run's end kept them too.
    let queued = t.run(&["send", &id, show, "--wait"]);
    assert!(queued.status.success(), "{}", text(&queued.stderr));
    assert_eq!(text(&queued.stdout), expected, "after the run");
    let log = t.log(&id);
    assert!(log.contains("[run 1 exited 0]"));
    // No job started a background process: no eukhe process of its own
    // was counted as one.
    assert!(!log.contains("background job"), "{log}");
}

trait OutputInThread {
    fn output_in_thread(self) -> std::thread::JoinHandle<Output>;
}

impl OutputInThread for std::process::Command {
    fn output_in_thread(mut self) -> std::thread::JoinHandle<Output> {
        std::thread::spawn(move || self.output().expect("run eukhe"))
    }
}

// Done when 7: `cmd &` returns at once; the job keeps the session busy
// until it ends, and does not hold the queue.
#[test]
fn a_background_job_returns_at_once_and_keeps_the_session_busy_until_it_ends() {
    let t = Env::new("background");
    let id = t.new_session();
    t.kernel(&id);
    let start = Instant::now();
    let out = t.bash(&id, "sleep 4 & echo started");
    let took = start.elapsed();
    assert_eq!(out, "started\n");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // The kernel counts the jobs a job left behind when that job ends (not
    // only at its next tick, a second later).
    wait_until(
        Duration::from_millis(300),
        "`ls` shows the background job of the bash that just returned",
        || t.session(&id)["jobs"].as_u64().unwrap_or(0) >= 1,
    );
    t.send(&id, "sleep 4 & echo from-run");
    let next = t.run(&["send", &id, "echo next", "--wait"]);
    assert!(next.status.success(), "{}", text(&next.stderr));
    assert_eq!(text(&next.stdout), "next\n");
    let mut session = t.session(&id);
    wait_until(
        Duration::from_millis(1500),
        "`ls` shows the background jobs",
        || {
            session = t.session(&id);
            session["jobs"].as_u64().unwrap_or(0) >= 1
        },
    );
    assert!(
        start.elapsed() < Duration::from_millis(3500),
        "too slow to tell: {:?}",
        start.elapsed()
    );
    assert_eq!(session["state"], "busy", "{session}");
    wait_until(
        Duration::from_secs(15),
        "the session is idle with no jobs",
        || {
            let session = t.session(&id);
            session["state"] == "idle" && session["jobs"] == 0
        },
    );
    assert!(
        start.elapsed() >= Duration::from_secs(4),
        "idle before the background jobs ended ({:?})",
        start.elapsed()
    );
    // When the last one ends, a notice says so (once).
    let log = t.log_with(&id, "background job", Duration::from_secs(5));
    let notices = log
        .lines()
        .filter(|l| l.starts_with("! ") && l.contains("background job"))
        .count();
    assert_eq!(notices, 1, "{log}");
    // Run 2 (after user bash 1) ended as soon as its shell did, before
    // run 3 ran: the job it left behind did not hold the queue (run 3's
    // input may be stored in between, since it was queued while run 2 ran).
    let at = |text: &str| {
        log.find(text)
            .unwrap_or_else(|| panic!("no {text:?} in {log}"))
    };
    assert!(at("\nfrom-run\n") < at("[run 2 exited 0]"), "{log}");
    assert!(at("[run 2 exited 0]") < at("\nnext\n"), "{log}");
    assert!(log.contains("[run 3 exited 0]"), "{log}");
}

// An idle session lets its shell template go after `template_idle` (an
// idle session need not hold that shell's memory): the waiting job shell
// of the dropped template ends, and that is no run's end; the next command
// still runs, and a template comes back after it. The window here is the
// test one (`EUKHE_TEST_SHORT_WINDOWS`); that the templates go at exactly
// `template_idle`, not before, and are not made again while the session
// stays idle is the kernel core's fake-clock test
// (`kernel::core::tests::an_idle_sessions_templates_go_at_template_idle_and_not_before_nor_again`).
#[test]
fn an_idle_sessions_template_goes_and_comes_back_with_the_next_command() {
    let mut t = Env::new("idle-template");
    t.set_var("EUKHE_TEST_SHORT_WINDOWS", "1");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo hi"), "hi\n");
    let templates = || -> Vec<String> {
        t.scratch_names(&id)
            .into_iter()
            .filter(|name| name.starts_with("template-"))
            .collect()
    };
    wait_until(
        Duration::from_secs(5),
        "the session's template is up",
        || !templates().is_empty(),
    );
    wait_until(
        Duration::from_secs(10),
        "the idle session's template goes",
        || templates().is_empty(),
    );
    assert_eq!(t.bash(&id, "echo again"), "again\n");
    wait_until(
        Duration::from_secs(5),
        "a template is made again after the command",
        || !templates().is_empty(),
    );
}

// A run ends when its shell has captured the state it leaves and closed
// its output (sooner than its shell's exit), never at a close of its
// output alone: a command that closes its own output runs to its end, with
// its status; and what a run leaves running is counted either way, a
// disowned job whose output goes elsewhere too.
#[test]
fn a_run_that_closes_its_output_still_runs_to_its_end_and_what_it_leaves_is_counted() {
    let t = Env::new("closed-output");
    let id = t.new_session();
    t.kernel(&id);
    let done = t.dir.join("done");
    let start = Instant::now();
    let closed = t.run(&[
        "bash",
        &id,
        "--",
        &format!(
            "exec >&- 2>&-; sleep 1; echo done > {}; (exit 3)",
            done.display()
        ),
    ]);
    assert_eq!(closed.status.code(), Some(3), "{}", text(&closed.stderr));
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(std::fs::read_to_string(&done).unwrap(), "done\n");
    assert_eq!(t.bash(&id, "echo next"), "next\n");

    let out = t.bash(&id, "sleep 3 >/dev/null 2>&1 & disown; echo started");
    assert_eq!(out, "started\n");
    wait_until(
        Duration::from_millis(300),
        "`ls` shows the disowned job of the bash that just returned",
        || t.session(&id)["jobs"].as_u64().unwrap_or(0) >= 1,
    );
    assert_eq!(t.session(&id)["state"], "busy");
    wait_until(Duration::from_secs(10), "the session is idle again", || {
        let session = t.session(&id);
        session["state"] == "idle" && session["jobs"] == 0
    });
}

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

// A run the kernel accepted but could not hand to a shell (its scratch
// directory is gone, as on a full disk) ends at once with the status and the
// reason; it was never running, so it is not "interrupted", and the session
// goes on once the cause is gone.
#[test]
fn a_run_the_kernel_cannot_start_ends_with_the_reason_not_interrupted() {
    let t = Env::new("cannot-start");
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo warm"), "warm\n");
    let scratch = t.session_dir(&id).join("scratch");
    std::fs::remove_dir_all(&scratch).unwrap();
    std::fs::write(&scratch, b"not a directory").unwrap();

    let failed = t.run(&["send", "--wait", &id, "echo never"]);
    assert_eq!(failed.status.code(), Some(126), "{failed:?}");
    assert!(text(&failed.stdout).is_empty(), "{failed:?}");
    // Inputs and user bash share one numbering: the bash was 1.
    let log = t.log_with(&id, "[run 2 exited 126]", Duration::from_secs(10));
    assert!(log.contains("! run 2 did not start: "), "{log}");
    assert!(log.contains("Not a directory"), "{log}");
    assert!(!log.contains("interrupted"), "{log}");
    assert!(!log.contains("cut short"), "{log}");

    std::fs::remove_file(&scratch).unwrap();
    std::fs::create_dir(&scratch).unwrap();
    let later = t.run(&["send", "--wait", &id, "echo later"]);
    assert_eq!(text(&later.stdout), "later\n", "{later:?}");
    let log = t.log(&id);
    assert_eq!(log.matches("[run 2 exited 126]").count(), 1, "{log}");
    assert_eq!(log.matches("[run 3 exited 0]").count(), 1, "{log}");
    wait_until(Duration::from_secs(5), "the session is idle", || {
        t.session(&id)["state"] == "idle"
    });
}

// A session made from the spare (worker and kernel started ahead): as soon
// as `new` claims it, the spare template's waiting job shell restores the
// session's first snapshot, before any command comes; the first command
// runs in it (the client's environment and `--env`, the directory), and
// what it sets is there for the next.
#[test]
fn a_claimed_spares_first_command_finds_its_shell_restored_ahead() {
    let mut t = Env::new("claimed");
    t.set_var("FROM_THE_CLIENT", "client value");
    t.ok(&["status"]);
    let sessions = t.state_dir().join("sessions");
    // A spare whose worker and kernel are up: `new` claims only such a one.
    let ready = |dir: &std::path::Path| {
        dir.join("spare.json").exists()
            && !dir.join("meta.json").exists()
            && recorded(&dir.join("worker.json")).is_some_and(still)
            && recorded(&dir.join("kernel.json")).is_some_and(still)
    };
    let mut spare = String::new();
    wait_until(Duration::from_secs(10), "a spare session", || {
        spare = std::fs::read_dir(&sessions)
            .into_iter()
            .flatten()
            .flatten()
            .find(|d| ready(&d.path()))
            .map(|d| d.file_name().to_string_lossy().into_owned())
            .unwrap_or_default();
        !spare.is_empty()
    });
    let cwd = t.dir.join("work");
    std::fs::create_dir_all(&cwd).unwrap();
    let cwd = cwd.canonicalize().unwrap();
    let id = t
        .ok(&[
            "new",
            "--cwd",
            &cwd.to_string_lossy(),
            "--env",
            "BY_ENV=set",
        ])
        .trim()
        .to_string();
    assert_eq!(id, spare, "new claimed the spare");
    let kernel = t.kernel(&id);
    wait_until(
        Duration::from_secs(15),
        "a shell of the kernel in the session's directory before any command",
        || {
            descendants(kernel.pid)
                .iter()
                .any(|p| std::fs::read_link(format!("/proc/{p}/cwd")).ok().as_ref() == Some(&cwd))
        },
    );
    let first = t
        .command(&[
            "bash",
            &id,
            "--",
            r#"echo "$FROM_THE_CLIENT|$BY_ENV|$PWD"; FIRST=1"#,
        ])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stderr), "", "the restore says nothing");
    assert_eq!(
        text(&first.stdout),
        format!("client value|set|{}\n", cwd.display())
    );
    assert_eq!(t.bash(&id, "echo $FIRST"), "1\n");
}

// A job's output pipes are made while the job before it runs (a pair kept
// spare, moved to the job's names when it starts): every job still gets its
// own pair, its stdout and stderr apart, and once jobs end the scratch
// directory holds only the spare pair and the template's files, no job's.
#[test]
fn each_job_gets_its_own_output_pipes_made_ahead_and_none_outlives_its_job() {
    let t = Env::new("spare-pipes");
    let id = t.new_session();
    for n in 0..5 {
        let out = t.run(&["bash", &id, "--", &format!("echo out{n}; echo err{n} >&2")]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text(&out.stdout), format!("out{n}\n"), "{out:?}");
        assert_eq!(text(&out.stderr), format!("err{n}\n"), "{out:?}");
    }
    let names = || t.scratch_names(&id);
    wait_until(Duration::from_secs(5), "the jobs' files are gone", || {
        names()
            .iter()
            .all(|n| n.starts_with("spare-") || n.starts_with("template-"))
    });
    let spare: Vec<String> = names()
        .into_iter()
        .filter(|n| n.starts_with("spare-"))
        .collect();
    assert_eq!(spare.len(), 2, "one spare pair: {:?}", names());
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

// An upgrade replaces the executable under a running daemon: the daemon
// still starts workers and kernels of its own build (`/proc/self/exe`),
// for new sessions and for restarts, instead of failing on the path it
// started from until the session is given up.
#[test]
fn a_daemon_whose_executable_was_removed_still_starts_workers_and_kernels() {
    let t = Env::new("exe-removed");
    let copy = t.dir.join("bin/eukhe");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_eukhe"), &copy).unwrap();
    let mut status = std::process::Command::new(&copy);
    status.arg("status");
    for (name, value) in &t.vars {
        status.env(name, value);
    }
    let started = status.output().unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    std::fs::remove_file(&copy).unwrap();

    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo hi"), "hi\n");
    let worker = t.session(&id)["pid"].as_u64().expect("a worker pid") as u32;
    kill9(worker);
    wait_until(Duration::from_secs(10), "a new worker serves", || {
        let session = t.session(&id);
        session["state"] == "idle" && session["pid"].as_u64() != Some(u64::from(worker))
    });
    assert_eq!(t.bash(&id, "echo again"), "again\n");
    assert_eq!(t.session(&id)["failures_in_window"], 1);
}

// An upgrade replaces the executable under an attached client, then its
// daemon is lost: the client relaunches a daemon of its own build (its
// `/proc/self/exe`), not whatever the path it started from leads to now.
#[test]
fn an_attached_client_relaunches_a_daemon_of_its_own_build_after_an_upgrade() {
    let t = Env::new("relaunch-own-build");
    let copy = t.dir.join("bin/eukhe");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_eukhe"), &copy).unwrap();
    let id = t.new_session();
    assert_eq!(t.bash(&id, "echo before"), "before\n");
    let old_daemon = t.daemon_pid();
    let screen = t.dir.join("attach.out");
    let mut attach = std::process::Command::new(&copy);
    attach
        .args(["attach", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::fs::File::create(&screen).unwrap())
        .stderr(std::process::Stdio::null());
    for (name, value) in &t.vars {
        attach.env(name, value);
    }
    let mut attached = attach.spawn().unwrap();
    wait_until(Duration::from_secs(10), "the client is attached", || {
        std::fs::read_to_string(&screen).is_ok_and(|s| s.contains("before"))
    });
    // The upgrade: another program renamed over the path.
    let marker = t.dir.join("the-new-build-ran");
    let upgrade = t.dir.join("bin/eukhe.new");
    let script = format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 3\n", marker.display());
    std::fs::write(&upgrade, script).unwrap();
    std::fs::set_permissions(
        &upgrade,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::rename(&upgrade, &copy).unwrap();
    kill9(old_daemon);
    wait_until(Duration::from_secs(5), "the daemon is gone", || {
        !alive(old_daemon)
    });
    wait_until(Duration::from_secs(20), "a daemon is relaunched", || {
        let socket = t.dir.join("run/eukhe.sock");
        std::os::unix::net::UnixStream::connect(socket).is_ok()
    });
    let status: serde_json::Value = serde_json::from_str(&t.ok(&["status", "--json"])).unwrap();
    assert_ne!(status["pid"].as_u64(), Some(u64::from(old_daemon)));
    // The relaunched daemon runs the client's own executable: the file
    // the upgrade renamed over, which lives on only as the client's.
    let pid = status["pid"].as_u64().unwrap();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, PathBuf::from(format!("{} (deleted)", copy.display())));
    assert!(
        !marker.exists(),
        "the client ran the upgraded file: {:?}",
        std::fs::read_to_string(&marker)
    );
    drop(attached.stdin.take());
    let _ = attached.wait();
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

// A user bash whose kernel dies under it exits 255 saying why, as `send
// --wait` does for a run (it used to exit 255 with nothing said).
#[test]
fn a_bash_whose_kernel_dies_exits_255_saying_why() {
    let t = Env::new("bash-kernel-lost");
    let id = t.new_session();
    let shown = t.dir.join("shown");
    let mut command = t.command(&["bash", &id, "--", "echo started; sleep 30"]);
    command.stdout(std::fs::File::create(&shown).unwrap());
    let client = command.output_in_thread();
    wait_until(Duration::from_secs(10), "the bash has started", || {
        std::fs::read_to_string(&shown).is_ok_and(|s| s.contains("started\n"))
    });
    kill9(t.kernel(&id).pid);
    let out = client.join().unwrap();
    assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "eukhe: bash 1 was cut short: the kernel running it is gone, or it never reached one; it does not run again\n"
    );
}
