//! Terminal runs on the worker's side: keys and window sizes for a
//! terminal run (a run or user bash started with a terminal, which the
//! kernel holds) go to the kernel, and a client asking for keys hears once
//! they are written. The kernel knows which jobs have a terminal; the
//! worker only names the job.

use std::collections::{HashMap, VecDeque};

use crate::protocol::kernel::ToKernel;
use crate::protocol::message::{Response, SessionRequest};
use crate::protocol::tty::{TerminalInput, WindowSize};
use crate::worker::core::RunCore;
use crate::worker::outbox::Outbox;
use crate::worker::state::Worker;

/// Clients waiting for their keys to be written, per job, in the order
/// their keys went to the kernel (it answers each job's keys in order;
/// keys a run's own connection sends are quiet: nobody waits for them,
/// and the kernel answers none).
#[derive(Default)]
pub struct KeyWaiters {
    by_job: HashMap<String, VecDeque<Outbox>>,
}

impl KeyWaiters {
    fn wait(&mut self, job: &str, client: Outbox) {
        self.by_job
            .entry(job.to_string())
            .or_default()
            .push_back(client);
    }

    /// The kernel link is gone: no answer comes for keys sent on it.
    pub fn link_lost(&mut self) {
        for (_, waiting) in self.by_job.drain() {
            for client in waiting {
                let message = "the session's kernel went away before the keys were written: \
                               see `eukhe log` and send them again if the run still waits"
                    .to_string();
                let _ = client.send(Response::Error { message });
            }
        }
    }

    /// The kernel wrote `job`'s next keys (or could not, `error`).
    pub fn keyed(&mut self, job: &str, error: Option<String>) {
        let Some(waiting) = self.by_job.get_mut(job) else {
            return;
        };
        if let Some(client) = waiting.pop_front() {
            let _ = client.send(match error {
                None => Response::Ok,
                Some(message) => Response::Error { message },
            });
        }
        if waiting.is_empty() {
            self.by_job.remove(job);
        }
    }
}

/// The job of running input `input`, or (none named) the running run, else
/// the latest running user bash; or why there is none, one line saying
/// what to do.
pub fn job_of(core: &RunCore, input: Option<u64>) -> Result<String, String> {
    let run = core.current_run();
    let bash = core.running_bash_jobs();
    match input {
        Some(input) if run == Some(input) => Ok(format!("r{input}")),
        Some(input) => bash
            .into_iter()
            .find(|(number, _)| *number == input)
            .map(|(_, job)| job)
            .ok_or_else(|| {
                format!(
                    "input {input} is not running: keys go to a running terminal run \
                     (see `eukhe queue`)"
                )
            }),
        None => match (run, bash.last()) {
            (Some(run), _) => Ok(format!("r{run}")),
            (None, Some((_, job))) => Ok(job.clone()),
            (None, None) => Err(
                "nothing runs in this session to take keys: start a terminal \
                                 run with `eukhe send --tty` or `eukhe bash --tty`"
                    .to_string(),
            ),
        },
    }
}

/// `keys`: write `data` to the terminal of `input` (or of the current
/// terminal run); the answer comes once the kernel has written them.
pub fn keys(worker: &mut Worker, input: Option<u64>, data: Vec<u8>, client: &Outbox) {
    let job = match job_of(&worker.core, input) {
        Ok(job) => job,
        Err(message) => {
            let _ = client.send(Response::Error { message });
            return;
        }
    };
    if worker.kernel.is_none() {
        let message = "the session's kernel is not connected yet: send the keys again in a moment"
            .to_string();
        let _ = client.send(Response::Error { message });
        return;
    }
    worker.clients.keys.wait(&job, client.clone());
    let quiet = false;
    worker.send_kernel(ToKernel::Keys { job, data, quiet });
}

/// `TypeInto`: whether input `input` runs, so the connection's keys have
/// a terminal to go to. `Typist`: where its keys go straight to the
/// kernel, if it runs.
pub fn typing(worker: &Worker, request: SessionRequest, client: &Outbox) {
    let (SessionRequest::TypeInto { input } | SessionRequest::Typist { input }) = request else {
        return;
    };
    let _ = client.send(match job_of(&worker.core, Some(input)) {
        Ok(job) if matches!(request, SessionRequest::Typist { .. }) => Response::Typist {
            session: worker.meta.id.clone(),
            job,
        },
        Ok(_) => Response::Ok,
        Err(message) => Response::Error { message },
    });
}

/// The terminal run a client's connection asked for (a `Bash` or a `Send
/// --wait` with a terminal, or `TypeInto`), which its `TerminalInput`
/// frames are for.
#[derive(Default)]
pub struct TerminalOfConnection {
    input: Option<u64>,
    /// The size this connection's client last gave its terminal run.
    size: Option<WindowSize>,
}

impl TerminalOfConnection {
    /// Before `request` is served: the number its run takes, if it asks
    /// for a terminal run this connection follows (a queued input takes
    /// the next number; a user bash's number is the one it answers).
    pub fn before(&self, worker: &Worker, request: &SessionRequest) -> Option<u64> {
        match request {
            SessionRequest::Send {
                tty: Some(_),
                wait: true,
                ..
            }
            | SessionRequest::Bash { tty: Some(_), .. } => Some(worker.core.next_input()),
            SessionRequest::TypeInto { input } => Some(*input),
            _ => None,
        }
    }

    /// After it: `before`'s answer, and the user bash it started.
    pub fn after(&mut self, before: Option<u64>, bash: Option<u64>) {
        if before.is_some() {
            self.input = bash.or(before);
        }
    }

    /// Keys or a size from the client, for its terminal run while it runs
    /// (otherwise dropped: nobody waits for an answer). Several clients
    /// may type into one run (attached terminals): the terminal takes the
    /// size of the client that typed or resized last, as tmux's
    /// `window-size latest`, so the program fits the window of whoever
    /// uses it now.
    pub fn input(&mut self, worker: &mut Worker, input: TerminalInput) {
        let Some(number) = self.input else {
            return;
        };
        let Ok(job) = job_of(&worker.core, Some(number)) else {
            return;
        };
        match input {
            TerminalInput::Keys { data } => {
                let size = self
                    .size
                    .filter(|size| worker.screens.size(number) != Some(*size));
                if let Some(size) = size {
                    resize(worker, job.clone(), size);
                }
                // Nobody waits to hear they are written: the kernel
                // answers nothing, and the worker is not woken for it.
                let quiet = true;
                worker.send_kernel(ToKernel::Keys { job, data, quiet });
            }
            TerminalInput::Resize { size } => {
                self.size = Some(size);
                resize(worker, job, size);
            }
        }
    }
}

fn resize(worker: &mut Worker, job: String, size: WindowSize) {
    // The screen takes the size after the output stored so far, as a
    // rebuilt one does (`Screens::rebuild`).
    let at = worker.core.stored_spool_offset(&job);
    let message = ToKernel::Resize { job, size, at };
    worker.screens_see_kernel(&message);
    worker.send_kernel(message);
}
