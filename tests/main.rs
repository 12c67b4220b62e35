//! The integration tests, one binary: each file beside this one is a
//! module (with its folder, if it has one), and `support` is what they
//! share. `cargo nextest run` runs each test in a process of its own;
//! `cargo test --test eukhe <module>::` runs one module.

mod support;

mod agent;
mod attach_direct;
mod attach_echo;
mod attach_tty;
mod bash_tty_echo;
mod bridge;
mod daemon;
mod damage;
mod echo;
mod forward;
mod hosts;
mod kernel;
mod lifecycle;
mod limits;
mod log_windows;
mod mcp;
mod output;
mod packages;
mod proof;
mod remote;
mod remote_bash;
mod reset;
mod runaway;
mod runs;
mod screen;
mod screen_restart;
mod shell;
mod shell_attach;
mod systemd;
mod systemd_limits;
mod terminal;
mod tty;
mod waiting;
mod wake;
