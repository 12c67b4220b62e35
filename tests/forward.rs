//! A host's forward (issue 55): after the first command over `--host`,
//! the next ones go through a Unix socket OpenSSH carries to the remote
//! daemon's, kept by a keeper (`eukhe proxy --keep-forward HOST`),
//! against a real sshd on loopback (`support::sshd`). A forward that is
//! gone or refused never makes a command fail: the ssh proxy path serves
//! it.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use crate::support::process::{alive, cmdline, descendants};
use crate::support::sshd::{RemotePath, Sshd};
use crate::support::{kill9, signal, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(30);

/// A remote installation behind its sshd, and a client with forwards on.
struct Remote {
    client: Env,
    sshd: Sshd,
    env: Env,
}

impl Remote {
    fn start(name: &str, sshd_extra: &str, client_vars: &[(&str, &str)]) -> Option<Remote> {
        let env = Env::new(&format!("fwd-remote-{name}"));
        let sshd = Sshd::start_with(&env, name, RemotePath::WithEukhe, sshd_extra)?;
        let mut client = sshd
            .client(&format!("fwd-client-{name}"))
            .with("EUKHE_FORWARD", "1");
        for (var, value) in client_vars {
            client.set_var(var, value);
        }
        Some(Remote { client, sshd, env })
    }

    fn run(&self, args: &[&str]) -> Output {
        let host = self.sshd.host();
        let mut all = vec!["--host", host.as_str()];
        all.extend_from_slice(args);
        self.client
            .command(&all)
            .stdin(Stdio::null())
            .output()
            .expect("run eukhe")
    }

    /// Run and expect success with nothing on standard error.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "eukhe --host {args:?} ({}):\nstdout: {}\nstderr: {}\nsshd: {}",
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.sshd.log()
        );
        text(&out.stdout)
    }

    /// The client's forward directory.
    fn forward_dir(&self) -> PathBuf {
        let socket = self
            .client
            .vars
            .iter()
            .find(|(n, _)| n == "EUKHE_SOCKET")
            .map(|(_, v)| PathBuf::from(v))
            .unwrap();
        socket.parent().unwrap().join("forward")
    }

    /// The files of the one host's forward ending in `suffix`.
    fn forward_files(&self, suffix: &str) -> Vec<PathBuf> {
        std::fs::read_dir(self.forward_dir())
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.to_string_lossy().ends_with(suffix))
                    .filter(|p| suffix != ".sock" || !p.to_string_lossy().ends_with(".ssh.sock"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The public socket of the forward, once it listens.
    fn forward_socket(&self) -> Option<PathBuf> {
        self.forward_files(".sock").into_iter().next()
    }

    /// The keeper's pid, from its lock file, while it lives.
    fn keeper(&self) -> Option<u32> {
        let lock = self.forward_files(".lock").into_iter().next()?;
        let pid = std::fs::read_to_string(lock).ok()?.trim().parse().ok()?;
        alive(pid).then_some(pid)
    }

    /// The keeper's ssh.
    fn forward_ssh(&self, keeper: u32) -> Option<u32> {
        descendants(keeper)
            .into_iter()
            .find(|&pid| cmdline(pid).starts_with("ssh"))
    }

    /// Logins sshd accepted so far.
    fn logins(&self) -> usize {
        self.sshd.log().matches("Accepted publickey").count()
    }

    /// Wait until a keeper serves on its socket; its pid.
    fn wait_forward(&self) -> u32 {
        wait_until(WITHIN, "the forward's socket", || {
            self.forward_socket().is_some() && self.keeper().is_some()
        });
        self.keeper().unwrap()
    }
}

impl Remote {
    /// `eukhe --host HOST ARGS... COMMAND`, where COMMAND prints `before`,
    /// waits for the go file, prints `after` and exits `status`; its output
    /// goes to a file. Returned once it printed `before` through the
    /// forward (it runs no ssh of its own): the go file, the client, the
    /// output file.
    fn start_gated(&self, args: &[&str], after: &str, status: i32) -> (PathBuf, Child, PathBuf) {
        let marker = self.env.dir.join("go");
        let out_file = self.client.dir.join("out");
        let host = self.sshd.host();
        let command = format!(
            "echo before; while [ ! -e {} ]; do sleep 0.05; done; echo {after}; exit {status}",
            marker.display()
        );
        let mut words = vec!["--host", host.as_str()];
        words.extend_from_slice(args);
        words.push(&command);
        let child = self
            .client
            .command(&words)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_file).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until(WITHIN, "the command's first line", || {
            std::fs::read_to_string(&out_file).is_ok_and(|out| out.contains("before"))
        });
        assert!(
            !descendants(child.id())
                .iter()
                .any(|&pid| cmdline(pid).starts_with("ssh")),
            "the client ran ssh"
        );
        (marker, child, out_file)
    }
}

/// Wait for `client` to end: its status and what it said on stderr.
fn finish(mut client: Child) -> (Option<i32>, String) {
    wait_until(WITHIN, "the client ends", || {
        client.try_wait().unwrap().is_some()
    });
    let status = client.wait().unwrap();
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(&mut client.stderr.take().unwrap(), &mut stderr);
    (status.code(), stderr)
}

impl Drop for Remote {
    /// A keeper left by a failed test is ended by its pid.
    fn drop(&mut self) {
        if let Some(pid) = self.keeper() {
            signal(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = crate::support::wait_for(WITHIN, || !alive(pid));
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[test]
fn the_next_commands_go_through_the_forward_without_a_login() {
    let Some(r) = Remote::start("through", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    r.wait_forward();
    let logins = r.logins();
    for i in 0..3 {
        let said = format!("through the forward {i}");
        assert_eq!(
            r.ok(&["bash", "s", "--", &format!("echo {said}")]),
            format!("{said}\n")
        );
    }
    // No command logged in again: each went through the forward.
    assert_eq!(r.logins(), logins, "{}", r.sshd.log());
    assert!(r.env.log("s").contains("through the forward 2"));
    let out = r.run(&["send", "--wait", "s", "exit 4"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(r.logins(), logins);
    // The user can see the way their commands go.
    let doctor = text(&r.run(&["doctor"]).stdout);
    assert!(doctor.contains("route: through the forward"), "{doctor}");
    let proxied = r
        .client
        .command(&["--host", &r.sshd.host(), "doctor"])
        .env("EUKHE_FORWARD", "0")
        .output()
        .unwrap();
    let proxied = text(&proxied.stdout);
    assert!(
        proxied.contains("route: over `ssh 127.0.0.1 eukhe proxy` (the forward is off)"),
        "{proxied}"
    );
}

#[test]
fn a_killed_forward_ssh_is_ridden_through_and_the_forward_comes_back() {
    let Some(r) = Remote::start("killed", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let (marker, waiting, out_file) = r.start_gated(&["send", "--wait", "s"], "after", 7);
    let printed = || std::fs::read_to_string(&out_file).unwrap_or_default();
    let ssh = r.forward_ssh(keeper).expect("the forward's ssh");
    kill9(ssh);
    wait_until(WITHIN, "the old keeper's end", || !alive(keeper));
    // The client came back (through the proxy path), which started a
    // new forward.
    wait_until(WITHIN, "a new forward", || {
        r.keeper().is_some_and(|pid| pid != keeper) && r.forward_socket().is_some()
    });
    std::fs::write(&marker, "").unwrap();
    let (status, stderr) = finish(waiting);
    assert_eq!(status, Some(7), "{stderr}");
    let out = printed();
    assert_eq!(out.matches("before").count(), 1, "{out}");
    assert_eq!(out.matches("after").count(), 1, "{out}");
    assert!(out.find("before") < out.find("after"), "{out}");
    let logins = r.logins();
    assert_eq!(r.ok(&["bash", "s", "--", "echo again"]), "again\n");
    assert_eq!(r.logins(), logins, "the new forward was not used");
}

#[test]
fn a_server_forbidding_forwards_serves_every_command_by_the_proxy() {
    let Some(r) = Remote::start("forbidden", "AllowStreamLocalForwarding no\n", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let log = || {
        r.forward_files(".log")
            .first()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    wait_until(WITHIN, "the forward's attempt to end", || {
        log().contains("no forward to")
    });
    for i in 0..3 {
        assert_eq!(
            r.ok(&["bash", "s", "--", &format!("echo by proxy {i}")]),
            format!("by proxy {i}\n")
        );
    }
    // Whatever the last command might have started has ended too.
    wait_until(WITHIN, "no keeper", || r.keeper().is_none());
    assert_eq!(log().matches("no forward to").count(), 1, "{}", log());
    assert!(r.forward_socket().is_none());
}

#[test]
fn an_idle_forward_ends_and_leaves_nothing() {
    let Some(r) = Remote::start("idle", "", &[("EUKHE_FORWARD_IDLE_MS", "3000")]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let ssh = r.forward_ssh(keeper).expect("the forward's ssh");
    let socket = r.forward_socket().unwrap();
    let logins = r.logins();
    assert_eq!(r.ok(&["bash", "s", "--", "echo used"]), "used\n");
    assert_eq!(r.logins(), logins);
    wait_until(WITHIN, "the idle keeper's end", || {
        !alive(keeper) && !alive(ssh)
    });
    assert!(!exists(&socket), "{} is left", socket.display());
    assert!(
        r.forward_files(".ssh.sock").is_empty(),
        "ssh's socket is left"
    );
    // The next command starts a new forward at once.
    r.ok(&["bash", "s", "--", "true"]);
    let next = r.wait_forward();
    assert_ne!(next, keeper);
}

#[test]
fn log_follow_rides_through_a_killed_forward_and_a_gone_daemon_is_started_again() {
    let Some(r) = Remote::start("follow", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    r.env.ok(&["bash", "s", "--", "echo line-one"]);
    let keeper = r.wait_forward();
    let out_file = r.client.dir.join("follow");
    let host = r.sshd.host();
    let mut follow = r
        .client
        .command(&["--host", &host, "log", "--follow", "s"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let printed = || std::fs::read_to_string(&out_file).unwrap_or_default();
    wait_until(WITHIN, "the first line", || {
        printed().lines().any(|l| l == "line-one")
    });
    assert!(
        !descendants(follow.id())
            .iter()
            .any(|&pid| cmdline(pid).starts_with("ssh")),
        "the follow ran ssh"
    );
    kill9(r.forward_ssh(keeper).expect("the forward's ssh"));
    wait_until(WITHIN, "a new forward", || {
        r.keeper().is_some_and(|pid| pid != keeper) && r.forward_socket().is_some()
    });
    r.env.ok(&["bash", "s", "--", "echo line-two"]);
    wait_until(WITHIN, "the line made after the drop", || {
        printed().lines().any(|l| l == "line-two")
    });
    let seen = printed();
    for line in ["line-one", "line-two"] {
        assert_eq!(seen.lines().filter(|l| *l == line).count(), 1, "{seen}");
    }
    let _ = follow.kill();
    let _ = follow.wait();
    // The remote daemon goes away behind the live forward: the next
    // command starts it again (by the proxy path), then the forward
    // carries the ones after.
    let daemon = r.env.daemon_pid();
    r.env.ok(&["shutdown", "--force"]);
    wait_until(WITHIN, "the remote daemon's end", || !alive(daemon));
    assert!(r.forward_socket().is_some());
    assert!(r.ok(&["ls"]).contains('s'));
    assert_ne!(r.env.daemon_pid(), daemon);
    let logins = r.logins();
    assert_eq!(r.ok(&["bash", "s", "--", "echo back"]), "back\n");
    assert_eq!(r.logins(), logins, "the forward did not carry it again");
}

#[test]
fn a_bash_through_the_forward_rides_through_its_killed_ssh() {
    let Some(r) = Remote::start("bash", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let (marker, client, out_file) = r.start_gated(&["bash", "-n", "s", "--"], "done", 3);
    let printed = || std::fs::read_to_string(&out_file).unwrap_or_default();
    // The forward's connection drops: to the worker, a remote client's
    // dropped connection, not its leaving.
    kill9(r.forward_ssh(keeper).expect("the forward's ssh"));
    wait_until(WITHIN, "the old keeper's end", || !alive(keeper));
    std::fs::write(&marker, "").unwrap();
    let (status, stderr) = finish(client);
    assert_eq!(status, Some(3), "{stderr}");
    assert_eq!(printed(), "before\ndone\n", "{stderr}");
}
