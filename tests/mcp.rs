//! `eukhe mcp` driven by a real MCP client: the protocol's official Python
//! SDK (`mcp`, in the virtual environment `scripts/setup` makes under
//! `target/mcp-venv`) runs `tests/mcp/client.py`, which starts `eukhe mcp`
//! over standard input and output against a private daemon (the server
//! starts it) and checks each step an agent relies on. The official
//! TypeScript SDK (`target/mcp-ts`, also made by `scripts/setup`) runs
//! `tests/mcp/client.mjs`, a second real client that calls every tool.

#[allow(dead_code)]
#[path = "mcp/raw.rs"]
pub mod raw;

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

/// The MCP TypeScript SDK's `node_modules` (`scripts/setup` installs the
/// version `tests/mcp/package.json` pins under `target/mcp-ts`) and a
/// `node` to run it, or why there is none.
fn ts_sdk() -> Result<PathBuf, String> {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| {
            format!("no `node` to run the TypeScript SDK ({e}): scripts/setup installs it")
        })?;
    if !node.status.success() {
        return Err("`node --version` failed: scripts/setup installs node".into());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("target/mcp-ts/node_modules");
    let installed = modules.join("@modelcontextprotocol/sdk/package.json");
    let pinned: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/mcp/package.json"))
            .expect("tests/mcp/package.json"),
    )
    .expect("tests/mcp/package.json is JSON");
    let pinned = pinned["dependencies"]["@modelcontextprotocol/sdk"]
        .as_str()
        .expect("package.json pins the SDK")
        .to_string();
    let version = std::fs::read_to_string(&installed)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json["version"].as_str().map(str::to_string));
    match version {
        Some(version) if version == pinned => Ok(modules),
        Some(version) => Err(format!(
            "{} is version {version}, not the pinned {pinned}: run scripts/setup",
            installed.display()
        )),
        None => Err(format!(
            "{} is missing: scripts/setup installs the MCP TypeScript SDK {pinned} there",
            installed.display()
        )),
    }
}

// Issue 54, item 5: the protocol's official TypeScript SDK, a second real
// client, calls every tool `tools/list` names (see tests/mcp/client.mjs).
#[test]
fn the_typescript_sdk_drives_every_tool_and_is_told_errors_apart() {
    let env = Env::new("mcp-ts");
    let modules = match ts_sdk() {
        Ok(modules) => modules,
        Err(why) => {
            skip::skip_unless_ci(&format!("the TypeScript MCP test cannot run here: {why}"));
            return;
        }
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.mjs");
    let mut client = Command::new("node");
    client
        .arg(script)
        .env("EUKHE_BIN", env!("CARGO_BIN_EXE_eukhe"))
        .env("EUKHE_MCP_TS_MODULES", &modules);
    for (name, value) in &env.vars {
        client.env(name, value);
    }
    let ran = client.output().expect("run the TypeScript MCP client");
    let stdout = String::from_utf8_lossy(&ran.stdout);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    println!("{stdout}");
    assert!(
        ran.status.success(),
        "the TypeScript MCP client failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        ran.status
    );
    assert!(stdout.contains("all steps passed"), "{stdout}");
    assert!(stdout.contains("every listed tool was called"), "{stdout}");
}

#[test]
fn an_mcp_client_reads_windows_of_one_runs_output_and_is_told_what_is_left_out() {
    let env = Env::new("mcp-windows");
    run_script(&env, "windows.py");
}
