//! A private eukhe installation for one test: its own socket and state in
//! a temporary directory, the built binary, and cleanup that stops every
//! process the test started (by pid, never by name; `cleanup.rs`).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use eukhe::laws::adoption::ProcessIdentity;

use super::process::{alive, descendants_running, identity, recorded, still};
use super::wait_until;

pub struct Env {
    pub dir: PathBuf,
    pub vars: Vec<(String, String)>,
    /// Daemons, workers and kernels this test has seen, ended with it.
    pub(super) seen: RefCell<HashSet<ProcessIdentity>>,
}

impl Env {
    pub fn new(name: &str) -> Env {
        let dir = std::env::temp_dir().join(format!(
            "eukhe-it-{}-{}-{name}",
            std::process::id(),
            super::unique()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let vars = vec![
            (
                "EUKHE_SOCKET".into(),
                dir.join("run/eukhe.sock").display().to_string(),
            ),
            (
                "EUKHE_STATE_DIR".into(),
                dir.join("state").display().to_string(),
            ),
        ];
        Env {
            dir,
            vars,
            seen: RefCell::new(HashSet::new()),
        }
    }

    /// Another client of the same installation (its own variables from
    /// here on); each ends the installation's processes when dropped.
    pub fn sharing(&self) -> Env {
        Env {
            dir: self.dir.clone(),
            vars: self.vars.clone(),
            seen: RefCell::new(HashSet::new()),
        }
    }

    pub fn with(mut self, name: &str, value: &str) -> Env {
        self.set_var(name, value);
        self
    }

    /// Set `name` to `value` for every command run from now on.
    pub fn set_var(&mut self, name: &str, value: &str) {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.into(), value.into()));
    }

    /// This environment with `text` as its config file.
    pub fn with_config(self, text: &str) -> Env {
        let config_home = self.dir.join("config");
        std::fs::create_dir_all(config_home.join("eukhe")).unwrap();
        std::fs::write(config_home.join("eukhe/config.toml"), text).unwrap();
        let home = config_home.display().to_string();
        self.with("XDG_CONFIG_HOME", &home)
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_eukhe"));
        command
            .args(args)
            .env_remove("EUKHE_BUILD_ID")
            .env_remove("EUKHE_VERSION");
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run eukhe")
    }

    /// Run and expect success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "eukhe {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    pub fn sessions(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["ls", "--json"])).unwrap()
    }

    pub fn session(&self, id: &str) -> serde_json::Value {
        self.sessions()
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .expect("session listed")
    }

    pub fn worker_pid(&self, id: &str) -> Option<u32> {
        self.session(id)["pid"].as_u64().map(|p| p as u32)
    }

    pub fn daemon_pid(&self) -> u32 {
        let status: serde_json::Value =
            serde_json::from_str(&self.ok(&["status", "--json"])).unwrap();
        status["pid"].as_u64().unwrap() as u32
    }

    pub fn log(&self, id: &str) -> String {
        self.ok(&["log", id])
    }

    /// The state directory the daemon was given.
    pub fn state_dir(&self) -> PathBuf {
        let (_, dir) = self
            .vars
            .iter()
            .find(|(n, _)| n == "EUKHE_STATE_DIR")
            .unwrap();
        PathBuf::from(dir)
    }

    /// The live kernel of `id`, as it recorded itself.
    pub fn kernel_pid(&self, id: &str) -> Option<u32> {
        let record = self.kernel_record(id)?;
        record["identity"]["pid"].as_u64().map(|pid| pid as u32)
    }

    /// The record of `id`'s kernel, once a live kernel wrote it.
    pub fn kernel_record(&self, id: &str) -> Option<serde_json::Value> {
        let path = self
            .state_dir()
            .join("sessions")
            .join(id)
            .join("kernel.json");
        let record: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let pid = record["identity"]["pid"].as_u64()? as u32;
        alive(pid).then_some(record)
    }

    /// Every live kernel of this installation, the spare's too.
    pub fn kernel_pids(&self) -> Vec<u32> {
        let Ok(sessions) = std::fs::read_dir(self.state_dir().join("sessions")) else {
            return Vec::new();
        };
        sessions
            .flatten()
            .filter_map(|s| self.kernel_pid(&s.file_name().to_string_lossy()))
            .collect()
    }

    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.state_dir().join("sessions").join(id)
    }

    /// The names in session `id`'s scratch directory.
    pub fn scratch_names(&self, id: &str) -> BTreeSet<String> {
        std::fs::read_dir(self.session_dir(id).join("scratch"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Remember `pid`'s process, so it is ended with the test.
    pub fn note(&self, pid: u32) {
        if let Some(who) = identity(pid) {
            self.seen.borrow_mut().insert(who);
        }
    }

    pub fn new_session(&self) -> String {
        let id = self.ok(&["new"]).trim().to_string();
        assert_eq!(id.len(), 8, "{id}");
        id
    }

    pub fn send(&self, id: &str, input: &str) {
        self.ok(&["send", id, input]);
    }

    pub fn bash(&self, id: &str, command: &str) -> String {
        self.ok(&["bash", id, "--", command])
    }

    /// Wait until a kernel other than `gone` serves session `id`; it is
    /// ended with the test.
    pub fn wait_for_kernel_after(&self, id: &str, gone: ProcessIdentity) -> ProcessIdentity {
        let mut next = gone;
        wait_until(
            Duration::from_secs(15),
            "a new kernel serves the session",
            || {
                next = recorded(&self.session_dir(id).join("kernel.json"))
                    .filter(|&k| k != gone && still(k))
                    .unwrap_or(gone);
                next != gone && self.session(id)["kernel_pid"] == next.pid
            },
        );
        self.note(next.pid);
        next
    }

    /// The session's worker; it is ended with the test.
    pub fn worker(&self, id: &str) -> u32 {
        let pid = self.worker_pid(id).expect("the session has a worker");
        self.note(pid);
        pid
    }

    /// The daemon; it is ended with the test.
    pub fn daemon(&self) -> u32 {
        let pid = self.daemon_pid();
        self.note(pid);
        pid
    }

    /// The session's live kernel, as `kernel.json` names it.
    pub fn kernel(&self, id: &str) -> ProcessIdentity {
        let path = self.session_dir(id).join("kernel.json");
        let mut found = None;
        wait_until(
            Duration::from_secs(10),
            "the session has a live kernel",
            || {
                found = recorded(&path).filter(|&k| still(k));
                found.is_some()
            },
        );
        let kernel = found.unwrap();
        self.seen.borrow_mut().insert(kernel);
        kernel
    }

    /// Wait until the log of `id` holds `needle`; returns the log. While a
    /// worker restarts, `eukhe log` may be refused (it asks the worker):
    /// that is retried until the deadline.
    pub fn log_with(&self, id: &str, needle: &str, within: Duration) -> String {
        let mut last = String::new();
        let found = super::wait_for(within, || {
            let out = self.run(&["log", id]);
            if out.status.success() {
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                last.contains(needle)
            } else {
                let refused = String::from_utf8_lossy(&out.stderr);
                last = format!("(`eukhe log` failed: {refused})\n{last}");
                false
            }
        });
        assert!(
            found,
            "the log never showed {needle:?} within {within:?}:\n{last}"
        );
        last
    }

    /// Wait until a run's process `command` runs under the kernel.
    pub fn run_process(&self, kernel: ProcessIdentity, command: &str) -> ProcessIdentity {
        let mut found = Vec::new();
        wait_until(
            Duration::from_secs(10),
            &format!("`{command}` runs under the kernel"),
            || {
                found = descendants_running(kernel.pid, command);
                !found.is_empty()
            },
        );
        found[0]
    }
}
