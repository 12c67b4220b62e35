//! Sessions on another machine over SSH (issue 55): every client command
//! with `--host` against a real sshd on loopback (`support::sshd`), whose
//! logins reach a private installation of their own. The "remote" and the
//! client are two installations on this machine: the client's own state is
//! never used.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::support::remote::{ssh_children, text, Remote};
use crate::support::sshd::RemotePath;
use crate::support::terminal::Terminal;
use crate::support::{kill9, skip, wait_until, Env};

/// The lines a child writes on standard output, as they come.
fn lines_of(child: &mut std::process::Child) -> Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Read `lines` into `seen` until one contains `want`, failing after `within`.
fn expect_line(lines: &Receiver<String>, seen: &mut Vec<String>, want: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !seen.iter().any(|l| l.contains(want)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("never saw {want:?}; saw {seen:?}"),
        }
    }
}

#[test]
fn new_bash_send_and_log_run_on_the_remote_daemon() {
    let Some(r) = Remote::start("basic", RemotePath::WithEukhe) else {
        return;
    };
    let id = r.ok(&["new", "--name", "s"]).trim().to_string();
    // The session is the remote installation's, not the client's.
    let listed = r.env.sessions();
    assert!(
        listed.as_array().unwrap().iter().any(|s| s["id"] == id),
        "{listed}"
    );
    assert_eq!(
        r.ok(&["bash", "s", "--", "echo hello from afar"]),
        "hello from afar\n"
    );
    let out = r.run(&["send", "--wait", "s", "echo sent; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("sent\n"),
        "{}",
        text(&out.stdout)
    );
    let log = r.ok(&["log", "s"]);
    assert!(
        log.contains("hello from afar") && log.contains("[run 2 exited 3]"),
        "{log}"
    );
    // Standard input reaches a remote command (lent through a second ssh).
    let mut cat = r
        .command(&["bash", "s", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    cat.stdin.take().unwrap().write_all(b"piped\n").unwrap();
    let out = cat.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "piped\n", "{}", text(&out.stderr));
}

#[test]
fn log_follow_and_attach_show_the_remote_sessions_output() {
    let Some(r) = Remote::start("follow", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    r.ok(&["bash", "s", "--", "echo first"]);
    let mut follow = r
        .command(&["log", "--follow", "s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let follow_lines = lines_of(&mut follow);
    let mut attach = r
        .command(&["attach", "s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let attach_lines = lines_of(&mut attach);
    let (mut followed, mut attached) = (Vec::new(), Vec::new());
    let within = Duration::from_secs(20);
    expect_line(&follow_lines, &mut followed, "first", within);
    expect_line(&attach_lines, &mut attached, "first", within);
    // Output made on the remote machine itself reaches both.
    r.env.ok(&["bash", "s", "--", "echo made over there"]);
    expect_line(&follow_lines, &mut followed, "made over there", within);
    expect_line(&attach_lines, &mut attached, "made over there", within);
    // A line typed into the attach is the remote session's input.
    let mut stdin = attach.stdin.take().unwrap();
    writeln!(stdin, "echo typed far away").unwrap();
    expect_line(&attach_lines, &mut attached, "[run 3 exited 0]", within);
    expect_line(&follow_lines, &mut followed, "typed far away", within);
    assert!(r.env.log("s").contains("$ echo typed far away"));
    drop(stdin);
    for mut child in [follow, attach] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_killed_ssh_under_send_wait_is_ridden_through_output_once() {
    let Some(r) = Remote::start("drop", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let mut gated = r.start_gated(&["send", "--wait", "s"], "after", 7);
    let first_ssh = || ssh_children(gated.client.id()).first().copied();
    let ssh = first_ssh().expect("the client's ssh");
    kill9(ssh);
    // The next ssh is another process: the client came back.
    wait_until(Duration::from_secs(20), "a new ssh", || {
        first_ssh().is_some_and(|pid| pid != ssh)
    });
    gated.open();
    let (status, stderr) = gated.finish();
    assert_eq!(status, Some(7), "{stderr}");
    gated.assert_printed_once("after");
}

#[test]
fn a_remote_without_eukhe_says_which_package_to_install() {
    let Some(r) = Remote::start("missing", RemotePath::WithoutEukhe) else {
        return;
    };
    let out = r.run(&["ls"]);
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("eukhe is not installed on 127.0.0.1")
            && stderr.contains("apt install eukhe"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_host_is_one_line_naming_it() {
    let Some(r) = Remote::start("unreachable", RemotePath::WithEukhe) else {
        return;
    };
    // Nothing listens on port 1 of loopback.
    let out = r
        .client
        .command(&["--host", "ssh://127.0.0.1:1", "ls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cannot reach 127.0.0.1:1 over SSH"),
        "{stderr}"
    );
    // A login the server refuses.
    let out = r
        .client
        .command(&["--host", &format!("nobody-here@{}", r.sshd.host()), "ls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("refused the SSH login"), "{stderr}");
    // A value that names no host.
    let out = r.client.command(&["--host", "a b", "ls"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(text(&out.stderr).contains("is not [ssh://][user@]host[:port]"));
}

#[test]
fn versions_across_hosts_are_used_and_said_naming_the_host() {
    let Some(r) = Remote::start("versions", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let remote_version = r.env.ok(&["--version"]);
    let remote_version = remote_version.split_whitespace().last().unwrap();
    // A newer client cannot start its build over there: it uses the
    // older daemon and says so, naming the host and both versions.
    let out = r
        .command(&["ls"])
        .env("EUKHE_VERSION", "99.0.0")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "the daemon on 127.0.0.1 (v{remote_version}) is older than this eukhe (v99.0.0)"
        )),
        "{stderr}"
    );
    // An older client uses a newer daemon and says so.
    let out = r
        .command(&["ls"])
        .env("EUKHE_VERSION", "0.0.1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("this eukhe (v0.0.1) is older than the daemon on 127.0.0.1"),
        "{}",
        text(&out.stderr)
    );
    // The daemon is the one that ran before: nothing replaced it.
    let listed = r.env.sessions();
    assert!(
        listed.as_array().unwrap().iter().any(|s| s["name"] == "s"),
        "{listed}"
    );
}

#[test]
fn the_proxy_refuses_another_users_socket() {
    if skip::not_root("it gives the daemon's socket to another user") {
        return;
    }
    let env = Env::new("proxy-owner");
    env.ok(&["ls"]);
    let socket = env
        .vars
        .iter()
        .find(|(n, _)| n == "EUKHE_SOCKET")
        .map(|(_, v)| v.clone())
        .unwrap();
    nix::unistd::chown(
        socket.as_str(),
        Some(nix::unistd::Uid::from_raw(65534)),
        None,
    )
    .unwrap();
    let out = env
        .command(&["proxy", "--background"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty(), "the proxy passed bytes on");
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("belongs to uid 65534"), "{stderr}");
}

#[test]
fn the_interactive_proxy_replaces_an_idle_older_daemon_and_the_background_one_never() {
    let older = Env::new("proxy-replace").with("EUKHE_VERSION", "0.0.1");
    older.ok(&["new"]);
    let old_daemon = older.daemon_pid();
    let installed = older.sharing().with("EUKHE_VERSION", "9.0.0");
    let proxy = |args: &[&str]| {
        let out = installed
            .command(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    // A background client's proxy keeps the daemon it finds.
    proxy(&["proxy", "--background"]);
    assert_eq!(older.daemon_pid(), old_daemon);
    // An interactive client's proxy is the remote's own interactive start.
    proxy(&["proxy"]);
    let new_daemon = installed.daemon_pid();
    assert_ne!(new_daemon, old_daemon);
    let status: serde_json::Value =
        serde_json::from_str(&installed.ok(&["status", "--json"])).unwrap();
    assert_eq!(status["version"], "9.0.0", "{status}");
}

#[test]
fn log_follow_and_attach_ride_through_killed_ssh_connections_output_once() {
    let Some(r) = Remote::start("follow-drop", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    r.env.ok(&["bash", "s", "--", "echo line-one"]);
    let start = |args: &[&str], file: &str| {
        let out = r.client.dir.join(file);
        let child = r
            .command(args)
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (child, out)
    };
    let (mut follow, follow_out) = start(&["log", "--follow", "s"], "follow");
    let (mut attach, attach_out) = start(&["attach", "s"], "attach");
    let printed = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    let within = Duration::from_secs(20);
    for (child, out) in [(&follow, &follow_out), (&attach, &attach_out)] {
        wait_until(within, "the first line", || {
            printed(out).contains("line-one")
        });
        let killed = ssh_children(child.id());
        assert!(!killed.is_empty(), "no ssh under the client");
        for &pid in &killed {
            kill9(pid);
        }
        wait_until(within, "a new ssh", || {
            ssh_children(child.id())
                .iter()
                .any(|pid| !killed.contains(pid))
        });
    }
    r.env.ok(&["bash", "s", "--", "echo line-two"]);
    for out in [&follow_out, &attach_out] {
        wait_until(within, "the line made after the drop", || {
            printed(out).lines().any(|l| l == "line-two")
        });
    }
    for out in [&follow_out, &attach_out] {
        let seen = printed(out);
        // Each output line once: nothing lost, nothing shown again.
        for line in ["line-one", "line-two"] {
            assert_eq!(seen.lines().filter(|l| *l == line).count(), 1, "{seen}");
        }
    }
    for child in [&mut follow, &mut attach] {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn attach_and_a_terminal_run_from_a_terminal_over_host() {
    let Some(r) = Remote::start("terminal", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "a"]);
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let host = r.sshd.host();
    let within = Duration::from_secs(20);
    let Some(terminal) =
        Terminal::open(&r.client, 24, 80, &[eukhe, "--host", &host, "attach", "a"])
    else {
        return;
    };
    terminal.wait_screen(within, "the attach banner", |s| s.contains("attached to a"));
    terminal.type_text("echo typed-$((6*7))");
    terminal.keys(&["Enter"]);
    terminal.wait_screen(within, "the run's output and end", |s| {
        s.contains("typed-42") && s.contains("[run 1 exited 0]")
    });
    terminal.keys(&["C-d"]);
    let ended = terminal.wait_exit(within, "the attach");
    assert_eq!(ended, Some(0), "{}", terminal.screen());
    assert!(r.env.log("a").contains("typed-42"));
    // A terminal run: the remote kernel's terminal, passed through.
    let Some(tty) = Terminal::open(
        &r.client,
        24,
        80,
        &[
            eukhe,
            "--host",
            &host,
            "bash",
            "--tty",
            "a",
            "--",
            "tput cols; read x; echo got-$x",
        ],
    ) else {
        return;
    };
    tty.wait_screen(within, "the remote terminal's width", |s| {
        s.lines().any(|l| l.trim() == "80")
    });
    tty.type_text("abc");
    tty.keys(&["Enter"]);
    tty.wait_screen(within, "the line typed, read there", |s| {
        s.contains("got-abc")
    });
    let ended = tty.wait_exit(within, "the terminal run");
    assert_eq!(ended, Some(0), "{}", tty.screen());
}

/// `top`, the dashboard, over `--host`: the remote session's row with its
/// run's last output line, and `q` leaves it.
#[test]
fn top_over_host_shows_the_remote_sessions() {
    let Some(r) = Remote::start("top", RemotePath::WithEukhe) else {
        return;
    };
    r.ok(&["new", "--name", "a"]);
    r.ok(&["send", "a", "echo remote-top-$((6*7)); sleep 60"]);
    let eukhe = env!("CARGO_BIN_EXE_eukhe");
    let host = r.sshd.host();
    let within = Duration::from_secs(20);
    let Some(top) = Terminal::open(&r.client, 24, 120, &[eukhe, "--host", &host, "top"]) else {
        return;
    };
    top.wait_screen(within, "the remote session's busy row", |s| {
        s.lines()
            .any(|l| l.contains(" busy ") && l.contains("remote-top-42"))
    });
    top.keys(&["q"]);
    assert_eq!(top.wait_exit(within, "top"), Some(0), "{}", top.screen());
    r.ok(&["rm", "--force", "a"]);
}
