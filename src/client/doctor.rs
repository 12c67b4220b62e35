//! `eukhe doctor`: checks a person would otherwise do by hand, each with
//! a verdict and a one-line detail.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Serialize;

use super::connect::connect_existing;
use crate::build_id::{build_id, version};
use crate::config::Config;
use crate::paths::Paths;

#[derive(Serialize)]
pub struct Check {
    pub check: &'static str,
    pub ok: bool,
    pub detail: String,
}

fn check(check: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            check,
            ok: true,
            detail,
        },
        Err(detail) => Check {
            check,
            ok: false,
            detail,
        },
    }
}

fn private(path: &Path, what: &str) -> Result<String, String> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 == 0 {
                Ok(format!("{} is private ({mode:o})", path.display()))
            } else {
                Err(format!(
                    "{} is {mode:o}: other users can reach the {what}; chmod 700 it",
                    path.display()
                ))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(format!(
            "{} does not exist yet (created 0700 on first use)",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

pub async fn run() -> Vec<Check> {
    let paths = match Paths::from_env() {
        Ok(paths) => paths,
        Err(e) => return vec![check("paths", Err(e))],
    };
    let mut checks = vec![
        check(
            "config",
            Config::load(&paths.config)
                .map(|_| format!("{} is valid (or absent)", paths.config.display())),
        ),
        check("state directory", private(&paths.state, "session state")),
        check(
            "socket directory",
            private(paths.socket_dir(), "daemon socket"),
        ),
        check(
            "shell",
            std::process::Command::new("bash")
                .args(["--noprofile", "--norc", "-c", "echo $BASH_VERSION"])
                .output()
                .map_err(|e| format!("bash cannot run: {e}"))
                .map(|out| format!("bash {}", String::from_utf8_lossy(&out.stdout).trim())),
        ),
    ];
    let daemon = match connect_existing().await {
        Ok(Some(client)) => Ok(format!(
            "v{} (build {}, pid {}) on {}{}",
            client.daemon.version,
            client.daemon.build_id,
            client.daemon.pid.map_or("?".into(), |p| p.to_string()),
            paths.socket.display(),
            if client.daemon.build_id == build_id() {
                ", this build"
            } else {
                ", another build"
            }
        )),
        Ok(None) => Ok(format!(
            "no daemon listens on {}; the next command starts one",
            paths.socket.display()
        )),
        Err(e) => Err(e),
    };
    checks.push(check("daemon", daemon));
    checks.push(check(
        "client",
        Ok(format!("v{} (build {})", version(), build_id())),
    ));
    checks
}
