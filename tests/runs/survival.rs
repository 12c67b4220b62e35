//! A run outlives what fails around it: its worker, its kernel's death,
//! a full disk, its lost supervisor, a replacement by another build.

use std::path::PathBuf;
use std::time::Duration;

use super::{lines_equal, text, OutputInThread};
use crate::support::process::still;
use crate::support::{alive, kill9, never, skip, wait_until, Env};

/// Run 1 (`sleep N; echo x >> F; echo done`) ran once, to its end, and
/// its end is recorded once and is not an interruption.
fn ran_once_and_whole(log: &str, file: &std::path::Path) {
    assert_eq!(lines_equal(log, "done"), 1, "{log}");
    assert_eq!(log.matches("[run 1 exited 0]").count(), 1, "{log}");
    assert!(!log.contains("interrupted"), "{log}");
    assert!(!log.contains("cut short"), "{log}");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "x\n", "F");
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
