//! A process's exit as an event, for processes that are not the caller's
//! children (a kernel, a client): `pidfd_open` works for any process, and
//! its fd turns readable when the process ends.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::process::is_alive;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::POLL_MS;

/// A process's exit as an event: its pidfd turns readable when it ends
/// (a zombie counts as ended, as `is_alive` counts it).
pub struct ProcessExit {
    identity: ProcessIdentity,
    pidfd: Option<AsyncFd<OwnedFd>>,
}

impl ProcessExit {
    /// Watch `identity`'s exit; open it before anything that may end the
    /// process, so the exit cannot come first.
    pub fn open(identity: ProcessIdentity) -> ProcessExit {
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd
        // or -1; the fd is owned from here on.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, identity.pid as libc::pid_t, 0) };
        let pidfd = (fd >= 0)
            // SAFETY: `fd` was just returned by pidfd_open and nothing else
            // owns it.
            .then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
            // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which alone
            // closes it, after deregistering.
            .and_then(|fd| unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.ok());
        ProcessExit { identity, pidfd }
    }

    /// Until the process is gone or `deadline` passes.
    pub async fn wait_until(&self, deadline: tokio::time::Instant) {
        // The pid may name another process by now: the identity decides.
        if !is_alive(self.identity) {
            return;
        }
        match &self.pidfd {
            Some(pidfd) => {
                let _ = tokio::time::timeout_at(deadline, pidfd.readable()).await;
            }
            // No pidfd (a kernel before 5.3): no event says it ended, so it
            // is looked at until the deadline.
            None => {
                while is_alive(self.identity) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::process::identity_of;

    #[tokio::test]
    async fn the_exit_of_a_process_that_is_no_child_wakes_its_waiter() {
        // `sleep` is the shell's child, not this test's: the shell ends
        // first, and the sleep is reparented.
        let out = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3 >/dev/null 2>&1 & echo $!"])
            .output()
            .expect("sh runs");
        let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let identity = identity_of(pid).expect("the sleep runs");
        let exit = ProcessExit::open(identity);
        let started = std::time::Instant::now();
        let long = Duration::from_secs(30);
        exit.wait_until(tokio::time::Instant::now() + long).await;
        assert!(!is_alive(identity));
        assert!(started.elapsed() < long / 2, "{:?}", started.elapsed());
    }
}
