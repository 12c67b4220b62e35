//! What a transcript holds: the wire's entries, stored as they are sent
//! (`protocol::entry`), so a reader of the log and a client of the worker
//! see one shape.

pub use crate::protocol::entry::{Entry, EntryBody, LostOutput, Stream};
