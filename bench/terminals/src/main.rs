//! Compares terminal-emulation crates for eukhe's screens: correctness on
//! vttest-like sequences, memory of a screen with bounded scrollback, and
//! feeding speed. Prints a table; never fails on a number.
//!
//! `cargo run --release` in this folder (its own workspace, not eukhe's).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What a test case reads back from an emulator.
#[derive(Debug, PartialEq)]
struct Seen {
    lines: Vec<String>,
    cursor: (usize, usize),
    title: Option<String>,
    alternate: bool,
    bold_red_first: bool,
}

trait Emulator {
    fn name() -> &'static str;
    fn new(rows: usize, cols: usize, scrollback: usize) -> Self;
    fn feed(&mut self, bytes: &[u8]);
    fn seen(&self) -> Seen;
}

mod vt {
    use super::*;

    #[derive(Default)]
    pub struct Title(Option<String>);
    impl vt100::Callbacks for Title {
        fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
            self.0 = Some(String::from_utf8_lossy(title).into_owned());
        }
    }
    pub struct Vt100(vt100::Parser<Title>);

    impl Emulator for Vt100 {
        fn name() -> &'static str {
            "vt100 0.18"
        }
        fn new(rows: usize, cols: usize, scrollback: usize) -> Self {
            let size = |n: usize| std::num::NonZeroU16::new(n as u16).unwrap();
            Self(vt100::Parser::new_with_callbacks(
                size(rows),
                size(cols),
                scrollback,
                Title::default(),
            ))
        }
        fn feed(&mut self, bytes: &[u8]) {
            self.0.process(bytes)
        }
        fn seen(&self) -> Seen {
            let screen = self.0.screen();
            let (_, cols) = screen.size();
            let lines = screen
                .rows(0, cols.get())
                .map(|row| row.trim_end().to_owned())
                .collect();
            let (row, col) = screen.cursor_position();
            let first = screen.cell(0, 0).unwrap();
            Seen {
                lines,
                cursor: (row as usize, col as usize),
                title: self.0.callbacks().0.clone(),
                alternate: screen.alternate_screen(),
                bold_red_first: first.bold() && first.fgcolor() == vt100::Color::Idx(1),
            }
        }
    }
}

mod alac {
    use super::*;
    use alacritty_terminal::event::{Event, EventListener};
    use alacritty_terminal::grid::Dimensions;
    use alacritty_terminal::index::{Column, Line, Point};
    use alacritty_terminal::term::cell::Flags;
    use alacritty_terminal::term::test::TermSize;
    use alacritty_terminal::term::{Config, Term, TermMode};
    use alacritty_terminal::vte::ansi::{Color, NamedColor, Processor};
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Clone, Default)]
    pub struct Titles(Rc<RefCell<Option<String>>>);
    impl EventListener for Titles {
        fn send_event(&self, event: Event) {
            match event {
                Event::Title(title) => *self.0.borrow_mut() = Some(title),
                Event::ResetTitle => *self.0.borrow_mut() = None,
                _ => {}
            }
        }
    }
    pub struct Alacritty {
        term: Term<Titles>,
        parser: Processor,
        titles: Titles,
    }

    impl Emulator for Alacritty {
        fn name() -> &'static str {
            "alacritty_terminal 0.26"
        }
        fn new(rows: usize, cols: usize, scrollback: usize) -> Self {
            let titles = Titles::default();
            let config = Config {
                scrolling_history: scrollback,
                ..Config::default()
            };
            let term = Term::new(config, &TermSize::new(cols, rows), titles.clone());
            Self {
                term,
                parser: Processor::new(),
                titles,
            }
        }
        fn feed(&mut self, bytes: &[u8]) {
            self.parser.advance(&mut self.term, bytes)
        }
        fn seen(&self) -> Seen {
            let grid = self.term.grid();
            let lines = (0..grid.screen_lines())
                .map(|row| {
                    let line = &grid[Line(row as i32)];
                    let text: String = (0..grid.columns())
                        .filter(|col| !line[Column(*col)].flags.contains(Flags::WIDE_CHAR_SPACER))
                        .map(|col| line[Column(col)].c)
                        .collect();
                    text.trim_end().to_owned()
                })
                .collect();
            let Point { line, column } = grid.cursor.point;
            let first = &grid[Line(0)][Column(0)];
            Seen {
                lines,
                cursor: (line.0 as usize, column.0),
                title: self.titles.0.borrow().clone(),
                alternate: self.term.mode().contains(TermMode::ALT_SCREEN),
                bold_red_first: first.flags.contains(Flags::BOLD)
                    && first.fg == Color::Named(NamedColor::Red),
            }
        }
    }
}

mod asciinema {
    use super::*;

    /// avt takes text, not bytes: a character split across feeds is
    /// carried here, as eukhe would have to.
    pub struct Avt {
        vt: avt::Terminal,
        pending: Vec<u8>,
    }

    impl Emulator for Avt {
        fn name() -> &'static str {
            "avt 0.19"
        }
        fn new(rows: usize, cols: usize, scrollback: usize) -> Self {
            Self {
                vt: avt::Terminal::with_scrollback(cols, rows, Some(scrollback)).unwrap(),
                pending: Vec::new(),
            }
        }
        fn feed(&mut self, bytes: &[u8]) {
            self.pending.extend_from_slice(bytes);
            let valid = match std::str::from_utf8(&self.pending) {
                Ok(_) => self.pending.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => {
                    let text = String::from_utf8_lossy(&self.pending).into_owned();
                    self.pending.clear();
                    self.vt.feed(text.as_str());
                    return;
                }
            };
            let rest = self.pending.split_off(valid);
            let text = std::str::from_utf8(&self.pending).unwrap().to_owned();
            self.pending = rest;
            self.vt.feed(text.as_str());
        }
        fn seen(&self) -> Seen {
            let lines = self
                .vt
                .screen()
                .visible_lines()
                .map(|line| line.text().trim_end().to_owned())
                .collect();
            let cursor = self.vt.cursor();
            let first = self.vt.screen().visible_lines().next().unwrap().cells()[0];
            Seen {
                lines,
                cursor: (cursor.row, cursor.col),
                title: None,
                alternate: matches!(self.vt.active_screen_kind(), avt::ScreenKind::Alternate),
                bold_red_first: first.pen().is_bold()
                    && first.pen().foreground() == Some(avt::Color::Indexed(1)),
            }
        }
    }
}

struct Case {
    name: &'static str,
    feeds: Vec<Vec<u8>>,
    lines: Vec<&'static str>,
    cursor: (usize, usize),
    title: Option<&'static str>,
    alternate: bool,
    bold_red_first: bool,
}

fn case(name: &'static str, input: &str, lines: &[&'static str], cursor: (usize, usize)) -> Case {
    let mut all = lines.to_vec();
    all.resize(5, "");
    Case {
        name,
        feeds: vec![input.as_bytes().to_vec()],
        lines: all,
        cursor,
        title: None,
        alternate: false,
        bold_red_first: false,
    }
}

/// Each case runs on a 5x20 screen.
fn cases() -> Vec<Case> {
    let x19 = "x".repeat(19);
    let x20 = "x".repeat(20);
    let wrapped = Box::leak(x19.clone().into_boxed_str()) as &'static str;
    let over = Box::leak(format!("y{}", "x".repeat(19)).into_boxed_str()) as &'static str;
    vec![
        case("cursor CUP/CUU/CUB", "abc\x1b[3;5HX\x1b[AY\x1b[2DZ", &["abc", "    ZY", "    X"], (1, 5)),
        case("scroll region", "\x1b[2;4r\x1b[H1\r\n2\r\n3\r\n4\r\n5\r\n6", &["1", "4", "5", "6"], (3, 1)),
        Case {
            alternate: true,
            ..case("DECSET 1049 on", "main\x1b[?1049halt", &["    alt"], (0, 7))
        },
        case("DECSET 1049 off", "main\x1b[?1049halt\x1b[?1049l", &["main"], (0, 4)),
        case("wide characters", "a\u{6f22}b", &["a\u{6f22}b"], (0, 4)),
        case("wide at last column", &format!("{x19}\u{6f22}"), &[wrapped, "\u{6f22}"], (1, 2)),
        case("pending wrap", &format!("{x20}\ry"), &[over], (0, 1)),
        Case {
            bold_red_first: true,
            ..case("SGR bold red", "\x1b[1;31mred\x1b[0m", &["red"], (0, 3))
        },
        case("erase EL", "hello world\x1b[1;6H\x1b[K", &["hello"], (0, 5)),
        case("erase ED", "a\r\nb\r\nc\x1b[2;1H\x1b[J", &["a"], (1, 0)),
        case("insert line IL", "1\r\n2\r\n3\x1b[2;1H\x1b[L", &["1", "", "2", "3"], (1, 0)),
        case("delete line DL", "1\r\n2\r\n3\x1b[2;1H\x1b[M", &["1", "3"], (1, 0)),
        case("insert chars ICH", "abcdef\x1b[1;2H\x1b[2@", &["a  bcdef"], (0, 1)),
        case("delete chars DCH", "abcdef\x1b[1;2H\x1b[2P", &["adef"], (0, 1)),
        case("save/restore DECSC", "ab\x1b7\x1b[4;4Hc\x1b8d", &["abd", "", "", "   c"], (0, 3)),
        Case {
            title: Some("one"),
            ..case("title OSC 0", "\x1b]0;one\x07", &[], (0, 0))
        },
        Case {
            title: Some("two"),
            ..case("title OSC 2 (ST)", "\x1b]2;two\x1b\\", &[], (0, 0))
        },
        Case {
            feeds: vec![b"\xe6\xbc".to_vec(), b"\xa2!".to_vec()],
            ..case("UTF-8 split across feeds", "", &["\u{6f22}!"], (0, 3))
        },
    ]
}

fn correctness<E: Emulator>() -> (usize, usize, Vec<String>) {
    let all = cases();
    let mut failed = Vec::new();
    for case in &all {
        let mut emulator = E::new(5, 20, 100);
        for feed in &case.feeds {
            emulator.feed(feed);
        }
        let seen = emulator.seen();
        let want = Seen {
            lines: case.lines.iter().map(|s| s.to_string()).collect(),
            cursor: case.cursor,
            title: case.title.map(str::to_owned),
            alternate: case.alternate,
            bold_red_first: case.bold_red_first,
        };
        if seen != want {
            failed.push(format!("{}: {:?}", case.name, seen));
        }
    }
    (all.len() - failed.len(), all.len(), failed)
}

/// Live heap of one screen after enough lines to fill its scrollback.
fn memory<E: Emulator>(rows: usize, cols: usize, scrollback: usize) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    let mut emulator = E::new(rows, cols, scrollback);
    let line = format!("\x1b[32m{}\x1b[0m\r\n", "m".repeat(cols - 1));
    for _ in 0..(scrollback + rows) * 2 {
        emulator.feed(line.as_bytes());
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(emulator);
    after - before
}

/// Text with colours, cursor moves, erases, wide characters and CRLFs.
fn mixed_input(total: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + 4096);
    let mut n = 0u64;
    while out.len() < total {
        n += 1;
        let piece = match n % 8 {
            0 => format!("\x1b[{};{}H\x1b[K", n % 24 + 1, n % 70 + 1),
            1 => format!("\x1b[1;3{}mcompiling crate number {n}\x1b[0m\r\n", n % 8),
            2 => "warning: unused variable `x` \u{2014} \u{6f22}\u{5b57} ok\r\n".to_owned(),
            3 => format!("{:>60}\r\n", n),
            4 => "\x1b[2K\r[#####     ] 50%".to_owned(),
            5 => "\x1b[38;5;208morange\x1b[48;2;10;20;30m rgb \x1b[m\r\n".to_owned(),
            6 => "\ttab\tseparated\tcolumns\r\n".to_owned(),
            _ => format!("plain line {n} with some words in it to fill the width\r\n"),
        };
        out.extend_from_slice(piece.as_bytes());
    }
    out
}

fn speed<E: Emulator>(input: &[u8]) -> f64 {
    let mut emulator = E::new(24, 80, 1000);
    let start = Instant::now();
    for chunk in input.chunks(64 * 1024) {
        emulator.feed(chunk);
    }
    let seconds = start.elapsed().as_secs_f64();
    std::hint::black_box(emulator.seen());
    input.len() as f64 / 1e6 / seconds
}

fn row<E: Emulator>(input: &[u8], failures: &mut Vec<String>) {
    let (passed, total, failed) = correctness::<E>();
    failures.extend(failed.into_iter().map(|f| format!("{}: {f}", E::name())));
    let kib = |bytes: isize| bytes as f64 / 1024.0;
    println!(
        "| {} | {passed}/{total} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
        E::name(),
        kib(memory::<E>(24, 80, 0)),
        kib(memory::<E>(50, 200, 0)),
        kib(memory::<E>(24, 80, 1000)),
        kib(memory::<E>(50, 200, 1000)),
        speed::<E>(input),
    );
}

fn main() {
    let megabytes: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let input = mixed_input(megabytes * 1_000_000);
    println!("| crate | vttest-like cases | KiB 80x24 | KiB 200x50 | KiB 80x24 + 1000 lines | KiB 200x50 + 1000 lines | MB/s ({megabytes} MB mixed, 64 KiB feeds) |");
    println!("|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    row::<vt::Vt100>(&input, &mut failures);
    row::<alac::Alacritty>(&input, &mut failures);
    row::<asciinema::Avt>(&input, &mut failures);
    for failure in failures {
        println!("failed: {failure}");
    }
}
