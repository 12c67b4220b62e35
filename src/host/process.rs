//! Processes by identity: a pid plus its start time, so a reused pid is
//! never mistaken for (or signalled as) the process we mean.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::laws::adoption::ProcessIdentity;

/// A small file of `/proc`, in one read. Its size reads as 0, so
/// `read_to_string` would grow its buffer from 32 bytes, one read each
/// time; this runs once for every job a kernel hands to a template.
fn read_proc_file(path: &str) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::with_capacity(1024);
    std::fs::File::open(path)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The identity of the live process `pid`, if there is one (zombies are
/// not alive).
pub fn identity_of(pid: u32) -> Option<ProcessIdentity> {
    let stat = read_proc_file(&format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces and parentheses: fields resume
    // after the last ')'. There, index 0 is the state and index 19 the
    // start time (field 22 of proc(5)).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    let start_time = fields.get(19)?.parse().ok()?;
    Some(ProcessIdentity { pid, start_time })
}

/// This process's identity.
pub fn own_identity() -> ProcessIdentity {
    identity_of(std::process::id()).unwrap_or(ProcessIdentity {
        pid: std::process::id(),
        start_time: 0,
    })
}

/// Whether the process `identity` names is alive.
pub fn is_alive(identity: ProcessIdentity) -> bool {
    identity_of(identity.pid) == Some(identity)
}

/// Send `signal` to the process `identity` names, only if it is still that
/// process. Returns whether it was signalled.
pub fn signal(identity: ProcessIdentity, signal: Signal) -> bool {
    if !is_alive(identity) {
        return false;
    }
    // The identity check above makes sure the pid still belongs to the
    // process we mean.
    kill(Pid::from_raw(identity.pid as i32), signal).is_ok()
}

/// The direct children of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    children
}

/// Every descendant of `pid`, parents before children.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut next = children(pid);
    while let Some(child) = next.pop() {
        if !all.contains(&child) {
            all.push(child);
            next.extend(children(child));
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_identity_is_alive_and_a_wrong_start_time_is_not() {
        let me = own_identity();
        assert!(is_alive(me));
        assert!(!is_alive(ProcessIdentity {
            pid: me.pid,
            start_time: me.start_time + 1
        }));
        assert!(!signal(
            ProcessIdentity {
                pid: me.pid,
                start_time: me.start_time + 1
            },
            Signal::SIGCONT
        ));
    }
}
