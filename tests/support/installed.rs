//! eukhe installed in a private systemd: the binary and units inside the
//! overlay, a test user whose user manager runs `eukhe.socket` (enabled, so
//! it comes back after a reboot), and helpers to drive it as that user.

use std::process::Output;
use std::time::Duration;

use super::systemd::PrivateSystemd;
use super::wait_until;

pub const USER: &str = "eukhe-test";
pub const UID: u32 = 4242;

pub struct Installed {
    pub systemd: PrivateSystemd,
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Installed {
    /// Boot, create the test user, install eukhe and its units (and the
    /// given `(path, contents)` drop-ins), and start the user's manager with
    /// `eukhe.socket` enabled.
    pub fn boot(name: &str, drop_ins: &[(&str, &str)]) -> Installed {
        let installed = Installed::bare(name);
        let install = |from: &str, inside: &str, mode| {
            installed
                .systemd
                .install(std::path::Path::new(from), inside, mode)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        // The benchmarks install their release binary instead.
        let binary = std::env::var("EUKHE_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_eukhe").to_string());
        install(&binary, "/usr/bin/eukhe", 0o755);
        for unit in super::systemd::UNITS {
            let from = format!("{}/units/{unit}", env!("CARGO_MANIFEST_DIR"));
            install(&from, &format!("/usr/lib/systemd/user/{unit}"), 0o644);
        }
        for (path, contents) in drop_ins {
            installed.write(path, contents);
        }
        installed.log_in();
        installed.user_ok("systemctl --user enable --now eukhe.socket");
        installed
    }

    /// Boot and create the test user; nothing of eukhe is installed and
    /// the user is not logged in.
    pub fn bare(name: &str) -> Installed {
        let systemd = PrivateSystemd::boot(name).unwrap_or_else(|e| panic!("{e}"));
        let installed = Installed { systemd };
        installed.root(&format!("useradd -m -u {UID} -s /bin/sh {USER}"));
        installed
    }

    /// Start the test user's manager (as a login would) and wait for its socket.
    pub fn log_in(&self) {
        self.root(&format!("systemctl start user@{UID}.service"));
        wait_until(Duration::from_secs(20), "the user manager runs", || {
            self.user("systemctl --user is-system-running")
                .stdout
                .starts_with(b"running")
        });
    }

    /// Kill the private systemd with everything in it and boot it again
    /// over the same disk; the user logs in again.
    pub fn reboot(&mut self) {
        self.systemd.reboot().unwrap_or_else(|e| panic!("{e}"));
        self.log_in();
    }

    pub fn write(&self, inside: &str, contents: &str) {
        self.systemd
            .write(inside, contents)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Run `script` as root inside; panic if it fails.
    pub fn root(&self, script: &str) -> String {
        let out = self.systemd.exec(&["sh", "-c", script]);
        assert!(out.status.success(), "{script}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn user(&self, script: &str) -> Output {
        self.systemd.as_user(USER, UID, script)
    }

    /// Run `script` as the test user; panic if it fails; its stdout.
    pub fn user_ok(&self, script: &str) -> String {
        let out = self.user(script);
        assert!(out.status.success(), "{script}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `eukhe <args>` as the test user (arguments are shell words).
    pub fn eukhe(&self, args: &str) -> String {
        self.user_ok(&format!("eukhe {args}"))
    }

    pub fn sessions(&self) -> serde_json::Value {
        serde_json::from_str(&self.eukhe("ls --json")).expect("ls --json")
    }

    pub fn session(&self, id: &str) -> serde_json::Value {
        self.sessions()
            .as_array()
            .expect("a list")
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no session {id}"))
    }

    /// A unit's property, as `systemctl --user show` reads it.
    pub fn unit(&self, unit: &str, property: &str) -> String {
        self.user_ok(&format!(
            "systemctl --user show -p {property} --value {unit}"
        ))
        .trim()
        .to_string()
    }

    /// A unit's main pid (inside the private PID namespace), 0 when none.
    pub fn main_pid(&self, unit: &str) -> u32 {
        self.unit(unit, "MainPID").parse().unwrap_or(0)
    }

    /// Send `signal` to `pid` (inside the private PID namespace).
    pub fn kill(&self, signal: &str, pid: u32) {
        assert_ne!(pid, 0, "no process to signal");
        self.root(&format!("kill -s {signal} {pid}"));
    }

    /// The command lines of the processes in `unit`'s cgroup (and the
    /// cgroups below it); none when the unit has no cgroup.
    pub fn cgroup_processes(&self, unit: &str) -> Vec<String> {
        // The path has backslashes (`app-eukhe\x2dkernel.slice`) and no quotes.
        let cgroup = self.unit(unit, "ControlGroup");
        if cgroup.is_empty() {
            return Vec::new();
        }
        self.command_lines(&format!(
            "find '/sys/fs/cgroup{cgroup}' -name cgroup.procs -exec cat {{}} + 2>/dev/null"
        ))
    }

    /// The command lines of every process inside the private systemd.
    pub fn processes(&self) -> Vec<String> {
        self.command_lines("ls /proc | grep '^[0-9]*$'")
    }

    /// The command lines of the pids `pids` (a shell command) prints, one
    /// a line, arguments separated by spaces (a process that ended between
    /// the two is left out).
    fn command_lines(&self, pids: &str) -> Vec<String> {
        let out = self.systemd.exec(&[
            "sh",
            "-c",
            &format!(
                "{pids} | while read -r pid; do tr '\\0' ' ' < /proc/$pid/cmdline 2>/dev/null && echo; done"
            ),
        ]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| line.trim().to_string())
            .filter(|line| !line.is_empty())
            .collect()
    }

    /// A user unit's journal, message text only.
    pub fn journal(&self, unit: &str) -> String {
        self.user_ok(&format!("journalctl --user -u {unit} -o cat --no-pager"))
    }

    /// The daemon's `status --json`.
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.eukhe("status --json")).expect("status --json")
    }

    /// An interactive client of session `id` (an attach on a terminal,
    /// ended at once by its closed input), which may replace an idle
    /// older daemon: its output (the terminal carries its standard error).
    pub fn attach_interactively(&self, id: &str) -> Output {
        self.user(&format!(
            "script -qec 'eukhe attach {id}' /dev/null </dev/null"
        ))
    }

    /// The supervisor's journal says it revived session `id` from its
    /// busy evidence.
    pub fn assert_revived(&self, id: &str) {
        let journal = self.journal("eukhe.service");
        assert!(
            journal.contains(&format!("reviving session {id} from its busy evidence")),
            "{journal}"
        );
    }
}
