//! A session: its durable transcript, its shell-state snapshot and its
//! metadata on disk (the live shell itself is `crate::kernel`).

pub use error::SessionError;

pub mod crc32;
pub mod entry;
pub mod env;
pub mod error;
pub mod log_query;
pub mod notices;
pub mod numbers;
pub mod page_cache;
pub(crate) mod removed;
pub mod snapshot;
pub mod spool;
pub(crate) mod store;

pub use store::SessionMeta;
pub mod transcript;
pub mod wake;
pub mod windows;
