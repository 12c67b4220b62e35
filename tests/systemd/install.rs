//! The private systemd and the units themselves: it boots alone, leaves
//! the host alone, and the units verify clean.

use super::skip;
use crate::support::systemd::PrivateSystemd;

#[test]
fn a_private_systemd_boots_its_minimal_target_and_leaves_the_host_alone() {
    if skip() {
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
    let cgroup = systemd.cgroup().to_path_buf();
    assert!(
        cgroup.exists(),
        "the private systemd runs in its own cgroup"
    );
    drop(systemd);
    assert!(!dir.exists(), "teardown removes the harness directory");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_hostname
    );
    assert!(
        !cgroup.exists(),
        "teardown removes the test's cgroup: {}",
        cgroup.display()
    );
}

#[test]
fn the_units_verify_clean_with_systemd_analyze() {
    if skip() {
        return;
    }
    let systemd = PrivateSystemd::boot("verify").unwrap_or_else(|e| panic!("{e}"));
    // Install the built binary and the repository's units where the units
    // expect them, inside (the overlay) only.
    let install = |from: &str, inside: &str, mode| {
        systemd
            .install(std::path::Path::new(from), inside, mode)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    install(env!("CARGO_BIN_EXE_eukhe"), "/usr/bin/eukhe", 0o755);
    for unit in crate::support::systemd::UNITS {
        let from = format!("{}/units/{unit}", env!("CARGO_MANIFEST_DIR"));
        install(&from, &format!("/usr/lib/systemd/user/{unit}"), 0o644);
    }
    // The man pages come with the packages: tests/packages.rs verifies the
    // installed units with their man:eukhe(1) link.
    systemd
        .verify_units(false)
        .unwrap_or_else(|report| panic!("{report}"));
    assert!(
        !std::path::Path::new("/usr/lib/systemd/user/eukhe.socket").exists(),
        "nothing installed on the host"
    );
}
