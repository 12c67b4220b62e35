//! A session: its durable transcript, its kernel (the shell namespace that
//! persists between commands) and its metadata on disk.

pub mod crc32;
pub mod kernel;
pub mod store;
pub mod transcript;
