use std::io::{BufWriter, Write};
use std::time::Instant;

use super::*;
use crate::session::transcript::{read, tail};

/// Write `n` entries straight into a new v2 file (much faster than
/// appending each with its own write).
fn write_many(path: &Path, n: u64, body: impl Fn(u64) -> EntryBody) -> Vec<u8> {
    let marker = format::new_marker().unwrap();
    let mut out = BufWriter::new(std::fs::File::create(path).unwrap());
    out.write_all(&format::file_header(&marker)).unwrap();
    let mut record = Vec::new();
    for seq in 1..=n {
        let entry = Entry {
            seq,
            at_ms: seq,
            body: body(seq),
        };
        format::encode(&marker, &entry, &mut record).unwrap();
        out.write_all(&record).unwrap();
    }
    out.flush().unwrap();
    marker.to_vec()
}

#[test]
fn the_tail_of_200000_entries_is_read_quickly() {
    let path = temp("tail-200k");
    write_many(&path, 200_000, |seq| {
        if seq % 2 == 0 {
            input(seq)
        } else {
            output(seq, format!("line {seq}\n").as_bytes())
        }
    });
    let started = Instant::now();
    let tail = read_tail(&path, 100).unwrap();
    let took = started.elapsed();
    println!("read_tail(100) of 200000 entries: {took:?}");
    assert_eq!(seqs(&tail), (199_901..=200_000).collect::<Vec<_>>());
    assert_eq!(tail[99].body, input(200_000));
    assert_eq!(tail[0].body, output(199_901, b"line 199901\n"));
    assert!(took.as_secs_f64() < 2.0, "{took:?}");
    cleanup(&path);
}

#[test]
fn the_tail_agrees_with_reading_forward() {
    let path = temp("tail-agree");
    let mut t = open(&path).0.transcript;
    let mut all = Vec::new();
    readers_agree(&path, &all);
    for i in 1..=40 {
        let body = match i % 4 {
            0 => output(i, &noise(i as usize * 300, i)),
            1 => output(i, &[]),
            _ => input(i),
        };
        all.push(t.append(i, body).unwrap());
        readers_agree(&path, &all);
    }
    cleanup(&path);
}

/// Random damage of every kind (flipped bytes, zeroed runs, cuts,
/// inserted and removed bytes) over a transcript holding copies of
/// itself and of another: reading backward always agrees with reading
/// forward, and nothing but the file's own entries is ever read.
#[test]
fn the_tail_agrees_with_reading_forward_whatever_the_damage() {
    let path = temp("tail-random");
    let mut t = open(&path).0.transcript;
    let mut all = Vec::new();
    for i in 1..=60u64 {
        let body = match i {
            13 | 37 => output(i, &std::fs::read(&path).unwrap()),
            _ if i % 10 == 5 => output(i, &noise(3000, i)),
            _ => input(i),
        };
        all.push(t.append(i, body).unwrap());
    }
    drop(t);
    let whole = std::fs::read(&path).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    for round in 0..300 {
        let mut bytes = whole.clone();
        for _ in 0..1 + random(3) {
            if bytes.len() < 20 {
                break;
            }
            let at = 16 + random(bytes.len() - 16);
            match random(5) {
                0 => bytes[at] ^= 1 << random(8),
                1 => {
                    let end = (at + random(200)).min(bytes.len());
                    bytes[at..end].fill(0);
                }
                2 => bytes.truncate(at),
                3 => {
                    let insert = noise(random(40), round);
                    bytes.splice(at..at, insert);
                }
                _ => {
                    let end = (at + random(60)).min(bytes.len());
                    bytes.drain(at..end);
                }
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let read = read_entries(&path).unwrap();
        let forward = entries_only(&read);
        assert!(seqs(&forward).windows(2).all(|w| w[0] < w[1]));
        for entry in &forward {
            assert!(
                all.contains(entry),
                "round {round}: not an entry: {}",
                entry.seq
            );
        }
        same(&parse(&bytes).entries, &forward, "parse");
        for n in [1, 4, 25, 100] {
            let from = read.len().saturating_sub(n);
            let what = format!("round {round}: read_tail({n})");
            same(&read_tail(&path, n).unwrap(), &read[from..], &what);
        }
    }
    cleanup(&path);
}

/// The same over a file many times longer than its longest record, read
/// as if records could span no more than that: the runs of records that
/// vouch for the last one are then much shorter than the file, as in a
/// file of gigabytes, and copies of the file's own bytes (a run that
/// printed its end) sit inside records near the end.
#[test]
fn reading_backward_far_from_the_start_agrees_with_reading_forward() {
    let path = temp("tail-span");
    let mut t = open(&path).0.transcript;
    let mut all = Vec::new();
    for i in 1..=400u64 {
        let body = match i % 7 {
            0 => {
                let bytes = std::fs::read(&path).unwrap();
                output(i, &bytes[bytes.len().saturating_sub(1500).max(16)..])
            }
            3 => output(i, &noise((i as usize * 37) % 900, i)),
            _ => input(i),
        };
        all.push(t.append(i, body).unwrap());
    }
    drop(t);
    let whole = std::fs::read(&path).unwrap();
    let starts = record_starts(&whole);
    let span = starts
        .iter()
        .zip(starts.iter().skip(1).chain([&whole.len()]))
        .map(|(a, b)| (b - a) as u64)
        .max()
        .unwrap();
    assert!(whole.len() as u64 > 20 * span);
    let backward = |n: usize| tail::backward(&read::locate(&path).unwrap(), n, span).unwrap();
    for n in [1, 10, 399, 400, 500] {
        let from = all.len().saturating_sub(n);
        same(
            &backward(n).expect("read backward"),
            &all[from..],
            "undamaged",
        );
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random = |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    let (mut tried, mut taken) = (0, 0);
    for round in 0..300 {
        let mut bytes = whole.clone();
        // Damage near the end, where reading backward looks.
        for _ in 0..1 + random(2) {
            let at = bytes.len() - 1 - random(6 * span as usize).min(bytes.len() - 17);
            match random(4) {
                0 => bytes[at] ^= 1 << random(8),
                1 => {
                    let end = (at + random(100)).min(bytes.len());
                    bytes[at..end].fill(0);
                }
                2 => bytes.truncate(at),
                _ => {
                    let end = (at + random(60)).min(bytes.len());
                    bytes.drain(at..end);
                }
            }
        }
        std::fs::write(&path, &bytes).unwrap();
        let forward = read_entries(&path).unwrap();
        for entry in &entries_only(&forward) {
            assert!(
                all.contains(entry),
                "round {round}: not an entry: {}",
                entry.seq
            );
        }
        for n in [1, 5, 40] {
            tried += 1;
            if let Some(tail) = backward(n) {
                taken += 1;
                let from = forward.len().saturating_sub(n);
                same(&tail, &forward[from..], &format!("round {round}: {n}"));
            }
        }
    }
    println!("read backward {taken} times of {tried}");
    assert!(taken * 4 > tried, "read backward {taken} times of {tried}");
    cleanup(&path);
}
