//! The service manager's side channels, used when systemd runs eukhe: the
//! listening socket passed by socket activation (`LISTEN_PID`,
//! `LISTEN_FDS`), and status notifications (`NOTIFY_SOCKET`: `READY=1`,
//! `STATUS=`, `WATCHDOG=1`, `STOPPING=1`). Without systemd both are absent
//! and these functions do nothing.

use std::os::fd::FromRawFd;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::time::Duration;

/// The first file descriptor passed by socket activation.
const SD_LISTEN_FDS_START: i32 = 3;

/// The listening socket this process was activated with, if any. The
/// activation variables are removed so no child inherits them. Call before
/// any thread starts.
pub fn activated_listener() -> Result<Option<UnixListener>, String> {
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(name);
    }
    if !for_us || count < 1 {
        return Ok(None);
    }
    if count > 1 {
        return Err(format!(
            "socket activation passed {count} sockets; eukhe.socket listens on one"
        ));
    }
    // SAFETY: systemd passed us fd 3 as an open listening socket that no
    // other part of this process owns; F_SETFD only sets close-on-exec.
    let listener = unsafe {
        libc::fcntl(SD_LISTEN_FDS_START, libc::F_SETFD, libc::FD_CLOEXEC);
        UnixListener::from_raw_fd(SD_LISTEN_FDS_START)
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("the activated socket: {e}"))?;
    Ok(Some(listener))
}

/// Tell the service manager `state` (e.g. `READY=1`); nothing without one.
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

/// How often to send `WATCHDOG=1`: half the manager's watchdog interval.
pub fn watchdog_ping_interval() -> Option<Duration> {
    if let Some(pid) = std::env::var("WATCHDOG_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    {
        if pid != std::process::id() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}
