//! The build id: a fingerprint of the running executable, so two builds of
//! the same version are told apart (adoption and replacement need that).
//! It is the linker's GNU build id (a hash of the linked contents), read
//! from its ELF note where the loader mapped it (else from the file's
//! first 64 KiB), else an FNV-1a hash of the whole file: hashing a 40 MB
//! binary at every client start cost 120 ms.
//! `EUKHE_BUILD_ID` overrides it, for tests that play another build.

use std::io::Read;
use std::sync::OnceLock;

/// Where the ELF headers and the build-id note are looked for.
const HEADER_BYTES: u64 = 64 * 1024;

/// This build's id.
pub fn build_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        if let Ok(id) = std::env::var("EUKHE_BUILD_ID") {
            if !id.is_empty() {
                return id;
            }
        }
        // The note is mapped with the program: no file to read.
        if let Some(id) = loaded_build_id() {
            return id;
        }
        // Sized up front: one read, not a dozen growing ones from 32 bytes.
        let mut head = Vec::with_capacity(HEADER_BYTES as usize);
        let opened = std::fs::File::open("/proc/self/exe")
            .and_then(|f| f.take(HEADER_BYTES).read_to_end(&mut head));
        if let Some(id) = opened.ok().and_then(|_| gnu_build_id(&head)) {
            return id;
        }
        match std::fs::read("/proc/self/exe") {
            Ok(bytes) => format!("{:016x}", fnv1a(&bytes)),
            Err(_) => format!("unknown-{}", version()),
        }
    })
}

/// What to exec to run this very build, and the `argv[0]` to give it.
/// `/proc/self/exe` names this process's executable even after an upgrade
/// replaced or removed the file it started from (that path then leads to
/// another build, or nowhere, and a worker or kernel started from it
/// would not start); `argv[0]` is that path, as `ps` should show it.
pub fn own_executable() -> (std::path::PathBuf, std::ffi::OsString) {
    let started_from = std::env::current_exe()
        .map(|path| {
            let text = path.into_os_string().into_string();
            match text {
                Ok(text) => text.trim_end_matches(" (deleted)").into(),
                Err(raw) => raw,
            }
        })
        .unwrap_or_else(|_| "eukhe".into());
    ("/proc/self/exe".into(), started_from)
}

/// The size of the version's own ELF section.
pub const VERSION_SLOT_LEN: usize = 32;

/// The name of the ELF section that holds the version, NUL-padded.
pub const VERSION_SECTION: &str = ".eukhe.version";

/// This build's version, in a section of its own, so that a package of
/// another release is made from this very binary without compiling it
/// again (`packaging/relabel-deb` rewrites the section and the build id).
#[used]
#[link_section = ".eukhe.version"]
static VERSION_SLOT: [u8; VERSION_SLOT_LEN] = version_slot(env!("CARGO_PKG_VERSION"));

const fn version_slot(version: &str) -> [u8; VERSION_SLOT_LEN] {
    let bytes = version.as_bytes();
    assert!(
        bytes.len() < VERSION_SLOT_LEN,
        "the version does not fit its slot"
    );
    let mut slot = [0u8; VERSION_SLOT_LEN];
    let mut index = 0;
    while index < bytes.len() {
        slot[index] = bytes[index];
        index += 1;
    }
    slot
}

/// The version a slot holds: its bytes up to the first NUL.
fn version_in(slot: &[u8]) -> Option<String> {
    let end = slot.iter().position(|&b| b == 0).unwrap_or(slot.len());
    std::str::from_utf8(&slot[..end])
        .ok()
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// This build's version (`EUKHE_VERSION` overrides it, for tests).
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        if let Some(version) = std::env::var("EUKHE_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
        {
            return version;
        }
        // SAFETY: a plain byte array of a static, read whole. Volatile, so
        // the compiler reads the section as it is in the file, rewritten
        // or not, instead of the value it was compiled with.
        let slot = unsafe { std::ptr::read_volatile(&VERSION_SLOT) };
        version_in(&slot).unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string())
    })
}

/// The GNU build id (`NT_GNU_BUILD_ID` in a `PT_NOTE` segment) of a
/// little-endian ELF64 image whose headers and notes lie in `image`.
pub fn gnu_build_id(image: &[u8]) -> Option<String> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(image.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(image.get(at..at + 8)?.try_into().ok()?));
    // ELF magic, 64-bit, little-endian.
    if image.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let table = usize::try_from(u64_at(0x20)?).ok()?;
    let (entry_size, entries) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    const PT_NOTE: u32 = 4;
    for index in 0..entries {
        let header = table.checked_add(index.checked_mul(entry_size)?)?;
        if u32_at(header)? != PT_NOTE {
            continue;
        }
        let start = usize::try_from(u64_at(header + 8)?).ok()?;
        let end = start.checked_add(usize::try_from(u64_at(header + 32)?).ok()?)?;
        // A segment may run past the bytes read: its notes in them count.
        if let Some(id) = notes_build_id(image.get(start..end.min(image.len()))?) {
            return Some(id);
        }
    }
    None
}

/// The GNU build id among the ELF notes `notes` (one `PT_NOTE` segment).
fn notes_build_id(notes: &[u8]) -> Option<String> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let u32_at = |at: usize| Some(u32::from_le_bytes(notes.get(at..at + 4)?.try_into().ok()?));
    let mut note = 0;
    while note + 12 <= notes.len() {
        let name_size = u32_at(note)? as usize;
        let desc_size = u32_at(note + 4)? as usize;
        let kind = u32_at(note + 8)?;
        let name = note + 12;
        let desc = name + name_size.div_ceil(4) * 4;
        if kind == NT_GNU_BUILD_ID && notes.get(name..name + name_size)? == b"GNU\0" {
            let id = notes.get(desc..desc + desc_size)?;
            return Some(id.iter().map(|b| format!("{b:02x}")).collect());
        }
        note = desc + desc_size.div_ceil(4) * 4;
    }
    None
}

/// The GNU build id of the running program, read from its note segment
/// where the loader mapped it (every client start would otherwise open
/// and read the executable's first 64 KiB).
fn loaded_build_id() -> Option<String> {
    unsafe extern "C" fn executable_only(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        found: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid `info` for the duration of the
        // call, whose program headers and `PT_NOTE` segments are mapped
        // (read-only, for the process's life); `found` is the `Option`
        // `loaded_build_id` passed.
        unsafe {
            let info = &*info;
            let found = &mut *(found as *mut Option<String>);
            if !info.dlpi_phdr.is_null() {
                let headers =
                    std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum));
                for header in headers.iter().filter(|h| h.p_type == libc::PT_NOTE) {
                    let start = (info.dlpi_addr as usize).wrapping_add(header.p_vaddr as usize);
                    let notes =
                        std::slice::from_raw_parts(start as *const u8, header.p_memsz as usize);
                    if let Some(id) = notes_build_id(notes) {
                        *found = Some(id);
                        break;
                    }
                }
            }
        }
        // The first object is the program itself: stop there.
        1
    }
    let mut found: Option<String> = None;
    // SAFETY: the callback only reads what the loader hands it and writes
    // `found`, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(executable_only),
            (&mut found as *mut Option<String>).cast(),
        );
    }
    found
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_slot_holds_the_version_and_reads_back() {
        let slot = version_slot("0.1.12");
        assert_eq!(&slot[..6], b"0.1.12");
        assert!(slot[6..].iter().all(|&b| b == 0));
        assert_eq!(version_in(&slot).as_deref(), Some("0.1.12"));
        assert_eq!(version_in(&[0; VERSION_SLOT_LEN]), None);
        assert_eq!(
            version_in(&VERSION_SLOT).as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
    }

    #[test]
    fn the_build_id_is_the_linkers_as_readelf_shows_it() {
        let exe = std::env::current_exe().unwrap();
        let image = std::fs::read(&exe).unwrap();
        let ours = gnu_build_id(&image[..HEADER_BYTES as usize]);
        let Ok(out) = std::process::Command::new("readelf")
            .arg("-n")
            .arg(&exe)
            .output()
        else {
            assert_eq!(ours, gnu_build_id(&image));
            crate::skip::skip_unless_ci("readelf is not installed; compared only with itself");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let theirs = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Build ID: "))
            .map(str::to_string);
        assert_eq!(ours, theirs);
    }

    /// A minimal ELF64 image: one PT_NOTE program header whose segment is
    /// `note_bytes` long, over one GNU build-id note (desc de ad be ef).
    fn image(note_bytes: u64) -> Vec<u8> {
        let mut image = vec![0u8; 64];
        image[..6].copy_from_slice(b"\x7fELF\x02\x01");
        image[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        image[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        image[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        let mut header = vec![0u8; 56];
        header[..4].copy_from_slice(&4u32.to_le_bytes()); // PT_NOTE
        header[8..16].copy_from_slice(&120u64.to_le_bytes()); // p_offset
        header[32..40].copy_from_slice(&note_bytes.to_le_bytes()); // p_filesz
        image.extend(header);
        for word in [4u32, 4, 3] {
            image.extend(word.to_le_bytes());
        }
        image.extend(b"GNU\0");
        image.extend([0xde, 0xad, 0xbe, 0xef]);
        image
    }

    #[test]
    fn the_build_id_in_memory_is_the_one_in_the_file() {
        let image = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let in_file = gnu_build_id(&image[..HEADER_BYTES as usize]);
        assert!(in_file.is_some(), "the test binary has a GNU build id");
        assert_eq!(loaded_build_id(), in_file);
    }

    #[test]
    fn a_note_is_read_only_within_its_segment() {
        assert_eq!(gnu_build_id(&image(24)).as_deref(), Some("deadbeef"));
        assert_eq!(
            gnu_build_id(&image(8)),
            None,
            "the segment ends before the note"
        );
        assert_eq!(gnu_build_id(&image(0)), None);
    }

    #[test]
    fn images_without_a_note_or_truncated_have_none() {
        assert_eq!(gnu_build_id(b"#!/bin/sh\n"), None);
        assert_eq!(gnu_build_id(b"\x7fELF\x02\x01"), None);
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(gnu_build_id(&exe[..0x40]), None, "headers cut off");
    }
}
