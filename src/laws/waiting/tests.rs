use super::*;

const BLOCKED: Seen = Seen {
    foreground: Foreground::BlockedOnInput,
    unread_key_bytes: 0,
};
const BUSY: Seen = Seen {
    foreground: Foreground::Busy,
    unread_key_bytes: 0,
};

#[test]
fn a_blocked_reader_that_wrote_nothing_for_the_quiet_waits() {
    assert_eq!(
        verdict(BLOCKED, 1_000, 1_000 + WAITING_QUIET_MS),
        Verdict::Waiting
    );
    assert_eq!(
        verdict(BLOCKED, 1_000, 1_000 + WAITING_QUIET_MS - 1),
        Verdict::Writing {
            quiet_at_ms: 1_000 + WAITING_QUIET_MS
        }
    );
}

#[test]
fn a_busy_or_unknown_group_never_waits() {
    for foreground in [Foreground::Busy, Foreground::Unknown] {
        let seen = Seen {
            foreground,
            unread_key_bytes: 0,
        };
        assert_eq!(verdict(seen, 0, 1_000_000), Verdict::Busy);
    }
}

#[test]
fn keys_the_program_has_not_read_mean_it_will_wake() {
    let seen = Seen {
        unread_key_bytes: 3,
        ..BLOCKED
    };
    assert_eq!(verdict(seen, 0, 1_000_000), Verdict::KeysUnread);
}

#[test]
fn a_clock_before_the_last_output_is_not_quiet() {
    assert!(matches!(
        verdict(BLOCKED, 5_000, 10),
        Verdict::Writing { .. }
    ));
}

#[test]
fn the_first_look_comes_once_the_quiet_after_the_start_has_passed() {
    let watch = WaitingWatch::new(10_000);
    assert_eq!(watch.poll_timeout(), 10_000 + WAITING_QUIET_MS);
    assert!(!watch.due(10_000 + WAITING_QUIET_MS - 1));
    assert!(watch.due(10_000 + WAITING_QUIET_MS));
    assert!(!watch.waiting());
}

#[test]
fn output_moves_the_next_look_to_the_quiet_after_it() {
    let mut watch = WaitingWatch::new(0);
    for at in [100, 350, 900] {
        watch.output(at);
        assert_eq!(watch.poll_timeout(), at + WAITING_QUIET_MS);
    }
    // Output reported late (an older time) never moves the look earlier.
    watch.output(200);
    assert_eq!(watch.poll_timeout(), 900 + WAITING_QUIET_MS);
}

/// The looks a watch asks for while the verdict never changes.
fn looks_while(seen: Seen, count: usize) -> Vec<u64> {
    let mut watch = WaitingWatch::new(0);
    let mut looks = Vec::new();
    for _ in 0..count {
        let at = watch.poll_timeout();
        looks.push(at);
        watch.looked(seen, at);
    }
    looks
}

#[test]
fn while_nothing_changes_the_looks_back_off_to_the_longest_pause() {
    let q = WAITING_QUIET_MS;
    let f = WAITING_RECHECK_FIRST_MS;
    let looks = looks_while(BUSY, 8);
    let gaps: Vec<u64> = looks.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(looks[0], q);
    assert_eq!(gaps[0], f);
    assert_eq!(gaps[1], 2 * f);
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
    assert_eq!(*gaps.last().unwrap(), WAITING_RECHECK_MAX_MS);
    // Waiting that lasts is looked at on the same schedule.
    assert_eq!(looks_while(BLOCKED, 8), looks);
}

#[test]
fn a_program_that_stops_to_read_is_waiting_after_the_quiet() {
    // `make` runs for a while, then a prompt is written and read.
    let mut watch = WaitingWatch::new(0);
    let at = watch.poll_timeout();
    assert_eq!(watch.looked(BUSY, at), Verdict::Busy);
    watch.output(2_000);
    assert!(!watch.waiting());
    let at = watch.poll_timeout();
    assert_eq!(at, 2_000 + WAITING_QUIET_MS);
    assert_eq!(watch.looked(BLOCKED, at), Verdict::Waiting);
    assert!(watch.waiting());
}

#[test]
fn output_or_keys_end_the_waiting_until_the_next_look() {
    let mut watch = WaitingWatch::new(0);
    let at = watch.poll_timeout();
    watch.looked(BLOCKED, at);
    assert!(watch.waiting());
    watch.output(at + 10);
    assert!(!watch.waiting());
    let again = watch.poll_timeout();
    assert_eq!(again, at + 10 + WAITING_QUIET_MS);
    watch.looked(BLOCKED, again);
    assert!(watch.waiting());
    watch.nudged(again + 1);
    assert!(!watch.waiting());
    assert_eq!(watch.poll_timeout(), again + 1 + WAITING_QUIET_MS);
    // The keys are still unread at that look: not waiting, look again.
    let unread = Seen {
        unread_key_bytes: 1,
        ..BLOCKED
    };
    let look = watch.poll_timeout();
    assert_eq!(watch.looked(unread, look), Verdict::KeysUnread);
    assert_eq!(watch.poll_timeout(), look + WAITING_RECHECK_FIRST_MS);
}

#[test]
fn a_change_of_verdict_brings_the_looks_back_to_the_first_pause() {
    let mut watch = WaitingWatch::new(0);
    let mut at = 0;
    for _ in 0..6 {
        at = watch.poll_timeout();
        watch.looked(BUSY, at);
    }
    assert_eq!(watch.poll_timeout() - at, WAITING_RECHECK_MAX_MS);
    let at = watch.poll_timeout();
    assert_eq!(watch.looked(BLOCKED, at), Verdict::Waiting);
    assert_eq!(watch.poll_timeout(), at + WAITING_RECHECK_FIRST_MS);
}

#[test]
fn a_look_before_the_quiet_waits_for_its_end() {
    let mut watch = WaitingWatch::new(0);
    watch.output(1_000);
    // A look the caller takes early (another event woke it).
    assert_eq!(
        watch.looked(BLOCKED, 1_100),
        Verdict::Writing {
            quiet_at_ms: 1_000 + WAITING_QUIET_MS
        }
    );
    assert_eq!(watch.poll_timeout(), 1_000 + WAITING_QUIET_MS);
}
