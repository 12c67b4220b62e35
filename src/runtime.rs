//! The one way eukhe's processes run async code: a single-threaded tokio
//! runtime with a `LocalSet`, so state can be shared with `Rc<RefCell<_>>`
//! and never needs a lock.

use std::future::Future;

/// Run `future` (and the local tasks it spawns) to completion; `what` names
/// the process in the error if the runtime cannot start.
pub fn block_on_local<T>(
    what: &str,
    future: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the {what} runtime: {e}"))?;
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

/// [`block_on_local`] for a client command: once `future` is done the
/// process does not wait for blocking reads still pending. Tokio reads
/// standard input on a blocking thread, and a read of a terminal waits for
/// the next line: `eukhe attach` detached with Ctrl-\ would otherwise
/// hang until Enter (and, under `top`, take the dashboard's next key).
pub fn block_on_client<T>(
    what: &str,
    future: impl Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the {what} runtime: {e}"))?;
    let result = tokio::task::LocalSet::new().block_on(&runtime, future);
    runtime.shutdown_background();
    result
}
