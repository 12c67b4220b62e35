//! The wire: length-prefixed frames carrying JSON messages, and output as
//! binary frames.
//!
//! Layers, bottom up: [`entry`] (a transcript's entries, stored as they are
//! sent), [`zeros`] (runs of zero bytes in output), [`frame`] (bytes on a stream, with a hard size
//! limit), [`message`] (the requests and responses), [`output`] (output
//! bytes as binary frames), [`event`] (the daemon's event stream), [`hello`] (the versioned greeting every
//! connection starts with), [`tty`] (terminal runs: sizes and keys), [`screen`] (a terminal
//! run's screen as text), [`window`] (a part of one input's output).

pub mod entry;
pub mod event;
pub mod frame;
pub mod hello;
pub mod kernel;
pub mod message;
pub mod output;
pub mod screen;
pub mod tty;
pub mod window;
pub mod zeros;

pub use frame::{read_frame, write_frame, FrameError, MAX_FRAME_BYTES};
pub use hello::{Capability, Hello, PROTOCOL_VERSION};
pub use message::{Request, Response};
