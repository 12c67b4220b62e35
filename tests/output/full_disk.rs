//! A full state disk: what could not be kept is kept whole or told once,
//! and a worker or session it stops says why and leaves nothing behind.

use std::time::{Duration, Instant};

use super::kill_worker_and_wait_for_the_next;
use crate::support::small_disk::{self, fill, SmallDisk};
use crate::support::{wait_until, Env};

/// A private installation whose state directory is a 16 MiB disk of its
/// own, or `None` when the test cannot run here. The disk comes first, so
/// bound as `(disk, env)` it outlives the installation's cleanup.
fn on_a_small_disk(name: &str) -> Option<(SmallDisk, Env)> {
    let env = Env::new(name);
    let disk = small_disk::for_test(&env.dir.join("state"))?;
    let env = env.with("EUKHE_STATE_DIR", &disk.path.display().to_string());
    Some((disk, env))
}

/// Runs of zeros are kept without taking room (`protocol::zeros`): 40 MB
/// of zeros on a 16 MiB state disk all arrive and are all in the
/// transcript byte for byte (stored as bytes, they would not fit: the
/// client would exit 125, as in the test below).
#[test]
fn zeros_a_small_state_disk_could_not_hold_are_kept_whole() {
    let Some((_disk, env)) = on_a_small_disk("zeros-small-disk") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    let out = env.run(&["bash", &id, "--", "head -c 40000000 /dev/zero; echo end"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let mut expected = vec![0u8; 40_000_000];
    expected.extend(b"end\n");
    assert!(out.stdout == expected, "{} bytes arrived", out.stdout.len());
    let raw = env.run(&["log", &id, "--raw", "1"]);
    assert!(
        raw.stdout == expected,
        "{} bytes in the transcript",
        raw.stdout.len()
    );
}

/// A state disk that fills while a command writes: what the kernel could
/// not spool is counted, not told chunk by chunk; the client gets only
/// whole records of the output (a record cut short is taken back, never
/// read with the next one's header as output), says on stderr what is
/// missing and exits 125; the transcript says it once, before the end.
#[test]
fn output_a_full_state_disk_could_not_keep_is_told_once_and_fails_the_client() {
    let Some((_disk, env)) = on_a_small_disk("full-disk") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    // Not zeros: runs of zeros take no room (`protocol::zeros`).
    let out = env.run(&[
        "bash",
        &id,
        "--",
        "head -c 40000000 /dev/zero | tr '\\0' x; echo end",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("the command exited 0, but ")
            && stderr.contains("bytes of its output could not be kept: No space left on device"),
        "{stderr}"
    );
    assert!(
        out.stdout.len() < 40_000_000,
        "{} bytes arrived",
        out.stdout.len()
    );
    // Its x's, then its last line if that was kept.
    let xs = out.stdout.strip_suffix(b"end\n").unwrap_or(&out.stdout);
    let stray = xs.iter().position(|&b| b != b'x');
    assert!(
        stray.is_none(),
        "a byte the command never wrote at {stray:?}"
    );

    let log = env.run(&["log", &id]).stdout;
    let log = String::from_utf8_lossy(&log).replace('\0', "");
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("could not be kept"))
        .collect();
    assert_eq!(told.len(), 1, "{told:#?}");
    assert!(
        told[0].starts_with("! ")
            && told[0].contains(
                "bytes of the output of bash 1 could not be kept: No space left on device"
            ),
        "{}",
        told[0]
    );
    let notice = log.find("bytes of the output of bash 1").unwrap();
    let end = log.find("[bash 1 exited 0]").expect("the end is recorded");
    assert!(notice < end, "{log}");
}

/// A saved session woken on a full state disk: its worker cannot record
/// itself and exits at once. The supervisor sees the exit (no waiting out
/// the worker-start wait for a process that is gone) and the client is
/// told why, from the worker's own last word; once space is freed,
/// `restart` brings the session back with its state.
#[test]
fn a_worker_that_cannot_start_on_a_full_disk_says_why_to_the_client() {
    let Some((disk, env)) = on_a_small_disk("full-wake") else {
        return;
    };
    let env = env.with("EUKHE_IDLE_STOP_MS", "1000");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "kept=yes"]);
    wait_until(Duration::from_secs(20), "the session saved", || {
        env.session(&id)["state"] == "saved"
    });
    let filler = fill(&disk);
    let started = Instant::now();
    let woken = env.run(&["bash", &id, "--", "echo $kept"]);
    let stderr = String::from_utf8_lossy(&woken.stderr);
    assert_eq!(woken.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("(the last attempt: its worker exited with status 125; its log ends: ")
            && stderr.contains("worker.json: No space left on device"),
        "{stderr}"
    );
    assert!(stderr.lines().count() == 1, "{stderr}");
    // Each failure is seen as the worker exits, not after a worker-start
    // wait (10 s, as long as this client waits): by the time the client
    // is told, the supervisor has counted several (6, the give-up, after
    // pauses of 250 ms doubling to 4 s).
    let failures = env.session(&id)["failures_in_window"].as_u64().unwrap();
    assert!(
        failures >= 2,
        "{failures} failures in {:?}",
        started.elapsed()
    );

    std::fs::remove_file(filler).unwrap();
    env.ok(&["restart", &id]);
    assert_eq!(env.ok(&["bash", &id, "--", "echo $kept"]), "yes\n");
}

/// `new` on a full state disk fails in one line and leaves nothing
/// behind: no session directory, no temporary file.
#[test]
fn a_new_session_refused_by_a_full_disk_leaves_nothing_behind() {
    let Some((disk, env)) = on_a_small_disk("full-new") else {
        return;
    };
    let env = env.with_config("spare_session = false\n");
    env.ok(&["status"]);
    let sessions = disk.path.join("sessions");
    let before: Vec<_> = std::fs::read_dir(&sessions)
        .map_or(Vec::new(), |d| d.flatten().map(|e| e.file_name()).collect());
    let filler = fill(&disk);
    let refused = env.run(&["new", "--env", &format!("BIG={}", "x".repeat(64 * 1024))]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let after: Vec<_> = std::fs::read_dir(&sessions)
        .map_or(Vec::new(), |d| d.flatten().map(|e| e.file_name()).collect());
    assert_eq!(after, before, "nothing of the refused session stays");
    std::fs::remove_file(filler).unwrap();
    env.ok(&["new"]);
}

/// A client whose worker is lost while its command runs follows the
/// command in the transcript: output lost to a full disk is told there
/// too (the end entry carries it), and the client fails the same way.
#[test]
fn output_lost_is_told_to_a_client_that_follows_the_transcript() {
    use std::process::Stdio;
    let Some((disk, env)) = on_a_small_disk("full-follow") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "true"]);
    let filler = fill(&disk);
    let client = env
        .command(&["send", &id, "--wait", "echo lost; sleep 4; echo kept"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line is written on a full disk; then there is room
    // again, for the next worker and for what the command writes after.
    // Once `sleep` runs, the first line is in the kernel's pipe.
    env.run_process(env.kernel(&id), "sleep 4");
    // Time for the kernel to read it and meet the full disk: its loss
    // shows nowhere a test could wait on.
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::remove_file(filler).unwrap();
    kill_worker_and_wait_for_the_next(&env, &id);
    let out = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept\n", "{stderr}");
    assert!(
        stderr.contains("the command exited 0, but 5 bytes of its output could not be kept"),
        "{stderr}"
    );
    let json = env.ok(&["log", &id, "--json", "--tail", "1"]);
    let end: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(end[0]["kind"], "run_finished", "{json}");
    assert_eq!(end[0]["lost_output"]["bytes"], 5, "{json}");
}

/// A command's last output read after its shell reported its end, on a
/// disk with no room for it: its loss is told with that command's end,
/// never as output of something it left running.
#[test]
fn output_lost_as_a_command_ends_is_told_with_its_end() {
    let Some((disk, env)) = on_a_small_disk("full-end") else {
        return;
    };
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "true"]);
    let filler = fill(&disk);
    for bash in 2..5 {
        small_disk::top_up(&filler);
        let out = env.run(&["bash", &id, "--", "echo small; echo more"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(125),
            "bash {bash}: {stderr}\n{}",
            env.log(&id)
        );
        assert!(
            stderr.contains("the command exited 0, but 11 bytes of its output could not be kept"),
            "{stderr}"
        );
        let log = env.log(&id);
        assert!(log.contains(&format!("! 11 bytes of the output of bash {bash} could not be kept: No space left on device")), "{log}");
        assert!(!log.contains("left running"), "{log}");
        // What the command changed in the shell could not be captured;
        // the notice says why.
        assert!(
            log.contains(
                "! the shell's state capture is cut short (0 bytes) (the state disk is full)"
            ),
            "{log}"
        );
    }
    std::fs::remove_file(filler).unwrap();
    assert_eq!(env.ok(&["bash", &id, "--", "echo small"]), "small\n");
}
