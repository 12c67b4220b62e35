//! A terminal run's output as it reaches an attached client on two paths:
//! the worker's (the truth: stored, then sent) and the kernel's own echo
//! (sent as it is spooled, past the worker). Each piece says where it is
//! in the run's spool, so every byte is shown once and in order: a piece
//! from either path is shown when it starts where the screen has got to,
//! skipped when the screen has it, and the kernel's pieces that come
//! before the worker has caught up to them wait. The worker's path alone
//! is always enough: a kernel piece is only ever ahead of it.

use std::collections::VecDeque;

use bytes::Bytes;

/// The most bytes of the kernel's pieces held while they wait: past it
/// they are dropped, and the worker's path brings those bytes.
const HELD_BYTES: usize = 256 * 1024;

/// Where the screen has got to, and the kernel's pieces that wait.
#[derive(Debug, Default)]
pub struct Merge {
    /// The spool offset the screen has every byte up to (`None`: not
    /// known, so no kernel piece can be placed).
    shown: Option<u64>,
    /// Kernel pieces ahead of the screen, in spool order: from, end, bytes.
    held: VecDeque<(u64, u64, Bytes)>,
    held_bytes: usize,
}

impl Merge {
    /// A worker's redraw of the screen as it was at spool offset `at`:
    /// whether to paint it. A screen that has every byte up to `at`
    /// already shows that state (and maybe more), so painting it would
    /// only step back and write again what follows.
    pub fn redrawn(&mut self, at: Option<u64>) -> bool {
        if let (Some(at), Some(shown)) = (at, self.shown) {
            if at <= shown {
                return false;
            }
        }
        self.shown = at;
        true
    }

    /// The worker's piece of the record ending at `end` (`None`: it did not
    /// say): the bytes to show, if any.
    pub fn from_worker(&mut self, end: Option<u64>, data: Bytes) -> Vec<Bytes> {
        match (end, self.shown) {
            (Some(end), Some(shown)) if end <= shown => Vec::new(),
            (Some(end), _) => {
                self.shown = Some(end);
                let mut show = vec![data];
                show.extend(self.release());
                show
            }
            (None, _) => {
                self.shown = None;
                vec![data]
            }
        }
    }

    /// The kernel's piece: the records from spool offset `from` to `end`.
    pub fn from_kernel(&mut self, from: u64, end: u64, data: Bytes) -> Vec<Bytes> {
        match self.shown {
            Some(shown) if end <= shown || from < shown => Vec::new(),
            Some(shown) if from == shown => {
                self.shown = Some(end);
                let mut show = vec![data];
                show.extend(self.release());
                show
            }
            _ => {
                if self.held_bytes + data.len() <= HELD_BYTES {
                    self.held_bytes += data.len();
                    self.held.push_back((from, end, data));
                }
                Vec::new()
            }
        }
    }

    /// The held pieces the screen has reached: shown or, when it has them
    /// already, dropped.
    fn release(&mut self) -> Vec<Bytes> {
        let mut show = Vec::new();
        while let (Some(shown), Some((from, end, _))) = (self.shown, self.held.front()) {
            let (from, end) = (*from, *end);
            if from > shown {
                break;
            }
            let Some((_, _, data)) = self.held.pop_front() else {
                break;
            };
            self.held_bytes -= data.len();
            if from == shown {
                self.shown = Some(end);
                show.push(data);
            }
        }
        show
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn shown(pieces: Vec<Bytes>) -> String {
        pieces
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }

    /// Records as the spool holds them: a 5-byte header, then the bytes.
    fn at(from: u64, text: &str) -> (u64, u64) {
        (from, from + 5 + text.len() as u64)
    }

    #[test]
    fn the_kernel_first_then_the_worker_shows_each_byte_once() {
        let mut merge = Merge::default();
        merge.redrawn(Some(0));
        let (a0, a1) = at(0, "ab");
        let (b0, b1) = at(a1, "cd");
        assert_eq!(shown(merge.from_kernel(a0, a1, b("ab"))), "ab");
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "cd");
        assert_eq!(shown(merge.from_worker(Some(a1), b("ab"))), "");
        assert_eq!(shown(merge.from_worker(Some(b1), b("cd"))), "");
    }

    #[test]
    fn the_worker_first_then_the_kernel_shows_each_byte_once() {
        let mut merge = Merge::default();
        merge.redrawn(Some(0));
        let (a0, a1) = at(0, "ab");
        assert_eq!(shown(merge.from_worker(Some(a1), b("ab"))), "ab");
        assert_eq!(shown(merge.from_kernel(a0, a1, b("ab"))), "");
    }

    #[test]
    fn a_kernel_piece_ahead_of_the_screen_waits_for_the_worker() {
        let mut merge = Merge::default();
        merge.redrawn(Some(0));
        let (_, a1) = at(0, "ab");
        let (b0, b1) = at(a1, "cd");
        let (c0, c1) = at(b1, "ef");
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "");
        assert_eq!(shown(merge.from_kernel(c0, c1, b("ef"))), "");
        assert_eq!(shown(merge.from_worker(Some(a1), b("ab"))), "abcdef");
        assert_eq!(shown(merge.from_worker(Some(b1), b("cd"))), "");
        assert_eq!(shown(merge.from_worker(Some(c1), b("ef"))), "");
    }

    #[test]
    fn a_kernel_piece_of_several_records_the_worker_began_is_left_to_it() {
        let mut merge = Merge::default();
        merge.redrawn(Some(0));
        let (_, a1) = at(0, "ab");
        let (_, b1) = at(a1, "cd");
        assert_eq!(shown(merge.from_worker(Some(a1), b("ab"))), "ab");
        assert_eq!(shown(merge.from_kernel(0, b1, b("abcd"))), "");
        assert_eq!(shown(merge.from_worker(Some(b1), b("cd"))), "cd");
    }

    #[test]
    fn without_a_known_offset_only_the_worker_shows() {
        let mut merge = Merge::default();
        let (a0, a1) = at(0, "ab");
        assert_eq!(shown(merge.from_kernel(a0, a1, b("ab"))), "");
        assert_eq!(shown(merge.from_worker(None, b("xy"))), "xy");
        assert_eq!(shown(merge.from_worker(Some(a1), b("ab"))), "ab");
        let (b0, b1) = at(a1, "cd");
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "cd");
    }

    #[test]
    fn a_redraw_behind_the_screen_is_not_painted_and_repeats_nothing() {
        let mut merge = Merge::default();
        assert!(merge.redrawn(Some(0)));
        let (a0, a1) = at(0, "ab");
        let (b0, b1) = at(a1, "cd");
        let (c0, c1) = at(b1, "ef");
        assert_eq!(shown(merge.from_kernel(a0, a1, b("ab"))), "ab");
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "cd");
        // A new worker's screen was drawn up to "ab" only: the screen has
        // more, so it is not painted, and what the worker catches up on
        // is not written again.
        assert!(!merge.redrawn(Some(a1)));
        assert_eq!(shown(merge.from_worker(Some(b1), b("cd"))), "");
        assert_eq!(shown(merge.from_kernel(c0, c1, b("ef"))), "ef");
    }

    #[test]
    fn a_redraw_ahead_of_the_screen_is_painted_and_goes_on_from_there() {
        let mut merge = Merge::default();
        assert!(merge.redrawn(Some(0)));
        let (_, a1) = at(0, "ab");
        let (b0, b1) = at(a1, "cd");
        let (c0, c1) = at(b1, "ef");
        assert!(merge.redrawn(Some(b1)));
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "");
        assert_eq!(shown(merge.from_kernel(c0, c1, b("ef"))), "ef");
    }

    #[test]
    fn a_redraw_without_an_offset_is_always_painted() {
        let mut merge = Merge::default();
        assert!(merge.redrawn(Some(0)));
        let (a0, a1) = at(0, "ab");
        assert_eq!(shown(merge.from_kernel(a0, a1, b("ab"))), "ab");
        assert!(merge.redrawn(None));
        let (b0, b1) = at(a1, "cd");
        assert_eq!(shown(merge.from_kernel(b0, b1, b("cd"))), "");
    }

    #[test]
    fn held_pieces_are_bounded() {
        let mut merge = Merge::default();
        let big = Bytes::from(vec![b'x'; HELD_BYTES]);
        merge.from_kernel(10, 20, big.clone());
        merge.from_kernel(20, 30, big);
        assert_eq!(merge.held.len(), 1);
    }
}
