//! A host's forward (issue 55): after the first command over `--host`,
//! the next ones go through a Unix socket OpenSSH carries to the remote
//! daemon's, kept by a keeper (`eukhe proxy --keep-forward HOST`),
//! against a real sshd on loopback (`support::sshd`). A forward that is
//! gone or refused never makes a command fail: the ssh proxy path serves
//! it.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::support::process::alive;
use crate::support::remote::{ssh_children, text, Gated, Remote};
use crate::support::{kill9, signal, wait_until, Env};

const WITHIN: Duration = Duration::from_secs(30);

/// A remote whose client has forwards on; a keeper left behind is ended
/// with it.
struct Forwarded(Remote);

impl Deref for Forwarded {
    type Target = Remote;

    fn deref(&self) -> &Remote {
        &self.0
    }
}

impl Forwarded {
    fn start(name: &str, sshd_extra: &str, client_vars: &[(&str, &str)]) -> Option<Forwarded> {
        let env = Env::new(&format!("fwd-remote-{name}"));
        let mut remote = Remote::start_in(env, &format!("fwd-{name}"), sshd_extra)?;
        remote.client.set_var("EUKHE_FORWARD", "1");
        for (var, value) in client_vars {
            remote.client.set_var(var, value);
        }
        Some(Forwarded(remote))
    }

    /// Run and expect success with nothing on standard error.
    fn ok(&self, args: &[&str]) -> String {
        self.0.ok_quiet(args)
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
        ssh_children(keeper).first().copied()
    }

    /// Logins sshd accepted so far.
    fn logins(&self) -> usize {
        self.sshd.log().matches("Accepted publickey").count()
    }

    /// `bash s -- echo WORD` answers with no login: the forward carried it.
    fn echo_through_the_forward(&self, word: &str) {
        let logins = self.logins();
        let said = self.ok(&["bash", "s", "--", &format!("echo {word}")]);
        assert_eq!(said, format!("{word}\n"));
        assert_eq!(
            self.logins(),
            logins,
            "the forward did not carry `echo {word}`"
        );
    }

    /// Wait until a keeper serves on its socket; its pid.
    fn wait_forward(&self) -> u32 {
        wait_until(WITHIN, "the forward's socket", || {
            self.forward_socket().is_some() && self.keeper().is_some()
        });
        self.keeper().unwrap()
    }

    /// A gated command (`Remote::start_gated`) that printed its first
    /// line through the forward: it runs no ssh of its own.
    fn start_gated(&self, args: &[&str], after: &str, status: i32) -> Gated {
        let gated = self.0.start_gated(args, after, status);
        assert!(
            ssh_children(gated.client.id()).is_empty(),
            "the client ran ssh"
        );
        gated
    }
}

impl Drop for Forwarded {
    /// A keeper left by a failed test is ended by its pid.
    fn drop(&mut self) {
        if let Some(pid) = self.keeper() {
            signal(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = crate::support::wait_for(WITHIN, || !alive(pid));
        }
    }
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

#[test]
fn the_next_commands_go_through_the_forward_without_a_login() {
    let Some(r) = Forwarded::start("through", "", &[]) else {
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
    let Some(r) = Forwarded::start("killed", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let mut gated = r.start_gated(&["send", "--wait", "s"], "after", 7);
    let ssh = r.forward_ssh(keeper).expect("the forward's ssh");
    kill9(ssh);
    wait_until(WITHIN, "the old keeper's end", || !alive(keeper));
    // The client came back (through the proxy path), which started a
    // new forward.
    wait_until(WITHIN, "a new forward", || {
        r.keeper().is_some_and(|pid| pid != keeper) && r.forward_socket().is_some()
    });
    gated.open();
    let (status, stderr) = gated.finish();
    assert_eq!(status, Some(7), "{stderr}");
    gated.assert_printed_once("after");
    r.echo_through_the_forward("again");
}

#[test]
fn a_server_forbidding_forwards_serves_every_command_by_the_proxy() {
    let Some(r) = Forwarded::start("forbidden", "AllowStreamLocalForwarding no\n", &[]) else {
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
    let Some(r) = Forwarded::start("idle", "", &[("EUKHE_FORWARD_IDLE_MS", "3000")]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let ssh = r.forward_ssh(keeper).expect("the forward's ssh");
    let socket = r.forward_socket().unwrap();
    r.echo_through_the_forward("used");
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
    let Some(r) = Forwarded::start("follow", "", &[]) else {
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
    assert!(ssh_children(follow.id()).is_empty(), "the follow ran ssh");
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
    r.echo_through_the_forward("back");
}

#[test]
fn a_bash_through_the_forward_rides_through_its_killed_ssh() {
    let Some(r) = Forwarded::start("bash", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let mut gated = r.start_gated(&["bash", "-n", "s", "--"], "done", 3);
    // The forward's connection drops: to the worker, a remote client's
    // dropped connection, not its leaving.
    kill9(r.forward_ssh(keeper).expect("the forward's ssh"));
    wait_until(WITHIN, "the old keeper's end", || !alive(keeper));
    gated.open();
    let (status, stderr) = gated.finish();
    assert_eq!(status, Some(3), "{stderr}");
    assert_eq!(gated.printed(), "before\ndone\n", "{stderr}");
}

#[test]
fn a_killed_keeper_does_not_hold_the_next_forward_back() {
    let Some(r) = Forwarded::start("keeper-killed", "", &[]) else {
        return;
    };
    r.ok(&["new", "--name", "s"]);
    let keeper = r.wait_forward();
    let ssh = r.forward_ssh(keeper).expect("the forward's ssh");
    // The keeper alone, killed outright: it cleans nothing up.
    kill9(keeper);
    wait_until(WITHIN, "the keeper's end", || !alive(keeper));
    // The next command takes the proxy path and starts a new forward at
    // once, not an idle period later.
    assert_eq!(r.ok(&["bash", "s", "--", "echo by proxy"]), "by proxy\n");
    let next = r.wait_forward();
    assert_ne!(next, keeper);
    // The killed keeper's socket is left: the new one answers on it once
    // it serves.
    wait_until(WITHIN, "the new forward answers", || {
        r.forward_socket()
            .is_some_and(|socket| std::os::unix::net::UnixStream::connect(socket).is_ok())
    });
    r.echo_through_the_forward("again");
    // The killed keeper's ssh, left behind, ended by its pid.
    kill9(ssh);
}
