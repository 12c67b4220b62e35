//! The run core's unit tests: crashes, reconnects, kernel deaths, cancels
//! and withdrawals on a fake clock.

use super::*;
use std::collections::BTreeMap;

use crate::laws::timing::TM;
use crate::protocol::kernel::{JobEnd, JobState};
use crate::session::entry::Stream;
use crate::session::transcript::Entry;

fn entry(seq: u64, body: EntryBody) -> Entry {
    Entry {
        seq,
        at_ms: seq,
        body,
    }
}

fn input(run: u64, text: &str) -> EntryBody {
    EntryBody::Input {
        input: run,
        text: text.into(),
        tty: None,
    }
}

fn end(status: i32) -> JobEnd {
    JobEnd {
        status,
        signal: None,
        cancelled: false,
        notice: None,
        settled: true,
        lost_output: None,
    }
}

fn stores(actions: &[Action]) -> Vec<&EntryBody> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Store(b) | Action::StoreUntilStored(b) => Some(b),
            _ => None,
        })
        .collect()
}

/// A worker that crashed mid-run: the next one finds the run live in
/// the kernel, resumes its output where the transcript stops, and
/// stores its end once.
#[test]
fn a_reconnecting_worker_resumes_a_live_run_and_stores_its_end_once() {
    let transcript = [
        entry(1, input(1, "sleep 3; echo done")),
        entry(2, EntryBody::RunStarted { input: 1 }),
        entry(
            3,
            EntryBody::Output {
                input: Some(1),
                stream: Stream::Stdout,
                data: "half\n".into(),
                spool_end: Some(10),
                bash: None,
            },
        ),
    ];
    let mut core = RunCore::from_transcript(&transcript, 7);
    assert_eq!(core.current_run(), Some(1));
    let jobs = BTreeMap::from([("r1".to_string(), JobState::Running)]);
    let actions = core.kernel_hello(99, &jobs, 0);
    assert_eq!(
        actions,
        vec![Action::Kernel(ToKernel::Follow {
            job: "r1".into(),
            from: 10
        })],
        "resumes from the stored offset and never starts the run again"
    );
    let out = core.output("r1", Stream::Stdout, 20, b"done\n".to_vec().into());
    assert!(matches!(
        stores(&out)[..],
        [EntryBody::Output {
            spool_end: Some(20),
            ..
        }]
    ));
    let first = core.ended("r1", Some(&end(0)));
    assert!(
        first.contains(&Action::StoreUntilStored(EntryBody::RunFinished {
            input: 1,
            status: 0,
            signal: None,
            cancelled: false,
            lost_output: None
        }))
    );
    assert!(first.contains(&Action::EndWaiters(
        1,
        Response::Exit {
            status: 0,
            lost: None,
            cut_short: None
        }
    )));
    assert!(core.ended("r1", Some(&end(0))).is_empty(), "stored twice");
    assert_eq!(core.current_run(), None);
}

/// The kernel died with the run (a reboot): the run is interrupted,
/// never rerun, and the queued input behind it runs next.
#[test]
fn a_run_of_a_gone_kernel_is_interrupted_once_and_the_queue_goes_on() {
    let transcript = [
        entry(1, input(1, "make")),
        entry(2, EntryBody::RunStarted { input: 1 }),
        entry(3, input(2, "echo next")),
    ];
    let mut core = RunCore::from_transcript(&transcript, 7);
    let jobs = BTreeMap::from([("r1".to_string(), JobState::Lost)]);
    let hello = core.kernel_hello(5, &jobs, 0);
    assert!(!hello
        .iter()
        .any(|a| matches!(a, Action::Kernel(ToKernel::Start { .. }))));
    assert_eq!(core.next_start(0), None, "one run at a time");
    let ended = core.ended("r1", None);
    assert_eq!(
        stores(&ended)[0],
        &EntryBody::RunInterrupted { input: 1 },
        "{ended:?}"
    );
    assert_eq!(core.next_start(0), Some(2));
    let start = core.run_start_stored(2);
    assert_eq!(
        start[0],
        Action::Kernel(ToKernel::Start {
            job: "r2".into(),
            command: "echo next".into(),
            stdin_of: None,
            tty: None,
        })
    );
}

/// A worker that crashed between storing a run's start and handing it
/// over: no kernel ever had it, so it is handed now (it never ran).
/// A terminal run queued, or started but never handed, before a worker
/// restart is still a terminal run: the transcript's input says so.
#[test]
fn a_terminal_run_is_handed_with_its_terminal_after_a_restart() {
    let size = WindowSize {
        rows: 40,
        cols: 120,
    };
    let terminal_input = |run: u64, text: &str| EntryBody::Input {
        input: run,
        text: text.into(),
        tty: Some(size),
    };
    let transcript = [
        entry(1, terminal_input(1, "vi")),
        entry(2, EntryBody::RunStarted { input: 1 }),
        entry(3, terminal_input(2, "top")),
    ];
    let mut core = RunCore::from_transcript(&transcript, 7);
    assert_eq!(core.queue().next().and_then(|q| q.tty), Some(size));
    let actions = core.kernel_hello(5, &BTreeMap::new(), 0);
    assert_eq!(
        actions[0],
        Action::Kernel(ToKernel::Start {
            job: "r1".into(),
            command: "vi".into(),
            stdin_of: None,
            tty: Some(size),
        })
    );
}

#[test]
fn a_start_stored_but_never_handed_is_handed_on_reconnect() {
    let transcript = [
        entry(1, input(1, "echo once")),
        entry(2, EntryBody::RunStarted { input: 1 }),
    ];
    let mut core = RunCore::from_transcript(&transcript, 7);
    let actions = core.kernel_hello(5, &BTreeMap::new(), 0);
    assert_eq!(
        actions[0],
        Action::Kernel(ToKernel::Start {
            job: "r1".into(),
            command: "echo once".into(),
            stdin_of: None,
            tty: None,
        })
    );
}

#[test]
fn withdrawn_input_never_starts_and_is_not_work() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    core.queued(1, ("echo a".into(), None), 0);
    assert!(core.check_withdraw(1).is_ok());
    core.withdrawn(1);
    assert!(core.work().is_empty());
    assert_eq!(core.next_start(0), None);
    assert_eq!(
        core.check_withdraw(1).unwrap_err().to_string(),
        "run 1 is already withdrawn"
    );
    core.queued(2, ("sleep 9".into(), None), 0);
    assert_eq!(core.next_start(0), Some(2));
    core.run_start_stored(2);
    assert_eq!(
        core.check_withdraw(2).unwrap_err().to_string(),
        "run 2 is not queued: it has started"
    );
    let (cancelled, bash, actions) = core.cancel();
    assert_eq!((cancelled, bash), (Some(2), Vec::new()));
    assert_eq!(
        actions,
        vec![Action::Kernel(ToKernel::Cancel { job: "r2".into() })]
    );
}

/// The run gate on a fake clock: a quiesced idle worker starts nothing
/// until the gate's hold has passed.
#[test]
fn a_quiesced_gate_holds_runs_until_its_hold_passes() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    let t0 = 1_000_000_000u64;
    assert_eq!(core.quiesce(t0), QuiesceAnswer::Quiesced);
    core.queued(1, ("echo late".into(), None), 0);
    assert_eq!(core.next_start(t0 + 1_000), None, "the gate is closed");
    // Closed through the hold's last millisecond, open just after it.
    let hold_us = TM.supervisor.quiesce_hold * 1000;
    core.tick(t0 + hold_us);
    assert_eq!(core.next_start(t0 + hold_us), None);
    core.tick(t0 + hold_us + 1_000);
    assert_eq!(core.next_start(t0 + hold_us + 1_000), Some(1));
}

/// The core says when it next needs time: an open gate needs none, a
/// quiesced one the instant it reopens, and the run waits until then.
#[test]
fn a_quiesced_core_asks_for_time_exactly_when_its_gate_reopens() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    assert_eq!(core.poll_timeout(), None, "an open gate waits for nothing");
    let t0 = 1_000_000_000u64;
    assert_eq!(core.quiesce(t0), QuiesceAnswer::Quiesced);
    core.queued(1, ("echo late".into(), None), 0);
    let reopens = core.poll_timeout().expect("a quiesced gate needs time");
    assert_eq!(reopens, t0 + (TM.supervisor.quiesce_hold + 1) * 1000);
    // Nothing happens before that instant, however the clock is read.
    for before in [t0, t0 + 1_000, reopens - 1_000, reopens - 1] {
        core.tick(before);
        assert_eq!(core.next_start(before), None, "still held at {before}");
        assert_eq!(core.poll_timeout(), Some(reopens));
    }
    core.tick(reopens);
    assert_eq!(core.next_start(reopens), Some(1), "open at its deadline");
    assert_eq!(core.poll_timeout(), None);
}

#[test]
fn user_bash_output_is_stored_and_shown_as_its_exact_bytes_under_its_number() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    let number = core.take_input_number();
    core.bash("cat blob", (None, None), (3, 0), number);
    let bytes = [0xff, 0x00, 0xc3];
    let job = format!("b{number}-7-1");
    let actions = core.output(&job, Stream::Stdout, 8, bytes.to_vec().into());
    assert_eq!(
        actions,
        vec![
            Action::Store(EntryBody::Output {
                input: None,
                stream: Stream::Stdout,
                data: bytes.to_vec().into(),
                spool_end: Some(8),
                bash: Some(number),
            }),
            Action::Client(
                3,
                Response::OutputAt {
                    stream: Stream::Stdout,
                    data: bytes.to_vec().into(),
                    end: 8,
                }
            ),
        ]
    );
    assert_eq!(core.take_input_number(), number + 1, "inputs share numbers");
}

/// Cancel by number reaches what `cancel` cannot: a running user bash
/// (also one an earlier worker started), and it withdraws a queued run.
#[test]
fn an_input_is_cancelled_by_its_number_whether_a_run_or_a_user_bash() {
    let cancel =
        |job: &str| InputCancel::Signal(vec![Action::Kernel(ToKernel::Cancel { job: job.into() })]);
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    let number = core.take_input_number();
    core.bash("sleep 30", (None, None), (3, 0), number);
    let (run, bash, actions) = core.cancel();
    assert_eq!(
        (run, bash),
        (None, vec![number]),
        "cancel reaches user bash"
    );
    assert_eq!(
        actions,
        vec![Action::Kernel(ToKernel::Cancel {
            job: format!("b{number}-7-1")
        })]
    );
    assert_eq!(core.bash_list()[0].text, "sleep 30");
    assert_eq!(
        core.hang_up(number),
        vec![Action::Kernel(ToKernel::HangUp {
            job: format!("b{number}-7-1")
        })]
    );
    assert_eq!(
        core.cancel_input(number).ok(),
        Some(cancel(&format!("b{number}-7-1")))
    );
    core.queued(2, ("sleep 9".into(), None), 0);
    core.queued(3, ("echo later".into(), None), 0);
    assert_eq!(core.next_start(0), Some(2));
    core.run_start_stored(2);
    assert_eq!(core.cancel_input(2).ok(), Some(cancel("r2")));
    assert_eq!(core.cancel_input(3).ok(), Some(InputCancel::Withdraw));
    core.ended(&format!("b{number}-7-1"), Some(&end(130)));
    assert!(!core.bash_runs(number));
    assert_eq!(
        core.hang_up(number),
        Vec::new(),
        "an ended bash is not hung up"
    );
    assert_eq!(core.bash_list(), Vec::new());
    assert_eq!(
        core.cancel_input(number).unwrap_err().to_string(),
        format!("input {number} is neither running nor queued: it has ended")
    );
    assert_eq!(
        core.cancel_input(9).unwrap_err().to_string(),
        "the session has no input 9"
    );
    // A user bash an earlier worker started is followed, and reached.
    let stored = [entry(
        1,
        EntryBody::Bash {
            command: "sleep 30".into(),
            bash: Some(1),
        },
    )];
    let mut next = RunCore::from_transcript(&stored, 8);
    let jobs = BTreeMap::from([("b1-7-1".to_string(), JobState::Running)]);
    next.kernel_hello(5, &jobs, 0);
    assert_eq!(next.cancel_input(1).ok(), Some(cancel("b1-7-1")));
}

#[test]
fn background_jobs_are_work_and_the_last_ones_end_is_noticed() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 2);
    assert!(core.work().contains(WorkKind::BackgroundJob));
    assert!(core.background_jobs(1).is_empty());
    let last = core.background_jobs(0);
    assert_eq!(stores(&last).len(), 1);
    assert!(core.work().is_empty());
}

#[test]
fn user_bash_outlives_its_worker_and_one_that_never_ran_is_ended_once() {
    let bash = |number: u64, command: &str| EntryBody::Bash {
        command: command.into(),
        bash: Some(number),
    };
    let stored = [
        entry(1, bash(1, "sleep 5; echo late")),
        entry(
            2,
            EntryBody::Output {
                input: None,
                stream: Stream::Stdout,
                data: b"early\n".to_vec().into(),
                spool_end: Some(40),
                bash: Some(1),
            },
        ),
        entry(3, bash(2, "never handed over")),
    ];
    let mut core = RunCore::from_transcript(&stored, 8);
    let jobs = BTreeMap::from([("b1-7-1".to_string(), JobState::Running)]);
    let actions = core.kernel_hello(5, &jobs, 0);
    assert!(
        actions.contains(&Action::Kernel(ToKernel::Follow {
            job: "b1-7-1".into(),
            from: 40
        })),
        "bash 1 is followed from where its stored output ends: {actions:#?}"
    );
    assert!(!actions
        .iter()
        .any(|a| matches!(a, Action::Kernel(ToKernel::Forget { job }) if job == "b1-7-1")));
    assert!(stores(&actions).contains(&&EntryBody::BashFinished {
        status: 255,
        bash: Some(2),
        signal: None,
        cancelled: false,
        lost_output: None,
    }));
    assert!(core.work().contains(WorkKind::UserBash));
    let output = core.output("b1-7-1", Stream::Stdout, 50, b"late\n".to_vec().into());
    assert_eq!(output.len(), 1, "stored, shown to no client: {output:#?}");
    let ended = core.ended("b1-7-1", Some(&end(0)));
    assert_eq!(
        stores(&ended),
        vec![&EntryBody::BashFinished {
            status: 0,
            bash: Some(1),
            signal: None,
            cancelled: false,
            lost_output: None,
        }]
    );
}

/// A user bash told ended and settled leaves no work behind: a client that
/// got its answer can remove the session at once. One told ended while a
/// child still holds its output open is an unsettled child until settled.
#[test]
fn a_bash_told_settled_at_its_end_leaves_no_unsettled_child() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    let number = core.take_input_number();
    core.bash("true", (None, None), (3, 0), number);
    let job = format!("b{number}-7-1");
    let ended = core.ended(&job, Some(&end(0)));
    assert!(
        ended.contains(&Action::Kernel(ToKernel::Forget { job: job.clone() })),
        "{ended:#?}"
    );
    assert!(core.work().is_empty(), "{:?}", core.work());
    assert!(core.settled(&job).is_empty(), "forgotten once");

    let number = core.take_input_number();
    core.bash("sleep 9 &", (None, None), (3, 0), number);
    let job = format!("b{number}-7-2");
    let open = JobEnd {
        settled: false,
        ..end(0)
    };
    let ended = core.ended(&job, Some(&open));
    assert!(!ended
        .iter()
        .any(|a| matches!(a, Action::Kernel(ToKernel::Forget { .. }))));
    assert_eq!(
        core.work(),
        WorkSet::EMPTY.with(WorkKind::UnsettledChild),
        "a child holds its output open"
    );
    assert_eq!(
        core.settled(&job),
        vec![Action::Kernel(ToKernel::Forget { job })]
    );
    assert!(core.work().is_empty());
}

/// A user bash the kernel says ended with no end (it never had the job, or
/// lost it) tells its client why with its 255, and stores why before the
/// end, both retried until stored (a full disk must not leave a bare 255).
#[test]
fn a_bash_ended_without_an_end_tells_its_client_why_and_keeps_it_as_surely_as_the_end() {
    let mut core = RunCore::from_transcript(&[], 7);
    core.kernel_hello(5, &BTreeMap::new(), 0);
    let number = core.take_input_number();
    core.bash("true", (None, None), (3, 0), number);
    let why = crate::session::notices::bash_cut_short_text(number);
    let ended = core.ended(&format!("b{number}-7-1"), None);
    let kept: Vec<&EntryBody> = ended
        .iter()
        .filter_map(|a| match a {
            Action::StoreUntilStored(body) => Some(body),
            _ => None,
        })
        .collect();
    assert_eq!(
        kept,
        vec![
            &crate::session::notices::bash_cut_short(number),
            &EntryBody::BashFinished {
                status: 255,
                bash: Some(number),
                signal: None,
                cancelled: false,
                lost_output: None,
            }
        ],
        "{ended:#?}"
    );
    assert!(
        ended.contains(&Action::Client(
            3,
            Response::Exit {
                status: 255,
                lost: None,
                cut_short: Some(why),
            }
        )),
        "{ended:#?}"
    );
}

/// The same for a run: its waiters hear why, and the notice is kept as
/// surely as the interruption.
#[test]
fn a_run_ended_without_an_end_tells_its_waiters_why_and_keeps_it() {
    let transcript = [
        entry(1, input(1, "sleep 9")),
        entry(2, EntryBody::RunStarted { input: 1 }),
    ];
    let mut core = RunCore::from_transcript(&transcript, 7);
    let jobs = BTreeMap::from([("r1".to_string(), JobState::Lost)]);
    core.kernel_hello(5, &jobs, 0);
    let ended = core.ended("r1", None);
    let exit = ended.iter().find_map(|a| match a {
        Action::EndWaiters(
            1,
            Response::Exit {
                status, cut_short, ..
            },
        ) => Some((*status, cut_short.clone())),
        _ => None,
    });
    let (status, why) = exit.expect("the waiters hear the end");
    assert_eq!(status, 255);
    let why = why.expect("and why");
    assert!(
        ended.contains(&Action::StoreUntilStored(EntryBody::Notice {
            text: why,
            restore: None,
            restore_id: None,
        })),
        "{ended:#?}"
    );
    assert!(
        !ended.iter().any(|a| matches!(a, Action::Store(_))),
        "{ended:#?}"
    );
}

/// A shell run's marks, found by a worker that took the run over from
/// another, make its typed commands' entries; the same bytes in another
/// terminal run are only output.
#[test]
fn only_a_shell_runs_marks_make_typed_command_entries() {
    let marked = b"\x1b]633;E;ls\x07\x1b]133;C\x07a b\r\n\x1b]133;D;0\x07$ ";
    for (text, shell) in [
        (crate::protocol::tty::SHELL_COMMAND, true),
        ("bash -i", false),
    ] {
        let transcript = [
            entry(
                1,
                EntryBody::Input {
                    input: 1,
                    text: text.into(),
                    tty: Some(WindowSize::DEFAULT),
                },
            ),
            entry(2, EntryBody::RunStarted { input: 1 }),
        ];
        let mut core = RunCore::from_transcript(&transcript, 7);
        let jobs = BTreeMap::from([("r1".to_string(), JobState::Running)]);
        core.kernel_hello(99, &jobs, 0);
        let out = core.output("r1", Stream::Stdout, 40, marked.to_vec().into());
        let commands: Vec<_> = stores(&out)
            .into_iter()
            .filter_map(|body| match body {
                EntryBody::ShellCommand {
                    input: 1,
                    text,
                    status,
                } => Some((text.as_str(), *status)),
                _ => None,
            })
            .collect();
        if shell {
            assert_eq!(commands, [("ls", None), ("ls", Some(0))]);
        } else {
            assert!(commands.is_empty(), "{commands:?}");
            assert_eq!(stores(&out).len(), 1, "its output whole");
        }
    }
}
