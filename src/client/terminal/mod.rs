//! The client's side of a terminal run: its own terminal in raw mode, the
//! detach key, named keys, the window's size, and the passthrough between
//! them and the session.

pub mod detach;
pub mod keys;
pub mod merge;
pub mod modes;
pub mod passthrough;
pub mod raw;
pub mod size;
pub mod tty_io;
