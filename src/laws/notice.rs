//! Restore notices: a kernel restarted over a namespace snapshot tells the
//! session so exactly once, and a client sees each notice exactly once.
//!
//! Model: `bend/notice.bend`. Laws: `notice_shown_once`, `notice_per_restore`.
//!
//! - [`restore_notice`]: a kernel started over a snapshot stores one restore
//!   notice (numbered by restore); a fresh kernel stores none.
//! - [`View::attach`]: each attach (reconnect, worker restart) rebuilds the
//!   view from all stored messages, in store order.
//! - [`View::deliver`]: a message delivered live is shown unless the view
//!   already shows that message (same id): a view shows each notice once,
//!   and after an attach there is one notice per restore.

use serde::{Deserialize, Serialize};

/// What a stored transcript message is, as far as notices are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MessageKind {
    /// Input, output or any other transcript entry.
    Entry,
    /// The kernel was restored from a snapshot; `restore` counts from 1.
    RestoreNotice {
        /// The restore's number.
        restore: u32,
    },
}

/// A message as stored in the session's transcript.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredMessage {
    /// Unique within the session, increasing in store order.
    pub id: u64,
    /// Whether it is a restore notice.
    pub kind: MessageKind,
}

/// How a kernel was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelStart {
    /// A new, empty namespace.
    Fresh,
    /// Over the session's namespace snapshot.
    OverSnapshot,
}

/// The notice to store for a kernel start, given how many restores the
/// session already has.
pub fn restore_notice(start: KernelStart, restores_so_far: u32) -> Option<MessageKind> {
    match start {
        KernelStart::Fresh => None,
        KernelStart::OverSnapshot => Some(MessageKind::RestoreNotice {
            restore: restores_so_far.saturating_add(1),
        }),
    }
}

/// The notice to store for the restore a kernel offers in its hello
/// (`offered`: the id it gives the restore; none from a kernel that offers
/// its restore only once), given the ids of the restore notices stored
/// (`held`) and how many there are. A kernel offers its restore to every
/// worker until it ends, so a worker that dies before storing the notice
/// loses nothing, and the stored id keeps the next one from storing it
/// again.
pub fn offered_restore_notice(
    offered: Option<u64>,
    held: &[u64],
    restores_so_far: u32,
) -> Option<MessageKind> {
    match offered {
        Some(id) if held.contains(&id) => None,
        _ => restore_notice(KernelStart::OverSnapshot, restores_so_far),
    }
}

/// What one client shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    shown: Vec<StoredMessage>,
    /// The ids in `shown`, so a long transcript's replay stays linear.
    ids: std::collections::HashSet<u64>,
}

impl View {
    /// An attach: the view rebuilt from every stored message.
    pub fn attach(stored: &[StoredMessage]) -> View {
        let mut view = View::default();
        for message in stored {
            view.deliver(*message);
        }
        view
    }

    /// A message delivered live; returns whether it is newly shown.
    pub fn deliver(&mut self, message: StoredMessage) -> bool {
        let new = self.ids.insert(message.id);
        if new {
            self.shown.push(message);
        }
        new
    }

    /// The messages shown, in order.
    pub fn shown(&self) -> &[StoredMessage] {
        &self.shown
    }

    /// How many restore notices the view shows.
    pub fn notices(&self) -> usize {
        self.shown
            .iter()
            .filter(|m| matches!(m.kind, MessageKind::RestoreNotice { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_start_over_a_snapshot_stores_a_notice() {
        assert_eq!(restore_notice(KernelStart::Fresh, 3), None);
        assert_eq!(
            restore_notice(KernelStart::OverSnapshot, 3),
            Some(MessageKind::RestoreNotice { restore: 4 })
        );
    }

    #[test]
    fn a_notice_delivered_live_and_stored_is_shown_once() {
        let notice = StoredMessage {
            id: 2,
            kind: MessageKind::RestoreNotice { restore: 1 },
        };
        let stored = [
            StoredMessage {
                id: 1,
                kind: MessageKind::Entry,
            },
            notice,
        ];
        let mut view = View::attach(&stored);
        assert!(!view.deliver(notice), "shown again");
        assert_eq!(view.notices(), 1);
        assert!(view.deliver(StoredMessage {
            id: 3,
            kind: MessageKind::Entry
        }));
        assert_eq!(view.shown().len(), 3);
        let again = View::attach(&stored);
        assert_eq!(again.shown(), &view.shown()[..2]);
    }

    #[test]
    fn notices_counts_every_restore_notice_shown() {
        assert_eq!(View::default().notices(), 0);
        let stored: Vec<StoredMessage> = (1..=3)
            .map(|id| StoredMessage {
                id,
                kind: MessageKind::RestoreNotice { restore: id as u32 },
            })
            .chain([StoredMessage {
                id: 4,
                kind: MessageKind::Entry,
            }])
            .collect();
        assert_eq!(View::attach(&stored).notices(), 3);
    }

    #[test]
    fn notice_wire_round_trips_and_rejects_unknown_kinds() {
        let message = StoredMessage {
            id: 9,
            kind: MessageKind::RestoreNotice { restore: 2 },
        };
        let json = serde_json::to_string(&message).unwrap();
        assert_eq!(
            serde_json::from_str::<StoredMessage>(&json).unwrap(),
            message
        );
        assert!(
            serde_json::from_str::<StoredMessage>(r#"{"id":1,"kind":{"kind":"gossip"}}"#).is_err()
        );
        assert!(
            serde_json::from_str::<StoredMessage>(r#"{"id":-1,"kind":{"kind":"entry"}}"#).is_err()
        );
    }

    #[test]
    fn an_offered_restore_is_stored_once_by_its_id() {
        let first = Some(MessageKind::RestoreNotice { restore: 1 });
        assert_eq!(offered_restore_notice(Some(7), &[], 0), first);
        // The worker that stored it died; the kernel offers it again.
        assert_eq!(offered_restore_notice(Some(7), &[7], 1), None);
        // A later kernel's restore is a new one.
        assert_eq!(
            offered_restore_notice(Some(9), &[7], 1),
            Some(MessageKind::RestoreNotice { restore: 2 })
        );
        // A kernel without ids offers its restore once: it is stored.
        assert_eq!(
            offered_restore_notice(None, &[7], 1),
            Some(MessageKind::RestoreNotice { restore: 2 })
        );
    }
}
