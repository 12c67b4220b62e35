//! The writer: opening (migrating, cutting a torn tail, keeping damage
//! aside) and appending.

use crate::session::SessionError;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::protocol::zeros;
use crate::session::{page_cache, spool};

use super::format::{self, is_magic, Header, Marker, OutputBytes, FILE_HEADER};
use super::scan::{Event, Scanner};
use super::stored::OutputStore;
use super::{files, header, v1, Damage, Entry, EntryBody, Opened, Resume, TornTail};

/// An open transcript, positioned for appending.
pub struct Transcript {
    path: PathBuf,
    file: File,
    marker: Marker,
    next_seq: u64,
    /// The file's length after the last good append: a failed append is
    /// cut back to it.
    len: u64,
    unsynced: bool,
    /// The page cache before this offset was handed back (or predates
    /// this writer): see `session::page_cache`.
    recycled: u64,
    /// Output before this offset was given to the disk as it was written,
    /// a step at a time (`page_cache::stream_out`).
    streamed: u64,
    /// Where the step before the last one began: its pages are handed
    /// back once the disk has them.
    streaming_from: u64,
    /// Reused for every record, so appending allocates nothing.
    record: Vec<u8>,
    /// The last good record, unless an append failed after it and its
    /// bytes could not be cut back.
    last: Option<Resume>,
    /// The spool files that stored output records point into since the
    /// last sync made here (by job), and at open those of every job the
    /// kernel still follows (`spool::followed_jobs`): synced before the
    /// transcript, so a durable record never points at bytes a power cut
    /// took. A group commit syncs them too, on its own copies, without
    /// clearing them: an end synced here before that commit is done must
    /// not pass them.
    stores: Vec<(String, File)>,
}

impl Transcript {
    /// Open or create the v2 transcript at `path` (0600, also fixing an
    /// older file's permissions), migrating the first-format file beside
    /// it if there is no v2 file yet. `visit` is called once per good
    /// entry, in order, as it is read: nothing is collected here.
    ///
    /// A torn tail (an unfinished last record) is cut off and reported.
    /// Damaged bytes followed by good records, or a complete record at the
    /// end that fails its checksum, are never cut: they are copied once to
    /// `transcript.damaged-<offset>` and reported when that copy is made.
    pub fn open(path: &Path, visit: &mut dyn FnMut(Entry)) -> Result<Opened, SessionError> {
        Self::open_with(path, OutputBytes::Kept, None, visit)
    }

    /// [`Transcript::open`], with output entries reaching `visit` with or
    /// without their bytes, and reading from the start or `after` a record
    /// [`Transcript::resumable`] has checked (`visit` then sees only the
    /// entries after it, and damage before it is not looked for). An
    /// opener that books the history rather than shows it (the worker, the
    /// supervisor) leaves output bytes out, so opening a transcript of many
    /// gigabytes copies none of its output (each record is still checked
    /// whole).
    pub fn open_with(
        path: &Path,
        output: OutputBytes,
        after: Option<Resume>,
        visit: &mut dyn FnMut(Entry),
    ) -> Result<Opened, SessionError> {
        let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
            path: path.to_path_buf(),
            step,
            source,
        };
        let migrated = create_or_migrate(path)?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| context("open", e))?;
        // A transcript is the session's memory, nobody else's to read.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| context("set permissions", e))?;
        let (marker, torn, header_damaged) = header(path, &file)?;
        let len = file.metadata().map_err(|e| context("stat", e))?.len();
        let read = read_records(
            path,
            &file,
            len,
            (marker, header_damaged),
            (output, after),
            visit,
        )?;
        Ok(Opened {
            transcript: Transcript {
                path: path.to_path_buf(),
                file,
                marker,
                next_seq: read.next_seq,
                len: read.end,
                unsynced: false,
                recycled: read.end,
                streamed: read.end,
                streaming_from: read.end,
                record: Vec::new(),
                last: read.last,
                stores: spool::followed_jobs(path.parent().unwrap_or(Path::new("."))),
            },
            torn: read.torn.or(torn),
            damage: read.damage,
            damaged: read.damaged,
            migrated,
            entries: read.entries,
            numbered_until: read.numbered_until,
            read_from: after.map_or(FILE_HEADER, |record| record.end),
        })
    }

    /// Whether `record` is still a good record of the v2 file at `path`,
    /// where it was: then an open may start reading after it.
    pub fn resumable(path: &Path, record: &Resume) -> bool {
        let size = record.end.saturating_sub(record.start);
        if record.start < FILE_HEADER || size < format::HEADER as u64 || size > format::SPAN {
            return false;
        }
        let Ok(file) = File::open(path) else {
            return false;
        };
        if file.metadata().map_or(true, |meta| meta.len() < record.end) {
            return false;
        }
        let mut head = [0u8; FILE_HEADER as usize];
        let mut bytes = vec![0u8; size as usize];
        if file.read_exact_at(&mut head, 0).is_err()
            || !is_magic(&head[..8])
            || file.read_exact_at(&mut bytes, record.start).is_err()
        {
            return false;
        }
        if head[8..] != record.file {
            return false;
        }
        Header::read(&bytes, &record.file).is_some_and(|header| {
            header.seq == record.seq
                && header.end(record.start) == Some(record.end)
                && format::decode_keeping(&header, &bytes, OutputBytes::Left).is_some()
        })
    }

    /// The jobs whose spool files the next sync syncs first.
    #[cfg(test)]
    pub(super) fn store_jobs(&self) -> Vec<&str> {
        self.stores.iter().map(|(job, _)| job.as_str()).collect()
    }

    /// The last good record: where a later open may resume.
    pub fn last_record(&self) -> Option<Resume> {
        self.last
    }

    /// fdatasync whatever was written, by this writer or an earlier one
    /// (a worker that died before its group commit).
    pub fn sync_written(&mut self) -> Result<(), SessionError> {
        self.sync_stores()?;
        self.file
            .sync_data()
            .map_err(|source| SessionError::Transcript {
                path: self.path.clone(),
                source,
            })?;
        self.unsynced = false;
        Ok(())
    }

    /// Store an entry durably (written and fdatasync'd) and return it.
    pub fn append(&mut self, at_ms: u64, body: EntryBody) -> Result<Entry, SessionError> {
        self.append_with(at_ms, body, true, None)
    }

    /// Store an entry that nobody is told about yet, without waiting for
    /// the disk: the next synced append or [`Transcript::sync`] covers it
    /// (a crash of this process keeps it in the page cache; a machine
    /// crash loses only what was never acknowledged).
    pub fn append_unsynced(&mut self, at_ms: u64, body: EntryBody) -> Result<Entry, SessionError> {
        self.append_with(at_ms, body, false, None)
    }

    /// Store an output entry whose bytes are job `job`'s spool record
    /// ending at its `spool_end`, leaving them there: the record holds
    /// where they are, their length and CRC32 (output is written once).
    /// The spool file is synced before the transcript from now on. When
    /// the spool file cannot be opened the bytes are stored in the record,
    /// as [`Transcript::append_unsynced`] does; `sync` as for
    /// [`Transcript::append`].
    pub fn append_stored(
        &mut self,
        at_ms: u64,
        body: EntryBody,
        job: &str,
        sync: bool,
    ) -> Result<Entry, SessionError> {
        if !self.stores.iter().any(|(known, _)| known == job) {
            let session = self.path.parent().unwrap_or(Path::new("."));
            match spool::open_job(session, job) {
                Ok(file) => self.stores.push((job.to_string(), file)),
                Err(why) => {
                    tracing::warn!(
                        "transcript {}: {why}; output kept in the transcript",
                        self.path.display()
                    );
                    return self.append_with(at_ms, body, sync, None);
                }
            }
        }
        self.append_with(at_ms, body, sync, Some(job))
    }

    /// fdatasync the spool files stored output points into, then forget
    /// them (the caller syncs the transcript next).
    fn sync_stores(&mut self) -> Result<(), SessionError> {
        for (job, file) in &self.stores {
            file.sync_data()
                .map_err(|source| SessionError::TranscriptStep {
                    path: self.path.with_file_name(format!("spool/{job}.out")),
                    step: "sync the output it stores",
                    source,
                })?;
        }
        self.stores.clear();
        Ok(())
    }

    /// Wait for the disk if an unsynced append happened since the last
    /// sync.
    pub fn sync(&mut self) -> Result<(), SessionError> {
        if self.unsynced {
            self.sync_stores()?;
            self.file
                .sync_data()
                .map_err(|source| SessionError::TranscriptStep {
                    path: self.path.clone(),
                    step: "sync",
                    source,
                })?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// For a group commit on another thread: a handle to fdatasync when an
    /// unsynced append happened since the last sync (counted as synced from
    /// now: the caller syncs it; a synced append still syncs itself).
    pub fn take_sync_handle(&mut self) -> Result<Option<SyncHandle>, SessionError> {
        if !self.unsynced {
            return Ok(None);
        }
        let file = self
            .file
            .try_clone()
            .map_err(|source| SessionError::TranscriptStep {
                path: self.path.clone(),
                step: "sync",
                source,
            })?;
        let stores = self
            .stores
            .iter()
            .map(|(_, file)| file.try_clone())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| SessionError::TranscriptStep {
                path: self.path.clone(),
                step: "sync",
                source,
            })?;
        self.unsynced = false;
        let recycle = (self.len - self.recycled >= page_cache::RECYCLE_BYTES).then(|| {
            let range = (self.recycled, self.len);
            self.recycled = self.len;
            range
        });
        Ok(Some(SyncHandle {
            file,
            path: self.path.clone(),
            recycle,
            stores,
        }))
    }

    /// Whether an append since the last sync may not be on disk yet.
    pub fn has_unsynced(&self) -> bool {
        self.unsynced
    }

    /// Where the transcript is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number the next entry will take.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// How much was appended since the page cache was last handed back
    /// (a group commit that found at least `RECYCLE_BYTES` to hand back).
    pub fn unrecycled(&self) -> u64 {
        self.len - self.recycled
    }

    /// The file's sync marker: each transcript file has its own.
    pub fn marker(&self) -> Marker {
        self.marker
    }

    /// Where the next entry's record will start.
    pub fn end_offset(&self) -> u64 {
        self.len
    }

    fn append_with(
        &mut self,
        at_ms: u64,
        body: EntryBody,
        sync: bool,
        stored_in: Option<&str>,
    ) -> Result<Entry, SessionError> {
        let entry = Entry {
            seq: self.next_seq,
            at_ms,
            body,
        };
        let tail = format::encode_parts(&self.marker, &entry, stored_in, &mut self.record)
            .map_err(|e| e.within(format!("transcript {}", self.path.display())))?;
        if sync {
            self.sync_stores()?;
        }
        let written = write_parts(&mut self.file, self.len, &self.record, tail).and_then(|()| {
            if sync {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        let record_len = (self.record.len() + tail.len()) as u64;
        if let Err(e) = written {
            self.cut_back();
            return Err(SessionError::Transcript {
                path: self.path.clone(),
                source: e,
            });
        }
        self.last = Some(Resume {
            file: self.marker,
            start: self.len,
            end: self.len + record_len,
            seq: entry.seq,
        });
        self.len += record_len;
        self.next_seq += 1;
        self.unsynced = !sync;
        if !sync && self.len.saturating_sub(self.streamed) >= page_cache::RECYCLE_BYTES {
            page_cache::stream_out(&self.file, self.streaming_from, self.streamed, self.len);
            (self.streaming_from, self.streamed) = (self.streamed, self.len);
        }
        Ok(entry)
    }

    /// After a failed append: a full disk can take part of a record, so
    /// cut it off. Readers would resynchronise past it anyway, but the
    /// bytes are nobody's.
    fn cut_back(&mut self) {
        if self.file.set_len(self.len).is_err() {
            // The record may be whole and readable: never give its number
            // to another entry.
            self.next_seq += 1;
            self.last = None;
            if let Ok(meta) = self.file.metadata() {
                self.len = meta.len();
            }
        }
    }
}

/// Write `head` then `tail` whole at the file's end (`at`, which places
/// the file's blocks), with as few `writev` calls as the file takes,
/// leaving the whole blocks of zeros in `tail` as holes (`session::zeros`):
/// the file is grown past each from its real end (it is opened to append,
/// so the next write goes on after the hole).
fn write_parts(file: &mut File, at: u64, head: &[u8], tail: &[u8]) -> io::Result<()> {
    let mut head = head;
    let mut from = 0;
    for hole in zeros::holes(at + head.len() as u64, tail) {
        write_all_parts(file, head, &tail[from..hole.start])?;
        let end = file.metadata()?.len();
        file.set_len(end + hole.len() as u64)?;
        head = &[];
        from = hole.end;
    }
    write_all_parts(file, head, &tail[from..])
}

fn write_all_parts(file: &mut File, head: &[u8], tail: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < head.len() + tail.len() {
        let wrote = if done < head.len() {
            file.write_vectored(&[IoSlice::new(&head[done..]), IoSlice::new(tail)])
        } else {
            file.write(&tail[done - head.len()..])
        };
        match wrote {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A group commit's hold on the transcript: everything appended before it
/// was taken becomes durable when it commits.
pub struct SyncHandle {
    file: File,
    path: PathBuf,
    /// The range whose pages go back to the page cache once synced.
    recycle: Option<(u64, u64)>,
    /// The spool files stored output points into: synced first.
    stores: Vec<File>,
}

impl SyncHandle {
    /// fdatasync (the spool files stored output points into, then the
    /// transcript), then hand back the pages of a long stretch of output
    /// now on disk (blocking: run it off the worker's thread).
    pub fn commit(self) -> Result<(), SessionError> {
        for store in &self.stores {
            store
                .sync_data()
                .map_err(|source| SessionError::TranscriptStep {
                    path: self.path.clone(),
                    step: "group commit of the output it stores",
                    source,
                })?;
        }
        self.file
            .sync_data()
            .map_err(|source| SessionError::TranscriptStep {
                path: self.path.clone(),
                step: "group commit",
                source,
            })?;
        if let Some((from, to)) = self.recycle {
            page_cache::drop_synced(&self.file, from, to);
        }
        Ok(())
    }
}

/// Make sure there is a v3 file at `path`: copied from the v2 file beside
/// it if there is one, else migrated from the first-format file if there
/// is one (how many entries it held), else created empty. None: no
/// migration from the first format.
fn create_or_migrate(path: &Path) -> Result<Option<u64>, SessionError> {
    let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
        path: path.to_path_buf(),
        step,
        source,
    };
    if files::exists(path).map_err(|e| context("stat", e))? {
        return Ok(None);
    }
    let v2 = files::v2_path(path);
    if files::exists(&v2).map_err(|e| context("stat", e))? {
        files::copy_v2(&v2, path)?;
        tracing::info!(
            "transcript {}: copied from {} (left as it is, for older builds)",
            path.display(),
            v2.display()
        );
        return Ok(None);
    }
    let old = files::v1_path(path);
    if files::exists(&old).map_err(|e| context("stat", e))? {
        Ok(Some(v1::migrate(&old, path)?))
    } else {
        files::create(path, |_, _| Ok(()))?;
        Ok(None)
    }
}

/// What reading a transcript's records found.
struct Records {
    /// The number the next entry will take.
    next_seq: u64,
    /// How many good entries were visited.
    entries: u64,
    /// The last good record.
    last: Option<Resume>,
    /// Where the next record will start.
    end: u64,
    /// The torn tail cut off, if there was one.
    torn: Option<TornTail>,
    /// Damage kept aside by this read.
    damage: Vec<Damage>,
    /// Every damaged region read.
    damaged: Vec<(u64, u64)>,
    /// Where the last entry that numbers an input ends.
    numbered_until: u64,
}

/// Read the records of `file` (`len` bytes) after its header: each good
/// entry to `visit`, in order; a torn tail cut off; damage kept aside.
fn read_records(
    path: &Path,
    file: &File,
    len: u64,
    (marker, header_damaged): (Marker, bool),
    (output, after): (OutputBytes, Option<Resume>),
    visit: &mut dyn FnMut(Entry),
) -> Result<Records, SessionError> {
    let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
        path: path.to_path_buf(),
        step,
        source,
    };
    let start = after.map_or(FILE_HEADER, |record| record.end);
    let mut scanner = Scanner::new(file, len, marker, start)
        .after_seq(after.map_or(0, |record| record.seq))
        .with_output_bytes(output)
        .with_store(OutputStore::beside(path))
        .with_damaged_header(header_damaged);
    let mut records = Records {
        next_seq: after.map_or(1, |record| record.seq + 1),
        entries: 0,
        last: after,
        end: len,
        torn: None,
        damage: Vec::new(),
        damaged: Vec::new(),
        numbered_until: start,
    };
    while let Some(event) = scanner.next_event().map_err(|e| context("read", e))? {
        match event {
            Event::Entry { entry, start, end } => {
                records.last = Some(Resume {
                    file: marker,
                    start,
                    end,
                    seq: entry.seq,
                });
                records.next_seq = entry.seq + 1;
                records.entries += 1;
                if numbers_an_input(&entry) {
                    records.numbered_until = end;
                }
                visit(entry);
            }
            // Its bytes are copied aside before they are cut (a damaged
            // last record reads as unfinished too); bytes that cannot be
            // copied stay, as damage.
            Event::Tail {
                offset,
                len: bytes,
                torn: true,
            } if kept_aside(path, file, offset, bytes) => {
                file.set_len(offset)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| context("cut the torn tail", e))?;
                records.end = offset;
                records.torn = Some(TornTail { offset, bytes });
            }
            Event::Damage { offset, len: bytes }
            | Event::Tail {
                offset, len: bytes, ..
            } => {
                records.damaged.push((offset, bytes));
                records.damage.extend(keep(path, file, offset, bytes));
            }
        }
    }
    Ok(records)
}

/// Whether `entry` gives an input its number: its queueing, or its user
/// bash's start.
fn numbers_an_input(entry: &Entry) -> bool {
    matches!(
        entry.body,
        EntryBody::Input { .. } | EntryBody::Bash { bash: Some(_), .. }
    )
}

/// The file's marker, after making sure its header is there: a file
/// shorter than a header (never made by this module, which renames whole
/// files into place) is started afresh and its bytes reported torn. The
/// marker is the one the records carry; whether the header is damaged.
fn header(path: &Path, file: &File) -> Result<(Marker, Option<TornTail>, bool), SessionError> {
    let context = |step: &'static str, source: io::Error| SessionError::TranscriptStep {
        path: path.to_path_buf(),
        step,
        source,
    };
    let len = file.metadata().map_err(|e| context("stat", e))?.len();
    if len < FILE_HEADER {
        // A part of a header holds no entry: kept aside when it can be,
        // and never a reason not to start.
        if len > 0 {
            kept_aside(path, file, 0, len);
        }
        let marker = format::new_marker().map_err(|e| context("random marker", e))?;
        file.set_len(0)
            .and_then(|()| {
                let mut file = file;
                file.write_all(&format::file_header(&marker))
            })
            .and_then(|()| file.sync_all())
            .map_err(|e| context("write header", e))?;
        let torn = (len > 0).then_some(TornTail {
            offset: 0,
            bytes: len,
        });
        return Ok((marker, torn, false));
    }
    match header::read(file, len).map_err(|e| context("read header", e))? {
        Some(hint) => Ok((hint.marker, None, hint.damaged)),
        None => Err(SessionError::NotATranscript {
            path: path.to_path_buf(),
        }),
    }
}

/// Whether the bytes of a torn tail are kept aside (copied now, or by an
/// earlier open), so cutting them loses nothing.
fn kept_aside(path: &Path, file: &File, offset: u64, bytes: u64) -> bool {
    let kept = files::damaged_path(path, offset);
    match files::keep(file, offset, bytes, &kept) {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(
                "transcript {}: cannot keep its unfinished last record at {offset} in {}: {e}",
                path.display(),
                kept.display()
            );
            false
        }
    }
}

/// Keep damaged bytes aside; a [`Damage`] only when this open made the
/// copy.
fn keep(path: &Path, file: &File, offset: u64, bytes: u64) -> Option<Damage> {
    let kept = files::damaged_path(path, offset);
    match files::keep(file, offset, bytes, &kept) {
        Ok(true) => Some(Damage {
            offset,
            bytes,
            kept,
        }),
        Ok(false) => None,
        Err(e) => {
            // The damaged bytes stay in the transcript (never cut), so the
            // next open tries again; failing here would only stop the
            // session's worker from starting.
            tracing::warn!(
                "transcript {}: cannot keep damaged bytes at {offset} in {}: {e}",
                path.display(),
                kept.display()
            );
            None
        }
    }
}
