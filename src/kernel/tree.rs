//! The kernel's process tree. The kernel is a child subreaper, so every
//! process a job starts stays its descendant, however it detaches; that is
//! how background jobs are counted and how nothing a run started outlives
//! the kernel's stop.

use std::time::{Duration, Instant};

use crate::laws::timing::POLL_MS;

/// Make this process a child subreaper (orphaned descendants come to it).
pub fn become_subreaper() -> Result<(), String> {
    // SAFETY: prctl(2) with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "kernel: cannot become a subreaper: {}",
            std::io::Error::last_os_error()
        ))
    }
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

/// Reap every child that has ended; returns their pids.
pub fn reap() -> Vec<u32> {
    let mut reaped = Vec::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid(2) writes only into `status`, which we own.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return reaped;
        }
        reaped.push(pid as u32);
    }
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) touches no memory. The pids are our own descendants,
    // read just now; a descendant cannot be reaped (and its pid reused) by
    // anyone but this process, which is not reaping while it signals.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

/// Signal a process group (a job: each job is its own group).
pub fn signal_group(group: u32, sig: i32) {
    // SAFETY: as in `signal`; a negative pid names the group.
    unsafe {
        libc::kill(-(group as i32), sig);
    }
}

/// End every descendant of this process except `keep`: SIGTERM, then
/// SIGKILL to what is left after `grace`. Returns how many were killed.
pub fn end_descendants(grace: Duration) -> usize {
    let me = std::process::id();
    for pid in descendants(me) {
        signal(pid, libc::SIGTERM);
        // A stopped process would never act on its SIGTERM.
        signal(pid, libc::SIGCONT);
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
        signal(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && !descendants(me).is_empty() {
        reap();
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    reap();
    left.len()
}
