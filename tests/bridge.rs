//! The Rust-model bridge: every law module and its Bend model, run on the
//! same scenarios (all small ones exhaustively, plus seeded random ones at
//! the real constants); their transcripts must be equal. The model runs
//! compiled (`bend gen-c`, built once per test run) on every scenario and
//! interpreted (`bend run-c`) on every tenth: the specification's
//! compiled-model laws (`*_ffi_*`).
//!
//! Transcripts land in `target/tmp/bridge-<model>/`.

#[path = "bridge/harness.rs"]
pub mod harness;

#[path = "bridge/supervise.rs"]
mod supervise;

#[path = "bridge/revive.rs"]
mod revive;

#[path = "bridge/orphan.rs"]
mod orphan;

#[path = "bridge/launcher.rs"]
mod launcher;

#[path = "bridge/notice.rs"]
mod notice;

#[path = "bridge/replace.rs"]
mod replace;

#[path = "bridge/runs.rs"]
mod runs;
