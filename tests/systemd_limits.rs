//! Resource limits under a real systemd (booted privately, as in
//! `systemd`): properties of the session's kernel unit, set again at every
//! kernel start, and `ls --json` showing them with the unit cgroup's use.
//!
//! The private systemd sees a cgroup v2 hierarchy with no controllers on
//! a host whose memory, cpu and pids controllers are bound to cgroup v1:
//! there the manager keeps and shows the properties but no controller
//! enforces them.

use std::time::Duration;

use crate::support::installed::{Installed, UID};
use crate::support::wait_until;
use crate::systemd::skip;

fn kernel(id: &str) -> String {
    format!("eukhe-kernel@{id}.service")
}

/// The kernel unit's limit properties, `name=value` sorted.
fn shown(eukhe: &Installed, id: &str) -> Vec<String> {
    let out = eukhe.user_ok(&format!(
        "systemctl --user show {} -p MemoryMax,CPUQuotaPerSecUSec,TasksMax",
        kernel(id)
    ));
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn limits_are_the_kernel_units_properties_at_every_start_and_ls_shows_them() {
    if skip() {
        return;
    }
    let mut eukhe = Installed::boot("limits", &[]);
    let created: serde_json::Value = serde_json::from_str(
        &eukhe.eukhe("new --json --memory-max 64M --tasks-max 50 --cpu-quota 150%"),
    )
    .expect("new --json");
    let id = created["id"].as_str().expect("an id").to_string();
    // What the user manager can enforce, as its own cgroup says; a limit
    // it cannot is told, never kept in silence.
    let manager = eukhe.root(&format!(
        "cat /sys/fs/cgroup/user.slice/user-{UID}.slice/user@{UID}.service/cgroup.controllers"
    ));
    let has = |controller: &str| manager.split_whitespace().any(|c| c == controller);
    let warning = created["warning"].as_str().unwrap_or_default();
    for (controller, property) in [
        ("memory", "MemoryMax"),
        ("cpu", "CPUQuota"),
        ("pids", "TasksMax"),
    ] {
        assert_eq!(
            warning.contains(property),
            !has(controller),
            "the manager has {manager:?}; the warning: {warning:?}"
        );
    }
    if !has("memory") {
        assert!(warning.contains("not enforced"), "{warning}");
    }
    let limited = [
        "CPUQuotaPerSecUSec=1.500000s",
        "MemoryMax=67108864",
        "TasksMax=50",
    ];
    assert_eq!(shown(&eukhe, &id), limited);
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'echo in limits'")),
        "in limits\n"
    );
    let resources = &eukhe.session(&id)["resources"];
    assert_eq!(
        resources["limits"],
        serde_json::json!({"memory_max": 67108864, "cpu_quota_percent": 150, "tasks_max": 50}),
        "{resources}"
    );
    let tasks = resources["tasks"].as_u64().expect("tasks counted");
    assert!(tasks >= 2, "the kernel and its shell at least: {resources}");
    let memory = eukhe.unit(&kernel(&id), "MemoryCurrent");
    match memory.parse::<u64>() {
        Ok(_) => assert!(resources["memory_bytes"].as_u64().is_some(), "{resources}"),
        // No memory controller: nothing counts it.
        Err(_) => assert!(resources["memory_bytes"].is_null(), "{resources}"),
    }
    // Runtime properties do not outlive a reboot; the next kernel sets them.
    eukhe.reboot();
    assert!(
        shown(&eukhe, &id).contains(&"MemoryMax=infinity".to_string()),
        "{:?}",
        shown(&eukhe, &id)
    );
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'echo again'")),
        "again\n"
    );
    wait_until(Duration::from_secs(10), "the new kernel runs", || {
        eukhe.unit(&kernel(&id), "ActiveState") == "active"
    });
    assert_eq!(shown(&eukhe, &id), limited);
    // A session without limits leaves its kernel unit's alone.
    let plain = eukhe.eukhe("new --json");
    assert!(!plain.contains("warning"), "{plain}");
    let plain: serde_json::Value = serde_json::from_str(&plain).expect("new --json");
    let plain = plain["id"].as_str().expect("an id").to_string();
    assert!(shown(&eukhe, &plain).contains(&"MemoryMax=infinity".to_string()));
    assert!(eukhe.session(&plain).get("resources").is_none());
}
