//! A private systemd for tests: PID 1 of new PID, mount, UTS, IPC and
//! cgroup namespaces, booted into its own minimal target over a
//! copy-on-write overlay of the host, with gettys and unrelated services
//! masked. Its journal is persistent (`/var/log/journal` in the overlay),
//! so it survives a [`PrivateSystemd::reboot`].
//!
//! It never changes the host: every write lands in the overlay's upper
//! directory under the test's temporary directory; its processes live in
//! a cgroup made for it (removed at teardown); and teardown ends only the
//! processes it started, by pid: killing the private PID 1 ends the whole
//! PID namespace.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

/// eukhe's user units (in `units/`, installed in `/usr/lib/systemd/user`).
pub const UNITS: &[&str] = &[
    "eukhe.socket",
    "eukhe.service",
    "eukhe@.service",
    "eukhe-kernel@.service",
];

pub struct PrivateSystemd {
    pub dir: PathBuf,
    unshare: Child,
    /// The private PID 1, as the host sees it.
    pub pid: u32,
    cgroup: PathBuf,
}

/// Why a private systemd cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root to create namespaces and mount an overlay".into());
    }
    for tool in [
        "/usr/bin/unshare",
        "/usr/bin/nsenter",
        "/lib/systemd/systemd",
    ] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} is missing"));
        }
    }
    None
}

/// The cgroup v2 hierarchy of the host (hybrid hosts mount it at `unified`).
fn cgroup2_root() -> PathBuf {
    let unified = PathBuf::from("/sys/fs/cgroup/unified");
    if unified.join("cgroup.procs").exists() {
        unified
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

impl PrivateSystemd {
    /// Boot a private systemd and wait until it has reached its target.
    pub fn boot(name: &str) -> Result<PrivateSystemd, String> {
        let instance = format!("{}-{}", std::process::id(), super::unique());
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("systemd-{name}-{instance}"));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["upper", "work", "root"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let cgroup = cgroup2_root().join(format!("eukhe-test-{instance}-{name}"));
        std::fs::create_dir_all(&cgroup)
            .map_err(|e| format!("cannot make cgroup {}: {e}", cgroup.display()))?;
        let script = dir.join("boot.sh");
        std::fs::write(&script, BOOT_SCRIPT).map_err(|e| e.to_string())?;
        let unshare = Self::spawn(&dir, &cgroup)?;
        let mut booted = PrivateSystemd {
            dir,
            pid: 0,
            unshare,
            cgroup,
        };
        booted.pid = booted.wait_for_pid1()?;
        booted.wait_until_running()?;
        Ok(booted)
    }

    /// A "reboot": kill this private systemd (and so every process it
    /// ran, at once, as a power cut would) and boot a new one over the same
    /// overlay, so files and the persistent journal carry over.
    pub fn reboot(&mut self) -> Result<(), String> {
        self.power_off();
        // The old instance's cgroups are empty now; the new one makes its own.
        for entry in std::fs::read_dir(&self.cgroup)
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup(&entry.path());
            }
        }
        self.unshare = Self::spawn(&self.dir, &self.cgroup)?;
        self.pid = self.wait_for_pid1()?;
        self.wait_until_running()
    }

    /// Kill the private PID 1 (its death ends its PID namespace) and the
    /// `unshare` that started it, and wait for both.
    fn power_off(&mut self) {
        // The private PID 1 this harness started.
        if self.pid != 0 {
            super::kill9(self.pid);
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        self.pid = 0;
    }

    fn spawn(dir: &Path, cgroup: &Path) -> Result<Child, String> {
        let script = dir.join("boot.sh");
        let procs = cgroup.join("cgroup.procs");
        let mut command = Command::new("/usr/bin/unshare");
        command
            .args([
                "--fork",
                "--pid",
                "--mount",
                "--uts",
                "--ipc",
                "--cgroup",
                "/bin/bash",
            ])
            .arg(&script)
            .arg(dir)
            .arg("test")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(dir.join("boot.log")).map_err(|e| e.to_string())?)
            .stderr(std::fs::File::create(dir.join("boot.err")).map_err(|e| e.to_string())?);
        // Join the test's cgroup before unsharing, so the private systemd's
        // cgroup root (and everything it creates) is inside it.
        // SAFETY: between fork and exec the closure only writes one file.
        unsafe {
            command.pre_exec(move || {
                std::fs::write(&procs, std::process::id().to_string())?;
                Ok(())
            });
        }
        command
            .spawn()
            .map_err(|e| format!("cannot run unshare: {e}"))
    }

    fn wait_for_pid1(&mut self) -> Result<u32, String> {
        let mut pid1 = None;
        let mut ended = None;
        let unshare = &mut self.unshare;
        super::wait_for(Duration::from_secs(20), || {
            pid1 = systemd_child(unshare.id());
            ended = unshare.try_wait().ok().flatten();
            pid1.is_some() || ended.is_some()
        });
        match (pid1, ended) {
            (Some(pid), _) => Ok(pid),
            (None, Some(status)) => Err(format!(
                "the private systemd did not start ({status}): {}",
                self.boot_log()
            )),
            (None, None) => Err(format!(
                "the private systemd did not start within 20 s: {}",
                self.boot_log()
            )),
        }
    }

    fn wait_until_running(&self) -> Result<(), String> {
        let mut state = String::new();
        let running = super::wait_for(Duration::from_secs(30), || {
            let out = self.exec(&["systemctl", "is-system-running"]);
            state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            state == "running" || state == "degraded"
        });
        if running {
            Ok(())
        } else {
            Err(format!(
                "the private systemd is {state:?} after 30 s: {}",
                self.boot_log()
            ))
        }
    }

    fn boot_log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("boot.err")).unwrap_or_default();
        log.lines().rev().take(10).collect::<Vec<_>>().join(" | ")
    }

    /// Run a command inside (all its namespaces, its root), as root.
    pub fn exec(&self, command: &[&str]) -> Output {
        Command::new("/usr/bin/nsenter")
            .args([
                "-t",
                &self.pid.to_string(),
                "-m",
                "-p",
                "-u",
                "-i",
                "-C",
                "-r",
                "-w",
            ])
            .args(command)
            .output()
            .expect("run nsenter")
    }

    /// Run `script` with `sh -c` inside as `user`, in its home, with the
    /// environment a login would give it (runtime directory, user bus).
    pub fn as_user(&self, user: &str, uid: u32, script: &str) -> Output {
        let runtime = format!("XDG_RUNTIME_DIR=/run/user/{uid}");
        let bus = format!("DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{uid}/bus");
        let home = format!("HOME=/home/{user}");
        let script = format!("cd ~ && {script}");
        self.exec(&[
            "runuser", "-u", user, "--", "env", &runtime, &bus, &home, "sh", "-c", &script,
        ])
    }

    /// `systemd-analyze verify` on eukhe's installed user units: Ok when it
    /// passes and prints nothing, else its report. `check_man` also checks
    /// each unit's `man:` documentation link.
    pub fn verify_units(&self, check_man: bool) -> Result<(), String> {
        let mut command = vec!["systemd-analyze", "verify"];
        if !check_man {
            command.push("--man=no");
        }
        let paths: Vec<String> = UNITS
            .iter()
            .map(|unit| format!("/usr/lib/systemd/user/{unit}"))
            .collect();
        command.extend(paths.iter().map(String::as_str));
        let out = self.exec(&command);
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() && report.trim().is_empty() {
            Ok(())
        } else {
            Err(format!("systemd-analyze verify:\n{report}"))
        }
    }

    /// Write `contents` to `inside` (through the private root).
    pub fn write(&self, inside: &str, contents: &str) -> Result<(), String> {
        let target =
            PathBuf::from(format!("/proc/{}/root", self.pid)).join(inside.trim_start_matches('/'));
        let context = |e: std::io::Error| format!("write {inside}: {e}");
        std::fs::create_dir_all(target.parent().unwrap()).map_err(context)?;
        std::fs::write(&target, contents).map_err(context)
    }

    /// The cgroup made for this private systemd (gone after teardown).
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// Where a file written inside lands: the overlay's upper directory.
    pub fn path(&self, path: &str) -> PathBuf {
        self.dir.join("upper").join(path.trim_start_matches('/'))
    }

    /// Copy a host file to `inside` (through the private root, so the write
    /// goes through the overlay) with `mode`.
    pub fn install(&self, from: &Path, inside: &str, mode: u32) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let target =
            PathBuf::from(format!("/proc/{}/root", self.pid)).join(inside.trim_start_matches('/'));
        let context = |e: std::io::Error| format!("install {} as {inside}: {e}", from.display());
        std::fs::create_dir_all(target.parent().unwrap()).map_err(context)?;
        std::fs::copy(from, &target).map_err(context)?;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).map_err(context)
    }
}

impl Drop for PrivateSystemd {
    fn drop(&mut self) {
        self.power_off();
        remove_cgroup(&self.cgroup);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first child of `unshare` once it is systemd (the private PID 1).
fn systemd_child(unshare: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).ok()?;
    let pid = children.split_whitespace().next()?.parse::<u32>().ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    (comm.trim() == "systemd").then_some(pid)
}

/// Remove a cgroup and the ones below it, deepest first, once empty.
fn remove_cgroup(cgroup: &Path) {
    super::wait_for(Duration::from_secs(5), || {
        let mut dirs = Vec::new();
        collect_dirs(cgroup, &mut dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in &dirs {
            let _ = std::fs::remove_dir(dir);
        }
        !cgroup.exists()
    });
}

fn collect_dirs(dir: &Path, dirs: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    dirs.push(dir.to_path_buf());
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            collect_dirs(&entry.path(), dirs);
        }
    }
}

/// The script that runs as PID 1's parent inside the new namespaces
/// (shared with the soak, `soak/hosts.py`): it mounts the overlay and the
/// API filesystems, writes the minimal target and the masks into the
/// overlay, and becomes systemd. Its arguments: the directory, and the
/// name of the target, `eukhe-test.target`.
const BOOT_SCRIPT: &str = include_str!("boot-systemd.sh");
