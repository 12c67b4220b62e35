//! Where eukhe keeps its socket, its state and its configuration.
//!
//! - socket: `$EUKHE_SOCKET`, else `$XDG_RUNTIME_DIR/eukhe/eukhe.sock`
//!   (without a runtime directory: `/tmp/eukhe-<uid>/eukhe.sock`); worker
//!   sockets live beside it in `workers/`, kernel sockets in `kernels/`.
//! - state: `$EUKHE_STATE_DIR`, else `$XDG_STATE_HOME/eukhe`, else
//!   `~/.local/state/eukhe`.
//! - config: `$XDG_CONFIG_HOME/eukhe/config.toml`, else
//!   `~/.config/eukhe/config.toml`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::session::store::{read_json, SESSION_ID_LEN};

/// The longest path a Unix socket can have: `sun_path` holds 108 bytes,
/// the last of them the terminating NUL.
pub const SOCKET_PATH_MAX: usize = 107;

/// Why eukhe cannot place its files.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    /// Neither `HOME` nor `EUKHE_STATE_DIR` (nor `XDG_STATE_HOME`) is set.
    #[error("no state directory: set HOME or EUKHE_STATE_DIR")]
    NoStateDir,
    /// A socket path would not fit in `sun_path`.
    #[error(
        "the socket directory {} is too deep: {what} would be {} ({len} bytes), over the {} \
         bytes a Unix socket path can hold; set EUKHE_SOCKET (or XDG_RUNTIME_DIR) to a shorter path",
        dir.display(),
        path.display(),
        SOCKET_PATH_MAX
    )]
    SocketTooDeep {
        /// The socket directory.
        dir: PathBuf,
        /// Which socket, as "a worker's socket".
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
}

/// Where this daemon's files live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    /// The daemon's socket; workers' and kernels' sockets live beside it.
    pub socket: PathBuf,
    /// The state directory: sessions, busy evidence, the daemon's lock.
    pub state: PathBuf,
    /// The settings file.
    pub config: PathBuf,
}

impl Paths {
    /// The paths for this process's environment.
    pub fn from_env() -> Result<Paths, PathsError> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME");
        let socket = match var("EUKHE_SOCKET") {
            Some(socket) => socket,
            None => match var("XDG_RUNTIME_DIR") {
                Some(runtime) => runtime.join("eukhe").join("eukhe.sock"),
                None => PathBuf::from(format!("/tmp/eukhe-{}", nix::unistd::getuid()))
                    .join("eukhe.sock"),
            },
        };
        let state = match (var("EUKHE_STATE_DIR"), var("XDG_STATE_HOME"), &home) {
            (Some(state), _, _) => state,
            (None, Some(xdg), _) => xdg.join("eukhe"),
            (None, None, Some(home)) => home.join(".local/state/eukhe"),
            (None, None, None) => return Err(PathsError::NoStateDir),
        };
        let config = match (var("XDG_CONFIG_HOME"), &home) {
            (Some(xdg), _) => xdg.join("eukhe/config.toml"),
            (None, Some(home)) => home.join(".config/eukhe/config.toml"),
            (None, None) => PathBuf::from("/nonexistent/eukhe/config.toml"),
        };
        Ok(Paths {
            socket,
            state,
            config,
        })
    }

    /// The directory holding the supervisor's socket (0700).
    pub fn socket_dir(&self) -> &Path {
        self.socket.parent().unwrap_or(Path::new("/"))
    }

    /// The socket of `session`'s worker.
    pub fn worker_socket(&self, session: &str) -> PathBuf {
        self.socket_dir()
            .join("workers")
            .join(format!("{session}.sock"))
    }

    /// The socket of `session`'s kernel.
    pub fn kernel_socket(&self, session: &str) -> PathBuf {
        self.socket_dir()
            .join("kernels")
            .join(format!("{session}.sock"))
    }

    /// Every socket path eukhe makes, named, the per-session ones for the
    /// longest session id.
    pub fn socket_paths(&self) -> [(&'static str, PathBuf); 3] {
        let longest = "f".repeat(SESSION_ID_LEN);
        [
            ("the daemon's socket", self.socket.clone()),
            ("a worker's socket", self.worker_socket(&longest)),
            ("a kernel's socket", self.kernel_socket(&longest)),
        ]
    }

    /// Whether every socket path fits in `sun_path`: the longest one and
    /// its length, or which one does not fit, in one line.
    pub fn sockets_fit(&self) -> Result<String, PathsError> {
        let paths = self.socket_paths();
        let len = |p: &PathBuf| p.as_os_str().len();
        if let Some((what, path)) = paths.iter().find(|(_, p)| len(p) > SOCKET_PATH_MAX) {
            return Err(PathsError::SocketTooDeep {
                dir: self.socket_dir().to_path_buf(),
                what,
                path: path.clone(),
                len: len(path),
            });
        }
        let longest = paths.iter().map(|(_, p)| len(p)).max().unwrap_or(0);
        Ok(format!(
            "every socket path fits (the longest, a session's, is {longest} of {SOCKET_PATH_MAX} bytes)"
        ))
    }

    /// The directory of `session`'s state.
    pub fn session_dir(&self, session: &str) -> PathBuf {
        self.state.join("sessions").join(session)
    }
}

/// The daemon holding a state directory's lock, as it wrote itself down
/// beside the lock: written by the supervisor (`supervisor::state_lock`),
/// read by it and by `eukhe doctor`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Holder {
    /// The socket it serves.
    pub socket: String,
    /// Its process id.
    pub pid: u32,
}

/// Where the lock's holder is written down in the state directory `state`.
pub fn holder_path(state: &Path) -> PathBuf {
    state.join("daemon.json")
}

/// The daemon that last took `state`'s lock, as it wrote itself down
/// (`daemon.json`; it may have ended since: the caller checks its pid).
pub fn recorded_holder(state: &Path) -> Option<Holder> {
    read_json(&holder_path(state)).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(socket: &str) -> Paths {
        Paths {
            socket: socket.into(),
            state: "/s".into(),
            config: "/c".into(),
        }
    }

    #[test]
    fn a_socket_directory_too_deep_for_the_worker_sockets_is_refused() {
        // The daemon's socket fits; `workers/<id>.sock` beside it does not.
        let dir = format!("/{}", "d".repeat(90));
        let deep = paths(&format!("{dir}/e.sock"));
        assert!(deep.socket.as_os_str().len() <= SOCKET_PATH_MAX);
        let err = deep.sockets_fit().unwrap_err().to_string();
        assert!(
            err.contains("a worker's socket") && err.contains(&dir),
            "{err}"
        );
        assert!(paths("/run/user/1000/eukhe/eukhe.sock")
            .sockets_fit()
            .is_ok());
    }
}
