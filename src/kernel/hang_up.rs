//! Hanging up a user bash whose client went away, as a command whose `ssh`
//! client left is hung up: its output pipes close (its next write gets
//! SIGPIPE, and nothing more of it is stored), then its process group
//! gets SIGHUP. Nothing follows: a command that ignores both goes on as
//! it would under `ssh`, and `eukhe cancel` still ends it.

use std::cell::RefCell;
use std::collections::HashMap;

use tokio::sync::watch;

/// The hang-up switch of each job whose output the kernel reads.
#[derive(Default)]
pub struct HangUps {
    switches: RefCell<HashMap<String, watch::Sender<bool>>>,
}

impl HangUps {
    /// A switch for `job`'s output readers: it turns on when the job is
    /// hung up.
    pub fn register(&self, job: &str) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        self.switches.borrow_mut().insert(job.to_string(), tx);
        rx
    }

    /// Close `job`'s output: its readers drop their ends of the pipes.
    pub fn close_output(&self, job: &str) {
        if let Some(switch) = self.switches.borrow_mut().remove(job) {
            let _ = switch.send(true);
        }
    }

    /// `job` is forgotten: its switch is no longer needed.
    pub fn forget(&self, job: &str) {
        self.switches.borrow_mut().remove(job);
    }
}

/// Wait until `switch` turns on (never, if its job is forgotten first).
pub async fn hung_up(mut switch: watch::Receiver<bool>) {
    if switch.wait_for(|on| *on).await.is_err() {
        std::future::pending::<()>().await;
    }
}
