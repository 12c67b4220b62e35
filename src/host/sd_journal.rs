//! Reading the journal through libsystemd's `sd_journal` API, loaded at run
//! time (`libsystemd.so.0`), so the process backend runs where there is no
//! libsystemd and the build needs no development headers.

use super::HostError;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// Only journal files of this machine.
const SD_JOURNAL_LOCAL_ONLY: c_int = 1;

type Open = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type AddMatch = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> c_int;
type Cursor = unsafe extern "C" fn(*mut c_void) -> c_int;
type GetData =
    unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const c_void, *mut usize) -> c_int;
type GetRealtime = unsafe extern "C" fn(*mut c_void, *mut u64) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void);

struct Api {
    open: Open,
    add_match: AddMatch,
    seek_tail: Cursor,
    previous: Cursor,
    get_data: GetData,
    get_realtime_usec: GetRealtime,
    close: Close,
}

fn load() -> Result<Api, HostError> {
    let name = CString::new("libsystemd.so.0").expect("no NUL");
    // SAFETY: dlopen with a valid C string; the handle is never closed, so
    // the symbols below stay valid for the life of the process.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(HostError::Journal(
            "cannot load libsystemd.so.0 to read the journal".into(),
        ));
    }
    let symbol = |name: &str| -> Result<*mut c_void, HostError> {
        let cname = CString::new(name).expect("no NUL");
        // SAFETY: dlsym on a live handle with a valid C string.
        let pointer = unsafe { libc::dlsym(handle, cname.as_ptr()) };
        if pointer.is_null() {
            Err(HostError::Journal(format!("libsystemd.so.0 has no {name}")))
        } else {
            Ok(pointer)
        }
    };
    // SAFETY: each symbol is the libsystemd function of that name, whose C
    // signature (sd-journal(3)) the function pointer type matches.
    unsafe {
        Ok(Api {
            open: std::mem::transmute::<*mut c_void, Open>(symbol("sd_journal_open")?),
            add_match: std::mem::transmute::<*mut c_void, AddMatch>(symbol(
                "sd_journal_add_match",
            )?),
            seek_tail: std::mem::transmute::<*mut c_void, Cursor>(symbol("sd_journal_seek_tail")?),
            previous: std::mem::transmute::<*mut c_void, Cursor>(symbol("sd_journal_previous")?),
            get_data: std::mem::transmute::<*mut c_void, GetData>(symbol("sd_journal_get_data")?),
            get_realtime_usec: std::mem::transmute::<*mut c_void, GetRealtime>(symbol(
                "sd_journal_get_realtime_usec",
            )?),
            close: std::mem::transmute::<*mut c_void, Close>(symbol("sd_journal_close")?),
        })
    }
}

/// One journal entry: the requested fields that it has, and the time
/// journald received it (wall-clock milliseconds, set by journald).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalEntry {
    /// The requested fields it has, by name.
    pub fields: HashMap<String, String>,
    /// When journald received it.
    pub received_ms: u64,
}

impl JournalEntry {
    /// The value of field `name`, if the entry has it.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

fn errno_text(code: c_int) -> String {
    std::io::Error::from_raw_os_error(-code).to_string()
}

/// Every entry of this machine's journal (as far as this user may read it)
/// that has all `matches` (`FIELD=value`), newest first, with the named
/// `fields`. `visit` returns false to stop early.
pub fn newest_first(
    matches: &[String],
    fields: &[&str],
    mut visit: impl FnMut(JournalEntry) -> bool,
) -> Result<(), HostError> {
    let api = load()?;
    let mut journal: *mut c_void = std::ptr::null_mut();
    // SAFETY: sd_journal_open writes a journal handle to `journal`.
    let opened = unsafe { (api.open)(&mut journal, SD_JOURNAL_LOCAL_ONLY) };
    if opened < 0 {
        return Err(HostError::Journal(format!(
            "cannot open the journal: {}",
            errno_text(opened)
        )));
    }
    let result = read(&api, journal, matches, fields, &mut visit);
    // SAFETY: the handle came from sd_journal_open and is closed once.
    unsafe { (api.close)(journal) };
    result
}

fn read(
    api: &Api,
    journal: *mut c_void,
    matches: &[String],
    fields: &[&str],
    visit: &mut impl FnMut(JournalEntry) -> bool,
) -> Result<(), HostError> {
    for item in matches {
        // SAFETY: the match bytes live across the call; libsystemd copies them.
        let added = unsafe { (api.add_match)(journal, item.as_ptr().cast(), item.len()) };
        if added < 0 {
            return Err(HostError::Journal(format!(
                "journal match {item:?}: {}",
                errno_text(added)
            )));
        }
    }
    let names: Vec<CString> = fields
        .iter()
        .map(|f| CString::new(*f).expect("field names have no NUL"))
        .collect();
    // SAFETY: a live handle.
    unsafe { (api.seek_tail)(journal) };
    loop {
        // SAFETY: a live handle.
        let stepped = unsafe { (api.previous)(journal) };
        if stepped < 0 {
            return Err(HostError::Journal(format!(
                "reading the journal: {}",
                errno_text(stepped)
            )));
        }
        if stepped == 0 {
            return Ok(());
        }
        let mut entry = JournalEntry::default();
        let mut usec = 0u64;
        // SAFETY: a live handle positioned on an entry.
        if unsafe { (api.get_realtime_usec)(journal, &mut usec) } >= 0 {
            entry.received_ms = usec / 1000;
        }
        for name in &names {
            let mut data: *const c_void = std::ptr::null();
            let mut length = 0usize;
            // SAFETY: on success `data` points at `length` bytes owned by the
            // journal, valid until the next call on it; they are copied here.
            let got = unsafe { (api.get_data)(journal, name.as_ptr(), &mut data, &mut length) };
            if got < 0 || data.is_null() {
                continue;
            }
            // SAFETY: see above.
            let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) };
            let field = name.to_bytes();
            if let Some(value) = bytes
                .strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(b"="))
            {
                entry
                    .fields
                    .insert(name_text(name), String::from_utf8_lossy(value).into_owned());
            }
        }
        if !visit(entry) {
            return Ok(());
        }
    }
}

fn name_text(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}
