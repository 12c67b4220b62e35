//! The filter beside a job's index (`index/<job>.tri`): for each block of
//! the index (from one entry's offset to the next), a bitmap of the hashed
//! trigrams of the block's bytes, so a grep reads only the blocks where
//! its regex's required literals may be. The worker writes it with the
//! index (`FilterWriter`, fed by `IndexWriter`).
//!
//! A trigram belongs to the block of its last byte, whichever way the
//! output is read: both streams as they came, or one alone (the bytes
//! before a record, of either stream or of its own, carry over). Letters
//! are folded to lower case (ASCII), so a case-insensitive literal is
//! looked up folded.
//!
//! It is a cache, as the index is: each entry names its block and has its
//! own CRC; a block without a good entry is read. A set bit that should
//! not be costs a read, and a cleared one is refused by the CRC: damage
//! never hides a match.
//!
//! Layout: `MAGIC`, then entries of `ENTRY_BYTES`: the block's first and
//! end offsets in the output file (u64 big-endian each), the three carries
//! (both streams', stdout's, stderr's: two bytes and how many of them are
//! real), three zero bytes, the bitmap, the CRC of the rest.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::protocol::entry::Stream;

use super::records::Records;
use super::select::Flow;

/// How many bits a block's bitmap has, as a power of two.
const BITS_LOG2: u32 = 15;
const WORDS: usize = (1 << BITS_LOG2) / 64;
const BITMAP_BYTES: usize = WORDS * 8;
const MAGIC: &[u8; 8] = b"eukhtr1\n";
const HEAD_BYTES: usize = 28;
/// The bits of the small bitmap of a block's first bytes, as a power of two.
const EDGE_BITS_LOG2: u32 = 10;
const EDGE_WORDS: usize = (1 << EDGE_BITS_LOG2) / 64;
/// How many of a block's first bytes (in each way of reading) the small
/// bitmap holds the trigrams of: a literal begun before the block ends
/// within them.
const EDGE_BYTES: usize = super::needles::NEEDLE_MAX_BYTES;
const ENTRY_BYTES: usize = HEAD_BYTES + BITMAP_BYTES + EDGE_WORDS * 8 + 4;

/// Where `job`'s filter is in the session directory `session`.
pub fn filter_path(session: &Path, job: &str) -> PathBuf {
    super::index::index_path(session, job).with_extension("tri")
}

/// A byte as the filter sees it: ASCII letters in lower case.
fn fold(byte: u8) -> u8 {
    // As `to_ascii_lowercase`, in a form the compiler runs on many at once.
    byte | u8::from(byte.wrapping_sub(b'A') < 26) << 5
}

/// The bit of the trigram whose three (folded) bytes are the low 24 bits.
fn bit(trigram: u32) -> usize {
    (trigram.wrapping_mul(0x9E37_79B1) >> (32 - BITS_LOG2)) as usize
}

/// The trigram's bit in the small bitmap of a block's first bytes.
fn edge_bit(trigram: u32) -> usize {
    (trigram.wrapping_mul(0x85EB_CA6B) >> (32 - EDGE_BITS_LOG2)) as usize
}

/// The trigrams of a block's first bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edge([u64; EDGE_WORDS]);

impl Edge {
    fn add(&mut self, carry: Carry, data: &[u8]) {
        let mut rolling = u32::from(carry.bytes[0]) << 8 | u32::from(carry.bytes[1]);
        let mut seen = usize::from(carry.have);
        for &byte in data {
            rolling = (rolling << 8 | u32::from(fold(byte))) & 0xFF_FFFF;
            seen += 1;
            if seen >= 3 {
                let bit = edge_bit(rolling);
                self.0[bit / 64] |= 1 << (bit % 64);
            }
        }
    }

    fn has(&self, trigram: u32) -> bool {
        let bit = edge_bit(trigram);
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }
}

/// The last two bytes of one way of reading the output, and how many of
/// them there are (fewer at its start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Carry {
    bytes: [u8; 2],
    have: u8,
}

impl Carry {
    /// The carry after `data` follows this one.
    fn after(self, data: &[u8]) -> Carry {
        match data {
            [] => self,
            [only] => Carry {
                bytes: [self.bytes[1], fold(*only)],
                have: (self.have + 1).min(2),
            },
            [.., a, b] => Carry {
                bytes: [fold(*a), fold(*b)],
                have: 2,
            },
        }
    }
}

/// One block's trigrams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bitmap(Vec<u64>);

impl Default for Bitmap {
    fn default() -> Bitmap {
        Bitmap(vec![0; WORDS])
    }
}

impl Bitmap {
    fn has(&self, trigram: u32) -> bool {
        let bit = bit(trigram);
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Both bitmaps' trigrams.
    pub fn union(&self, other: &Bitmap) -> Bitmap {
        Bitmap(self.0.iter().zip(&other.0).map(|(a, b)| a | b).collect())
    }
}

/// The trigrams of `literal`, folded.
fn trigrams(literal: &[u8]) -> impl Iterator<Item = u32> + '_ {
    literal
        .windows(3)
        .map(|w| u32::from(fold(w[0])) << 16 | u32::from(fold(w[1])) << 8 | u32::from(fold(w[2])))
}

/// The bitmap of the block being read, a byte per bit: setting one is a
/// store, with no load before it.
struct Building(Box<[u8; 1 << BITS_LOG2]>);

impl Default for Building {
    fn default() -> Building {
        Building(Box::new([0; 1 << BITS_LOG2]))
    }
}

impl Building {
    /// The trigrams of `data`, and those it makes with `carry` before it.
    fn add(&mut self, carry: Carry, data: &[u8]) {
        let have = usize::from(carry.have);
        let mut window = [0u8; 4];
        window[..2].copy_from_slice(&carry.bytes);
        for (i, &byte) in data.iter().take(2).enumerate() {
            window[2 + i] = fold(byte);
            // The first needs both carried bytes, the second one.
            if have + i >= 2 {
                let t = &window[i..i + 3];
                self.set(u32::from(t[0]) << 16 | u32::from(t[1]) << 8 | u32::from(t[2]));
            }
        }
        // Then the trigrams within `data`: their bits found a batch at a
        // time (vectorised), then set.
        const BATCH: usize = 512;
        let mut bits = [0u16; BATCH];
        let mut at = 0;
        while at + 3 <= data.len() {
            let n = (data.len() - 2 - at).min(BATCH);
            let (a, b, c) = (
                &data[at..at + n],
                &data[at + 1..at + 1 + n],
                &data[at + 2..at + 2 + n],
            );
            for (j, slot) in bits[..n].iter_mut().enumerate() {
                let t = u32::from(fold(a[j])) << 16
                    | u32::from(fold(b[j])) << 8
                    | u32::from(fold(c[j]));
                *slot = bit(t) as u16;
            }
            for &k in &bits[..n] {
                self.0[usize::from(k) & ((1 << BITS_LOG2) - 1)] = 1;
            }
            at += n;
        }
    }

    fn set(&mut self, trigram: u32) {
        self.0[bit(trigram)] = 1;
    }

    /// The bitmap built, and a cleared one to build the next.
    fn take(&mut self) -> Bitmap {
        let words = self
            .0
            .chunks_exact(64)
            .map(|bytes| {
                bytes
                    .iter()
                    .enumerate()
                    .fold(0u64, |word, (i, &b)| word | u64::from(b) << i)
            })
            .collect();
        self.0.fill(0);
        Bitmap(words)
    }
}

/// The carries of the three ways of reading an output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Carries {
    both: Carry,
    stdout: Carry,
    stderr: Carry,
}

impl Carries {
    fn encode(&self, out: &mut [u8]) {
        for (i, carry) in [self.both, self.stdout, self.stderr].iter().enumerate() {
            out[i * 3..i * 3 + 3].copy_from_slice(&[carry.bytes[0], carry.bytes[1], carry.have]);
        }
    }

    fn decode(bytes: &[u8]) -> Option<Carries> {
        let carry = |i: usize| {
            let have = bytes[i * 3 + 2];
            (have <= 2).then_some(Carry {
                bytes: [bytes[i * 3], bytes[i * 3 + 1]],
                have,
            })
        };
        Some(Carries {
            both: carry(0)?,
            stdout: carry(1)?,
            stderr: carry(2)?,
        })
    }
}

/// One entry: a block's place and its bitmap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The block's first offset in the output file.
    pub start: u64,
    /// Its end offset.
    pub end: u64,
    carries: Carries,
    /// Its trigrams.
    pub bitmap: Bitmap,
    /// Those of its first bytes.
    pub edge: Edge,
}

impl Block {
    fn encode(&self) -> Vec<u8> {
        let mut entry = vec![0u8; ENTRY_BYTES];
        entry[..8].copy_from_slice(&self.start.to_be_bytes());
        entry[8..16].copy_from_slice(&self.end.to_be_bytes());
        self.carries.encode(&mut entry[16..25]);
        let words = self.bitmap.0.iter().chain(&self.edge.0);
        for (i, word) in words.enumerate() {
            let at = HEAD_BYTES + i * 8;
            entry[at..at + 8].copy_from_slice(&word.to_le_bytes());
        }
        let crc = crc32fast::hash(&entry[..ENTRY_BYTES - 4]);
        entry[ENTRY_BYTES - 4..].copy_from_slice(&crc.to_be_bytes());
        entry
    }

    fn decode(entry: &[u8]) -> Option<Block> {
        let (body, crc) = entry.split_at(ENTRY_BYTES - 4);
        if crc32fast::hash(body).to_be_bytes() != crc || entry[25..28] != [0; 3] {
            return None;
        }
        let n = |at: usize| u64::from_be_bytes(entry[at..at + 8].try_into().expect("8"));
        let mut words: Vec<u64> = body[HEAD_BYTES..]
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
            .collect();
        let edge = words.split_off(WORDS).try_into().ok()?;
        Some(Block {
            start: n(0),
            end: n(8),
            carries: Carries::decode(&entry[16..25])?,
            bitmap: Bitmap(words),
            edge: Edge(edge),
        })
    }
}

/// The good entries of `job`'s filter, in the file's order (a damaged one
/// left out), and the file's length.
pub fn load(session: &Path, job: &str) -> (Vec<Block>, u64) {
    let Ok(bytes) = std::fs::read(filter_path(session, job)) else {
        return (Vec::new(), 0);
    };
    let Some(entries) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return (Vec::new(), bytes.len() as u64);
    };
    let blocks = entries
        .chunks_exact(ENTRY_BYTES)
        .filter_map(Block::decode)
        .collect();
    (blocks, bytes.len() as u64)
}

/// Writes a job's filter as its output is read, a block at a time.
pub struct FilterWriter {
    file: File,
    block: Building,
    edge: Edge,
    /// How many of the block's first bytes of each way of reading (both
    /// streams, stdout, stderr) the edge still takes.
    edge_left: [usize; 3],
    start: u64,
    carries: Carries,
    written: u64,
}

impl FilterWriter {
    /// A new filter for `job` in `session`, its output read from the start.
    pub fn create(session: &Path, job: &str) -> Option<FilterWriter> {
        let mut file = options()
            .truncate(true)
            .open(filter_path(session, job))
            .ok()?;
        file.write_all(MAGIC).ok()?;
        Some(FilterWriter::on(file))
    }

    /// A writer of a fresh filter into `file`, after its magic.
    fn on(file: File) -> FilterWriter {
        FilterWriter {
            file,
            block: Building::default(),
            edge: Edge::default(),
            edge_left: [EDGE_BYTES; 3],
            start: 0,
            carries: Carries::default(),
            written: 0,
        }
    }

    /// The filter of `job` in `session` taken up where its index was:
    /// its first `blocks` entries must end at `ends` (the index's
    /// entries); the rest is cut. None when they do not, or it fails
    /// (the blocks from there are then read whole).
    pub fn resume(session: &Path, job: &str, ends: &[u64]) -> Option<FilterWriter> {
        let (blocks, _) = load(session, job);
        let mut start = 0;
        for (block, &end) in blocks.iter().zip(ends) {
            if block.start != start || block.end != end {
                return None;
            }
            start = end;
        }
        if blocks.len() < ends.len() {
            return None;
        }
        let carries = ends
            .len()
            .checked_sub(1)
            .map_or(Carries::default(), |last| blocks[last].carries);
        let file = options().open(filter_path(session, job)).ok()?;
        let written = ends.len() as u64;
        file.set_len(MAGIC.len() as u64 + written * ENTRY_BYTES as u64)
            .ok()?;
        if written == 0 {
            file.write_all_at(MAGIC, 0).ok()?;
        }
        Some(FilterWriter {
            file,
            block: Building::default(),
            edge: Edge::default(),
            edge_left: [EDGE_BYTES; 3],
            start,
            carries,
            written,
        })
    }

    /// A record of `stream`'s bytes, next in the output.
    pub fn add(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let (own, own_left) = match stream {
            Stream::Stdout => (&mut self.carries.stdout, &mut self.edge_left[1]),
            Stream::Stderr => (&mut self.carries.stderr, &mut self.edge_left[2]),
        };
        // The record's own trigrams come with the carry of both streams;
        // those its first bytes make with its stream's last two, too.
        let head = &data[..data.len().min(2)];
        self.block.add(*own, head);
        let early = data.len().min(*own_left);
        self.edge.add(*own, &data[..early]);
        *own_left -= early;
        *own = own.after(data);
        self.block.add(self.carries.both, data);
        let early = data.len().min(self.edge_left[0]);
        self.edge.add(self.carries.both, &data[..early]);
        self.edge_left[0] -= early;
        self.carries.both = self.carries.both.after(data);
    }

    /// The block ends at `end` (an index entry's offset): its entry is
    /// written. False when it could not be: drop the writer then.
    pub fn end_block(&mut self, end: u64) -> bool {
        let block = Block {
            start: self.start,
            end,
            carries: self.carries,
            bitmap: self.block.take(),
            edge: std::mem::take(&mut self.edge),
        };
        self.edge_left = [EDGE_BYTES; 3];
        let at = MAGIC.len() as u64 + self.written * ENTRY_BYTES as u64;
        if self.file.write_all_at(&block.encode(), at).is_err() {
            return false;
        }
        self.written += 1;
        self.start = end;
        true
    }
}

/// A filter built off the worker's output path: told where each block
/// ends, a thread reads the block back from the output file and writes
/// its entry. Dropped, its thread still finishes the blocks it was told
/// of, without holding back the run's end.
pub struct FilterFeed {
    /// The writer and the output, until the first block ends (most
    /// outputs never have one: no thread for them).
    waiting: Option<(FilterWriter, File)>,
    ends: Option<mpsc::Sender<u64>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FilterFeed {
    /// The feed of `writer`'s blocks of `output`.
    pub fn start(writer: FilterWriter, output: &File) -> Option<FilterFeed> {
        Some(FilterFeed {
            waiting: Some((writer, output.try_clone().ok()?)),
            ends: None,
            thread: None,
        })
    }

    /// The next block ends at `end`. False once the thread has stopped
    /// (a read or a write failed) or could not start: drop the feed then.
    pub fn block_ends(&mut self, end: u64) -> bool {
        if let Some((writer, output)) = self.waiting.take() {
            let (ends, told) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("eukhe-filter".into())
                .spawn(move || build(writer, &output, &told));
            let Ok(thread) = spawned else { return false };
            self.ends = Some(ends);
            self.thread = Some(thread);
        }
        self.ends
            .as_ref()
            .is_some_and(|ends| ends.send(end).is_ok())
    }
}

#[cfg(test)]
impl FilterFeed {
    /// Wait for the thread to write the blocks it was told of.
    pub fn finish(mut self) {
        self.ends.take();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the filter's thread");
        }
    }
}

impl Drop for FilterFeed {
    fn drop(&mut self) {
        // The thread finishes the blocks it was told of on its own: the
        // run's end is not held back by it.
        self.ends.take();
        self.thread.take();
    }
}

/// How far the filter's thread yields the CPU to the rest of the worker
/// (and to everything else): 0 is normal, 19 the most.
const FILTER_NICENESS: libc::c_int = 10;

/// Each block `told` ends, read from `output` into `writer`'s filter.
fn build(mut writer: FilterWriter, output: &File, told: &mpsc::Receiver<u64>) {
    // The filter is a cache: the session's runs and the output path come
    // first. Niceness on Linux is a thread's own (this thread's id); not
    // idle-only, so a busy machine still finishes it.
    let this_thread = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes plain integers and changes only this
    // thread's niceness; a refusal leaves it as it was.
    unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            this_thread as libc::id_t,
            FILTER_NICENESS,
        );
    }
    while let Ok(end) = told.recv() {
        let mut records = Records::new(output, end);
        let reached = records.each(writer.start, |stream, data, _| {
            writer.add(stream, data);
            Flow::More
        });
        if reached.ok() != Some(end) || !writer.end_block(end) {
            return;
        }
    }
}

fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).mode(0o600);
    options
}

/// The bitmaps of an output's blocks, as far as its filter has good ones:
/// block `i` runs from `starts[i]` to `starts[i + 1]`.
pub struct Filter {
    bitmaps: Vec<Option<(Bitmap, Edge)>>,
}

impl Filter {
    /// The filter's bitmaps for the blocks starting at `starts` (the
    /// output's start, then the index's entries, the last one the end of
    /// the blocks indexed).
    pub fn of(blocks: Vec<Block>, starts: &[u64]) -> Filter {
        let mut bitmaps: Vec<Option<(Bitmap, Edge)>> = vec![None; starts.len().saturating_sub(1)];
        for block in blocks {
            if let Ok(i) = starts.binary_search(&block.start) {
                if starts.get(i + 1) == Some(&block.end) && i < bitmaps.len() {
                    bitmaps[i] = Some((block.bitmap, block.edge));
                }
            }
        }
        Filter { bitmaps }
    }

    /// How many blocks have a bitmap.
    pub fn good(&self) -> usize {
        self.bitmaps.iter().flatten().count()
    }

    /// Whether one of `literals` may end in block `last`, begun as far
    /// back as block `first`: all its trigrams in `last`'s bitmap, or its
    /// last ones among those of `last`'s first bytes and the ones before
    /// them in the bitmaps of the blocks before.
    pub fn may_hold(&self, first: usize, last: usize, literals: &[Vec<u8>]) -> bool {
        let Some(Some((end, edge))) = self.bitmaps.get(last) else {
            return true;
        };
        let mut before: Option<Bitmap> = None;
        for i in first..last {
            let Some(Some((bitmap, _))) = self.bitmaps.get(i) else {
                return true;
            };
            before = Some(match before {
                Some(u) => u.union(bitmap),
                None => bitmap.clone(),
            });
        }
        literals.iter().any(|literal| {
            let all: Vec<u32> = trigrams(literal).collect();
            if all.iter().all(|t| end.has(*t)) {
                return true;
            }
            let held = all.iter().rev().take_while(|t| edge.has(**t)).count();
            let rest = &all[..all.len() - held];
            held > 0
                && before
                    .as_ref()
                    .is_some_and(|b| rest.iter().all(|t| b.has(*t)))
        })
    }
}

impl std::fmt::Debug for FilterWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FilterWriter(block at {})", self.start)
    }
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
