//! Damage at random places, the header included: every reader shows every
//! undamaged entry, in order, and one notice where each damaged region
//! is; the region is copied aside once; and input numbering goes on past
//! every number ever given.

use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::session::numbers::{self, NumberMark};

/// Deterministic numbers (xorshift).
struct Random(u64);

impl Random {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A session's transcript as a worker writes it: 200 entries, inputs and
/// their output, each input number reserved in the mark before it is
/// given. The entries, the mark, and the highest input number given.
fn two_hundred(path: &Path) -> (Vec<Entry>, NumberMark, u64) {
    let mut t = open(path).0.transcript;
    let opened = numbers::Opened {
        next_input: 1,
        transcript_len: t.end_offset(),
        transcript_marker: t.marker(),
        damaged: Vec::new(),
        numbered_until: 16,
        torn: false,
    };
    let mut mark = numbers::settle(None, &opened).mark;
    let mut given = 0;
    let mut all = Vec::new();
    for i in 1..=200u64 {
        let body = if i % 3 == 0 {
            output(given, &noise(1 + (i as usize * 53) % 400, i))
        } else {
            given += 1;
            if let Some(renewed) = numbers::reserve(&mark, given, t.end_offset()) {
                mark = renewed;
            }
            input(given)
        };
        all.push(t.append_unsynced(i, body).unwrap());
    }
    t.sync().unwrap();
    (all, mark, given)
}

/// The records' byte ranges of an undamaged file.
fn record_ranges(bytes: &[u8]) -> Vec<(usize, usize)> {
    let starts = record_starts(bytes);
    let ends = starts.iter().skip(1).copied().chain([bytes.len()]);
    starts.iter().copied().zip(ends).collect()
}

fn overlaps((a, b): (usize, usize), (c, d): (usize, usize)) -> bool {
    a < d && c < b
}

/// One or two damaged ranges: the second, when there is one, lies at
/// least one whole record after the first, so they are two regions. One
/// round in ten damages the file's header.
fn damaged_ranges(
    random: &mut Random,
    ranges: &[(usize, usize)],
    len: usize,
) -> Vec<(usize, usize)> {
    let first_at = match random.below(10) {
        0 => random.below(16),
        _ => random.below(len),
    };
    let first = (first_at, (first_at + 1 + random.below(64)).min(len));
    let mut damaged = vec![first];
    if random.below(3) == 0 {
        let after = ranges.iter().position(|&r| r.0 >= first.1);
        if let Some(next) = after.map(|i| i + 1).filter(|&i| i < ranges.len()) {
            let (start, end) = ranges[next];
            let at = start + random.below(end - start);
            damaged.push((at, (at + 1 + random.below(32)).min(end)));
        }
    }
    damaged
}

/// Every byte in `ranges` changed (never to itself).
fn damage(bytes: &mut [u8], ranges: &[(usize, usize)], random: &mut Random) {
    for &(from, to) in ranges {
        for byte in &mut bytes[from..to] {
            *byte ^= 1 + random.below(255) as u8;
        }
    }
}

/// The offsets where copies of damaged bytes are, beside `path`.
fn copies(path: &Path) -> Vec<u64> {
    let mut offsets: Vec<u64> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("transcript.damaged-")?.parse().ok()
        })
        .collect();
    offsets.sort();
    offsets
}

/// What a round damaged, and what an undamaged reader expects of it.
struct Round {
    bytes: Vec<u8>,
    damaged: Vec<(usize, usize)>,
    /// The entries whose records no damage touches.
    expected: Vec<Entry>,
    what: String,
}

/// A transcript written as a worker writes it, and the rounds of damage
/// done to copies of it.
struct Fuzz {
    all: Vec<Entry>,
    mark: NumberMark,
    given: u64,
    /// The file's sync marker, which damage never changes for a reader.
    marker: [u8; 8],
    pristine: Vec<u8>,
    ranges: Vec<(usize, usize)>,
    random: Random,
}

impl Fuzz {
    fn new(seed: u64) -> Fuzz {
        let path = temp("fuzz-source");
        let (all, mark, given) = two_hundred(&path);
        let pristine = std::fs::read(&path).unwrap();
        cleanup(&path);
        let ranges = record_ranges(&pristine);
        Fuzz {
            marker: pristine[8..16].try_into().unwrap(),
            all,
            mark,
            given,
            pristine,
            ranges,
            random: Random(seed),
        }
    }

    fn round(&mut self, round: usize) -> Round {
        let mut bytes = self.pristine.clone();
        let damaged = match round % 50 {
            // The file cut through its last record: a record never
            // finished, which the worker's open cuts off.
            49 => {
                let last = self.ranges[self.ranges.len() - 1].0;
                let cut = last + 1 + self.random.below(40);
                bytes.truncate(cut);
                vec![(last, cut)]
            }
            _ => {
                let damaged = damaged_ranges(&mut self.random, &self.ranges, bytes.len());
                damage(&mut bytes, &damaged, &mut self.random);
                damaged
            }
        };
        let hit = |r: (usize, usize)| damaged.iter().any(|&d| overlaps(d, r));
        let expected = self
            .all
            .iter()
            .zip(&self.ranges)
            .filter(|(_, &r)| !hit(r))
            .map(|(e, _)| e.clone())
            .collect();
        Round {
            bytes,
            what: format!("round {round}, damaged {damaged:?}"),
            damaged,
            expected,
        }
    }

    /// The next input's number after a worker opened what `round` left:
    /// its entries, its length once a torn tail is cut, its regions.
    fn next_input(
        &self,
        entries: &[Entry],
        (transcript_len, torn): (u64, bool),
        regions: &[(u64, u64)],
    ) -> u64 {
        let numbering = entries
            .iter()
            .filter_map(|e| match e.body {
                EntryBody::Input { input, .. } => Some((input + 1, e.seq)),
                _ => None,
            })
            .last();
        let (next_input, numbered_until) = match numbering {
            // Entry `seq` is the file's record `seq - 1`, where it was.
            Some((next, seq)) => (next, self.ranges[seq as usize - 1].1 as u64),
            None => (1, 16),
        };
        let found = numbers::Opened {
            next_input,
            transcript_len,
            transcript_marker: self.marker,
            damaged: regions.iter().map(|r| r.0).collect(),
            numbered_until,
            torn,
        };
        numbers::settle(Some(&self.mark), &found).next_input
    }
}

impl Round {
    /// The damaged regions a reader reports: one per damaged range, each
    /// covering it, but for a range read as a torn tail (a damaged last
    /// record may read as one still being written: no reader can tell,
    /// and the worker's open cuts it: it starts at `torn_at`).
    #[track_caller]
    fn check_regions(&self, regions: &[(u64, u64)], torn_at: Option<u64>) {
        let torn = torn_at.map(|at| (at as usize, self.bytes.len()));
        for &d in &self.damaged {
            let covering = regions
                .iter()
                .filter(|&&(o, l)| overlaps(d, (o as usize, (o + l) as usize)))
                .count();
            let torn_here = torn.is_some_and(|t| overlaps(d, t));
            assert_eq!(
                covering,
                usize::from(!torn_here),
                "{}: {d:?} in {regions:?}",
                self.what
            );
        }
        let shown = self.damaged.len() - usize::from(torn.is_some());
        assert_eq!(regions.len(), shown, "{}: regions {regions:?}", self.what);
    }
}

/// Each region (and a torn tail, once the worker's open cut it) copied
/// aside once, as it was, private; nothing else copied.
#[track_caller]
fn check_copies(path: &Path, round: &Round, regions: &[(u64, u64)], torn: Option<TornTail>) {
    let what = &round.what;
    let whole = |offset: u64| (offset, round.bytes.len() as u64 - offset);
    let kept: Vec<(u64, u64)> = regions
        .iter()
        .copied()
        .chain(torn.map(|t| whole(t.offset)))
        .collect();
    let mut offsets: Vec<u64> = kept.iter().map(|r| r.0).collect();
    offsets.sort();
    assert_eq!(copies(path), offsets, "{what}: one copy a region");
    for (offset, len) in kept {
        let copy = files::damaged_path(path, offset);
        let bytes = &round.bytes[offset as usize..(offset + len) as usize];
        assert_eq!(std::fs::read(&copy).unwrap(), bytes, "{what}: at {offset}");
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{what}");
    }
}

#[test]
fn random_damage_read_2000_times_shows_every_intact_entry_and_each_region_once() {
    let mut fuzz = Fuzz::new(0x5eed_0fda_3a6e);
    let (mut header, mut torn_tails) = (0, 0);
    for round in 0..2000 {
        let path = temp("fuzz-2000");
        let round = fuzz.round(round);
        let parsed = parse(&round.bytes);
        same(&parsed.entries, &round.expected, &round.what);
        round.check_regions(&parsed.damage, parsed.torn_at);
        header += usize::from(round.damaged[0].0 < 16);
        // The file: a reader shows the same, and copies each region.
        std::fs::write(&path, &round.bytes).unwrap();
        let read = read_entries(&path).unwrap();
        same(&entries_only(&read), &round.expected, &round.what);
        let notices: Vec<(u64, u64)> = read
            .iter()
            .filter(|e| is_damage_notice(e))
            .map(damaged_region_of)
            .collect();
        assert_eq!(
            notices, parsed.damage,
            "{}: one notice a region",
            round.what
        );
        check_copies(&path, &round, &parsed.damage, None);
        // The worker's wake: the same entries, a torn tail cut (and kept),
        // the next input numbered past every number given.
        let (opened, entries) = open(&path);
        same(&entries, &round.expected, &round.what);
        let torn = opened.torn;
        assert_eq!(torn.map(|t| t.offset), parsed.torn_at, "{}", round.what);
        torn_tails += usize::from(torn.is_some());
        let len = opened.transcript.end_offset();
        let next = fuzz.next_input(&entries, (len, torn.is_some()), &opened.damaged);
        assert!(next > fuzz.given, "{}: next input {next}", round.what);
        drop(opened);
        check_copies(&path, &round, &parsed.damage, torn);
        cleanup(&path);
    }
    assert!(header >= 100, "the header was damaged {header} times");
    assert_eq!(torn_tails, 40, "a torn tail was cut {torn_tails} times");
}

#[test]
fn random_damage_through_the_files_shows_one_notice_per_region_and_copies_it_once() {
    let mut fuzz = Fuzz::new(0xdead_10cc);
    for round in 0..40 {
        let round = fuzz.round(round);
        let what = &round.what;
        let path = temp("fuzz");
        std::fs::write(&path, &round.bytes).unwrap();
        // Readers: the intact entries, in order, one notice per region.
        let regions = readers_agree(&path, &round.expected);
        round.check_regions(&regions, parse(&round.bytes).torn_at);
        // Each region copied aside once, as it was, private.
        let offsets: Vec<u64> = regions.iter().map(|r| r.0).collect();
        assert_eq!(copies(&path), offsets, "{what}");
        for &(offset, len) in &regions {
            let kept = files::damaged_path(&path, offset);
            let copy = std::fs::read(&kept).unwrap();
            let bytes = &round.bytes[offset as usize..(offset + len) as usize];
            assert_eq!(copy, bytes, "{what}");
            let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{what}");
        }
        assert_eq!(
            readers_agree(&path, &round.expected),
            regions,
            "{what}: again"
        );
        // The worker's wake: the same entries, nothing copied again, and
        // the next input numbered past every number given.
        let (opened, entries) = open(&path);
        same(&entries, &round.expected, &format!("{what}: open"));
        assert_eq!(opened.damaged, regions, "{what}: open");
        assert!(
            opened.damage.is_empty(),
            "{what}: copied by the first reader"
        );
        let len = opened.transcript.end_offset();
        let numbered_until = entries
            .iter()
            .rfind(|e| matches!(e.body, EntryBody::Input { .. }))
            .map_or(16, |e| fuzz.ranges[e.seq as usize - 1].1 as u64);
        assert_eq!(opened.numbered_until, numbered_until, "{what}");
        let torn = opened.torn;
        let next = fuzz.next_input(&entries, (len, torn.is_some()), &opened.damaged);
        assert!(next > fuzz.given, "{what}: next input {next}");
        drop(opened);
        check_copies(&path, &round, &regions, torn);
        cleanup(&path);
    }
}

#[test]
fn a_damaged_file_header_hides_nothing() {
    // The magic, the sync marker, and both with the first record.
    for (name, from, to) in [
        ("magic", 2, 3),
        ("marker", 11, 12),
        ("whole", 0, 16),
        ("and-first", 5, 60),
    ] {
        let path = temp(&format!("file-header-{name}"));
        let (all, _, _) = two_hundred(&path);
        let ranges = record_ranges(&std::fs::read(&path).unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        for byte in &mut bytes[from..to] {
            *byte ^= 0x5a;
        }
        std::fs::write(&path, &bytes).unwrap();
        let lost = usize::from(to > 16);
        let region_end = if lost == 1 { ranges[0].1 } else { 16 } as u64;
        assert_eq!(
            readers_agree(&path, &all[lost..]),
            vec![(0, region_end)],
            "{name}"
        );
        assert_eq!(copies(&path), vec![0], "{name}");
        let (opened, entries) = open(&path);
        same(&entries, &all[lost..], name);
        assert_eq!(
            opened.transcript.next_seq(),
            201,
            "{name}: numbering goes on"
        );
        let mut t = opened.transcript;
        let next = t.append(1, input(999)).unwrap();
        drop(t);
        let read = read_entries(&path).unwrap();
        assert_eq!(read.last(), Some(&next), "{name}: appended after the rest");
        assert_eq!(entries_only(&read).len(), 201 - lost, "{name}");
        cleanup(&path);
    }
}

#[test]
fn a_damaged_header_and_first_record_of_a_short_file_hide_nothing() {
    // A file shorter than a reader's buffer: the records after the
    // damage say which marker is the file's.
    let path = temp("short-file-header");
    let mut t = open(&path).0.transcript;
    let all: Vec<Entry> = (1..=3).map(|i| t.append(i, input(i)).unwrap()).collect();
    drop(t);
    let mut bytes = std::fs::read(&path).unwrap();
    let starts = record_starts(&bytes);
    // The header, the first record, and the last record's payload.
    let last = bytes.len() - 1;
    for at in (1..30).chain([last]) {
        bytes[at] ^= 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let regions = vec![
        (0, starts[1] as u64),
        (starts[2] as u64, (bytes.len() - starts[2]) as u64),
    ];
    assert_eq!(readers_agree(&path, &all[1..2]), regions);
    let (opened, entries) = open(&path);
    same(&entries, &all[1..2], "open");
    let mut t = opened.transcript;
    let next = t.append(1, input(9)).unwrap();
    drop(t);
    let read = read_entries(&path).unwrap();
    assert_eq!(read.last(), Some(&next), "appended after the rest");
    assert_eq!(entries_only(&read).len(), 2);
    cleanup(&path);
}
