use nix::sys::resource::{getrlimit, setrlimit, Resource};

use super::*;

#[test]
fn entries_survive_reopen_in_order() {
    let path = temp("reopen");
    let (opened, entries) = open(&path);
    assert!(entries.is_empty() && opened.torn.is_none() && opened.damage.is_empty());
    assert_eq!(opened.migrated, None);
    let mut t = opened.transcript;
    assert_eq!(t.next_seq(), 1);
    assert_eq!(t.path(), path);
    t.append(1, input(1)).unwrap();
    t.append(2, EntryBody::RunStarted { input: 1 }).unwrap();
    t.append(3, output(1, b"hi\n")).unwrap();
    drop(t);
    let (opened, entries) = open(&path);
    assert_eq!(opened.torn, None);
    assert_eq!(seqs(&entries), vec![1, 2, 3]);
    assert_eq!(entries[2].body, output(1, b"hi\n"));
    let mut t = opened.transcript;
    let finished = EntryBody::RunFinished {
        input: 1,
        status: 0,
        signal: None,
        cancelled: false,
        lost_output: None,
    };
    assert_eq!(t.append(4, finished).unwrap().seq, 4);
    assert_eq!(seqs(&read_entries(&path).unwrap()), vec![1, 2, 3, 4]);
    cleanup(&path);
}

#[test]
fn binary_output_round_trips_byte_exactly() {
    let path = temp("binary");
    let mut t = open(&path).0.transcript;
    let every: Vec<u8> = (0..=255).collect();
    let big = noise(200 << 10, 7);
    let a = t.append(1, output(1, &every)).unwrap();
    let b = t.append(2, output(1, &big)).unwrap();
    let c = t.append(3, output(1, b"")).unwrap();
    drop(t);
    let expected = vec![a, b, c];
    same(&open(&path).1, &expected, "open");
    readers_agree(&path, &expected);
    cleanup(&path);
}

#[test]
fn zeros_are_left_as_holes_and_read_back_as_written() {
    use std::os::unix::fs::MetadataExt;
    let path = temp("holes");
    let mut t = open(&path).0.transcript;
    let zeros = vec![0u8; 4 << 20];
    let mut mixed = noise(10_000, 3);
    mixed.extend(vec![0u8; 1 << 20]);
    mixed.extend(b"end");
    let a = t.append(1, output(1, b"x")).unwrap();
    let b = t.append(2, output(1, &zeros)).unwrap();
    let c = t.append(3, output(1, &mixed)).unwrap();
    let d = t.append(4, output(1, &zeros[..5000])).unwrap();
    t.sync().unwrap();
    drop(t);
    let meta = std::fs::metadata(&path).unwrap();
    // 5 MiB of zeros in a file of over 5 MiB, on disk in far less: the
    // blocks of zeros are holes (the file system allocates none).
    assert!(meta.len() > 5 << 20);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "{} bytes allocated",
        meta.blocks() * 512
    );
    let expected = vec![a, b, c, d];
    same(&open(&path).1, &expected, "open");
    readers_agree(&path, &expected);
    cleanup(&path);
}

#[test]
fn output_numbers_round_trip_and_output_is_stored_binary() {
    let path = temp("numbers");
    let mut t = open(&path).0.transcript;
    let mut expected = Vec::new();
    for (i, (input, bash, spool_end)) in [
        (Some(3), None, Some(0)),
        (None, Some(4), None),
        (None, None, None),
        (Some(u64::MAX), Some(u64::MAX), Some(u64::MAX - 1)),
    ]
    .into_iter()
    .enumerate()
    {
        let stream = if i % 2 == 0 {
            Stream::Stdout
        } else {
            Stream::Stderr
        };
        let body = EntryBody::Output {
            input,
            stream,
            data: format!("chunk {i}").into_bytes().into(),
            spool_end,
            bash,
        };
        expected.push(t.append(100 + i as u64, body).unwrap());
    }
    expected.push(t.append(9, input(1)).unwrap());
    drop(t);
    same(&open(&path).1, &expected, "open");
    readers_agree(&path, &expected);
    let bytes = std::fs::read(&path).unwrap();
    let kinds: Vec<u8> = record_starts(&bytes)
        .iter()
        .map(|&at| bytes[at + 16])
        .collect();
    assert_eq!(kinds, vec![2, 2, 2, 2, 1]);
    cleanup(&path);
}

#[test]
fn an_unrepresentable_output_number_is_refused() {
    let path = temp("unrepresentable");
    let mut t = open(&path).0.transcript;
    let zero = EntryBody::Output {
        input: Some(0),
        stream: Stream::Stdout,
        data: Default::default(),
        spool_end: None,
        bash: None,
    };
    assert!(t.append(1, zero).is_err());
    assert_eq!(t.append(1, input(1)).unwrap().seq, 1);
    cleanup(&path);
}

#[test]
fn a_payload_over_16_mib_is_refused_naming_the_path() {
    let path = temp("huge");
    let mut t = open(&path).0.transcript;
    let len = std::fs::metadata(&path).unwrap().len();
    let error = t
        .append(1, output(1, &vec![b'x'; 16 << 20]))
        .unwrap_err()
        .to_string();
    assert!(error.contains(&path.display().to_string()), "{error}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    assert_eq!(t.append(2, input(1)).unwrap().seq, 1, "took no number");
    cleanup(&path);
}

/// A write that the disk cuts short (here: the file size limit, as a
/// full disk would) leaves no torn record behind: later entries stay
/// readable.
#[test]
fn a_failed_append_is_cut_back_and_later_entries_stay_readable() {
    let path = temp("full");
    let mut transcript = open(&path).0.transcript;
    transcript.append(1, input(1)).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    // This test runs in a process of its own (nextest); the limit makes
    // writes past `len + 16` fail with EFBIG, and SIGXFSZ, which they also
    // raise, is caught here instead of ending the process.
    signal_hook::flag::register(
        libc::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    )
    .unwrap();
    let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).unwrap();
    setrlimit(Resource::RLIMIT_FSIZE, len + 16, hard).unwrap();
    let big = EntryBody::Notice {
        text: "x".repeat(4096),
        restore: None,
        restore_id: None,
    };
    let failed = transcript.append(2, big);
    setrlimit(Resource::RLIMIT_FSIZE, soft, hard).unwrap();
    assert!(failed.is_err());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "cut back");
    transcript.append(3, input(2)).unwrap();
    let (opened, entries) = open(&path);
    assert_eq!(opened.torn, None);
    assert!(opened.damage.is_empty());
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].seq, 2, "the failed entry took no number");
    cleanup(&path);
}

#[test]
fn unsynced_appends_are_synced_on_request() {
    let path = temp("unsynced");
    let mut t = open(&path).0.transcript;
    assert!(!t.has_unsynced());
    t.append_unsynced(1, input(1)).unwrap();
    assert!(t.has_unsynced());
    t.sync().unwrap();
    assert!(!t.has_unsynced());
    t.append_unsynced(2, input(2)).unwrap();
    t.append(3, input(3)).unwrap();
    assert!(!t.has_unsynced(), "a synced append covers earlier ones");
    assert_eq!(seqs(&read_entries(&path).unwrap()), vec![1, 2, 3]);
    cleanup(&path);
}

#[test]
fn files_are_private_and_markers_differ_between_files() {
    use std::os::unix::fs::PermissionsExt;
    let a = temp("marker-a");
    let b = temp("marker-b");
    drop(open(&a));
    drop(open(&b));
    let (a_bytes, b_bytes) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(&a_bytes[..8], b"EUKHETR3");
    assert_eq!(a_bytes.len(), 16);
    assert_ne!(a_bytes[8..16], b_bytes[8..16]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&a), 0o600);
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(open(&a));
    assert_eq!(mode(&a), 0o600, "an older file's permissions are fixed");
    assert_eq!(
        std::fs::read(&a).unwrap(),
        a_bytes,
        "reopening keeps the marker"
    );
    cleanup(&a);
    cleanup(&b);
}

#[test]
fn stream_from_starts_at_a_number() {
    let path = temp("from");
    let mut t = open(&path).0.transcript;
    for i in 1..=10 {
        t.append(i, input(i)).unwrap();
    }
    let from: Vec<u64> = stream_from(&path, 7).unwrap().map(|e| e.seq).collect();
    assert_eq!(from, vec![7, 8, 9, 10]);
    assert_eq!(stream_from(&path, 11).unwrap().count(), 0);
    cleanup(&path);
}

#[test]
fn stream_at_reads_on_from_where_an_entry_ended_or_the_writer_stood() {
    let path = temp("at");
    let mut t = open(&path).0.transcript;
    for i in 1..=4 {
        t.append(i, input(i)).unwrap();
    }
    let resume = t.end_offset();
    for i in 5..=6 {
        t.append(i, input(i)).unwrap();
    }
    let later: Vec<u64> = stream_at(&path, resume, 5)
        .unwrap()
        .map(|e| e.seq)
        .collect();
    assert_eq!(later, vec![5, 6]);
    let mut entries = stream(&path).unwrap();
    let (_, end_of_first) = entries.next_with_end().unwrap().unwrap();
    let rest: Vec<u64> = stream_at(&path, end_of_first, 2)
        .unwrap()
        .map(|e| e.seq)
        .collect();
    assert_eq!(rest, vec![2, 3, 4, 5, 6]);
    cleanup(&path);
}

#[test]
fn a_file_that_is_not_a_transcript_is_refused() {
    let path = temp("not-a-transcript");
    std::fs::write(&path, b"something else entirely").unwrap();
    let error = Transcript::open(&path, &mut |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("transcript3") && error.contains("magic"),
        "{error}"
    );
    assert!(read_entries(&path).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"something else entirely");
    cleanup(&path);
}
