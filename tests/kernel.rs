//! The kernel's events, through the real binary: what it learns without a
//! tick (a removed session directory, from inotify).

use std::time::Duration;

use crate::support::process::still;
use crate::support::{wait_until, Env};

// A session whose directory goes away from under its kernel (as a removal
// cut short would leave it, or a person's `mv`) takes the kernel's
// processes with it: the kernel sees the directory move and stops.
#[test]
fn a_session_directory_moved_away_stops_its_kernel_and_what_it_runs() {
    let env = Env::new("kernel-dir-gone");
    let id = env.new_session();
    let kernel = env.kernel(&id);
    env.bash(&id, "sleep 1000 >/dev/null 2>&1 &");
    let background = env.run_process(kernel, "sleep 1000");
    std::fs::rename(env.session_dir(&id), env.dir.join("moved-away")).unwrap();
    wait_until(
        Duration::from_secs(5),
        "the kernel and its background job are gone",
        || !still(kernel) && !still(background),
    );
}
