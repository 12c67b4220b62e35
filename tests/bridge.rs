//! The Rust-model bridge: every law module and its Bend model, run on the
//! same scenarios (all small ones exhaustively, plus seeded random ones at
//! the real constants); their transcripts must be equal.
//!
//! Transcripts land in `target/tmp/bridge-<model>/`.

#[path = "bridge/harness.rs"]
mod harness;
