//! The daemon's event stream: every subscriber (`eukhe events`, `eukhe
//! top`) has a bounded buffer of its own (`laws::events`), so one that
//! stops reading costs the daemon at most `SUBSCRIBER_BUFFER_EVENTS`
//! events and is told once how many it missed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;

use super::launch::Shared;
use crate::clock::wall_ms;
use crate::laws::events::{Next, SubscriberBuffer, SUBSCRIBER_BUFFER_EVENTS};
use crate::laws::timing::EVENTS_FLUSH_MS;
use crate::protocol::event::{Event, EventKind};
use crate::protocol::message::Response;
use crate::protocol::write_frame;

/// One subscriber: its buffer, what wakes its writer, and which session
/// it follows (none: all).
struct Subscriber {
    buffer: RefCell<SubscriberBuffer<Event>>,
    wake: tokio::sync::Notify,
    session: Option<String>,
    /// The hub's: told when this buffer empties or the subscriber ends.
    drained: Rc<tokio::sync::Notify>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // Its weak entry no longer upgrades: nothing is left to send.
        self.drained.notify_waiters();
    }
}

/// The subscribers, and what the stream last said of each session's state
/// (a state event goes out only when it changes).
#[derive(Default)]
pub struct EventHub {
    subscribers: RefCell<Vec<Weak<Subscriber>>>,
    states: RefCell<HashMap<String, String>>,
    /// Woken when a subscriber's buffer is emptied or it hangs up.
    drained: Rc<tokio::sync::Notify>,
}

impl EventHub {
    /// Offer `event` to every subscriber that follows its session.
    pub fn publish(&self, event: Event) {
        self.subscribers.borrow_mut().retain(|weak| {
            let Some(subscriber) = weak.upgrade() else {
                return false;
            };
            let follows = match (&subscriber.session, &event.id) {
                (Some(wanted), Some(id)) => wanted == id,
                _ => true,
            };
            if follows {
                subscriber.buffer.borrow_mut().offer(event.clone());
                subscriber.wake.notify_one();
            }
            true
        });
    }

    /// An event of session `id`, named `name`, now.
    pub fn session(&self, id: &str, name: &str, event: EventKind) {
        self.publish(Event::session(wall_ms(), id, name, event));
    }

    /// An event of session `id` a worker reported, with its cursor (the
    /// seq of the transcript entry it stands for), now.
    pub fn stored(&self, id: &str, name: &str, event: EventKind, seq: Option<u64>) {
        self.publish(Event::session(wall_ms(), id, name, event).at_seq(seq));
    }

    /// Session `id` shows `state` now: one event if that is news.
    pub fn state(&self, id: &str, name: &str, state: &str) {
        let news = self
            .states
            .borrow_mut()
            .insert(id.to_string(), state.to_string())
            != Some(state.to_string());
        if news {
            self.session(
                id,
                name,
                EventKind::State {
                    state: state.to_string(),
                },
            );
        }
    }

    /// Forget a removed session's last state.
    pub fn forget(&self, id: &str) {
        self.states.borrow_mut().remove(id);
    }

    fn subscribe(&self, session: Option<String>) -> Rc<Subscriber> {
        let subscriber = Rc::new(Subscriber {
            buffer: RefCell::new(SubscriberBuffer::new(SUBSCRIBER_BUFFER_EVENTS)),
            wake: tokio::sync::Notify::new(),
            session,
            drained: self.drained.clone(),
        });
        self.subscribers
            .borrow_mut()
            .push(Rc::downgrade(&subscriber));
        subscriber
    }

    fn all_sent(&self) -> bool {
        self.subscribers
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .all(|s| s.buffer.borrow().is_empty())
    }
}

/// Serve one subscriber on `stream` until it hangs up: `Ok`, then its
/// events as they come (`reference`: only that session's, and the
/// daemon's own).
pub async fn serve(supervisor: &Shared, mut stream: UnixStream, reference: Option<String>) {
    let session = match reference {
        Some(reference) => {
            let resolved = supervisor.borrow().resolve(&reference);
            match resolved {
                Ok(id) => Some(id),
                Err(message) => {
                    let message = message.to_string();
                    let _ = write_frame(&mut stream, &Response::Error { message }).await;
                    return;
                }
            }
        }
        None => None,
    };
    let subscriber = supervisor.borrow().events.subscribe(session);
    if write_frame(&mut stream, &Response::Ok).await.is_err() {
        return;
    }
    let (mut read, mut write) = stream.into_split();
    // The subscriber sends nothing more: a read ending is its hang-up.
    let mut hung_up = Box::pin(async move {
        let mut byte = [0u8; 1];
        let _ = read.read(&mut byte).await;
    });
    loop {
        let next = subscriber.buffer.borrow_mut().take();
        if subscriber.buffer.borrow().is_empty() {
            subscriber.drained.notify_waiters();
        }
        let event = match next {
            Some(Next::Event(event)) => event,
            Some(Next::Dropped(count)) => Event::daemon(wall_ms(), EventKind::Dropped { count }),
            None => {
                tokio::select! {
                    _ = subscriber.wake.notified() => continue,
                    _ = &mut hung_up => return,
                }
            }
        };
        // A subscriber that stops reading blocks only this write; the
        // buffer behind it stays bounded.
        let frame = Response::Event(event);
        tokio::select! {
            written = write_frame(&mut write, &frame) => {
                if written.is_err() {
                    return;
                }
            }
            _ = &mut hung_up => return,
        }
    }
}

/// The daemon stops: tell every subscriber, and give them
/// `EVENTS_FLUSH_MS` to read it.
pub async fn daemon_stopping(supervisor: &Shared, message: &str) {
    supervisor.borrow().events.publish(Event::daemon(
        wall_ms(),
        EventKind::DaemonStopping {
            message: message.to_string(),
        },
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(EVENTS_FLUSH_MS);
    let drained = supervisor.borrow().events.drained.clone();
    loop {
        // Registered before the buffers are read, so no drain slips between.
        let notified = drained.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if supervisor.borrow().events.all_sent() {
            return;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return;
        }
    }
}

/// The worker of `id` reported `after` background jobs, `before` earlier.
pub fn jobs_changed(hub: &EventHub, id: &str, name: &str, before: u32, after: u32) {
    if after > before {
        hub.session(id, name, EventKind::JobsStarted { count: after });
    } else if after < before {
        hub.session(id, name, EventKind::JobsEnded { count: after });
    }
}

/// Session `id` is brought back at the daemon's start, for `why`.
pub fn revived(supervisor: &Shared, id: &str, why: &str) {
    let s = supervisor.borrow();
    if let Some(slot) = s.slots.get(id) {
        let why = why.to_string();
        s.events
            .session(id, &slot.meta.name, EventKind::Revived { why });
    }
}
