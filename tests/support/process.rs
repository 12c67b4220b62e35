//! Processes a test started or read from its own daemon, by pid: signals
//! through `nix`, identities (pid and start time) through eukhe's own
//! `host::process`, so a reused pid is never taken for the process meant.

use eukhe::host::process::identity_of;
use eukhe::laws::adoption::ProcessIdentity;
pub use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Send `signal` to `pid`; a process already gone is not an error.
pub fn signal(pid: u32, signal: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), signal);
}

/// Send `signal` to every process of the group `group` leads.
pub fn signal_group(group: u32, signal: Signal) {
    let _ = nix::sys::signal::killpg(Pid::from_raw(group as i32), signal);
}

pub fn kill9(pid: u32) {
    signal(pid, Signal::SIGKILL);
}

/// Whether `pid` is a live process (a zombie is not).
pub fn alive(pid: u32) -> bool {
    identity_of(pid).is_some()
}

/// The live process `pid`, by identity.
pub fn identity(pid: u32) -> Option<ProcessIdentity> {
    identity_of(pid)
}

/// Whether `who` is still the same live process.
pub fn still(who: ProcessIdentity) -> bool {
    eukhe::host::process::is_alive(who)
}

/// The fields of `/proc/<pid>/stat` after the command name (index 0 is the
/// state), unless the process is gone or a zombie.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<String> = rest.split_whitespace().map(String::from).collect();
    match fields.first().map(String::as_str) {
        Some("Z") | Some("X") | None => None,
        _ => Some(fields),
    }
}

/// The session (`setsid`) a live process belongs to.
pub fn session_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(3)?.parse().ok()
}

pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .trim_end_matches('\0')
                .replace('\0', " ")
        })
        .unwrap_or_default()
}

/// Every live descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = eukhe::host::process::descendants(pid);
    all.retain(|&p| alive(p));
    all
}

/// The live descendants of `pid` whose command line is `command`.
pub fn descendants_running(pid: u32, command: &str) -> Vec<ProcessIdentity> {
    descendants(pid)
        .into_iter()
        .filter(|&p| cmdline(p) == command)
        .filter_map(identity)
        .collect()
}

pub fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The identity recorded in a `worker.json` or `kernel.json`.
pub fn recorded(path: &std::path::Path) -> Option<ProcessIdentity> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(ProcessIdentity {
        pid: json["identity"]["pid"].as_u64()? as u32,
        start_time: json["identity"]["start_time"].as_u64()?,
    })
}
