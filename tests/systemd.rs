//! Tests against a real systemd, booted privately (see `systemd/harness.rs`).
//! They need root; elsewhere each says why it did not run.

#[path = "systemd/harness.rs"]
mod harness;

use harness::{unavailable, PrivateSystemd};

#[test]
fn a_private_systemd_boots_its_minimal_target_and_leaves_the_host_alone() {
    if let Some(why) = unavailable() {
        eprintln!("a private systemd cannot run here: {why}; not run");
        return;
    }
    let host_hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let systemd = PrivateSystemd::boot("boot").unwrap_or_else(|e| panic!("{e}"));
    let units = systemd.exec(&["systemctl", "list-units", "--no-legend", "--plain"]);
    let units = String::from_utf8_lossy(&units.stdout);
    assert!(units.contains("eukhe-test.target"), "{units}");
    assert!(!units.contains("getty"), "gettys must stay masked: {units}");
    let out = systemd.exec(&[
        "sh",
        "-c",
        "echo written inside > /etc/eukhe-harness-probe && hostname",
    ]);
    assert!(out.status.success());
    assert!(
        systemd.path("/etc/eukhe-harness-probe").exists(),
        "writes land in the overlay"
    );
    assert!(
        !std::path::Path::new("/etc/eukhe-harness-probe").exists(),
        "the host's /etc is untouched"
    );
    let dir = systemd.dir.clone();
    drop(systemd);
    assert!(!dir.exists(), "teardown removes the harness directory");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_hostname
    );
    let leftovers: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/unified")
        .or_else(|_| std::fs::read_dir("/sys/fs/cgroup"))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("eukhe-test-{}", std::process::id()))
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "teardown removes the test's cgroups: {leftovers:?}"
    );
}
