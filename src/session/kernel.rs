//! The kernel: the session's shell namespace (working directory and
//! exported environment), which persists between commands and across
//! worker restarts.
//!
//! Each command runs in a `bash` started from the current namespace; when
//! it ends (even through `exit`), the shell writes its working directory
//! and exported environment back, and that becomes the namespace. So `cd`
//! and `export` persist, as they do in an agent's shell tool, and a user
//! bash can run beside a run. After every command the namespace is saved
//! (0600) as the session's snapshot; a restarted worker starts its kernel
//! over the snapshot, which is a restore (see `laws::notice`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};
use std::os::fd::AsRawFd;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use crate::laws::notice::KernelStart;
use crate::protocol::message::Stream;
use crate::session::store::write_json;

/// Variables the shell sets for itself; they are not part of a namespace.
const SHELL_OWN: [&str; 4] = ["_", "SHLVL", "PWD", "OLDPWD"];

/// The shell's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Namespace {
    pub cwd: String,
    pub env: BTreeMap<String, String>,
}

/// A session's kernel: its namespace and where the snapshot lives.
pub struct Kernel {
    namespace: Namespace,
    snapshot: PathBuf,
}

/// Which process group to signal to tear a command down.
pub type ProcessGroup = u32;

impl Kernel {
    /// Start the kernel over the snapshot at `snapshot` if there is one,
    /// else fresh in `cwd` with `env`.
    pub fn start(
        snapshot: &Path,
        cwd: &str,
        env: BTreeMap<String, String>,
    ) -> Result<(Kernel, KernelStart), String> {
        match std::fs::read(snapshot) {
            Ok(bytes) => {
                let namespace: Namespace = serde_json::from_slice(&bytes)
                    .map_err(|e| format!("namespace snapshot {}: {e}", snapshot.display()))?;
                Ok((
                    Kernel {
                        namespace,
                        snapshot: snapshot.to_path_buf(),
                    },
                    KernelStart::OverSnapshot,
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let namespace = Namespace {
                    cwd: cwd.to_string(),
                    env,
                };
                Ok((
                    Kernel {
                        namespace,
                        snapshot: snapshot.to_path_buf(),
                    },
                    KernelStart::Fresh,
                ))
            }
            Err(e) => Err(format!("namespace snapshot {}: {e}", snapshot.display())),
        }
    }

    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Take `namespace` as the kernel's and save it as the snapshot.
    pub fn update(&mut self, namespace: Namespace) -> Result<(), String> {
        write_json(&self.snapshot, &namespace)?;
        self.namespace = namespace;
        Ok(())
    }
}

/// A command started in a namespace.
pub struct Running {
    child: tokio::process::Child,
    namespace_out: PathBuf,
}

impl Running {
    /// The command's process group (its pid), for teardown.
    pub fn process_group(&self) -> Option<ProcessGroup> {
        self.child.id()
    }
}

/// The size of a command's output pipes.
const PIPE_BYTES: usize = 1024 * 1024;

/// The most one read takes: one output entry, which must fit a wire frame
/// (1 MiB) even when JSON escapes every byte six-fold.
const READ_BYTES: usize = 128 * 1024;

/// Start `command` in `namespace`. `scratch` is a private directory for
/// the namespace the shell writes back.
pub fn spawn(
    namespace: &Namespace,
    command: &str,
    scratch: &Path,
    tag: &str,
) -> Result<Running, String> {
    let namespace_out = scratch.join(format!("namespace-{tag}.out"));
    let _ = std::fs::remove_file(&namespace_out);
    // The trap runs on every way out of the shell, `exit` included; the
    // out path stays in a shell variable so it never joins the namespace.
    let script = r#"__eukhe_out=$2
trap '__eukhe_status=$?; { printf "%s\0" "$PWD"; env -0; } > "$__eukhe_out"; exit $__eukhe_status' EXIT
eval "$1""#;
    let cwd = if Path::new(&namespace.cwd).is_dir() {
        namespace.cwd.as_str()
    } else {
        "/"
    };
    let child = Command::new("bash")
        .args([
            "--noprofile",
            "--norc",
            "-c",
            script,
            "eukhe-kernel",
            command,
        ])
        .arg(&namespace_out)
        .env_clear()
        .envs(&namespace.env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false)
        .spawn()
        .map_err(|e| format!("cannot start bash: {e}"))?;
    // A bigger pipe lets a fast writer get ahead while the worker stores
    // what it read, so each read (one transcript record, one fsync) is full.
    for fd in [
        child.stdout.as_ref().map(|p| p.as_raw_fd()),
        child.stderr.as_ref().map(|p| p.as_raw_fd()),
    ]
    .into_iter()
    .flatten()
    {
        // SAFETY: fcntl(2) on a pipe this process owns; failure leaves the
        // default size, which is only slower.
        unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES as libc::c_int) };
    }
    Ok(Running {
        child,
        namespace_out,
    })
}

impl Running {
    /// Stream the command's output to `on_output` until it ends; returns its
    /// exit status (128 + signal when killed) and the namespace it left.
    pub async fn finish(
        mut self,
        mut on_output: impl FnMut(Stream, String),
    ) -> (i32, Option<Namespace>) {
        let mut stdout = self.child.stdout.take();
        let mut stderr = self.child.stderr.take();
        let mut out_buf = vec![0u8; READ_BYTES];
        let mut err_buf = vec![0u8; READ_BYTES];
        let mut out_text = Utf8Chunks::default();
        let mut err_text = Utf8Chunks::default();
        while stdout.is_some() || stderr.is_some() {
            tokio::select! {
                n = read_some(&mut stdout, &mut out_buf), if stdout.is_some() => match n {
                    Some(n) => on_output(Stream::Stdout, out_text.push(&out_buf[..n])),
                    None => stdout = None,
                },
                n = read_some(&mut stderr, &mut err_buf), if stderr.is_some() => match n {
                    Some(n) => on_output(Stream::Stderr, err_text.push(&err_buf[..n])),
                    None => stderr = None,
                },
            }
        }
        for (stream, rest) in [
            (Stream::Stdout, out_text.finish()),
            (Stream::Stderr, err_text.finish()),
        ] {
            if !rest.is_empty() {
                on_output(stream, rest);
            }
        }
        let status = match self.child.wait().await {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
            }
            Err(_) => 255,
        };
        let namespace = std::fs::read(&self.namespace_out)
            .ok()
            .and_then(|bytes| parse_namespace(&bytes));
        let _ = std::fs::remove_file(&self.namespace_out);
        (status, namespace)
    }
}

async fn read_some<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut Option<R>,
    buf: &mut [u8],
) -> Option<usize> {
    let reader = reader.as_mut()?;
    match reader.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// Parse what the shell wrote back: the working directory, then the
/// environment, each NUL-terminated.
pub fn parse_namespace(bytes: &[u8]) -> Option<Namespace> {
    let mut fields = bytes.split(|&b| b == 0);
    let cwd = String::from_utf8(fields.next()?.to_vec()).ok()?;
    if cwd.is_empty() {
        return None;
    }
    let mut env = BTreeMap::new();
    for field in fields {
        let Ok(text) = std::str::from_utf8(field) else {
            continue;
        };
        if let Some((name, value)) = text.split_once('=') {
            if !name.is_empty() && !SHELL_OWN.contains(&name) {
                env.insert(name.to_string(), value.to_string());
            }
        }
    }
    Some(Namespace { cwd, env })
}

/// Turns a byte stream into text without splitting a UTF-8 character
/// across chunks; invalid bytes become U+FFFD.
#[derive(Default)]
struct Utf8Chunks {
    pending: Vec<u8>,
}

impl Utf8Chunks {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let text = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
        self.pending.drain(..valid);
        text
    }

    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

/// Signal a command's whole process group.
pub fn signal_group(group: ProcessGroup, signal: i32) {
    // SAFETY: kill(2) on a process group we created; no memory is touched.
    unsafe {
        libc::kill(-(group as i32), signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("eukhe-kernel-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn run(ns: &Namespace, command: &str, dir: &Path) -> (i32, String, Option<Namespace>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut out = String::new();
            let running = spawn(ns, command, dir, "t").unwrap();
            let (status, ns) = running.finish(|_, s| out.push_str(&s)).await;
            (status, out, ns)
        })
    }

    #[test]
    fn cd_and_export_persist_and_exit_status_is_kept() {
        let dir = scratch("persist");
        let ns = Namespace {
            cwd: "/".into(),
            env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
        };
        let (status, out, after) = run(
            &ns,
            "cd /tmp && export GREETING=hi && echo done; exit 3",
            &dir,
        );
        assert_eq!(status, 3);
        assert_eq!(out, "done\n");
        let after = after.unwrap();
        assert_eq!(after.cwd, "/tmp");
        assert_eq!(after.env.get("GREETING").map(String::as_str), Some("hi"));
        assert!(!after.env.contains_key("SHLVL"));
        let (_, out, _) = run(&after, "echo $GREETING from $(pwd)", &dir);
        assert_eq!(out, "hi from /tmp\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn utf8_is_never_split_across_chunks() {
        let mut chunks = Utf8Chunks::default();
        let bytes = "é".as_bytes();
        assert_eq!(chunks.push(&bytes[..1]), "");
        assert_eq!(chunks.push(&bytes[1..]), "é");
    }
}
