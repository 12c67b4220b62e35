//! A private eukhe installation for one test: its own socket and state in
//! a temporary directory, the built binary, and cleanup that stops every
//! process the test started (by pid, never by name).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub struct Env {
    pub dir: PathBuf,
    pub vars: Vec<(String, String)>,
}

impl Env {
    pub fn new(name: &str) -> Env {
        let dir = std::env::temp_dir().join(format!("eukhe-it-{}-{name}", std::process::id()));
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
        Env { dir, vars }
    }

    pub fn with(mut self, name: &str, value: &str) -> Env {
        self.vars.retain(|(n, _)| n != name);
        self.vars.push((name.into(), value.into()));
        self
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
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.command(&["shutdown", "--force"]).output();
        // Kernels outlive their workers: end any the forced shutdown left
        // (SIGTERM ends every process of the session), by their recorded pid.
        for kernel in self.kernel_pids() {
            // SAFETY: kill(2) on a pid this test's own kernel recorded.
            unsafe { libc::kill(kernel as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while alive(kernel) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            kill9(kernel);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn kill9(pid: u32) {
    // SAFETY: kill(2) on a pid this test read from its own daemon.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Wait until `condition` holds, failing the test after `within`.
pub fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}
