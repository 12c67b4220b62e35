//! The service manager's side channels, used when systemd runs eukhe: the
//! listening socket passed by socket activation (`LISTEN_PID`,
//! `LISTEN_FDS`), and status notifications (`NOTIFY_SOCKET`: `READY=1`,
//! `STATUS=`, `WATCHDOG=1`, `STOPPING=1`). Without systemd both are absent
//! and these functions do nothing.

use super::HostError;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::time::Duration;

/// The listening socket this process was activated with, if any (the
/// listenfd crate checks it is a Unix stream listener and makes it
/// close-on-exec). With several sockets, the one named `eukhe.socket` in
/// `LISTEN_FDNAMES` is taken. The activation variables are removed so no
/// child inherits them. Call before any thread starts.
pub fn activated_listener() -> Result<Option<UnixListener>, HostError> {
    let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
        .map(|names| names.split(':').map(str::to_string).collect())
        .unwrap_or_default();
    std::env::remove_var("LISTEN_FDNAMES");
    let mut passed = listenfd::ListenFd::from_env();
    let index = match (passed.len(), names.iter().position(|n| n == "eukhe.socket")) {
        (0, _) => return Ok(None),
        (_, Some(index)) => index,
        (1, None) => 0,
        (count, None) => {
            return Err(HostError::Refused(format!(
                "socket activation passed {count} sockets and none is named eukhe.socket"
            )))
        }
    };
    let listener = passed
        .take_unix_listener(index)
        .map_err(|e| HostError::io("the activated socket", e))?
        .ok_or_else(|| HostError::Refused("the activated socket was already taken".into()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HostError::io("the activated socket", e))?;
    Ok(Some(listener))
}

/// Tell the service manager `state` (e.g. `READY=1`); nothing without one.
///
/// Written here rather than taken from the sd-notify crate: its `notify`
/// connects to `NOTIFY_SOCKET` as a path, so a manager that names an
/// abstract socket (`@...`, as sd_notify(3) allows) would never hear from
/// eukhe. `NOTIFY_SOCKET` stays set in this process (it is read at every
/// call) and is removed from every child's environment instead (a worker's
/// in `supervisor::backend`, a command's in `session::env`).
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| socket.send_to_addr(state.as_bytes(), &addr))
    } else {
        socket.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        eprintln!("eukhe: cannot notify the service manager: {e}");
    }
}

/// How often to send `WATCHDOG=1`: half the manager's watchdog interval
/// (`WATCHDOG_USEC`, when `WATCHDOG_PID` is unset or this process; a
/// zero interval is no watchdog).
pub fn watchdog_ping_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled()
        .filter(|interval| !interval.is_zero())
        .map(|interval| interval / 2)
}
