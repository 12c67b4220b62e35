//! `log --raw N --head/--tail/--bytes/--grep`: a window of one run's
//! output, read off the worker's thread (`session::windows`).

use std::cell::RefCell;
use std::rc::Rc;

use crate::protocol::message::{Response, SessionRequest};
use crate::session::log_query;
use crate::session::windows::{self, WindowAsk};
use crate::worker::outbox::Outbox;
use crate::worker::state::Worker;

/// Answer `request` (a `Window`) on `tx`.
pub(super) fn send_window(worker: &Rc<RefCell<Worker>>, request: SessionRequest, tx: &Outbox) {
    let Some(ask) = WindowAsk::of(request) else {
        return;
    };
    let (next_input, dir, transcript) = {
        let w = worker.borrow();
        (
            w.core.next_input(),
            w.files.dir.clone(),
            w.files.transcript(),
        )
    };
    if ask.input == 0 || ask.input >= next_input {
        let _ = tx.send(Response::Error {
            message: log_query::no_input(ask.input),
        });
        return;
    }
    let tx = tx.clone();
    tokio::task::spawn_local(async move {
        let answered =
            tokio::task::spawn_blocking(move || windows::answer_frames(&dir, &transcript, &ask))
                .await;
        for response in answered.unwrap_or_else(|e| vec![windows::failed(e)]) {
            if tx.send(response).is_err() {
                return;
            }
        }
    });
}
