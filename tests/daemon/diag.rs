//! Diagnostics through the real binary: one daemon per state directory,
//! the client's environment in a new session, damaged session files,
//! `doctor`'s checks, names, `ls`, help on every option.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::skip::skip_unless_ci;
use crate::support::{kill9, never, wait_for, wait_until, Env};

/// Wait until the wall clock reads a later millisecond than now, so the
/// activity that follows is stamped later than any before it.
fn next_millisecond() {
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    };
    let now = now_ms();
    wait_until(Duration::from_secs(1), "the clock moves on", || {
        now_ms() > now
    });
}

/// Run `command` to its end within `within`, or kill it (by its pid, a
/// child this test started) and fail.
fn finish_within(mut command: Command, within: Duration, what: &str) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start eukhe");
    if !wait_for(within, || child.try_wait().expect("wait").is_some()) {
        kill9(child.id());
        let _ = child.wait();
        panic!("{what}: still running after {within:?}");
    }
    child.wait_with_output().expect("output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_second_daemon_on_the_same_state_directory_refuses_and_names_the_first() {
    let env = Env::new("one-daemon");
    let id = env.ok(&["new"]).trim().to_string();
    assert_eq!(env.ok(&["bash", &id, "--", "echo before"]), "before\n");
    let worker = env.worker_pid(&id).unwrap();
    let kernel = env.kernel_pid(&id).unwrap();
    let first = env.daemon_pid();
    let first_socket = env.dir.join("run/eukhe.sock").display().to_string();
    let other_socket = env.dir.join("run2/eukhe.sock");

    // A daemon started by hand on another socket, same state directory.
    let mut second = env.command(&["daemon"]);
    second.env("EUKHE_SOCKET", &other_socket);
    let out = finish_within(second, Duration::from_secs(15), "the second daemon");
    assert!(!out.status.success(), "the second daemon ran");
    let said = stderr(&out);
    assert_eq!(said.trim_end().lines().count(), 1, "one line: {said}");
    assert!(
        said.contains(&first_socket) && said.contains(&format!("pid {first}")),
        "names the running daemon's socket and pid: {said}"
    );
    assert!(!other_socket.exists(), "the refused daemon left a socket");

    // A client on the other socket starts a daemon that refuses the same way.
    let mut client = env.command(&["ls"]);
    client.env("EUKHE_SOCKET", &other_socket);
    let out = finish_within(client, Duration::from_secs(15), "ls on the other socket");
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains(&first_socket) && said.contains(&format!("pid {first}")),
        "{said}"
    );

    // doctor on the other socket says which daemon serves the directory.
    let mut doctor = env.command(&["doctor"]);
    doctor.env("EUKHE_SOCKET", &other_socket);
    let out = finish_within(doctor, Duration::from_secs(15), "doctor");
    assert!(!out.status.success());
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("FAIL state directory lock")
                && l.contains(&first_socket)
                && l.contains(&format!("pid {first}"))),
        "{report}"
    );

    // The sessions were never touched.
    assert_eq!(env.daemon_pid(), first);
    assert_eq!(env.worker_pid(&id), Some(worker));
    assert_eq!(env.kernel_pid(&id), Some(kernel));
    assert_eq!(env.session(&id)["failures_in_window"], 0);
    assert_eq!(env.ok(&["bash", &id, "--", "echo after"]), "after\n");
}

#[test]
fn a_new_session_gets_the_clients_environment_which_survives_a_kernel_restart() {
    let env = Env::new("client-env");
    // The daemon starts with a variable no client has later.
    let mut start = env.command(&["status"]);
    start.env("DAEMON_ONLY", "d").env_remove("FOO");
    assert!(start.output().unwrap().status.success());

    let show = "echo ${FOO-unset} ${DAEMON_ONLY-unset} ${BAR-unset} ${EUKHE_SOCKET-unset} ${NOTIFY_SOCKET-unset} ${INVOCATION_ID-unset}";
    let mut new = env.command(&["new", "--name", "carried"]);
    new.env("FOO", "1")
        .env("NOTIFY_SOCKET", "/nonexistent/notify")
        .env("INVOCATION_ID", "0123456789abcdef")
        .env_remove("DAEMON_ONLY");
    let out = new.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let expected = "1 unset unset unset unset unset\n";
    assert_eq!(env.ok(&["bash", &id, "--", show]), expected);
    assert_eq!(env.ok(&["bash", &id, "--", "echo $FOO"]), "1\n");

    // A kernel started again over the snapshot keeps it.
    let kernel = env.kernel_pid(&id).unwrap();
    kill9(kernel);
    wait_until(Duration::from_secs(15), "a new kernel serves", || {
        env.kernel_pid(&id).is_some_and(|pid| pid != kernel)
    });
    assert_eq!(env.ok(&["bash", &id, "--", show]), expected);

    // --env adds; --clean-env starts from the daemon's environment.
    let mut added = env.command(&["new", "--env", "BAR=2", "--env", "FOO=over"]);
    added.env("FOO", "1");
    let out = added.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let added = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        env.ok(&["bash", &added, "--", show]),
        "over unset 2 unset unset unset\n"
    );
    let mut clean = env.command(&["new", "--clean-env", "--env", "BAR=3"]);
    clean.env("FOO", "1");
    let out = clean.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let clean = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        env.ok(&["bash", &clean, "--", show]),
        "unset d 3 unset unset unset\n"
    );

    // eukhe's own variables are refused by --env, in one line.
    let refused = env.run(&["new", "--env", "EUKHE_SOCKET=/x"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("never carried"),
        "{}",
        stderr(&refused)
    );
    let refused = env.run(&["new", "--env", "NOVALUE"]);
    assert!(
        stderr(&refused).contains("KEY=VALUE"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn damaged_session_files_are_named_in_one_line_and_do_not_crash_loop() {
    let env = Env::new("damaged");
    let snapshot = env.ok(&["new", "--name", "snap"]).trim().to_string();
    let namespace = env.ok(&["new", "--name", "ns"]).trim().to_string();
    let meta = env.ok(&["new", "--name", "meta"]).trim().to_string();
    let sound = env.ok(&["new", "--name", "sound"]).trim().to_string();
    for id in [&snapshot, &namespace, &meta, &sound] {
        env.ok(&["bash", id, "--", "f() { echo kept; }"]);
    }
    // Every process of every session ends; then their files are damaged.
    env.ok(&["shutdown", "--force"]);
    wait_until(Duration::from_secs(10), "every kernel ends", || {
        env.kernel_pids().is_empty()
    });
    let dir = |id: &str| env.dir.join("state/sessions").join(id);
    let bad_snapshot = dir(&snapshot).join("snapshot.json");
    std::fs::write(&bad_snapshot, "{ not json").unwrap();
    // Without a snapshot, an earlier version's namespace.json is read.
    std::fs::remove_file(dir(&namespace).join("snapshot.json")).unwrap();
    let bad_namespace = dir(&namespace).join("namespace.json");
    std::fs::write(&bad_namespace, "garbage").unwrap();
    let bad_meta = dir(&meta).join("meta.json");
    let good_meta = std::fs::read(&bad_meta).unwrap();
    std::fs::write(&bad_meta, "\0\0\0").unwrap();
    let damaged = [
        (&snapshot, &bad_snapshot),
        (&namespace, &bad_namespace),
        (&meta, &bad_meta),
    ];

    // ls: each damaged session in one line, with its file.
    let out = env.run(&["ls"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stderr(&out);
    for (id, path) in damaged {
        let line = said
            .lines()
            .find(|l| l.contains(id.as_str()))
            .unwrap_or_else(|| panic!("ls names {id}: {said}"));
        assert!(line.contains(&path.display().to_string()), "{line}");
        assert_eq!(env.session(id)["state"], "damaged");
        let problem = env.session(id)["problem"].as_str().unwrap().to_string();
        assert!(problem.contains(&path.display().to_string()), "{problem}");
    }

    // bash: refused at once in one line naming the file.
    for (id, path) in damaged {
        let started = Instant::now();
        let out = env.run(&["bash", id, "--", "true"]);
        assert!(!out.status.success());
        let said = stderr(&out);
        assert_eq!(said.trim_end().lines().count(), 1, "{said}");
        assert!(said.contains(&path.display().to_string()), "{said}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }

    // doctor: a failed check per damaged session, naming its file.
    let out = env.run(&["doctor"]);
    assert!(!out.status.success(), "doctor passed damaged sessions");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    for (_, path) in damaged {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("FAIL session files")
                    && l.contains(&path.display().to_string())),
            "{report}"
        );
    }

    // No crash loop: no worker, no failure counted, still damaged.
    never(
        Duration::from_secs(2),
        "a damaged session was started or counted a failure",
        || {
            damaged.iter().any(|(id, _)| {
                let session = env.session(id);
                session["state"] != "damaged"
                    || session["failures_in_window"] != 0
                    || !session["pid"].is_null()
            })
        },
    );
    // The sound session is untouched.
    assert_eq!(env.ok(&["bash", &sound, "--", "f"]), "kept\n");

    // Mended (the damaged snapshot moved away), the session starts again.
    std::fs::rename(&bad_snapshot, dir(&snapshot).join("snapshot.json.bad")).unwrap();
    assert_eq!(
        env.ok(&["bash", &snapshot, "--", "echo mended"]),
        "mended\n"
    );
    // `restart` says what is still wrong; once mended, it starts the
    // session with its shell state (the snapshot was never damaged).
    let out = env.run(&["restart", &meta]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&bad_meta.display().to_string()),
        "{}",
        stderr(&out)
    );
    std::fs::write(&bad_meta, good_meta).unwrap();
    env.ok(&["restart", &meta]);
    assert_eq!(env.session(&meta)["name"], "meta");
    assert_eq!(env.ok(&["bash", "meta", "--", "f"]), "kept\n");
}

#[test]
fn doctor_fails_a_read_only_state_directory() {
    let env = Env::new("doctor-ro");
    let mount = env.dir.join("ro");
    std::fs::create_dir_all(&mount).unwrap();
    let unshare = Command::new("unshare").args(["--mount", "true"]).output();
    if !unshare.is_ok_and(|o| o.status.success()) {
        skip_unless_ci(
            "this test needs `unshare --mount` (a mount namespace) to make a read-only file system",
        );
        return;
    }
    let exe = env!("CARGO_BIN_EXE_eukhe");
    let script = format!(
        "mount -t tmpfs -o ro,mode=700 tmpfs '{}' && exec '{exe}' doctor",
        mount.display()
    );
    for state in [mount.clone(), mount.join("not-made-yet")] {
        // The test's own eukhe environment, for a doctor run in a mount
        // namespace of its own.
        let doctor = env.command(&[]);
        let mut command = Command::new("unshare");
        command.args(["--mount", "sh", "-c", &script]);
        for (name, value) in doctor.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command.env("EUKHE_STATE_DIR", &state);
        let out = finish_within(command, Duration::from_secs(30), "doctor");
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!out.status.success(), "{report}");
        let line = report
            .lines()
            .find(|l| l.contains("state directory"))
            .unwrap_or_else(|| panic!("{report}{}", stderr(&out)));
        assert!(
            line.starts_with("FAIL") && line.contains("Read-only file system"),
            "{line}"
        );
    }
    // The same checks pass on writable directories (made by the daemon).
    env.ok(&["status"]);
    let report = env.ok(&["doctor"]);
    for check in ["state directory", "socket directory", "socket paths"] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with("ok   ") && l.contains(check)),
            "{check}: {report}"
        );
    }
    assert!(report.contains("writable"), "{report}");
}

/// `doctor` says how much room the state disk has, and fails when it is
/// nearly full (a full disk refuses inputs and loses output).
#[test]
fn doctor_fails_a_nearly_full_state_disk() {
    use crate::support::small_disk::{self, fill};
    let env = Env::new("doctor-room");
    env.ok(&["status"]);
    let report = env.ok(&["doctor"]);
    let line = report
        .lines()
        .find(|l| l.contains("state disk space"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.starts_with("ok   ") && line.contains("MiB free of"),
        "{line}"
    );
    let Some(disk) = small_disk::for_test(&env.dir.join("small")) else {
        return;
    };
    let small = env.with("EUKHE_STATE_DIR", &disk.path.display().to_string());
    let out = small.run(&["doctor"]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{report}");
    let line = report
        .lines()
        .find(|l| l.contains("state disk space"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        line.starts_with("FAIL")
            && line.contains("MiB free of 16 MiB")
            && line.contains("free some space"),
        "{line}"
    );
    let filler = fill(&disk);
    let report = String::from_utf8_lossy(&small.run(&["doctor"]).stdout).into_owned();
    assert!(report.contains("0 MiB free of 16 MiB"), "{report}");
    std::fs::remove_file(filler).unwrap();
}

#[test]
fn a_socket_directory_too_deep_for_the_worker_sockets_is_refused_in_one_line() {
    // The daemon's socket fits in sun_path (108 bytes with its NUL); the
    // worker and kernel sockets beside it (`workers/<id>.sock`) do not.
    let env = Env::new("deep");
    let base = env.dir.display().to_string();
    let padding = 92usize.saturating_sub(base.len() + 1);
    let deep_dir = format!("{base}/{}", "d".repeat(padding.max(1)));
    let socket = format!("{deep_dir}/e.sock");
    assert!(socket.len() <= 107, "{socket}");
    assert!(deep_dir.len() + "/workers/ffffffff.sock".len() > 107);
    let env = env.with("EUKHE_SOCKET", &socket);

    let report = env.run(&["doctor"]);
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(!report.status.success(), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("FAIL socket paths")
            && l.contains("worker")
            && l.contains(&deep_dir)),
        "{text}"
    );

    let daemon = finish_within(
        env.command(&["daemon"]),
        Duration::from_secs(15),
        "the daemon",
    );
    assert!(!daemon.status.success());
    let said = stderr(&daemon);
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(
        said.contains("too deep") && said.contains(&deep_dir),
        "{said}"
    );
    assert!(!std::path::Path::new(&socket).exists(), "it listened");

    // A client starting it hears the same line, at once.
    let out = finish_within(env.command(&["new"]), Duration::from_secs(15), "new");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("too deep"), "{}", stderr(&out));
}

#[test]
fn a_socket_path_too_long_to_connect_to_is_said_as_doctor_says_it() {
    let env = Env::new("long-socket");
    let socket = format!("{}/{}/eukhe.sock", env.dir.display(), "d".repeat(120));
    let env = env.with("EUKHE_SOCKET", &socket);
    let out = finish_within(env.command(&["ls"]), Duration::from_secs(15), "ls");
    assert_eq!(out.status.code(), Some(125));
    let said = stderr(&out);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("is too deep: the daemon's socket would be"),
        "{said}"
    );
    assert!(!said.contains("SUN_LEN"), "{said}");
}

#[test]
fn doctor_reports_lingering_on_the_systemd_backend_only() {
    let env = Env::new("linger");
    let plain = env.ok(&["doctor"]);
    assert!(!plain.contains("lingering"), "{plain}");
    let systemd = env.with("EUKHE_HOST", "systemd");
    let out = systemd.run(&["doctor"]);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = report
        .lines()
        .find(|l| l.contains("lingering"))
        .unwrap_or_else(|| panic!("{report}"));
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let flag = std::path::Path::new("/var/lib/systemd/linger").join(&user);
    if flag.exists() {
        assert!(line.starts_with("ok"), "{line}");
    } else if line.starts_with("FAIL") {
        assert!(
            line.contains(&format!("loginctl enable-linger {user}"))
                && line.contains("last logout")
                && line.contains("revived only at the next login"),
            "{line}"
        );
    }
}

#[test]
fn a_name_may_not_be_another_sessions_id() {
    let env = Env::new("name-id");
    let id = env.ok(&["new"]).trim().to_string();
    let out = env.run(&["new", "--name", &id]);
    assert!(!out.status.success());
    let said = stderr(&out);
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    assert!(said.contains("is the id of another session"), "{said}");
    assert_eq!(env.sessions().as_array().unwrap().len(), 1);
}

/// The display columns of `text` for the characters these tests use:
/// CJK and emoji take two.
fn columns(text: &str) -> usize {
    text.chars()
        .map(|c| if c as u32 >= 0x1100 { 2 } else { 1 })
        .sum()
}

#[test]
fn ls_lists_by_last_activity_with_the_directory_and_aligns_wide_names() {
    let env = Env::new("ls-order");
    let cjk = env
        .ok(&["new", "--name", "日本語の名前", "--cwd", "/tmp"])
        .trim()
        .to_string();
    let emoji = env
        .ok(&["new", "--name", "🦀crab", "--cwd", "/"])
        .trim()
        .to_string();
    let plain = env.ok(&["new", "--name", "plain"]).trim().to_string();
    // Activity in this order: plain, then the CJK one, then the emoji one.
    // (The emoji one's shell moves: `ls` shows where it is now.)
    for (id, command) in [(&plain, "true"), (&cjk, "true"), (&emoji, "cd /usr")] {
        next_millisecond();
        env.ok(&["bash", id, "--", command]);
    }
    let listed = env.sessions();
    let listed = listed.as_array().unwrap();
    let order: Vec<&str> = listed.iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(order, [plain.as_str(), cjk.as_str(), emoji.as_str()]);
    for s in listed {
        let created = s["created_ms"].as_u64().unwrap();
        let active = s["active_ms"].as_u64().unwrap();
        assert!(created > 0 && active >= created, "{s}");
    }
    assert_eq!(listed[1]["cwd"], "/tmp");
    assert_eq!(listed[2]["cwd"], "/usr");
    // Activity moves a session to the end.
    next_millisecond();
    env.ok(&["bash", &plain, "--", "true"]);
    let again = env.sessions();
    assert_eq!(
        again.as_array().unwrap().last().unwrap()["id"],
        plain.as_str()
    );

    // The worker tells its daemon the run ended just after its client;
    // on a loaded machine `ls` can come first.
    wait_until(Duration::from_secs(10), "every session idle", || {
        env.sessions()
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "idle")
    });
    let table = env.ok(&["ls"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].contains("ACTIVE") && lines[0].contains("CWD"),
        "{table}"
    );
    // Every column starts at the same display column on every line.
    let state_at = |line: &str, state: &str| columns(&line[..line.find(state).unwrap()]);
    let header = state_at(lines[0], "STATE");
    for line in &lines[1..] {
        assert_eq!(state_at(line, "idle"), header, "{table}");
    }
    let cwd_at = |line: &str| columns(&line[..line.rfind("  ").unwrap() + 2]);
    let first = cwd_at(lines[0]);
    for line in &lines[1..] {
        assert_eq!(cwd_at(line), first, "{table}");
    }
}

#[test]
fn every_option_of_every_command_has_help() {
    use clap::CommandFactory;
    fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    walk(&eukhe::client::Cli::command(), "eukhe", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:?}");
    // And the binary shows it: `new --help` documents what is never carried.
    let env = Env::new("help");
    let help = env.ok(&["new", "--help"]);
    for word in [
        "--env",
        "--clean-env",
        "NOTIFY_SOCKET",
        "EUKHE_",
        "directory this command runs in",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
}
