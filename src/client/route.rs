//! Which daemon a client call goes to. A process serves one target
//! (`--host`) unless a many-host `eukhe mcp` runs a tool call on one of
//! its hosts: within `on`, every connection the call makes (its first,
//! a reconnect, a cancel on the side) goes to that host.

use std::future::Future;

use super::remote::{process_target, Target};

tokio::task_local! {
    static CALL_TARGET: Target;
}

/// Run `call` with every connection it makes going to `target`.
pub async fn on<F: Future>(target: Target, call: F) -> F::Output {
    CALL_TARGET.scope(target, call).await
}

/// The target of the call running now: its own, else the process's.
pub fn current_target() -> Target {
    CALL_TARGET
        .try_with(Target::clone)
        .unwrap_or_else(|_| process_target().clone())
}
