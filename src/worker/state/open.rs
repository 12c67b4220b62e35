//! Opening a worker: the transcript read (from the replay checkpoint on)
//! into the run core's books, its repairs noticed, the worker's identity
//! recorded.

use crate::worker::WorkerError;

use crate::build_id::build_id;
use crate::clock::mono_ms;
use crate::host::process::own_identity;
use crate::host::HostKind;
use crate::laws::orphan::LostExitWindow;
use crate::paths::Paths;
use crate::session::notices;
use crate::session::spool::Spool;
use crate::session::store::{
    private_subdir, read_meta_or_spare, write_json_unsynced, SessionFiles, SessionMeta,
    WorkerRecord,
};
use crate::session::transcript::{
    damaged_path, Entry, EntryBody, Opened, OutputBytes, TornTail, Transcript,
};
use crate::worker::books::Books;
use crate::worker::checkpoint::{self};
use crate::worker::core::{Replay, RunCore};
use crate::worker::engine;

use super::{Clients, LinkOwes, TranscriptStore, Worker};

impl Worker {
    /// Open the session: transcript (cutting a torn tail), kernel (over the
    /// snapshot when there is one), and the queue rebuilt from the
    /// transcript.
    pub fn open(paths: &Paths, session: &str) -> Result<Worker, WorkerError> {
        let files = SessionFiles::new(paths.session_dir(session));
        let meta: SessionMeta = read_meta_or_spare(&files)?
            .ok_or_else(|| WorkerError::NoSession(session.to_string()))?;
        private_subdir(&files.scratch())?;
        let (opened, replay, restore_notices) = replay_transcript(&files)?;
        let shadow = Replay::resume(replay.books().clone(), std::process::id());
        let core = replay.finish();
        let config = crate::config::Config::load(&paths.config).map_err(WorkerError::Config)?;
        let lost_window = lost_exit_window(&config)?;
        engine::check(&meta.engine)?;
        let spool = Spool::open(&files.spool()).map_err(WorkerError::Spool)?;
        let output_sync = std::time::Duration::from_millis(config.output_sync_ms);
        let store = TranscriptStore::new(
            opened.transcript,
            spool,
            (shadow, opened.read_from),
            restore_notices,
            output_sync,
        );
        let mut worker = Worker {
            meta,
            files,
            store,
            core,
            books: Books::new(
                mono_ms(),
                lost_window,
                crate::host::systemd::watchdog_ping_interval()
                    .map(|every| every.as_millis() as u64),
            ),
            clients: Clients::default(),
            kernel: None,
            link_owes: LinkOwes::default(),
            kernel_connected: Default::default(),
            evidence: Default::default(),
            journal: HostKind::from_env()?.busy_journal(&paths.state),
            reschedule: Default::default(),
            stopping: false,
            identity: own_identity(),
            screens: Default::default(),
        };
        let damaged = (opened.damaged.as_slice(), opened.numbered_until);
        worker.note_transcript_repairs(opened.migrated, opened.torn.as_ref(), damaged)?;
        worker.checkpoint_if_due();
        worker.index_restore_notices();
        worker.record_identity()?;
        Ok(worker)
    }

    /// Record who this worker is. Not synced, as the kernel's record:
    /// after a machine crash the recorded worker is dead anyway, and it is
    /// only ever trusted by identity (pid and start time); an unreadable
    /// record is no worker.
    fn record_identity(&self) -> Result<(), WorkerError> {
        write_json_unsynced(
            &self.files.worker(),
            &WorkerRecord {
                identity: self.identity,
                build_id: build_id().to_string(),
            },
        )?;
        Ok(())
    }

    /// Log a migration and store a notice of each repair the open made;
    /// settle where input numbering goes on (`damaged`: the regions read,
    /// and where the last entry that numbers an input ends).
    fn note_transcript_repairs(
        &mut self,
        migrated: Option<u64>,
        torn: Option<&TornTail>,
        (damaged, numbered_until): (&[(u64, u64)], u64),
    ) -> Result<(), WorkerError> {
        if let Some(count) = migrated {
            tracing::info!(
                count,
                "the transcript was copied to the current format ({count} entries)"
            );
        }
        if let Some(torn) = torn {
            let kept = damaged_path(&self.files.transcript(), torn.offset);
            self.append(notices::torn_tail(torn, &kept))?;
        }
        // Every reader shows damage where it is (`transcript::read`): a
        // notice here would be a second one, at the end.
        for (offset, bytes) in damaged {
            tracing::warn!("the transcript is damaged: {bytes} bytes at offset {offset}");
        }
        self.settle_numbers((damaged, numbered_until), torn.is_some())
    }
}

/// Open the transcript: it, the books rebuilt from it, and every restore notice it holds.
/// The books from the transcript: from the replay checkpoint on when it
/// holds, else from the start. They need no output bytes.
fn replay_transcript(files: &SessionFiles) -> Result<(Opened, Replay, Vec<Entry>), WorkerError> {
    let path = files.transcript();
    let saved = checkpoint::load(&files.replay_checkpoint())
        .filter(|saved| Transcript::resumable(&path, &saved.after));
    let job_tag = std::process::id();
    let (mut replay, mut restore_notices, after) = match saved {
        Some(saved) => (
            Replay::resume(saved.books, job_tag),
            saved.restore_notices,
            Some(saved.after),
        ),
        None => (RunCore::replay(job_tag), Vec::new(), None),
    };
    let opened = Transcript::open_with(&path, OutputBytes::Left, after, &mut |entry| {
        replay.see(&entry);
        if is_restore_notice(&entry) {
            restore_notices.push(entry);
        }
    })?;
    if let Some(after) = after {
        tracing::info!(
            "read the transcript from offset {} (the replay checkpoint's entry {})",
            after.end,
            after.seq
        );
    }
    Ok((opened, replay, restore_notices))
}

/// How long the worker waits for a supervisor before it exits.
fn lost_exit_window(config: &crate::config::Config) -> Result<LostExitWindow, WorkerError> {
    // The supervisor passes its setting on the process backend; a unit
    // started by systemd reads the configuration itself.
    match std::env::var("EUKHE_WORKER_LOST_EXIT_MS") {
        Ok(text) => crate::config::parse_window(&text).map_err(|source| {
            WorkerError::Config(crate::config::ConfigError::EnvironmentLaw {
                variable: "EUKHE_WORKER_LOST_EXIT_MS",
                source,
            })
        }),
        Err(_) => Ok(config.worker_lost_exit_ms),
    }
}

pub(super) fn is_restore_notice(entry: &Entry) -> bool {
    matches!(
        entry.body,
        EntryBody::Notice {
            restore: Some(_),
            ..
        }
    )
}
