//! An output window of a resting session, read from disk as its log is:
//! no worker is started just to read it.

use tokio::net::UnixStream;

use super::launch::Shared;
use super::routing::error;
use crate::protocol::message::SessionRequest;
use crate::protocol::write_frame;
use crate::session::windows::{self, WindowAsk};

/// Answer `request` (a `Window`) for the resting session `id`.
pub(super) async fn serve_resting_window(
    supervisor: &Shared,
    id: &str,
    client: &mut UnixStream,
    request: SessionRequest,
) {
    let SessionRequest::Window {
        input,
        stream,
        window,
    } = request
    else {
        return;
    };
    let files = supervisor.borrow().files(id);
    let ask = WindowAsk {
        input,
        stream,
        window,
    };
    let answered =
        tokio::task::spawn_blocking(move || windows::answer(&files.dir, &files.transcript(), &ask))
            .await;
    let responses = match answered {
        Ok(Ok(answer)) => windows::responses(answer, stream),
        Ok(Err(e)) => vec![error(e.to_string())],
        Err(e) => vec![error(format!("the output window failed: {e}"))],
    };
    for response in responses {
        if write_frame(client, &response).await.is_err() {
            return;
        }
    }
}
