//! Engines turn a session's queued input into runs. The built-in engine is
//! `shell`: each input is a command line, run in the session's kernel. A
//! session records its engine; a build without it refuses the session
//! instead of running its input some other way.

use super::WorkerError;

/// The engines this build has.
pub const ENGINES: [&str; 1] = ["shell"];

/// Check that this build has the engine `name`.
pub fn check(name: &str) -> Result<(), WorkerError> {
    if ENGINES.contains(&name) {
        Ok(())
    } else {
        Err(WorkerError::NoEngine {
            name: name.to_string(),
            known: ENGINES.join(", "),
        })
    }
}
