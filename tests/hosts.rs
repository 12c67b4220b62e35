//! Many hosts (issue 55): `hosts.toml` names two machines (two sshd on
//! loopback, each reaching an installation of its own) and two that never
//! answer (a closed port: ssh says why; a port that accepts and stays
//! silent: only the deadline ends the wait). `eukhe ls --all-hosts` and
//! one `eukhe mcp --host ...` (driven by the MCP Python SDK) serve them.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use eukhe::laws::timing::{duration_in_words, HOST_ANSWER_MS};

use crate::support::process::{all_pids, cmdline};
use crate::support::sshd::{RemotePath, Sshd};
use crate::support::{skip, wait_until, Env};

/// What a loaded machine may add to a host's deadline: far below ssh's
/// own waits (a silent server is waited for without end).
const MARGIN: Duration = Duration::from_secs(5);
/// How long an ssh given up on may take to be reaped.
const LEFT_BEHIND_GONE: Duration = Duration::from_secs(5);

/// Two machines, two that never answer, and a client whose hosts.toml
/// names all four.
struct Hosts {
    client: Env,
    remotes: Vec<(Env, Sshd)>,
    /// Accepts connections (the kernel's backlog) and never says a word.
    _silent: TcpListener,
    silent_port: u16,
}

impl Hosts {
    fn start(name: &str) -> Option<Hosts> {
        let mut remotes = Vec::new();
        for host in ["a", "b"] {
            let env = Env::new(&format!("{name}-remote-{host}"));
            let sshd = Sshd::start(&env, host, RemotePath::WithEukhe)?;
            remotes.push((env, sshd));
        }
        let closed = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        let silent = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        let client = Env::new(&format!("{name}-client"));
        // One ssh configuration for both machines: each sshd's client key.
        let ssh_config = client.dir.join("ssh_config");
        let mut config = String::from("Host *\n");
        for (_, sshd) in &remotes {
            config += &format!("  IdentityFile {}\n", sshd.dir.join("client_key").display());
        }
        config += &format!(
            "  IdentitiesOnly yes\n  UserKnownHostsFile {}\n  StrictHostKeyChecking no\n  \
             BatchMode yes\n  LogLevel ERROR\n",
            client.dir.join("known_hosts").display()
        );
        std::fs::write(&ssh_config, config).unwrap();
        let (a, b) = (&remotes[0].1, &remotes[1].1);
        let hosts = format!(
            "[hosts.a]\naddress = \"127.0.0.1:{}\"\n\
             # The eukhe to run there, given whole.\n\
             command = \"{}\"\n\n\
             [hosts.b]\naddress = \"ssh://127.0.0.1:{}\"\n\n\
             [hosts.down]\naddress = \"127.0.0.1:{closed_port}\"\n\n\
             [hosts.silent]\naddress = \"127.0.0.1:{silent_port}\"\n",
            a.port,
            a.dir.join("bin/eukhe").display(),
            b.port,
        );
        let config_home = client.dir.join("config");
        std::fs::create_dir_all(config_home.join("eukhe")).unwrap();
        std::fs::write(config_home.join("eukhe/hosts.toml"), hosts).unwrap();
        let client = client
            .with("XDG_CONFIG_HOME", &config_home.display().to_string())
            .with("EUKHE_SSH", &format!("ssh -F {}", ssh_config.display()));
        Some(Hosts {
            client,
            remotes,
            _silent: silent,
            silent_port,
        })
    }

    /// What each machine's sshd and daemon wrote, for a failure's message.
    fn logs(&self) -> String {
        let mut logs = String::new();
        for (env, sshd) in &self.remotes {
            let daemon = std::fs::read_to_string(env.state_dir().join("daemon.log"));
            logs += &format!(
                "sshd {}:\n{}\ndaemon:\n{}\n",
                sshd.port,
                sshd.log(),
                daemon.unwrap_or_default()
            );
        }
        logs
    }

    /// Every ssh still trying the silent host: none should outlive the
    /// client that gave up on it.
    fn ssh_to_silent(&self) -> Vec<u32> {
        let port = format!(" -p {} ", self.silent_port);
        all_pids()
            .into_iter()
            .filter(|&pid| {
                let line = cmdline(pid);
                line.starts_with("ssh ") && line.contains(&port)
            })
            .collect()
    }

    /// Machine `i`'s own installation, asked on that machine.
    fn remote(&self, i: usize) -> &Env {
        &self.remotes[i].0
    }
}

/// Whether `took` is within a host's deadline and the margin: it would
/// not be if anything waited for ssh's own timeouts.
fn within_deadline(took: Duration) -> bool {
    took < Duration::from_millis(HOST_ANSWER_MS) + MARGIN
}

#[test]
fn ls_all_hosts_lists_every_host_in_one_table_and_the_silent_ones_by_their_deadline() {
    let Some(hosts) = Hosts::start("ls") else {
        return;
    };
    hosts.remote(0).ok(&["new", "--name", "on-a"]);
    hosts.remote(1).ok(&["new", "--name", "on-b"]);
    hosts.client.ok(&["new", "--name", "here"]);
    let started = Instant::now();
    let out = hosts.client.run(&["ls", "--all-hosts"]);
    let took = started.elapsed();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{table}\n{stderr}");
    assert!(within_deadline(took), "took {took:?}:\n{table}");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0][..4], ["HOST", "ID", "NAME", "STATE"], "{table}");
    let row = |host: &str| {
        rows.iter()
            .find(|r| r[0] == host)
            .unwrap_or_else(|| panic!("no row for {host}:\n{table}"))
    };
    assert_eq!(row("local")[2], "here", "{table}");
    assert_eq!(row("a")[2], "on-a", "{table}");
    assert_eq!(row("b")[2], "on-b", "{table}");
    assert_eq!(row("down")[3], "unreachable", "{table}");
    let line = |host: &str| table.lines().find(|l| l.starts_with(host)).unwrap();
    assert!(line("down").contains("Connection refused"), "{table}");
    let silent = format!("no answer within {}", duration_in_words(HOST_ANSWER_MS));
    assert!(line("silent").ends_with(&silent), "{table}");
    // The ssh that waited on the silent host went with the client.
    wait_until(LEFT_BEHIND_GONE, "no ssh left on the silent host", || {
        hosts.ssh_to_silent().is_empty()
    });

    let out = hosts.client.run(&["ls", "--all-hosts", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r["host"].as_str().unwrap(),
                r["name"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        names,
        ["local:here", "a:on-a", "b:on-b", "down:-", "silent:-"]
    );
    assert_eq!(listed[4]["unreachable"], serde_json::json!(silent));

    // `--host NAME` takes a name hosts.toml gives.
    let on_b = hosts.client.ok(&["--host", "b", "ls"]);
    assert!(on_b.contains("on-b") && !on_b.contains("on-a"), "{on_b}");
}

#[test]
fn one_mcp_server_serves_two_hosts_and_reports_the_unreachable_within_its_deadline() {
    let Some(hosts) = Hosts::start("mcp") else {
        return;
    };
    let Some(python) = sdk_python() else {
        return;
    };
    let markers = hosts.client.dir.join("markers.json");
    let server_env: serde_json::Map<String, serde_json::Value> = hosts
        .client
        .vars
        .iter()
        .map(|(name, value)| (name.clone(), value.clone().into()))
        .chain(["PATH", "HOME"].into_iter().filter_map(|name| {
            std::env::var(name)
                .ok()
                .map(|value| (name.to_string(), value.into()))
        }))
        .collect();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/hosts.py");
    let ran = Command::new(python)
        .arg(script)
        .env("EUKHE_BIN", env!("CARGO_BIN_EXE_eukhe"))
        .env(
            "EUKHE_MCP_ENV",
            serde_json::Value::Object(server_env).to_string(),
        )
        .env("EUKHE_MCP_HOSTS", "a,b,down,silent")
        .env("HOST_ANSWER_MS", HOST_ANSWER_MS.to_string())
        .env("MARKERS_OUT", &markers)
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    println!("{stdout}");
    assert!(
        ran.status.success() && stdout.contains("all steps passed"),
        "the MCP client failed ({}):\nstdout:\n{stdout}\nstderr:\n{}\n{}",
        ran.status,
        String::from_utf8_lossy(&ran.stderr),
        hosts.logs()
    );
    // Each command ran on its own machine: its transcript is in that
    // machine's state directory, and not in the other's.
    let markers: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&markers).unwrap()).unwrap();
    for (i, host) in ["a", "b"].into_iter().enumerate() {
        let other = ["b", "a"][i];
        let log = hosts.remote(i).log("work");
        let marker = markers[host].as_str().unwrap();
        assert!(log.contains(marker), "{host}: {log}");
        assert!(
            !log.contains(markers[other].as_str().unwrap()),
            "{host}: {log}"
        );
    }
    wait_until(LEFT_BEHIND_GONE, "no ssh left on the silent host", || {
        hosts.ssh_to_silent().is_empty()
    });
    // This machine was not served: no daemon was started here.
    assert!(!hosts.client.dir.join("run/eukhe.sock").exists());
}

/// The MCP Python SDK's interpreter (`scripts/setup` makes it), or None
/// when it is missing (a failure under CI=true).
fn sdk_python() -> Option<std::path::PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    skip::skip_unless_ci(&format!(
        "{} is missing: scripts/setup makes it (the MCP Python SDK)",
        python.display()
    ));
    None
}

#[test]
fn a_bad_hosts_file_is_one_line_naming_the_file_and_the_line() {
    let env = Env::new("hosts-bad");
    let config_home = env.dir.join("config");
    std::fs::create_dir_all(config_home.join("eukhe")).unwrap();
    let file = config_home.join("eukhe/hosts.toml");
    std::fs::write(
        &file,
        "[hosts.a]\naddress = \"a\"\n\n[hosts.b]\naddress = \"b:99999\"\n",
    )
    .unwrap();
    let env = env.with("XDG_CONFIG_HOME", &config_home.display().to_string());
    for args in [
        &["ls", "--all-hosts"][..],
        &["--host", "a", "ls"],
        &["mcp", "--host", "a"],
    ] {
        let out = env.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{}: line 5: host b: address \"b:99999\"",
                file.display()
            )),
            "{args:?}: {stderr}"
        );
        assert!(
            stderr.contains("the port is not a number"),
            "{args:?}: {stderr}"
        );
    }
}
