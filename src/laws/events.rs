//! The event stream's two bounds (a setting of the dashboard, not a law of
//! the specification): a subscriber's buffer holds at most
//! `SUBSCRIBER_BUFFER_EVENTS` events, and one that falls behind is told
//! once how many it missed; a session's latest output line goes out at
//! most once per `EVENT_OUTPUT_LINE_MS`. Pure: time arrives as
//! milliseconds.

use std::collections::VecDeque;

use crate::laws::timing::EVENT_OUTPUT_LINE_MS;

/// The most events the daemon holds for one subscriber that does not read.
pub const SUBSCRIBER_BUFFER_EVENTS: usize = 512;

/// What a subscriber's buffer hands out next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next<E> {
    /// An event, in the order it was offered.
    Event(E),
    /// This many events were left out here: the subscriber fell behind.
    Dropped(u64),
}

/// One subscriber's events not yet sent: at most `bound` events, plus one
/// "dropped" mark per stretch of events left out.
#[derive(Debug)]
pub struct SubscriberBuffer<E> {
    queue: VecDeque<Next<E>>,
    events: usize,
    bound: usize,
    dropped: u64,
}

impl<E> SubscriberBuffer<E> {
    /// An empty buffer that holds at most `bound` events.
    pub fn new(bound: usize) -> Self {
        SubscriberBuffer {
            queue: VecDeque::new(),
            events: 0,
            bound,
            dropped: 0,
        }
    }

    /// Offer an event: kept if there is room, else counted as dropped.
    /// The count goes in as one mark before the next event that is kept,
    /// so the subscriber sees where the gap is.
    pub fn offer(&mut self, event: E) {
        if self.events >= self.bound {
            self.dropped += 1;
            return;
        }
        if self.dropped > 0 {
            self.queue
                .push_back(Next::Dropped(std::mem::take(&mut self.dropped)));
        }
        self.queue.push_back(Next::Event(event));
        self.events += 1;
    }

    /// The next thing to send, if any (a gap at the end is a mark too).
    pub fn take(&mut self) -> Option<Next<E>> {
        match self.queue.pop_front() {
            Some(next) => {
                if matches!(next, Next::Event(_)) {
                    self.events -= 1;
                }
                Some(next)
            }
            None if self.dropped > 0 => Some(Next::Dropped(std::mem::take(&mut self.dropped))),
            None => None,
        }
    }

    /// Events held now (marks not counted).
    pub fn len(&self) -> usize {
        self.events
    }

    /// Whether nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.dropped == 0
    }
}

/// A session's latest output line, sent at most once per
/// `EVENT_OUTPUT_LINE_MS`: the newest line waits for its turn, older
/// waiting lines are replaced.
#[derive(Debug, Default)]
pub struct OutputLine {
    last_sent_ms: Option<u64>,
    waiting: Option<String>,
}

impl OutputLine {
    /// A new line at monotonic `now_ms`: the line to send now, if its turn
    /// has come; else it waits (`due`).
    pub fn seen(&mut self, line: String, now_ms: u64) -> Option<String> {
        self.waiting = Some(line);
        self.due(now_ms)
    }

    /// When the waiting line's turn comes (none: no line waits).
    pub fn due_at(&self) -> Option<u64> {
        self.waiting.as_ref()?;
        Some(match self.last_sent_ms {
            None => 0,
            Some(sent) => sent.saturating_add(EVENT_OUTPUT_LINE_MS),
        })
    }

    /// The waiting line, if its turn has come at `now_ms`.
    pub fn due(&mut self, now_ms: u64) -> Option<String> {
        let turn = match self.last_sent_ms {
            None => true,
            Some(sent) => now_ms.saturating_sub(sent) >= EVENT_OUTPUT_LINE_MS,
        };
        if !turn {
            return None;
        }
        let line = self.waiting.take()?;
        self.last_sent_ms = Some(now_ms);
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_counts_what_it_leaves_out_and_says_so_once() {
        let mut buffer = SubscriberBuffer::new(3);
        for n in 0..10 {
            buffer.offer(n);
        }
        assert_eq!(buffer.len(), 3);
        assert_eq!(buffer.take(), Some(Next::Event(0)));
        buffer.offer(10);
        assert_eq!(buffer.take(), Some(Next::Event(1)));
        assert_eq!(buffer.take(), Some(Next::Event(2)));
        assert_eq!(buffer.take(), Some(Next::Dropped(7)));
        assert_eq!(buffer.take(), Some(Next::Event(10)));
        assert_eq!(buffer.take(), None);
        assert!(buffer.is_empty());
    }

    #[test]
    fn a_gap_at_the_end_is_told_too() {
        let mut buffer = SubscriberBuffer::new(1);
        assert!(buffer.is_empty());
        buffer.offer('a');
        buffer.offer('b');
        buffer.offer('c');
        assert!(!buffer.is_empty());
        assert_eq!(buffer.take(), Some(Next::Event('a')));
        // Only the mark is left, and it still waits to be sent.
        assert!(!buffer.is_empty());
        assert_eq!(buffer.take(), Some(Next::Dropped(2)));
        assert_eq!(buffer.take(), None);
        assert!(buffer.is_empty());
    }

    #[test]
    fn the_buffer_never_holds_more_than_its_bound() {
        let mut buffer = SubscriberBuffer::new(SUBSCRIBER_BUFFER_EVENTS);
        for n in 0..100_000u32 {
            buffer.offer(n);
            assert!(buffer.len() <= SUBSCRIBER_BUFFER_EVENTS);
        }
        assert!(buffer.queue.len() <= SUBSCRIBER_BUFFER_EVENTS + 1);
    }

    #[test]
    fn output_lines_go_out_at_most_once_per_interval_newest_first() {
        let mut lines = OutputLine::default();
        assert_eq!(lines.seen("1".into(), 0), Some("1".into()));
        assert_eq!(lines.seen("2".into(), 10), None);
        assert_eq!(lines.seen("3".into(), 500), None);
        assert_eq!(lines.due(999), None);
        assert_eq!(lines.due(1_000), Some("3".into()));
        assert_eq!(lines.due(5_000), None);
        assert_eq!(lines.seen("4".into(), 5_000), Some("4".into()));
    }
}
