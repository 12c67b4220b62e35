//! A typist: an attached client's own connection for one terminal job's
//! keys, so a keystroke goes from the client to the kernel that holds the
//! terminal and on to its program, past the worker (which the echo still
//! crosses). Its keys are written as a worker's are (`tty::Terminals`):
//! after any keys before them, counted as written for the waiting rule.
//!
//! Sizes follow whoever typed or resized last, as for the worker's
//! clients: a typist's keys are written after its terminal took the
//! typist's size, if another was taken since, and the worker's screen is
//! told the size taken (`FromKernel::Resized`).
//!
//! A typist that asks for the job's echo gets its output on the same
//! connection, as it is spooled (`echo`).

use std::rc::Rc;

use tokio::sync::mpsc;

use super::serve::{broadcast, send, terminal_request, Context, FrameReader};
use crate::protocol::frame::read_frame;
use crate::protocol::kernel::{FromKernel, ToKernel};
use crate::protocol::tty::WindowSize;

/// Serve a typist of `job` whose window is `size` until it leaves: keys
/// and sizes in the order they come; with `echo` (the connection's output
/// queue), the job's output too. A job without a terminal is said and
/// the connection ends.
pub(super) async fn serve(
    ctx: &Rc<Context>,
    read: &mut FrameReader,
    control: &mpsc::UnboundedSender<Vec<u8>>,
    (job, mut size, echo): (String, WindowSize, Option<mpsc::Sender<Vec<u8>>>),
) {
    let has_terminal = ctx.kernel.borrow().ttys.size(&job).is_some();
    let error = (!has_terminal).then(|| format!("{job} has no terminal"));
    let refused = error.is_some();
    send(
        control,
        &FromKernel::Keyed {
            job: job.clone(),
            error,
        },
    );
    if refused {
        return;
    }
    if let Some(echo) = echo {
        if let Some(j) = ctx.kernel.borrow_mut().jobs.get_mut(&job) {
            j.echoes.add(echo);
        }
    }
    loop {
        match read_frame::<ToKernel, _>(read).await {
            Ok(ToKernel::Keys { data, .. }) => {
                take_size(ctx, &job, size, control);
                let quiet = true;
                let job = job.clone();
                terminal_request(ctx, ToKernel::Keys { job, data, quiet }, control);
            }
            Ok(ToKernel::Resize { size: new, .. }) => {
                size = new;
                take_size(ctx, &job, size, control);
            }
            _ => return,
        }
    }
}

/// Give `job`'s terminal `size` unless it has it, where its output has
/// reached in the spool, and tell the workers' screens.
fn take_size(
    ctx: &Rc<Context>,
    job: &str,
    size: WindowSize,
    control: &mpsc::UnboundedSender<Vec<u8>>,
) {
    let at = {
        let kernel = ctx.kernel.borrow();
        if kernel.ttys.size(job) == Some(size) {
            return;
        }
        kernel.jobs.get(job).map_or(0, |j| j.spooled)
    };
    let job = job.to_string();
    let resize = ToKernel::Resize {
        job: job.clone(),
        size,
        at,
    };
    terminal_request(ctx, resize, control);
    let taken = ctx.kernel.borrow().ttys.size(&job) == Some(size);
    if taken {
        broadcast(ctx, &FromKernel::Resized { job, size, at });
    }
}
