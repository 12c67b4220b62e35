//! `[limits]` in the settings file: the resource limits every new session
//! gets unless `eukhe new` (or MCP `new_session`) gives its own, read as
//! the options read them (`laws::limits`).
//!
//! ```toml
//! [limits]
//! memory_max = "2G"     # bytes, K/M/G/T (powers of 1024), or "infinity"
//! cpu_quota = "200%"    # percent of one CPU
//! tasks_max = 500       # a number, or "infinity"
//! ```

use serde::Deserialize;

use crate::laws::limits::{
    parse_cpu_quota, parse_memory_max, parse_tasks_max, LimitError, ResourceLimits,
};

/// The table as written: each value a string or a number.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    memory_max: Option<toml::Value>,
    cpu_quota: Option<toml::Value>,
    tasks_max: Option<toml::Value>,
}

/// A value as the option's text: strings as written, numbers in decimal.
fn text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        toml::Value::Integer(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// A refused value, named as the file names it.
fn in_file(key: &str, e: LimitError) -> String {
    format!("limits.{key} = {:?}: expected {}", e.value, e.accepted)
}

/// One value of the table, read by `parse`.
fn one<T, E: serde::de::Error>(
    key: &str,
    value: Option<toml::Value>,
    parse: fn(&str) -> Result<T, LimitError>,
) -> Result<Option<T>, E> {
    value
        .map(|v| parse(&text(&v)).map_err(|e| E::custom(in_file(key, e))))
        .transpose()
}

/// Read `[limits]`.
pub fn limits_setting<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ResourceLimits, D::Error> {
    let table = Table::deserialize(d)?;
    Ok(ResourceLimits {
        memory_max: one("memory_max", table.memory_max, parse_memory_max)?,
        cpu_quota_percent: one("cpu_quota", table.cpu_quota, parse_cpu_quota)?,
        tasks_max: one("tasks_max", table.tasks_max, parse_tasks_max)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::laws::limits::{Max, ResourceLimits};

    #[test]
    fn the_files_limits_are_the_defaults_of_new_sessions() {
        let config = Config::parse(
            "[limits]\nmemory_max = \"512M\"\ncpu_quota = \"150%\"\ntasks_max = 100\n",
        )
        .unwrap();
        assert_eq!(
            config.limits,
            ResourceLimits {
                memory_max: Some(Max::Value(512 << 20)),
                cpu_quota_percent: Some(150),
                tasks_max: Some(Max::Value(100)),
            }
        );
        let bytes = Config::parse("[limits]\nmemory_max = 4096\n").unwrap();
        assert_eq!(bytes.limits.memory_max, Some(Max::Value(4096)));
        assert_eq!(Config::parse("").unwrap().limits, ResourceLimits::default());
    }

    #[test]
    fn a_refused_limit_in_the_file_names_it_and_what_it_takes() {
        let err = Config::parse("[limits]\nmemory_max = \"64m\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("limits.memory_max = \"64m\": expected bytes"),
            "{err}"
        );
        let err = Config::parse("[limits]\nswap_max = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("swap_max"), "{err}");
    }
}
