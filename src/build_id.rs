//! The build id: a fingerprint of the running executable, so two builds of
//! the same version are told apart (adoption and replacement need that).
//! `EUKHE_BUILD_ID` overrides it, for tests that play another build.

use std::sync::OnceLock;

/// This build's id.
pub fn build_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        if let Ok(id) = std::env::var("EUKHE_BUILD_ID") {
            if !id.is_empty() {
                return id;
            }
        }
        match std::fs::read("/proc/self/exe") {
            Ok(bytes) => format!("{:016x}", fnv1a(&bytes)),
            Err(_) => format!("unknown-{}", env!("CARGO_PKG_VERSION")),
        }
    })
}

/// This build's version (`EUKHE_VERSION` overrides it, for tests).
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        std::env::var("EUKHE_VERSION")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string())
    })
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}
