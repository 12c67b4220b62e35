//! Output written once: records that point into a job's spool file.

use super::*;
use crate::session::transcript::{read_tail, stream_from};

/// A spool file for job `job` in the session beside `path`, holding one
/// stdout record of `bytes`; the offset after it.
fn spool_with(path: &Path, job: &str, bytes: &[u8]) -> u64 {
    let spool = path.with_file_name("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let mut record = vec![1u8];
    record.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    record.extend_from_slice(bytes);
    std::fs::write(spool.join(format!("{job}.out")), &record).unwrap();
    record.len() as u64
}

fn flood(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"abcdefghij\n"[i % 11]).collect()
}

fn stored(input: u64, data: &[u8], end: u64) -> EntryBody {
    EntryBody::Output {
        input: Some(input),
        stream: Stream::Stdout,
        data: data.to_vec().into(),
        spool_end: Some(end),
        bash: None,
    }
}

/// A fresh transcript beside a spool file for run 1 holding `bytes` as
/// one record, that run's output stored (pointing there, synced or not)
/// as entry 1: the path, the transcript, and the spool offset after it.
fn one_stored(name: &str, bytes: &[u8], sync: bool) -> (PathBuf, Transcript, u64) {
    let path = temp(name);
    let end = spool_with(&path, "r1", bytes);
    let (opened, _) = open(&path);
    let mut t = opened.transcript;
    t.append_stored(1, stored(1, bytes, end), "r1", sync)
        .unwrap();
    (path, t, end)
}

#[test]
fn stored_output_is_read_back_whole_from_the_spool_and_later_from_output() {
    let path = temp("stored");
    let bytes = flood(STORED_FROM_BYTES * 2);
    let end = spool_with(&path, "r1", &bytes);
    let (opened, _) = open(&path);
    let mut t = opened.transcript;
    t.append(1, input(1)).unwrap();
    let written = t
        .append_stored(2, stored(1, &bytes, end), "r1", false)
        .unwrap();
    t.append(3, input(2)).unwrap();
    drop(t);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(
        len < 400,
        "the bytes stay in the spool: the transcript is {len} bytes"
    );
    let all = read_entries(&path).unwrap();
    assert_eq!(all[1], written, "read back with its bytes");
    assert_eq!(read_tail(&path, 2).unwrap(), all[1..].to_vec());
    // The kernel forgot the job: its file is in output/ now.
    std::fs::create_dir_all(path.with_file_name("output")).unwrap();
    std::fs::rename(
        path.with_file_name("spool").join("r1.out"),
        path.with_file_name("output").join("r1.out"),
    )
    .unwrap();
    assert_eq!(read_entries(&path).unwrap(), all);
    assert_eq!(stream_from(&path, 2).unwrap().next(), Some(written));
    // An opener that shows the history (bytes kept) gets them too.
    let (opened, visited) = open(&path);
    assert_eq!(visited, all);
    assert!(opened.damage.is_empty());
    cleanup(&path);
}

#[test]
fn damaged_or_missing_stored_output_is_one_notice_and_the_history_reads_on() {
    let bytes = flood(STORED_FROM_BYTES);
    let (path, mut t, _) = one_stored("stored-damage", &bytes, true);
    t.append(2, input(2)).unwrap();
    drop(t);
    let store = path.with_file_name("spool").join("r1.out");
    let mut spooled = std::fs::read(&store).unwrap();
    spooled[100] ^= 1;
    std::fs::write(&store, &spooled).unwrap();
    let all = read_entries(&path).unwrap();
    assert_eq!(seqs(&all), vec![1, 2]);
    let EntryBody::Notice { text, .. } = &all[0].body else {
        panic!("{:?}", all[0])
    };
    assert!(
        text.starts_with(&format!("{} bytes of run 1's stdout are lost", bytes.len())),
        "{text}"
    );
    assert_eq!(all[1].body, input(2));
    // Never cut, never kept aside: the transcript's own record is good.
    let (opened, _) = open(&path);
    assert!(opened.damage.is_empty() && opened.torn.is_none());
    std::fs::remove_file(&store).unwrap();
    let all = read_entries(&path).unwrap();
    assert!(format!("{:?}", all[0]).contains("neither output/ nor spool/"));
    cleanup(&path);
}

#[test]
fn the_spool_file_is_synced_with_the_transcript_and_a_missing_one_keeps_the_bytes_inline() {
    let bytes = flood(STORED_FROM_BYTES);
    let (path, mut t, end) = one_stored("stored-sync", &bytes, false);
    let handle = t.take_sync_handle().unwrap().expect("a commit is due");
    handle.commit().unwrap();
    t.sync().unwrap();
    // No spool file for r2: its bytes go into the record.
    t.append_stored(2, stored(2, &bytes, end), "r2", true)
        .unwrap();
    drop(t);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > bytes.len() as u64, "r2's bytes are in the transcript");
    let all = read_entries(&path).unwrap();
    assert_eq!(all.len(), 2);
    for entry in &all {
        let EntryBody::Output { data, .. } = &entry.body else {
            panic!("{entry:?}")
        };
        assert_eq!(&data[..], &bytes[..]);
    }
    cleanup(&path);
}

#[test]
fn a_writer_takes_over_the_spool_files_an_earlier_one_may_not_have_synced() {
    let bytes = flood(STORED_FROM_BYTES);
    // A worker that dies before its group commit: a record written, no sync.
    let (path, t, _) = one_stored("stored-takeover", &bytes, false);
    drop(t);
    let (opened, visited) = open(&path);
    assert_eq!(visited.len(), 1);
    assert_eq!(opened.transcript.store_jobs(), vec!["r1"]);
    let mut t = opened.transcript;
    t.append(2, input(2)).unwrap();
    assert!(
        t.store_jobs().is_empty(),
        "synced with the first synced append"
    );
    // A forgotten job's file is not the kernel's any more: not taken over.
    std::fs::create_dir_all(path.with_file_name("output")).unwrap();
    std::fs::rename(
        path.with_file_name("spool").join("r1.out"),
        path.with_file_name("output").join("r1.out"),
    )
    .unwrap();
    let (opened, _) = open(&path);
    assert!(opened.transcript.store_jobs().is_empty());
    cleanup(&path);
}
