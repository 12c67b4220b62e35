use super::*;

use crate::session::entry::Stream;

const SIZE: WindowSize = WindowSize { rows: 3, cols: 10 };

fn current(run: Option<RunId>) -> ScreenAsked {
    ScreenAsked::Current { current: run }
}

fn output(input: Option<RunId>, bash: Option<RunId>, data: &[u8]) -> Entry {
    Entry {
        seq: 1,
        at_ms: 0,
        body: EntryBody::Output {
            input,
            stream: Stream::Stdout,
            data: bytes::Bytes::copy_from_slice(data),
            spool_end: None,
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
    screens.rebuild((3, "r3"), SIZE, &tail);
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
    screens.rebuild((3, "r3"), SIZE, &tail);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["new", "", ""]);
    // One record over the bound: its newest bytes.
    let mut huge = vec![b'b'; REBUILD_BYTES];
    huge.extend_from_slice(b"\x1b[H\x1b[2Jend");
    let mut screens = Screens::default();
    screens.rebuild((3, "r3"), SIZE, &[output(Some(3), None, &huge)]);
    let state = screens.state(ScreenAsked::Input(3)).unwrap();
    assert_eq!(state.lines, ["end", "", ""]);
}
