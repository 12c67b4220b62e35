//! What the daemon refuses and keeps to itself: bad names, bad frames,
//! other users, wrong settings, and the environment out of its logs.

use std::time::Duration;

use crate::support::wire::frame;
use crate::support::{wait_until, Env};

#[test]
fn bad_names_and_directories_are_refused_clearly() {
    let env = Env::new("names");
    for (name, why) in [
        ("a/b", "path separator"),
        ("..", "\"..\""),
        ("tab\there", "control character"),
    ] {
        let out = env.run(&["new", "--name", name]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{name:?}"
        );
    }
    let out = env.run(&["new", "--cwd", "/definitely/not/here"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("/definitely/not/here"));
    let out = env.run(&["bash", "nosuch", "--", "true"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session \"nosuch\""));
}

/// Send raw bytes to the daemon's socket and read what comes back.
fn raw_exchange(env: &Env, bytes: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let socket = env.dir.join("run/eukhe.sock");
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(bytes).unwrap();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    reply
}

/// The message of the first error frame in `reply`.
fn error_message(reply: &[u8]) -> String {
    let mut rest = reply;
    while rest.len() > 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let value: serde_json::Value = serde_json::from_slice(&rest[4..4 + len]).unwrap();
        if value["type"] == "error" {
            return value["message"].as_str().unwrap().to_string();
        }
        rest = &rest[4 + len..];
    }
    panic!("no error frame in {reply:?}");
}

#[test]
fn garbage_oversized_truncated_and_future_frames_get_clear_errors_and_the_daemon_keeps_serving() {
    let env = Env::new("frames");
    env.ok(&["status"]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (frame(b"this is not json"), "malformed message"),
        (frame(&[0xff, 0xfe, 0xfd]), "invalid UTF-8"),
        (frame(br#"{"type":"teleport"}"#), "unknown variant"),
        (((1u32 << 20) + 1).to_be_bytes().to_vec(), "over the limit"),
        (0u32.to_be_bytes().to_vec(), "empty frame"),
        ({ let mut b = 100u32.to_be_bytes().to_vec(); b.extend_from_slice(b"{\"ty"); b }, "truncated frame"),
        (
            [
                frame(br#"{"type":"hello","protocol":99,"version":"9.9.9","build_id":"x","role":"interactive"}"#),
                frame(br#"{"type":"list"}"#),
            ]
            .concat(),
            "from the future",
        ),
    ];
    for (bytes, expected) in cases {
        let message = error_message(&raw_exchange(&env, &bytes));
        assert!(
            message.contains(expected),
            "expected {expected:?} in {message:?}"
        );
    }
    let id = env.ok(&["new"]).trim().to_string();
    assert_eq!(
        env.ok(&["bash", &id, "--", "echo still serving"]),
        "still serving\n"
    );
}

#[test]
fn another_uid_is_refused() {
    if crate::support::skip::not_root("another_uid_is_refused needs root to play a second uid") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let env = Env::new("uid");
    env.ok(&["status"]);
    // Open the directory and socket to everyone: only the peer-uid check
    // stands between the other user and the daemon now.
    let run = env.dir.join("run");
    std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        run.join("eukhe.sock"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    let out = env
        .command(&["status"])
        .env("HOME", "/tmp")
        .env("EUKHE_STATE_DIR", "/tmp/eukhe-nobody-state-never-created")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("uid 65534 is not the daemon's uid 0"),
        "{stderr}"
    );
    // And with the directory private, as the daemon leaves it, the other
    // user cannot even reach the socket.
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = env
        .command(&["status"])
        .env("HOME", "/tmp")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn a_config_file_with_a_wrong_type_is_named_in_one_line() {
    let env = Env::new("config").with_config("worker_lost_exit_ms = \"soon\"\n");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("config.toml: line 1: worker_lost_exit_ms = \"soon\": expected milliseconds (at least 69000) or \"never\""),
        "{stderr}"
    );
    let doctor = env.run(&["doctor", "--json"]);
    assert!(!doctor.status.success());
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let config = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "config")
        .unwrap();
    assert_eq!(config["ok"], false);
}

#[test]
fn a_lost_exit_window_below_the_minimum_is_refused_in_one_line_and_past_the_cap_means_never() {
    let env = Env::new("short-window").with_config("worker_lost_exit_ms = 500\n");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("worker_lost_exit_ms = 500 is shorter than the minimum 69000"),
        "{stderr}"
    );
    // The same from the environment.
    let env = Env::new("short-window-env").with("EUKHE_WORKER_LOST_EXIT_MS", "500");
    let out = env.run(&["new"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("EUKHE_WORKER_LOST_EXIT_MS: worker_lost_exit_ms = 500 is shorter than the minimum 69000"),
        "{stderr}"
    );
    // Past the wire's range (10^14 ms) a window never expires, from the
    // file as from the environment: both start sessions.
    let past = "100000000000001";
    let file = Env::new("capped-window").with_config(&format!("worker_lost_exit_ms = {past}\n"));
    file.ok(&["new"]);
    let environment = Env::new("capped-window-env").with("EUKHE_WORKER_LOST_EXIT_MS", past);
    environment.ok(&["new"]);
}

#[test]
fn a_watchdog_shorter_than_the_sign_of_life_is_refused() {
    let env = Env::new("watchdog-config").with_config("worker_watchdog_ms = 500\n");
    let out = env.run(&["status"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("worker_watchdog_ms = 500 is below the minimum 2000"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn state_is_private_and_no_environment_value_reaches_a_log() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("private");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "export API_TOKEN=s3cr3t-t0ken-value"]);
    env.ok(&["send", &id, "echo run with the token set"]);
    wait_until(Duration::from_secs(10), "the run finishes", || {
        env.log(&id).contains("[run 2 exited 0]")
    });
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let state = env.dir.join("state");
    let session = state.join("sessions").join(&id);
    for dir in [
        &state,
        &session,
        &session.join("spool"),
        &session.join("scratch"),
    ] {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    for file in [
        "meta.json",
        "transcript3",
        "snapshot.json",
        "worker.json",
        "kernel.json",
    ] {
        assert_eq!(mode(&session.join(file)), 0o600, "{file}");
    }
    assert_eq!(mode(&state.join("busy.log")), 0o600, "busy evidence");
    // The kernel's spool and scratch files (output, ends, restore scripts,
    // the template's): nobody else's to read.
    for dir in ["spool", "scratch"] {
        for entry in std::fs::read_dir(session.join(dir)).unwrap().flatten() {
            let path = entry.path();
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                use std::os::unix::fs::PermissionsExt as _;
                let bits = meta.permissions().mode() & 0o777;
                assert_eq!(bits & 0o077, 0, "{} is {bits:o}", path.display());
            }
        }
    }
    // The snapshot keeps the value (0600, for the kernel); no log does.
    let mut logs = vec![state.join("busy.log"), state.join("daemon.log")];
    for entry in std::fs::read_dir(&session).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            logs.push(entry.path());
        }
    }
    assert!(
        logs.len() >= 4,
        "the worker's and kernel's logs are among {logs:?}"
    );
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains("s3cr3t-t0ken-value"),
            "{} holds an environment value",
            log.display()
        );
    }
}
