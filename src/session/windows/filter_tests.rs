use super::*;

/// A fresh session directory for one test.
fn session(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("eukhe-filter-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(super::super::index::INDEX_DIR)).unwrap();
    dir
}

/// A filter of `blocks` blocks, each of `records`, written and read back.
fn written(name: &str, blocks: &[&[(Stream, &[u8])]]) -> (Filter, PathBuf) {
    let dir = session(name);
    let mut writer = FilterWriter::create(&dir, "r1").unwrap();
    let mut starts = vec![0];
    for (i, block) in blocks.iter().enumerate() {
        for (stream, data) in block.iter() {
            writer.add(*stream, data);
        }
        let end = (i as u64 + 1) * 100;
        assert!(writer.end_block(end));
        starts.push(end);
    }
    (Filter::of(load(&dir, "r1").0, &starts), dir)
}

fn needles(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|n| n.as_bytes().to_vec()).collect()
}

#[test]
fn a_block_may_hold_what_it_holds_and_not_what_it_lacks() {
    let out = Stream::Stdout;
    let (filter, dir) = written(
        "holds",
        &[&[(out, b"alpha beta\n")], &[(out, b"GAMMA delta\n")]],
    );
    assert_eq!(filter.good(), 2);
    assert!(filter.may_hold(0, 0, &needles(&["beta"])));
    assert!(!filter.may_hold(0, 0, &needles(&["gamma"])));
    // Folded: any case looks up the same.
    assert!(filter.may_hold(1, 1, &needles(&["gamma"])));
    assert!(filter.may_hold(1, 1, &needles(&["zzz", "delta"])));
    assert!(!filter.may_hold(1, 1, &needles(&["zzz", "beta"])));
    // A block past the filter's has no bitmap: it may hold anything.
    assert!(filter.may_hold(2, 2, &needles(&["zzz"])));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_literal_across_blocks_and_records_is_found_each_way_of_reading() {
    let (out, err) = (Stream::Stdout, Stream::Stderr);
    let (filter, dir) = written(
        "across",
        &[
            &[(out, b"xx nee"), (err, b"e1\n")],
            &[(out, b"dle yy\n"), (err, b"e2\n")],
        ],
    );
    // Stdout alone reads "needle" across a stderr record and the blocks'
    // edge; both together read "neee1\ndle": each is found, reaching back.
    assert!(filter.may_hold(0, 1, &needles(&["needle"])));
    assert!(filter.may_hold(0, 0, &needles(&["neee1"])));
    // A literal all in the first block does not end in the second.
    assert!(!filter.may_hold(0, 1, &needles(&["neee1"])));
    assert!(filter.may_hold(0, 1, &needles(&["1\ndl"])));
    // Trigrams that no way of reading has.
    assert!(!filter.may_hold(0, 1, &needles(&["needless"])));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_damaged_entry_is_refused_so_its_block_is_read() {
    let out = Stream::Stdout;
    let (_, dir) = written("damaged", &[&[(out, b"alpha\n")], &[(out, b"beta\n")]]);
    let path = filter_path(&dir, "r1");
    let bytes = std::fs::read(&path).unwrap();
    for at in [
        MAGIC.len() + 3,
        MAGIC.len() + HEAD_BYTES + 100,
        MAGIC.len() + ENTRY_BYTES - 1,
    ] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        let filter = Filter::of(load(&dir, "r1").0, &[0, 100, 200]);
        assert_eq!(filter.good(), 1, "byte {at}");
        // The damaged first block may hold anything; the second is kept.
        assert!(filter.may_hold(0, 0, &needles(&["zzz"])));
        assert!(!filter.may_hold(1, 1, &needles(&["zzz"])));
    }
    // Entries that do not fit the index's blocks are not used.
    std::fs::write(&path, &bytes).unwrap();
    let filter = Filter::of(load(&dir, "r1").0, &[0, 150, 200]);
    assert_eq!(filter.good(), 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_writer_taking_over_keeps_the_blocks_that_fit_and_its_carry() {
    let out = Stream::Stdout;
    let (_, dir) = written("resume", &[&[(out, b"one nee")], &[(out, b"two\n")]]);
    // Taken over after the first block: the second is written again.
    let mut writer = FilterWriter::resume(&dir, "r1", &[100]).unwrap();
    writer.add(out, b"dle\n");
    assert!(writer.end_block(200));
    let filter = Filter::of(load(&dir, "r1").0, &[0, 100, 200]);
    assert_eq!(filter.good(), 2);
    assert!(filter.may_hold(0, 1, &needles(&["needle"])));
    assert!(!filter.may_hold(1, 1, &needles(&["two"])));
    // An index with entries the filter lacks: no writer.
    assert!(FilterWriter::resume(&dir, "r1", &[100, 200, 300]).is_none());
    assert!(FilterWriter::resume(&dir, "r1", &[150]).is_none());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_trigram_is_set_whatever_the_records_sizes() {
    let text: Vec<u8> = (0..5000u32)
        .map(|i| b"aZ9 -qX\n"[(i * i % 7 + i / 13) as usize % 8] ^ (i % 3) as u8)
        .collect();
    for piece in [1, 2, 3, 7, 600] {
        let mut writer = FilterWriter::on(tempfile_like(piece));
        for chunk in text.chunks(piece) {
            writer.add(Stream::Stderr, chunk);
        }
        let bitmap = writer.block.take();
        for (at, three) in text.windows(3).enumerate() {
            assert!(
                trigrams(three).all(|t| bitmap.has(t)),
                "piece {piece} at {at}"
            );
        }
    }
}

/// A scratch file for a writer that writes nothing.
fn tempfile_like(n: usize) -> File {
    let path = std::env::temp_dir().join(format!("eukhe-filter-{}-{n}", std::process::id()));
    let file = File::create(&path).unwrap();
    std::fs::remove_file(path).unwrap();
    file
}
