//! `eukhe mcp` driven by a real MCP client: the protocol's official Python
//! SDK (`mcp`, in the virtual environment `scripts/setup` makes under
//! `target/mcp-venv`) runs `tests/mcp/client.py`, which starts `eukhe mcp`
//! over standard input and output against a private daemon (the server
//! starts it) and checks each step an agent relies on.

#[allow(dead_code)]
#[path = "mcp/raw.rs"]
mod raw;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{skip, Env};

/// The virtual environment's Python with the SDK, or why there is none.
fn sdk_python() -> Result<PathBuf, String> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/mcp-venv/bin/python");
    if !python.exists() {
        return Err(format!(
            "{} is missing: scripts/setup makes it (a virtual environment with the MCP Python SDK)",
            python.display()
        ));
    }
    let import = Command::new(&python)
        .args(["-c", "import mcp.client.stdio"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !import.status.success() {
        return Err(format!(
            "{} cannot import the MCP SDK (run scripts/setup): {}",
            python.display(),
            String::from_utf8_lossy(&import.stderr).trim()
        ));
    }
    Ok(python)
}

/// Run `tests/mcp/SCRIPT` with the SDK against a private installation
/// (its server starts the daemon); it must print "all steps passed". None
/// when the SDK is missing (a failure under CI=true).
fn run_script(env: &Env, script: &str) -> Option<String> {
    let python = match sdk_python() {
        Ok(python) => python,
        Err(why) => {
            skip::skip_unless_ci(&format!("the MCP test cannot run here: {why}"));
            return None;
        }
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(script);
    let mut client = Command::new(python);
    client
        .arg(script)
        .env("EUKHE_BIN", env!("CARGO_BIN_EXE_eukhe"));
    for (name, value) in &env.vars {
        client.env(name, value);
    }
    let ran = client.output().expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    println!("{stdout}");
    assert!(
        ran.status.success(),
        "the MCP client failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        ran.status
    );
    assert!(stdout.contains("all steps passed"), "{stdout}");
    Some(stdout)
}

#[test]
fn an_mcp_client_keeps_its_shell_through_a_worker_kill_and_is_told_errors_apart() {
    let env = Env::new("mcp");
    if run_script(&env, "client.py").is_none() {
        return;
    }
    // The server started the daemon (no command of this test did), and
    // the daemon outlives the server, whose client has gone.
    let shutdown = env.ok(&["shutdown"]);
    assert!(
        shutdown.contains("stopped") && !shutdown.contains("no daemon"),
        "{shutdown}"
    );
}

#[test]
fn an_mcp_agent_answers_a_prompt_and_drives_git_rebase_i_at_a_terminal() {
    let env = Env::new("mcp-agent");
    run_script(&env, "agent.py");
}

#[test]
fn an_mcp_client_reads_windows_of_one_runs_output_and_is_told_what_is_left_out() {
    let env = Env::new("mcp-windows");
    run_script(&env, "windows.py");
}
