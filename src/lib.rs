//! eukhe: a supervisor daemon that keeps coding-agent sessions alive.
//!
//! The law-critical decisions live in [`laws`]: pure functions of their
//! inputs, each checked against an executable Bend model in `bend/`.

pub mod laws;
