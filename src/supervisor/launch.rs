//! Launching, watching, restarting, adopting and reviving workers on the
//! process backend. Every decision is a call into `laws`.

use std::cell::RefCell;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::UnixStream;

use super::slots::{SlotState, Supervisor};
use crate::build_id::{build_id, version};
use crate::clock::{mono_ms, wall_ms};
use crate::host::busy_journal::BusyJournal;
use crate::host::process::{identity_of, is_alive, signal};
use crate::laws::adoption::{
    adoption_verdict, survivor_step, AdoptionVerdict, LaunchStep, LiveWorker, ProcessIdentity,
};
use crate::laws::restart::RestartVerdict;
use crate::laws::revival::{revival_veto, RecordOrigin};
use crate::laws::timing::TM;
use crate::protocol::hello::Role;
use crate::protocol::message::{Request, Response};
use crate::protocol::{read_frame, write_frame, Hello, PROTOCOL_VERSION};
use crate::session::store::{read_json, SessionFiles, WorkerRecord};
use crate::session::transcript::{EntryBody, Transcript};

pub type Shared = Rc<RefCell<Supervisor>>;

/// Connect to a worker's socket and exchange hellos.
pub async fn connect_worker(supervisor: &Shared, id: &str) -> Result<(UnixStream, Hello), String> {
    let socket = supervisor.borrow().paths.worker_socket(id);
    let mut stream = UnixStream::connect(&socket).await.map_err(|e| {
        format!(
            "session {id}: cannot reach its worker at {}: {e}",
            socket.display()
        )
    })?;
    let hello = Hello {
        protocol: PROTOCOL_VERSION,
        version: version().to_string(),
        build_id: build_id().to_string(),
        role: Role::Supervisor,
        capabilities: Vec::new(),
        pid: Some(std::process::id()),
    };
    write_frame(&mut stream, &Request::Hello(hello))
        .await
        .map_err(|e| format!("session {id}: {e}"))?;
    match read_frame::<Response, _>(&mut stream).await {
        Ok(Response::Hello(theirs)) => Ok((stream, theirs)),
        Ok(Response::Error { message }) => Err(format!("session {id}: worker refused: {message}")),
        Ok(other) => Err(format!("session {id}: worker answered {other:?} to hello")),
        Err(e) => Err(format!("session {id}: worker hello: {e}")),
    }
}

/// Send one request to a worker on a fresh connection and read one answer.
pub async fn ask_worker(
    supervisor: &Shared,
    id: &str,
    request: Request,
) -> Result<Response, String> {
    let (mut stream, _) = connect_worker(supervisor, id).await?;
    write_frame(&mut stream, &request)
        .await
        .map_err(|e| format!("session {id}: {e}"))?;
    read_frame(&mut stream)
        .await
        .map_err(|e| format!("session {id}: {e}"))
}

/// Launch the worker of `id` (after dealing with any earlier process the
/// way `survivor_step` says) and start watching it.
pub async fn launch(supervisor: &Shared, id: &str) {
    let files = supervisor.borrow().files(id);
    let earlier = read_json::<WorkerRecord>(&files.worker())
        .ok()
        .flatten()
        .map(|r| r.identity);
    let mut stop_sent = false;
    loop {
        match survivor_step(earlier, earlier.and_then(|e| identity_of(e.pid)), stop_sent) {
            LaunchStep::Launch => break,
            LaunchStep::StopEarlier => {
                let earlier = earlier.expect("a step to stop needs an earlier process");
                signal(earlier, libc::SIGTERM);
                wait_gone(earlier, TM.stop_grace).await;
                if is_alive(earlier) {
                    signal(earlier, libc::SIGKILL);
                    wait_gone(earlier, TM.kill_route + TM.child_drain).await;
                }
                stop_sent = true;
            }
            LaunchStep::CountFailure => {
                failed(supervisor, id, "its earlier worker survived being stopped").await;
                return;
            }
        }
    }
    let generation = {
        let mut s = supervisor.borrow_mut();
        let Some(slot) = s.slots.get_mut(id) else {
            return;
        };
        slot.state = SlotState::Starting;
        slot.generation += 1;
        slot.generation
    };
    let spawned = spawn_worker(supervisor, id, &files);
    if let Err(e) = spawned {
        failed(supervisor, id, &e).await;
        return;
    }
    tokio::task::spawn_local(watch(supervisor.clone(), id.to_string(), generation));
}

fn spawn_worker(supervisor: &Shared, id: &str, files: &SessionFiles) -> Result<(), String> {
    let paths = supervisor.borrow().paths.clone();
    let lost_exit = crate::config::window_text(supervisor.borrow().config.worker_lost_exit_ms);
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the eukhe executable: {e}"))?;
    let log = crate::session::store::private_append(&files.log())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("worker")
        .arg(id)
        .env("EUKHE_SOCKET", &paths.socket)
        .env("EUKHE_STATE_DIR", &paths.state)
        .env("EUKHE_WORKER_LOST_EXIT_MS", lost_exit)
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // SAFETY: setsid(2) is async-signal-safe; the worker gets its own
    // session and process group, so it outlives this supervisor.
    unsafe {
        command.as_std_mut().pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("session {id}: cannot start its worker: {e}"))?;
    // Reap the child whenever it ends; the watcher notices through its
    // control connection.
    tokio::task::spawn_local(async move {
        let _ = child.wait().await;
    });
    Ok(())
}

/// Hold a control connection to the worker; when it ends, the worker has
/// failed (unless it was stopped on purpose).
async fn watch(supervisor: Shared, id: String, generation: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.stop_grace.max(5_000));
    let connected = loop {
        match connect_worker(&supervisor, &id).await {
            Ok(connection) => break Some(connection),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(_) => break None,
        }
    };
    let Some((mut stream, hello)) = connected else {
        failed(&supervisor, &id, "its worker never answered on its socket").await;
        return;
    };
    if write_frame(
        &mut stream,
        &Request::Supervise {
            build_id: build_id().to_string(),
        },
    )
    .await
    .is_err()
    {
        failed(&supervisor, &id, "its worker hung up").await;
        return;
    }
    loop {
        match read_frame::<Response, _>(&mut stream).await {
            Ok(Response::Worker(info)) => {
                let mut s = supervisor.borrow_mut();
                let Some(slot) = s.slots.get_mut(&id) else {
                    return;
                };
                if slot.generation != generation {
                    return;
                }
                slot.work = info.work;
                slot.state = SlotState::Running {
                    identity: ProcessIdentity {
                        pid: info.pid,
                        start_time: info.start_time,
                    },
                    build: hello.build_id.clone(),
                };
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let current = supervisor.borrow().slots.get(&id).map(|s| s.generation) == Some(generation);
    if current && !supervisor.borrow().shutting_down {
        failed(&supervisor, &id, "its worker ended").await;
    }
}

/// A worker failed: restart after the pause or give up, as the budget says.
pub async fn failed(supervisor: &Shared, id: &str, why: &str) {
    let verdict = {
        let mut s = supervisor.borrow_mut();
        let Some(slot) = s.slots.get_mut(id) else {
            return;
        };
        if slot.state == SlotState::GivenUp {
            return;
        }
        let verdict = slot.budget.record_failure(mono_ms());
        slot.state = match verdict {
            RestartVerdict::Restart { .. } => SlotState::Restarting,
            RestartVerdict::GiveUp { .. } => SlotState::GivenUp,
        };
        slot.work = Default::default();
        verdict
    };
    eprintln!("eukhe daemon: session {id}: {why}: {verdict:?}");
    match verdict {
        RestartVerdict::Restart { pause_ms, .. } => {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
            if supervisor.borrow().shutting_down {
                return;
            }
            Box::pin(launch(supervisor, id)).await;
        }
        RestartVerdict::GiveUp { failures_in_window } => {
            let files = supervisor.borrow().files(id);
            let _ = std::fs::write(files.given_up(), format!("{failures_in_window}\n"));
            if let Ok((mut transcript, _, _)) = Transcript::open(&files.transcript()) {
                let _ = transcript.append(
                    wall_ms(),
                    EntryBody::Notice {
                        text: format!(
                            "given up: the worker failed {failures_in_window} times in 15 minutes; `eukhe restart {id}` starts it afresh"
                        ),
                        restore: None,
                    },
                );
            }
        }
    }
}

async fn wait_gone(identity: ProcessIdentity, within_ms: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(within_ms);
    while is_alive(identity) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// At start: adopt live workers of this build, replace the others, and
/// revive dead workers whose busy evidence is fresh.
pub async fn adopt_and_revive(supervisor: &Shared) {
    let ids: Vec<String> = supervisor
        .borrow()
        .slots
        .iter()
        .filter(|(_, slot)| slot.state != SlotState::GivenUp)
        .map(|(id, _)| id.clone())
        .collect();
    let evidence = BusyJournal::new(&supervisor.borrow().paths.state).latest();
    let mut adopted = Vec::new();
    for id in ids {
        let files = supervisor.borrow().files(&id);
        let record = read_json::<WorkerRecord>(&files.worker()).ok().flatten();
        let live = record.as_ref().filter(|r| is_alive(r.identity));
        if let Some(record) = live {
            let reachable = connect_worker(supervisor, &id).await;
            let build = reachable
                .as_ref()
                .map(|(_, h)| h.build_id.clone())
                .unwrap_or_else(|_| record.build_id.clone());
            let verdict = adoption_verdict(
                build_id(),
                &LiveWorker {
                    build: &build,
                    reachable: reachable.is_ok(),
                },
            );
            drop(reachable);
            match verdict {
                AdoptionVerdict::Adopt => {
                    let generation = {
                        let mut s = supervisor.borrow_mut();
                        let slot = s.slots.get_mut(&id).expect("listed session");
                        slot.generation += 1;
                        slot.state = SlotState::Starting;
                        slot.generation
                    };
                    tokio::task::spawn_local(watch(supervisor.clone(), id.clone(), generation));
                    adopted.push(id.clone());
                }
                AdoptionVerdict::StopAndRelaunch => {
                    let _ = ask_worker(supervisor, &id, Request::Stop).await;
                    wait_gone(record.identity, TM.stop_grace).await;
                    launch(supervisor, &id).await;
                }
            }
            continue;
        }
        if revival_veto(
            evidence.get(&id).copied(),
            wall_ms(),
            RecordOrigin::OtherProcess,
        )
        .is_none()
        {
            launch(supervisor, &id).await;
        }
    }
    // Serve only once the adopted workers are under supervision, so the
    // first client already sees them with their pids.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(TM.stop_grace);
    let supervised = |s: &Supervisor, id: &String| {
        matches!(
            s.slots.get(id).map(|slot| &slot.state),
            Some(SlotState::Running { .. })
        )
    };
    while tokio::time::Instant::now() < deadline
        && !adopted
            .iter()
            .all(|id| supervised(&supervisor.borrow(), id))
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
