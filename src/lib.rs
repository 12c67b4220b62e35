//! eukhe: a supervisor daemon that keeps coding-agent sessions alive.
//!
//! The law-critical decisions live in [`laws`]: pure functions of their
//! inputs, each checked against an executable Bend model in `bend/`. The
//! rest is a thin shell around them: [`protocol`] (the wire),
//! [`supervisor`], [`worker`], [`kernel`] (the session's live shell and its
//! runs), [`session`] (transcript, snapshot, files),
//! [`host`] (processes, busy evidence), [`client`] (the command line) and
//! [`mcp`] (the sessions as tools of a coding agent, over the Model Context
//! Protocol).

#![warn(missing_docs)]
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod build_id;
pub mod client;
pub mod clock;
pub mod config;
pub mod host;
pub mod kernel;
pub mod laws;
pub mod mcp;
pub mod paths;
pub mod protocol;
pub mod runtime;
pub mod session;
pub mod supervisor;
pub mod worker;

#[cfg(test)]
#[path = "../tests/support/skip.rs"]
mod skip;

#[cfg(test)]
mod layout_tests;
