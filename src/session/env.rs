//! A session's first environment: the variables its shell starts with.
//!
//! `eukhe new` takes the client's exported environment into the session,
//! as it takes the client's working directory (`--clean-env` starts from
//! the daemon's instead; `--env KEY=VALUE` adds to either). The supervisor
//! keeps the choice in the session's `env.json`; the kernel reads it when
//! it makes the session's first snapshot, and from then on the variables
//! live in the snapshot, so a kernel restart keeps them.
//!
//! Some variables are never carried into a session, from either side,
//! because they describe the process that holds them, not the user's
//! environment, and would mislead the session's commands:
//!
//! - `EUKHE_*`: eukhe's own control variables (socket, state directory,
//!   backend, build and test hooks) of the client or daemon; a session's
//!   commands must not inherit another process's choice of daemon.
//! - `NOTIFY_SOCKET`, `WATCHDOG_PID`, `WATCHDOG_USEC`: the service manager's
//!   notification socket and watchdog of the unit that holds them; a
//!   command that found them would speak for that unit (ready, stopping,
//!   watchdog pings).
//! - `LISTEN_*` (`LISTEN_FDS`, `LISTEN_PID`, `LISTEN_FDNAMES`): file
//!   descriptors passed by socket activation to one process; in another
//!   they name nothing, or the wrong files.
//! - `INVOCATION_ID`, `JOURNAL_STREAM`, `SYSTEMD_EXEC_PID`, `MANAGERPID`,
//!   `MAINPID`, `TRIGGER_*`, `MEMORY_PRESSURE_*`: the identity, log
//!   stream, triggers and memory-pressure hooks of the unit that holds them (`JOURNAL_STREAM` makes a program believe its
//!   standard error is the journal).
//! - `PWD`, `OLDPWD`, `SHLVL`, `_`: the shell's own, set by the session's
//!   shell (its working directory is the session's, not these).

use super::error::AssignmentProblem;
use super::SessionError;
use std::collections::BTreeMap;

/// How a session's first environment is made (`env.json`), as `new` sends it.
pub use crate::protocol::message::SessionEnv;

/// Variables of one process that are never carried into a session (and
/// see [`NEVER_CARRIED_PREFIXES`]).
pub const NEVER_CARRIED: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "SYSTEMD_EXEC_PID",
    "MANAGERPID",
    "MAINPID",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
];

/// Prefixes of variables never carried: eukhe's own, socket activation's,
/// a unit's triggers and memory-pressure hooks.
pub const NEVER_CARRIED_PREFIXES: &[&str] = &["EUKHE_", "LISTEN_", "TRIGGER_", "MEMORY_PRESSURE_"];

/// Whether the variable `name` may be carried into a session.
pub fn is_carried(name: &str) -> bool {
    !NEVER_CARRIED_PREFIXES.iter().any(|p| name.starts_with(p)) && !NEVER_CARRIED.contains(&name)
}

/// Whether `name` can be a shell variable's name.
pub fn is_shell_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The variables of `vars` that are carried (shell names, not in
/// [`NEVER_CARRIED`], not `EUKHE_*`).
pub fn carried<I, K, V>(vars: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    vars.into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .filter(|(name, _)| is_shell_name(name) && is_carried(name))
        .collect()
}

/// The session's first environment: the client's (or, without one, the
/// daemon's `daemon`), then `--env` over it.
pub fn first_environment(
    env: Option<&SessionEnv>,
    daemon: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let Some(env) = env else {
        return carried(daemon);
    };
    let mut vars = match &env.client {
        Some(client) => carried(client.clone()),
        None => carried(daemon),
    };
    vars.extend(carried(env.set.clone()));
    vars
}

/// One `--env KEY=VALUE`, checked.
pub fn parse_assignment(text: &str) -> Result<(String, String), SessionError> {
    let refused = |problem: AssignmentProblem| {
        Err(SessionError::Assignment {
            text: text.to_string(),
            problem,
        })
    };
    let Some((name, value)) = text.split_once('=') else {
        return refused(AssignmentProblem::NoEquals);
    };
    if !is_shell_name(name) {
        return refused(AssignmentProblem::NotAName(name.to_string()));
    }
    if !is_carried(name) {
        return refused(AssignmentProblem::NeverCarried(name.to_string()));
    }
    Ok((name.to_string(), value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn control_and_unit_variables_are_never_carried() {
        let from = vars(&[
            ("FOO", "1"),
            ("EUKHE_SOCKET", "/x"),
            ("NOTIFY_SOCKET", "/run/n"),
            ("LISTEN_FDS", "1"),
            ("INVOCATION_ID", "abc"),
            ("PWD", "/elsewhere"),
            ("BASH_FUNC_f%%", "() { :; }"),
        ]);
        assert_eq!(carried(from), vars(&[("FOO", "1")]));
    }

    #[test]
    fn the_client_environment_wins_and_env_adds_over_either() {
        let daemon = vars(&[("D", "daemon"), ("FOO", "daemon")]);
        let client = SessionEnv {
            client: Some(vars(&[("FOO", "client")])),
            set: vars(&[("BAR", "2")]),
        };
        assert_eq!(
            first_environment(Some(&client), daemon.clone()),
            vars(&[("BAR", "2"), ("FOO", "client")])
        );
        let clean = SessionEnv {
            client: None,
            set: vars(&[("FOO", "set")]),
        };
        assert_eq!(
            first_environment(Some(&clean), daemon.clone()),
            vars(&[("D", "daemon"), ("FOO", "set")])
        );
        assert_eq!(first_environment(None, daemon.clone()), daemon);
    }

    #[test]
    fn env_assignments_are_checked() {
        assert_eq!(
            parse_assignment("A=b=c").unwrap(),
            ("A".to_string(), "b=c".to_string())
        );
        assert!(parse_assignment("A")
            .unwrap_err()
            .to_string()
            .contains("KEY=VALUE"));
        assert!(parse_assignment("1A=x")
            .unwrap_err()
            .to_string()
            .contains("not a shell"));
        assert!(parse_assignment("EUKHE_SOCKET=x")
            .unwrap_err()
            .to_string()
            .contains("never carried"));
    }
}
