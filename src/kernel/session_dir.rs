//! A session removed from under its kernel (its directory renamed away or
//! deleted, as `eukhe rm` does, or by hand while no supervisor could stop
//! the kernel) takes the kernel's processes with it. The kernel learns of
//! it from inotify on the session's directory: the directory itself moved
//! or deleted, or its metadata removed. Without an inotify instance (the
//! user's are all taken), it looks every `SESSION_DIR_POLL_MS` instead.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::serve::{stop, Context};
use crate::laws::timing::SESSION_DIR_POLL_MS;

/// The names whose removal may end the session (`SessionFiles::exist`).
const SESSION_NAMES: [&str; 2] = ["meta.json", "spare.json"];

/// Wait until the session's directory is gone, then stop the kernel.
pub async fn stop_when_gone(ctx: Rc<Context>) {
    let dir = ctx.kernel.borrow().files.dir.clone();
    match watch(&dir) {
        Ok(watch) => wait_for_removal(&ctx, watch).await,
        Err(e) => {
            tracing::warn!(
                "cannot watch the session's directory ({e}): looking every {SESSION_DIR_POLL_MS} ms"
            );
            poll_for_removal(&ctx).await;
        }
    }
    if ctx.kernel.borrow().core.stopping() {
        return;
    }
    tracing::warn!("the session's directory is gone: stopping");
    stop(&ctx).await;
    ctx.exit.notify_one();
}

/// The inotify instance, readable through tokio.
struct Watch(Inotify);

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

fn watch(dir: &std::path::Path) -> std::io::Result<AsyncFd<Watch>> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let flags = AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_ONLYDIR;
    inotify.add_watch(dir, flags)?;
    // SAFETY: the `Inotify` moves into the `AsyncFd`, which alone closes
    // it, after deregistering; its fd stays the same while it is owned.
    let registered = unsafe { AsyncFd::register_with_interest(Watch(inotify), Interest::READABLE) };
    Ok(registered?)
}

/// Returns once the session is gone (or its watch failed and a look
/// found it gone).
async fn wait_for_removal(ctx: &Context, watch: AsyncFd<Watch>) {
    // Removed between the kernel's start and the watch.
    if gone(ctx) {
        return;
    }
    loop {
        let Ok(mut ready) = watch.readable().await else {
            return poll_for_removal(ctx).await;
        };
        let events = match ready.get_inner().0.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EAGAIN) => {
                ready.clear_ready();
                continue;
            }
            Err(_) => return poll_for_removal(ctx).await,
        };
        let relevant = events.iter().any(|event| match &event.name {
            Some(name) => SESSION_NAMES
                .iter()
                .any(|n| name.as_os_str() == OsStr::new(n)),
            // The directory itself, an overflow, or its watch dropped.
            None => true,
        });
        if relevant && gone(ctx) {
            return;
        }
    }
}

async fn poll_for_removal(ctx: &Context) {
    while !gone(ctx) {
        tokio::time::sleep(Duration::from_millis(SESSION_DIR_POLL_MS)).await;
    }
}

fn gone(ctx: &Context) -> bool {
    !ctx.kernel.borrow().files.exist()
}
