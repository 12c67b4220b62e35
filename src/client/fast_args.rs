//! The command lines run most, read without clap: `eukhe bash SESSION --
//! WORDS...` and `eukhe send SESSION -- WORDS...` with no option, a bare
//! `eukhe new`, and the worker and kernel processes the daemon starts.
//! Building clap's command tree builds every subcommand's arguments, on a
//! stack frame of some hundred KiB that each start faults in page by page:
//! most of what a start spends beyond the process's own. Any other shape
//! goes to clap, which reads these the same way (the tests below hold the
//! two to it).

use std::ffi::OsString;

use super::cli::Command;

/// The command `args` (the arguments after the program's name) say, when
/// they have one of the plain shapes above; else `None`, for clap to read.
pub fn plain_command(args: &[OsString]) -> Option<Command> {
    let (first, rest) = args.split_first()?;
    match first.to_str()? {
        "bash" => plain_bash(rest),
        "send" => plain_send(rest),
        "new" if rest.is_empty() => Some(Command::New {
            name: None,
            cwd: None,
            env: Vec::new(),
            clean_env: false,
            json: false,
            limits: super::limits::LimitArgs::default(),
        }),
        "worker" => match rest {
            [session] => Some(Command::Worker {
                session: session_word(session)?,
            }),
            _ => None,
        },
        "kernel" => match rest {
            [session] => Some(Command::Kernel {
                session: session_word(session)?,
                detach: false,
            }),
            [session, detach] if detach == "--detach" => Some(Command::Kernel {
                session: session_word(session)?,
                detach: true,
            }),
            _ => None,
        },
        _ => None,
    }
}

/// `SESSION -- WORD...` of a plain `bash`.
fn plain_bash(rest: &[OsString]) -> Option<Command> {
    let (session, command) = session_and_words(rest)?;
    Some(Command::Bash {
        session,
        no_stdin: false,
        tty: false,
        detach_key: None,
        command,
    })
}

/// `SESSION -- WORD...` of a plain `send`.
fn plain_send(rest: &[OsString]) -> Option<Command> {
    let (session, text) = session_and_words(rest)?;
    Some(Command::Send {
        session,
        text,
        wait: false,
        tty: false,
        detach_key: None,
    })
}

/// The session word and the words after `--`, when `rest` is exactly
/// `SESSION -- WORD...`.
fn session_and_words(rest: &[OsString]) -> Option<(String, Vec<OsString>)> {
    let [session, dashes, words @ ..] = rest else {
        return None;
    };
    if dashes != "--" || words.is_empty() {
        return None;
    }
    Some((session_word(session)?, words.to_vec()))
}

/// A positional word clap would read as one: text, not empty, no option.
fn session_word(word: &OsString) -> Option<String> {
    let word = word.to_str()?;
    (!word.is_empty() && !word.starts_with('-')).then(|| word.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Cli;
    use clap::Parser as _;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn by_clap(words: &[&str]) -> String {
        let cli = Cli::try_parse_from(std::iter::once("eukhe").chain(words.iter().copied()))
            .expect("clap reads it");
        format!("{:?}", cli.command)
    }

    #[test]
    fn a_plain_command_reads_as_clap_reads_it() {
        for words in [
            &["bash", "s", "--", "true"][..],
            &["bash", "a1b2c3d4", "--", "echo", "hi", "--", "-n"],
            &["bash", "my session", "--", ""],
            &["bash", "help", "--", "ls -l"],
            &["send", "s", "--", "make test"],
            &["send", "s", "--", "sh", "-c", "exit 3"],
            &["new"],
            &["worker", "a1b2c3d4"],
            &["kernel", "a1b2c3d4"],
            &["kernel", "a1b2c3d4", "--detach"],
        ] {
            let fast = plain_command(&args(words)).expect("a plain command");
            assert_eq!(format!("{fast:?}"), by_clap(words), "{words:?}");
        }
    }

    #[test]
    fn any_other_shape_is_left_to_clap() {
        for words in [
            &["bash", "-n", "s", "--", "true"][..],
            &["bash", "s", "--tty", "--", "true"],
            &["bash", "s", "--"],
            &["bash", "s", "true"],
            &["bash", "--help"],
            &["bash", "", "--", "true"],
            &["send", "s", "--wait", "--", "true"],
            &["send", "s", "true"],
            &["send", "-s", "--", "true"],
            &["new", "--name", "s"],
            &["new", "--json"],
            &["worker"],
            &["worker", "--help"],
            &["kernel", "a1b2c3d4", "--detach", "x"],
            &["kernel", "a1b2c3d4", "--bogus"],
            &["kernel", "--detach", "a1b2c3d4"],
            &["--host", "h", "bash", "s", "--", "true"],
            &["bash"],
            &[],
        ] {
            assert!(plain_command(&args(words)).is_none(), "{words:?}");
        }
    }
}
