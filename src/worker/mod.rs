//! The worker: one process per session. It owns the session's transcript
//! and kernel, turns queued input into runs (the built-in `shell` engine:
//! each input is a command line, one run at a time, in order), serves its
//! own socket, records busy evidence, and acts alone when its supervisor is
//! lost, all as the law modules decide.

mod books;
mod checkpoint;
mod client_left;
mod core;
pub mod engine;
pub mod error;
mod kernel_watch;
mod link;
mod numbering;
mod outbox;
mod reset;
pub mod screen;
mod screens;
mod serve;
mod shell_marks;
mod state;
mod terminal;
mod wait_for;
mod waiting;

pub use error::WorkerError;
use std::cell::RefCell;
use std::rc::Rc;

use crate::paths::Paths;

pub(crate) use state::Worker;

/// Run the worker of `session` until it stops.
pub fn main(session: &str) -> Result<(), WorkerError> {
    let paths = Paths::from_env().map_err(WorkerError::Paths)?;
    let log = crate::session::store::SessionFiles::new(paths.session_dir(session)).log();
    crate::host::log::init(
        crate::host::HostKind::from_env()?,
        "worker",
        Some(session),
        Some(log),
    );
    crate::runtime::block_on_local("worker", async move {
        let worker = Rc::new(RefCell::new(Worker::open(&paths, session)?));
        serve::run(worker, &paths).await
    })
}
