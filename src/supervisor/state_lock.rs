//! One daemon per state directory. Two daemons on one state directory
//! (the same `EUKHE_STATE_DIR`, two sockets) would each launch workers for
//! the same sessions and replace each other's: two workers of one session
//! at once. So the daemon holds `daemon.lock` in the state directory
//! (`flock`, for its whole life: the lock ends with the process, however
//! it ends) and writes who it is beside it (`daemon.json`: socket, pid), so
//! a second daemon can say which one serves the directory.

use super::SupervisorError;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::laws::timing::{POLL_MS, TM};
use crate::paths::{holder_path, Holder, Paths};
use crate::session::store::{private_dir, read_json, write_json};

/// The lock, held while this value lives (the process's life).
pub struct StateLock {
    _file: Flock<std::fs::File>,
}

/// What a daemon that found the lock held does.
#[derive(Debug, PartialEq, Eq)]
pub enum Contended {
    /// The holder is the daemon of our own socket and no longer listens:
    /// it is ending (a replacement); wait for it.
    WaitForHandover,
    /// A daemon listens on our own socket: it is the daemon.
    AlreadyListening,
    /// Another daemon (another socket, or one we cannot name) holds it.
    Refuse,
}

/// The decision on a held lock: pure, from what was found.
pub fn contended(our_socket: &str, holder: Option<&Holder>, ours_listens: bool) -> Contended {
    match holder {
        Some(holder) if holder.socket == our_socket => {
            if ours_listens {
                Contended::AlreadyListening
            } else {
                Contended::WaitForHandover
            }
        }
        _ => Contended::Refuse,
    }
}

fn lock_path(state: &Path) -> PathBuf {
    state.join("daemon.lock")
}

/// Take the state directory's lock for this daemon, or say in one line
/// which daemon holds it. A socket-activated daemon (`activated`) is the
/// one the service manager chose for its socket, which always accepts:
/// a holder on the same socket is then an ending daemon, waited for.
pub fn take(paths: &Paths, activated: bool) -> Result<StateLock, SupervisorError> {
    private_dir(&paths.state)?;
    let path = lock_path(&paths.state);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| {
            SupervisorError::io(
                format!("cannot open the state directory's lock {}", path.display()),
                e,
            )
        })?;
    let our_socket = paths.socket.display().to_string();
    let deadline = Instant::now() + Duration::from_millis(TM.supervisor.state_lock_handover);
    loop {
        // The lock lives as long as the open file, which `StateLock` keeps.
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => {
                let holder = Holder {
                    socket: our_socket,
                    pid: std::process::id(),
                };
                // The record only names the holder to a refused daemon: a
                // full disk must not keep the sessions' daemon from
                // serving. A stale record would name another, so it goes.
                if let Err(e) = write_json(&holder_path(&paths.state), &holder) {
                    let _ = std::fs::remove_file(holder_path(&paths.state));
                    tracing::warn!("serving without daemon.json: {e}");
                }
                return Ok(StateLock { _file: locked });
            }
            Err((unlocked, _)) => file = unlocked,
        }
        let holder: Option<Holder> = read_json(&holder_path(&paths.state)).ok().flatten();
        let ours_listens =
            !activated && std::os::unix::net::UnixStream::connect(&paths.socket).is_ok();
        match contended(&our_socket, holder.as_ref(), ours_listens) {
            Contended::WaitForHandover if Instant::now() < deadline => {
                // No event says a flock was released short of a blocking
                // lock without a deadline: tried again until the hand-over's.
                std::thread::sleep(Duration::from_millis(POLL_MS));
            }
            Contended::AlreadyListening => {
                return Err(SupervisorError::Taken(format!(
                    "a daemon already listens on {our_socket}"
                )))
            }
            _ => {
                return Err(SupervisorError::Taken(refusal(
                    &paths.state,
                    holder.as_ref(),
                )))
            }
        }
    }
}

/// The one line a second daemon says.
fn refusal(state: &Path, holder: Option<&Holder>) -> String {
    match holder {
        Some(Holder { socket, pid }) => format!(
            "the state directory {} is already served by the daemon with pid {pid} on socket {socket}: \
             one daemon per state directory (use EUKHE_SOCKET={socket}, or stop it with \
             `EUKHE_SOCKET={socket} eukhe shutdown`)",
            state.display()
        ),
        None => format!(
            "the state directory {} is already served by another daemon ({} is locked; \
             {} does not say which): one daemon per state directory",
            state.display(),
            lock_path(state).display(),
            holder_path(state).display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_ending_daemon_of_our_own_socket_is_waited_for() {
        let holder = Holder {
            socket: "/run/a.sock".into(),
            pid: 7,
        };
        assert_eq!(
            contended("/run/a.sock", Some(&holder), false),
            Contended::WaitForHandover
        );
        assert_eq!(
            contended("/run/a.sock", Some(&holder), true),
            Contended::AlreadyListening
        );
        assert_eq!(
            contended("/run/b.sock", Some(&holder), false),
            Contended::Refuse
        );
        assert_eq!(contended("/run/a.sock", None, false), Contended::Refuse);
    }

    #[test]
    fn the_refusal_names_the_socket_and_the_pid() {
        let line = refusal(
            Path::new("/s"),
            Some(&Holder {
                socket: "/run/a.sock".into(),
                pid: 42,
            }),
        );
        assert!(
            line.contains("pid 42") && line.contains("/run/a.sock"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }
}
