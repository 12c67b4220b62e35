//! The one way a test that cannot run here says so. Included by every test
//! crate that may skip, and by the library's unit tests (`src/lib.rs`).

/// Report why a test does not run here and let it end without asserting;
/// under CI (`CI=true`), which installs every tool and runs as root, fail
/// with the reason instead, so CI never passes a test that ran nothing.
pub fn skip_unless_ci(reason: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "this test must run under CI, but cannot: {reason}"
    );
    eprintln!("not run: {reason}");
}

/// Whether this test must end early because it is not running as root
/// (`why` says what it needs root for; see [`skip_unless_ci`]).
#[allow(dead_code)] // not every crate that includes this has a root-only test
pub fn not_root(why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    skip_unless_ci(why);
    true
}
