//! Hosts by name: `--host NAME` (a host `hosts.toml` names, else an
//! address), and the hosts `ls --all-hosts` and `mcp --host` ask, each a
//! name shown to the user and the target its requests go to.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use super::error::ClientError;
use super::remote::{target_from, RemoteHost, Target, REMOTE_VAR};
use crate::config::hosts::{hosts_file, Hosts, LOCAL_HOST_NAME};
use crate::paths::Paths;

/// A host as the user names it, and where its daemon is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedTarget {
    /// The name shown (`local`, a `hosts.toml` name, or the address as given).
    pub name: String,
    /// Where its requests go.
    pub target: Target,
}

/// The user's `hosts.toml` (absent: no hosts); a bad file is one line
/// naming the file, the line and what to fix.
pub fn load_hosts() -> Result<Hosts, ClientError> {
    let paths = Paths::from_env()?;
    let check = |address: &str| {
        RemoteHost::parse(address)
            .map(|_| ())
            .map_err(|refused| refused.why.to_string())
    };
    Hosts::load(&hosts_file(&paths.config), check)
        .map_err(|e| ClientError::Usage(format!("hosts file {e}")))
}

/// The host `given` names: `local` is this machine, a name of `hosts`
/// its address, anything else an address itself.
pub fn resolve(given: &str, hosts: &Hosts) -> Result<NamedTarget, ClientError> {
    if given == LOCAL_HOST_NAME {
        return Ok(NamedTarget {
            name: given.to_string(),
            target: Target::Local,
        });
    }
    let (address, command) = match hosts.named(given) {
        Some(named) => (named.address.as_str(), named.command.clone()),
        None => (given, None),
    };
    let host =
        RemoteHost::parse(address).map_err(|refused| ClientError::Usage(refused.to_string()))?;
    if let Some(command) = command {
        remember_remote_command(&host, command);
    }
    Ok(NamedTarget {
        name: given.to_string(),
        target: Target::Remote(host),
    })
}

/// This machine first, then every host `hosts` names, in its order.
pub fn every_host(hosts: &Hosts) -> Result<Vec<NamedTarget>, ClientError> {
    let mut every = vec![NamedTarget {
        name: LOCAL_HOST_NAME.to_string(),
        target: Target::Local,
    }];
    for host in &hosts.hosts {
        every.push(resolve(&host.name, hosts)?);
    }
    Ok(every)
}

/// The process's target from `--host` (else `EUKHE_REMOTE`): a name
/// `hosts.toml` gives is looked up there; anything else is an address.
pub fn process_target_from(host_option: Option<&str>) -> Result<Target, ClientError> {
    let from_env = std::env::var(REMOTE_VAR).ok().filter(|v| !v.is_empty());
    let Some(given) = host_option.map(str::to_string).or(from_env) else {
        return Ok(Target::Local);
    };
    let looks_like_a_name = !given.contains(['@', ':', '/', '[']);
    if looks_like_a_name {
        let hosts = load_hosts()?;
        if given == LOCAL_HOST_NAME || hosts.named(&given).is_some() {
            return Ok(resolve(&given, &hosts)?.target);
        }
    }
    target_from(Some(&given)).map_err(|refused| ClientError::Usage(refused.to_string()))
}

/// The remote commands `hosts.toml` names, by the address they are for.
fn remote_commands() -> &'static Mutex<HashMap<String, String>> {
    static COMMANDS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    COMMANDS.get_or_init(Default::default)
}

fn remember_remote_command(host: &RemoteHost, command: String) {
    if let Ok(mut commands) = remote_commands().lock() {
        commands.insert(host.to_string(), command);
    }
}

/// The eukhe to run on `host` when `hosts.toml` names one for it.
pub fn remote_command(host: &RemoteHost) -> Option<String> {
    remote_commands()
        .lock()
        .ok()
        .and_then(|commands| commands.get(&host.to_string()).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Hosts {
        Hosts::parse(
            "[hosts.build]\naddress = \"ssh://me@build.example:2222\"\ncommand = \"/opt/e\"\n",
            |_| Ok(()),
        )
        .unwrap()
    }

    #[test]
    fn a_name_is_looked_up_local_is_this_machine_and_an_address_is_itself() {
        let build = resolve("build", &hosts()).unwrap();
        let Target::Remote(host) = &build.target else {
            panic!("build is remote: {build:?}");
        };
        assert_eq!(host.to_string(), "me@build.example:2222");
        assert_eq!(remote_command(host).as_deref(), Some("/opt/e"));
        assert_eq!(resolve("local", &hosts()).unwrap().target, Target::Local);
        let other = resolve("ann@box:22", &hosts()).unwrap();
        assert_eq!(other.name, "ann@box:22");
        assert_eq!(
            other.target,
            Target::Remote(RemoteHost::parse("ann@box:22").unwrap())
        );
        assert!(resolve("a b", &hosts()).is_err());
        let names: Vec<_> = every_host(&hosts())
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect();
        assert_eq!(names, ["local", "build"]);
    }
}
