//! The parts of the service manager's D-Bus API eukhe uses, as typed
//! proxies (`org.freedesktop.systemd1`, see `org.freedesktop.systemd1(5)`):
//! the method and property names and their signatures are checked here
//! once, not spelled at each call.

use zbus::zvariant::OwnedObjectPath;

/// One unit as `ListUnitsByPatterns` lists it: name, description, load
/// state, active state, sub state, followed unit, unit path, job id, job
/// type, job path.
pub type ListedUnit = (
    String,
    String,
    String,
    String,
    String,
    String,
    OwnedObjectPath,
    u32,
    String,
    OwnedObjectPath,
);

/// The manager object.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
pub trait Manager {
    /// Enqueue a start job; returns the job's path.
    fn start_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Enqueue a stop job; returns the job's path.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    /// Send `signal` to the unit's processes (`whom`: "main", "control",
    /// "all").
    fn kill_unit(&self, name: &str, whom: &str, signal: i32) -> zbus::Result<()>;

    /// Set `properties` of the unit (`runtime`: until the next reboot),
    /// as `systemctl set-property` does.
    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, zbus::zvariant::Value<'_>)],
    ) -> zbus::Result<()>;

    /// Forget the unit's failed state and its start-limit counter.
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    /// Loaded units in any of `states` whose names match any of
    /// `patterns`.
    fn list_units_by_patterns(
        &self,
        states: &[&str],
        patterns: &[&str],
    ) -> zbus::Result<Vec<ListedUnit>>;

    /// The unit's object path, loading the unit if needed.
    fn load_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;

    /// Ask for the manager's signals (`JobRemoved`, units'
    /// `PropertiesChanged`) on this connection.
    fn subscribe(&self) -> zbus::Result<()>;
}

/// A unit object (`LoadUnit`'s path).
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Unit {
    /// `active`, `activating`, `deactivating`, `inactive`, `failed`, ...
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;

    /// The unit type's own finer state (`running`, `dead`, ...).
    #[zbus(property)]
    fn sub_state(&self) -> zbus::Result<String>;
}

/// A service unit object (the same path as its `Unit`).
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Service {
    /// Why it last went down: `success`, `exit-code`, `signal`, `watchdog`, ...
    #[zbus(property)]
    fn result(&self) -> zbus::Result<String>;

    /// Its main process, 0 when there is none.
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;
}

/// A job object (`StartUnit`'s path); it leaves the bus when it is done.
#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Job",
    default_service = "org.freedesktop.systemd1"
)]
pub trait Job {
    /// `waiting` or `running`.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
}
