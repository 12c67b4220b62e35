//! A slot's worker lifecycle without I/O: launch (after dealing with an
//! earlier worker), watch, failure attribution, hang, restart after the
//! pause or give-up. `handle(slot, event, now)` changes the slot's books
//! and returns the actions the driver (`launch::drive`) performs; the
//! driver feeds back what they found as the next event. Nothing here reads
//! a clock, touches a process or the disk: the whole sequence runs in
//! tests with a fake clock (quinn-proto's shape). The decisions themselves
//! are calls into `laws` (`survivor_step`, the restart budget).

use super::slots::{Slot, SlotState};
use crate::laws::adoption::{survivor_step, LaunchStep, ProcessIdentity};
use crate::laws::restart::RestartVerdict;

/// Why the host could not start a worker: the host's own line, which
/// the failure is told with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StartFailed(pub String);

impl From<&str> for StartFailed {
    fn from(why: &str) -> Self {
        StartFailed(why.to_string())
    }
}

/// What the driver saw or was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Launch the session's worker (a request, a revival, `restart`).
    Launch,
    /// What the host found of an earlier worker: `earlier` when the launch
    /// began, `holder` the worker holding the session now (after a stop
    /// was asked, if `stop_sent`).
    Survivor {
        /// The earlier worker, as found when the launch began.
        earlier: Option<ProcessIdentity>,
        /// The worker holding the session now.
        holder: Option<ProcessIdentity>,
        /// Whether the earlier worker was asked to stop.
        stop_sent: bool,
    },
    /// The host started the worker, or could not (why).
    Started(Result<(), StartFailed>),
    /// The control connection of launch `generation` ended (or never came
    /// up), and why as the host tells it.
    Ended {
        /// The launch whose worker it was.
        generation: u64,
        /// Why, in words.
        why: String,
    },
    /// The worker of launch `generation` showed no sign of life for
    /// `silent_ms` (where the supervisor is its watchdog).
    Hung {
        /// The launch whose worker it is.
        generation: u64,
        /// How long it was silent.
        silent_ms: u64,
    },
    /// A restart's pause is over.
    PauseOver,
}

/// What the driver is to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Check the session's files (a damaged session is marked so and not
    /// launched), then look for an earlier worker: `Event::Survivor` with
    /// `earlier` and `holder` both what was found, `stop_sent` false.
    FindSurvivor,
    /// Stop the earlier worker (it keeps its queue and runs), then look
    /// again: `Event::Survivor` with `stop_sent`.
    StopEarlier(ProcessIdentity),
    /// Start the worker on the host: `Event::Started`.
    Start,
    /// Hold a control connection to the worker of launch `generation`:
    /// `Event::Ended` or `Event::Hung` when it ends.
    Watch {
        /// The launch to watch.
        generation: u64,
    },
    /// End the hung worker by force and wait until it is gone.
    Kill(ProcessIdentity),
    /// Tell the failure (event stream, log).
    Failed {
        /// Why, in words.
        why: String,
        /// The restart budget's verdict.
        verdict: RestartVerdict,
    },
    /// The slot's state changed (to `Restarting` or `GivenUp`): tell
    /// those who wait on it and the event stream.
    StateChanged,
    /// Wait `ms`, then `Event::PauseOver` (unless the supervisor is
    /// shutting down).
    Pause {
        /// The pause.
        ms: u64,
    },
    /// Record the give-up on disk and in the transcript.
    GiveUp {
        /// Failures counted in the window, the last one included.
        failures_in_window: u32,
    },
}

/// Take `event` at `now_ms` (monotonic): the slot's books change, and the
/// actions are returned.
pub fn handle(slot: &mut Slot, event: Event, now_ms: u64) -> Vec<Action> {
    match event {
        Event::Launch | Event::PauseOver if slot.state == SlotState::Removing => Vec::new(),
        Event::Launch | Event::PauseOver => vec![Action::FindSurvivor],
        Event::Survivor {
            earlier,
            holder,
            stop_sent,
        } => match survivor_step(earlier, holder, stop_sent) {
            LaunchStep::StopEarlier => {
                vec![Action::StopEarlier(
                    earlier.expect("survivor_step stops only an earlier worker"),
                )]
            }
            LaunchStep::CountFailure => {
                failure(slot, "its earlier worker survived being stopped", now_ms)
            }
            // A restart whose pause ran out during a removal comes here:
            // a session being removed is never launched again.
            LaunchStep::Launch if slot.state == SlotState::Removing => Vec::new(),
            LaunchStep::Launch => {
                slot.state = SlotState::Starting;
                slot.generation += 1;
                // A launched session is in use now: its idle time starts
                // here.
                slot.last_active_ms = slot.last_active_ms.max(now_ms);
                vec![Action::Start]
            }
        },
        Event::Started(Ok(())) => vec![Action::Watch {
            generation: slot.generation,
        }],
        Event::Started(Err(why)) => failure(slot, &why.0, now_ms),
        Event::Ended { generation, .. } | Event::Hung { generation, .. }
            if generation != slot.generation =>
        {
            Vec::new()
        }
        Event::Ended { why, .. } => failure(slot, &why, now_ms),
        Event::Hung { silent_ms, .. } => {
            let mut actions = match &slot.state {
                SlotState::Running { identity, .. } => vec![Action::Kill(*identity)],
                _ => Vec::new(),
            };
            let why =
                format!("its worker hung (no sign of life for {silent_ms} ms) and was killed");
            actions.extend(failure(slot, &why, now_ms));
            actions
        }
    }
}

/// The worker failed: count it in the restart budget and restart after
/// the pause or give up, as the budget says. A session given up, damaged
/// or being removed counts nothing more.
fn failure(slot: &mut Slot, why: &str, now_ms: u64) -> Vec<Action> {
    if matches!(
        slot.state,
        SlotState::GivenUp | SlotState::Damaged { .. } | SlotState::Removing
    ) {
        return Vec::new();
    }
    let verdict = slot.budget.record_failure(now_ms);
    slot.work = Default::default();
    let (state, then) = match verdict {
        RestartVerdict::Restart { pause_ms, .. } => {
            (SlotState::Restarting, Action::Pause { ms: pause_ms })
        }
        RestartVerdict::GiveUp { failures_in_window } => {
            (SlotState::GivenUp, Action::GiveUp { failures_in_window })
        }
    };
    slot.state = state;
    let failed = Action::Failed {
        why: why.to_string(),
        verdict,
    };
    vec![failed, Action::StateChanged, then]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::laws::timing::TM;
    use crate::session::store::SessionMeta;

    fn slot() -> Slot {
        let meta = SessionMeta {
            id: "1a2b3c4d".into(),
            name: "s".into(),
            cwd: "/".into(),
            created_ms: 0,
            engine: "shell".into(),
            limits: Default::default(),
        };
        Slot::new(meta, SlotState::Saved)
    }

    const NO_SURVIVOR: Event = Event::Survivor {
        earlier: None,
        holder: None,
        stop_sent: false,
    };

    fn worker(pid: u32) -> ProcessIdentity {
        ProcessIdentity {
            pid,
            start_time: 1000 + u64::from(pid),
        }
    }

    /// A worker that fails at once, every time: every launch, failure and
    /// pause, the clock moved by each pause, until the slot rests.
    fn crash_loop(slot: &mut Slot, mut now: u64) -> (Vec<Action>, u64) {
        let mut all = Vec::new();
        let mut next = Some(Event::Launch);
        while let Some(event) = next.take() {
            let actions = handle(slot, event, now);
            for action in &actions {
                next = match action {
                    Action::FindSurvivor => Some(NO_SURVIVOR),
                    Action::Start => Some(Event::Started(Ok(()))),
                    Action::Watch { generation } => Some(Event::Ended {
                        generation: *generation,
                        why: "its worker ended".into(),
                    }),
                    Action::Pause { ms } => {
                        now += ms;
                        Some(Event::PauseOver)
                    }
                    _ => next.take(),
                };
            }
            all.extend(actions);
        }
        (all, now)
    }

    #[test]
    fn a_crash_looping_worker_is_restarted_after_doubling_pauses_and_given_up_at_the_sixth_failure()
    {
        let mut slot = slot();
        let (actions, now) = crash_loop(&mut slot, 5_000);
        let pauses: Vec<u64> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Pause { ms } => Some(*ms),
                _ => None,
            })
            .collect();
        assert_eq!(pauses, [250, 500, 1_000, 2_000, 4_000]);
        let starts = actions.iter().filter(|a| **a == Action::Start).count();
        assert_eq!(starts, 6, "{actions:#?}");
        assert_eq!(
            actions.last(),
            Some(&Action::GiveUp {
                failures_in_window: 6
            })
        );
        assert_eq!(slot.state, SlotState::GivenUp);
        assert_eq!(now, 5_000 + 7_750);
        // Given up, nothing more is counted or launched by a late end.
        let late = Event::Ended {
            generation: slot.generation,
            why: "late".into(),
        };
        assert!(handle(&mut slot, late, now + 1).is_empty());
    }

    #[test]
    fn failures_spread_wider_than_the_restart_window_never_give_up() {
        let mut slot = slot();
        let mut now = 0;
        for _ in 0..20 {
            handle(&mut slot, Event::Launch, now);
            handle(&mut slot, NO_SURVIVOR, now);
            let generation = slot.generation;
            let ended = Event::Ended {
                generation,
                why: "crashed".into(),
            };
            let actions = handle(&mut slot, ended, now);
            assert!(
                matches!(actions.last(), Some(Action::Pause { .. })),
                "at {now}: {actions:?}"
            );
            now += TM.supervisor.restart_window / 5 + 1;
        }
        assert_eq!(slot.state, SlotState::Restarting);
    }

    #[test]
    fn a_surviving_earlier_worker_is_stopped_first_and_one_that_outlives_its_stop_is_a_failure() {
        let mut slot = slot();
        let earlier = Some(worker(42));
        assert_eq!(handle(&mut slot, Event::Launch, 0), [Action::FindSurvivor]);
        let found = Event::Survivor {
            earlier,
            holder: earlier,
            stop_sent: false,
        };
        assert_eq!(
            handle(&mut slot, found, 1),
            [Action::StopEarlier(worker(42))]
        );
        // It outlived its stop: one failure, nothing launched beside it.
        let outlived = Event::Survivor {
            earlier,
            holder: earlier,
            stop_sent: true,
        };
        let actions = handle(&mut slot, outlived, 2);
        assert!(!actions.contains(&Action::Start), "{actions:?}");
        assert!(
            matches!(&actions[0], Action::Failed { why, .. } if why == "its earlier worker survived being stopped"),
            "{actions:?}"
        );
        assert_eq!(slot.budget.failures_in_window(2), 1);
        // After the pause it is gone (or its pid is another process's):
        // the launch goes ahead.
        for holder in [None, Some(worker(43))] {
            let gone = Event::Survivor {
                earlier,
                holder,
                stop_sent: true,
            };
            assert_eq!(handle(&mut slot, gone, 300), [Action::Start]);
        }
    }

    #[test]
    fn a_hung_worker_is_killed_then_counted_and_a_stale_watchers_news_is_ignored() {
        let mut slot = slot();
        handle(&mut slot, Event::Launch, 0);
        handle(&mut slot, NO_SURVIVOR, 0);
        let generation = slot.generation;
        assert_eq!(
            handle(&mut slot, Event::Started(Ok(())), 1),
            [Action::Watch { generation }]
        );
        slot.state = SlotState::Running {
            identity: worker(7),
            build: "b".into(),
        };
        let stale = Event::Hung {
            generation: generation - 1,
            silent_ms: 30_000,
        };
        assert!(handle(&mut slot, stale, 2).is_empty());
        let hung = Event::Hung {
            generation,
            silent_ms: 30_000,
        };
        let actions = handle(&mut slot, hung, 30_001);
        assert_eq!(actions[0], Action::Kill(worker(7)));
        assert!(
            matches!(&actions[1], Action::Failed { why, .. } if why.contains("no sign of life for 30000 ms")),
            "{actions:?}"
        );
        assert_eq!(actions[2], Action::StateChanged);
        assert_eq!(slot.state, SlotState::Restarting);
    }

    #[test]
    fn a_session_being_removed_is_never_launched_and_counts_no_failure() {
        let mut slot = slot();
        slot.state = SlotState::Removing;
        assert!(handle(&mut slot, Event::Launch, 0).is_empty());
        assert!(handle(&mut slot, Event::PauseOver, 0).is_empty());
        assert!(handle(&mut slot, NO_SURVIVOR, 0).is_empty());
        let failed = Event::Started(Err("no".into()));
        assert!(handle(&mut slot, failed, 0).is_empty());
        assert_eq!(slot.budget.failures_in_window(0), 0);
    }
}
