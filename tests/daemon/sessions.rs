//! Managing sessions: `rm`, `rename` and the idle stop, through the real
//! binary on the process backend.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{alive, kill9, never, wait_until, Env};

fn session_dir(env: &Env, id: &str) -> PathBuf {
    env.dir.join("state/sessions").join(id)
}

/// Every live kernel of a session (not of the spare the daemon keeps for
/// the next `new`, which has no `meta.json`).
fn session_kernel_pids(env: &Env) -> Vec<u32> {
    let Ok(sessions) = std::fs::read_dir(env.dir.join("state/sessions")) else {
        return Vec::new();
    };
    sessions
        .flatten()
        .filter(|s| s.path().join("meta.json").exists())
        .filter_map(|s| env.kernel_pid(&s.file_name().to_string_lossy()))
        .collect()
}

fn listed(env: &Env, id: &str) -> bool {
    env.sessions()
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id)
}

/// The pid a command printed (`echo $!`, `echo $BASHPID`).
fn pid_in(text: &str) -> u32 {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a pid: {text:?}"))
}

#[test]
fn rm_of_an_idle_session_ends_its_processes_and_deletes_its_directory() {
    let env = Env::new("rm-idle");
    let id = env.ok(&["new", "--name", "doomed"]).trim().to_string();
    let other = env.ok(&["new", "--name", "kept"]).trim().to_string();
    env.ok(&["bash", "doomed", "--", "f() { echo hi; }"]);
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.session(&id)["kernel_pid"].as_u64().unwrap() as u32;
    assert!(alive(worker) && alive(kernel));
    assert!(session_dir(&env, &id).exists());
    let out = env.ok(&["rm", "doomed"]);
    assert_eq!(out, format!("removed doomed ({id})\n"));
    assert!(!alive(worker), "the worker outlived rm");
    assert!(!alive(kernel), "the kernel outlived rm");
    assert!(
        !session_dir(&env, &id).exists(),
        "the directory outlived rm"
    );
    assert!(!listed(&env, &id));
    let gone = env.run(&["bash", &id, "--", "true"]);
    assert!(!gone.status.success());
    assert_eq!(
        String::from_utf8_lossy(&gone.stderr),
        format!("eukhe: session {id} no longer exists: it was removed\n")
    );
    // The other session is untouched, and the name is free again.
    assert_eq!(
        env.ok(&["bash", &other, "--", "echo still here"]),
        "still here\n"
    );
    let again = env.ok(&["new", "--name", "doomed"]).trim().to_string();
    assert_ne!(again, id, "a removed session's id is never given again");
    assert_eq!(
        env.ok(&[
            "bash",
            "doomed",
            "--",
            "type f >/dev/null 2>&1 || echo fresh"
        ]),
        "fresh\n"
    );
}

#[test]
fn rm_of_several_sessions_reports_each_in_one_line_and_exits_non_zero_if_one_failed() {
    let env = Env::new("rm-several");
    let a = env.ok(&["new", "--name", "a"]).trim().to_string();
    let b = env.ok(&["new", "--name", "b"]).trim().to_string();
    let out = env.run(&["rm", "a", "nosuch", &b]);
    assert!(!out.status.success(), "one session did not exist");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout, format!("removed a ({a})\nremoved b ({b})\n"));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("rm nosuch") && stderr.contains("no session"),
        "{stderr}"
    );
    assert!(!session_dir(&env, &a).exists() && !session_dir(&env, &b).exists());
    assert!(env.ok(&["rm", "--help"]).contains("--force"));
}

#[test]
fn rm_refuses_a_busy_session_and_with_force_cancels_its_work() {
    let env = Env::new("rm-busy");
    let id = env.ok(&["new", "--name", "busy"]).trim().to_string();
    let pid_file = env.dir.join("run.pid");
    let background = pid_in(&env.ok(&["bash", &id, "--", "sleep 1000 >/dev/null 2>&1 & echo $!"]));
    env.ok(&[
        "send",
        &id,
        &format!("echo $BASHPID > {}; exec sleep 1000", pid_file.display()),
    ]);
    wait_until(Duration::from_secs(10), "the run writes its pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let run = pid_in(&std::fs::read_to_string(&pid_file).unwrap());
    wait_until(
        Duration::from_secs(10),
        "the session is busy with both",
        || {
            let session = env.session(&id);
            session["state"] == "busy" && session["jobs"].as_u64() >= Some(1)
        },
    );
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.session(&id)["kernel_pid"].as_u64().unwrap() as u32;

    let refused = env.run(&["rm", "busy"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("is busy") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(
        stderr.contains("run") && stderr.contains("background job"),
        "{stderr}"
    );
    // Refused means untouched: everything still runs, and new work runs.
    for pid in [worker, kernel, run, background] {
        assert!(alive(pid), "pid {pid} ended although rm was refused");
    }
    assert!(session_dir(&env, &id).exists());
    assert_eq!(env.ok(&["bash", &id, "--", "echo served"]), "served\n");

    let out = env.ok(&["rm", "--force", "busy"]);
    assert_eq!(out, format!("removed busy ({id})\n"));
    for (what, pid) in [
        ("worker", worker),
        ("kernel", kernel),
        ("run", run),
        ("background job", background),
    ] {
        assert!(!alive(pid), "the {what} (pid {pid}) outlived rm --force");
    }
    assert!(!session_dir(&env, &id).exists());
    assert!(!listed(&env, &id));
}

#[test]
fn a_removed_session_is_never_revived_by_busy_evidence_or_a_leftover_directory() {
    let env = Env::new("rm-revive");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "sleep 1000 >/dev/null 2>&1 &"]);
    let busy_log = env.dir.join("state/busy.log");
    let busy_record = format!("\"session\":\"{id}\",\"state\":\"busy\"");
    wait_until(Duration::from_secs(10), "busy evidence is recorded", || {
        std::fs::read_to_string(&busy_log).is_ok_and(|t| t.contains(&busy_record))
    });
    // What a removal cut short by a crash could leave: the whole directory.
    // The kernel may forget a settled job's spool files while `cp` walks
    // the directory ("cannot stat ... .group", seen under a loaded CI):
    // copied again until one copy is whole.
    let aside = env.dir.join("aside");
    let copied = (0..10).any(|_| {
        let _ = std::fs::remove_dir_all(&aside);
        std::process::Command::new("cp")
            .arg("-a")
            .arg(session_dir(&env, &id))
            .arg(&aside)
            .status()
            .unwrap()
            .success()
    });
    assert!(copied);
    env.ok(&["rm", "--force", &id]);
    let daemon = env.daemon_pid();
    kill9(daemon);
    wait_until(Duration::from_secs(5), "the daemon is gone", || {
        !alive(daemon)
    });
    let copied_back = std::process::Command::new("cp")
        .arg("-a")
        .arg(&aside)
        .arg(session_dir(&env, &id))
        .status()
        .unwrap();
    assert!(copied_back.success());
    // The busy record is fresh and stays (journals keep their entries)...
    let evidence = std::fs::read_to_string(&busy_log).unwrap();
    assert!(evidence.contains(&busy_record), "{evidence}");
    // ...and a new daemon neither lists nor revives the session: it
    // finishes the removal instead.
    assert!(!listed(&env, &id), "a removed session came back");
    assert_ne!(env.daemon_pid(), daemon);
    wait_until(
        Duration::from_secs(10),
        "the leftover directory is deleted",
        || !session_dir(&env, &id).exists(),
    );
    assert!(!listed(&env, &id));
    assert!(
        session_kernel_pids(&env).is_empty(),
        "a kernel was started for a removed session"
    );
}

#[test]
fn rename_changes_the_name_keeps_the_id_and_refuses_a_taken_name_or_an_id() {
    let env = Env::new("rename");
    let first = env.ok(&["new", "--name", "first"]).trim().to_string();
    let second = env.ok(&["new", "--name", "second"]).trim().to_string();
    env.ok(&["bash", "first", "--", "export KEPT=yes"]);
    assert_eq!(
        env.ok(&["rename", "first", "renamed"]),
        "session first is now named renamed\n"
    );
    assert_eq!(env.session(&first)["name"], "renamed");
    assert_eq!(env.ok(&["bash", "renamed", "--", "echo $KEPT"]), "yes\n");
    let old_name = env.run(&["bash", "first", "--", "true"]);
    assert!(!old_name.status.success());
    for (taken, why) in [
        ("second", "taken by session"),
        (second.as_str(), "another session's id"),
    ] {
        let out = env.run(&["rename", "renamed", taken]);
        assert!(!out.status.success(), "{taken}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
    let bad = env.run(&["rename", "renamed", "a/b"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("path separator"));
    assert_eq!(env.session(&first)["name"], "renamed");
    // The new name is on disk: a new daemon knows it.
    kill9(env.daemon_pid());
    assert_eq!(env.session(&first)["name"], "renamed");
    assert_eq!(env.session(&first)["id"], first.as_str());
    // Its own id is a fine name for a session.
    env.ok(&["rename", &second, &second]);
}

#[test]
fn an_idle_session_stops_after_idle_stop_ms_and_the_next_bash_wakes_it_with_its_shell() {
    let env = Env::new("idle-stop").with_config("idle_stop_ms = 1500\n");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "cd /tmp; f() { echo kept; }"]);
    let last_request = Instant::now();
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.session(&id)["kernel_pid"].as_u64().unwrap() as u32;
    wait_until(Duration::from_secs(10), "the session is saved", || {
        env.session(&id)["state"] == "saved"
    });
    assert!(
        last_request.elapsed() >= Duration::from_millis(1500),
        "stopped before idle_stop_ms"
    );
    assert!(
        !alive(worker) && !alive(kernel),
        "saved, yet its processes live"
    );
    assert_eq!(env.session(&id)["pid"], serde_json::Value::Null);
    // `ls` and `status` do not count as use: it stays saved.
    env.ok(&["status"]);
    assert_eq!(env.session(&id)["state"], "saved");
    assert_eq!(env.ok(&["bash", &id, "--", "pwd; f"]), "/tmp\nkept\n");
    assert!(
        env.worker_pid(&id).is_some_and(|pid| pid != worker),
        "woken by a new worker"
    );
    let log = env.log(&id);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
    assert_eq!(
        env.session(&id)["failures_in_window"],
        0,
        "a stop is no failure"
    );
}

#[test]
fn background_jobs_and_attached_clients_keep_a_session_from_its_idle_stop() {
    let env = Env::new("idle-keep").with_config("idle_stop_ms = 1000\n");
    let with_job = env.ok(&["new"]).trim().to_string();
    let attached = env.ok(&["new"]).trim().to_string();
    let job_started = std::time::Instant::now();
    env.ok(&["bash", &with_job, "--", "sleep 3 >/dev/null 2>&1 &"]);
    let mut client = env
        .command(&["attach", &attached])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The job is the clock: the session with it is saved once the job
    // ended and a whole idle_stop_ms passed, never while it ran; by then
    // the attached session was left with its client well past its own.
    wait_until(
        Duration::from_secs(20),
        "the session whose job ended is saved",
        || env.session(&with_job)["state"] == "saved",
    );
    assert!(
        job_started.elapsed() >= Duration::from_millis(3_000),
        "stopped with a background job after {:?}",
        job_started.elapsed()
    );
    assert_ne!(
        env.session(&attached)["state"],
        "saved",
        "stopped with a client attached"
    );
    let _ = client.kill();
    let _ = client.wait();
    wait_until(
        Duration::from_secs(10),
        "the attached session is saved once left alone",
        || env.session(&attached)["state"] == "saved",
    );
}

#[test]
fn requests_racing_the_idle_stop_are_all_answered() {
    let env = Env::new("idle-race").with_config("idle_stop_ms = 1000\n");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "n=0"]);
    let state = || {
        env.sessions()
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id.as_str())
            .map(|s| s["state"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    // Each round waits until `ls` shows the stop under way, then asks at
    // once, with a second request right behind: both must be answered.
    // Until two rounds caught the stop under way (at most ten rounds: a
    // stop takes tens of milliseconds, `ls` a few).
    let mut raced = 0;
    let mut rounds = 0;
    for round in 0..10 {
        if raced == 2 {
            break;
        }
        rounds += 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        let caught = loop {
            match state().as_str() {
                "stopping" => break true,
                "saved" => break false,
                _ => assert!(Instant::now() < deadline, "round {round}: never stopped"),
            }
        };
        raced += caught as u32;
        let behind = {
            let mut command = env.command(&["bash", &id, "--", "echo behind"]);
            std::thread::spawn(move || command.output().unwrap())
        };
        let out = env.run(&["bash", &id, "--", &format!("echo {round}")]);
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{round}\n"));
        let behind = behind.join().unwrap();
        assert!(
            behind.status.success(),
            "round {round}, the second request: {}",
            String::from_utf8_lossy(&behind.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&behind.stdout), "behind\n");
    }
    assert!(raced > 0, "no request came while a stop was under way");
    let log = env.log(&id);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        rounds,
        "one restore per stop: {log}"
    );
    assert_eq!(env.session(&id)["failures_in_window"], 0);
}

#[test]
fn a_request_racing_rm_is_either_served_before_it_or_told_the_session_is_gone() {
    let env = Env::new("rm-race");
    let (mut served, mut gone) = (0, 0);
    for round in 0..8u64 {
        let id = env.ok(&["new"]).trim().to_string();
        let spawn = |args: Vec<String>, after_ms: u64| {
            let mut command = env.command(&args.iter().map(String::as_str).collect::<Vec<_>>());
            std::thread::spawn(move || {
                // The gap between the two requests is the test's subject:
                // a time, not a condition.
                std::thread::sleep(Duration::from_millis(after_ms));
                command.output().unwrap()
            })
        };
        // Even rounds ask first and remove a little later, odd rounds the
        // other way round; the gap grows round by round.
        let (bash_after, rm_after) = match round % 2 {
            0 => (0, round * 3),
            _ => (round * 2, 0),
        };
        let bash = spawn(
            ["bash", &id, "--", "sleep 0.3; echo served"]
                .map(String::from)
                .to_vec(),
            bash_after,
        );
        let rm = spawn(["rm", &id].map(String::from).to_vec(), rm_after);
        let (bash, rm) = (bash.join().unwrap(), rm.join().unwrap());
        let (bash_out, bash_err) = (
            String::from_utf8_lossy(&bash.stdout),
            String::from_utf8_lossy(&bash.stderr),
        );
        let rm_err = String::from_utf8_lossy(&rm.stderr);
        if rm.status.success() {
            // Removed first: the request was told so, in one line.
            assert!(!bash.status.success(), "round {round}: {bash_out}");
            assert!(
                bash_err.contains("no longer exists: it was removed"),
                "round {round}: {bash_err}"
            );
            gone += 1;
        } else {
            // Served first: rm saw the user bash and refused.
            assert!(
                rm_err.contains("is busy") && rm_err.contains("user bash"),
                "round {round}: {rm_err}"
            );
            assert!(bash.status.success(), "round {round}: {bash_err}");
            assert_eq!(bash_out, "served\n", "round {round}");
            served += 1;
            // Its job's output settles just after its end was reported.
            wait_until(Duration::from_secs(10), "the session is idle", || {
                env.session(&id)["state"] == "idle"
            });
            env.ok(&["rm", &id]);
        }
        assert!(!session_dir(&env, &id).exists(), "round {round}");
    }
    eprintln!("served first: {served}, removed first: {gone}");
}

#[test]
fn the_environment_overrides_idle_stop_ms_and_never_keeps_sessions() {
    let refused = Env::new("idle-zero").with("EUKHE_IDLE_STOP_MS", "0");
    let out = refused.run(&["status"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("EUKHE_IDLE_STOP_MS") && stderr.contains("\"never\""),
        "{stderr}"
    );
    let env = Env::new("idle-never")
        .with_config("idle_stop_ms = 1000\n")
        .with("EUKHE_IDLE_STOP_MS", "never");
    let id = env.ok(&["new"]).trim().to_string();
    let worker = env.worker_pid(&id).unwrap();
    never(
        Duration::from_millis(2500),
        "the session was stopped after its idle_stop_ms of the file",
        || env.session(&id)["state"] != "idle" || env.worker_pid(&id) != Some(worker),
    );
}

#[test]
fn ls_escapes_control_characters_so_each_session_stays_one_row() {
    let env = Env::new("ls-escapes");
    let odd = env.dir.join("two\nlines\u{1b}[31m");
    std::fs::create_dir_all(&odd).unwrap();
    let id = env
        .ok(&["new", "--cwd", &odd.display().to_string()])
        .trim()
        .to_string();
    let table = env.ok(&["ls"]);
    assert_eq!(table.lines().count(), 2, "a header and one row: {table:?}");
    let row = table.lines().nth(1).unwrap();
    assert!(row.starts_with(&id), "{row:?}");
    assert!(row.ends_with("two\\nlines\\u{1b}[31m"), "{row:?}");
    // Scripts read the directory as it is.
    assert_eq!(env.session(&id)["cwd"], odd.display().to_string());
}

#[test]
fn session_names_that_would_mislead_are_refused_with_their_rule() {
    let env = Env::new("names");
    for (name, rule) in [
        (".", "reads as the current directory"),
        (" ", "is only whitespace"),
        ("-x", "starts with '-'"),
        ("evil\u{202e}txt", "invisible character U+202E"),
        ("zero\u{200b}width", "invisible character U+200B"),
    ] {
        let refused = env.run(&["new", &format!("--name={name}")]);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(125), "{name:?}: {said}");
        assert!(said.contains(rule), "{name:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{said}");
    }
    // An accent composed or decomposed is one name.
    let composed = "caf\u{e9}";
    let decomposed = "cafe\u{301}";
    let id = env.ok(&["new", "--name", decomposed]).trim().to_string();
    assert_eq!(env.session(&id)["name"], composed, "kept as NFC");
    let again = env.run(&["new", "--name", composed]);
    assert_eq!(again.status.code(), Some(125), "{again:?}");
    assert_eq!(
        env.ok(&["bash", decomposed, "--", "echo reached"]),
        "reached\n"
    );
    assert_eq!(
        env.ok(&["bash", composed, "--", "echo reached"]),
        "reached\n"
    );
}
