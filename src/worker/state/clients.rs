//! The worker's clients: the user bash clients it answers, the clients
//! waiting for a run, the transcript's subscribers, the supervisor's
//! connection, and the count of client connections open. Who hears what;
//! no decisions.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;

use crate::laws::events::OutputLine;
use crate::protocol::message::Response;
use crate::session::transcript::Entry;
use crate::worker::core::ClientId;
use crate::worker::outbox::{Outbox, Stored};

/// Everyone the worker tells something.
pub struct Clients {
    /// Clients waiting for user bash, by the core's numbers, with the
    /// bash's number.
    bash: HashMap<ClientId, (Outbox, u64)>,
    next_bash: ClientId,
    /// Attached clients: every stored entry.
    subscribers: Vec<UnboundedSender<Response>>,
    /// Clients waiting for a run, by its input number.
    waiters: HashMap<u64, Vec<Outbox>>,
    /// The supervisor's connection and its build id, while one supervises.
    supervisor: Option<(Outbox, String)>,
    /// Client connections open now (`ClientConnection`): an idle stop
    /// waits for them.
    open: Rc<Cell<u32>>,
    /// Wakes the task that tells the supervisor the client count changed.
    pub changed: Rc<Notify>,
    /// The latest output line, reported at a bounded rate.
    pub output_line: OutputLine,
    /// Clients waiting for keys to reach a terminal run.
    pub keys: crate::worker::terminal::KeyWaiters,
    /// The terminal runs that wait for input (`worker::waiting`).
    pub waiting: crate::worker::waiting::Waiting,
    /// How many times each user bash was rejoined by its remote client.
    rejoined: HashMap<u64, u64>,
}

impl Default for Clients {
    fn default() -> Clients {
        Clients {
            bash: HashMap::new(),
            next_bash: 1,
            subscribers: Vec::new(),
            waiters: HashMap::new(),
            supervisor: None,
            open: Rc::default(),
            changed: Rc::default(),
            output_line: OutputLine::default(),
            keys: Default::default(),
            waiting: Default::default(),
            rejoined: HashMap::new(),
        }
    }
}

impl Clients {
    /// Number a client that waits for user bash `number`.
    pub fn add_bash(&mut self, tx: Outbox, number: u64) -> ClientId {
        let id = self.next_bash;
        self.next_bash += 1;
        self.bash.insert(id, (tx, number));
        id
    }

    /// The client waiting for user bash as `client`, and its bash's number.
    pub fn bash_client(&self, client: ClientId) -> Option<&(Outbox, u64)> {
        self.bash.get(&client)
    }

    /// User bash `number`'s remote client follows it again: how many
    /// times it has been rejoined now.
    pub fn rejoin(&mut self, number: u64) -> u64 {
        let count = self.rejoined.entry(number).or_default();
        *count += 1;
        *count
    }

    /// How many times user bash `number` was rejoined.
    pub fn rejoins(&self, number: u64) -> u64 {
        self.rejoined.get(&number).copied().unwrap_or(0)
    }

    /// The client `client` has had its last answer.
    pub fn forget_bash(&mut self, client: ClientId) {
        self.bash.remove(&client);
    }

    pub fn subscribe(&mut self, tx: UnboundedSender<Response>) {
        self.subscribers.push(tx);
    }

    /// Show a stored entry to every attached client (those gone drop out).
    pub fn show(&mut self, entry: &Entry) {
        self.subscribers
            .retain(|s| s.send(Response::Entry(entry.clone())).is_ok());
    }

    pub fn wait_for(&mut self, input: u64, tx: Outbox) {
        self.waiters.entry(input).or_default().push(tx);
    }

    /// The clients waiting for run `input`.
    pub fn waiters_of(&self, input: u64) -> Vec<Outbox> {
        self.waiters.get(&input).cloned().unwrap_or_default()
    }

    /// Tell the clients waiting for `input` (output after the latest
    /// stored, `last_output`, in `transcript`).
    pub fn tell_waiters(
        &mut self,
        input: u64,
        response: Response,
        last_output: Option<Stored>,
        transcript: &Path,
    ) {
        if let Some(waiters) = self.waiters.get_mut(&input) {
            waiters.retain(|w| !w.is_closed());
            for w in waiters.iter() {
                w.send_output(response.clone(), input, last_output, transcript);
            }
        }
    }

    /// Send the clients waiting for `input` their last answer, after the
    /// output queued for them, and forget them.
    pub fn last_to_waiters(&mut self, input: u64, last: Response) {
        if let Some(waiters) = self.waiters.remove(&input) {
            for w in waiters {
                let _ = w.send_after_output(last.clone());
            }
        }
    }

    pub fn supervised_by(&mut self, tx: Outbox, build_id: String) {
        self.supervisor = Some((tx, build_id));
    }

    pub fn supervisor_lost(&mut self) {
        self.supervisor = None;
    }

    /// Tell the supervisor, if one supervises.
    pub fn to_supervisor(&self, response: Response) {
        if let Some((supervisor, _)) = &self.supervisor {
            let _ = supervisor.send(response);
        }
    }

    /// Whether a supervisor is connected.
    pub fn supervised(&self) -> bool {
        self.supervisor.is_some()
    }

    /// The build id of the supervisor supervising now, if one does.
    pub fn supervisor_build(&self) -> Option<&str> {
        self.supervisor.as_ref().map(|(_, build)| build.as_str())
    }

    /// How many client connections are open.
    pub fn open_count(&self) -> u32 {
        self.open.get()
    }
}

/// One client connection, counted while it is open (`Clients::open_count`).
/// A connection counts from the moment it is accepted, before its first
/// request is read, so a client the supervisor has handed over is counted
/// before any later quiesce is answered; the supervisor's own connections
/// stop counting once they say what they are.
pub struct ClientConnection {
    clients: Rc<Cell<u32>>,
    changed: Rc<Notify>,
}

impl ClientConnection {
    /// Count a connection just accepted.
    pub fn open(clients: &Clients) -> ClientConnection {
        clients.open.set(clients.open.get() + 1);
        clients.changed.notify_one();
        ClientConnection {
            clients: clients.open.clone(),
            changed: clients.changed.clone(),
        }
    }
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        self.clients.set(self.clients.get().saturating_sub(1));
        self.changed.notify_one();
    }
}
