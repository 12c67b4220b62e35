use std::time::Duration;

use super::*;

fn screen(rows: u16, cols: u16, bytes: &[u8]) -> Screen {
    let mut screen = Screen::new(ScreenSize::new(rows, cols));
    screen.feed(bytes);
    screen
}

fn lines(screen: &Screen) -> Vec<String> {
    screen.state().lines
}

fn cursor(screen: &Screen) -> (u16, u16, bool) {
    let cursor = screen.state().cursor;
    (cursor.row, cursor.col, cursor.visible)
}

/// A fresh screen of the same size, painted by `redraw`.
fn repainted(screen: &Screen) -> Screen {
    let mut fresh = Screen::new(screen.size());
    fresh.feed(&screen.redraw());
    fresh
}

#[test]
fn the_cursor_goes_where_the_program_sends_it() {
    let s = screen(5, 20, b"abc\x1b[3;5HX\x1b[AY\x1b[2DZ");
    assert_eq!(lines(&s), ["abc", "    ZY", "    X", "", ""]);
    assert_eq!(cursor(&s), (1, 5, true));
    let s = screen(5, 20, b"\x1b[?25l\x1b[5;20H");
    assert_eq!(cursor(&s), (4, 19, false));
}

#[test]
fn a_full_screen_program_uses_the_alternate_screen_and_gives_the_shell_back() {
    let mut s = screen(4, 20, b"$ vim notes\r\n");
    s.feed(b"\x1b[?1049h\x1b[H\x1b[2J\x1b[?25lline one\r\n~\x1b[1;1H\x1b[?25h");
    let state = s.state();
    assert!(state.alternate);
    assert_eq!(state.lines, ["line one", "~", "", ""]);
    assert_eq!(cursor(&s), (0, 0, true));
    s.feed(b"\x1b[?1049l");
    let state = s.state();
    assert!(!state.alternate);
    assert_eq!(state.lines, ["$ vim notes", "", "", ""]);
    assert_eq!(cursor(&s), (1, 0, true));
}

#[test]
fn the_title_is_the_last_one_set_by_osc_0_or_2() {
    let mut s = screen(2, 10, b"\x1b]0;first\x07");
    assert_eq!(s.state().title.as_deref(), Some("first"));
    s.feed(b"\x1b]2;second\x1b\\");
    assert_eq!(s.state().title.as_deref(), Some("second"));
    s.feed(b"\x1b]1;icon only\x07");
    assert_eq!(s.state().title.as_deref(), Some("second"));
    assert_eq!(screen(2, 10, b"").state().title, None);
}

#[test]
fn a_long_title_is_cut_at_a_character_boundary() {
    let long = "\u{e9}".repeat(400);
    let s = screen(2, 10, format!("\x1b]2;{long}\x07").as_bytes());
    let title = s.state().title.unwrap();
    assert!(title.len() <= TITLE_MAX_BYTES, "{}", title.len());
    assert!(title.len() >= TITLE_MAX_BYTES - 1);
    assert!(title.chars().all(|c| c == '\u{e9}'));
}

#[test]
fn a_resize_cuts_or_extends_the_screen() {
    let mut s = screen(4, 10, b"0123456789\r\nline 2\x1b[1;1H");
    s.resize(ScreenSize::new(2, 5));
    assert_eq!(lines(&s), ["01234", "line"]);
    let mut s = screen(4, 10, b"0123456789\r\nline 2\r\nline 3\x1b[4;1Hlast");
    s.resize(ScreenSize::new(2, 5));
    let state = s.state();
    assert_eq!((state.rows, state.cols), (2, 5));
    // The cursor's row stays on screen: the top rows go, as in xterm.
    assert_eq!(state.lines, ["line", "last"]);
    assert_eq!((state.cursor.row, state.cursor.col), (1, 4));
    s.resize(ScreenSize::new(6, 30));
    let state = s.state();
    assert_eq!((state.rows, state.cols), (6, 30));
    assert_eq!(state.lines.len(), 6);
    s.feed(b"\x1b[6;1Hbottom row of a taller screen");
    assert_eq!(s.state().lines[5], "bottom row of a taller screen");
}

#[test]
fn a_zero_size_counts_as_one_cell() {
    let s = Screen::new(ScreenSize { rows: 0, cols: 0 });
    assert_eq!(s.size(), ScreenSize::new(1, 1));
    assert_eq!(s.state().lines, [""]);
}

#[test]
fn a_size_beyond_any_display_is_cut_to_the_bound() {
    let mut s = Screen::new(ScreenSize {
        rows: u16::MAX,
        cols: u16::MAX,
    });
    assert_eq!(s.size(), ScreenSize::new(SCREEN_MAX_ROWS, SCREEN_MAX_COLS));
    assert_eq!(s.state().lines.len(), usize::from(SCREEN_MAX_ROWS));
    s.resize(ScreenSize {
        rows: 30,
        cols: u16::MAX,
    });
    assert_eq!((s.state().rows, s.state().cols), (30, SCREEN_MAX_COLS));
}

#[test]
fn a_character_cut_between_two_feeds_arrives_whole() {
    let mut s = Screen::new(ScreenSize::new(2, 10));
    s.feed(b"a\xe6\xbc");
    s.feed(b"\xa2b");
    assert_eq!(lines(&s)[0], "a\u{6f22}b");
    assert_eq!(cursor(&s), (0, 4, true));
    s.feed(b"\x1b[");
    s.feed(b"2;3H");
    assert_eq!(cursor(&s), (1, 2, true));
}

#[test]
fn wide_characters_take_two_columns_and_wrap_whole() {
    let s = screen(3, 5, "ab\u{6f22}\u{5b57}".as_bytes());
    assert_eq!(lines(&s), ["ab\u{6f22}", "\u{5b57}", ""]);
    assert_eq!(cursor(&s), (1, 2, true));
}

/// Screens a redraw must reproduce: the plain, the coloured, the full
/// screen, the hidden cursor, wide characters, a cursor parked past the
/// last column, a scrolled screen.
fn varied_screens() -> Vec<Screen> {
    let scrolled: String = (0..40).map(|n| format!("line {n}\r\n")).collect();
    vec![
        screen(5, 20, b""),
        screen(5, 20, b"$ echo hi\r\nhi\r\n$ "),
        screen(5, 20, b"\x1b[1;31mred\x1b[0m \x1b[4;44munder blue\x1b[m\r\nplain"),
        screen(
            6,
            30,
            b"$ less log\r\n\x1b]0;less log\x07\x1b[?1049h\x1b[?1h\x1b=\x1b[H\x1b[2Jpage 1\r\n\x1b[7m:\x1b[m\x1b[?25l",
        ),
        screen(4, 10, "\u{6f22}\u{5b57} ok\r\n\u{e9}t\u{e9}".as_bytes()),
        screen(3, 10, b"0123456789"),
        screen(3, 10, b"0123456789\x1b[2;1Hsecond\x1b[3;10H"),
        screen(4, 12, scrolled.as_bytes()),
        screen(4, 20, b"\x1b[?2004h\x1b[?1000h$ ready"),
    ]
}

#[test]
fn a_redraw_paints_a_fresh_terminal_into_the_same_screen() {
    for original in varied_screens() {
        let copy = repainted(&original);
        assert_eq!(
            copy.state(),
            original.state(),
            "{:?}",
            String::from_utf8_lossy(&original.redraw())
        );
        assert_eq!(
            copy.redraw(),
            original.redraw(),
            "colours, attributes and input modes differ"
        );
    }
}

#[test]
fn a_program_that_leaves_the_alternate_screen_after_a_redraw_shows_the_shell_again() {
    let mut original = screen(
        4,
        20,
        b"$ ls\r\nnotes.txt\r\n$ vim\x1b[?1049h\x1b[H\x1b[2J\x1b[1;32mediting\x1b[m\x1b[3;2H",
    );
    let mut copy = repainted(&original);
    assert_eq!(copy.state(), original.state());
    assert!(copy.state().alternate);
    original.feed(b"\x1b[?1049l\r\n$ ");
    copy.feed(b"\x1b[?1049l\r\n$ ");
    assert_eq!(copy.state(), original.state());
    assert_eq!(copy.state().lines, ["$ ls", "notes.txt", "$ vim", "$"]);
}

#[test]
fn output_after_a_redraw_lands_where_it_would_have() {
    for original in varied_screens() {
        let mut original = original;
        let mut copy = repainted(&original);
        let more = "more text \x1b[1mbold\x1b[m\r\nand a line".as_bytes();
        original.feed(more);
        copy.feed(more);
        assert_eq!(copy.state(), original.state());
    }
}

#[test]
fn the_state_keeps_one_line_per_row_whatever_was_written() {
    let s = screen(3, 8, b"one\r\ntwo\r\nthree\r\nfour\r\nfive   \r\n");
    assert_eq!(lines(&s), ["four", "five", ""]);
}

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// The bound on rebuilding a screen from 50 MB of stored output, fed in
/// spool-sized chunks, in CPU time of the feeding thread (a loaded
/// machine's waits do not count): about five times what it costs here.
const REBUILD_50_MB_WITHIN: Duration = Duration::from_secs(15);

fn thread_cpu_time() -> Duration {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    Duration::from(now)
}

/// How much a screen's process may grow while 50 MB go through it: the
/// screen itself is tens of KiB; a screen keeping what scrolled off would
/// need over a GiB here.
const REBUILD_GROWTH_MAX_BYTES: u64 = 64 << 20;

#[test]
fn fifty_megabytes_rebuild_a_screen_fast_and_in_bounded_memory() {
    let mut chunk = Vec::new();
    let mut n = 0u64;
    while chunk.len() < 64 * 1024 {
        n += 1;
        let piece = match n % 5 {
            0 => format!(
                "\x1b[{};{}H\x1b[K\x1b]2;title {n}\x07",
                n % 24 + 1,
                n % 70 + 1
            ),
            1 => format!("\x1b[1;3{}mbuilding step {n}\x1b[0m\r\n", n % 8),
            2 => "warning: \u{6f22}\u{5b57} \u{2014} unused import\r\n".to_owned(),
            3 => "\x1b[2K\r[#####     ] 50%".to_owned(),
            _ => format!("{n:>70}\r\n"),
        };
        chunk.extend_from_slice(piece.as_bytes());
    }
    let mut s = Screen::new(ScreenSize::new(24, 80));
    let before = resident_bytes();
    let start = thread_cpu_time();
    let mut fed = 0;
    while fed < 50_000_000 {
        s.feed(&chunk);
        fed += chunk.len();
    }
    let took = thread_cpu_time() - start;
    eprintln!("50 MB fed in {took:?} of CPU");
    let grew = resident_bytes().saturating_sub(before);
    assert!(took < REBUILD_50_MB_WITHIN, "50 MB took {took:?}");
    assert!(
        grew < REBUILD_GROWTH_MAX_BYTES,
        "the process grew by {grew} bytes"
    );
    let state = s.state();
    assert_eq!(state.lines.len(), 24);
    assert!(state.title.unwrap().starts_with("title "));
}
