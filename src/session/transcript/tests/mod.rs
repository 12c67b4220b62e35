//! Tests of the transcript, each in a directory of its own.

mod damage;
mod embedded;
mod fuzz;
mod migrate;
mod resume;
mod roundtrip;
mod stored;
mod tail;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;
use crate::session::entry::Stream;

/// The v2 path in a fresh, empty directory.
fn temp(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "eukhe-transcript-{}-{n}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("transcript3")
}

fn cleanup(path: &Path) {
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Open for writing, collecting the visited entries.
fn open(path: &Path) -> (Opened, Vec<Entry>) {
    let mut visited = Vec::new();
    let opened = Transcript::open(path, &mut |e| visited.push(e)).unwrap();
    assert_eq!(opened.entries, visited.len() as u64);
    (opened, visited)
}

fn input(input: u64) -> EntryBody {
    EntryBody::Input {
        input,
        text: format!("input {input}"),
        tty: None,
    }
}

fn output(input: u64, data: &[u8]) -> EntryBody {
    EntryBody::Output {
        input: Some(input),
        stream: Stream::Stdout,
        data: data.to_vec().into(),
        spool_end: Some(data.len() as u64),
        bash: None,
    }
}

fn seqs(entries: &[Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.seq).collect()
}

/// Where each record of a v2 file starts, walking the lengths of its
/// headers from the first on (the file must be undamaged).
fn record_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 16;
    while at < bytes.len() {
        starts.push(at);
        let len = u32::from_be_bytes(bytes[at + 17..at + 21].try_into().unwrap()) as usize;
        at += 25 + len;
    }
    starts
}

fn flip(path: &Path, offsets: &[usize]) {
    let mut bytes = std::fs::read(path).unwrap();
    for &at in offsets {
        bytes[at] ^= 0x5a;
    }
    std::fs::write(path, bytes).unwrap();
}

/// Cut the file at `path` to `len` bytes, as a crash or a lost write would.
fn cut_to(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Deterministic bytes of every value.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// Equal entries, or a failure that names their numbers (entries with
/// big outputs are too long to print).
#[track_caller]
/// `all` without the entries numbered in `lost`.
fn without(all: &[Entry], lost: &[u64]) -> Vec<Entry> {
    all.iter()
        .filter(|e| !lost.contains(&e.seq))
        .cloned()
        .collect()
}

fn same(actual: &[Entry], expected: &[Entry], what: &str) {
    assert_eq!(seqs(actual), seqs(expected), "{what}: numbers");
    for (a, e) in actual.iter().zip(expected) {
        assert!(a == e, "{what}: entry {} differs", e.seq);
    }
}

/// Every reader agrees on what the transcript at `path` holds: the
/// `expected` entries, in order, with a notice in the place of each
/// damaged region (returned: the regions, as offset and length).
#[track_caller]
fn readers_agree(path: &Path, expected: &[Entry]) -> Vec<(u64, u64)> {
    let read = read_entries(path).unwrap();
    let (notices, entries): (Vec<Entry>, Vec<Entry>) =
        read.iter().cloned().partition(is_damage_notice);
    same(&entries, expected, "read_entries");
    same(&stream(path).unwrap().collect::<Vec<_>>(), &read, "stream");
    for n in [1, 3, 10, read.len(), read.len() + 5] {
        let from = read.len().saturating_sub(n);
        same(
            &read_tail(path, n).unwrap(),
            &read[from..],
            &format!("read_tail({n})"),
        );
    }
    notices.iter().map(damaged_region_of).collect()
}

/// `read` without its damage notices.
fn entries_only(read: &[Entry]) -> Vec<Entry> {
    read.iter()
        .filter(|e| !is_damage_notice(e))
        .cloned()
        .collect()
}

fn is_damage_notice(entry: &Entry) -> bool {
    crate::session::log_query::is_damage_notice(entry)
}

/// The region a damage notice names.
fn damaged_region_of(entry: &Entry) -> (u64, u64) {
    match &entry.body {
        EntryBody::Notice { text, .. } => crate::session::notices::damaged_region(text).unwrap(),
        _ => panic!("not a notice: {entry:?}"),
    }
}
