//! The service manager's side channels, used when systemd runs eukhe: the
//! listening socket passed by socket activation (`LISTEN_PID`,
//! `LISTEN_FDS`), and status notifications (`NOTIFY_SOCKET`: `READY=1`,
//! `STATUS=`, `WATCHDOG=1`, `STOPPING=1`). Without systemd both are absent
//! and these functions do nothing.

use super::HostError;
use libsystemd::daemon::NotifyState;
use std::os::unix::net::UnixListener;
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
        (count, None) => return Err(HostError::NoEukheSocket(count)),
    };
    let listener = passed
        .take_unix_listener(index)
        .map_err(|e| HostError::io("the activated socket", e))?
        .ok_or(HostError::ActivatedSocketTaken)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HostError::io("the activated socket", e))?;
    Ok(Some(listener))
}

/// Tell the service manager `state`, one `KEY=value` a line (e.g.
/// `READY=1`); nothing without one. libsystemd's `notify` reaches an
/// abstract `NOTIFY_SOCKET` (`@...`, as sd_notify(3) allows) as well as a
/// path. `NOTIFY_SOCKET` stays set in this process (it is read at every
/// call) and is removed from every child's environment instead (a
/// worker's in `supervisor::backend`, a command's in `session::env`).
pub fn notify(state: &str) {
    let states: Vec<NotifyState> = state
        .lines()
        .map(|line| NotifyState::Other(line.to_string()))
        .collect();
    if let Err(e) = libsystemd::daemon::notify(false, &states) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};

    /// A manager that names an abstract socket hears every state.
    #[test]
    fn notifications_reach_an_abstract_notify_socket() {
        let name = format!("eukhe-notify-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&address).unwrap();
        manager
            .set_read_timeout(Some(std::time::Duration::from_millis(
                crate::laws::timing::KERNEL_ANSWER_MS,
            )))
            .unwrap();
        std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
        notify("READY=1\nSTATUS=serving session s1");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 256];
        let n = manager.recv(&mut buf).expect("the notification");
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving session s1\n");
    }
}
