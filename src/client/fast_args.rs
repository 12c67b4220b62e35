//! The command line agents send most, `eukhe bash SESSION -- WORDS...` with
//! no option, read without clap. Building clap's command tree builds every
//! subcommand's arguments: most of what a client's start spends beyond the
//! process's own. Any other shape goes to clap, which reads this one the
//! same way (the tests below hold the two to it).

use std::ffi::OsString;

use super::cli::Command;

/// The `bash` command `args` (the arguments after the program's name) say,
/// when they are exactly `bash SESSION -- WORD...` with a session word
/// that is no option; else `None`, for clap to read.
pub fn plain_bash(args: &[OsString]) -> Option<Command> {
    let [bash, session, dashes, command @ ..] = args else {
        return None;
    };
    let session = session.to_str()?;
    let plain = bash == "bash" && dashes == "--" && !command.is_empty();
    if !plain || session.is_empty() || session.starts_with('-') {
        return None;
    }
    Some(Command::Bash {
        session: session.to_string(),
        no_stdin: false,
        tty: false,
        detach_key: None,
        command: command.to_vec(),
    })
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
    fn a_plain_bash_reads_as_clap_reads_it() {
        for words in [
            &["bash", "s", "--", "true"][..],
            &["bash", "a1b2c3d4", "--", "echo", "hi", "--", "-n"],
            &["bash", "my session", "--", ""],
            &["bash", "help", "--", "ls -l"],
        ] {
            let fast = plain_bash(&args(words)).expect("a plain bash");
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
            &["send", "s", "--", "true"],
            &["bash"],
            &[],
        ] {
            assert!(plain_bash(&args(words)).is_none(), "{words:?}");
        }
    }
}
