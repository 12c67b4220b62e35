//! The supervisor: one per user. It owns the socket, launches one worker
//! per active session, watches each (a control connection that ends when
//! the worker does), restarts or gives up as the restart budget says,
//! adopts or replaces the workers it finds at start, revives sessions from
//! busy evidence, and routes session requests to the session's worker.

mod backend;
pub mod error;
mod events;
mod handover;
mod launch;
pub mod lifecycle;
mod manage;
mod quiesce;
mod routing;
pub mod session_core;
mod shutdown;
mod slots;
mod spare;
pub(crate) mod state_lock;
mod windows;

pub use error::SupervisorError;
use std::cell::RefCell;
use std::os::unix::fs::PermissionsExt;
use std::rc::Rc;

use tokio::net::{UnixListener, UnixStream};

use crate::config::Config;
use crate::host::{log, systemd, HostKind};
use crate::paths::Paths;
use crate::session::store::private_dir;

pub(crate) use slots::Supervisor;
pub use slots::{Slot, SlotState};

/// Run the supervisor in the foreground until it is shut down.
pub fn main() -> Result<(), SupervisorError> {
    let paths = Paths::from_env().map_err(SupervisorError::Paths)?;
    let host = HostKind::from_env()?;
    let activated = systemd::activated_listener()?;
    log::init(host, "daemon", None, Some(paths.state.join("daemon.log")));
    // A socket directory too deep for the per-session sockets would make
    // every session crash-loop: refused here, in one line.
    paths.sockets_fit().map_err(SupervisorError::Paths)?;
    // Before anything else touches the state directory: a second daemon
    // refuses here, its sessions untouched.
    let _state_lock = state_lock::take(&paths, activated.is_some())?;
    // The runtime speaks in lines; what fails inside is typed until here.
    crate::runtime::block_on_local("supervisor", async move {
        let config = Config::load(&paths.config).map_err(SupervisorError::Config)?;
        let socket_activated = activated.is_some();
        let listener = match (activated, host) {
            (Some(listener), _) => UnixListener::from_std(listener)
                .map_err(|e| SupervisorError::io("the activated socket", e))?,
            (None, HostKind::Process) => bind(&paths).await?,
            (None, HostKind::Systemd) => return Err(SupervisorError::NoActivatedSocket),
        };
        private_dir(&paths.state)?;
        let workers = crate::host::workers::chosen(host, &paths, &config).await?;
        let mut books = Supervisor::new(paths.clone(), config, workers);
        books.socket_activated = socket_activated;
        let supervisor = Rc::new(RefCell::new(books));
        // Removals cut short are finished first: nothing of a removed
        // session is adopted, resumed or revived.
        manage::finish_removals(&supervisor).await;
        launch::adopt_and_revive(&supervisor).await;
        tokio::task::spawn_local(manage::idle_stop_loop(supervisor.clone()));
        let spare = supervisor.clone();
        tokio::task::spawn_local(async move { spare::ensure(&spare).await });
        systemd::notify(&format!(
            "READY=1\nSTATUS={}",
            supervisor.borrow().status_line()
        ));
        tracing::info!(
            "serving {} on the {} backend (pid {}): {}",
            paths.socket.display(),
            host.name(),
            std::process::id(),
            supervisor.borrow().status_line()
        );
        // The socket file is removed when the shutdown is decided, before
        // the answer goes out: removing it later could delete the socket
        // of a daemon that started since.
        routing::serve(supervisor, listener).await
    })
}

/// Listen on the socket (directory 0700, socket 0600). A live daemon on it
/// is an error; a stale socket file is replaced.
async fn bind(paths: &Paths) -> Result<UnixListener, SupervisorError> {
    private_dir(paths.socket_dir())?;
    std::fs::set_permissions(paths.socket_dir(), std::fs::Permissions::from_mode(0o700)).map_err(
        |e| {
            SupervisorError::io(
                format!("cannot protect {}", paths.socket_dir().display()),
                e,
            )
        },
    )?;
    if paths.socket.exists() {
        if UnixStream::connect(&paths.socket).await.is_ok() {
            return Err(SupervisorError::Taken(format!(
                "a daemon already listens on {}",
                paths.socket.display()
            )));
        }
        let _ = std::fs::remove_file(&paths.socket);
    }
    let listener = UnixListener::bind(&paths.socket).map_err(|e| {
        SupervisorError::io(format!("cannot listen on {}", paths.socket.display()), e)
    })?;
    std::fs::set_permissions(&paths.socket, std::fs::Permissions::from_mode(0o600)).map_err(
        |e| SupervisorError::io(format!("cannot protect {}", paths.socket.display()), e),
    )?;
    Ok(listener)
}
