//! Output written once, read back from a spool file of arbitrary bytes:
//! a stored record (kind 3) says where its bytes end, how many there are
//! and their CRC-32; reading it gives exactly those bytes, or a notice
//! with the entry's number in its place; never a panic, never bytes that
//! do not match what the record says.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use eukhe::session::entry::Stream;
use eukhe::session::transcript::{Entry, EntryBody, OutputStore, StoredOutput};
use libfuzzer_sys::fuzz_target;

fn session_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let session = std::env::temp_dir().join(format!("eukhe-fuzz-stored-{}", std::process::id()));
        std::fs::create_dir_all(session.join("spool")).unwrap();
        session
    })
}

fuzz_target!(|data: &[u8]| {
    // The first 13 bytes say what the record claims: where the bytes end,
    // how many, their stream; the rest is the spool file.
    if data.len() < 13 {
        return;
    }
    let end = u32::from_be_bytes(data[0..4].try_into().unwrap()) as u64;
    let len = u32::from_be_bytes(data[4..8].try_into().unwrap()) % (1 << 20);
    let stream = if data[8] & 1 == 0 { Stream::Stdout } else { Stream::Stderr };
    let file = &data[13..];
    // The CRC of what the file holds there, when it can hold it, so the
    // good path is reached too; else the bytes given.
    let crc = (end as usize)
        .checked_sub(len as usize)
        .filter(|&start| end as usize <= file.len() && start <= file.len())
        .map(|start| crc32fast::hash(&file[start..end as usize]))
        .unwrap_or_else(|| u32::from_be_bytes(data[9..13].try_into().unwrap()));
    std::fs::write(session_dir().join("spool/r1.out"), file).unwrap();
    let stored = StoredOutput { job: "r1".into(), len, crc };
    let entry = Entry {
        seq: 7,
        at_ms: 1,
        body: EntryBody::Output {
            input: Some(1),
            stream,
            data: Default::default(),
            spool_end: Some(end),
            bash: None,
        },
    };
    let mut store = OutputStore::beside(&session_dir().join("transcript3"));
    let filled = store.fill(entry, &stored);
    assert_eq!(filled.seq, 7);
    match &filled.body {
        EntryBody::Output { data, .. } => {
            assert_eq!(data.len(), len as usize);
            assert_eq!(crc32fast::hash(data), crc);
            let start = end as usize - len as usize;
            assert_eq!(&file[start..end as usize], &data[..]);
        }
        EntryBody::Notice { text, .. } => assert!(text.contains("are lost")),
        other => panic!("neither output nor a notice: {other:?}"),
    }
});
