//! The direct route's worker side: a client that said hello with `direct`
//! and sent its request at once is served as a handed-over client, or left
//! to the supervisor, as `laws::direct` decides.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::{own_hello, serve_client, ClientLink, Signals};
use crate::build_id::{build_id, version};
use crate::laws::direct::{direct_verdict, DirectAsk, DirectVerdict, WorkerSees};
use crate::laws::replace::{Build, ClientKind};
use crate::laws::timing::TM;
use crate::protocol::hello::{Capability, Role};
use crate::protocol::message::{Request, Response};
use crate::protocol::{read_frame, write_frame, Hello, PROTOCOL_VERSION};
use crate::worker::state::{ClientConnection, Worker};

/// Serve the client whose `hello` asked for the direct route, or answer
/// its hello without `direct` and serve nothing. The answer is written
/// before the request is served: a client that never read it may go to
/// the supervisor, and its request was not taken here.
pub(super) async fn direct_client(
    worker: Rc<RefCell<Worker>>,
    (mut read, mut write): (OwnedReadHalf, OwnedWriteHalf),
    hello: Hello,
    signals: Signals,
    counted: ClientConnection,
) {
    // The request comes in the same write as the hello.
    let wait = Duration::from_millis(TM.worker.worker_answer);
    let first = match tokio::time::timeout(wait, read_frame::<Request, _>(&mut read)).await {
        Ok(Ok(Request::Direct { session, request })) => Some((session, request)),
        _ => None,
    };
    let verdict = match &first {
        Some((session, _)) => verdict(&worker.borrow(), &hello, session),
        None => None,
    };
    let serve = verdict == Some(DirectVerdict::Serve);
    if let Some(DirectVerdict::Elsewhere(why)) = verdict {
        tracing::debug!("a client asking for the direct route goes to the supervisor: {why:?}");
    }
    if write_frame(&mut write, &Response::Hello(own_hello(serve)))
        .await
        .is_err()
    {
        return;
    }
    let Some((_, request)) = first.filter(|_| serve) else {
        return;
    };
    let peer = read
        .as_ref()
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let link = ClientLink {
        read,
        write,
        peer,
        zero_runs: hello.has(Capability::ZeroRuns),
    };
    serve_client(worker, link, request, signals, Some(counted)).await;
}

/// `laws::direct`'s verdict on `hello` asking for `session`, from what
/// this worker sees now.
fn verdict(worker: &Worker, hello: &Hello, session: &str) -> Option<DirectVerdict> {
    let own = Build {
        version: version().to_string(),
        build_id: build_id().to_string(),
    };
    let client = Build {
        version: hello.version.clone(),
        build_id: hello.build_id.clone(),
    };
    let kind = match hello.role {
        Role::Interactive => ClientKind::Interactive,
        _ => ClientKind::Background,
    };
    let ask = DirectAsk {
        client: &client,
        protocol: hello.protocol,
        kind,
    };
    let sees = WorkerSees {
        own: &own,
        protocol: PROTOCOL_VERSION,
        supervisor_build_id: worker.clients.supervisor_build(),
        gate_open: worker.core.gate_open() && !worker.stopping,
        own_session: worker.meta.id == session,
    };
    Some(direct_verdict(&ask, &sees))
}
