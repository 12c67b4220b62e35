//! A small state disk for a test: a tmpfs in a mount namespace of its
//! own, so nothing is mounted on the host. Root only.

use std::path::{Path, PathBuf};

/// A small tmpfs in a mount namespace of its own, held by a sleeping
/// process this test started: the daemon reaches it as
/// `/proc/<holder>/root/<path>`, and it goes away with the holder, so
/// nothing is mounted on the host.
pub struct SmallDisk {
    holder: std::process::Child,
    /// Where the daemon and the test reach it.
    pub path: PathBuf,
}

impl SmallDisk {
    /// A tmpfs of `mib` MiB over `at`; `None` if it cannot be mounted.
    pub fn mount(at: &Path, mib: u32) -> Option<SmallDisk> {
        use std::io::BufRead;
        std::fs::create_dir_all(at).unwrap();
        let script = format!(
            "mount -t tmpfs -o size={mib}m,mode=700 eukhe-small-disk \"$0\" && echo mounted && exec sleep 3600"
        );
        let mut holder = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(at)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        let mut line = String::new();
        let stdout = holder.stdout.take().unwrap();
        std::io::BufReader::new(stdout).read_line(&mut line).ok()?;
        if line.trim() != "mounted" {
            let _ = holder.kill();
            let _ = holder.wait();
            return None;
        }
        let path = PathBuf::from(format!("/proc/{}/root", holder.id()))
            .join(at.strip_prefix("/").unwrap());
        Some(SmallDisk { holder, path })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// A 16 MiB disk over `at` for a test, or `None` when the test must end
/// early (not root, or no mount namespace here), said as `skip` says it.
pub fn for_test(at: &Path) -> Option<SmallDisk> {
    if super::skip::not_root(
        "it mounts a 16 MiB tmpfs (in a mount namespace of its own) as the state disk",
    ) {
        return None;
    }
    let disk = SmallDisk::mount(at, 16);
    if disk.is_none() {
        super::skip::skip_unless_ci("`unshare --mount` cannot mount a tmpfs here");
    }
    disk
}

/// Fill what is left of `disk` with a file of its own.
pub fn fill(disk: &SmallDisk) -> PathBuf {
    use std::io::Write;
    let path = disk.path.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 1 << 20];
    while file.write_all(&block).is_ok() {}
    path
}

/// Fill again what `disk`'s processes freed since `fill` (a job's scratch
/// files removed at its end): the filler grows until the disk is full.
pub fn top_up(filler: &Path) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(filler)
        .unwrap();
    let page = vec![0u8; 4096];
    while file.write_all(&page).is_ok() {}
}
