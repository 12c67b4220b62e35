//! Worker units through the user manager's D-Bus API, through the typed
//! proxies of `host::systemd1`: `StartUnit`, `StopUnit`, `KillUnit`,
//! `ListUnitsByPatterns`, unit properties, and the manager's signals
//! (`PropertiesChanged` on units, `JobRemoved`), never by running
//! `systemctl`.
//!
//! The connection is the user bus (`$DBUS_SESSION_BUS_ADDRESS`, else
//! `$XDG_RUNTIME_DIR/bus`: dbus-user-session or dbus-broker). The
//! manager's private socket is not used: it names itself with a
//! well-known name where D-Bus clients expect a unique one.

use super::HostError;
use std::time::Duration;

use crate::laws::timing::UNIT_WAKE_MS;

use futures_util::StreamExt as _;
use tokio::sync::watch;
use zbus::proxy::CacheProperties;
use zbus::zvariant::OwnedObjectPath;

use crate::laws::limits::ResourceLimits;

use super::systemd1::{JobProxy, ManagerProxy, ServiceProxy, UnitProxy};
pub use super::unit_state::UnitState;
use super::unit_state::{ActiveState, ServiceResult, SubState};

/// The manager's error for a unit it does not know.
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// A connection to this user's service manager.
#[derive(Clone)]
pub struct UserManager {
    connection: zbus::Connection,
    manager: ManagerProxy<'static>,
    /// Bumped at every unit or job signal: waiters re-read what they wait on.
    changes: watch::Receiver<u64>,
}

fn dbus_error(action: &str, unit: &str, source: zbus::Error) -> HostError {
    HostError::Manager {
        action: action.to_string(),
        unit: unit.to_string(),
        source: Box::new(source),
    }
}

impl UserManager {
    /// Connect, subscribe to the manager's signals and start relaying them.
    pub async fn connect() -> Result<UserManager, HostError> {
        let unreachable = |e| HostError::UserBus(Box::new(e));
        let connection = zbus::connection::Builder::session()
            .map_err(unreachable)?
            .build()
            .await
            .map_err(unreachable)?;
        let rule = "type='signal',path_namespace='/org/freedesktop/systemd1'";
        let mut messages = zbus::MessageStream::for_match_rule(rule, &connection, None)
            .await
            .map_err(|source| HostError::Signals {
                doing: "listening to",
                source: Box::new(source),
            })?;
        let (tell, changes) = watch::channel(0u64);
        // The relay ends with the last clone of the manager (the stream
        // holds the connection: it closes only then).
        tokio::task::spawn_local(async move {
            loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    () = tell.closed() => return,
                };
                let Some(Ok(message)) = message else { return };
                let relevant = matches!(
                    message.header().member().map(|m| m.as_str()),
                    Some("PropertiesChanged" | "JobRemoved" | "UnitRemoved")
                );
                if relevant {
                    tell.send_modify(|n| *n += 1);
                }
            }
        });
        let manager = ManagerProxy::builder(&connection)
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(unreachable)?;
        manager
            .subscribe()
            .await
            .map_err(|source| HostError::Signals {
                doing: "subscribing to",
                source: Box::new(source),
            })?;
        Ok(UserManager {
            connection,
            manager,
            changes,
        })
    }

    /// A proxy of the object at `path` (a unit's, a job's), reading its
    /// properties afresh at each call.
    async fn object<P>(&self, path: &OwnedObjectPath) -> zbus::Result<P>
    where
        P: From<zbus::Proxy<'static>> + zbus::proxy::Defaults,
    {
        zbus::proxy::Builder::<P>::new(&self.connection)
            .path(path.clone())?
            .cache_properties(CacheProperties::No)
            .build()
            .await
    }

    /// Start `unit` and wait, for at most `within`, until the manager is
    /// done with that start: the unit came up (for `Type=notify`, once it
    /// said READY=1) or failed to. A stop in progress is waited out first,
    /// so a unit still emptying its cgroup is started again, not reported
    /// down. Returns the unit's state once the start job is gone.
    pub async fn start_and_wait(
        &self,
        unit: &str,
        within: Duration,
    ) -> Result<UnitState, HostError> {
        let job = self
            .manager
            .start_unit(unit, "replace")
            .await
            .map_err(|e| dbus_error("cannot start", unit, e))?;
        let deadline = tokio::time::Instant::now() + within;
        let mut changes = self.changes.clone();
        loop {
            changes.borrow_and_update();
            // A finished job leaves the bus: reading it fails.
            let pending = match self.object::<JobProxy>(&job).await {
                Ok(job) => job.state().await.is_ok(),
                Err(_) => false,
            };
            if !pending || tokio::time::Instant::now() >= deadline {
                return self.state(unit).await;
            }
            let wake =
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(UNIT_WAKE_MS));
            let _ = tokio::time::timeout_at(wake, changes.changed()).await;
        }
    }

    /// Stop `unit` (its stop timeout bounds how long that takes).
    pub async fn stop(&self, unit: &str) -> Result<(), HostError> {
        match self.manager.stop_unit(unit, "replace").await {
            Ok(_) => Ok(()),
            Err(zbus::Error::MethodError(name, _, _)) if name.as_str() == NO_SUCH_UNIT => Ok(()),
            Err(e) => Err(dbus_error("cannot stop", unit, e)),
        }
    }

    /// Send `signal` to every process of `unit` now (`KillUnit`): the kill
    /// route of a stop escalation, which must not wait out the unit's own
    /// stop timeout.
    pub async fn kill(&self, unit: &str, signal: i32) -> Result<(), HostError> {
        match self.manager.kill_unit(unit, "all", signal).await {
            Ok(()) => Ok(()),
            Err(zbus::Error::MethodError(name, _, _)) if name.as_str() == NO_SUCH_UNIT => Ok(()),
            Err(e) => Err(dbus_error("cannot kill", unit, e)),
        }
    }

    /// Set `limits` as properties of `unit` until the next reboot (its
    /// next start applies them; a running unit's cgroup takes them now).
    pub async fn set_limits(&self, unit: &str, limits: &ResourceLimits) -> Result<(), HostError> {
        use zbus::zvariant::Value;
        let mut properties: Vec<(&str, Value<'_>)> = Vec::new();
        if let Some(memory) = limits.memory_max {
            properties.push(("MemoryMax", Value::U64(memory.property())));
        }
        if let Some(percent) = limits.cpu_quota_percent {
            let usec = ResourceLimits::cpu_quota_usec(percent);
            properties.push(("CPUQuotaPerSecUSec", Value::U64(usec)));
        }
        if let Some(tasks) = limits.tasks_max {
            properties.push(("TasksMax", Value::U64(tasks.property())));
        }
        self.manager
            .set_unit_properties(unit, true, &properties)
            .await
            .map_err(|e| dbus_error("cannot set the resource limits of", unit, e))
    }

    /// Forget that `unit` failed (so a fresh start is not refused by a
    /// start limit the supervisor's own budget already covers).
    pub async fn reset_failed(&self, unit: &str) {
        let _ = self.manager.reset_failed_unit(unit).await;
    }

    /// The loaded units matching `pattern` that are active, activating or
    /// deactivating: `(unit name, its state)`.
    pub async fn live_units(&self, pattern: &str) -> Result<Vec<(String, UnitState)>, HostError> {
        let states = [
            ActiveState::Active,
            ActiveState::Activating,
            ActiveState::Deactivating,
            ActiveState::Reloading,
        ];
        let states = states.each_ref().map(ActiveState::word);
        let listed = self
            .manager
            .list_units_by_patterns(&states, &[pattern])
            .await
            .map_err(|e| dbus_error("cannot list", pattern, e))?;
        let mut live = Vec::with_capacity(listed.len());
        for (name, ..) in listed {
            let state = self.state(&name).await?;
            live.push((name, state));
        }
        Ok(live)
    }

    /// The state of `unit` (loading it if needed: an unknown instance of a
    /// template is simply inactive).
    pub async fn state(&self, unit: &str) -> Result<UnitState, HostError> {
        let path = self
            .manager
            .load_unit(unit)
            .await
            .map_err(|e| dbus_error("cannot load", unit, e))?;
        let read = |property: &str, e: zbus::Error| {
            dbus_error(&format!("cannot read {property} of"), unit, e)
        };
        let as_unit: UnitProxy = self.object(&path).await.map_err(|e| read("the unit", e))?;
        let service: ServiceProxy = self.object(&path).await.map_err(|e| read("the unit", e))?;
        let active = as_unit
            .active_state()
            .await
            .map_err(|e| read("ActiveState", e))?;
        let sub = as_unit.sub_state().await.map_err(|e| read("SubState", e))?;
        let result = service.result().await.map_err(|e| read("Result", e))?;
        Ok(UnitState {
            active: ActiveState::parse(&active),
            sub: SubState::parse(&sub),
            result: ServiceResult::parse(&result),
            main_pid: service.main_pid().await.map_err(|e| read("MainPID", e))?,
        })
    }

    /// Wait until `unit`'s state satisfies `done`, re-reading it at each
    /// signal from the manager (and at least every second), for at most
    /// `within`. Returns the last state read.
    pub async fn wait_for(
        &self,
        unit: &str,
        within: Duration,
        done: impl Fn(&UnitState) -> bool,
    ) -> Result<UnitState, HostError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut changes = self.changes.clone();
        loop {
            changes.borrow_and_update();
            let state = self.state(unit).await?;
            if done(&state) || tokio::time::Instant::now() >= deadline {
                return Ok(state);
            }
            let wake =
                deadline.min(tokio::time::Instant::now() + Duration::from_millis(UNIT_WAKE_MS));
            let _ = tokio::time::timeout_at(wake, changes.changed()).await;
        }
    }
}
