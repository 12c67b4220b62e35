//! Output that holds transcript records (a run that printed a
//! transcript, even its own) is never read as records.

use super::*;

/// A transcript of `n` entries of its own, as bytes.
fn other_transcript(n: u64) -> Vec<u8> {
    let path = temp("other");
    let mut t = open(&path).0.transcript;
    for i in 1..=n {
        t.append(
            i,
            EntryBody::Notice {
                text: format!("other {i}"),
                restore: None,
                restore_id: None,
            },
        )
        .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    cleanup(&path);
    bytes
}

/// 30 entries, the other transcript as output, this file's own bytes as
/// output, then 8 more entries.
fn with_copies(path: &Path) -> Vec<Entry> {
    let mut t = open(path).0.transcript;
    let mut all: Vec<Entry> = (1..=30).map(|i| t.append(i, input(i)).unwrap()).collect();
    all.push(t.append(31, output(31, &other_transcript(50))).unwrap());
    let own = std::fs::read(path).unwrap();
    all.push(t.append(32, output(32, &own)).unwrap());
    all.extend((33..=40).map(|i| t.append(i, input(i)).unwrap()));
    all
}

fn no_copies_in(entries: &[Entry], all: &[Entry]) {
    for entry in entries {
        assert!(all.contains(entry), "not an entry of the file: {entry:?}");
    }
    assert!(seqs(entries).windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn records_inside_damaged_output_are_never_read() {
    // (damaged records, entries lost). When both are damaged, 31 comes
    // back from the copy of it that 32 holds, as it was: a copy numbered
    // above the last good entry is as good as the record it copies.
    let cases: [(&[usize], &[u64]); 3] = [(&[31], &[31]), (&[32], &[32]), (&[31, 32], &[32])];
    for (damaged, lost) in cases {
        let path = temp("embedded");
        let all = with_copies(&path);
        readers_agree(&path, &all);
        let starts = record_starts(&std::fs::read(&path).unwrap());
        let at: Vec<usize> = damaged.iter().map(|&seq| starts[seq - 1] + 1).collect();
        flip(&path, &at);
        let expected = without(&all, lost);
        let regions = readers_agree(&path, &expected);
        assert_eq!(regions.len(), 1, "adjacent damage is one region");
        let (opened, entries) = open(&path);
        no_copies_in(&entries, &all);
        same(&entries, &expected, &format!("open, damaged {damaged:?}"));
        assert_eq!(opened.damaged, regions, "the open reads the same region");
        assert!(opened.damage.is_empty(), "copied aside by the first reader");
        drop(opened);
        let read = read_entries(&path).unwrap();
        same(
            &read_tail(&path, 10).unwrap(),
            &read[read.len() - 10..],
            "read_tail",
        );
        cleanup(&path);
    }
}

#[test]
fn copies_that_end_the_last_record_are_not_read_from_the_end() {
    for own in [true, false] {
        let path = temp("copy-last");
        let mut t = open(&path).0.transcript;
        let mut all: Vec<Entry> = (1..=30).map(|i| t.append(i, input(i)).unwrap()).collect();
        let copy = if own {
            std::fs::read(&path).unwrap()
        } else {
            other_transcript(40)
        };
        all.push(t.append(31, output(31, &copy)).unwrap());
        drop(t);
        readers_agree(&path, &all);
        same(&open(&path).1, &all, "open");
        cleanup(&path);
    }
}

#[test]
fn a_torn_record_holding_copies_is_never_read() {
    let path = temp("torn-copy");
    let mut t = open(&path).0.transcript;
    let mut all: Vec<Entry> = (1..=30).map(|i| t.append(i, input(i)).unwrap()).collect();
    all.push(t.append(31, output(31, &[])).unwrap());
    let own = std::fs::read(&path).unwrap();
    t.append(32, output(32, &[&own[..], &own[..]].concat()))
        .unwrap();
    drop(t);
    let whole = std::fs::read(&path).unwrap();
    let last = *record_starts(&whole).last().unwrap();
    let payload = last + 25 + 33;
    // Every place a copied record ends (where the torn end looks most like
    // a record's), and some places inside records.
    let mut cuts: Vec<usize> = record_starts(&own[..])
        .into_iter()
        .chain(record_starts(&own[..]).into_iter().map(|at| at + own.len()))
        .map(|at| payload + at)
        .collect();
    cuts.extend([payload + own.len(), whole.len() - 1, last + 10, last + 30]);
    cuts.extend((payload..whole.len()).step_by(97));
    for cut in cuts {
        std::fs::write(&path, &whole[..cut]).unwrap();
        readers_agree(&path, &all);
        let (opened, entries) = open(&path);
        same(&entries, &all, &format!("cut at {cut}"));
        let torn = TornTail {
            offset: last as u64,
            bytes: (cut - last) as u64,
        };
        assert_eq!(opened.torn, Some(torn));
    }
    cleanup(&path);
}
