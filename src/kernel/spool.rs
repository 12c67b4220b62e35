//! The kernel's spool: every job's output and end, on disk in the session's
//! directory (0600), so output produced while no worker is connected is
//! never lost and the end of a job that finished while no worker was there
//! is known, even to the next kernel. The kernel is its only writer; the
//! layout and the record format are `session::spool`'s, which its readers
//! share.
//!
//! - Creating `<job>.out` (exclusively) is the kernel accepting the job: a
//!   job whose file exists is never executed again
//!   (`laws::runs::kernel_accepts`).
//! - `<job>.end` is written once the job's status is known and again when
//!   its output is settled (every writer closed).
//! - `<job>.group` is written when the job starts: a job with a group and
//!   no end, found by the next kernel, was left running by a kernel that
//!   died, and is ended.
//!
//! A worker follows a job by byte offset into `<job>.out`; the transcript
//! keeps the offset each stored output entry reaches, so a worker that
//! reconnects resumes exactly where the transcript stops.
//!
//! The spool is also where a flood of output is kept for good: a
//! transcript record of a large output entry points to the spool record
//! that holds its bytes (`session::transcript`, written once). So nothing
//! is ever punched out of `<job>.out`, and when a job is forgotten its file
//! moves to `output/<job>.out` if it has such a record (else it is
//! removed). A job whose file is there is never accepted again.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Seek, Write};
use std::ops::Deref;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::laws::adoption::ProcessIdentity;
pub use crate::protocol::entry::LostOutput;
use crate::protocol::entry::Stream;
pub use crate::protocol::kernel::JobEnd;
use crate::protocol::zeros;
use crate::session::spool::{self as layout, out_name, valid_job, RecordHeader, RECORD_HEADER};
use crate::session::store::{private_subdir, read_json, write_json_unsynced};
use crate::session::transcript::STORED_FROM_BYTES;

/// One session's spool directory, as its writer holds it. It reads as any
/// reader's spool does (`session::spool::Spool`).
#[derive(Clone, Debug)]
pub struct Spool {
    files: layout::Spool,
}

impl Deref for Spool {
    type Target = layout::Spool;

    fn deref(&self) -> &layout::Spool {
        &self.files
    }
}

/// Write `header`, then `bytes`, counting in `written` what reached the
/// file (a short write, rare: a signal, a full disk, goes on in order).
fn write_record(
    file: &mut File,
    header: &[u8],
    bytes: &[u8],
    written: &mut usize,
) -> std::io::Result<()> {
    while *written < header.len() + bytes.len() {
        let wrote = if *written < header.len() {
            file.write_vectored(&[IoSlice::new(&header[*written..]), IoSlice::new(bytes)])
        } else {
            file.write(&bytes[*written - header.len()..])
        };
        match wrote {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => *written += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Spool {
    /// The spool in `dir`, created 0700 if missing.
    pub fn open(dir: &Path) -> Result<Spool, String> {
        Ok(Spool {
            files: layout::Spool::open(dir)?,
        })
    }

    /// Accept `job`: `Ok(Some(file))` to append its output to, or `Ok(None)`
    /// when the spool already knows it (it ran, or runs, already).
    pub fn accept(&self, job: &str) -> Result<Option<File>, String> {
        if !valid_job(job) {
            return Err(format!("kernel: {job:?} is not a job name"));
        }
        // A forgotten job's output is kept there: it ran.
        if self.output_dir().join(out_name(job)).exists() {
            return Ok(None);
        }
        match OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(self.out_path(job))
        {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(format!("spool {}: {e}", self.out_path(job).display())),
        }
    }

    /// Append `bytes` as output records; returns the offset after them.
    /// Runs of zeros become records that only say how long they are; the
    /// rest go with their header in one write, without copying the bytes.
    /// Output the disk has no room for (or that fails otherwise) is taken
    /// back whole: the spool stays a run of whole records, and one written
    /// later follows them where a reader expects it.
    pub fn append(file: &mut File, stream: Stream, bytes: &[u8]) -> std::io::Result<u64> {
        let mut written = 0;
        let mut from = 0;
        let mut appended = Ok(());
        for run in zeros::runs(bytes) {
            appended = Self::append_bytes(file, stream, &bytes[from..run.start], &mut written)
                .and_then(|()| Self::append_zeros(file, stream, run.len(), &mut written));
            from = run.end;
            if appended.is_err() {
                break;
            }
        }
        if let Err(e) =
            appended.and_then(|()| Self::append_bytes(file, stream, &bytes[from..], &mut written))
        {
            if written > 0 {
                let end = file.metadata()?.len();
                file.set_len(end - written as u64)?;
            }
            return Err(e);
        }
        file.stream_position()
    }

    fn append_bytes(
        file: &mut File,
        stream: Stream,
        bytes: &[u8],
        written: &mut usize,
    ) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let header = RecordHeader {
            stream,
            len: bytes.len(),
            zero_run: false,
        };
        let mut done = 0;
        let wrote = write_record(file, &header.encode(), bytes, &mut done);
        *written += done;
        wrote
    }

    fn append_zeros(
        file: &mut File,
        stream: Stream,
        mut len: usize,
        written: &mut usize,
    ) -> std::io::Result<()> {
        while len > 0 {
            let run = len.min(zeros::RUN_MAX);
            let header = RecordHeader {
                stream,
                len: run,
                zero_run: true,
            };
            let mut done = 0;
            let wrote = write_record(file, &header.encode(), &[], &mut done);
            *written += done;
            wrote?;
            len -= run;
        }
        Ok(())
    }

    /// Record how `job` ended.
    pub fn set_end(&self, job: &str, end: &JobEnd) -> Result<(), String> {
        Ok(write_json_unsynced(&self.end_path(job), end)?)
    }

    /// Record the process group `job` runs in, by its leader's identity.
    /// Not synced: after a machine crash nothing of the job runs anyway.
    pub fn set_group(&self, job: &str, leader: ProcessIdentity) -> Result<(), String> {
        Ok(write_json_unsynced(&self.group_path(job), &leader)?)
    }

    /// The group leaders of the jobs that started and have no end: what a
    /// kernel that died left running (read by the next kernel, which is
    /// the session's only one once it holds the kernel lock).
    pub fn unended_groups(&self) -> Vec<(String, ProcessIdentity)> {
        self.jobs()
            .into_iter()
            .filter(|(_, end)| end.is_none())
            .filter_map(|(job, _)| {
                let leader = read_json(&self.group_path(&job)).ok().flatten()?;
                Some((job, leader))
            })
            .collect()
    }

    /// Forget `job` (its end is in the transcript). Its output file is kept,
    /// moved to `output/<job>.out`, when the transcript may point into it
    /// (a record of `STORED_FROM_BYTES` or more: see
    /// `session::transcript`), else removed.
    pub fn forget(&self, job: &str) {
        if !valid_job(job) {
            return;
        }
        let out = self.out_path(job);
        let kept = match holds_stored_output(&out) {
            Ok(false) => {
                let _ = std::fs::remove_file(&out);
                Ok(())
            }
            Ok(true) => self.keep_output(job),
            Err(e) => Err(e),
        };
        // Left in the spool: the next forget (a reconnecting worker forgets
        // it again) tries again.
        if let Err(e) = kept {
            tracing::warn!("spool {}: cannot keep it: {e}", out.display());
        }
        let _ = std::fs::remove_file(self.end_path(job));
        let _ = std::fs::remove_file(self.group_path(job));
    }

    /// Move `job`'s output file to `output/`, never over one there.
    fn keep_output(&self, job: &str) -> std::io::Result<()> {
        let dir = self.output_dir();
        private_subdir(&dir).map_err(std::io::Error::other)?;
        nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &self.out_path(job),
            nix::fcntl::AT_FDCWD,
            &dir.join(out_name(job)),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )?;
        Ok(())
    }
}

/// Whether the spool file at `path` has a record the transcript may point
/// to: its headers are read, skipped by their lengths. A header that makes
/// no sense (damage) says yes: what cannot be told is kept.
fn holds_stored_output(path: &Path) -> std::io::Result<bool> {
    use std::io::{BufReader, Read};
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mut records = BufReader::with_capacity(64 << 10, file);
    let mut header = [0u8; RECORD_HEADER];
    loop {
        match records.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(e),
        }
        let Ok(Some(header)) = RecordHeader::decode(&header) else {
            return Ok(true);
        };
        if header.zero_run {
            continue;
        }
        if header.len >= STORED_FROM_BYTES {
            return Ok(true);
        }
        records.seek_relative(header.len as i64)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file size limit stands in for a full disk: a write past it is
    /// cut short, the next one fails. The limit binds the whole process,
    /// so the writes happen in a child: this test binary again, running
    /// only this test.
    #[test]
    fn a_record_the_disk_has_no_room_for_is_taken_back_whole() {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        const CHILD: &str = "EUKHE_SPOOL_FULL_DISK_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let name =
                "kernel::spool::tests::a_record_the_disk_has_no_room_for_is_taken_back_whole";
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--nocapture", "--test-threads", "1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&child.stdout);
            assert!(child.status.success(), "{said}");
            assert!(said.contains("1 passed"), "the child ran no test: {said}");
            return;
        }
        let dir = std::env::temp_dir().join(format!("eukhe-spool-full-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spool = Spool::open(&dir).unwrap();
        let mut file = spool.accept("r1").unwrap().unwrap();
        let first = Spool::append(&mut file, Stream::Stdout, b"one").unwrap();
        // SIGXFSZ would end the process; ignored, a write past the limit fails with EFBIG.
        // SAFETY: SIG_IGN installs no handler; this child runs one test on one thread.
        unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::SIGXFSZ,
                nix::sys::signal::SigHandler::SigIgn,
            )
        }
        .unwrap();
        let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).unwrap();
        setrlimit(Resource::RLIMIT_FSIZE, 100, hard).unwrap();
        let cut = Spool::append(&mut file, Stream::Stdout, &[b'x'; 400]);
        assert!(cut.is_err(), "the limit let 400 bytes through");
        assert_eq!(file.metadata().unwrap().len(), first, "a cut record stays");
        setrlimit(Resource::RLIMIT_FSIZE, soft, hard).unwrap();
        let last = Spool::append(&mut file, Stream::Stderr, b"two").unwrap();
        let all = spool.read("r1", 0, last, 1 << 20).unwrap();
        assert_eq!(
            all.records,
            vec![
                (Stream::Stdout, b"one".to_vec().into(), first),
                (Stream::Stderr, b"two".to_vec().into(), last)
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn runs_of_zeros_take_a_header_on_disk_and_read_back_as_the_bytes_written() {
        let dir = std::env::temp_dir().join(format!("eukhe-spool-zeros-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spool = Spool::open(&dir).unwrap();
        let mut file = spool.accept("z1").unwrap().unwrap();
        let mixed = [b"head".as_slice(), &vec![0; 3 << 20], b"tail", &[0; 100]].concat();
        let end = Spool::append(&mut file, Stream::Stdout, &mixed).unwrap();
        // "head", six runs of at most 512 KiB, then "tail" and the short
        // run of zeros as bytes: eight headers and 108 bytes.
        assert_eq!(end, 8 * RECORD_HEADER as u64 + 108);
        let all = spool.read("z1", 0, u64::MAX, usize::MAX).unwrap();
        let joined: Vec<u8> = all.records.iter().flat_map(|r| r.1.to_vec()).collect();
        assert_eq!(joined, mixed);
        assert_eq!(all.next, end);
        assert!(all.records.iter().all(|r| r.0 == Stream::Stdout));
        // Stepping by a small bound still takes a record at a time, and the
        // zeros a run stands for count towards the bound.
        let first = spool.read("z1", 0, u64::MAX, 1).unwrap();
        assert_eq!(first.records.len(), 1);
        let runs = spool
            .read("z1", first.next, u64::MAX, zeros::RUN_MAX)
            .unwrap();
        assert_eq!(runs.records.len(), 1);
        assert_eq!(runs.records[0].1.len(), zeros::RUN_MAX);
        // A header claiming more zeros than a run can hold is damage.
        std::fs::write(dir.join("z2.out"), [3, 0, 0x20, 0, 1]).unwrap();
        assert!(spool.read("z2", 0, u64::MAX, 1 << 20).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_job_is_accepted_once_and_its_records_resume_at_any_offset() {
        let dir = std::env::temp_dir().join(format!("eukhe-spool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spool = Spool::open(&dir).unwrap();
        let mut file = spool.accept("r1").unwrap().unwrap();
        assert!(spool.accept("r1").unwrap().is_none(), "accepted twice");
        let first = Spool::append(&mut file, Stream::Stdout, b"one\xff").unwrap();
        Spool::append(&mut file, Stream::Stderr, b"two").unwrap();
        let all = spool.read("r1", 0, u64::MAX, 1 << 20).unwrap();
        assert_eq!(all.records.len(), 2);
        assert_eq!(&all.records[0].1[..], b"one\xff");
        let rest = spool.read("r1", first, u64::MAX, 1 << 20).unwrap();
        assert_eq!(
            rest.records,
            vec![(Stream::Stderr, b"two".to_vec().into(), all.next)]
        );
        // Only records that end by `until`: what the kernel said was there.
        let upto = spool.read("r1", 0, first, 1 << 20).unwrap();
        assert_eq!(upto.records.len(), 1);
        assert_eq!(upto.next, first);
        assert_eq!(spool.jobs().get("r1"), Some(&None));
        assert!(spool.accept("../x").is_err());
        // A started job with no end is a dead kernel's, until it ends.
        let leader = ProcessIdentity {
            pid: 42,
            start_time: 7,
        };
        spool.set_group("r1", leader).unwrap();
        assert_eq!(spool.unended_groups(), vec![("r1".to_string(), leader)]);
        let end = JobEnd {
            status: 0,
            signal: None,
            cancelled: false,
            notice: None,
            settled: true,
            lost_output: None,
        };
        spool.set_end("r1", &end).unwrap();
        assert!(spool.unended_groups().is_empty());
        spool.forget("r1");
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "forget leaves files"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn released_output_keeps_its_bytes_and_a_forgotten_flood_is_kept_once_in_output() {
        let session =
            std::env::temp_dir().join(format!("eukhe-spool-release-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&session);
        std::fs::create_dir_all(&session).unwrap();
        let dir = session.join("spool");
        let spool = Spool::open(&dir).unwrap();
        let mut file = spool.accept("r1").unwrap().unwrap();
        let block = vec![7u8; 1 << 20];
        for _ in 0..12 {
            Spool::append(&mut file, Stream::Stdout, &block).unwrap();
        }
        let last = Spool::append(&mut file, Stream::Stderr, b"tail").unwrap();
        file.sync_all().unwrap();
        spool.release("r1", last);
        // The transcript points into it: every record still reads.
        let all = spool.read("r1", 0, u64::MAX, 64 << 20).unwrap();
        assert_eq!(all.records.len(), 13);
        assert!(all.records[..12]
            .iter()
            .all(|(_, bytes, _)| bytes[..] == block[..]));
        assert_eq!(all.next, last);
        // Forgotten: a flood is kept (moved, the same file), small output
        // goes, and a kept job is never accepted again.
        let mut small = spool.accept("r2").unwrap().unwrap();
        Spool::append(&mut small, Stream::Stdout, b"hi\n").unwrap();
        spool.forget("r1");
        spool.forget("r2");
        assert!(!dir.join("r1.out").exists());
        assert_eq!(
            std::fs::metadata(session.join("output/r1.out"))
                .unwrap()
                .len(),
            last
        );
        assert!(!dir.join("r2.out").exists());
        assert!(!session.join("output/r2.out").exists());
        assert!(spool.accept("r1").unwrap().is_none(), "r1 ran already");
        assert!(!dir.join("r1.out").exists());
        std::fs::remove_dir_all(&session).unwrap();
    }
}
