//! A remote installation behind a real sshd (`sshd`), and a client of it
//! that reaches it with `--host`: what the remote-host tests share. The
//! "remote" and the client are two installations on this machine: the
//! client's own state is never used.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::process::{cmdline, descendants};
use super::sshd::{RemotePath, Sshd};
use super::{wait_until, Env};

/// How long a gated command is given to print its first line, and its
/// client to end once the gate opens.
const GATED_WITHIN: Duration = Duration::from_secs(30);

/// A remote installation behind its sshd, and a client of it.
pub struct Remote {
    pub client: Env,
    pub sshd: Sshd,
    pub env: Env,
}

impl Remote {
    /// A remote installation of its own (`remote-NAME`) with `path` on
    /// its sshd's PATH; `None` when sshd cannot run here.
    pub fn start(name: &str, path: RemotePath) -> Option<Remote> {
        Remote::start_with(Env::new(&format!("remote-{name}")), name, path, "")
    }

    /// `env` as the remote installation (eukhe on its PATH), with
    /// `sshd_extra` at the end of its sshd's config.
    pub fn start_in(env: Env, name: &str, sshd_extra: &str) -> Option<Remote> {
        Remote::start_with(env, name, RemotePath::WithEukhe, sshd_extra)
    }

    fn start_with(env: Env, name: &str, path: RemotePath, sshd_extra: &str) -> Option<Remote> {
        let sshd = Sshd::start_with(&env, name, path, sshd_extra)?;
        let client = sshd.client(&format!("client-{name}"));
        Some(Remote { client, sshd, env })
    }

    /// `eukhe --host HOST ARGS` from the client.
    pub fn command(&self, args: &[&str]) -> Command {
        let host = self.sshd.host();
        let mut all = vec!["--host", host.as_str()];
        all.extend_from_slice(args);
        self.client.command(&all)
    }

    /// Run `eukhe --host HOST ARGS` to its end, with nothing on its input.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run eukhe")
    }

    /// Run and expect success: its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        self.expect(args, |out| out.status.success())
    }

    /// Run and expect success with nothing on standard error.
    pub fn ok_quiet(&self, args: &[&str]) -> String {
        self.expect(args, |out| out.status.success() && out.stderr.is_empty())
    }

    fn expect(&self, args: &[&str], good: impl Fn(&Output) -> bool) -> String {
        let out = self.run(args);
        assert!(
            good(&out),
            "eukhe --host {args:?} ({}):\nstdout: {}\nstderr: {}\nsshd: {}",
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.sshd.log()
        );
        text(&out.stdout)
    }

    /// Start `eukhe --host HOST ARGS... COMMAND`, where COMMAND prints
    /// `before`, waits for a gate (a file on the remote) to open, prints
    /// `after` and exits `status`; its output goes to a file. Returned
    /// once it printed `before`.
    pub fn start_gated(&self, args: &[&str], after: &str, status: i32) -> Gated {
        let gate = self.env.dir.join("go");
        let out = self.client.dir.join("out");
        let command = format!(
            "echo before; while [ ! -e {} ]; do sleep 0.05; done; echo {after}; exit {status}",
            gate.display()
        );
        let mut words = args.to_vec();
        words.push(&command);
        let client = self
            .command(&words)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let gated = Gated { gate, client, out };
        wait_until(GATED_WITHIN, "the command's first line", || {
            gated.printed().contains("before")
        });
        gated
    }
}

/// A gated command's client (`Remote::start_gated`).
pub struct Gated {
    gate: PathBuf,
    pub client: Child,
    out: PathBuf,
}

impl Gated {
    /// What the client printed so far.
    pub fn printed(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Let the command go on past its first line.
    pub fn open(&self) {
        std::fs::write(&self.gate, "").unwrap();
    }

    /// Wait for the client to end: its exit code and its standard error.
    pub fn finish(&mut self) -> (Option<i32>, String) {
        wait_until(GATED_WITHIN, "the client ends", || {
            self.client.try_wait().unwrap().is_some()
        });
        let status = self.client.wait().unwrap();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.client.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        (status.code(), stderr)
    }

    /// `before`, then `after`, each once and in that order.
    pub fn assert_printed_once(&self, after: &str) {
        let out = self.printed();
        assert_eq!(out.matches("before").count(), 1, "{out}");
        assert_eq!(out.matches(after).count(), 1, "{out}");
        assert!(out.find("before") < out.find(after), "{out}");
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every `ssh` a process runs below it, by pid.
pub fn ssh_children(pid: u32) -> Vec<u32> {
    descendants(pid)
        .into_iter()
        .filter(|&child| cmdline(child).starts_with("ssh"))
        .collect()
}
