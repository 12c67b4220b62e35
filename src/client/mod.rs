//! The command line: parse, connect (starting a daemon when none listens),
//! and show the answers as a person or a script wants them.

mod attach;
pub mod cli;
mod connect;
mod doctor;
mod events;
mod log;
mod render;
mod stdin;
pub mod stdout;
mod top;

pub use cli::{run, Cli};
