//! The kernel's process tree. The kernel is a child subreaper, so every
//! process a job starts stays its descendant, however it detaches; that is
//! how background jobs are counted and how nothing a run started outlives
//! the kernel's stop.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::error::KernelError;
use crate::host::process::identity_of;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::POLL_MS;

/// Make this process a child subreaper (orphaned descendants come to it).
pub fn become_subreaper() -> Result<(), KernelError> {
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| KernelError::Process {
        what: "become a subreaper",
        source: e.into(),
    })
}

use crate::host::process::descendants;

/// The live processes of the session `leader` led (their session id is its
/// pid), started no earlier than it: what stays of a session whose leader
/// died, however its processes were reparented. This process is left out.
pub fn session_members(leader: ProcessIdentity) -> Vec<ProcessIdentity> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own && session_of(pid) == Some(leader.pid))
        .filter_map(identity_of)
        .filter(|member| member.start_time >= leader.start_time)
        .collect()
}

/// The session id of `pid` (field 6 of proc(5)'s stat).
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Reap every child that has ended; returns their pids.
pub fn reap() -> Vec<u32> {
    let mut reaped = Vec::new();
    loop {
        // Any child (`None`: pid -1); ended ones only (WNOHANG).
        let Some(pid) = waitpid(None, Some(WaitPidFlag::WNOHANG))
            .ok()
            .and_then(|status| status.pid())
        else {
            return reaped;
        };
        reaped.push(pid.as_raw() as u32);
    }
}

/// The pids are our own descendants, read just now; a descendant cannot be
/// reaped (and its pid reused) by anyone but this process, which is not
/// reaping while it signals.
fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Signal a process group (a job: each job is its own group).
pub fn signal_group(group: u32, signal: Signal) {
    let _ = killpg(Pid::from_raw(group as i32), signal);
}

/// Whether any process of `group` is left (a zombie not yet reaped still
/// counts: it is gone once this kernel reaps it).
pub fn group_alive(group: u32) -> bool {
    killpg(Pid::from_raw(group as i32), None).is_ok()
}

/// End every descendant of this process: SIGTERM, then SIGKILL to what is
/// left after `grace`, then up to `drain` for the killed to be reaped.
/// Returns how many were killed.
pub fn end_descendants(grace: Duration, drain: Duration) -> usize {
    let me = std::process::id();
    for pid in descendants(me) {
        signal(pid, Signal::SIGTERM);
        // A stopped process would never act on its SIGTERM.
        signal(pid, Signal::SIGCONT);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap();
        if descendants(me).is_empty() {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    let left = descendants(me);
    for &pid in &left {
        signal(pid, Signal::SIGKILL);
    }
    let deadline = Instant::now() + drain;
    loop {
        reap();
        let still = descendants(me);
        if still.is_empty() || Instant::now() >= deadline {
            break;
        }
        // One forked while the kill went out is killed too.
        for pid in still {
            signal(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    reap();
    left.len()
}
