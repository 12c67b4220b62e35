//! The spare session under systemd: its worker and kernel units are
//! started ahead under its id, `new` claims them without a unit start, and
//! until then it is nobody's session.

use std::time::Duration;

use super::{kernel, skip, worker};
use crate::support::installed::{self, Installed};
use crate::support::wait_until;

/// The spare whose worker and kernel units are both active, if one is:
/// its id (its directory has `spare.json` and no `meta.json`).
fn ready_spare(eukhe: &Installed) -> Option<String> {
    let sessions = format!("/home/{}/.local/state/eukhe/sessions", installed::USER);
    let spares = eukhe.root(&format!(
        "for d in {sessions}/*; do [ -e \"$d/spare.json\" ] && [ ! -e \"$d/meta.json\" ] && basename \"$d\"; done; true"
    ));
    spares.lines().map(str::to_string).find(|id| {
        eukhe.unit(&worker(id), "ActiveState") == "active"
            && eukhe.unit(&kernel(id), "ActiveState") == "active"
    })
}

/// Wait for a ready spare other than `not`: its id.
fn wait_for_spare(eukhe: &Installed, not: &[&str]) -> String {
    let mut found = None;
    wait_until(Duration::from_secs(20), "a spare session is ready", || {
        found = ready_spare(eukhe).filter(|id| !not.contains(&id.as_str()));
        found.is_some()
    });
    found.unwrap()
}

/// Each unit's invocation: a new one at every start of the unit.
fn invocations(eukhe: &Installed, id: &str) -> [String; 2] {
    [worker(id), kernel(id)].map(|unit| eukhe.unit(&unit, "InvocationID"))
}

/// Names of the active units of workers and kernels.
fn active_units(eukhe: &Installed) -> String {
    eukhe.user_ok(
        "systemctl --user list-units --state=active --plain --no-legend 'eukhe@*' 'eukhe-kernel@*'",
    )
}

// A systemd `new` claims the spare whose units were started ahead: the
// session's first command runs in them, with no unit start. Until then the
// spare is no session: not listed, counted or reachable, and its worker's
// status says what it is. A supervisor that dies leaves it; the next one
// keeps it a spare. `shutdown --force` stops its units too.
#[test]
fn a_systemd_new_claims_the_spare_started_ahead_and_a_spare_is_no_session() {
    if skip() {
        return;
    }
    let eukhe = Installed::boot("spare", &[]);
    eukhe.eukhe("status");
    let spare = wait_for_spare(&eukhe, &[]);
    assert_eq!(eukhe.sessions().as_array().unwrap().len(), 0, "listed");
    let status: serde_json::Value = serde_json::from_str(&eukhe.eukhe("status --json")).unwrap();
    assert_eq!(status["sessions"], 0, "a spare was counted: {status}");
    let refused = eukhe.user(&format!("eukhe bash {spare} -- true"));
    assert!(!refused.status.success(), "a spare was reachable by its id");
    let status_text = eukhe.unit(&worker(&spare), "StatusText");
    assert!(status_text.contains("spare"), "{status_text}");

    let started = invocations(&eukhe, &spare);
    let id = eukhe.eukhe("new --name first").trim().to_string();
    assert_eq!(id, spare, "new did not claim the ready spare");
    assert_eq!(eukhe.eukhe("bash first -- echo hi"), "hi\n");
    assert_eq!(
        invocations(&eukhe, &id),
        started,
        "a unit of the claimed spare was started again"
    );
    assert_eq!(
        eukhe.unit(&worker(&id), "StatusText"),
        format!("serving session {id}")
    );
    let names: Vec<String> = eukhe
        .sessions()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["first"]);

    // A supervisor that dies leaves its spare running; the next one adopts
    // it and `new` claims it.
    let next = wait_for_spare(&eukhe, &[&id]);
    let next_started = invocations(&eukhe, &next);
    let supervisor = eukhe.main_pid("eukhe.service");
    eukhe.kill("KILL", supervisor);
    wait_until(Duration::from_secs(10), "the supervisor is dead", || {
        eukhe.unit("eukhe.service", "ActiveState") != "active"
    });
    assert_eq!(eukhe.sessions().as_array().unwrap().len(), 1);
    let second = eukhe.eukhe("new").trim().to_string();
    assert_eq!(second, next, "the next supervisor did not claim the spare");
    assert_eq!(invocations(&eukhe, &second), next_started);
    assert_eq!(eukhe.eukhe(&format!("bash {second} -- echo up")), "up\n");

    // `shutdown --force` stops every worker and kernel unit, the spare's too.
    let third = wait_for_spare(&eukhe, &[&id, &second]);
    eukhe.eukhe("shutdown --force");
    wait_until(
        Duration::from_secs(15),
        "no worker or kernel unit runs",
        || active_units(&eukhe).trim().is_empty(),
    );
    assert_eq!(eukhe.unit(&worker(&third), "ActiveState"), "inactive");
}
