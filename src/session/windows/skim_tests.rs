//! A grep through the filter against the same grep reading everything,
//! on an output of several blocks of both streams, written as the worker
//! writes it (records, index, filter).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::protocol::entry::Stream;
use crate::protocol::window::OutputWindow;
use crate::session::spool::RecordHeader;

use super::super::index::{IndexWriter, BLOCK_BYTES, INDEX_DIR};
use super::super::{answer, filter::filter_path, Answer, WindowAsk};

const WORDS: [&str; 8] = [
    "kernel", "session", "worker", "output", "daemon", "window", "filter", "record",
];

/// Pseudo-random numbers, the same each run.
struct Draw(u64);

impl Draw {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

/// The records of an output of a few blocks: numbered lines of words, a
/// few rare lines, and `CROSS-BOUNDARY` across a block's end.
fn records() -> Vec<(Stream, Vec<u8>)> {
    let mut draw = Draw(7);
    let mut records = Vec::new();
    let (mut offset, mut last, mut line) = (0u64, 0u64, 0u64);
    let mut carried: Option<&[u8]> = None;
    let mut crossed = false;
    while offset < 8 * BLOCK_BYTES {
        let mut stream = match draw.next(5) {
            0 => Stream::Stderr,
            _ => Stream::Stdout,
        };
        let mut data = Vec::new();
        if let Some(rest) = carried.take() {
            stream = Stream::Stdout;
            data.extend_from_slice(rest);
        }
        let size = 200 + draw.next(90_000) as usize;
        while data.len() < size {
            line += 1;
            let special = match line {
                9_000 => " needle-one",
                15_000 => " Rare-CASE",
                20_000 => " alpha-alt",
                60_000 => " omega-alt",
                _ => "",
            };
            let words: Vec<&str> = (0..6).map(|_| WORDS[draw.next(8) as usize]).collect();
            data.extend_from_slice(format!("{line} {}{special}\n", words.join(" ")).as_bytes());
        }
        if offset + 5 + data.len() as u64 - last >= BLOCK_BYTES {
            if !crossed && stream == Stream::Stdout {
                data.extend_from_slice(b"x CROSS-BOU");
                carried = Some(b"NDARY y\n");
                crossed = true;
            }
            last = offset + 5 + data.len() as u64;
        }
        offset += 5 + data.len() as u64;
        records.push((stream, data));
    }
    records
}

/// A session directory holding run 1's output as `records`, with its
/// index and filter.
fn session(records: &[(Stream, Vec<u8>)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("eukhe-skim-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("output")).unwrap();
    std::fs::create_dir_all(dir.join(INDEX_DIR)).unwrap();
    let mut file = std::fs::File::create(dir.join("output/r1.out")).unwrap();
    let mut ends = Vec::new();
    let mut end = 0;
    for (stream, data) in records {
        let header = RecordHeader {
            stream: *stream,
            len: data.len(),
            zero_run: false,
        };
        file.write_all(&header.encode()).unwrap();
        file.write_all(data).unwrap();
        end += (header.encode().len() + data.len()) as u64;
        ends.push(end);
    }
    let output = std::fs::File::open(dir.join("output/r1.out")).unwrap();
    let mut index = IndexWriter::open(&dir, "r1", &output, 0).unwrap();
    let fed = records
        .iter()
        .zip(&ends)
        .map(|((s, d), e)| (*s, &d[..], *e));
    assert!(index.read(0, fed));
    index.finish_filter();
    dir
}

fn grep(dir: &Path, pattern: &str, stream: Option<Stream>, context: u64) -> Answer {
    let ask = WindowAsk {
        input: 1,
        stream,
        window: OutputWindow::Grep {
            pattern: pattern.into(),
            context,
            max_count: None,
        },
    };
    answer(dir, &dir.join("no-transcript"), &ask).unwrap()
}

#[test]
fn a_grep_through_the_filter_answers_as_a_whole_read_and_reads_less() {
    let records = records();
    let dir = session(&records);
    let filter = std::fs::read(filter_path(&dir, "r1")).unwrap();
    assert!(filter.len() > 4 * 4096, "a filter of several blocks");
    let patterns = [
        "needle-one",
        "CROSS-BOUNDARY",
        "alpha-alt|omega-alt",
        "(?i)rare-case",
        "no-line-has-this",
        "^12345 ",
        "a.c",
    ];
    let streams = [None, Some(Stream::Stdout), Some(Stream::Stderr)];
    let mut through = Vec::new();
    for pattern in patterns {
        for stream in streams {
            for context in [0, 3] {
                through.push((
                    (pattern, stream, context),
                    grep(&dir, pattern, stream, context),
                ));
            }
        }
    }
    let whole_output = std::fs::metadata(dir.join("output/r1.out")).unwrap().len();
    let rare = &through[0].1;
    assert_eq!(rare.summary.matches, Some(1));
    assert!(
        rare.summary.read_bytes < whole_output / 2,
        "read {} of {whole_output}",
        rare.summary.read_bytes
    );
    let crossing = &through[6].1;
    assert_eq!(
        crossing.summary.matches,
        Some(1),
        "the line across the blocks"
    );
    std::fs::remove_file(filter_path(&dir, "r1")).unwrap();
    for ((pattern, stream, context), skimmed) in &through {
        let whole = grep(&dir, pattern, *stream, *context);
        let what = format!("{pattern:?} {stream:?} -C {context}");
        assert_eq!(skimmed.parts, whole.parts, "{what}");
        assert_eq!(skimmed.summary.matches, whole.summary.matches, "{what}");
        assert_eq!(skimmed.summary.lines, whole.summary.lines, "{what}");
        assert!(whole.summary.read_bytes >= whole_output, "{what} without");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
