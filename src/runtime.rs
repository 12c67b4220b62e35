//! The one way eukhe's processes run async code: a single-threaded tokio
//! runtime with a `LocalSet`, so state can be shared with `Rc<RefCell<_>>`
//! and never needs a lock.

use std::future::Future;

/// The runtime of a process (`what`: "worker", "client") could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the {what} runtime: {source}")]
pub struct RuntimeError {
    what: String,
    #[source]
    source: std::io::Error,
}

/// The layers that still speak in words take it as its line.
impl From<RuntimeError> for String {
    fn from(e: RuntimeError) -> String {
        e.to_string()
    }
}

/// A single-threaded runtime for the process `what`.
fn runtime(what: &str) -> Result<tokio::runtime::Runtime, RuntimeError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError {
            what: what.to_string(),
            source,
        })
}

/// Run `future` (and the local tasks it spawns) to completion; `what` names
/// the process in the error if the runtime cannot start.
pub fn block_on_local<T, E: From<RuntimeError>>(
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let runtime = runtime(what)?;
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

/// [`block_on_local`] for a client command: once `future` is done the
/// process does not wait for blocking reads still pending. Tokio reads
/// standard input on a blocking thread, and a read of a terminal waits for
/// the next line: `eukhe attach` detached with Ctrl-\ would otherwise
/// hang until Enter (and, under `top`, take the dashboard's next key).
pub fn block_on_client<T, E: From<RuntimeError>>(
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let runtime = runtime(what)?;
    let result = tokio::task::LocalSet::new().block_on(&runtime, future);
    runtime.shutdown_background();
    result
}
