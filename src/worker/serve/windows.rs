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
    let SessionRequest::Window {
        input,
        stream,
        window,
    } = request
    else {
        return;
    };
    let ask = WindowAsk {
        input,
        stream,
        window,
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
        let stream = ask.stream;
        let answered =
            tokio::task::spawn_blocking(move || windows::answer(&dir, &transcript, &ask)).await;
        let responses = match answered {
            Ok(Ok(answer)) => windows::responses(answer, stream),
            Ok(Err(e)) => vec![Response::Error {
                message: e.to_string(),
            }],
            Err(e) => vec![Response::Error {
                message: format!("the output window failed: {e}"),
            }],
        };
        for response in responses {
            if tx.send(response).is_err() {
                return;
            }
        }
    });
}
