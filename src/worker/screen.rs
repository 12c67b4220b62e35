//! The screen of a terminal run: every byte the program writes to its
//! terminal is fed here, and the screen says what a person would see now
//! (`state`, as text) and how to paint it on another terminal (`redraw`,
//! for an attach that shows the program as it is, not a replay).
//!
//! The emulation is the `vt100` crate's (chosen in `bench/terminals`). A
//! screen is rebuilt after a worker restart by feeding it the run's stored
//! bytes again, so feeding must be fast and its memory must not grow with
//! what was fed: a screen holds its visible cells (twice over while the
//! program is on the alternate screen, the main screen kept under it), a
//! title of at most [`TITLE_MAX_BYTES`] and [`SCROLLBACK_ROWS`] rows of
//! history, whatever the program wrote, and at most [`SCREEN_MAX_ROWS`] by
//! [`SCREEN_MAX_COLS`] cells, whatever size a client asks for.

use std::num::NonZeroU16;

use crate::protocol::screen::{Cursor, ScreenState};

/// Rows of history a screen keeps in memory beyond its visible rows: none.
/// Nothing reads them (`state` and `redraw` show the visible screen, an
/// attached terminal keeps its own history of what passes through), the
/// transcript keeps every byte the program wrote (`eukhe log`), and each
/// kept row would cost about 32 bytes per column: a thousand rows of 200
/// columns are 6 MiB per idle run, against a budget of 1 MiB.
pub const SCROLLBACK_ROWS: usize = 0;

/// The longest title a screen keeps, in bytes (cut at a character
/// boundary): a title is one line in a window's frame.
pub const TITLE_MAX_BYTES: usize = 256;

/// The most rows a screen keeps: more than any display shows.
pub const SCREEN_MAX_ROWS: u16 = 512;

/// The most columns a screen keeps: more than any display shows. With
/// [`SCREEN_MAX_ROWS`], a screen of about 32 bytes a cell costs at most
/// 16 MiB (twice that on the alternate screen), not the 128 GiB a client
/// asking for 65535 by 65535 would cost.
pub const SCREEN_MAX_COLS: u16 = 1024;

/// The size of a terminal: rows and columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScreenSize {
    /// Rows, from 1 to [`SCREEN_MAX_ROWS`].
    pub rows: u16,
    /// Columns, from 1 to [`SCREEN_MAX_COLS`].
    pub cols: u16,
}

impl ScreenSize {
    /// A size of `rows` by `cols`; zero counts as 1 (a terminal that says
    /// it has no size still shows one cell), and a size beyond
    /// [`SCREEN_MAX_ROWS`] or [`SCREEN_MAX_COLS`] as that bound.
    pub fn new(rows: u16, cols: u16) -> Self {
        ScreenSize {
            rows: rows.clamp(1, SCREEN_MAX_ROWS),
            cols: cols.clamp(1, SCREEN_MAX_COLS),
        }
    }

    fn non_zero(self) -> (NonZeroU16, NonZeroU16) {
        (nonzero(self.rows), nonzero(self.cols))
    }
}

fn nonzero(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// What the emulator tells besides the cells: the window title.
#[derive(Debug, Default)]
struct Heard {
    title: Option<String>,
}

impl vt100::Callbacks for Heard {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        // Control characters go: a redraw sends the title back inside an
        // OSC, which one of them would end early.
        let title: String = String::from_utf8_lossy(title)
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        let mut end = title.len().min(TITLE_MAX_BYTES);
        while !title.is_char_boundary(end) {
            end -= 1;
        }
        self.title = Some(title[..end].to_owned()).filter(|t| !t.is_empty());
    }
}

/// One terminal run's screen.
pub struct Screen {
    parser: vt100::Parser<Heard>,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

impl Screen {
    /// A blank screen of `size`, the cursor at the top left.
    pub fn new(size: ScreenSize) -> Self {
        let size = ScreenSize::new(size.rows, size.cols);
        let (rows, cols) = size.non_zero();
        Screen {
            parser: vt100::Parser::new_with_callbacks(
                rows,
                cols,
                SCROLLBACK_ROWS,
                Heard::default(),
            ),
        }
    }

    /// Take bytes the program wrote, in order. A character or an escape
    /// sequence cut between two feeds is taken whole when its rest comes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
    }

    /// The terminal changed size (as the program is told by SIGWINCH):
    /// columns past the right edge are cut, and rows past the bottom, or
    /// from the top if the cursor would fall off the bottom (as in xterm).
    pub fn resize(&mut self, size: ScreenSize) {
        let (rows, cols) = ScreenSize::new(size.rows, size.cols).non_zero();
        self.parser.set_size(rows, cols);
    }

    /// The screen's size.
    pub fn size(&self) -> ScreenSize {
        let (rows, cols) = self.parser.screen().size();
        ScreenSize::new(rows.get(), cols.get())
    }

    /// What a person sees now, as text. Whose screen it is (`input`),
    /// `waiting` and `ended` are not the screen's to know: the caller
    /// (`worker::screens`) sets them.
    pub fn state(&self) -> ScreenState {
        let screen = self.parser.screen();
        let (rows, cols) = screen.size();
        let lines = screen
            .rows(0, cols.get())
            .map(|row| row.trim_end().to_owned())
            .collect();
        let (row, col) = screen.cursor_position();
        ScreenState {
            input: 0,
            rows: rows.get(),
            cols: cols.get(),
            lines,
            cursor: Cursor {
                row,
                col,
                visible: !screen.hide_cursor(),
            },
            title: self.parser.callbacks().title.clone(),
            alternate: screen.alternate_screen(),
            waiting: false,
            ended: None,
        }
    }

    /// Bytes that paint a freshly cleared terminal of the same size into
    /// this screen: the title, every cell with its colours and attributes,
    /// the cursor, and the input modes the program set (cursor keys,
    /// keypad, bracketed paste, mouse), so keys typed after an attach reach
    /// it as it expects. A program on the alternate screen gets the main
    /// screen painted under it first, so the terminal shows the shell's
    /// screen again when the program leaves.
    pub fn redraw(&self) -> Vec<u8> {
        let screen = self.parser.screen();
        let mut out = String::new();
        if screen.alternate_screen() {
            out.push_str(&main_screen_under(screen));
            out.push_str("\x1b[?1049h");
        }
        if let Some(title) = &self.parser.callbacks().title {
            out.push_str("\x1b]2;");
            out.push_str(title);
            out.push_str("\x1b\\");
        }
        out.push_str(&screen.state_formatted());
        out.into_bytes()
    }
}

/// The main screen under a program on the alternate screen, painted: a
/// copy of the screen leaves the alternate screen (its cursor comes back
/// to where it was saved on entering it).
fn main_screen_under(screen: &vt100::Screen) -> String {
    let (rows, cols) = screen.size();
    let mut main = vt100::Parser::new(rows, cols, SCROLLBACK_ROWS);
    *main.screen_mut() = screen.clone();
    main.process(b"\x1b[?1049l");
    main.screen().contents_formatted()
}

#[cfg(test)]
mod tests;
