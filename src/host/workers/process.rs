//! Workers as detached processes: started with their own session, found
//! by the identity they record (`worker.json`), ended by signal, watched
//! by the supervisor itself.

use super::super::HostError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{HostFuture, WorkerHost};
use crate::config::Config;
use crate::host::busy_journal::BusyJournal;
use crate::host::kernels;
use crate::host::process::{is_alive, signal};
use crate::host::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::timing::TM;
use crate::paths::Paths;
use crate::session::store::{read_json, SessionFiles, WorkerRecord};

/// The process backend: the embedded default.
pub struct ProcessHost {
    paths: Paths,
    /// The lost-exit window handed to each worker (`config::window_text`).
    lost_exit: String,
    /// How the workers this supervisor started exited, until told.
    exits: Rc<RefCell<WorkerExits>>,
}

/// How each session's latest worker exited. An exit is kept only for the
/// worker it belongs to: an earlier worker reaped after the next one was
/// started (its stop done, its wait still to run on a busy machine) is
/// never told as the next one's failure.
#[derive(Default)]
struct WorkerExits {
    /// Workers started so far: each start's number.
    started: u64,
    /// By session: the number of its latest worker's start, and that
    /// worker's exit once it came (when, in monotonic ms, and in words).
    latest: HashMap<String, (u64, Option<(u64, String)>)>,
}

impl WorkerExits {
    /// A worker of `id` was started: its number, for [`WorkerExits::exited`].
    fn started(&mut self, id: &str) -> u64 {
        self.started += 1;
        self.latest.insert(id.to_string(), (self.started, None));
        self.started
    }

    /// Worker `start` of `id` exited at `at_ms`: kept if it is the latest.
    fn exited(&mut self, id: &str, start: u64, at_ms: u64, words: String) {
        if let Some((latest, exit)) = self.latest.get_mut(id) {
            if *latest == start {
                *exit = Some((at_ms, words));
            }
        }
    }

    /// The latest worker's exit, if it came at `since_ms` or later; told once.
    fn take(&mut self, id: &str, since_ms: u64) -> Option<String> {
        let (_, exit) = self.latest.get_mut(id)?;
        if exit.as_ref()?.0 < since_ms {
            return None;
        }
        exit.take().map(|(_, words)| words)
    }
}

impl ProcessHost {
    /// Workers of the state directory in `paths`, with `config`'s lost-exit
    /// window.
    pub fn new(paths: Paths, config: &Config) -> ProcessHost {
        ProcessHost {
            lost_exit: crate::config::window_text(config.worker_lost_exit_ms),
            paths,
            exits: Rc::default(),
        }
    }

    fn files(&self, id: &str) -> SessionFiles {
        SessionFiles::new(self.paths.session_dir(id))
    }

    fn recorded_worker(&self, id: &str) -> Option<ProcessIdentity> {
        read_json::<WorkerRecord>(&self.files(id).worker())
            .ok()
            .flatten()
            .map(|record| record.identity)
            .filter(|&identity| is_alive(identity))
    }

    fn spawn(&self, id: &str) -> Result<(), HostError> {
        let (exe, arg0) = crate::build_id::own_executable();
        let log = crate::session::store::private_append(&self.files(id).log())?;
        let log2 = log
            .try_clone()
            .map_err(|e| HostError::io(format!("session {id}: its worker's log"), e))?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg0(arg0)
            .arg("worker")
            .arg(id)
            .env("EUKHE_SOCKET", &self.paths.socket)
            .env("EUKHE_STATE_DIR", &self.paths.state)
            .env("EUKHE_WORKER_LOST_EXIT_MS", &self.lost_exit)
            .env_remove("EUKHE_HOST")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: the closure runs between fork and exec and calls only
        // setsid(2), which is async-signal-safe and allocates nothing. The
        // worker gets its own session and process group, so it outlives this
        // supervisor. `pre_exec` itself is unsafe: std and tokio offer
        // `process_group` (setpgid), not setsid. process-wrap's ProcessSession
        // is a safe wrapper of this same closure, but its child type also
        // changes how the child is waited for and killed (by group).
        unsafe {
            command.as_std_mut().pre_exec(|| {
                let _ = nix::unistd::setsid();
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| HostError::io(format!("session {id}: cannot start its worker"), e))?;
        // Reap the child whenever it ends; the watcher notices through its
        // control connection, or asks how it exited when it never answered.
        let exits = self.exits.clone();
        let start = exits.borrow_mut().started(id);
        let (id, log) = (id.to_string(), self.files(id).log());
        tokio::task::spawn_local(async move {
            if let Ok(status) = child.wait().await {
                let words = exit_in_words(status, &log);
                exits
                    .borrow_mut()
                    .exited(&id, start, crate::clock::mono_ms(), words);
            }
        });
        Ok(())
    }
}

impl WorkerHost for ProcessHost {
    fn kind(&self) -> HostKind {
        HostKind::Process
    }

    fn start<'a>(&'a self, id: &'a str) -> HostFuture<'a, Result<(), HostError>> {
        Box::pin(async move { self.spawn(id) })
    }

    fn find<'a>(&'a self, id: &'a str) -> HostFuture<'a, Option<ProcessIdentity>> {
        Box::pin(async move { self.recorded_worker(id) })
    }

    fn live<'a>(
        &'a self,
        known: Vec<String>,
    ) -> HostFuture<'a, Result<HashMap<String, ProcessIdentity>, HostError>> {
        Box::pin(async move {
            Ok(known
                .into_iter()
                .filter_map(|id| Some((self.recorded_worker(&id)?, id)))
                .map(|(identity, id)| (id, identity))
                .collect())
        })
    }

    fn still_there<'a>(&'a self, _id: &'a str, identity: ProcessIdentity) -> HostFuture<'a, bool> {
        Box::pin(async move { is_alive(identity) })
    }

    fn wait_gone<'a>(
        &'a self,
        _id: &'a str,
        identity: ProcessIdentity,
        deadline: tokio::time::Instant,
    ) -> HostFuture<'a, ()> {
        Box::pin(async move {
            crate::host::process_exit::ProcessExit::open(identity)
                .wait_until(deadline)
                .await
        })
    }

    fn kill<'a>(&'a self, _id: &'a str, identity: ProcessIdentity) -> HostFuture<'a, ()> {
        Box::pin(async move {
            signal(identity, Signal::SIGKILL);
        })
    }

    fn why_ended<'a>(&'a self, id: &'a str) -> HostFuture<'a, String> {
        // Asked as the worker's connection ends: only the latest worker's
        // exit is held, so one held is its own.
        let exit = self.exit_of(id, 0);
        Box::pin(async { exit.unwrap_or_else(|| "its worker ended".to_string()) })
    }

    fn exit_of(&self, id: &str, since_ms: u64) -> Option<String> {
        self.exits.borrow_mut().take(id, since_ms)
    }

    fn busy_journal(&self) -> BusyJournal {
        BusyJournal::file(&self.paths.state)
    }

    fn watchdog(&self, config: &Config) -> Option<Duration> {
        Some(Duration::from_millis(config.worker_watchdog_ms))
    }

    /// The kernel's cgroup, made when the session has limits.
    fn forget_session<'a>(&'a self, id: &'a str) -> HostFuture<'a, Result<(), HostError>> {
        Box::pin(async move { crate::host::cgroup::forget(id) })
    }

    /// SIGTERM (its handler ends its descendants), SIGKILL if it outlives
    /// its teardown.
    fn stop_kernel<'a>(&'a self, _id: &'a str, kernel: ProcessIdentity) -> HostFuture<'a, ()> {
        Box::pin(kernels::terminate(kernel, TM.kernel.kernel_term_wait))
    }
}

/// How a worker exited, with the last line of its log when it exited on
/// its own (where a worker that cannot start says why: a full state disk).
fn exit_in_words(status: std::process::ExitStatus, log: &Path) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    // A signal is its own reason; an exit follows the worker's last word.
    match (status.code(), status.signal()) {
        (Some(code), _) => match last_line(log) {
            Some(line) => format!("its worker exited with status {code}; its log ends: {line}"),
            None => format!("its worker exited with status {code}"),
        },
        (None, Some(signal)) => format!("its worker was ended by signal {signal}"),
        (None, None) => "its worker ended".to_string(),
    }
}

/// The last line of text in the last few KiB of `path`.
fn last_line(path: &Path) -> Option<String> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const TAIL: u64 = 4096;
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    Some(line.chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::WorkerExits;

    #[test]
    fn an_earlier_workers_exit_reaped_after_the_next_start_is_not_the_next_ones() {
        let mut exits = WorkerExits::default();
        let earlier = exits.started("s");
        let next = exits.started("s");
        // The earlier worker, stopped on purpose, is reaped late.
        exits.exited("s", earlier, 100, "asked by the supervisor".into());
        assert_eq!(exits.take("s", 50), None);
        exits.exited("s", next, 200, "its worker was ended by signal 9".into());
        assert_eq!(exits.take("s", 250), None, "an exit before `since`");
        assert_eq!(
            exits.take("s", 200).as_deref(),
            Some("its worker was ended by signal 9")
        );
        assert_eq!(exits.take("s", 0), None, "told once");
        let other = exits.started("t");
        exits.exited("t", other, 300, "t's".into());
        assert_eq!(exits.take("s", 0), None);
        assert_eq!(exits.take("t", 0).as_deref(), Some("t's"));
    }
}
