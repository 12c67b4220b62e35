//! An output window of a resting session, read from disk as its log is:
//! no worker is started just to read it.

use tokio::net::UnixStream;

use super::launch::Shared;
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
    let Some(ask) = WindowAsk::of(request) else {
        return;
    };
    let files = supervisor.borrow().files(id);
    let answered = tokio::task::spawn_blocking(move || {
        windows::answer_frames(&files.dir, &files.transcript(), &ask)
    })
    .await;
    for response in answered.unwrap_or_else(|e| vec![windows::failed(e)]) {
        if write_frame(client, &response).await.is_err() {
            return;
        }
    }
}
