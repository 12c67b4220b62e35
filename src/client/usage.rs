//! A command line eukhe cannot take, said in one line as every other
//! failure is: what is wrong (clap's words, its tip kept) and where the
//! usage is (`eukhe bash --help`), in place of clap's block of lines.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::CommandFactory as _;

use super::cli::{Cli, EUKHE_FAILED};

/// Report a parse failure of the command line: help and the version are
/// printed as clap prints them (exit 0; with no command at all, the help
/// on standard error, exit 125); any other failure is one line on
/// standard error, exit 125.
pub fn report(error: &clap::Error) -> ExitCode {
    if !error.use_stderr() {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = error.print();
    } else {
        let given = std::env::args_os().nth(1);
        let command = given.as_deref().and_then(|s| s.to_str()).filter(|name| {
            Cli::command()
                .get_subcommands()
                .any(|sub| sub.get_name() == *name && !sub.is_hide_set())
        });
        let rendered = error.render().to_string();
        eprintln!("eukhe: {}", one_line(&rendered, command));
    }
    ExitCode::from(EUKHE_FAILED)
}

/// clap's rendered error as one line; `command` is the subcommand given,
/// when the error does not show its usage.
pub fn one_line(rendered: &str, command: Option<&str>) -> String {
    let mut lines = rendered.lines();
    let head = lines.next().unwrap_or("").trim();
    let mut what = head.strip_prefix("error: ").unwrap_or(head).to_string();
    let mut items = Vec::new();
    let mut tips = Vec::new();
    let mut usage = None;
    for line in lines {
        let line = line.trim();
        if let Some(tip) = line.strip_prefix("tip: ") {
            tips.push(tip.to_string());
        } else if let Some(rest) = line.strip_prefix("Usage: ") {
            usage = Some(command_of(rest));
        } else if !line.is_empty() && !line.starts_with("For more information") {
            items.push(line.to_string());
        }
    }
    if !items.is_empty() {
        let joiner = if what.ends_with(':') { ", " } else { " " };
        what = format!("{what} {}", items.join(joiner));
    }
    for tip in tips {
        what = format!("{what} ({tip})");
    }
    let command = usage.unwrap_or_else(|| match command {
        Some(sub) => format!("eukhe {sub}"),
        None => "eukhe".to_string(),
    });
    format!("{what}; `{command} --help` shows the usage")
}

/// The command a usage line is of: its words before the first argument.
fn command_of(usage: &str) -> String {
    usage
        .split_whitespace()
        .take_while(|word| !word.starts_with(['<', '[', '-']))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claps_block_becomes_one_line_with_its_tip_and_where_the_usage_is() {
        let missing = "error: the following required arguments were not provided:\n  <SESSION>\n  \
                       <COMMAND>...\n\nUsage: eukhe bash <SESSION> -- <COMMAND>...\n\nFor more \
                       information, try '--help'.\n";
        assert_eq!(
            one_line(missing, Some("bash")),
            "the following required arguments were not provided: <SESSION>, <COMMAND>...; \
             `eukhe bash --help` shows the usage"
        );
        let unexpected = "error: unexpected argument '--foo' found\n\n  tip: to pass '--foo' as a \
                          value, use '-- --foo'\n\nUsage: eukhe bash <SESSION> -- <COMMAND>...\n\n\
                          For more information, try '--help'.\n";
        assert_eq!(
            one_line(unexpected, Some("bash")),
            "unexpected argument '--foo' found (to pass '--foo' as a value, use '-- --foo'); \
             `eukhe bash --help` shows the usage"
        );
        let value =
            "error: invalid value 'out' for '--stream <STREAM>'\n  [possible values: stdout, \
                     stderr]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(value, Some("log")),
            "invalid value 'out' for '--stream <STREAM>' [possible values: stdout, stderr]; \
             `eukhe log --help` shows the usage"
        );
    }
}
