//! `eukhe doctor`: checks a person would otherwise do by hand, each with
//! a verdict and a one-line detail.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::sys::signal::kill;
use nix::unistd::{access, getuid, AccessFlags, Pid, User};
use serde::Serialize;

use super::connect::connect_existing;
use super::remote::Target;
use super::route::current_target;
use crate::build_id::{build_id, version};
use crate::config::Config;
use crate::host::process::is_alive;
use crate::host::HostKind;
use crate::paths::{recorded_holder, Paths};
use crate::session::store::{check_files, read_json, valid_id, KernelRecord, SessionFiles};

#[derive(Serialize)]
pub struct Check {
    pub check: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// A check's verdict from its finding: the detail either way (a finding
/// that is a problem is the doctor's report, not the command's failure).
fn check(check: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            check,
            ok: true,
            detail,
        },
        Err(detail) => Check {
            check,
            ok: false,
            detail,
        },
    }
}

fn private(path: &Path, what: &str) -> Result<String, String> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 == 0 {
                Ok(format!("{} is private ({mode:o})", path.display()))
            } else {
                Err(format!(
                    "{} is {mode:o}: other users can reach the {what}; chmod 700 it",
                    path.display()
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(format!(
            "{} does not exist yet (created 0700 on first use)",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Whether this user can create files in `dir` (or create `dir`): a
/// probe file is made and removed; for a directory not made yet, its
/// nearest existing parent is asked (`access(2)`, which says EROFS for a
/// read-only file system as well as EACCES).
fn writable(dir: &Path) -> Result<String, String> {
    if dir.is_dir() {
        let probe = dir.join(format!(".eukhe-doctor-{}", std::process::id()));
        return std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .map(|_| {
                let _ = std::fs::remove_file(&probe);
                "writable".to_string()
            })
            .map_err(|e| format!("{} is not writable: {e}", dir.display()));
    }
    let parent = dir
        .ancestors()
        .skip(1)
        .find(|p| p.is_dir())
        .unwrap_or(Path::new("/"));
    match access(parent, AccessFlags::W_OK | AccessFlags::X_OK) {
        Ok(()) => Ok(format!("can be created in {}", parent.display())),
        Err(e) => Err(format!(
            "{} cannot be created: {} is not writable: {}",
            dir.display(),
            parent.display(),
            std::io::Error::from(e)
        )),
    }
}

/// Below this much room on the state disk, `doctor` fails the check: a full disk
/// refuses inputs and loses output (told, never silently).
const LOW_STATE_DISK_BYTES: u64 = 64 << 20;

/// Room on the file system of `dir` (or its nearest existing parent).
fn disk_room(dir: &Path) -> Result<String, String> {
    let at = dir
        .ancestors()
        .find(|p| p.is_dir())
        .unwrap_or(Path::new("/"));
    let Some((free, size)) = crate::session::store::disk_space(at) else {
        return Ok(format!("cannot ask how much room {} has", at.display()));
    };
    let mib = |bytes: u64| bytes >> 20;
    let room = format!(
        "{} MiB free of {} MiB on {}",
        mib(free),
        mib(size),
        at.display()
    );
    if free < LOW_STATE_DISK_BYTES {
        Err(format!(
            "{room}: a full disk refuses inputs and loses output; free some space"
        ))
    } else {
        Ok(room)
    }
}

/// A directory eukhe writes: private to this user, and writable.
fn directory(path: &Path, what: &str) -> Result<String, String> {
    let private = private(path, what)?;
    let writable = writable(path)?;
    Ok(format!("{private}, {writable}"))
}

/// Every session's files that would stop it from starting, one check per
/// damaged session (the file and what is wrong).
fn session_files(paths: &Paths) -> Vec<Check> {
    let Ok(dirs) = std::fs::read_dir(paths.state.join("sessions")) else {
        return vec![check("session files", Ok("no sessions yet".into()))];
    };
    let mut damaged = Vec::new();
    let mut sound = 0;
    let mut ids: Vec<String> = dirs
        .flatten()
        .filter_map(|d| d.file_name().into_string().ok())
        .filter(|id| valid_id(id))
        .collect();
    ids.sort();
    for id in ids {
        let files = SessionFiles::new(paths.session_dir(&id));
        if !files.meta().exists() {
            continue;
        }
        let kernel_lives = read_json::<KernelRecord>(&files.kernel())
            .ok()
            .flatten()
            .is_some_and(|record| is_alive(record.identity));
        match check_files(&files, !kernel_lives) {
            Ok(()) => sound += 1,
            Err(problem) => damaged.push(check(
                "session files",
                Err(format!("session {id} cannot start: {problem}")),
            )),
        }
    }
    if damaged.is_empty() {
        vec![check(
            "session files",
            Ok(format!("the files of {sound} sessions read")),
        )]
    } else {
        damaged
    }
}

/// Which daemon serves the state directory: one on another socket makes
/// this socket's daemon refuse to start (one daemon per state directory).
fn state_lock(paths: &Paths) -> Result<String, String> {
    let socket = paths.socket.display().to_string();
    // Signal 0 (`None`) only asks whether the pid exists.
    let alive = |pid: u32| kill(Pid::from_raw(pid as i32), None).is_ok();
    match recorded_holder(&paths.state) {
        Some(holder) if alive(holder.pid) && holder.socket != socket => Err(format!(
            "the state directory is served by the daemon with pid {} on socket {}, not on {socket}: \
             a daemon on this socket would refuse to start (use EUKHE_SOCKET={})",
            holder.pid, holder.socket, holder.socket
        )),
        Some(holder) if alive(holder.pid) => Ok(format!(
            "held by the daemon with pid {} on this socket",
            holder.pid
        )),
        _ => Ok("free: the next daemon takes it".into()),
    }
}

/// This user's login name.
fn user_name() -> Option<String> {
    match User::from_uid(getuid()) {
        Ok(Some(user)) => Some(user.name),
        _ => std::env::var("USER").ok(),
    }
}

/// On the systemd backend: whether the user manager outlives the last
/// logout and starts at boot. Without lingering, logging out stops the user
/// manager and every session's worker and kernel with it, and after a
/// reboot nothing revives a busy session until the user logs in.
fn lingering() -> Result<String, String> {
    let user = user_name().ok_or("cannot tell this user's name")?;
    let flag = Path::new("/var/lib/systemd/linger").join(&user);
    if flag.exists() {
        return Ok(format!("enabled for {user} ({} exists)", flag.display()));
    }
    let asked = std::process::Command::new("loginctl")
        .args(["show-user", &user, "--property=Linger", "--value"])
        .output();
    if let Ok(out) = &asked {
        if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "yes" {
            return Ok(format!("enabled for {user} (loginctl)"));
        }
    }
    Err(format!(
        "not enabled for {user}: the last logout stops the user manager and every session with it, \
         and after a reboot busy sessions are revived only at the next login; \
         `loginctl enable-linger {user}` keeps them and revives them at boot"
    ))
}

/// Whether the settings file is valid (or absent).
fn config_valid(path: &std::path::Path) -> Result<String, String> {
    Config::load(path)
        .map(|_| format!("{} is valid (or absent)", path.display()))
        .map_err(|e| e.to_string())
}

pub async fn run() -> Vec<Check> {
    let paths = match Paths::from_env() {
        Ok(paths) => paths,
        Err(e) => return vec![check("paths", Err(e.to_string()))],
    };
    let mut checks = vec![
        check("config", config_valid(&paths.config)),
        check("state directory", directory(&paths.state, "session state")),
        check("state disk space", disk_room(&paths.state)),
        check(
            "socket directory",
            directory(paths.socket_dir(), "daemon socket"),
        ),
        check(
            "socket paths",
            paths.sockets_fit().map_err(|e| e.to_string()),
        ),
        check(
            "shell",
            std::process::Command::new("bash")
                .args(["--noprofile", "--norc", "-c", "echo $BASH_VERSION"])
                .output()
                .map_err(|e| format!("bash cannot run: {e}"))
                .map(|out| format!("bash {}", String::from_utf8_lossy(&out.stdout).trim())),
        ),
    ];
    checks.extend(session_files(&paths));
    checks.push(check("state directory lock", state_lock(&paths)));
    match HostKind::from_env() {
        Ok(HostKind::Systemd) => checks.push(check("lingering", lingering())),
        Ok(HostKind::Process) => {}
        Err(e) => checks.push(check("backend", Err(e.into()))),
    }
    checks.extend(daemon_checks(&paths).await);
    checks.push(check(
        "client",
        Ok(format!("v{} (build {})", version(), build_id())),
    ));
    checks
}

/// The daemon that answers (this machine's, or `--host`'s with the route
/// its connection took).
async fn daemon_checks(paths: &Paths) -> Vec<Check> {
    let connected = connect_existing().await;
    // A remote daemon's client says the way it went: its own ssh, or the forward.
    let over_ssh = match &connected {
        Ok(Some(client)) => Some(client.transport_pid().is_some()),
        _ => None,
    };
    let daemon = match connected {
        Ok(Some(client)) => Ok(format!(
            "v{} (build {}, pid {}) on {}{}",
            client.daemon.version,
            client.daemon.build_id,
            client.daemon.pid.map_or("?".into(), |p| p.to_string()),
            paths.socket.display(),
            if client.daemon.build_id == build_id() {
                ", this build"
            } else {
                ", another build"
            }
        )),
        Ok(None) => Ok(format!(
            "no daemon listens on {}; the next command starts one",
            paths.socket.display()
        )),
        Err(e) => Err(e.to_string()),
    };
    let mut checks = vec![check("daemon", daemon)];
    if let (Target::Remote(host), Some(over_ssh)) = (current_target(), over_ssh) {
        checks.push(check("route", Ok(super::forward::route(&host, over_ssh))));
    }
    checks
}
