//! Resource limits on the process backend, and a kernel's current use on
//! either backend, through cgroup v2 files.
//!
//! A session kernel's cgroup is made beside the daemon's own cgroup (its
//! parent lists the daemon's available controllers and, delegated, is the
//! user's to write): `<parent>/eukhe-kernel-<session>`. Beside, not below:
//! a cgroup holding processes (the daemon's) cannot give controllers to
//! children. The kernel moves itself in before it forks anything, so every
//! run it starts is inside. `laws::limits` decides whether this can work;
//! here are the files.

use std::path::{Path, PathBuf};

use super::HostError;
use crate::laws::limits::{
    process_backend_refusal, systemd_unenforced, CgroupPlace, ResourceLimits,
};

/// The cgroup v2 mount point in `/proc/self/mountinfo`'s text.
fn cgroup2_mount(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        (rest.split_whitespace().next()? == "cgroup2")
            .then(|| fields.split_whitespace().nth(4).map(str::to_string))?
    })
}

/// The cgroup v2 path in `/proc/<pid>/cgroup`'s text (its `0::` line).
fn cgroup2_path(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_string)
}

/// The directory of `pid`'s cgroup v2 (`self` for this process).
fn cgroup_dir_of(pid: &str) -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup v2 hierarchy is mounted")?;
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let path = cgroup2_path(&own).ok_or("this process is in no cgroup v2 hierarchy")?;
    // `/..` and the like: the cgroup lies outside this namespace's view.
    if path.split('/').any(|part| part == "..") {
        return Err(format!("its cgroup {path} lies outside this namespace"));
    }
    let below = path.trim_matches('/');
    Ok(if below.is_empty() {
        PathBuf::from(mount)
    } else {
        Path::new(&mount).join(below)
    })
}

/// Where this process would make kernel cgroups, and what is offered there.
pub fn place() -> CgroupPlace {
    let own = match cgroup_dir_of("self") {
        Ok(dir) => dir,
        Err(why) => return CgroupPlace::NoCgroup2 { why },
    };
    let text = |file: &Path| std::fs::read_to_string(file).unwrap_or_default();
    let controllers = text(&own.join("cgroup.controllers"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let parent = kernels_parent(&own);
    let writable = |path: &Path| nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok();
    CgroupPlace::Found {
        dir: parent.display().to_string(),
        controllers,
        writable: writable(&parent) && writable(&parent.join("cgroup.procs")),
    }
}

/// The cgroup kernel cgroups are made in: the parent of `own`, or `own`
/// itself at a hierarchy's root (which has no parent and may hold both).
fn kernels_parent(own: &Path) -> PathBuf {
    match own.parent() {
        Some(parent) if parent.join("cgroup.procs").exists() => parent.to_path_buf(),
        _ => own.to_path_buf(),
    }
}

/// `eukhe new` on the process backend: why `limits` cannot be applied
/// here, if they cannot.
pub fn process_refusal(limits: &ResourceLimits) -> Option<String> {
    if limits.is_none() {
        return None;
    }
    process_backend_refusal(limits, &place())
}

/// `eukhe new` on the systemd backend: the warning when the user
/// manager this daemon runs under cannot enforce `limits`. None when it
/// can, or when this daemon is under no user manager (nothing to tell).
pub fn systemd_warning(limits: &ResourceLimits) -> Option<String> {
    if limits.is_none() {
        return None;
    }
    let own = cgroup_dir_of("self").ok()?;
    let manager = own.ancestors().find(|dir| {
        dir.file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("user@") && name.ends_with(".service"))
    })?;
    let text = std::fs::read_to_string(manager.join("cgroup.controllers")).ok()?;
    let controllers: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    systemd_unenforced(limits, &controllers)
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> HostError {
    move |source| HostError::Io { what, source }
}

/// Move this process (a kernel about to start, before it forks) into its
/// session's cgroup with `limits` written there.
pub fn enter(session: &str, limits: &ResourceLimits) -> Result<(), HostError> {
    let own = cgroup_dir_of("self").map_err(|why| HostError::State {
        what: format!("the kernel of session {session}"),
        state: format!("cannot be limited: {why}"),
    })?;
    let parent = kernels_parent(&own);
    if parent == own {
        // At a root: its children get only the controllers it enables.
        let enable: Vec<String> = limits
            .controllers()
            .iter()
            .map(|c| format!("+{}", c.name()))
            .collect();
        let control = parent.join("cgroup.subtree_control");
        std::fs::write(&control, enable.join(" "))
            .map_err(io(format!("cannot enable {}", control.display())))?;
    }
    let dir = parent.join(format!("eukhe-kernel-{session}"));
    match std::fs::create_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(io(format!("cannot make cgroup {}", dir.display()))(e))
        }
        _ => {}
    }
    let write = |file: &str, value: String| {
        std::fs::write(dir.join(file), &value).map_err(io(format!(
            "cannot write {value} to {}",
            dir.join(file).display()
        )))
    };
    if let Some(memory) = limits.memory_max {
        write("memory.max", memory.cgroup_text())?;
    }
    if let Some(percent) = limits.cpu_quota_percent {
        write("cpu.max", ResourceLimits::cpu_max_text(percent))?;
    }
    if let Some(tasks) = limits.tasks_max {
        write("pids.max", tasks.cgroup_text())?;
    }
    write("cgroup.procs", std::process::id().to_string())
}

/// Remove the cgroup `enter` made for `session`'s kernel, once its
/// processes are gone: a removed session leaves no directory behind.
/// None made (no limits, no cgroup v2) is nothing to do.
pub fn forget(session: &str) -> Result<(), HostError> {
    let Ok(own) = cgroup_dir_of("self") else {
        return Ok(());
    };
    let dir = kernels_parent(&own).join(format!("eukhe-kernel-{session}"));
    match std::fs::remove_dir(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io(format!("cannot remove cgroup {}", dir.display()))(e))
        }
        _ => Ok(()),
    }
}

/// What a kernel's cgroup uses now: memory bytes and tasks, each `None`
/// where the cgroup does not count it. Tasks without the pids controller
/// are the threads the cgroup and those below it hold.
pub fn usage(kernel_pid: u32) -> (Option<u64>, Option<u64>) {
    let Ok(dir) = cgroup_dir_of(&kernel_pid.to_string()) else {
        return (None, None);
    };
    let number = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
    };
    let tasks = number("pids.current").or_else(|| threads_below(&dir));
    (number("memory.current"), tasks)
}

fn threads_below(dir: &Path) -> Option<u64> {
    let own = std::fs::read_to_string(dir.join("cgroup.threads")).ok()?;
    let mut count = own.lines().count() as u64;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            count += threads_below(&entry.path()).unwrap_or(0);
        }
    }
    Some(count)
}

/// The files of this process's memory cgroup that count OOM kills and
/// hold its limit: cgroup v2's `memory.events` and `memory.max`, else
/// cgroup v1's `memory.oom_control` and `memory.limit_in_bytes` (a hybrid
/// host's memory controller).
fn own_memory_files() -> Option<&'static (PathBuf, PathBuf)> {
    // Found once: a kernel's cgroup does not change once it serves.
    static FILES: std::sync::OnceLock<Option<(PathBuf, PathBuf)>> = std::sync::OnceLock::new();
    FILES
        .get_or_init(|| {
            let v2 = cgroup_dir_of("self")
                .ok()
                .map(|dir| (dir.join("memory.events"), dir.join("memory.max")));
            let v1 = memory_v1_dir().map(|dir| {
                (
                    dir.join("memory.oom_control"),
                    dir.join("memory.limit_in_bytes"),
                )
            });
            [v2, v1]
                .into_iter()
                .flatten()
                .find(|(events, _)| events.exists())
        })
        .as_ref()
}

/// This process's cgroup v1 memory directory, if a v1 memory hierarchy
/// holds it.
fn memory_v1_dir() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = memory_v1_mount(&mountinfo)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })?;
    let below = path.trim_matches('/');
    Some(match below {
        "" => PathBuf::from(mount),
        below => Path::new(&mount).join(below),
    })
}

/// The mount point of the cgroup v1 hierarchy with the memory controller.
fn memory_v1_mount(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        let mut rest = rest.split_whitespace();
        let (fstype, options) = (rest.next()?, rest.nth(1)?);
        (fstype == "cgroup" && options.split(',').any(|o| o == "memory"))
            .then(|| fields.split_whitespace().nth(4).map(str::to_string))?
    })
}

/// The OOM kills this process's memory cgroup counted so far (0 where
/// none counts them).
pub fn own_oom_kills() -> u64 {
    own_memory_files().map_or(0, |(events, _)| {
        oom_kills(&std::fs::read_to_string(events).unwrap_or_default())
    })
}

/// The memory limit of this process's cgroup, if it has one.
pub fn own_memory_limit() -> Option<u64> {
    let (_, limit) = own_memory_files()?;
    let bytes: u64 = std::fs::read_to_string(limit).ok()?.trim().parse().ok()?;
    // cgroup v1 writes "no limit" as the largest page-aligned i64.
    (bytes < i64::MAX as u64 / 2).then_some(bytes)
}

/// `oom_kill N` in a `memory.events` text.
fn oom_kills(events: &str) -> u64 {
    events
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_and_path_are_read_from_procs_text() {
        let mountinfo = "\
34 25 0:29 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
35 25 0:30 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw
";
        assert_eq!(
            cgroup2_mount(mountinfo).as_deref(),
            Some("/sys/fs/cgroup/unified")
        );
        assert_eq!(cgroup2_mount("1 2 0:1 / /proc rw - proc proc rw"), None);
        let hybrid = "4:memory:/x\n1:name=systemd:/\n0::/user.slice/a.scope\n";
        assert_eq!(cgroup2_path(hybrid).as_deref(), Some("/user.slice/a.scope"));
        assert_eq!(cgroup2_path("4:memory:/x\n"), None);
    }

    #[test]
    fn oom_kills_are_read_from_memory_events_or_oom_control() {
        let events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kills(events), 2);
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n";
        assert_eq!(oom_kills(v1), 5);
        assert_eq!(oom_kills(""), 0);
    }

    #[test]
    fn the_v1_memory_hierarchy_is_found_by_its_controller() {
        let mountinfo = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:5 - cgroup cgroup rw,cpu
34 25 0:29 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory
";
        assert_eq!(
            memory_v1_mount(mountinfo).as_deref(),
            Some("/sys/fs/cgroup/memory")
        );
        assert_eq!(
            memory_v1_mount("35 25 0:30 / /u rw - cgroup2 cgroup2 rw"),
            None
        );
    }
}
