//! Resource limits under a real systemd (booted privately, as in
//! `systemd`): properties of the session's kernel unit, set again at every
//! kernel start, and `ls --json` showing them with the unit cgroup's use.
//!
//! The private systemd sees a cgroup v2 hierarchy with no controllers on
//! a host whose memory, cpu and pids controllers are bound to cgroup v1:
//! there the manager keeps and shows the properties but no controller
//! enforces them.

use std::time::Duration;

use crate::support::installed::Installed;
use crate::support::skip::skip_unless_ci;
use crate::support::systemd::unavailable;
use crate::support::wait_until;

fn skip() -> bool {
    match unavailable() {
        Some(why) => {
            skip_unless_ci(&format!("a private systemd cannot run here: {why}"));
            true
        }
        None => false,
    }
}

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
    let id = eukhe
        .eukhe("new --memory-max 64M --tasks-max 50 --cpu-quota 150%")
        .trim()
        .to_string();
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
    let plain = eukhe.eukhe("new").trim().to_string();
    assert!(shown(&eukhe, &plain).contains(&"MemoryMax=infinity".to_string()));
    assert!(eukhe.session(&plain).get("resources").is_none());
}

/// The test: `--memory-max 64M` and a run allocating 200 MiB. The
/// run ends (status 137), its notice names the limit, and the kernel unit
/// (`OOMPolicy=continue`) and its session go on. It needs a memory
/// controller in the private systemd, which a host that binds memory to
/// cgroup v1 cannot give it.
#[test]
fn under_systemd_a_run_past_memory_max_ends_with_a_notice_and_the_session_goes_on() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("oom", &[]);
    let controllers = eukhe.root("cat /sys/fs/cgroup/cgroup.controllers");
    if !controllers.split_whitespace().any(|c| c == "memory") {
        skip_unless_ci(&format!(
            "the private systemd's cgroup v2 offers no memory controller ({:?}): \
             this host binds it to cgroup v1",
            controllers.trim()
        ));
        return;
    }
    let id = eukhe.eukhe("new --memory-max 64M").trim().to_string();
    let out = eukhe.user(&format!(
        "eukhe send --wait {id} 'head -c 200M /dev/zero | tail'"
    ));
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let log = eukhe.eukhe(&format!("log {id}"));
    assert!(
        log.contains("run 1 was killed: the session's memory limit (64M) was reached"),
        "{log}"
    );
    assert_eq!(eukhe.unit(&kernel(&id), "ActiveState"), "active");
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- 'echo still here'")),
        "still here\n"
    );
}
