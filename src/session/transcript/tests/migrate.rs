//! The first format's file, `tests/fixtures/transcript-v1`, written by
//! the build before v2 (its text rendering is `transcript-v1.log`), and a
//! v2 file, `tests/fixtures/transcript-v2`, written by the build before v3
//! (`transcript-v2.log`).

use super::*;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/transcript-v1");

/// A directory holding only the fixture, as `transcript`; the v2 path.
fn with_v1() -> (PathBuf, Vec<u8>) {
    let path = temp("v1");
    let v1 = std::fs::read(FIXTURE).unwrap();
    std::fs::write(path.with_file_name("transcript"), &v1).unwrap();
    (path, v1)
}

fn check_fixture(entries: &[Entry]) {
    assert_eq!(seqs(entries), (1..=9).collect::<Vec<_>>());
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| match &e.body {
            EntryBody::Bash { .. } => "bash",
            EntryBody::Output { .. } => "output",
            EntryBody::BashFinished { .. } => "bash_finished",
            EntryBody::Input { .. } => "input",
            EntryBody::RunStarted { .. } => "run_started",
            EntryBody::RunFinished { .. } => "run_finished",
            EntryBody::Notice { .. } => "notice",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "bash",
            "output",
            "output",
            "bash_finished",
            "input",
            "run_started",
            "output",
            "run_finished",
            "notice"
        ]
    );
    let out = |i: usize| match &entries[i].body {
        EntryBody::Output {
            input,
            stream,
            data,
            spool_end,
            ..
        } => (*input, *stream, data.to_vec(), *spool_end),
        other => panic!("not output: {other:?}"),
    };
    assert_eq!(
        out(1),
        (
            None,
            Stream::Stdout,
            "héllo wörld\nno newline".as_bytes().to_vec(),
            None
        )
    );
    assert_eq!(
        out(2),
        (None, Stream::Stderr, b"to-stderr\n".to_vec(), None)
    );
    assert_eq!(
        out(6),
        (Some(1), Stream::Stdout, b"queued run\n".to_vec(), Some(16))
    );
    assert_eq!(
        entries[4].body,
        EntryBody::Input {
            input: 1,
            text: "echo queued run; exit 3".into(),
            tty: None,
        }
    );
    assert!(matches!(
        entries[7].body,
        EntryBody::RunFinished {
            input: 1,
            status: 3,
            ..
        }
    ));
    assert!(matches!(
        entries[3].body,
        EntryBody::BashFinished { status: 0, .. }
    ));
}

#[test]
fn the_first_format_is_migrated_once_and_left_as_it_is() {
    let (path, v1) = with_v1();
    let (opened, entries) = open(&path);
    assert_eq!(opened.migrated, Some(9));
    check_fixture(&entries);
    assert!(opened.torn.is_none() && opened.damage.is_empty());
    assert_eq!(
        std::fs::read(path.with_file_name("transcript")).unwrap(),
        v1
    );
    assert!(!path.with_file_name("transcript3.tmp").exists());
    let mut t = opened.transcript;
    assert_eq!(t.append(5, input(2)).unwrap().seq, 10);
    drop(t);
    let (opened, entries) = open(&path);
    assert_eq!(opened.migrated, None, "not migrated again");
    assert_eq!(seqs(&entries), (1..=10).collect::<Vec<_>>());
    check_fixture(&entries[..9]);
    drop(opened);
    readers_agree(&path, &entries);
    assert_eq!(
        std::fs::read(path.with_file_name("transcript")).unwrap(),
        v1
    );
    cleanup(&path);
}

#[test]
fn readers_read_the_first_format_until_it_is_migrated() {
    let (path, v1) = with_v1();
    let entries = read_entries(&path).unwrap();
    check_fixture(&entries);
    readers_agree(&path, &entries);
    assert!(!path.exists(), "readers create nothing");
    assert_eq!(
        std::fs::read(path.with_file_name("transcript")).unwrap(),
        v1
    );
    cleanup(&path);
}

#[test]
fn the_first_format_is_read_up_to_its_first_bad_record() {
    let (path, mut v1) = with_v1();
    // The fourth record's payload.
    let mut at = 0;
    for _ in 0..3 {
        at += 8 + u32::from_be_bytes(v1[at..at + 4].try_into().unwrap()) as usize;
    }
    v1[at + 12] ^= 1;
    std::fs::write(path.with_file_name("transcript"), &v1).unwrap();
    assert_eq!(seqs(&read_entries(&path).unwrap()), vec![1, 2, 3]);
    let (opened, entries) = open(&path);
    assert_eq!(opened.migrated, Some(3));
    assert_eq!(seqs(&entries), vec![1, 2, 3]);
    cleanup(&path);
}

#[test]
fn no_transcript_reads_as_empty() {
    let path = temp("none");
    assert!(read_entries(&path).unwrap().is_empty());
    assert_eq!(stream(&path).unwrap().count(), 0);
    assert!(read_tail(&path, 10).unwrap().is_empty());
    assert!(!path.exists());
    cleanup(&path);
}

const FIXTURE_V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/transcript-v2");

#[test]
fn a_v2_file_is_read_as_it_is_then_copied_once_with_its_records_and_marker() {
    let path = temp("v2");
    let v2 = std::fs::read(FIXTURE_V2).unwrap();
    assert_eq!(&v2[..8], b"EUKHETR2");
    std::fs::write(path.with_file_name("transcript2"), &v2).unwrap();
    let before = read_entries(&path).unwrap();
    assert_eq!(before.len(), 14, "{before:#?}");
    assert!(before.iter().any(|e| matches!(
        &e.body,
        EntryBody::Output { data, .. } if data.len() > 40_000
    )));
    let (opened, visited) = open(&path);
    assert_eq!(visited, before);
    assert!(opened.torn.is_none() && opened.damage.is_empty());
    let v3 = std::fs::read(&path).unwrap();
    assert_eq!(&v3[..8], b"EUKHETR3");
    assert_eq!(v3[8..], v2[8..], "the same marker and records");
    let mut t = opened.transcript;
    assert_eq!(t.append(5, input(9)).unwrap().seq, 15);
    drop(t);
    assert_eq!(
        std::fs::read(path.with_file_name("transcript2")).unwrap(),
        v2,
        "left as it is, for older builds"
    );
    let (_, after) = open(&path);
    assert_eq!(after.len(), 15, "copied once");
    cleanup(&path);
}
