//! The host: processes and the busy-evidence journal. The process backend
//! (the embedded default) lives here; the systemd backend will sit beside
//! it behind the same functions.

pub mod busy_journal;
pub mod process;
pub mod systemd;
