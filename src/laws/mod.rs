//! The law core: every decision the specification calls law-critical, as a
//! pure function of its inputs. No I/O, no clock reads, no globals: time
//! arrives as monotonic (or, for busy evidence, wall-clock) milliseconds.
//!
//! Each module is checked against its Bend model in `bend/` by the bridge
//! (`tests/bridge.rs`); `LAWS.bend` states the laws and `PROOF.bend` checks
//! them exhaustively over bounded domains.
//!
//! | module | decides | model |
//! |---|---|---|
//! | [`restart`] | restart pause or give-up | `bend/supervise.bend` |
//! | [`timing`] | every timeout, `timeouts_ordered` | `bend/supervise.bend` (`Tm`) |
//! | [`work`] | the work set, `session_work` | `bend/revive.bend` |
//! | [`revival`] | busy refresh, `busy_evidence_fresh`, `revival_veto` | `bend/revive.bend` |
//! | [`orphan`] | the lost-supervisor decision | `bend/orphan.bend` |
//! | [`idle_shutdown`] | quiesce answers and the shutdown commit | `bend/launcher.bend` |
//! | [`idle_stop`] | when an idle session's worker and kernel stop (a setting, not a law of the specification) | none |
//! | [`adoption`] | adopt or replace live workers, survivor handling | `bend/launcher.bend` |
//! | [`notice`] | restore notices and what a view shows | `bend/notice.bend` |
//! | [`events`] | the event stream's bounds: a subscriber's buffer, the output-line rate (a setting, not a law of the specification) | none |
//! | [`limits`] | a session's resource limits: their text, the controllers they need, the process backend's refusal, an OOM kill's notice (a rule of eukhe's own) | none |
//! | [`direct`] | whether a worker serves a client that came to it directly, or leaves it to the supervisor (a shortcut that keeps the replacement law's verdicts, not a law of the specification) | none |
//! | [`client_left`] | whether the end of an `eukhe bash` client's connection hangs up its command (a setting of the shell, not a law of the specification) | none |
//! | [`removal`] | `rm`: remove, cancel and remove, or refuse a busy session; a removal is final | none |
//! | [`replace`] | version rank, keep-or-replace verdict | `bend/replace.bend` |
//! | [`runs`] | a run's lifecycle: reconcile on (re)connect, next run, withdraw, kernel accept, end record | `bend/runs.bend` |
//! | [`waiting`] | whether a terminal run waits for input, and when to look again (a rule of eukhe's own, not a law of the specification) | none |

pub mod adoption;
pub mod client_left;
pub mod direct;
pub mod events;
pub mod idle_shutdown;
pub mod idle_stop;
pub mod limits;
pub mod notice;
pub mod orphan;
pub mod removal;
pub mod replace;
pub mod restart;
pub mod revival;
pub mod runs;
pub mod timing;
pub mod waiting;
pub mod work;
