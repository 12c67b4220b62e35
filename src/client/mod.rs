//! The command line: parse, connect (starting a daemon when none listens),
//! and show the answers as a person or a script wants them.

pub mod all_hosts;
pub(crate) mod attach;
mod attach_tty;
pub mod cli;
mod commands;
pub mod connect;
mod direct;
mod doctor;
pub mod error;
mod events;
pub mod fast_args;
pub mod forward;
pub mod forward_keeper;
pub mod hosts;
mod interactive;
pub mod lend;
pub mod limits;
pub(crate) mod log;
pub mod proxy;
pub mod remote;
mod remote_bash;
pub(crate) mod render;
pub mod reset;
pub mod route;
mod screen;
mod shell;
mod stdin;
pub mod stdout;
mod supervisor_watch;
pub mod terminal;
mod top;
mod tty_echo;
mod tty_run;
mod typist;
pub mod usage;
pub mod wait_for;
pub mod wake;
pub mod windows;
mod words;

pub use cli::{run, Cli};
pub use error::ClientError;
