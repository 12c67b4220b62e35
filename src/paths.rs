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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paths {
    pub socket: PathBuf,
    pub state: PathBuf,
    pub config: PathBuf,
}

impl Paths {
    /// The paths for this process's environment.
    pub fn from_env() -> Result<Paths, String> {
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
                // SAFETY: getuid(2) cannot fail and touches no memory.
                None => PathBuf::from(format!("/tmp/eukhe-{}", unsafe { libc::getuid() }))
                    .join("eukhe.sock"),
            },
        };
        let state = match (var("EUKHE_STATE_DIR"), var("XDG_STATE_HOME"), &home) {
            (Some(state), _, _) => state,
            (None, Some(xdg), _) => xdg.join("eukhe"),
            (None, None, Some(home)) => home.join(".local/state/eukhe"),
            (None, None, None) => {
                return Err("no state directory: set HOME or EUKHE_STATE_DIR".into())
            }
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

    /// The directory of `session`'s state.
    pub fn session_dir(&self, session: &str) -> PathBuf {
        self.state.join("sessions").join(session)
    }
}
