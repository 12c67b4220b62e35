//! The Debian package installed, upgraded and removed inside a private
//! systemd (never on the host): the socket is enabled for users with no
//! manual step, an upgrade while a run is busy leaves the daemon serving
//! until it is idle and the next interactive client (`eukhe attach`)
//! replaces it (running user managers reload their unit files), and
//! removal stops the units (kernels included) and leaves the user's state;
//! and, with lingering on, a reboot revives a busy session with no client
//! (the supervisor starts with the user's manager).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::installed::{self, Installed};
use crate::support::skip::skip_unless_ci;
use crate::support::wait_until;

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The next patch release of this version: the upgrade.
fn next_version() -> String {
    let v = semver::Version::parse(VERSION).expect("a semver version");
    format!("{}.{}.{}", v.major, v.minor, v.patch + 1)
}

/// The Debian package of `version` from this checkout: the one in
/// target/packages when it is newer than every file git tracks (built
/// from these very sources: by scripts/test's packaging/build-packages,
/// or by the other test of this file), else built now, without the RPM
/// (packaging/build-packages checks that once), so a package left from
/// other sources is never tested. Another version is this checkout's
/// package relabelled (packaging/relabel-deb). One build at a time (the tests of this
/// file run side by side and share the staging directory); each test gets
/// its own copy of the result.
fn deb(version: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target/packages")).unwrap();
    let lock = std::fs::File::create(root.join("target/packages/.build-lock")).unwrap();
    // SAFETY: flock(2) on a file this test opened; released when it closes.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    assert_eq!(locked, 0, "cannot lock the package build");
    let built = build_deb(version);
    let own = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("debs-{}", std::process::id()))
        .join(built.file_name().unwrap());
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::copy(&built, &own).unwrap();
    own
}

fn build_deb(version: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let arch = String::from_utf8(
        Command::new("dpkg")
            .arg("--print-architecture")
            .output()
            .expect("dpkg")
            .stdout,
    )
    .unwrap();
    let deb = root
        .join("target/packages")
        .join(format!("eukhe_{version}_{}.deb", arch.trim()));
    if built_from_these_sources(&deb) {
        return deb;
    }
    let _ = std::fs::remove_file(&deb);
    // Another release is this checkout's package relabelled: the same
    // binary, reporting that version under another build id.
    let status = if version == VERSION {
        Command::new(root.join("packaging/build-packages"))
            .arg("--deb-only")
            .status()
            .expect("run packaging/build-packages")
    } else {
        let base = build_deb(VERSION);
        Command::new(root.join("packaging/relabel-deb"))
            .arg(&base)
            .arg(version)
            .status()
            .expect("run packaging/relabel-deb")
    };
    assert!(status.success(), "the package of {version} was not made");
    assert!(deb.exists(), "{} was not built", deb.display());
    deb
}

/// Whether `deb` exists and is newer than every file git tracks in this
/// checkout (a file changed since makes it stale).
fn built_from_these_sources(deb: &Path) -> bool {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Ok(built) = std::fs::metadata(deb).and_then(|m| m.modified()) else {
        return false;
    };
    let Ok(listed) = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
    else {
        return false;
    };
    if !listed.status.success() {
        return false;
    }
    listed
        .stdout
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .all(|name| {
            let path = root.join(String::from_utf8_lossy(name).as_ref());
            // A tracked file deleted in the working tree changes nothing built.
            std::fs::metadata(path)
                .and_then(|m| m.modified())
                .map_or(true, |changed| changed <= built)
        })
}

/// Why the package test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if let Some(why) = crate::support::systemd::unavailable() {
        return Some(why);
    }
    for tool in [
        "/usr/bin/dpkg-buildpackage",
        "/usr/bin/rpmbuild",
        "/usr/bin/lintian",
    ] {
        if !Path::new(tool).exists() {
            return Some(format!("{tool} is missing (scripts/setup installs it)"));
        }
    }
    None
}

#[test]
fn the_deb_installs_enabled_upgrades_idle_only_and_removes_cleanly() {
    if let Some(why) = unavailable() {
        skip_unless_ci(&format!("the package test cannot run here: {why}"));
        return;
    }
    let next = next_version();
    let (first, second) = (deb(VERSION), deb(&next));
    let eukhe = Installed::bare("packages");
    for deb in [&first, &second] {
        let inside = format!(
            "/var/cache/eukhe-test/{}",
            deb.file_name().unwrap().to_string_lossy()
        );
        eukhe
            .systemd
            .install(deb, &inside, 0o644)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let apt = |deb: &Path| {
        let name = deb.file_name().unwrap().to_string_lossy().into_owned();
        eukhe.root(&format!(
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -q /var/cache/eukhe-test/{name}"
        ))
    };

    // Install, log in: the socket listens with no manual step.
    apt(&first);
    eukhe.log_in();
    assert_eq!(eukhe.unit("eukhe.socket", "ActiveState"), "active");
    assert_eq!(eukhe.unit("eukhe.socket", "UnitFileState"), "enabled");
    let id = eukhe.eukhe("new --name packaged").trim().to_string();
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- echo installed")),
        "installed\n"
    );
    let kernel = format!("eukhe-kernel@{id}.service");
    assert_eq!(
        eukhe.unit(&kernel, "ActiveState"),
        "active",
        "the session's shell runs in its kernel unit"
    );
    let man = eukhe.root("man -w eukhe eukhe-send");
    assert!(
        man.contains("eukhe.1") && man.contains("eukhe-send.1"),
        "{man}"
    );
    // The installed units verify clean, their man:eukhe(1) link included.
    eukhe
        .systemd
        .verify_units(true)
        .unwrap_or_else(|report| panic!("{report}"));

    // Upgrade while a run is busy: the old daemon keeps serving.
    eukhe.eukhe(&format!(
        "send {id} 'until [ -e ~/release ]; do sleep 0.1; done; echo busy through the upgrade'"
    ));
    wait_until(Duration::from_secs(10), "the run is busy", || {
        eukhe.session(&id)["state"] == "busy"
    });
    let old_daemon = eukhe.main_pid("eukhe.service");
    let units_loaded = || {
        eukhe
            .user_ok("systemctl --user show -p UnitsLoadTimestampMonotonic --value")
            .trim()
            .parse::<u64>()
            .expect("a timestamp")
    };
    let loaded_before = units_loaded();
    apt(&second);
    assert!(
        units_loaded() > loaded_before,
        "the upgrade reloads the running user manager, so new units are known"
    );
    assert_eq!(
        eukhe.root("eukhe --version").trim(),
        format!("eukhe {next}")
    );
    let served = eukhe.user(&format!("eukhe bash {id} -- echo still served"));
    assert_eq!(String::from_utf8_lossy(&served.stdout), "still served\n");
    // Only `eukhe attach` on a terminal (the interactive start; script(1)
    // gives it one, and carries its standard error) asks the old daemon to
    // shut down if idle: busy, it keeps serving.
    let kept = eukhe.attach_interactively(&id);
    let said = String::from_utf8_lossy(&kept.stdout);
    assert!(
        said.contains("is busy: it keeps serving until it is idle"),
        "{said}"
    );
    assert_eq!(
        eukhe.main_pid("eukhe.service"),
        old_daemon,
        "not restarted by the upgrade"
    );
    eukhe.user_ok("touch ~/release");
    // User bash 1 ("echo installed") took input 1: the run is input 2.
    wait_until(Duration::from_secs(15), "the run finishes", || {
        eukhe
            .eukhe(&format!("log {id}"))
            .contains("[run 2 exited 0]")
    });

    // Idle now: the next interactive client replaces the daemon.
    let attached = eukhe.attach_interactively(&id);
    let said = String::from_utf8_lossy(&attached.stdout);
    assert!(attached.status.success(), "{said}");
    assert_eq!(
        eukhe.eukhe(&format!("bash {id} -- echo upgraded")),
        "upgraded\n"
    );
    let status = eukhe.status();
    assert_eq!(status["version"], next.as_str());
    assert_ne!(status["pid"].as_u64().unwrap() as u32, old_daemon);
    let log = eukhe.eukhe(&format!("log {id}"));
    for line in ["installed", "busy through the upgrade", "upgraded"] {
        assert!(log.contains(line), "the transcript lost {line:?}:\n{log}");
    }

    // Remove: the units stop, the user's state stays.
    eukhe.root("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q eukhe");
    for unit in [
        "eukhe.socket",
        "eukhe.service",
        &format!("eukhe@{id}.service"),
        &kernel,
    ] {
        assert_ne!(
            eukhe.unit(unit, "ActiveState"),
            "active",
            "{unit} still runs"
        );
    }
    assert!(eukhe.user("command -v eukhe").stdout.is_empty());
    let state = eukhe.user_ok(&format!("ls ~/.local/state/eukhe/sessions/{id}"));
    assert!(
        state.contains("transcript") && state.contains("meta.json"),
        "{state}"
    );
}

/// Issue 50's boot scenario: the package enables the supervisor with the
/// user's manager, so with lingering on, a session busy with a run and a
/// queued input is revived at boot with no client: the queued input runs
/// within 60 s of the boot, the interrupted run never runs again, and the
/// worker's journal says the session was revived. Without lingering,
/// `eukhe doctor` says revival waits for a login.
#[test]
fn with_lingering_a_reboot_revives_a_busy_session_with_no_client() {
    if let Some(why) = unavailable() {
        skip_unless_ci(&format!("the package test cannot run here: {why}"));
        return;
    }
    let deb = deb(VERSION);
    let mut eukhe = Installed::bare("packages-boot");
    let inside = format!(
        "/var/cache/eukhe-test/{}",
        deb.file_name().unwrap().to_string_lossy()
    );
    eukhe
        .systemd
        .install(&deb, &inside, 0o644)
        .unwrap_or_else(|e| panic!("{e}"));
    eukhe.root(&format!(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q {inside}"
    ));
    let lingering = |eukhe: &Installed| {
        let out = eukhe.user("EUKHE_HOST=systemd eukhe doctor");
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        report
            .lines()
            .find(|line| line.contains("lingering"))
            .unwrap_or_else(|| panic!("no lingering check: {report}"))
            .to_string()
    };
    let off = lingering(&eukhe);
    assert!(
        off.starts_with("FAIL") && off.contains("revived only at the next login"),
        "{off}"
    );

    // Lingering on: logind starts the user's manager now and at every boot.
    eukhe.root(&format!("loginctl enable-linger {}", installed::USER));
    eukhe.log_in();
    assert!(lingering(&eukhe).starts_with("ok"), "{}", lingering(&eukhe));
    assert_eq!(eukhe.unit("eukhe.service", "UnitFileState"), "enabled");
    wait_until(
        Duration::from_secs(20),
        "the supervisor starts with the user's manager",
        || eukhe.unit("eukhe.service", "ActiveState") == "active",
    );

    let id = eukhe.eukhe("new").trim().to_string();
    let home = format!("/home/{}", installed::USER);
    eukhe.eukhe(&format!(
        "send {id} 'echo started >> {home}/started; sleep 600'"
    ));
    eukhe.eukhe(&format!("send {id} 'echo queued ran >> {home}/queued'"));
    wait_until(Duration::from_secs(10), "the run is busy", || {
        eukhe.session(&id)["state"] == "busy"
            && eukhe.systemd.path(&format!("{home}/started")).exists()
    });

    // A reboot, and no client: nobody logs in, no eukhe command runs.
    let boot = Instant::now();
    eukhe.systemd.reboot().unwrap_or_else(|e| panic!("{e}"));
    let queued = eukhe.systemd.path(&format!("{home}/queued"));
    wait_until(
        Duration::from_secs(90),
        "the queued input runs after the boot",
        || queued.exists(),
    );
    let took = boot.elapsed();
    assert!(
        took <= Duration::from_secs(60),
        "the queued input ran {took:?} after the boot began"
    );
    assert_eq!(
        eukhe.root(&format!("cat {home}/started")),
        "started\n",
        "the interrupted run ran again"
    );
    assert!(eukhe
        .journal(&format!("eukhe@{id}.service"))
        .contains(&format!("session {id} revived over its snapshot")));
    eukhe.assert_revived(&id);

    // What a client sees afterwards: the run interrupted once, the queued
    // input run once.
    wait_until(Duration::from_secs(10), "the queued run is stored", || {
        eukhe
            .eukhe(&format!("log {id}"))
            .contains("[run 2 exited 0]")
    });
    let log = eukhe.eukhe(&format!("log {id}"));
    assert_eq!(log.matches("interrupted]").count(), 1, "{log}");
    assert!(log.contains("[run 1 interrupted]"), "{log}");
    assert_eq!(log.matches("queued ran").count(), 1, "{log}");
    assert_eq!(eukhe.root(&format!("cat {home}/queued")), "queued ran\n");
}
