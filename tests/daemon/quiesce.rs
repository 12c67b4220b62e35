//! `shutdown --if-idle` through the real binary: it stops what it says it
//! stops (the daemon, every worker and kernel, the spare's too, and their
//! shells), and a session without a worker whose kernel still has work
//! keeps the daemon serving.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::support::{alive, kill9, wait_until, Env};

/// A process by identity: its pid and its start time (clock ticks since
/// boot), so a pid used again is never taken for it.
type Identity = (u32, u64);

/// The parent pid and start time of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text.rsplit(')').next()?.split_whitespace().collect();
    // After the command's name: state, ppid, ..., starttime (field 22).
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn identity(pid: u32) -> Option<Identity> {
    stat(pid).map(|(_, start)| (pid, start))
}

fn is_running(process: Identity) -> bool {
    alive(process.0) && identity(process.0) == Some(process)
}

/// The pid a record of eukhe names (`worker.json`, `kernel.json`).
fn recorded_pid(path: &std::path::Path) -> Option<u32> {
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    record["identity"]["pid"].as_u64().map(|pid| pid as u32)
}

/// Every live process eukhe recorded for this installation (the daemon,
/// each session's and the spare's worker and kernel, the pids `ls`
/// shows) and all their descendants, by identity.
fn eukhe_processes(env: &Env) -> BTreeSet<Identity> {
    let mut roots = vec![env.daemon_pid()];
    for session in env.sessions().as_array().unwrap() {
        for key in ["pid", "kernel_pid"] {
            if let Some(pid) = session[key].as_u64() {
                roots.push(pid as u32);
            }
        }
    }
    let sessions = std::fs::read_dir(env.state_dir().join("sessions")).unwrap();
    for dir in sessions.flatten() {
        for record in ["worker.json", "kernel.json"] {
            roots.extend(recorded_pid(&dir.path().join(record)));
        }
    }
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some((parent, _)) = stat(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = BTreeSet::new();
    let mut next: Vec<u32> = roots.into_iter().filter(|&pid| alive(pid)).collect();
    while let Some(pid) = next.pop() {
        if let Some(process) = identity(pid) {
            if found.insert(process) {
                next.extend(children.get(&pid).into_iter().flatten());
            }
        }
    }
    found
}

/// The spare session, once its worker and kernel are both up.
fn spare_up(env: &Env) -> bool {
    let Ok(dirs) = std::fs::read_dir(env.state_dir().join("sessions")) else {
        return false;
    };
    dirs.flatten().any(|dir| {
        let path = dir.path();
        path.join("spare.json").exists()
            && !path.join("meta.json").exists()
            && recorded_pid(&path.join("worker.json")).is_some_and(alive)
            && recorded_pid(&path.join("kernel.json")).is_some_and(alive)
    })
}

#[test]
fn shutdown_if_idle_leaves_no_process_and_the_next_request_wakes_the_session() {
    let env = Env::new("ifidle-all");
    let kept = env.ok(&["new", "--name", "kept"]).trim().to_string();
    env.ok(&["bash", &kept, "--", "cd /tmp && export KEPT=yes"]);
    let other = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &other, "--", "true"]);
    wait_until(Duration::from_secs(15), "the spare session is up", || {
        spare_up(&env)
    });
    let before = eukhe_processes(&env);
    let kernels: Vec<u32> = [&kept, &other]
        .iter()
        .filter_map(|id| env.kernel_pid(id))
        .collect();
    assert_eq!(kernels.len(), 2, "both sessions have a kernel");
    assert!(
        kernels
            .iter()
            .all(|kernel| before.iter().any(|&(pid, _)| pid == *kernel)),
        "the kernels are among {before:?}"
    );
    // The daemon, three workers, three kernels and the kernels' shells.
    assert!(before.len() >= 7, "{before:?}");
    assert!(
        before
            .iter()
            .any(|&(pid, _)| stat(pid).is_some_and(|(parent, _)| kernels.contains(&parent))),
        "a kernel's shell is among {before:?}"
    );

    let stopped = env.run(&["shutdown", "--if-idle"]);
    let said = String::from_utf8_lossy(&stopped.stdout);
    assert!(stopped.status.success(), "{said}");
    assert!(said.contains("idle and stopped"), "{said}");
    wait_until(
        Duration::from_secs(15),
        "no process of the daemon is left",
        || before.iter().all(|&process| !is_running(process)),
    );

    // The next request wakes the session over its snapshot.
    assert_eq!(
        env.ok(&["bash", "kept", "--", "echo $KEPT; pwd"]),
        "yes\n/tmp\n"
    );
    let log = env.log(&kept);
    assert_eq!(
        log.matches("kernel restored from its snapshot").count(),
        1,
        "{log}"
    );
}

#[test]
fn a_given_up_session_whose_kernel_has_a_background_job_keeps_the_daemon_serving() {
    let env = Env::new("ifidle-given-up");
    let id = env.ok(&["new"]).trim().to_string();
    let pid_file = env.dir.join("background.pid");
    let background = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! > {}",
        pid_file.display()
    );
    env.ok(&["bash", &id, "--", &background]);
    let sleeper: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let kernel = env.kernel_pid(&id).expect("its kernel lives");
    super::crash_times(&env, &id, 6);
    wait_until(Duration::from_secs(10), "the session is given up", || {
        env.session(&id)["state"] == "given-up"
    });
    assert!(alive(kernel) && alive(sleeper));
    let daemon = env.daemon_pid();

    let refused = env.run(&["shutdown", "--if-idle"]);
    let said = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("busy") && said.contains(&id), "{said}");
    assert_eq!(env.daemon_pid(), daemon, "the daemon keeps serving");
    assert!(
        alive(kernel) && alive(sleeper),
        "nothing of the session ended"
    );

    // Without its background job the kernel is idle: the shutdown stops
    // it with the daemon.
    kill9(sleeper);
    wait_until(Duration::from_secs(15), "the shutdown goes ahead", || {
        let out = env.run(&["shutdown", "--if-idle"]);
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("idle and stopped")
    });
    wait_until(
        Duration::from_secs(15),
        "the daemon and the kernel are gone",
        || !alive(daemon) && !alive(kernel),
    );
}

#[test]
fn a_session_in_its_restart_pause_whose_kernel_has_a_background_job_answers_busy() {
    let env = Env::new("ifidle-pause");
    let id = env.ok(&["new"]).trim().to_string();
    env.ok(&["bash", &id, "--", "sleep 300 >/dev/null 2>&1 &"]);
    let kernel = env.kernel_pid(&id).expect("its kernel lives");
    // Four failures, then a fifth: its pause is 4 s, the shutdown's
    // question takes milliseconds.
    super::crash_times(&env, &id, 5);
    wait_until(Duration::from_secs(5), "the restart pause begins", || {
        env.session(&id)["state"] == "restarting"
    });
    let daemon = env.daemon_pid();
    let refused = env.run(&["shutdown", "--if-idle"]);
    let said = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("busy") && said.contains(&id), "{said}");
    assert_eq!(env.daemon_pid(), daemon, "the daemon keeps serving");
    assert!(alive(kernel));
    wait_until(Duration::from_secs(15), "the worker is back", || {
        env.session(&id)["state"] == "busy"
    });
}
