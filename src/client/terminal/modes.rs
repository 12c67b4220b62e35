//! The modes a program set on the person's terminal through a passthrough,
//! to be taken back on a detach (the program's screen stays in the
//! session; the person's terminal goes back to their shell).
//!
//! Turning off a mode that is off changes nothing, so most modes are reset
//! whatever the program did. Leaving the alternate screen is the exception:
//! `ESC [ ? 1049 l` also restores the cursor saved on entering it, which
//! outside the alternate screen moves the cursor to where no one saved it.
//! So the program's output is watched for the alternate screen alone.

/// Modes reset on every detach: cursor shown, mouse reports off (X10,
/// button, any-motion, SGR), bracketed paste off, normal cursor keys,
/// normal keypad, default colours.
pub const RESET_ON_DETACH: &[u8] =
    b"\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?1l\x1b>\x1b[0m";

/// Leaves the alternate screen, restoring the cursor saved on entering it.
pub const LEAVE_ALTERNATE_SCREEN: &[u8] = b"\x1b[?1049l";

/// The sequences that enter (true) or leave (false) the alternate screen.
const SWITCHES: [(&[u8], bool); 6] = [
    (b"\x1b[?1049h", true),
    (b"\x1b[?1049l", false),
    (b"\x1b[?1047h", true),
    (b"\x1b[?1047l", false),
    (b"\x1b[?47h", true),
    (b"\x1b[?47l", false),
];

/// The longest switch, less one: what a chunk's end may hold of one.
const TAIL: usize = 7;

/// Whether the program's output left the terminal on its alternate screen.
#[derive(Debug, Default)]
pub struct ScreenModes {
    alternate: bool,
    /// The end of the output seen, where a switch split by a read begins.
    tail: Vec<u8>,
}

impl ScreenModes {
    /// Watch the next output the person's terminal is given.
    pub fn see(&mut self, output: &[u8]) {
        // A switch split by the reads begins in the tail and ends in the
        // first bytes of this output; any switch inside this output is later.
        let mut joint = std::mem::take(&mut self.tail);
        joint.extend_from_slice(&output[..output.len().min(TAIL)]);
        self.scan(&joint);
        self.scan(output);
        self.tail = match output.len() >= TAIL {
            true => output[output.len() - TAIL..].to_vec(),
            false => joint[joint.len().saturating_sub(TAIL)..].to_vec(),
        };
    }

    /// The last switch in `bytes` decides.
    fn scan(&mut self, bytes: &[u8]) {
        for at in memchr::memchr_iter(0x1b, bytes) {
            if let Some(&(_, enters)) = SWITCHES
                .iter()
                .find(|(switch, _)| bytes[at..].starts_with(switch))
            {
                self.alternate = enters;
            }
        }
    }

    /// Whether the terminal is on its alternate screen.
    pub fn alternate(&self) -> bool {
        self.alternate
    }

    /// What takes the program's modes back from the person's terminal.
    pub fn leave(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        if self.alternate {
            bytes.extend_from_slice(LEAVE_ALTERNATE_SCREEN);
        }
        bytes.extend_from_slice(RESET_ON_DETACH);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(chunks: &[&[u8]]) -> ScreenModes {
        let mut modes = ScreenModes::default();
        for chunk in chunks {
            modes.see(chunk);
        }
        modes
    }

    #[test]
    fn the_alternate_screen_is_left_only_when_the_program_entered_it() {
        assert!(!seen(&[b"$ python3\r\n>>> "]).alternate());
        assert_eq!(seen(&[b"plain"]).leave(), RESET_ON_DETACH);
        let vim = seen(&[b"\x1b[?1049h\x1b[H\x1b[2Jtext"]);
        assert!(vim.alternate());
        assert!(vim.leave().starts_with(LEAVE_ALTERNATE_SCREEN));
        assert!(!seen(&[b"\x1b[?1049h vim \x1b[?1049l$ "]).alternate());
        assert!(seen(&[b"\x1b[?47h"]).alternate());
        assert!(!seen(&[b"\x1b[?1047h..\x1b[?1047l"]).alternate());
    }

    #[test]
    fn a_switch_split_across_reads_is_seen() {
        let whole = b"\x1b[?1049h";
        for cut in 1..whole.len() {
            let modes = seen(&[b"before", &whole[..cut], &whole[cut..], b"after"]);
            assert!(modes.alternate(), "cut at {cut}");
        }
        let long = vec![b'x'; 100];
        let modes = seen(&[&long, b"\x1b[?10", b"49h", &long, b"\x1b[?1049", b"l"]);
        assert!(!modes.alternate());
    }

    #[test]
    fn a_switch_in_a_long_chunk_counts_and_the_last_one_decides() {
        let mut chunk = vec![b'x'; 1000];
        chunk.extend_from_slice(b"\x1b[?1049h");
        chunk.extend_from_slice(&[b'y'; 1000]);
        assert!(seen(&[&chunk]).alternate());
        chunk.extend_from_slice(b"\x1b[?1049l");
        assert!(!seen(&[&chunk]).alternate());
    }
}
