//! `eukhe shutdown`: the socket closed first, then, by its mode, the
//! daemon alone, every worker and kernel with it, or only an idle daemon.

use super::backend;
use super::launch::Shared;
use super::quiesce;
use crate::host::systemd;
use crate::protocol::message::{Request, Response, ShutdownMode};

/// Stop accepting connections: the socket goes first, so no client
/// connects to a daemon that is going away.
fn stop_serving(supervisor: &Shared) {
    let mut s = supervisor.borrow_mut();
    s.shutting_down = true;
    systemd::notify("STOPPING=1");
    // An activated socket belongs to the service manager, which keeps
    // listening and starts the next daemon on the next connection.
    if !s.socket_activated {
        let _ = std::fs::remove_file(&s.paths.socket);
    }
}

pub(super) async fn shutdown(supervisor: &Shared, mode: ShutdownMode) -> Response {
    match mode {
        ShutdownMode::Normal => {
            stop_serving(supervisor);
            Response::Shutdown {
                stopped: true,
                message: "the daemon stopped; running workers keep their sessions".into(),
            }
        }
        ShutdownMode::Force => {
            stop_serving(supervisor);
            quiesce::stop_all(
                supervisor,
                &quiesce::running_ids(supervisor),
                Request::StopWithKernel,
            )
            .await;
            let ids: Vec<String> = supervisor.borrow().slots.keys().cloned().collect();
            for id in ids {
                backend::stop_lone_kernel(supervisor, &id).await;
            }
            Response::Shutdown {
                stopped: true,
                message: "the daemon, every worker and every kernel stopped".into(),
            }
        }
        ShutdownMode::IfIdle => quiesce::shutdown_if_idle(supervisor, stop_serving).await,
    }
}
