//! A real OpenSSH server for one test, on 127.0.0.1 and a free port: a
//! throwaway host key and client key in the test's directory, the remote
//! side's environment set by `SetEnv` (the test's eukhe first in PATH, an
//! installation's own state directory and socket), and an `ssh_config` the
//! clients use through `EUKHE_SSH`. Ended on drop by its pid.

use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{skip, Env};

/// Where Debian's openssh-server puts the daemon.
pub const SSHD: &str = "/usr/sbin/sshd";
/// The privilege separation directory a root sshd chroots into; the
/// package's tmpfiles make it at boot, which a container never has.
const PRIVSEP_DIR: &str = "/run/sshd";
/// How long sshd is given to listen.
const LISTEN_WITHIN: Duration = Duration::from_secs(10);

/// What the remote side finds on its PATH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemotePath {
    /// The test's eukhe first.
    WithEukhe,
    /// No eukhe at all (the remote lacks the package).
    WithoutEukhe,
}

pub struct Sshd {
    /// Keys, configs, the log and the remote's HOME.
    pub dir: PathBuf,
    /// The port sshd listens on (127.0.0.1), for a test that gives it in
    /// `--host` rather than through the ssh config.
    #[allow(dead_code)]
    pub port: u16,
    child: Child,
}

impl Sshd {
    /// An sshd whose logins reach `remote`'s installation, in `remote`'s
    /// directory under `name`; `None` when sshd cannot run here (said as
    /// `skip` says it: under CI that fails the test).
    pub fn start(remote: &Env, name: &str, path: RemotePath) -> Option<Sshd> {
        Sshd::start_with(remote, name, path, "")
    }

    /// As `start`, with `extra` lines at the end of sshd's config.
    pub fn start_with(remote: &Env, name: &str, path: RemotePath, extra: &str) -> Option<Sshd> {
        if !Path::new(SSHD).exists() {
            skip::skip_unless_ci(&format!(
                "{SSHD} is missing: install openssh-server (scripts/setup does)"
            ));
            return None;
        }
        let root = nix::unistd::geteuid().is_root();
        let needs_namespace = root && !Path::new(PRIVSEP_DIR).is_dir();
        if needs_namespace && !has("unshare") {
            skip::skip_unless_ci("a root sshd needs /run/sshd or `unshare` to make one privately");
            return None;
        }
        let dir = remote.dir.join(format!("sshd-{name}"));
        std::fs::create_dir_all(dir.join("home")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        if path == RemotePath::WithEukhe {
            symlink(env!("CARGO_BIN_EXE_eukhe"), dir.join("bin/eukhe")).unwrap();
        }
        for key in ["host_key", "client_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-N", "", "-t", "ed25519", "-f"])
                .arg(dir.join(key))
                .status()
                .expect("run ssh-keygen");
            assert!(made.success(), "ssh-keygen {key} failed");
        }
        std::fs::copy(dir.join("client_key.pub"), dir.join("authorized_keys")).unwrap();
        let port = free_port();
        let config = sshd_config(&dir, port, remote) + extra;
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        std::fs::write(dir.join("ssh_config"), ssh_config(&dir, port)).unwrap();
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let config = dir.join("sshd_config").display().to_string();
        let mut command = if needs_namespace {
            // A private mount namespace with its own /run, where the
            // privilege separation directory can be made: nothing is
            // written outside the test's directory. `unshare` and `sh`
            // exec sshd, so the pid is sshd's.
            let mut command = Command::new("unshare");
            command.args(["--mount", "--propagation", "private", "sh", "-c"]);
            command.arg(format!(
                "mount -t tmpfs none /run && mkdir -m 0755 {PRIVSEP_DIR} && exec {SSHD} -D -e -f '{config}'"
            ));
            command
        } else {
            let mut command = Command::new(SSHD);
            command.args(["-D", "-e", "-f", &config]);
            command
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let mut sshd = Sshd { dir, port, child };
        let listening = super::wait_for(LISTEN_WITHIN, || {
            matches!(sshd.child.try_wait(), Ok(Some(_)))
                || TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        if !listening || !matches!(sshd.child.try_wait(), Ok(None)) {
            panic!("sshd did not listen on port {port}:\n{}", sshd.log());
        }
        Some(sshd)
    }

    /// The ssh command the clients use (`EUKHE_SSH`).
    pub fn ssh_command(&self) -> String {
        format!("ssh -F {}", self.dir.join("ssh_config").display())
    }

    /// The host to give `--host` (the port is in the ssh config).
    pub fn host(&self) -> String {
        "127.0.0.1".to_string()
    }

    /// A client of this sshd's installation: its own local state (never
    /// used: every command goes through `--host`) and the ssh command.
    /// Each command takes the ssh proxy path (no forward left behind);
    /// a test of the forward turns it on (`EUKHE_FORWARD=1`).
    pub fn client(&self, name: &str) -> Env {
        Env::new(name)
            .with("EUKHE_SSH", &self.ssh_command())
            .with("EUKHE_FORWARD", "0")
    }

    /// What sshd wrote (its own log, `-e`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Its own pid: sshd ends its listener; each login's own process
        // ends with its connection.
        super::signal(self.child.id(), nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A port nothing listens on now (the kernel's choice).
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn sshd_config(dir: &Path, port: u16, remote: &Env) -> String {
    let mut set_env = vec![
        format!("PATH={}:/usr/bin:/bin", dir.join("bin").display()),
        // Not the user's own startup files, which may change PATH.
        format!("HOME={}", dir.join("home").display()),
    ];
    set_env.extend(
        remote
            .vars
            .iter()
            .filter(|(name, _)| name.starts_with("EUKHE_") || name.starts_with("XDG_"))
            .map(|(name, value)| format!("{name}={value}")),
    );
    format!(
        "ListenAddress 127.0.0.1\n\
         Port {port}\n\
         HostKey {host_key}\n\
         AuthorizedKeysFile {authorized}\n\
         StrictModes no\n\
         PidFile none\n\
         UsePAM no\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         SetEnv {set_env}\n",
        host_key = dir.join("host_key").display(),
        authorized = dir.join("authorized_keys").display(),
        set_env = set_env.join(" "),
    )
}

fn ssh_config(dir: &Path, port: u16) -> String {
    format!(
        "Host *\n  \
         Port {port}\n  \
         IdentityFile {key}\n  \
         IdentitiesOnly yes\n  \
         UserKnownHostsFile {known}\n  \
         StrictHostKeyChecking no\n  \
         BatchMode yes\n  \
         LogLevel ERROR\n",
        key = dir.join("client_key").display(),
        known = dir.join("known_hosts").display(),
    )
}
