//! Background jobs and a job's own pipes: what a run leaves running is
//! waited for and counted, and none outlives its job unseen.

use std::time::{Duration, Instant};

use super::text;
use crate::support::{wait_until, Env};

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
