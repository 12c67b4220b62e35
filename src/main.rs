//! The `eukhe` command line.

#![warn(clippy::too_many_lines)]

use std::io::Write as _;
use std::process::ExitCode;

use eukhe::client::cli::Command;
use eukhe::client::Cli;
use eukhe::laws::restart::{restart_verdict, RestartVerdict, RESTART_GIVE_UP_AFTER};
use eukhe::laws::timing::{relations_hold, timeouts_ordered, ORDERING, TIMEOUT_NAMES, TM};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let cli = match eukhe::client::fast_args::plain_command(&args) {
        Some(command) => Cli {
            command,
            host: None,
        },
        None => match by_clap() {
            Ok(cli) => cli,
            Err(code) => return code,
        },
    };
    match eukhe::client::hosts::process_target_from(cli.host.as_deref()) {
        Ok(target) => eukhe::client::remote::set_process_target(target),
        Err(e) => return eukhe::client::cli::finish(Err(e)),
    }
    // Each process's code runs in a frame of its own: inlined here, the
    // largest of them (a worker's, a client command's) would make main's
    // frame large enough that every start faults in tens of stack pages.
    match cli.command {
        Command::Proxy {
            keep_forward: Some(host),
            ..
        } => apart(|| eukhe::client::forward_keeper::main(&host)),
        Command::Proxy {
            socket_path: true, ..
        } => apart(eukhe::client::forward::print_socket_path),
        Command::Proxy {
            lend_stdin: true, ..
        } => apart(eukhe::client::lend::lender_main),
        Command::Proxy { background, .. } => apart(|| eukhe::client::proxy::main(background)),
        Command::Daemon => apart(|| report(eukhe::supervisor::main())),
        Command::Worker { session } => apart(|| report(eukhe::worker::main(&session))),
        Command::Kernel { session, detach } => {
            apart(|| report(eukhe::kernel::main(&session, detach)))
        }
        Command::Laws { json } => apart(|| print_laws(json)),
        Command::Mcp { hosts } => apart(|| eukhe::mcp::run(&hosts)),
        command => apart(|| eukhe::client::run(command)),
    }
}

/// The command line as clap reads it, in a frame of its own; a usage error
/// is one of eukhe's own failures (125), in one line; help and the version
/// are not failures.
#[inline(never)]
fn by_clap() -> Result<Cli, ExitCode> {
    <Cli as clap::Parser>::try_parse().map_err(|e| eukhe::client::usage::report(&e))
}

/// Runs `process` in a frame of its own, never inlined into main's.
#[inline(never)]
fn apart(process: impl FnOnce() -> ExitCode) -> ExitCode {
    process()
}

/// `pow` for the one caller in eukhe's tree, tokio's multi-threaded
/// scheduler (built in by zbus's features, never run by eukhe): defined
/// here, it leaves the linker no reason to have every start load
/// libm.so.6.
#[no_mangle]
pub extern "C" fn pow(base: f64, exponent: f64) -> f64 {
    libm::pow(base, exponent)
}

fn report(result: Result<(), impl std::fmt::Display>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("eukhe: {message}");
            ExitCode::from(eukhe::client::cli::EUKHE_FAILED)
        }
    }
}

/// Prints the timing constants, their ordering relations and the restart
/// schedule, as the law modules define them.
fn print_laws(json: bool) -> ExitCode {
    let values = TM.values();
    let holds = relations_hold(&TM);
    let schedule: Vec<RestartVerdict> = (1..=RESTART_GIVE_UP_AFTER + 1)
        .map(restart_verdict)
        .collect();
    let mut text = String::new();
    if json {
        let relations: Vec<serde_json::Value> = ORDERING
            .iter()
            .zip(holds)
            .map(|(relation, holds)| {
                serde_json::json!({
                    "waiter": TIMEOUT_NAMES[relation.waiter],
                    "waits_for": relation.waits_for.iter().map(|&i| TIMEOUT_NAMES[i]).collect::<Vec<_>>(),
                    "why": relation.why,
                    "holds": holds,
                })
            })
            .collect();
        let report = serde_json::json!({
            "timeouts_ms": TM,
            "relations": relations,
            "timeouts_ordered": timeouts_ordered(&TM),
            "restart_schedule": schedule,
        });
        text = format!("{report:#}\n");
    } else {
        text.push_str("timeouts (ms)\n");
        for (name, value) in TIMEOUT_NAMES.iter().zip(values) {
            text += &format!("  {name:<24} {value:>10}\n");
        }
        text.push_str("ordering (each timeout >= the sum of those it waits for)\n");
        for (relation, holds) in ORDERING.iter().zip(holds) {
            let mark = if holds { "ok  " } else { "FAIL" };
            text += &format!("  {mark} {}\n", relation.why);
        }
        text.push_str("restart schedule (failures in the 15-minute window)\n");
        for (n, verdict) in (1..).zip(&schedule) {
            text += &match verdict {
                RestartVerdict::Restart { pause_ms, .. } => {
                    format!("  failure {n}: restart after {pause_ms} ms\n")
                }
                RestartVerdict::GiveUp { .. } => format!("  failure {n}: give up\n"),
            };
        }
    }
    // A closed pipe (`eukhe laws | head`) is not an error worth a panic.
    let _ = std::io::stdout().write_all(text.as_bytes());
    if timeouts_ordered(&TM) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
