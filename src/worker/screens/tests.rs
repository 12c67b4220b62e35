use super::*;

use crate::session::entry::Stream;

const SIZE: WindowSize = WindowSize { rows: 3, cols: 10 };

/// A terminal that kept its first size.
const FIRST: &[SizeAt] = &[SizeAt { at: 0, size: SIZE }];

fn current(run: Option<RunId>) -> ScreenAsked {
    ScreenAsked::Current { current: run }
}

fn output(input: Option<RunId>, bash: Option<RunId>, data: &[u8]) -> Entry {
    output_to(input, bash, data, None)
}

fn output_to(input: Option<RunId>, bash: Option<RunId>, data: &[u8], end: Option<u64>) -> Entry {
    Entry {
        seq: 1,
        at_ms: 0,
        body: EntryBody::Output {
            input,
            stream: Stream::Stdout,
            data: bytes::Bytes::copy_from_slice(data),
            spool_end: end,
            bash,
        },
    }
}

#[test]
fn a_terminal_run_s_screen_shows_what_it_wrote_and_whose_it_is() {
    let mut screens = Screens::default();
    screens.open(3, "r3", SIZE);
    screens.feed(3, b"hello\r\n\x1b]2;t\x07");
    screens.feed(4, b"not a terminal job");
    let state = screens.state(current(Some(3))).unwrap();
    assert_eq!(state.input, 3);
    assert_eq!(state.lines, ["hello", "", ""]);
    assert_eq!(state.title.as_deref(), Some("t"));
    assert_eq!(state.ended, None);
    assert!(screens.state(ScreenAsked::Input(4)).is_err());
}

#[test]
fn the_last_ended_screen_is_kept_with_its_status_and_only_it() {
    let mut screens = Screens::default();
    screens.open(1, "r1", SIZE);
    screens.feed(1, b"one");
    screens.end(1, 0);
    let state = screens.state(current(None)).unwrap();
    assert_eq!((state.input, state.ended), (1, Some(0)));
    assert_eq!(state.lines[0], "one");
    // Output that comes after the end is still the screen's.
    screens.feed(1, b" more");
    assert_eq!(screens.state(current(None)).unwrap().lines[0], "one more");
    screens.open(2, "r2", SIZE);
    screens.end(2, 7);
    assert!(screens.state(ScreenAsked::Input(1)).is_err());
    assert_eq!(screens.state(current(None)).unwrap().ended, Some(7));
    assert_eq!(screens.live.len(), 0);
}

#[test]
fn the_running_run_comes_before_user_bash_and_the_last_ended_one() {
    let mut screens = Screens::default();
    screens.open(1, "r1", SIZE);
    screens.end(1, 0);
    screens.open(2, "r2", SIZE);
    screens.open(5, "b5-1-1", SIZE);
    assert_eq!(screens.state(current(Some(2))).unwrap().input, 2);
    assert_eq!(screens.state(current(None)).unwrap().input, 5);
    let message = Screens::default().state(current(None)).unwrap_err();
    assert!(message.contains("eukhe send --tty"), "{message}");
}

#[test]
fn waiting_is_set_by_job_and_cleared_by_the_end() {
    let mut screens = Screens::default();
    screens.open(2, "r2", SIZE);
    screens.set_waiting("r2", true);
    screens.set_waiting("r9", true);
    assert!(screens.state(ScreenAsked::Input(2)).unwrap().waiting);
    screens.set_waiting("r2", false);
    assert!(!screens.state(ScreenAsked::Input(2)).unwrap().waiting);
    screens.set_waiting("r2", true);
    screens.end(2, 1);
    assert!(!screens.state(ScreenAsked::Input(2)).unwrap().waiting);
}

#[test]
fn every_change_is_counted_for_those_who_wait_on_it() {
    let mut screens = Screens::default();
    let mut seen = screens.changed.subscribe();
    let mut count = || {
        let changed = seen.has_changed().unwrap();
        seen.mark_unchanged();
        changed
    };
    screens.open(2, "r2", SIZE);
    assert!(count());
    screens.feed(2, b"x");
    assert!(count());
    screens.resize(2, WindowSize { rows: 5, cols: 5 });
    assert!(count());
    screens.set_waiting("r2", true);
    assert!(count());
    screens.end(2, 0);
    assert!(count());
    screens.feed(9, b"nobody's");
    assert!(!count());
}

#[test]
fn a_resize_changes_the_screen_s_size() {
    let mut screens = Screens::default();
    screens.open(2, "r2", SIZE);
    screens.resize(2, WindowSize { rows: 5, cols: 40 });
    let state = screens.state(ScreenAsked::Input(2)).unwrap();
    assert_eq!((state.rows, state.cols), (5, 40));
}

#[test]
fn a_rebuilt_screen_takes_the_run_s_own_newest_output() {
    let tail = [
        output(Some(3), None, b"\x1b[2J\x1b[Hfirst"),
        output(None, Some(3), b"user bash 3's"),
        output(Some(4), None, b"another run's"),
        output(Some(3), None, b"\r\nsecond"),
    ];
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), FIRST, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["first", "second", ""]);
}

#[test]
fn a_rebuild_feeds_no_more_than_its_bound_of_the_newest_bytes() {
    let old = vec![b'a'; REBUILD_BYTES];
    let tail = [
        output(Some(3), None, &old),
        output(Some(3), None, b"\x1b[H\x1b[2Jnew"),
    ];
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), FIRST, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["new", "", ""]);
    // One record over the bound: its newest bytes.
    let mut huge = vec![b'b'; REBUILD_BYTES];
    huge.extend_from_slice(b"\x1b[H\x1b[2Jend");
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), FIRST, &[output(Some(3), None, &huge)]);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["end", "", ""]);
}

const WIDE: WindowSize = WindowSize { rows: 4, cols: 20 };

fn size_at(at: u64, size: WindowSize) -> SizeAt {
    SizeAt { at, size }
}

#[test]
fn a_rebuilt_screen_takes_each_size_where_the_live_one_took_it() {
    // Drawn at 10 columns, then at 20 after a resize between the records:
    // the second record's text past column 10 is kept.
    let tail = [
        output_to(Some(3), None, b"\x1b[2J\x1b[Hsmall", Some(10)),
        output_to(Some(3), None, b"\x1b[1;15Hwide", Some(20)),
    ];
    let sizes = [size_at(0, SIZE), size_at(10, WIDE)];
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), &sizes, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!((state.rows, state.cols), (4, 20));
    assert_eq!(state.lines, ["small         wide", "", "", ""]);
}

#[test]
fn a_rebuild_from_the_middle_starts_at_the_size_then_and_ends_at_the_last() {
    // The tail starts after the resize to 20 columns; the terminal was
    // made small again after the last record.
    let tail = [output_to(Some(3), None, b"\x1b[1;15Hwide", Some(30))];
    let sizes = [size_at(0, SIZE), size_at(10, WIDE), size_at(30, SIZE)];
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), &sizes, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!((state.rows, state.cols), (3, 10));
    // Drawn at 20 columns, then cut to 10 by the last size.
    assert_eq!(state.lines, ["", "", ""]);
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), &sizes[..2], &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["              wide", "", "", ""]);
}

#[test]
fn a_rebuild_of_output_that_says_no_offsets_is_drawn_at_the_size_now() {
    let tail = [output(Some(3), None, b"\x1b[1;15Hwide")];
    let sizes = [size_at(0, SIZE), size_at(10, WIDE)];
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), &sizes, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!((state.rows, state.cols), (4, 20));
    assert_eq!(state.lines, ["              wide", "", "", ""]);
}

#[test]
fn a_user_bash_screen_is_rebuilt_from_its_own_output() {
    let tail = [
        output_to(Some(5), None, b"run 5's", Some(4)),
        output_to(None, Some(5), b"bash 5's", Some(8)),
    ];
    let mut screens = Screens::default();
    screens.rebuild((5, "b5-1-1"), FIRST, &tail);
    let state = screens.state(ScreenAsked::Input(5)).unwrap();
    assert_eq!(state.lines, ["bash 5's", "", ""]);
}
