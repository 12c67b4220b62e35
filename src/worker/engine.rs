//! Engines turn a session's queued input into runs. The worker owns the
//! queue, the run gate and the transcript; an engine only starts a run from
//! one input in the session's namespace. The built-in engine is `shell`;
//! an agent engine implements the same trait and the supervisor never
//! knows the difference.

use std::path::Path;

use crate::session::kernel::{self, Namespace, Running};

pub trait Engine {
    /// The engine's name, as sessions record it.
    fn name(&self) -> &'static str;

    /// Start the run of one input. `scratch` is the session's private
    /// scratch directory; `tag` names this run's files in it.
    fn start(
        &self,
        namespace: &Namespace,
        input: &str,
        scratch: &Path,
        tag: &str,
    ) -> Result<Running, String>;
}

/// Each input is a command line, run in the kernel's namespace.
pub struct Shell;

impl Engine for Shell {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn start(
        &self,
        namespace: &Namespace,
        input: &str,
        scratch: &Path,
        tag: &str,
    ) -> Result<Running, String> {
        kernel::spawn(namespace, input, scratch, tag)
    }
}

/// The engine called `name`, if this build has it.
pub fn by_name(name: &str) -> Result<Box<dyn Engine>, String> {
    match name {
        "shell" => Ok(Box::new(Shell)),
        other => Err(format!(
            "no engine {other:?} in this build (engines: shell)"
        )),
    }
}
