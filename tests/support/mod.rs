//! What every integration test shares: one private installation ([`Env`]),
//! eukhe installed in a private systemd ([`installed::Installed`]), one
//! polling loop ([`wait_for`], asserted by [`wait_until`] and [`never`]),
//! and processes by pid ([`process`]). The loop is the only sleep a test
//! needs to wait on a condition; a fixed sleep says why no condition can
//! be awaited.

pub mod cleanup;
pub mod env;
pub mod installed;
pub mod process;
pub mod remote;
pub mod skip;
mod sleeps;
pub mod small_disk;
pub mod sshd;
pub mod systemd;
pub mod terminal;
pub mod wire;

use std::time::{Duration, Instant};

pub use env::Env;
pub use process::{alive, kill9, signal};

/// How often a condition is checked again while waiting on it.
const POLL: Duration = Duration::from_millis(25);

/// Wait until `condition` holds, failing the test after `within`.
pub fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    assert!(
        wait_for(within, &mut condition),
        "timed out waiting until {what}"
    );
}

/// Fail the test if `happens` comes to hold within `within`: how a test
/// shows that something does not happen (`what` names it).
pub fn never(within: Duration, what: &str, happens: impl FnMut() -> bool) {
    assert!(!wait_for(within, happens), "{what} within {within:?}");
}

/// Whether `condition` came to hold within `within` (checked at once, then
/// every [`POLL`]); for a caller that reports the failure itself.
pub fn wait_for(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// A number no other test of this process has: names made with it stay
/// apart when `cargo test` runs every test in one process.
pub fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
