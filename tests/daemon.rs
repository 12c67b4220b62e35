//! The daemon on the process backend, driven through the real binary:
//! real processes, real sockets, temporary directories.

#[path = "daemon/env.rs"]
mod env;

use std::time::{Duration, Instant};

use env::{alive, kill9, wait_until, Env};

#[test]
fn sessions_run_commands_and_keep_their_namespace() {
    let env = Env::new("basics");
    let id = env.ok(&["new", "--name", "basics", "--cwd", "/"]).trim().to_string();
    assert_eq!(id.len(), 8, "{id}");
    let out = env.ok(&["bash", &id, "--", "cd /tmp && export GREETING=hello && echo moved"]);
    assert_eq!(out, "moved\n");
    let out = env.ok(&["bash", "basics", "--", "echo $GREETING from $(pwd)"]);
    assert_eq!(out, "hello from /tmp\n");
    let failing = env.run(&["send", &id, "echo run output; exit 3", "--wait"]);
    assert_eq!(failing.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&failing.stdout), "run output\n");
    let log = env.log(&id);
    assert!(log.contains("[run 1] $ echo run output; exit 3\nrun output\n[run 1 exited 3]"), "{log}");
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["log", &id, "--json"])).unwrap();
    assert!(json.as_array().unwrap().iter().any(|e| e["kind"] == "run_finished" && e["status"] == 3));
    assert_eq!(env.session(&id)["state"], "idle");
}

#[test]
fn queued_runs_go_one_at_a_time_in_order() {
    let env = Env::new("order");
    let id = env.ok(&["new"]).trim().to_string();
    for i in 1..=3 {
        env.ok(&["send", &id, &format!("sleep 0.1; echo run {i}")]);
    }
    let last = env.run(&["send", &id, "echo last", "--wait"]);
    assert!(last.status.success());
    let log = env.log(&id);
    let positions: Vec<usize> = (1..=3).map(|i| log.find(&format!("\nrun {i}\n")).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{log}");
}

#[test]
fn a_killed_worker_restarts_after_the_pause_with_one_restore_notice() {
    let env = Env::new("restart");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "cd /tmp"]);
    let first = env.worker_pid(&id).unwrap();
    let killed_at = Instant::now();
    kill9(first);
    wait_until(Duration::from_secs(10), "the worker restarts", || {
        env.worker_pid(&id).is_some_and(|pid| pid != first)
    });
    assert!(killed_at.elapsed() >= Duration::from_millis(250), "restarted before the 250 ms pause");
    assert_eq!(env.session(&id)["failures_in_window"], 1);
    assert_eq!(env.ok(&["bash", &id, "--", "pwd"]), "/tmp\n");
    let log = env.log(&id);
    assert_eq!(log.matches("kernel restored from its snapshot").count(), 1, "{log}");
}

#[test]
fn six_failures_in_the_window_give_the_session_up_and_keep_its_transcript() {
    let env = Env::new("giveup");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "echo before the crashes"]);
    for failure in 1..=6 {
        let pid = env.worker_pid(&id).unwrap();
        kill9(pid);
        if failure < 6 {
            wait_until(Duration::from_secs(15), "the worker restarts", || {
                env.worker_pid(&id).is_some_and(|p| p != pid)
            });
        }
    }
    wait_until(Duration::from_secs(5), "the session is given up", || env.session(&id)["state"] == "given-up");
    assert_eq!(env.session(&id)["failures_in_window"], 6);
    let refused = env.run(&["bash", &id, "--", "true"]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("was given up") && stderr.contains("eukhe restart"), "{stderr}");
    let log = env.log(&id);
    assert!(log.contains("before the crashes") && log.contains("given up"), "{log}");
    env.ok(&["restart", &id]);
    assert_eq!(env.ok(&["bash", &id, "--", "echo back"]), "back\n");
    assert_eq!(env.session(&id)["failures_in_window"], 0);
}

#[test]
fn a_new_supervisor_adopts_a_busy_worker_without_aborting_its_run() {
    let env = Env::new("adopt");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 2; echo survived"]);
    wait_until(Duration::from_secs(5), "the run is busy", || env.session(&id)["state"] == "busy");
    let worker = env.worker_pid(&id).unwrap();
    kill9(env.daemon_pid());
    let sessions = env.sessions();
    let adopted = sessions.as_array().unwrap().iter().find(|s| s["id"] == id.as_str()).unwrap();
    wait_until(Duration::from_secs(5), "the worker is adopted", || env.worker_pid(&id) == Some(worker));
    assert_eq!(adopted["failures_in_window"], 0);
    wait_until(Duration::from_secs(10), "the run finishes", || env.log(&id).contains("[run 1 exited 0]"));
    assert!(env.log(&id).contains("survived"));
    assert_eq!(env.worker_pid(&id), Some(worker));
}

#[test]
fn a_worker_of_another_build_is_replaced_on_this_build() {
    let old = Env::new("builds").with("EUKHE_BUILD_ID", "old-build");
    let id = old.ok(&["new"]).trim().to_string();
    old.ok(&["bash", &id, "--", "export KEPT=yes"]);
    let old_worker = old.worker_pid(&id).unwrap();
    kill9(old.daemon_pid());
    let new = Env { dir: old.dir.clone(), vars: old.vars.clone() }.with("EUKHE_BUILD_ID", "new-build");
    wait_until(Duration::from_secs(10), "the session runs on the new build", || {
        new.session(&id)["build"] == "new-build"
    });
    assert!(!alive(old_worker));
    assert_eq!(new.ok(&["bash", &id, "--", "echo $KEPT"]), "yes\n");
    std::mem::forget(old);
}

#[test]
fn shutdown_if_idle_refuses_while_busy_and_stops_when_idle() {
    let env = Env::new("ifidle");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 4; echo finished"]);
    wait_until(Duration::from_secs(5), "the run is busy", || env.session(&id)["state"] == "busy");
    let refused = env.run(&["shutdown", "--if-idle"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("busy"));
    wait_until(Duration::from_secs(10), "the run finishes", || env.log(&id).contains("[run 1 exited 0]"));
    let daemon = env.daemon_pid();
    let worker = env.worker_pid(&id).unwrap();
    let stopped = env.run(&["shutdown", "--if-idle"]);
    assert!(stopped.status.success(), "{}", String::from_utf8_lossy(&stopped.stdout));
    wait_until(Duration::from_secs(10), "daemon and worker are gone", || !alive(daemon) && !alive(worker));
    assert!(env.log(&id).contains("finished"));
}

#[test]
fn an_older_client_uses_a_newer_daemon_and_says_so() {
    let newer = Env::new("older-client").with("EUKHE_VERSION", "9.0.0");
    newer.ok(&["status"]);
    let older = Env { dir: newer.dir.clone(), vars: newer.vars.clone() }.with("EUKHE_VERSION", "1.0.0");
    let out = older.run(&["ls"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("this eukhe (v1.0.0) is older than the running daemon (v9.0.0): update or run `eukhe shutdown`"));
    std::mem::forget(older);
}

#[test]
fn a_newer_interactive_client_replaces_an_idle_daemon_and_sessions_survive() {
    let older = Env::new("newer-client").with("EUKHE_VERSION", "1.0.0");
    let id = older.ok(&["new"]).trim().to_string();
    older.ok(&["bash", &id, "--", "export KEPT=1"]);
    let old_daemon = older.daemon_pid();
    let newer = Env { dir: older.dir.clone(), vars: older.vars.clone() }.with("EUKHE_VERSION", "2.0.0");
    assert_eq!(newer.ok(&["bash", &id, "--", "echo $KEPT"]), "1\n");
    let status: serde_json::Value = serde_json::from_str(&newer.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["version"], "2.0.0");
    assert!(!alive(old_daemon));
    std::mem::forget(older);
}

#[test]
fn a_lost_worker_with_work_exits_resumable_and_is_revived_at_the_next_start() {
    let env = Env::new("revive").with("EUKHE_WORKER_LOST_EXIT_MS", "700");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["send", &id, "sleep 30"]);
    env.ok(&["send", &id, "echo resumed after revival"]);
    wait_until(Duration::from_secs(5), "the run is busy", || env.session(&id)["state"] == "busy");
    let worker = env.worker_pid(&id).unwrap();
    kill9(env.daemon_pid());
    wait_until(Duration::from_secs(10), "the orphaned worker exits", || !alive(worker));
    wait_until(Duration::from_secs(15), "the queued run resumes", || {
        env.log(&id).contains("resumed after revival")
    });
    let log = env.log(&id);
    assert!(log.contains("[run 1 interrupted]"), "{log}");
    assert!(log.contains("[run 2 exited 0]"), "{log}");
}

#[test]
fn a_lost_idle_worker_closes_its_session_after_one_window() {
    let env = Env::new("orphan-idle").with("EUKHE_WORKER_LOST_EXIT_MS", "500");
    let id = env.ok(&["new"]).trim().to_string();
    let worker = env.worker_pid(&id).unwrap();
    kill9(env.daemon_pid());
    wait_until(Duration::from_secs(10), "the idle orphan closes", || !alive(worker));
    assert_eq!(env.session(&id)["state"], "saved");
    assert_eq!(env.ok(&["bash", &id, "--", "echo woke"]), "woke\n");
}

#[test]
fn bad_names_and_directories_are_refused_clearly() {
    let env = Env::new("names");
    for (name, why) in [("a/b", "path separator"), ("..", "\"..\""), ("tab\there", "control character")] {
        let out = env.run(&["new", "--name", name]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{name:?}");
    }
    let out = env.run(&["new", "--cwd", "/definitely/not/here"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/definitely/not/here"));
    let out = env.run(&["bash", "nosuch", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session \"nosuch\""));
}
