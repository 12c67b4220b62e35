//! The `eukhe` command line.

#![warn(clippy::too_many_lines)]
// The C entry point is eukhe's own (`main` below): Rust's would read
// /proc/self/maps and map a signal stack before the first line runs.
#![no_main]

use std::io::Write as _;
use std::process::ExitCode;

use eukhe::client::cli::Command;
use eukhe::client::Cli;
use eukhe::laws::restart::{restart_verdict, RestartVerdict, RESTART_GIVE_UP_AFTER};
use eukhe::laws::timing::{relations_hold, timeouts_ordered, ORDERING, TIMEOUT_NAMES, TM};

/// The process's entry, called by the C runtime. It does what Rust's own
/// entry does that eukhe relies on (standard descriptors open, SIGPIPE
/// ignored, standard output flushed at the end, 101 on a panic) and skips
/// the rest: finding the main thread's stack bounds in /proc/self/maps and
/// a signal stack for reporting its overflow (an overflow still ends the
/// process, by SIGSEGV without the message).
#[no_mangle]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    prepare_process();
    let code = std::panic::catch_unwind(eukhe_main).map_or(101, exit_status);
    // Flushes standard output as Rust's entry does on return.
    std::process::exit(code)
}

fn eukhe_main() -> ExitCode {
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

/// Before any other code of the process: the standard descriptors 0 to 2
/// open (on /dev/null when the parent closed one, so no socket or file of
/// eukhe's lands there and takes stray output), and SIGPIPE ignored, so a
/// write to a closed pipe or socket is an error to handle, not death.
fn prepare_process() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is a valid array of three pollfd for the call.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    let closed: Vec<libc::c_int> = if polled < 0 {
        // poll cannot say (EINVAL under a low RLIMIT_NOFILE): ask each.
        // SAFETY: F_GETFD on any number only reads the descriptor table.
        (0..3)
            .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1)
            .collect()
    } else {
        fds.iter()
            .filter(|pollfd| pollfd.revents & libc::POLLNVAL != 0)
            .map(|pollfd| pollfd.fd)
            .collect()
    };
    for _ in closed {
        // The lowest free descriptor is the closed one.
        // SAFETY: a constant NUL-terminated path; the descriptor is kept.
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened == -1 {
            std::process::abort();
        }
    }
    // SAFETY: installing SIG_IGN for SIGPIPE; no handler code runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// The status `code` exits with (std reads no number back from an
/// `ExitCode`; every one is made of a byte).
fn exit_status(code: ExitCode) -> i32 {
    (0..=u8::MAX)
        .find(|&byte| ExitCode::from(byte) == code)
        .map_or(1, i32::from)
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
