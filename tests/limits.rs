//! Resource limits through the real binary on the process backend: the
//! options' refusals, and `new` refused in one line where no delegated
//! cgroup v2 offers the controllers (or, where one does, the kernel in a
//! cgroup of its own with the limits written). The systemd backend's are
//! in `systemd_limits`.

use std::path::PathBuf;

use crate::support::Env;

/// `eukhe <args>`: its exit code and its standard error.
fn refused(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let out = env.run(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_limit_the_options_do_not_read_is_refused_before_any_daemon_starts() {
    let env = Env::new("limits-parse");
    for (args, said) in [
        (
            ["new", "--memory-max", "64m"],
            "eukhe: --memory-max \"64m\": expected bytes, or a whole number with a K, M, G or T \
             suffix (powers of 1024), or \"infinity\"\n",
        ),
        (
            ["new", "--cpu-quota", "50"],
            "eukhe: --cpu-quota \"50\": expected a whole percentage of one CPU from 1%, as 50% \
             (above 100% for several CPUs)\n",
        ),
        (
            ["new", "--tasks-max", "0"],
            "eukhe: --tasks-max \"0\": expected a whole number from 1, or \"infinity\"\n",
        ),
    ] {
        assert_eq!(
            refused(&env, &args),
            (Some(125), said.to_string()),
            "{args:?}"
        );
    }
    assert!(
        !env.dir.join("run/eukhe.sock").exists(),
        "no daemon was started for a refused command line"
    );
}

/// The cgroup v2 directory of a process whose `/proc/<pid>/cgroup` reads
/// `text`, from its `0::` line and the cgroup2 mount.
fn cgroup2_dir(text: &str) -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        (rest.starts_with("cgroup2 "))
            .then(|| fields.split_whitespace().nth(4).map(str::to_string))?
    })?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .to_string();
    let below = path.trim_matches('/');
    Some(match below {
        "" => PathBuf::from(mount),
        below => PathBuf::from(mount).join(below),
    })
}

/// The cgroup v2 directory this process (and so the daemon it starts)
/// is in.
fn own_cgroup2() -> Option<PathBuf> {
    cgroup2_dir(&std::fs::read_to_string("/proc/self/cgroup").ok()?)
}

/// Whether the daemon's cgroup offers the memory controller.
fn memory_delegated() -> bool {
    own_cgroup2()
        .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.controllers")).ok())
        .is_some_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"))
}

#[test]
fn the_process_backend_refuses_limits_it_cannot_apply_in_one_line_or_applies_them() {
    let env = Env::new("limits-process");
    let out = env.run(&["new", "--name", "capped", "--memory-max", "64M"]);
    if memory_delegated() {
        // A delegated cgroup v2: the kernel lives in a cgroup of its own.
        assert!(out.status.success(), "{out:?}");
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let pid = env.kernel_pid(&id).expect("the kernel runs");
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        assert!(cgroup.contains(&format!("eukhe-kernel-{id}")), "{cgroup}");
        let limits = &env.session(&id)["resources"]["limits"];
        assert_eq!(limits["memory_max"], 64 << 20);
        // Removed, the session leaves no cgroup behind.
        let dir = cgroup2_dir(&cgroup).expect("the kernel's cgroup v2 directory");
        assert!(dir.is_dir(), "{}", dir.display());
        let out = env.run(&["rm", "--force", &id]);
        assert!(out.status.success(), "{out:?}");
        assert!(!dir.exists(), "{} is left after rm", dir.display());
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(
            "eukhe: resource limits need cgroup v2 with the memory controller delegated; "
        ) && stderr.ends_with("(use the systemd backend, or drop --memory-max)\n"),
        "{stderr}"
    );
    if let Some(dir) = own_cgroup2() {
        // The daemon's cgroup, or its parent, where kernel cgroups would go.
        let named = [Some(dir.as_path()), dir.parent()]
            .into_iter()
            .flatten()
            .any(|d| stderr.contains(&format!("; {} has ", d.display())));
        assert!(named, "names the cgroup: {stderr}");
    }
    assert_eq!(env.sessions(), serde_json::json!([]), "no session was made");
    // The same limit as config.toml's default refuses a plain `new` too.
    let configured = Env::new("limits-config").with_config("[limits]\nmemory_max = \"1G\"\n");
    let (code, stderr) = refused(&configured, &["new"]);
    assert_eq!(code, Some(125));
    assert!(stderr.contains("drop --memory-max"), "{stderr}");
    // A session without limits is made as ever.
    let plain = Env::new("limits-none");
    let id = plain.ok(&["new"]).trim().to_string();
    assert!(plain.session(&id).get("resources").is_none());
}

/// A cgroup v1 memory cgroup of this test's, below its own, with a limit:
/// removed (once empty) when dropped, after the `Env` whose processes it
/// held has ended them.
struct MemoryV1 {
    dir: PathBuf,
}

impl MemoryV1 {
    /// Where a v1 memory hierarchy holds this process and root may write.
    fn make(limit: &str) -> Option<MemoryV1> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mount = mountinfo.lines().find_map(|line| {
            let (fields, rest) = line.split_once(" - ")?;
            let rest: Vec<&str> = rest.split_whitespace().collect();
            (rest.first() == Some(&"cgroup") && rest.get(2)?.split(',').any(|o| o == "memory"))
                .then(|| fields.split_whitespace().nth(4).map(str::to_string))?
        })?;
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':').skip(1);
            let controllers = fields.next()?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| fields.next())?
        })?;
        let dir = PathBuf::from(mount)
            .join(path.trim_matches('/'))
            .join(format!(
                "eukhe-oom-{}-{}",
                std::process::id(),
                crate::support::unique()
            ));
        std::fs::create_dir(&dir).ok()?;
        let made = MemoryV1 { dir };
        std::fs::write(made.dir.join("memory.limit_in_bytes"), limit).ok()?;
        Some(made)
    }
}

impl Drop for MemoryV1 {
    fn drop(&mut self) {
        crate::support::wait_for(std::time::Duration::from_secs(10), || {
            std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
        });
    }
}

/// A run past the memory limit is OOM-killed: it ends with status 137 and
/// a notice naming the limit, and the session goes on. With a delegated
/// cgroup v2 the limit is the session's own (`--memory-max 64M`); on a
/// hybrid host (cgroup v1 memory, this machine) the daemon, and so the
/// kernel, start in a v1 memory cgroup limited to 64M, whose OOM kills the
/// kernel counts the same way.
#[test]
fn a_run_past_the_memory_limit_ends_137_with_a_notice_and_the_session_goes_on() {
    let mut v1 = None;
    let env = Env::new("limits-oom");
    let id = if memory_delegated() {
        env.ok(&["new", "--memory-max", "64M"]).trim().to_string()
    } else {
        if !nix::unistd::geteuid().is_root() {
            crate::support::skip::skip_unless_ci("needs root for a memory cgroup of its own");
            return;
        }
        let Some(cgroup) = MemoryV1::make("64M") else {
            crate::support::skip::skip_unless_ci(
                "neither a delegated cgroup v2 nor a cgroup v1 memory hierarchy is here",
            );
            return;
        };
        let procs = cgroup.dir.join("cgroup.procs");
        let mut new = env.command(&["new"]);
        // The client starts the daemon, which starts the kernel: all inside.
        // SAFETY: between fork and exec the closure only writes one file.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut new, move || {
                std::fs::write(&procs, std::process::id().to_string())
            });
        }
        let out = new.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        v1 = Some(cgroup);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // tail holds its one endless line: 200 MiB, past the limit.
    let out = env.run(&["send", "--wait", &id, "head -c 200M /dev/zero | tail"]);
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    let log = env.log(&id);
    let notice = "run 1 was killed: the session's memory limit (64M) was reached";
    assert!(log.contains(notice), "{log}");
    assert_eq!(env.bash(&id, "echo still here"), "still here\n");
    drop(env);
    drop(v1);
}
