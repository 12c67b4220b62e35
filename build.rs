//! Links gcc's unwinder into eukhe's programs (`libgcc_eh.a`) instead of
//! loading `libgcc_s.so.1` at every start. That library's constructor
//! probes the CPU with a dozen `cpuid` instructions, and `cpuid` traps to
//! the hypervisor in a virtual machine, so loading it costs every eukhe
//! command a share of its start (docs/usage.md, "The C runtime").
//!
//! The static unwinder of gcc 12 and later calls glibc's
//! `_dl_find_object`, so the programs then need glibc 2.35 (Debian 12 has
//! 2.36). `EUKHE_LINK_LIBGCC_S=1` keeps the shared library, for a build
//! that must run on glibc 2.34 (the RPM's build sets it).
//!
//! A release program is linked at a fixed address (`-no-pie`): a
//! position-independent one has the dynamic loader patch some 16 000
//! pointers in its data at every start, a private copy of each page it
//! writes, about a third of a client's page faults (docs/usage.md, "The C
//! runtime"). `EUKHE_LINK_PIE=1` keeps the position-independent program.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=EUKHE_LINK_LIBGCC_S");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=EUKHE_LINK_PIE");
    let target = std::env::var("TARGET").unwrap_or_default();
    let native = std::env::var("HOST").is_ok_and(|host| host == target);
    if !native || !target.ends_with("-linux-gnu") {
        return;
    }
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    if release && std::env::var("EUKHE_LINK_PIE").as_deref() != Ok("1") {
        // After rustc's own `-pie`: the last of the two wins.
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    if std::env::var("EUKHE_LINK_LIBGCC_S").as_deref() == Ok("1") {
        return;
    }
    match static_unwinder() {
        Some(archive) => {
            // The whole archive: its objects then define the unwinder's
            // symbols, so the linker (with --as-needed) drops libgcc_s.
            println!("cargo:rustc-link-arg-bins=-Wl,--whole-archive");
            println!("cargo:rustc-link-arg-bins={archive}");
            println!("cargo:rustc-link-arg-bins=-Wl,--no-whole-archive");
        }
        None => println!(
            "cargo:warning=no libgcc_eh.a found: eukhe loads libgcc_s.so.1 (each start a little slower)"
        ),
    }
}

/// Where the C compiler keeps `libgcc_eh.a`, if it has one.
fn static_unwinder() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let output = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = String::from_utf8(output.stdout).ok()?.trim().to_string();
    // Not found, the compiler prints the bare name back.
    (Path::new(&path).is_absolute() && Path::new(&path).is_file()).then_some(path)
}
