//! Runs of zero bytes in output: found, and kept without writing them.
//!
//! Output that is mostly zeros (`head -c 1G /dev/zero`, a disk image, a
//! binary padded with zeros) costs a page of the page cache for every 4 KiB
//! it writes, and on a virtual machine a fresh page is the expensive kind
//! (see `page_cache`). As `cp --sparse` does, eukhe keeps such runs
//! without writing them: the kernel's spool stores a run as a record that
//! only says how long it is, and the transcript leaves a hole in the file
//! where a record's payload has whole blocks of zeros (a hole reads as
//! zeros, and the record's checksum covers them as ever).

use std::ops::Range;

/// The file system block: a hole is made of whole blocks, and a run of
/// zeros shorter than one is not worth a record of its own.
pub const BLOCK: usize = 4096;

/// The longest run one zero record of the spool stands for, and the zeros
/// a reader hands out for it without allocating: the most the kernel reads
/// into one record, so a run's output entry fits a frame as any other does.
pub const RUN_MAX: usize = 512 << 10;

/// Zeros to slice a run's bytes from (in `.bss`: no file size, and its
/// pages are the kernel's shared zero page until written, which nothing
/// does).
pub static ZEROS: [u8; RUN_MAX] = [0; RUN_MAX];

/// Whether `bytes` lie within [`ZEROS`]: a run a reader handed out, all
/// zeros by construction, known without reading a byte of it.
pub fn handed_out(bytes: &[u8]) -> bool {
    let block = ZEROS.as_ptr_range();
    let range = bytes.as_ptr_range();
    block.start <= range.start && range.end <= block.end
}

/// Whether every byte of `bytes` is zero. In steps of 64 bytes, each
/// folded without a branch, so the compiler vectorises it and text leaves
/// at its first step.
pub fn all_zero(bytes: &[u8]) -> bool {
    let mut steps = bytes.chunks_exact(64);
    let whole = steps.all(|step| step.iter().fold(0u8, |acc, &b| acc | b) == 0);
    whole && steps.remainder().iter().all(|&b| b == 0)
}

/// The runs of at least [`BLOCK`] zero bytes in `bytes`, in order (found a
/// block at a time from the start, then widened to every zero byte on
/// either side).
pub fn runs(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let mut free_from = 0;
    let mut at = 0;
    while at + BLOCK <= bytes.len() {
        if !all_zero(&bytes[at..at + BLOCK]) {
            at += BLOCK;
            continue;
        }
        let mut start = at;
        let mut end = at + BLOCK;
        while end + BLOCK <= bytes.len() && all_zero(&bytes[end..end + BLOCK]) {
            end += BLOCK;
        }
        while end < bytes.len() && bytes[end] == 0 {
            end += 1;
        }
        while start > free_from && bytes[start - 1] == 0 {
            start -= 1;
        }
        found.push(start..end);
        free_from = end;
        at = end;
    }
    found
}

/// The stretches of `bytes`, to be written at file offset `at`, that are
/// whole blocks of the file and all zeros: what can be left as holes.
/// The block holding the last byte is never among them, so the write
/// that ends a record always reaches the file's new end.
pub fn holes(at: u64, bytes: &[u8]) -> Vec<Range<usize>> {
    let mut found: Vec<Range<usize>> = Vec::new();
    if bytes.len() < 2 * BLOCK {
        return found;
    }
    let first = (BLOCK - (at % BLOCK as u64) as usize) % BLOCK;
    let mut block = first;
    while block + BLOCK < bytes.len() {
        if all_zero(&bytes[block..block + BLOCK]) {
            match found.last_mut() {
                Some(last) if last.end == block => last.end = block + BLOCK,
                _ => found.push(block..block + BLOCK),
            }
        }
        block += BLOCK;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_found_whole_and_a_short_one_is_left_to_the_bytes() {
        let mut bytes = b"head".to_vec();
        bytes.extend(std::iter::repeat_n(0, 3 * BLOCK + 17));
        bytes.extend(b"tail");
        assert_eq!(runs(&bytes), vec![4..4 + 3 * BLOCK + 17]);
        let short = [b"a".as_slice(), &[0; BLOCK - 1], b"b"].concat();
        assert_eq!(runs(&short), Vec::<Range<usize>>::new());
        let all = vec![0u8; 5 * BLOCK + 3];
        assert_eq!(runs(&all), vec![0..all.len()]);
        let two = [&[0u8; BLOCK][..], b"x", &[0; 2 * BLOCK]].concat();
        assert_eq!(runs(&two), vec![0..BLOCK, BLOCK + 1..3 * BLOCK + 1]);
    }

    #[test]
    fn only_slices_of_the_static_block_are_handed_out_runs() {
        assert!(handed_out(&ZEROS[..BLOCK]));
        assert!(handed_out(&ZEROS[RUN_MAX - 10..]));
        assert!(!handed_out(&vec![0u8; BLOCK]), "zeros of its own");
        assert!(!handed_out(&[]));
    }

    #[test]
    fn a_zero_byte_anywhere_in_a_step_or_its_remainder_counts() {
        for at in [0, 1, 63, 64, 100, 4095] {
            let mut block = vec![0u8; BLOCK];
            block[at] = 1;
            assert!(!all_zero(&block), "a one at {at}");
        }
        assert!(all_zero(&[0; 70]));
        assert!(!all_zero(&[[0; 69].as_slice(), &[9]].concat()));
    }

    #[test]
    fn holes_are_whole_blocks_of_the_file_and_never_the_last() {
        let bytes = vec![0u8; 4 * BLOCK];
        // At offset 100 the first whole block starts 3996 bytes in, and the
        // part block holding the last byte is left to be written; at 0 the
        // last whole block holds the last byte.
        assert_eq!(holes(100, &bytes), vec![3996..3996 + 3 * BLOCK]);
        assert_eq!(holes(0, &bytes), vec![0..3 * BLOCK]);
        let mut text = bytes.clone();
        text[BLOCK + 5] = b'x';
        assert_eq!(holes(0, &text), vec![0..BLOCK, 2 * BLOCK..3 * BLOCK]);
        assert_eq!(holes(0, &[0; BLOCK + 10]), Vec::<Range<usize>>::new());
    }
}
