//! Private sockets: a worker's and a kernel's listen where only their user
//! can reach them (0600 in a 0700 directory) and serve only peers of that
//! user (`SO_PEERCRED`).

use super::HostError;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::session::store::private_dir;

/// Listen on `path` (replacing a stale socket), 0600 in a 0700 directory;
/// non-blocking, ready for an async runtime.
pub fn listen_private(path: &Path) -> Result<UnixListener, HostError> {
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)
        .map_err(|e| HostError::io(format!("cannot listen on {}", path.display()), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| HostError::io(format!("cannot listen on {}", path.display()), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| HostError::io(format!("cannot protect {}", path.display()), e))?;
    Ok(listener)
}

/// Whether the peer of `stream` runs as this process's user.
pub fn from_own_user(stream: &tokio::net::UnixStream) -> bool {
    let own_uid = nix::unistd::getuid().as_raw();
    stream.peer_cred().map(|c| c.uid()).ok() == Some(own_uid)
}
