//! The spare session: the daemon keeps one session made ahead of `eukhe
//! new`, its worker and kernel started, so a `new` only claims it and the
//! session's first command runs at the speed of a warm one (the start of
//! a worker, a kernel and its shell, or of their units, is most of a
//! session's start).
//!
//! A spare is a session directory with `spare.json` in place of
//! `meta.json`: it is no session. It is never listed, named, counted,
//! idle-stopped or told on the event stream, and a daemon that finds one
//! at its start launches it again. A claim writes the client's environment
//! and then `meta.json` (from that write on it is a session, whatever
//! happens next), tells the worker (`Request::Claim`: it reads the
//! metadata and has the kernel make the first snapshot from it, which a
//! kernel also does at its first job if that word was lost) and makes the
//! next spare. Under systemd the spare's units are named by its id, as a
//! session's are: a claim keeps them, and only the name changes.

use super::launch::{ask_worker, launch, Shared};
use super::slots::{Slot, SlotState};
use crate::build_id::build_id;
use crate::laws::timing::SPARE_REMAKE_MS;
use crate::protocol::message::{Request, Response};
use crate::session::env::SessionEnv;
use crate::session::store::{create_session_dir, write_json, write_session, SessionMeta};

/// Whether this daemon keeps a spare session.
pub fn wanted(supervisor: &Shared) -> bool {
    let s = supervisor.borrow();
    s.config.spare_session && !s.shutdown.decided()
}

/// Have a spare ready: launch the one there is if it rests, else make
/// one. A spare that failed (given up, damaged) is left alone: `new`
/// then makes its sessions as it would without a spare.
pub async fn ensure(supervisor: &Shared) {
    if !wanted(supervisor) {
        return;
    }
    let existing = {
        let s = supervisor.borrow();
        s.slots
            .values()
            .find(|slot| slot.spare)
            .map(|slot| (slot.meta.id.clone(), slot.state.clone()))
    };
    match existing {
        Some((id, SlotState::Saved)) => launch(supervisor, &id).await,
        Some(_) => {}
        None => {
            if let Some(id) = make(supervisor) {
                launch(supervisor, &id).await;
            }
        }
    }
}

/// A new spare's directory and metadata, and its slot; its id.
fn make(supervisor: &Shared) -> Option<String> {
    let id = super::routing::fresh_id(supervisor);
    let files = supervisor.borrow().files(&id);
    let meta = SessionMeta {
        id: id.clone(),
        name: id.clone(),
        cwd: "/".into(),
        created_ms: crate::clock::wall_ms(),
        engine: "shell".into(),
        limits: Default::default(),
    };
    if let Err(e) = create_session_dir(&files.dir).and_then(|_| write_json(&files.spare(), &meta)) {
        tracing::warn!("no spare session: {e}");
        return None;
    }
    let mut slot = Slot::new(meta, SlotState::Saved);
    slot.spare = true;
    supervisor.borrow_mut().slots.insert(id.clone(), slot);
    Some(id)
}

/// Make the ready spare the session `meta` describes (its id is the
/// spare's, `meta.id` is ignored) with the environment `env`: its id, or
/// `None` when no spare of this build is ready or it could not be claimed
/// (then it is still a spare). A failure after `meta.json` is written
/// leaves a session that works without the spare's head start.
pub async fn claim(
    supervisor: &Shared,
    mut meta: SessionMeta,
    env: Option<&SessionEnv>,
) -> Option<String> {
    let id = {
        let s = supervisor.borrow();
        s.slots
            .values()
            .find(|slot| {
                slot.spare
                    && matches!(&slot.state, SlotState::Running { build, .. } if build == build_id())
            })
            .map(|slot| slot.meta.id.clone())?
    };
    let files = supervisor.borrow().files(&id);
    // A `new` without a name is named by its id: the spare's, now.
    if meta.name == meta.id {
        meta.name = id.clone();
    }
    meta.id = id.clone();
    if let Err(e) = write_session(&files, env, &meta) {
        // No `meta.json`: still a spare; this `new` makes its own session.
        let _ = std::fs::remove_file(files.env());
        tracing::warn!(session = id, "the spare session could not be claimed: {e}");
        return None;
    }
    {
        let mut s = supervisor.borrow_mut();
        if let Some(slot) = s.slots.get_mut(&id) {
            slot.meta = meta;
            slot.spare = false;
            slot.last_active_ms = crate::clock::mono_ms();
        }
    }
    // After the answer, not before it: removing a name waits for the
    // file system's journal, and `meta.json` already outranks it. Not
    // after the worker's word either, which may come late: until it is
    // gone, the spare's file holds room on the state disk.
    let spare_file = files.spare();
    tokio::task::spawn_local(async move {
        let _ = std::fs::remove_file(spare_file);
    });
    // Not waited for: the session is there once `meta.json` is, and its
    // kernel makes the first snapshot at the first job if this word comes
    // late or never.
    let told = supervisor.clone();
    let claimed = id.clone();
    tokio::task::spawn_local(async move {
        let answer = match ask_worker(&told, &claimed, Request::Claim).await {
            Ok(Response::Ok) => Ok(()),
            Ok(Response::Error { message }) => Err(message),
            Ok(other) => Err(format!("answered {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = answer {
            tracing::warn!(
                session = claimed,
                "the worker of claimed spare {claimed} was not told: {e}"
            );
        }
    });
    let next = supervisor.clone();
    tokio::task::spawn_local(async move {
        tokio::time::sleep(std::time::Duration::from_millis(SPARE_REMAKE_MS)).await;
        ensure(&next).await
    });
    Some(id)
}
