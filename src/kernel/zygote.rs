//! The kernel's shell: one `bash` running `zygote.bash`, which forks every
//! job. It holds no user state, so it never needs restoring; if it dies,
//! the kernel starts another on the same command and report pipes.

use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use command_fds::{CommandFdExt, FdMapping};
use nix::fcntl::OFlag;

use super::error::KernelError;

/// How a template's job shell becomes its job's bash: ahead of the job,
/// which that bash takes itself from the template's FIFO (fd 5), saying it
/// taken on fd 6 (`job_prep.bash`); its files are named after the job in
/// the scratch directory.
const EXEC_FROM_TEMPLATE: &str = r#"    __eukhe_a=$__eukhe_prep __eukhe_take=template __eukhe_group=$__eukhe_group \
      __eukhe_restore=$__eukhe_restore __eukhe_late=$__eukhe_late \
      __eukhe_scratch=$__eukhe_scratch \
      builtin exec -a bash "$__eukhe_bash" --norc --noprofile -c "$__eukhe_line"
    builtin exit 126"#;

/// How the job shell of a job the kernel's shell forks becomes its bash:
/// the job is known, and its command comes on fd 5. A terminal job's bash
/// is started by `setsid --ctty` on its terminal: it leads a new session
/// whose controlling terminal that is (its pid stays: it leads no group,
/// so `setsid` does not fork), and `$0` is `bash` as in the other path.
const EXEC_FOR_JOB: &str = r#"    if [[ -n $__eukhe_tty ]]; then
      __eukhe_a=$__eukhe_prep __eukhe_take=job __eukhe_group=$__eukhe_group \
      __eukhe_restore=$__eukhe_restore __eukhe_late=$__eukhe_late \
      __eukhe_job=$__eukhe_job __eukhe_out=$__eukhe_out __eukhe_err=$__eukhe_err \
      __eukhe_state=$__eukhe_state __eukhe_in=$__eukhe_in \
      builtin exec "$__eukhe_setsid" -w --ctty "$__eukhe_bash" --norc --noprofile \
      -c "$__eukhe_line" bash 5<<<"$__eukhe_cmd" <"$__eukhe_tty"
      builtin exit 126
    fi
    __eukhe_a=$__eukhe_prep __eukhe_take=job __eukhe_group=$__eukhe_group \
      __eukhe_restore=$__eukhe_restore __eukhe_late=$__eukhe_late \
      __eukhe_job=$__eukhe_job __eukhe_out=$__eukhe_out __eukhe_err=$__eukhe_err \
      __eukhe_state=$__eukhe_state __eukhe_in=$__eukhe_in \
      builtin exec -a bash "$__eukhe_bash" --norc --noprofile -c "$__eukhe_line" \
      5<<<"$__eukhe_cmd"
    builtin exit 126"#;

/// The kernel's shell, with the job code (`job.bash`) in both places that
/// fork a job: the shell itself (which read the job's fields before it
/// forked) and a prepared template (whose job's bash takes them itself).
/// Ahead of it, the words every job's bash runs: `job_prep.bash` (as
/// `__eukhe_a`), then the command, on line 1 (`__eukhe_line`), then the
/// capture, read with that line.
pub fn script() -> String {
    use crate::session::snapshot::quote;
    let job = include_str!("job.bash");
    let line = format!(
        "builtin eval \"$__eukhe_a\"; eval \"$__eukhe_x$__eukhe_cmd\" <\"${{__eukhe_in:-/dev/null}}\"; {{\n{}}}",
        include_str!("capture.bash")
    );
    format!(
        "__eukhe_prep={}\n__eukhe_line={}\n__eukhe_setsid={}\n{}",
        quote(include_str!("job_prep.bash")),
        quote(&line),
        quote(setsid()),
        include_str!("zygote.bash")
            .replace("@TEMPLATE_JOB@", &job.replace("@TAKE@", EXEC_FROM_TEMPLATE))
            .replace("@JOB@", &job.replace("@TAKE@", EXEC_FOR_JOB))
    )
}

/// Written to a template's FIFO in place of a job's fields: its waiting
/// job's bash restores the template's `restore` script again now. Never
/// a job's name: `Spool::accept` refuses any but letters, digits and `-`.
pub const RESTORE_AHEAD: &str = ".";

/// The pipes between the kernel and its shell (they outlive any one shell).
pub struct Pipes {
    /// The shell reads jobs here (its fd 3).
    pub jobs_read: OwnedFd,
    /// The kernel writes jobs here.
    pub jobs_write: OwnedFd,
    /// Jobs report here (their fd 4).
    pub reports_write: OwnedFd,
}

/// A pipe, closed on exec unless passed on explicitly.
fn pipe() -> Result<(OwnedFd, OwnedFd), KernelError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| KernelError::Process {
        what: "make a pipe",
        source: e.into(),
    })
}

/// Make the pipes; returns them and the read end of the reports.
pub fn pipes() -> Result<(Pipes, OwnedFd), KernelError> {
    let (jobs_read, jobs_write) = pipe()?;
    let (reports_read, reports_write) = pipe()?;
    Ok((
        Pipes {
            jobs_read,
            jobs_write,
            reports_write,
        },
        reports_read,
    ))
}

/// util-linux's `setsid`, which starts a terminal job's bash (the
/// shell's environment has no `PATH` to find it by).
fn setsid() -> &'static str {
    ["/usr/bin/setsid", "/bin/setsid"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("setsid")
}

fn bash() -> &'static str {
    ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .unwrap_or("bash")
}

/// Start a shell on `pipes`; returns its pid. Its environment is empty:
/// every variable a job sees comes from the snapshot.
pub fn start(pipes: &Pipes) -> Result<u32, KernelError> {
    let cannot_start = |source| KernelError::Process {
        what: "start bash",
        source,
    };
    let clone = |fd: &OwnedFd| fd.try_clone().map_err(cannot_start);
    // The shell reads jobs on fd 3 and jobs report on fd 4; the copies are
    // closed here once the shell has started.
    let mappings = vec![
        FdMapping {
            parent_fd: clone(&pipes.jobs_read)?,
            child_fd: 3,
        },
        FdMapping {
            parent_fd: clone(&pipes.reports_write)?,
            child_fd: 4,
        },
    ];
    let mut command = Command::new(bash());
    // The script travels in a variable it unsets first, so `ps` and
    // `systemctl status` show a short command line and no job inherits it.
    command
        .args([
            "--noprofile",
            "--norc",
            "-c",
            "eval \"$__eukhe_zygote\"",
            "bash",
        ])
        .env_clear()
        .env("__eukhe_zygote", script())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
        .fd_mappings(mappings)
        .map_err(|e| cannot_start(std::io::Error::other(e)))?;
    let child = command.spawn().map_err(cannot_start)?;
    // The kernel reaps its children itself (`tree::reap`).
    Ok(child.id())
}

/// Fields for the shell, each NUL-terminated.
pub fn message(fields: &[&str]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for field in fields {
        bytes.extend_from_slice(field.as_bytes());
        bytes.push(0);
    }
    bytes
}

/// One report: `started JOB GROUP` and `finished GROUP STATUS` (a job,
/// whose reporter leads process group GROUP and learns of its job only
/// through it), `template FIFO PID` (a template is ready to take jobs
/// from FIFO), or `defaults DECLARED UMASK` (the shell's `declare -p` and
/// `umask -p` as it starts: what bash gives every shell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Started { job: String, group: u32 },
    Finished { group: u32, status: i32 },
    Template { fifo: String, pid: u32 },
    Defaults { declared: String, umask: String },
}

/// Reports parsed from the bytes read so far; what is left of an
/// unfinished report stays in `pending`.
pub fn parse_reports(pending: &mut Vec<u8>) -> Vec<Report> {
    let mut reports = Vec::new();
    loop {
        let fields: Vec<&[u8]> = pending.splitn(4, |&b| b == 0).collect();
        if fields.len() < 4 {
            return reports;
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let (kind, first, value) = (text(fields[0]), text(fields[1]), text(fields[2]));
        let used = fields[0].len() + fields[1].len() + fields[2].len() + 3;
        pending.drain(..used);
        match (kind.as_str(), value.parse::<i64>()) {
            ("defaults", _) => reports.push(Report::Defaults {
                declared: first,
                umask: value,
            }),
            ("started", Ok(group)) => reports.push(Report::Started {
                job: first,
                group: group as u32,
            }),
            ("finished", Ok(status)) => {
                if let Ok(group) = first.parse::<u32>() {
                    reports.push(Report::Finished {
                        group,
                        status: status as i32,
                    });
                }
            }
            ("template", Ok(pid)) => reports.push(Report::Template {
                fifo: first,
                pid: pid as u32,
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_split_anywhere_are_parsed_whole() {
        let bytes = b"started\x00r1\x00123\x00finished\x00123\x00130\x00defaults\x00\
                      declare -- IFS=$' \\t\\n'\n\x00umask 0022\n\x00star";
        let mut pending = bytes[..9].to_vec();
        assert!(parse_reports(&mut pending).is_empty());
        pending.extend_from_slice(&bytes[9..]);
        assert_eq!(
            parse_reports(&mut pending),
            vec![
                Report::Started {
                    job: "r1".into(),
                    group: 123
                },
                Report::Finished {
                    group: 123,
                    status: 130
                },
                Report::Defaults {
                    declared: "declare -- IFS=$' \\t\\n'\n".into(),
                    umask: "umask 0022\n".into()
                }
            ]
        );
        assert_eq!(pending, b"star");
    }

    fn children(pid: u32) -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    fn gone(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    /// A kernel that dies while its shell forks a template leaves no
    /// template behind, not even one still waiting to open its FIFO.
    #[test]
    fn a_template_waiting_for_its_fifo_ends_with_the_kernel() {
        let dir = std::env::temp_dir().join(format!("eukhe-zygote-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("template.fifo");
        super::super::output::make_fifo(&fifo).unwrap();
        let taken = dir.join("template.taken");
        super::super::output::make_fifo(&taken).unwrap();
        let next = dir.join("template.next");
        super::super::output::make_fifo(&next).unwrap();
        let restore = dir.join("restore");
        std::fs::write(&restore, "").unwrap();
        let (pipes, _reports) = pipes().unwrap();
        let zygote = start(&pipes).unwrap();
        let ask = message(&[
            "template",
            &fifo.to_string_lossy(),
            &taken.to_string_lossy(),
            &restore.to_string_lossy(),
            &dir.to_string_lossy(),
            &restore.to_string_lossy(),
            &next.to_string_lossy(),
        ]);
        let written = nix::unistd::write(&pipes.jobs_write, &ask).unwrap();
        assert_eq!(written, ask.len());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let template = loop {
            if let Some(&pid) = children(zygote).first() {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "no template forked");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        // Nobody opens the FIFO for writing: the template waits in open().
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!gone(template));
        // The kernel "dies": its end of the jobs pipe closes.
        drop(pipes);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !gone(template) {
            assert!(
                std::time::Instant::now() < deadline,
                "template {template} outlived its kernel"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Reap the zygote this test started.
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(zygote as i32), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
