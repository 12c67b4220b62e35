//! The supervisor's calls on the host (`host::workers::WorkerHost`): how a
//! worker is found, started, stopped and found dead, whichever backend
//! runs. The stop escalation lives here, the same on both; the decisions
//! around these calls (survivors, adoption, restart) stay in `launch`,
//! through `laws`.

use super::SupervisorError;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use super::launch::{ask_worker, Shared};
use crate::host::process::is_alive;
use crate::host::workers::WorkerHost;
use crate::host::HostKind;
use crate::laws::adoption::ProcessIdentity;
use crate::laws::idle_shutdown::QuiesceAnswer;
use crate::laws::limits::ResourceLimits;
use crate::laws::timing::TM;
use crate::protocol::message::{Request, Response};
use crate::session::store::{read_json, KernelRecord};

fn host(supervisor: &Shared) -> Rc<dyn WorkerHost> {
    supervisor.borrow().host.clone()
}

/// Whether this backend can apply `limits` to a new session's kernels
/// (with a warning to pass on, if any), or the one line that says why
/// not. Under systemd the kernel unit takes them as properties, enforced
/// only where the user manager has the controllers; the process backend
/// needs a delegated cgroup v2.
pub fn limits_apply(
    supervisor: &Shared,
    limits: &ResourceLimits,
) -> Result<Option<String>, String> {
    match host(supervisor).kind() {
        HostKind::Systemd => Ok(crate::host::cgroup::systemd_warning(limits)),
        HostKind::Process => crate::host::cgroup::process_refusal(limits).map_or(Ok(None), Err),
    }
}

/// The live worker process of `id` left from before, if any.
pub async fn surviving_worker(supervisor: &Shared, id: &str) -> Option<ProcessIdentity> {
    host(supervisor).find(id).await
}

/// Every live worker, by session.
pub async fn live_workers(
    supervisor: &Shared,
) -> Result<HashMap<String, ProcessIdentity>, SupervisorError> {
    let known: Vec<String> = supervisor.borrow().slots.keys().cloned().collect();
    Ok(host(supervisor).live(known).await?)
}

/// Start the worker of `id`.
pub async fn start_worker(supervisor: &Shared, id: &str) -> Result<(), SupervisorError> {
    Ok(host(supervisor).start(id).await?)
}

/// Wait up to `within_ms` for the worker `identity` of `id` to be gone.
pub async fn wait_gone(supervisor: &Shared, id: &str, identity: ProcessIdentity, within_ms: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(within_ms);
    host(supervisor).wait_gone(id, identity, deadline).await;
}

/// Wait out the kill route and the child drain for the worker `identity`
/// of `id`: a worker that is dying is gone within them.
async fn wait_out_kill(supervisor: &Shared, id: &str, identity: ProcessIdentity) {
    let within_ms = TM.supervisor.kill_route + TM.supervisor.child_drain;
    wait_gone(supervisor, id, identity, within_ms).await;
}

/// Whether no worker of `id` is left, once one that is dying has had the
/// kill route and the child drain to go (its connection closes before its
/// process is gone).
pub async fn no_worker_left(supervisor: &Shared, id: &str) -> bool {
    let Some(identity) = surviving_worker(supervisor, id).await else {
        return true;
    };
    wait_out_kill(supervisor, id, identity).await;
    !host(supervisor).still_there(id, identity).await
}

/// End the worker `identity` of `id` by force (a hung worker, or one that
/// outlived its stop grace) and wait out the kill route and the child
/// drain.
pub async fn kill_worker(supervisor: &Shared, id: &str, identity: ProcessIdentity) {
    host(supervisor).kill(id, identity).await;
    wait_out_kill(supervisor, id, identity).await;
}

/// Stop the worker `identity` of `id`: ask it with `request` (`Stop`: it
/// keeps queued input for the next worker and its kernel keeps its runs;
/// `StopWithKernel`: the kernel ends too) and give it one stop grace for
/// asking and leaving together, then end it by force and wait out the
/// kill route and the child drain. The whole escalation is `stop_grace +
/// kill_route + child_drain`, which the supervisor drain covers
/// (`timeouts_ordered`). Returns whether it is gone.
pub async fn stop_worker(
    supervisor: &Shared,
    id: &str,
    identity: ProcessIdentity,
    request: Request,
) -> bool {
    let host = host(supervisor);
    let grace_ends = tokio::time::Instant::now() + Duration::from_millis(TM.worker.stop_grace);
    let answer = tokio::time::timeout_at(grace_ends, ask_worker(supervisor, id, request)).await;
    // An idle shutdown's stop that met a reopened gate is refused: the
    // worker may have started work since its idle answer, so it is left
    // serving (never killed); the next supervisor adopts it.
    if let Ok(Ok(Response::Quiesce {
        answer: QuiesceAnswer::Busy,
    })) = answer
    {
        tracing::warn!(
            session = id,
            "the worker refused the idle shutdown's stop (its gate reopened): left running"
        );
        return false;
    }
    host.wait_gone(id, identity, grace_ends).await;
    if host.still_there(id, identity).await {
        tracing::warn!(
            session = id,
            "the worker outlived its stop grace and is ended by force"
        );
        kill_worker(supervisor, id, identity).await;
    }
    !host.still_there(id, identity).await
}

/// The kernel of `id`, as it recorded itself, if it lives.
fn live_kernel(supervisor: &Shared, id: &str) -> Option<ProcessIdentity> {
    let files = supervisor.borrow().files(id);
    read_json::<KernelRecord>(&files.kernel())
        .ok()
        .flatten()
        .map(|record| record.identity)
        .filter(|&identity| is_alive(identity))
}

/// Whether the kernel of `id` lives (as it recorded itself, by identity).
pub fn kernel_lives(supervisor: &Shared, id: &str) -> bool {
    live_kernel(supervisor, id).is_some()
}

/// End the kernel of `id` that no worker drives (its worker left or was
/// stopped first): every process of the session ends.
pub async fn stop_lone_kernel(supervisor: &Shared, id: &str) {
    let Some(kernel) = live_kernel(supervisor, id) else {
        return;
    };
    tracing::info!(session = id, "stopping the session's kernel");
    host(supervisor).stop_kernel(id, kernel).await;
}

/// How the worker the host started for `id` exited, if the host saw it
/// exit at or after `since_ms` (the process backend reaps its children).
pub fn worker_exit(supervisor: &Shared, id: &str, since_ms: u64) -> Option<String> {
    host(supervisor).exit_of(id, since_ms)
}

/// After a worker's control connection ended: why, as far as the host
/// knows.
pub async fn why_worker_ended(supervisor: &Shared, id: &str) -> String {
    host(supervisor).why_ended(id).await
}

/// Leave no trace of `id` with the host (its units stopped and their
/// failures forgotten, under systemd).
pub async fn forget_session(supervisor: &Shared, id: &str) -> Result<(), SupervisorError> {
    Ok(host(supervisor).forget_session(id).await?)
}

/// What is left of session `id`'s processes, in words (none: nothing).
pub async fn processes_left(supervisor: &Shared, id: &str) -> Option<String> {
    if let Some(worker) = surviving_worker(supervisor, id).await {
        return Some(format!("its worker (pid {}) is still alive", worker.pid));
    }
    if let Some(kernel) = live_kernel(supervisor, id) {
        return Some(format!("its kernel (pid {}) is still alive", kernel.pid));
    }
    host(supervisor).left_of_session(id).await
}

/// Sessions the host still runs something of (live units, under systemd).
pub async fn sessions_running(supervisor: &Shared) -> Vec<String> {
    host(supervisor).sessions_running().await
}

#[cfg(test)]
mod tests {
    //! The stop escalation against a fake host, on tokio's paused clock:
    //! each case runs in microseconds of real time.

    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;
    use std::rc::Rc;

    use crate::laws::timing::POLL_MS;

    use tokio::time::Instant;

    use super::*;
    use crate::config::Config;
    use crate::host::busy_journal::BusyJournal;
    use crate::host::workers::HostFuture;
    use crate::host::{HostError, HostKind};
    use crate::paths::Paths;
    use crate::supervisor::slots::Supervisor;

    /// A worker that leaves by itself after `leaves_after` (never: `None`)
    /// and, once killed, after `dies_after_kill` (never: `None`).
    struct FakeHost {
        started: Instant,
        leaves_after: Option<Duration>,
        dies_after_kill: Option<Duration>,
        killed: Cell<Option<Instant>>,
        kills: RefCell<Vec<ProcessIdentity>>,
    }

    impl FakeHost {
        fn alive(&self) -> bool {
            let now = Instant::now();
            let left = self
                .leaves_after
                .is_some_and(|after| now >= self.started + after);
            let killed = match (self.killed.get(), self.dies_after_kill) {
                (Some(at), Some(after)) => now >= at + after,
                _ => false,
            };
            !left && !killed
        }
    }

    impl WorkerHost for FakeHost {
        fn kind(&self) -> HostKind {
            HostKind::Process
        }
        fn start<'a>(&'a self, _: &'a str) -> HostFuture<'a, Result<(), HostError>> {
            Box::pin(async { Ok(()) })
        }
        fn find<'a>(&'a self, _: &'a str) -> HostFuture<'a, Option<ProcessIdentity>> {
            Box::pin(async { None })
        }
        fn live<'a>(
            &'a self,
            _: Vec<String>,
        ) -> HostFuture<'a, Result<HashMap<String, ProcessIdentity>, HostError>> {
            Box::pin(async { Ok(HashMap::new()) })
        }
        fn still_there<'a>(&'a self, _: &'a str, _: ProcessIdentity) -> HostFuture<'a, bool> {
            Box::pin(async { self.alive() })
        }
        fn kill<'a>(&'a self, _: &'a str, identity: ProcessIdentity) -> HostFuture<'a, ()> {
            Box::pin(async move {
                self.killed.set(Some(Instant::now()));
                self.kills.borrow_mut().push(identity);
            })
        }
        fn why_ended<'a>(&'a self, _: &'a str) -> HostFuture<'a, String> {
            Box::pin(async { String::new() })
        }
        fn busy_journal(&self) -> BusyJournal {
            BusyJournal::Journald
        }
        fn watchdog(&self, _: &Config) -> Option<Duration> {
            None
        }
        fn stop_kernel<'a>(&'a self, _: &'a str, _: ProcessIdentity) -> HostFuture<'a, ()> {
            Box::pin(async {})
        }
    }

    const WORKER: ProcessIdentity = ProcessIdentity {
        pid: 4242,
        start_time: 77,
    };

    /// Stop a worker that behaves as `leaves_after` and `dies_after_kill`
    /// say (it never answers: there is no socket): whether it is gone, how
    /// long the stop took on the paused clock, and when it was killed.
    async fn stop(
        leaves_after: Option<Duration>,
        dies_after_kill: Option<Duration>,
    ) -> (bool, Duration, Option<Duration>, Vec<ProcessIdentity>) {
        let dir = std::env::temp_dir().join(format!(
            "eukhe-stop-escalation-{}-{}",
            std::process::id(),
            crate::clock::mono_ms()
        ));
        let paths = Paths {
            socket: dir.join("eukhe.sock"),
            state: dir.join("state"),
            config: dir.join("config.toml"),
        };
        let started = Instant::now();
        let host = Rc::new(FakeHost {
            started,
            leaves_after,
            dies_after_kill,
            killed: Cell::new(None),
            kills: RefCell::new(Vec::new()),
        });
        let supervisor = Rc::new(RefCell::new(Supervisor::new(
            paths,
            Config::default(),
            host.clone(),
        )));
        let gone = stop_worker(&supervisor, "1a2b3c4d", WORKER, Request::Stop).await;
        let took = started.elapsed();
        let killed = host.killed.get().map(|at| at - started);
        let kills = host.kills.borrow().clone();
        (gone, took, killed, kills)
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_worker_that_leaves_within_the_grace_is_never_killed() {
        let (gone, took, killed, _) = stop(Some(ms(1_200)), Some(ms(0))).await;
        assert!(gone);
        assert_eq!(killed, None);
        assert!(took >= ms(1_200) && took <= ms(1_200 + POLL_MS), "{took:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_worker_that_outlives_the_stop_grace_is_killed_by_identity_when_it_ends() {
        let (gone, took, killed, kills) = stop(None, Some(ms(300))).await;
        assert!(gone);
        assert_eq!(kills, [WORKER], "killed by identity, once");
        let killed = killed.expect("it was killed");
        assert!(
            killed >= ms(TM.worker.stop_grace) && killed <= ms(TM.worker.stop_grace + POLL_MS),
            "killed at {killed:?}"
        );
        assert!(took <= killed + ms(300 + POLL_MS), "{took:?}");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_worker_that_survives_its_kill_is_reported_within_the_supervisor_drain() {
        let (gone, took, killed, kills) = stop(None, None).await;
        assert!(!gone, "a worker that survives its kill is still there");
        assert_eq!(kills, [WORKER], "killed by identity, once");
        assert!(killed.is_some());
        let escalation =
            TM.worker.stop_grace + TM.supervisor.kill_route + TM.supervisor.child_drain;
        assert!(
            took >= ms(escalation) && took <= ms(escalation + POLL_MS),
            "{took:?}"
        );
        assert!(
            took <= ms(TM.supervisor.supervisor_drain + POLL_MS),
            "{took:?}"
        );
    }
}
