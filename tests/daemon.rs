//! The daemon on the process backend, driven through the real binary:
//! real processes, real sockets, temporary directories.

mod attach;
mod basics;
mod crashes;
mod guards;
mod upgrades;

#[path = "daemon/sessions.rs"]
mod sessions;

#[path = "daemon/diag.rs"]
mod diag;

#[path = "daemon/events.rs"]
mod events;

#[path = "daemon/stop.rs"]
mod stop;

#[path = "daemon/revival.rs"]
mod revival;

#[path = "daemon/stuck.rs"]
mod stuck;

#[path = "daemon/quiesce.rs"]
mod quiesce;

#[path = "daemon/restore.rs"]
mod restore;

#[path = "daemon/messages.rs"]
mod messages;

#[path = "daemon/direct.rs"]
mod direct;

mod spare;

use std::time::Duration;

use crate::support::{kill9, wait_until, Env};

/// Kill `id`'s worker `times` times, the next only once it was restarted,
/// and the last without waiting for its restart.
fn crash_times(env: &Env, id: &str, times: u32) {
    for failure in 1..=times {
        let pid = env.worker_pid(id).unwrap();
        kill9(pid);
        if failure < times {
            wait_until(Duration::from_secs(15), "the worker restarts", || {
                env.worker_pid(id).is_some_and(|p| p != pid)
            });
        }
    }
}
