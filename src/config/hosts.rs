//! Hosts by name: `hosts.toml`, beside `config.toml`
//! (`$XDG_CONFIG_HOME/eukhe/hosts.toml`, else `~/.config/eukhe/hosts.toml`):
//!
//! ```toml
//! [hosts.build]
//! address = "ssh://me@build.example:2222"
//! # The eukhe to run there, when it is not on the remote PATH (optional).
//! command = "/opt/eukhe/bin/eukhe"
//! ```
//!
//! `--host build` then means that address, and `eukhe ls --all-hosts` asks
//! every host named here. The file only names hosts: an address's own
//! syntax is the transport's, checked by the caller's `check_address` so a
//! refusal still names its line.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use serde::Deserialize;

/// The name `eukhe ls --all-hosts` and `eukhe mcp --host` give this machine;
/// no host in the file may take it.
pub const LOCAL_HOST_NAME: &str = "local";

/// The longest host name.
const NAME_MAX: usize = 64;

/// One named host of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedHost {
    /// Its name (the table's key: `[hosts.build]` is `build`).
    pub name: String,
    /// Its address as written: `[ssh://][user@]host[:port]`.
    pub address: String,
    /// The eukhe to run there, if not the remote PATH's.
    pub command: Option<String>,
}

/// The hosts the file names, in the file's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hosts {
    /// Every host, in the order written.
    pub hosts: Vec<NamedHost>,
}

/// `hosts.toml` refused: which file, which line, what to fix.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// The file exists and cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
    /// The file's text is refused.
    #[error("{}: {problem}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        problem: HostsProblem,
    },
}

/// What is wrong in the text, on which line (from 1) when known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default())]
pub struct HostsProblem {
    /// The line, if known.
    pub line: Option<usize>,
    /// What is wrong and what to write instead.
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    hosts: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    address: String,
    #[serde(default)]
    command: Option<String>,
}

/// Where `hosts.toml` is: beside `config.toml`.
pub fn hosts_file(config_file: &Path) -> PathBuf {
    config_file.with_file_name("hosts.toml")
}

impl Hosts {
    /// Read the file (absent: no hosts); errors name the file and the line.
    pub fn load(
        path: &Path,
        check_address: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Hosts, HostsError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Hosts::parse(&text, check_address).map_err(|problem| HostsError::InFile {
                path: path.to_path_buf(),
                problem,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Hosts::default()),
            Err(source) => Err(HostsError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Parse the file's text; `check_address` says what is wrong with an
    /// address, if anything.
    pub fn parse(
        text: &str,
        check_address: impl Fn(&str) -> Result<(), String>,
    ) -> Result<Hosts, HostsProblem> {
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let refused = |e: toml::de::Error| {
            let mut message = e.message().trim().to_string();
            if message.contains("missing field `address`") {
                message += ": each [hosts.NAME] needs address = \"[ssh://][user@]host[:port]\"";
            }
            HostsProblem {
                line: e.span().map(|span| line_of(span.start)),
                message,
            }
        };
        let file: File = toml::from_str(text).map_err(refused)?;
        let mut hosts = Vec::new();
        for (name, entry) in file.hosts {
            let header = format!("[hosts.{name}]");
            let header_line = text.lines().position(|l| l.trim() == header).map(|i| i + 1);
            check_name(&name).map_err(|message| HostsProblem {
                line: header_line,
                message,
            })?;
            // A value's line: the first after its table's header holding it.
            let value_line = |value: &str| {
                let after = header_line.unwrap_or(0);
                text.lines()
                    .enumerate()
                    .skip(after)
                    .find(|(_, l)| l.contains(value))
                    .map(|(i, _)| i + 1)
                    .or(header_line)
            };
            let address = entry.address;
            check_address(&address).map_err(|why| HostsProblem {
                line: value_line(&address),
                message: format!(
                    "host {name}: address {address:?}: {why} (write [ssh://][user@]host[:port])"
                ),
            })?;
            let command = entry.command;
            if let Some(command) = &command {
                if command.trim().is_empty() {
                    return Err(HostsProblem {
                        line: value_line("command"),
                        message: format!(
                            "host {name}: command is empty (leave it out to run the remote PATH's eukhe)"
                        ),
                    });
                }
            }
            hosts.push((
                header_line,
                NamedHost {
                    name,
                    address,
                    command,
                },
            ));
        }
        hosts.sort_by_key(|(line, _)| *line);
        Ok(Hosts {
            hosts: hosts.into_iter().map(|(_, host)| host).collect(),
        })
    }

    /// The host named `name`, if the file names it.
    pub fn named(&self, name: &str) -> Option<&NamedHost> {
        self.hosts.iter().find(|host| host.name == name)
    }
}

/// Whether `name` may name a host: what is wrong with it, if anything.
fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name == LOCAL_HOST_NAME {
        return Err(format!(
            "host name {name:?} is this machine's: choose another name"
        ));
    }
    if name.is_empty() || name.len() > NAME_MAX || !name.chars().all(allowed) {
        return Err(format!(
            "host name {name:?}: use 1 to {NAME_MAX} letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_spaces(address: &str) -> Result<(), String> {
        match address.contains(' ') || address.is_empty() {
            true => Err("not an address".to_string()),
            false => Ok(()),
        }
    }

    #[test]
    fn hosts_are_read_in_the_files_order_with_their_commands() {
        let text = "[hosts.zeta]\naddress = \"ssh://me@build.example:2222\"\n\n\
                    [hosts.alpha]\naddress = \"alpha\"\ncommand = \"/opt/eukhe/bin/eukhe\"\n";
        let hosts = Hosts::parse(text, no_spaces).expect("parses");
        assert_eq!(
            hosts.hosts,
            vec![
                NamedHost {
                    name: "zeta".into(),
                    address: "ssh://me@build.example:2222".into(),
                    command: None,
                },
                NamedHost {
                    name: "alpha".into(),
                    address: "alpha".into(),
                    command: Some("/opt/eukhe/bin/eukhe".into()),
                },
            ]
        );
        assert_eq!(
            hosts.named("alpha").map(|h| h.address.as_str()),
            Some("alpha")
        );
        assert_eq!(hosts.named("beta"), None);
        assert_eq!(
            Hosts::parse("", no_spaces).expect("empty"),
            Hosts::default()
        );
    }

    #[test]
    fn a_bad_file_names_the_line_and_what_to_fix() {
        let problem = |text: &str| Hosts::parse(text, no_spaces).expect_err(text).to_string();
        let bad_address = "[hosts.a]\naddress = \"x\"\n[hosts.b]\naddress = \"two words\"\n";
        assert_eq!(
            problem(bad_address),
            "line 4: host b: address \"two words\": not an address \
             (write [ssh://][user@]host[:port])"
        );
        let missing = problem("[hosts.a]\ncommand = \"eukhe\"\n");
        assert_eq!(
            missing,
            "line 1: missing field `address`: each [hosts.NAME] needs \
             address = \"[ssh://][user@]host[:port]\""
        );
        let unknown = problem("[hosts.a]\naddress = \"a\"\nport = 22\n");
        assert!(
            unknown.starts_with("line 3: unknown field `port`"),
            "{unknown}"
        );
        let local = problem("\n[hosts.local]\naddress = \"a\"\n");
        assert!(local.starts_with("line 2: host name \"local\""), "{local}");
        let syntax = problem("[hosts.a]\naddress = \n");
        assert!(syntax.starts_with("line 2: "), "{syntax}");
        let stray = problem("[host.a]\naddress = \"a\"\n");
        assert!(stray.contains("unknown field `host`"), "{stray}");
        let empty = problem("[hosts.a]\naddress = \"a\"\ncommand = \" \"\n");
        assert!(
            empty.starts_with("line 3: host a: command is empty"),
            "{empty}"
        );
    }

    #[test]
    fn the_file_lies_beside_config_toml() {
        assert_eq!(
            hosts_file(Path::new("/home/me/.config/eukhe/config.toml")),
            PathBuf::from("/home/me/.config/eukhe/hosts.toml")
        );
    }
}
