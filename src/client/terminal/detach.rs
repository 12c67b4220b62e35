//! The detach key, found in what a person types before the program sees it.
//!
//! A one-key detach key (the default `C-\`) detaches at once and never
//! reaches the program; `eukhe keys S C-\` sends that byte when a program
//! needs it. A pair ("C-a d", as screen's) is a prefix and a key: the
//! prefix is held until the next byte decides; the prefix pressed twice
//! sends it once (screen's `C-a a`, tmux's prefix twice), and the prefix
//! before any other key sends both. A key split across two reads still
//! detaches: the part seen is held, not sent.

pub use crate::config::detach_key::{DetachKey, DEFAULT_DETACH_KEY};

/// What one read of the person's keys gives.
#[derive(Debug, PartialEq, Eq)]
pub struct Scanned {
    /// The bytes for the program, in order.
    pub pass: Vec<u8>,
    /// The detach key was typed: the client leaves. The bytes typed after it
    /// in the same read are dropped, as typed-ahead keys of a closed window.
    pub detached: bool,
}

/// Finds the detach key in a stream of typed bytes.
#[derive(Debug)]
pub struct DetachScanner {
    /// The bytes that detach (empty: detaching is off).
    detach: Vec<u8>,
    /// The prefix twice, which sends it once (empty for a one-key key).
    doubled: Vec<u8>,
    /// The prefix, as the doubled key sends it.
    prefix: Vec<u8>,
    /// The bytes seen so far that may still become one of the two.
    held: Vec<u8>,
}

impl DetachScanner {
    /// A scanner for `key`.
    pub fn new(key: &DetachKey) -> DetachScanner {
        let detach = key.bytes();
        let (prefix, doubled) = match key {
            DetachKey::Keys { first, second } if !second.is_empty() => {
                (vec![*first], vec![*first, *first])
            }
            _ => (Vec::new(), Vec::new()),
        };
        DetachScanner {
            detach,
            doubled,
            prefix,
            held: Vec::new(),
        }
    }

    /// The next bytes typed: what the program gets, and whether to detach.
    pub fn feed(&mut self, typed: &[u8]) -> Scanned {
        let mut pass = Vec::with_capacity(typed.len());
        if self.detach.is_empty() {
            pass.extend_from_slice(typed);
            return Scanned {
                pass,
                detached: false,
            };
        }
        for &byte in typed {
            self.held.push(byte);
            loop {
                if self.held == self.detach {
                    self.held.clear();
                    return Scanned {
                        pass,
                        detached: true,
                    };
                }
                if !self.doubled.is_empty() && self.held == self.doubled {
                    pass.extend_from_slice(&self.prefix);
                    self.held.clear();
                    break;
                }
                if self.detach.starts_with(&self.held)
                    || (!self.doubled.is_empty() && self.doubled.starts_with(&self.held))
                {
                    break;
                }
                // No key starts here: its first byte is the program's, and
                // the rest may still start one.
                pass.push(self.held.remove(0));
                if self.held.is_empty() {
                    break;
                }
            }
        }
        Scanned {
            pass,
            detached: false,
        }
    }

    /// Bytes held as a possible start of the detach key (shown to the
    /// program if the person's input ends there).
    pub fn held(&self) -> &[u8] {
        &self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scanner(text: &str) -> DetachScanner {
        DetachScanner::new(&DetachKey::parse(text).unwrap())
    }

    fn fed(scanner: &mut DetachScanner, typed: &[u8]) -> (Vec<u8>, bool) {
        let Scanned { pass, detached } = scanner.feed(typed);
        (pass, detached)
    }

    #[test]
    fn the_default_key_detaches_at_once_and_the_program_never_sees_it() {
        let mut keys = DetachScanner::new(&DetachKey::default());
        assert_eq!(fed(&mut keys, b"vim x\r"), (b"vim x\r".to_vec(), false));
        assert_eq!(fed(&mut keys, b"ab\x1ccd"), (b"ab".to_vec(), true));
        assert!(keys.held().is_empty());
        assert_eq!(fed(&mut keys, b"\x1c"), (Vec::new(), true));
    }

    #[test]
    fn other_control_keys_pass_untouched() {
        let mut keys = DetachScanner::new(&DetachKey::default());
        let every_other: Vec<u8> = (0..=255u8).filter(|&b| b != 0x1c).collect();
        assert_eq!(fed(&mut keys, &every_other), (every_other.clone(), false));
    }

    #[test]
    fn a_pair_split_across_two_reads_still_detaches() {
        let mut keys = scanner("C-a d");
        assert_eq!(fed(&mut keys, b"x\x01"), (b"x".to_vec(), false));
        assert_eq!(keys.held(), b"\x01");
        assert_eq!(fed(&mut keys, b"d"), (Vec::new(), true));
    }

    #[test]
    fn the_prefix_twice_sends_it_once_and_before_another_key_sends_both() {
        let mut keys = scanner("C-a d");
        assert_eq!(fed(&mut keys, b"\x01\x01"), (b"\x01".to_vec(), false));
        assert_eq!(fed(&mut keys, b"\x01"), (Vec::new(), false));
        assert_eq!(fed(&mut keys, b"\x01"), (b"\x01".to_vec(), false));
        assert_eq!(fed(&mut keys, b"\x01e"), (b"\x01e".to_vec(), false));
        // A doubled prefix followed by the second key: the prefix, then a
        // plain `d`, no detach.
        assert_eq!(fed(&mut keys, b"\x01\x01d"), (b"\x01d".to_vec(), false));
        assert_eq!(fed(&mut keys, b"d\x01d tail"), (b"d".to_vec(), true));
    }

    #[test]
    fn a_pair_whose_second_key_is_a_control_key_is_found_too() {
        let mut keys = scanner("C-Space C-q");
        assert_eq!(fed(&mut keys, b"\x00x\x00"), (b"\x00x".to_vec(), false));
        assert_eq!(fed(&mut keys, b"\x11"), (Vec::new(), true));
    }

    /// The flag the lead adds: `--detach-key KEY`, read by `FromStr`.
    #[derive(clap::Parser, Debug)]
    struct Flags {
        #[arg(long, default_value = DEFAULT_DETACH_KEY)]
        detach_key: DetachKey,
    }

    #[test]
    fn the_flag_takes_a_key_and_a_wrong_one_says_what_it_takes() {
        use clap::Parser as _;
        let flags = Flags::try_parse_from(["eukhe"]).unwrap();
        assert_eq!(flags.detach_key, DetachKey::default());
        let flags = Flags::try_parse_from(["eukhe", "--detach-key", "C-a d"]).unwrap();
        assert_eq!(flags.detach_key.bytes(), [0x01, b'd']);
        let err = Flags::try_parse_from(["eukhe", "--detach-key", "Enter"]).unwrap_err();
        let said = err.to_string();
        assert!(said.contains("\"Enter\": expected a control key"), "{said}");
    }

    #[test]
    fn none_passes_everything() {
        let mut keys = scanner("none");
        let every: Vec<u8> = (0..=255u8).collect();
        assert_eq!(fed(&mut keys, &every), (every.clone(), false));
    }
}
