//! A session's files under the state directory:
//! `sessions/<id>/{meta.json, env.json, transcript, snapshot.json, worker.json, kernel.json,
//! spool/, scratch/, given-up}` (`namespace.json` is an earlier version's snapshot).
//! Directories are 0700 and files 0600: nobody else reads a session.

use super::error::NameRefused;
use super::SessionError;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::laws::adoption::ProcessIdentity;
use crate::laws::limits::ResourceLimits;

/// What a session is, as created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionMeta {
    /// Its id: eight hex digits, never reused.
    pub id: String,
    /// Its name (the id unless one was given).
    pub name: String,
    /// The working directory it was created in.
    pub cwd: String,
    /// When it was created, wall-clock ms.
    pub created_ms: u64,
    /// The engine that turns the session's input into runs.
    #[serde(default = "default_engine")]
    pub engine: String,
    /// Its kernel's resource limits, applied to every kernel it gets.
    #[serde(default, skip_serializing_if = "ResourceLimits::is_none")]
    pub limits: ResourceLimits,
}

fn default_engine() -> String {
    "shell".into()
}

/// The worker process serving a session, as its supervisor launched it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRecord {
    pub identity: ProcessIdentity,
    pub build_id: String,
}

/// Check a session name: 1 to 64 characters, no path separator, no `..`,
/// no NUL or other control character.
pub fn validate_name(name: &str) -> Result<(), SessionError> {
    use unicode_general_category::{get_general_category, GeneralCategory};
    let refused = |why: NameRefused| Err(SessionError::Name(why));
    let owned = || name.to_string();
    if name.is_empty() {
        return refused(NameRefused::Empty);
    }
    if name.chars().count() > 64 {
        return refused(NameRefused::TooLong(owned()));
    }
    if name.contains('/') || name.contains('\\') {
        return refused(NameRefused::PathSeparator(owned()));
    }
    if name == "." {
        return refused(NameRefused::CurrentDirectory);
    }
    if name.contains("..") {
        return refused(NameRefused::DotDot(owned()));
    }
    if name.starts_with('-') {
        return refused(NameRefused::LeadingDash(owned()));
    }
    if let Some(control) = name.chars().find(|c| c.is_control()) {
        return refused(NameRefused::Control {
            name: owned(),
            control,
        });
    }
    let invisible = name
        .chars()
        .find(|&c| get_general_category(c) == GeneralCategory::Format);
    if let Some(invisible) = invisible {
        return refused(NameRefused::Invisible {
            name: owned(),
            invisible,
        });
    }
    if name.chars().all(char::is_whitespace) {
        return refused(NameRefused::Whitespace(owned()));
    }
    Ok(())
}

/// A session name as it is kept and compared: Unicode NFC, so a name
/// typed with a composed or a decomposed accent names one session.
pub fn normalize_name(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfc().collect()
}

/// How long a session id is (every one: [`new_id`] makes no other).
pub const SESSION_ID_LEN: usize = 8;

/// Whether `id` is a well-formed session id (as [`new_id`] makes them).
pub fn valid_id(id: &str) -> bool {
    id.len() == SESSION_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// A fresh random session id: 8 lowercase hex digits.
pub fn new_id() -> String {
    let mut bytes = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = u32::from_be_bytes(bytes) ^ now.rotate_left(13) ^ std::process::id();
    format!("{mixed:08x}")
}

/// Create a directory (and its parents) private to this user.
pub fn private_dir(path: &Path) -> Result<(), SessionError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| file_error("cannot create", path, e))
}

/// Create session directory `dir` (0700, with its parents) and put its
/// name on disk: a file synced inside it is lost with it otherwise, the
/// session an acknowledged `new` made among it. The directory that holds
/// every session is put on disk too when this made it.
pub fn create_session_dir(dir: &Path) -> Result<(), SessionError> {
    let sessions = directory_of(dir);
    let sessions_were_there = sessions.is_dir();
    private_dir(dir)?;
    sync_names_in(sessions)?;
    if !sessions_were_there {
        sync_names_in(directory_of(sessions))?;
    }
    Ok(())
}

/// Put the names in directory `dir` on disk: a file renamed or created in
/// it survives a power cut from then on (syncing a file does not sync its
/// name).
fn sync_names_in(dir: &Path) -> Result<(), SessionError> {
    sync_dir(dir).map_err(|e| file_error("cannot sync the names in", dir, e))
}

/// Put the name of `file` on disk (its directory synced).
pub fn sync_name_of(file: &Path) -> Result<(), SessionError> {
    sync_names_in(directory_of(file))
}

/// The directory `path` is in (`.` for a bare name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Append `bytes` to `path` (created 0600 if missing) and put them on disk
/// before returning: the file's name too when this append made it (a
/// record synced into a file whose name is not would be lost with it).
pub fn append_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = open_private_append(path)?;
    let made_now = file.metadata()?.len() == 0;
    file.write_all(bytes)?;
    file.sync_data()?;
    if made_now {
        sync_dir(directory_of(path))?;
    }
    Ok(())
}

/// A file call on `path` that failed.
fn file_error(action: &'static str, path: &Path, source: std::io::Error) -> SessionError {
    SessionError::File {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Create a directory private to this user inside a session's directory,
/// which must exist: a worker or kernel still starting when its session is
/// removed never brings the session's directory back.
pub fn private_subdir(path: &Path) -> Result<(), SessionError> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(file_error("cannot create", path, e))
        }
        _ => Ok(()),
    }
}

/// Write `value` as JSON to `path` atomically, 0600, on disk (its name
/// too) before it returns.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), SessionError> {
    write_json_with(path, value, true)?;
    sync_name_of(path)
}

/// Write `value` as JSON to `path` atomically, 0600, without waiting for
/// the disk: for files whose writer's own crash must not lose them (the
/// page cache keeps them) but that a machine crash makes moot or merely
/// older (the kernel's spool ends and snapshot: a reboot ends the kernel).
pub fn write_json_unsynced<T: Serialize>(path: &Path, value: &T) -> Result<(), SessionError> {
    write_json_with(path, value, false)
}

fn write_json_with<T: Serialize>(path: &Path, value: &T, sync: bool) -> Result<(), SessionError> {
    let (file, tmp) = write_json_aside(path, value)?;
    let written = if sync { file.sync_all() } else { Ok(()) };
    drop(file);
    written
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| forget_aside(&tmp, path, e))
}

/// `value` as JSON in a fresh 0600 file beside `path` (its `.tmp`), not
/// yet synced nor renamed into place: the open file and its path.
fn write_json_aside<T: Serialize>(
    path: &Path,
    value: &T,
) -> Result<(std::fs::File, PathBuf), SessionError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value)?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut file| file.write_all(&bytes).map(|_| file));
    match written {
        Ok(file) => Ok((file, tmp)),
        Err(e) => Err(forget_aside(&tmp, path, e)),
    }
}

/// A write that failed (a full disk) leaves nothing behind.
fn forget_aside(tmp: &Path, path: &Path, source: std::io::Error) -> SessionError {
    let _ = std::fs::remove_file(tmp);
    file_error("cannot write", path, source)
}

/// Read JSON from `path`; `None` when the file does not exist.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, SessionError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| SessionError::Json {
                    path: path.to_path_buf(),
                    source,
                })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(file_error("cannot read", path, e)),
    }
}

/// One session's directory.
#[derive(Clone, Debug)]
pub struct SessionFiles {
    pub dir: PathBuf,
}

impl SessionFiles {
    pub fn new(dir: PathBuf) -> Self {
        SessionFiles { dir }
    }
    pub fn meta(&self) -> PathBuf {
        self.dir.join("meta.json")
    }
    /// The transcript (the second format; the first, `transcript`, is
    /// read once and copied into it).
    pub fn transcript(&self) -> PathBuf {
        self.dir.join("transcript3")
    }
    /// How the session's first environment is made (`session::env`).
    pub fn env(&self) -> PathBuf {
        self.dir.join("env.json")
    }
    /// A spare session's metadata: a session made ahead of `eukhe new`,
    /// worker and kernel started, that is no session (never listed) until
    /// a `new` claims it by writing `meta.json`.
    pub fn spare(&self) -> PathBuf {
        self.dir.join("spare.json")
    }
    /// Whether the session (or the spare) is still there: a removal
    /// renames its directory away.
    pub fn exist(&self) -> bool {
        self.meta().exists() || self.spare().exists()
    }
    pub fn namespace(&self) -> PathBuf {
        self.dir.join("namespace.json")
    }
    pub fn worker(&self) -> PathBuf {
        self.dir.join("worker.json")
    }
    pub fn given_up(&self) -> PathBuf {
        self.dir.join("given-up")
    }
    pub fn scratch(&self) -> PathBuf {
        self.dir.join("scratch")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("worker.log")
    }
    /// The whole shell state (`session::snapshot`).
    pub fn snapshot(&self) -> PathBuf {
        self.dir.join("snapshot.json")
    }
    /// The live kernel's identity and build.
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("kernel.json")
    }
    /// Held (flock) by the live kernel: one kernel per session.
    pub fn kernel_lock(&self) -> PathBuf {
        self.dir.join("kernel.lock")
    }
    /// Jobs' output and ends (`session::spool` is its layout).
    pub fn spool(&self) -> PathBuf {
        self.dir.join(super::spool::SPOOL_DIR)
    }
    pub fn kernel_log(&self) -> PathBuf {
        self.dir.join("kernel.log")
    }
    /// The transcript's restore notices (an index the worker keeps), so a
    /// tail read from disk still shows one line per restore.
    pub fn restore_notices(&self) -> PathBuf {
        self.dir.join("restore-notices.json")
    }

    /// How far input numbering may have gone (`session::numbers`).
    pub fn numbers(&self) -> PathBuf {
        self.dir.join("numbers.json")
    }

    /// The worker's books as of a record of the transcript (a cache of
    /// the transcript's: see `worker::checkpoint`).
    pub fn replay_checkpoint(&self) -> PathBuf {
        self.dir.join("replay.json")
    }
}

/// The kernel serving a session, as it recorded itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelRecord {
    pub identity: ProcessIdentity,
    pub build_id: String,
    pub protocol: u32,
}

/// Every session under `state`, by creation time.
pub fn list_sessions(state: &Path) -> Vec<SessionMeta> {
    metadata_in(state, "meta.json", |_| true)
}

/// The metadata in `file` of every session directory under `state` that
/// `keep` accepts and where that file reads, by creation time.
fn metadata_in(state: &Path, file: &str, keep: impl Fn(&Path) -> bool) -> Vec<SessionMeta> {
    let Ok(dirs) = std::fs::read_dir(state.join("sessions")) else {
        return Vec::new();
    };
    let mut found: Vec<SessionMeta> = dirs
        .flatten()
        .map(|d| d.path())
        .filter(|dir| keep(dir))
        .filter_map(|dir| read_json::<SessionMeta>(&dir.join(file)).ok().flatten())
        .collect();
    found.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    found
}

/// What is wrong with a session's files that would stop it from
/// starting, in one line: the file and what is wrong with it. The
/// snapshot (or an earlier version's `namespace.json`, read when there is
/// no snapshot) is read only by a kernel starting over it, so it is
/// checked only `with_snapshot` (no kernel lives: a live one holds the
/// shell state and rewrites the file after each job).
pub fn check_files(files: &SessionFiles, with_snapshot: bool) -> Result<(), SessionError> {
    if read_meta_or_spare(files)?.is_none() {
        return Err(SessionError::Missing { path: files.meta() });
    }
    read_json::<crate::session::env::SessionEnv>(&files.env())?;
    if with_snapshot {
        crate::session::snapshot::load_or_migrate(&files.snapshot(), &files.namespace())?;
    }
    Ok(())
}

/// A session's metadata, or a spare's while no `new` has claimed it.
pub fn read_meta_or_spare(files: &SessionFiles) -> Result<Option<SessionMeta>, SessionError> {
    match read_json::<SessionMeta>(&files.meta())? {
        Some(meta) => Ok(Some(meta)),
        None => read_json(&files.spare()),
    }
}

/// The spare sessions under `state` (`spare.json` and no `meta.json`),
/// oldest first.
pub fn list_spares(state: &Path) -> Vec<SessionMeta> {
    metadata_in(state, "spare.json", |dir| !dir.join("meta.json").exists())
}

/// A new session's files: its environment (if given), then its metadata,
/// each synced; the session exists (is listed) once its metadata does,
/// and then its environment is there.
pub fn write_session(
    files: &SessionFiles,
    env: Option<&crate::session::env::SessionEnv>,
    meta: &SessionMeta,
) -> Result<(), SessionError> {
    let Some(env) = env else {
        return write_json(&files.meta(), meta);
    };
    let (env_path, meta_path) = (files.env(), files.meta());
    let (env_file, env_tmp) = write_json_aside(&env_path, env)?;
    let (meta_file, meta_tmp) = match write_json_aside(&meta_path, meta) {
        Ok(aside) => aside,
        Err(e) => {
            let _ = std::fs::remove_file(&env_tmp);
            return Err(e);
        }
    };
    // Both synced at once: the file system commits them together, where
    // one after the other waits for two commits.
    let synced = std::thread::scope(|scope| {
        let env_synced = scope.spawn(|| env_file.sync_all());
        let meta_synced = meta_file.sync_all();
        let env_synced = env_synced
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the sync's thread failed")));
        (env_synced, meta_synced)
    });
    drop((env_file, meta_file));
    let installed = match synced {
        (Err(e), _) => Err(forget_aside(&env_tmp, &env_path, e)),
        (_, Err(e)) => Err(forget_aside(&env_tmp, &meta_path, e)),
        // The environment's name first: never the metadata without it.
        _ => std::fs::rename(&env_tmp, &env_path)
            .map_err(|e| forget_aside(&env_tmp, &env_path, e))
            .and_then(|_| {
                std::fs::rename(&meta_tmp, &meta_path)
                    .map_err(|e| file_error("cannot write", &meta_path, e))
            }),
    };
    if let Err(e) = installed {
        let _ = std::fs::remove_file(&meta_tmp);
        return Err(e);
    }
    // One sync of the directory puts both names on disk.
    sync_name_of(&meta_path)
}

/// Sessions under `state` whose metadata cannot be read (so
/// [`list_sessions`] leaves them out): their ids and what is wrong.
pub fn list_unreadable(state: &Path) -> Vec<(String, String)> {
    let Ok(dirs) = std::fs::read_dir(state.join("sessions")) else {
        return Vec::new();
    };
    let mut unreadable: Vec<(String, String)> = dirs
        .flatten()
        .filter_map(|d| {
            let id = d.file_name().into_string().ok().filter(|id| valid_id(id))?;
            // A directory without metadata is a creation cut short (the
            // metadata is written last): no session, nothing to report.
            read_json::<SessionMeta>(&d.path().join("meta.json"))
                .err()
                .map(|problem| (id, problem.to_string()))
        })
        .collect();
    unreadable.sort();
    unreadable
}

/// Room left for this user on the file system holding `path`, and its
/// size, in bytes; `None` when it cannot be asked.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    let block = stat.fragment_size() as u64;
    Some((
        stat.blocks_available() as u64 * block,
        stat.blocks() as u64 * block,
    ))
}

/// Open a private append-only file (created 0600 if missing).
pub fn private_append(path: &Path) -> Result<std::fs::File, SessionError> {
    open_private_append(path).map_err(|e| file_error("cannot open", path, e))
}

fn open_private_append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for (name, why) in [
            ("", "empty"),
            ("a/b", "path separator"),
            ("..", "\"..\""),
            ("a\0b", "control character"),
            ("tab\there", "control character"),
        ] {
            let err = validate_name(name).unwrap_err().to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        assert!(validate_name("fix the build").is_ok());
    }

    #[test]
    fn ids_are_eight_lowercase_hex_digits() {
        let id = new_id();
        assert!(valid_id(&id), "{id}");
        assert!(!valid_id("../etc"));
    }

    #[test]
    fn a_durable_append_makes_a_private_file_and_keeps_what_was_there() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("eukhe-append-{}", std::process::id()));
        private_dir(&dir).unwrap();
        let path = dir.join("records.log");
        append_durably(&path, b"one\n").unwrap();
        append_durably(&path, b"two\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let missing = dir.join("no-such-dir").join("records.log");
        assert!(append_durably(&missing, b"x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_new_sessions_files_are_both_there_or_neither_with_nothing_left_aside() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("eukhe-write-session-{}", std::process::id()));
        create_session_dir(&dir).unwrap();
        let files = SessionFiles::new(dir.clone());
        let meta = SessionMeta {
            id: "0123abcd".into(),
            name: "first".into(),
            cwd: "/".into(),
            created_ms: 1,
            engine: "shell".into(),
            limits: Default::default(),
        };
        let env = crate::session::env::SessionEnv {
            client: Some([("LANG".to_string(), "C.UTF-8".to_string())].into()),
            set: Default::default(),
        };
        write_session(&files, Some(&env), &meta).unwrap();
        let read: SessionMeta = read_json(&files.meta()).unwrap().unwrap();
        assert_eq!(read.name, "first");
        let read_env: crate::session::env::SessionEnv = read_json(&files.env()).unwrap().unwrap();
        assert_eq!(read_env, env);
        for file in [files.meta(), files.env()] {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{file:?}");
        }
        let names = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&dir), ["env.json", "meta.json"]);
        // The metadata cannot be written (its file's place is taken): no
        // session, and the environment is not left aside either.
        let other = dir.join("other");
        create_session_dir(&other).unwrap();
        std::fs::create_dir(other.join("meta.tmp")).unwrap();
        let files = SessionFiles::new(other.clone());
        assert!(write_session(&files, Some(&env), &meta).is_err());
        assert_eq!(names(&other), ["meta.tmp"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
