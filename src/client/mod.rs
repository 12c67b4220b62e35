//! The command line: parse, connect (starting a daemon when none listens),
//! and show the answers as a person or a script wants them.

pub mod cli;
mod connect;
mod doctor;
mod render;

pub use cli::{run, Cli};
