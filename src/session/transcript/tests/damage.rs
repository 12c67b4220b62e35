use std::os::unix::fs::PermissionsExt;

use super::*;

/// 100 entries, output and JSON mixed; returns them.
fn hundred(path: &Path) -> Vec<Entry> {
    let mut t = open(path).0.transcript;
    (1..=100)
        .map(|i| {
            let body = if i % 3 == 0 {
                output(i, format!("output {i}\n").as_bytes())
            } else {
                input(i)
            };
            t.append(i, body).unwrap()
        })
        .collect()
}

#[test]
fn a_torn_tail_is_cut_and_reported_once() {
    // A partial header, a whole header with part of its payload, zeros.
    for (name, tail) in [
        ("header", None),
        ("payload", Some(9)),
        ("zeros", Some(usize::MAX)),
    ] {
        let path = temp(&format!("torn-{name}"));
        let mut t = open(&path).0.transcript;
        t.append(1, input(1)).unwrap();
        t.append(2, input(2)).unwrap();
        drop(t);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = record_starts(&bytes)[1];
        let good = bytes.len();
        let torn = match tail {
            None => bytes[second..second + 20].to_vec(),
            Some(usize::MAX) => vec![0; 300],
            Some(n) => bytes[second..bytes.len() - n].to_vec(),
        };
        bytes.extend_from_slice(&torn);
        std::fs::write(&path, &bytes).unwrap();
        // Readers leave it alone.
        assert_eq!(seqs(&read_entries(&path).unwrap()), vec![1, 2]);
        assert_eq!(seqs(&read_tail(&path, 5).unwrap()), vec![1, 2]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
        let (opened, entries) = open(&path);
        assert_eq!(seqs(&entries), vec![1, 2]);
        let expected = TornTail {
            offset: good as u64,
            bytes: torn.len() as u64,
        };
        assert_eq!(opened.torn, Some(expected), "{name}");
        assert!(opened.damage.is_empty());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good as u64);
        // The bytes cut off are kept aside first.
        let kept = files::damaged_path(&path, good as u64);
        assert_eq!(std::fs::read(&kept).unwrap(), torn, "{name}");
        assert_eq!(opened.transcript.next_seq(), 3);
        drop(opened);
        let (opened, entries) = open(&path);
        assert_eq!((opened.torn, entries.len()), (None, 2));
        cleanup(&path);
    }
}

#[test]
fn mid_file_damage_is_kept_aside_once_and_every_other_entry_stays() {
    let path = temp("mid");
    let all = hundred(&path);
    let bytes = std::fs::read(&path).unwrap();
    let starts = record_starts(&bytes);
    let (start, end) = (starts[39], starts[40]);
    flip(&path, &[start + 30, start + 40]);
    let damaged = std::fs::read(&path).unwrap();
    let expected: Vec<Entry> = all.iter().filter(|e| e.seq != 40).cloned().collect();

    let (opened, entries) = open(&path);
    same(&entries, &expected, "open");
    assert_eq!(opened.torn, None);
    let kept = path.with_file_name(format!("transcript.damaged-{start}"));
    assert_eq!(
        opened.damage,
        vec![Damage {
            offset: start as u64,
            bytes: (end - start) as u64,
            kept: kept.clone(),
        }]
    );
    let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(std::fs::read(&kept).unwrap(), &damaged[start..end]);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        damaged,
        "not cut, not changed"
    );
    assert_eq!(opened.transcript.next_seq(), 101);
    drop(opened);

    let (opened, entries) = open(&path);
    assert!(opened.damage.is_empty(), "reported once");
    same(&entries, &expected, "open");
    drop(opened);
    let regions = readers_agree(&path, &expected);
    assert_eq!(regions, vec![(start as u64, (end - start) as u64)]);
    cleanup(&path);
}

#[test]
fn damage_in_a_record_header_is_resynchronised_past() {
    // (record index, byte of its header): marker bytes, the number, the
    // length made larger (past the end), changed in its low byte, made
    // too large for any record, and the markers of two records in a row.
    let cases: [(&str, &[(usize, usize)]); 6] = [
        ("marker", &[(49, 0), (49, 5)]),
        ("seq", &[(49, 15)]),
        ("len-past-end", &[(49, 19)]),
        ("len-low", &[(49, 20)]),
        ("len-huge", &[(49, 17)]),
        ("two", &[(49, 3), (50, 2)]),
    ];
    for (name, flips) in cases {
        let path = temp(&format!("header-{name}"));
        let all = hundred(&path);
        let starts = record_starts(&std::fs::read(&path).unwrap());
        let lost: Vec<u64> = flips.iter().map(|&(i, _)| i as u64 + 1).collect();
        let at: Vec<usize> = flips.iter().map(|&(i, o)| starts[i] + o).collect();
        flip(&path, &at);
        let expected = without(&all, &lost);
        let regions = readers_agree(&path, &expected);
        assert_eq!(regions.len(), 1, "{name}");
        assert_eq!(regions[0].0, starts[49] as u64, "{name}");
        let kept = path.with_file_name(format!("transcript.damaged-{}", starts[49]));
        assert!(kept.exists(), "{name}: copied aside by the first reader");
        let (opened, entries) = open(&path);
        same(&entries, &expected, name);
        assert_eq!(opened.damaged, regions, "{name}");
        assert!(opened.damage.is_empty(), "{name}: copied once");
        assert_eq!(opened.torn, None);
        cleanup(&path);
    }
}

#[test]
fn a_bad_complete_last_record_is_kept_not_cut_and_appends_go_after_it() {
    let path = temp("bad-last");
    let all = hundred(&path);
    let bytes = std::fs::read(&path).unwrap();
    let last = *record_starts(&bytes).last().unwrap();
    flip(&path, &[bytes.len() - 2]);
    let expected = &all[..99];
    let regions = readers_agree(&path, expected);
    assert_eq!(regions, vec![(last as u64, (bytes.len() - last) as u64)]);
    let (opened, entries) = open(&path);
    same(&entries, expected, "open");
    assert_eq!(opened.torn, None);
    assert_eq!(opened.damaged, regions);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes.len() as u64);
    let mut t = opened.transcript;
    let next = t.append(7, input(7)).unwrap();
    drop(t);
    let (opened, entries) = open(&path);
    assert!(opened.damage.is_empty(), "reported once");
    assert_eq!(entries.last(), Some(&next));
    assert_eq!(entries.len(), 100);
    drop(opened);
    assert_eq!(readers_agree(&path, &entries), regions, "still one region");
    cleanup(&path);
}

#[test]
fn a_torn_header_of_the_file_is_started_afresh() {
    let path = temp("torn-file-header");
    std::fs::write(&path, b"EUKHE").unwrap();
    assert!(read_entries(&path).unwrap().is_empty());
    let (opened, entries) = open(&path);
    assert!(entries.is_empty());
    assert_eq!(
        opened.torn,
        Some(TornTail {
            offset: 0,
            bytes: 5
        })
    );
    // What there was is kept aside.
    let kept = files::damaged_path(&path, 0);
    assert_eq!(std::fs::read(kept).unwrap(), b"EUKHE");
    let mut t = opened.transcript;
    t.append(1, input(1)).unwrap();
    assert_eq!(read_entries(&path).unwrap().len(), 1);
    cleanup(&path);
}

#[test]
fn parse_reports_damage_and_torn_tails() {
    let path = temp("parse");
    let all = hundred(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    let starts = record_starts(&bytes);
    bytes[starts[10] + 30] ^= 1;
    let good_end = bytes.len() as u64;
    bytes.extend_from_within(starts[5]..starts[5] + 20);
    let parsed = parse(&bytes);
    assert_eq!(parsed.entries.len(), 99);
    assert_eq!(parsed.entries[10].seq, 12);
    assert_eq!(parsed.entries[..10], all[..10]);
    let damage = (starts[10] as u64, (starts[11] - starts[10]) as u64);
    assert_eq!(parsed.damage, vec![damage]);
    assert_eq!(parsed.torn_at, Some(good_end));
    assert_eq!(parsed.end, good_end);
    assert_eq!(parse(&bytes[..parsed.end as usize]).entries, parsed.entries);
    assert_eq!(parse(b"EUKH").torn_at, Some(0));
    assert_eq!(parse(b"not a transcript at all").damage, vec![(0, 23)]);
    cleanup(&path);
}

#[test]
fn a_reader_resuming_from_an_earlier_record_sees_no_damage_in_good_records() {
    // A client fed live entries, then from the file at the last place it
    // read the file: the records between are good and already seen.
    let path = temp("resume-earlier");
    let all = hundred(&path);
    let starts = record_starts(&std::fs::read(&path).unwrap());
    let mut entries = stream_at(&path, starts[10] as u64, 51).unwrap();
    let mut read = Vec::new();
    while let Some((entry, _)) = entries.next_with_end().unwrap() {
        read.push(entry);
    }
    same(&read, &all[50..], "resumed");
    assert!(copies_beside(&path).is_empty(), "nothing copied aside");
    // Damage just where a reader resumes is shown to it.
    let (start, end) = (starts[60], starts[61]);
    flip(&path, &[start + 30]);
    let mut entries = stream_at(&path, start as u64, 61).unwrap();
    let (notice, region_end) = entries.next_with_end().unwrap().unwrap();
    assert!(is_damage_notice(&notice), "{notice:?}");
    assert_eq!((notice.seq, region_end), (60, end as u64));
    assert_eq!(entries.next_entry().unwrap().map(|e| e.seq), Some(62));
    cleanup(&path);
}

fn copies_beside(path: &Path) -> Vec<String> {
    std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("transcript.damaged-"))
        .collect()
}

#[test]
fn a_torn_tail_is_found_reading_backward_and_damage_is_not_taken_for_one() {
    let path = temp("torn-tail-found");
    hundred(&path);
    let whole = std::fs::read(&path).unwrap();
    let last = *record_starts(&whole).last().unwrap();
    assert_eq!(torn_tail(&path).unwrap(), None, "intact");
    // Cut through the last record.
    std::fs::write(&path, &whole[..last + 30]).unwrap();
    assert_eq!(torn_tail(&path).unwrap(), Some((last as u64, 30)));
    // Only a header and part of a first record.
    std::fs::write(&path, &whole[..40]).unwrap();
    assert_eq!(torn_tail(&path).unwrap(), Some((16, 24)));
    // A complete last record that is damaged is damage, shown where it is.
    let mut damaged = whole.clone();
    *damaged.last_mut().unwrap() ^= 0x5a;
    std::fs::write(&path, &damaged).unwrap();
    assert_eq!(torn_tail(&path).unwrap(), None);
    cleanup(&path);
}
