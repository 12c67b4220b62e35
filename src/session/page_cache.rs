//! Giving back the page cache that output already on disk holds.
//!
//! A run's output is written to the kernel's spool; a flood of it stays
//! there (the transcript points to it), smaller output is copied into the
//! transcript. Left alone, every byte of it keeps a page cache page, so a
//! long stream of output allocates fresh pages all the way. On a virtual
//! machine a fresh page is the expensive kind (the host backs it on first
//! touch): on the development machine, writing 1 GiB to a new file took
//! 3.4 s, and 1.0 s when the pages already written were handed back every
//! 32 MiB, so the next ones were recycled. So the spool's pages are given
//! to the disk and handed back in steps as the worker reads them (see
//! `Spool::release`), and the transcript's as they are written, a step
//! later (`stream_out`), not only once a group commit has made them
//! durable: waiting for the commit kept up to `COMMIT_EARLY_BYTES` of
//! them, and on the development machine writing and reading 200 MiB
//! through two files took 0.36 to 0.59 s of system time that way against
//! 0.15 to 0.22 s in 2 MiB steps.

use std::fs::File;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

/// Output is handed back in steps of at least this much: below it, the
/// pages are few and a reader may still want them. Small steps keep the
/// pages a flood goes through few, so they are reused while the host
/// still backs them: on the development machine 200 MiB through a file
/// punched behind its writer every 2 MiB cost the writer 0.07 to 0.18 s of
/// system time, against 0.13 to 0.19 s in 8 MiB steps.
pub const RECYCLE_BYTES: u64 = 2 << 20;

/// A stream of output this large since the last group commit is committed
/// at once, without waiting out `output_sync_ms`: its pages can be handed
/// back only once they are on disk, and a flood would otherwise take fresh
/// ones for a whole sync interval (over 200 MiB at pipe speed).
pub const COMMIT_EARLY_BYTES: u64 = 32 << 20;

const PAGE: u64 = 4096;

/// Drop the clean cached pages of `file` among the whole pages in
/// `from..to` (after a sync, all of them); `POSIX_FADV_DONTNEED` also
/// starts writing back the dirty ones, without waiting for them. Advice
/// only: a page in use stays, and the bytes stay on disk.
pub fn drop_synced(file: &File, from: u64, to: u64) {
    let (from, to) = (from.next_multiple_of(PAGE), to / PAGE * PAGE);
    if to > from {
        let _ = posix_fadvise(
            file,
            from as i64,
            (to - from) as i64,
            PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
    }
}

/// Start writing `from..to` (just written) to disk, and hand back the
/// pages of `behind..from`, whose writing started a step ago: those on
/// disk by now go back, the rest stay (the next group commit's
/// `drop_synced` gets them, and a page cut at `to` waits for the next
/// step). Advice only, and no wait: durability is the group commit's,
/// never this.
pub fn stream_out(file: &File, behind: u64, from: u64, to: u64) {
    drop_synced(file, from, to);
    drop_synced(file, behind, from);
}
