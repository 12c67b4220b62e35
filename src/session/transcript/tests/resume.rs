//! Opening after a record a reader has already taken.

use super::*;

fn open_after(path: &Path, after: Resume) -> (Opened, Vec<Entry>) {
    let mut visited = Vec::new();
    let opened = Transcript::open_with(path, OutputBytes::Kept, Some(after), &mut |e| {
        visited.push(e)
    })
    .unwrap();
    (opened, visited)
}

#[test]
fn an_open_after_a_record_visits_only_the_entries_after_it_and_numbers_on() {
    let path = temp("resume");
    let mut t = open(&path).0.transcript;
    for n in 1..=3 {
        t.append(n, input(n)).unwrap();
    }
    let after = t.last_record().unwrap();
    assert_eq!(after.seq, 3);
    assert_eq!(after.end, t.end_offset());
    let later = [
        t.append(4, output(1, b"four\n")).unwrap(),
        t.append(5, input(5)).unwrap(),
    ];
    drop(t);

    assert!(Transcript::resumable(&path, &after));
    let (opened, visited) = open_after(&path, after);
    same(&visited, &later, "open after record 3");
    assert_eq!(opened.read_from, after.end);
    assert_eq!(opened.entries, 2);
    let mut t = opened.transcript;
    assert_eq!(t.append(6, input(6)).unwrap().seq, 6);
    // Resuming after the very last record visits nothing and still
    // appends after it.
    let last = t.last_record().unwrap();
    drop(t);
    let (opened, visited) = open_after(&path, last);
    assert!(visited.is_empty());
    let mut t = opened.transcript;
    assert_eq!(t.append(7, input(7)).unwrap().seq, 7);
    drop(t);
    assert_eq!(
        seqs(&read_entries(&path).unwrap()),
        (1..=7).collect::<Vec<_>>()
    );
    cleanup(&path);
}

#[test]
fn a_torn_tail_after_the_record_resumed_from_is_cut_as_ever() {
    let path = temp("resume-torn");
    let mut t = open(&path).0.transcript;
    t.append(1, input(1)).unwrap();
    let after = t.last_record().unwrap();
    t.append(2, output(1, &noise(5000, 3))).unwrap();
    drop(t);
    cut_to(&path, std::fs::metadata(&path).unwrap().len() - 10);
    let (opened, visited) = open_after(&path, after);
    assert!(visited.is_empty());
    assert_eq!(opened.torn.unwrap().offset, after.end);
    assert_eq!(opened.transcript.next_seq(), 2);
    cleanup(&path);
}

#[test]
fn a_record_that_is_not_where_it_was_is_not_resumable() {
    let path = temp("resume-check");
    let mut t = open(&path).0.transcript;
    t.append(1, input(1)).unwrap();
    t.append(2, output(1, b"two\n")).unwrap();
    let after = t.last_record().unwrap();
    t.append(3, input(3)).unwrap();
    drop(t);
    assert!(Transcript::resumable(&path, &after));
    let off = |change: fn(&mut Resume)| {
        let mut moved = after;
        change(&mut moved);
        Transcript::resumable(&path, &moved)
    };
    assert!(!off(|r| r.start += 1), "another start");
    assert!(!off(|r| r.end -= 1), "another end");
    assert!(!off(|r| r.seq += 1), "another number");
    assert!(!off(|r| r.start = 0), "the file's header");
    assert!(!off(|r| r.end = u64::MAX), "past the end");

    // Another transcript holding the same entries has another marker.
    let other = temp("resume-other");
    let mut t = open(&other).0.transcript;
    for (at, body) in [(1, input(1)), (2, output(1, b"two\n"))] {
        t.append(at, body).unwrap();
    }
    drop(t);
    assert!(!Transcript::resumable(&other, &after));
    cleanup(&other);

    // A damaged byte inside the record.
    flip(&path, &[(after.start + 30) as usize]);
    assert!(!Transcript::resumable(&path, &after));
    // A file cut before its end.
    cut_to(&path, after.end - 1);
    assert!(!Transcript::resumable(&path, &after));
    assert!(!Transcript::resumable(&path.with_extension("gone"), &after));
    cleanup(&path);
}
