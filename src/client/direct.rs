//! The direct route (`laws::direct`): a session client that reaches the
//! session's running worker on its own socket, without the supervisor's
//! hand-over. It says hello with `direct` and sends its request in the same
//! write; a worker that serves it answers with `direct`. Anything else (no
//! worker socket, a refused connect, a worker that leaves it to the
//! supervisor, another build or protocol, a session this client cannot
//! name alone, another machine) is `None`: the caller takes the
//! supervisor's route as before, which revives, waits and tells.

use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;

use super::connect::{our_build, our_hello, Client};
use super::remote::Target;
use super::route::current_target;
use crate::laws::direct::{law_allows, DirectAsk};
use crate::laws::replace::{start_kind, Build, ClientKind, ClientStart};
use crate::laws::timing::TM;
use crate::paths::Paths;
use crate::protocol::frame::encode;
use crate::protocol::hello::{Capability, Role};
use crate::protocol::message::{Request, Response, SessionRequest};
use crate::protocol::{read_frame, PROTOCOL_VERSION};
use crate::session::store::{normalize_name, read_json, valid_id, SessionMeta};

/// Beyond this many running workers a name is left to the supervisor,
/// which holds every name in memory: reading each one's metadata would
/// cost more than the route saves.
const NAME_SCAN_MAX: usize = 64;

/// The starts that try the direct route: one request naming a session,
/// from a background start (which never replaces a daemon).
fn takes_direct_route(start: ClientStart) -> bool {
    matches!(
        start,
        ClientStart::Bash | ClientStart::Send | ClientStart::Log
    )
}

/// The worker of `reference`'s session, serving `request` from this
/// client; `None`: go to the supervisor (nothing was asked of the worker,
/// or it refused and served nothing).
pub async fn open(reference: &str, start: ClientStart, request: &SessionRequest) -> Option<Client> {
    if !takes_direct_route(start) || current_target() != Target::Local {
        return None;
    }
    let paths = Paths::from_env().ok()?;
    let id = resolve_alone(&paths, reference)?;
    let stream = UnixStream::connect(paths.worker_socket(&id)).await.ok()?;
    let kind = start_kind(start);
    let role = match kind {
        ClientKind::Interactive => Role::Interactive,
        ClientKind::Background => Role::Background,
    };
    ask(stream, role, kind, id, request.clone()).await
}

/// Say hello and the request in one write, then read the worker's hello.
async fn ask(
    mut stream: UnixStream,
    role: Role,
    kind: ClientKind,
    session: String,
    request: SessionRequest,
) -> Option<Client> {
    let mut hello = our_hello(role);
    hello
        .capabilities
        .push(Capability::Direct.name().to_string());
    let mut frames = encode(&Request::Hello(hello)).ok()?;
    frames.extend(encode(&Request::Direct { session, request }).ok()?);
    stream.write_all(&frames).await.ok()?;
    // Until its hello comes the worker has served nothing: one that does
    // not answer in time is left, and the supervisor's route is taken.
    let wait = Duration::from_millis(TM.worker.worker_answer);
    let answer = tokio::time::timeout(wait, read_frame::<Response, _>(&mut stream)).await;
    let Ok(Ok(Response::Hello(worker))) = answer else {
        return None;
    };
    let ours = our_build();
    let theirs = Build {
        version: worker.version.clone(),
        build_id: worker.build_id.clone(),
    };
    let asked = DirectAsk {
        client: &ours,
        protocol: PROTOCOL_VERSION,
        kind,
    };
    let served = worker.has(Capability::Direct) && law_allows(&asked, &theirs, worker.protocol);
    served.then(|| Client::local(stream, worker))
}

/// The session id `reference` names, found without the supervisor: an id
/// whose session has its metadata, or the one name among the running
/// workers' sessions, matched as the supervisor matches it. Names are
/// unique among all sessions, so one running session of that name is the
/// only session of that name.
fn resolve_alone(paths: &Paths, reference: &str) -> Option<String> {
    let named_id = |id: &str| -> Option<SessionMeta> {
        read_json::<SessionMeta>(&paths.session_dir(id).join("meta.json"))
            .ok()
            .flatten()
            .filter(|meta| meta.id == id)
    };
    if valid_id(reference) && named_id(reference).is_some() {
        return Some(reference.to_string());
    }
    let workers = paths.worker_socket(reference);
    let running = running_ids(workers.parent()?)?;
    let wanted = normalize_name(reference);
    let mut named = running.iter().filter(|id| {
        named_id(id)
            .is_some_and(|meta| meta.name == reference || normalize_name(&meta.name) == wanted)
    });
    match (named.next(), named.next()) {
        (Some(id), None) => Some(id.clone()),
        _ => None,
    }
}

/// The session ids with a worker socket in `dir`; none past `NAME_SCAN_MAX`.
fn running_ids(dir: &Path) -> Option<Vec<String>> {
    let mut ids = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".sock")) else {
            continue;
        };
        if valid_id(id) {
            ids.push(id.to_string());
        }
        if ids.len() > NAME_SCAN_MAX {
            return None;
        }
    }
    Some(ids)
}
