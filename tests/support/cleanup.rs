//! The end of a test's installation: every process it started is ended
//! by pid (never by name), then its directory is removed.

use std::collections::HashSet;
use std::time::Duration;

use eukhe::laws::adoption::ProcessIdentity;

use super::env::Env;
use super::process::{
    all_pids, cmdline, identity, kill9, recorded, session_of, signal, still, Signal,
};

/// How long the processes of an installation get to end once told to.
const GRACE: Duration = Duration::from_secs(5);

/// How long an installation that was shut down is watched for a daemon
/// that comes back: a client relaunches one at once.
const AGAIN_WITHIN: Duration = Duration::from_secs(3);

impl Env {
    /// Processes of this installation: their environment names its state
    /// directory (daemon, workers, kernels), or its files record them.
    fn own_processes(&self) -> HashSet<ProcessIdentity> {
        let mut own = self.seen.borrow().clone();
        let marker = format!("EUKHE_STATE_DIR={}", self.state_dir().display());
        for pid in all_pids() {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if environ
                .split(|&b| b == 0)
                .any(|var| var == marker.as_bytes())
            {
                own.extend(identity(pid));
            }
        }
        if let Ok(sessions) = std::fs::read_dir(self.state_dir().join("sessions")) {
            for session in sessions.flatten() {
                for file in ["worker.json", "kernel.json"] {
                    own.extend(recorded(&session.path().join(file)));
                }
            }
        }
        own
    }

    /// The eukhe processes of this installation that run (daemon, workers,
    /// kernels, clients), each as its pid and command line.
    pub fn eukhe_processes(&self) -> Vec<String> {
        let marker = format!("EUKHE_STATE_DIR={}", self.state_dir().display());
        let binary = env!("CARGO_BIN_EXE_eukhe");
        all_pids()
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|&b| b == 0)
                        .any(|var| var == marker.as_bytes())
                })
            })
            .map(|pid| format!("{pid} ({})", cmdline(pid)))
            .filter(|process| process.contains(&format!("({binary} ")))
            .collect()
    }

    /// After a shutdown that stops everything: every eukhe process of
    /// this installation ends, none runs again and nothing serves its
    /// socket again.
    pub fn stays_shut_down(&self) {
        let mut running = Vec::new();
        let ended = super::wait_for(GRACE, || {
            running = self.eukhe_processes();
            running.is_empty()
        });
        assert!(ended, "still running after the shutdown: {running:?}");
        let socket = self.dir.join("run/eukhe.sock");
        let again = super::wait_for(AGAIN_WITHIN, || {
            running = self.eukhe_processes();
            !running.is_empty() || std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        assert!(
            !again,
            "eukhe runs again after the shutdown: {running:?} (socket served: {})",
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        );
    }

    /// What is left of `own`, and every process in the sessions they lead
    /// (a kernel's runs, their children, the kernel's shell).
    fn leftovers(own: &HashSet<ProcessIdentity>) -> Vec<u32> {
        let mut leftovers: Vec<u32> = own
            .iter()
            .filter(|&&who| still(who))
            .map(|who| who.pid)
            .collect();
        for pid in all_pids() {
            let (Some(who), Some(sid)) = (identity(pid), session_of(pid)) else {
                continue;
            };
            let led_by_ours = own.iter().any(|leader| {
                leader.pid == sid
                    && who.start_time >= leader.start_time
                    && match identity(leader.pid) {
                        Some(now) => now == *leader,
                        None => true,
                    }
            });
            if led_by_ours && pid != std::process::id() {
                leftovers.push(pid);
            }
        }
        leftovers.sort_unstable();
        leftovers.dedup();
        leftovers
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // The orderly way first: the daemon stops every worker and kernel.
        let _ = self.command(&["shutdown", "--force"]).output();
        let own = self.own_processes();
        // Kernels outlive their workers: SIGTERM ends every process of a
        // kernel's session.
        for kernel in self.kernel_pids() {
            signal(kernel, Signal::SIGTERM);
        }
        super::wait_for(GRACE, || !own.iter().any(|&who| still(who)));
        let leftovers = Env::leftovers(&own);
        if !leftovers.is_empty() {
            let named: Vec<String> = leftovers.iter().map(|&pid| named(pid)).collect();
            eprintln!("ending processes left behind: {}", named.join(", "));
        }
        for pid in leftovers {
            kill9(pid);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Process `pid` and its command line, for a line about it.
fn named(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|word| !word.is_empty())
        .map(|word| String::from_utf8_lossy(word).into_owned())
        .collect();
    format!("{pid} ({})", words.join(" "))
}
