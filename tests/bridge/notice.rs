//! Bridge scenarios for bend/notice.bend: restore notices and what a view
//! shows (`restore_notice`, `View::attach`, `View::deliver`).
//!
//! A scenario is a session's event sequence: `restore` (kernel started over
//! a snapshot: the notice `restore_notice` gives is stored with the next id
//! and delivered live), `fresh` (kernel started fresh: nothing stored),
//! `entry` (an output stored with the next id and delivered live), `attach`
//! (the view rebuilt from all stored messages) and `redeliver k` (the k-th
//! stored message, if any, delivered live again). Ids start at 1. A verdict
//! is the view: `e<id>` for entries, `n<id>:<restore>` for notices, or
//! `empty`.
//!
//! The scenario term is `(form, words)`: the events packed three bits each
//! into u24 words (see bend/bridge/notice.bend). Form 0: the words are one
//! session, one step per event (the view after each). Form 1: each word is
//! a session of its own, one step per word (the view after the whole
//! sequence). The exhaustive domain (every sequence of length 1 to 5 over
//! the seven events, redeliver k for k in 0..3) uses form 1 with every
//! sequence and every prefix as its own session, so every (sequence, view)
//! pair is compared once; seeded random sequences of length 6 to 12 use
//! form 0.

use eukhe::laws::notice::{restore_notice, KernelStart, MessageKind, StoredMessage, View};

use super::harness::{self, list, Rng, Scenario};

#[derive(Clone, Copy, Debug)]
enum Event {
    Restore,
    Fresh,
    Entry,
    Attach,
    Redeliver(usize),
}

/// Redeliver k for k in 0..REDELIVER.
const REDELIVER: usize = 3;

const ALPHABET: [Event; 4 + REDELIVER] = [
    Event::Restore,
    Event::Fresh,
    Event::Entry,
    Event::Attach,
    Event::Redeliver(0),
    Event::Redeliver(1),
    Event::Redeliver(2),
];

fn code(event: Event) -> u32 {
    match event {
        Event::Restore => 1,
        Event::Fresh => 2,
        Event::Entry => 3,
        Event::Attach => 4,
        Event::Redeliver(k) => 5 + k as u32,
    }
}

fn event_text(event: Event) -> String {
    match event {
        Event::Restore => "restore".into(),
        Event::Fresh => "fresh".into(),
        Event::Entry => "entry".into(),
        Event::Attach => "attach".into(),
        Event::Redeliver(k) => format!("redeliver-{k}"),
    }
}

/// The events packed eight a word, three bits each, low end first.
fn words(events: &[Event]) -> String {
    list(events.chunks(8).map(|chunk| {
        chunk
            .iter()
            .enumerate()
            .map(|(i, &e)| code(e) << (3 * i))
            .sum::<u32>()
            .to_string()
    }))
}

/// The Rust side of a session: the stored transcript, the restores so far
/// and the attached client's view.
struct Session {
    stored: Vec<StoredMessage>,
    restores: u32,
    next_id: u64,
    view: View,
}

impl Session {
    fn new() -> Self {
        Session {
            stored: Vec::new(),
            restores: 0,
            next_id: 1,
            view: View::default(),
        }
    }

    fn store(&mut self, kind: MessageKind) {
        let message = StoredMessage {
            id: self.next_id,
            kind,
        };
        self.next_id += 1;
        self.stored.push(message);
        self.view.deliver(message);
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Restore | Event::Fresh => {
                let start = if matches!(event, Event::Restore) {
                    KernelStart::OverSnapshot
                } else {
                    KernelStart::Fresh
                };
                if let Some(kind) = restore_notice(start, self.restores) {
                    self.restores += 1;
                    self.store(kind);
                }
            }
            Event::Entry => self.store(MessageKind::Entry),
            Event::Attach => self.view = View::attach(&self.stored),
            Event::Redeliver(k) => {
                if let Some(&message) = self.stored.get(k) {
                    self.view.deliver(message);
                }
            }
        }
    }

    fn shown(&self) -> String {
        let shown = self.view.shown();
        if shown.is_empty() {
            return "empty".into();
        }
        shown
            .iter()
            .map(|m| match m.kind {
                MessageKind::Entry => format!("e{}", m.id),
                MessageKind::RestoreNotice { restore } => format!("n{}:{restore}", m.id),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Form 1: each sequence (at most eight events) a session of its own, one
/// step per sequence, the view after it.
fn last_views(sequences: &[Vec<Event>]) -> Scenario {
    let packed: Vec<String> = sequences
        .iter()
        .map(|events| {
            assert!(events.len() <= 8);
            words(events).trim_matches(['[', ']']).to_string()
        })
        .collect();
    let mut s = Scenario::new(format!("(1, {})", list(packed)));
    for events in sequences {
        let mut session = Session::new();
        for &e in events {
            session.apply(e);
        }
        let inputs: Vec<String> = events.iter().map(|&e| event_text(e)).collect();
        s.step(inputs.join(" "), session.shown());
    }
    s
}

/// Form 0: one step per event, the view after each.
fn each_view(events: &[Event]) -> Scenario {
    let mut session = Session::new();
    let mut s = Scenario::new(format!("(0, {})", words(events)));
    for &e in events {
        session.apply(e);
        s.step(event_text(e), session.shown());
    }
    s
}

/// Every sequence of length 1 to `max` over the alphabet.
fn all_sequences(max: usize) -> Vec<Vec<Event>> {
    let mut all = Vec::new();
    let mut layer: Vec<Vec<Event>> = vec![Vec::new()];
    for _ in 0..max {
        layer = layer
            .iter()
            .flat_map(|prefix| {
                ALPHABET.iter().map(move |&e| {
                    let mut next = prefix.clone();
                    next.push(e);
                    next
                })
            })
            .collect();
        all.extend(layer.iter().cloned());
    }
    all
}

/// Independent sessions per form-1 scenario. Bend reads a result back in
/// time that grows faster than a line's length: short lines are quickest.
const SESSIONS: usize = 4;

#[test]
fn notice_bridge() {
    let exhaustive = all_sequences(5);
    assert_eq!(exhaustive.len(), 7 + 49 + 343 + 2401 + 16807);
    let mut scenarios: Vec<Scenario> = exhaustive.chunks(SESSIONS).map(last_views).collect();
    // Seeded random sessions, lengths 6 to 12, events uniform over the
    // seven (model lines stay under 300 characters: at most 289 here).
    let mut rng = Rng::new(0x6e6f_7469_6365);
    for _ in 0..700 {
        let n = 6 + rng.below(7) as usize;
        let events: Vec<Event> = (0..n)
            .map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize])
            .collect();
        scenarios.push(each_view(&events));
    }
    harness::check("notice", &scenarios);
}
