//! Logging: one `tracing` subscriber per process, writing to stderr
//! (through crate::bridge::log_writer, which never blocks for long nor panics).
//!
//! - Filter: the first of `RIVET_LOG_LEVEL`, `LOG_LEVEL`, `RUST_LOG` that is
//!   set and not empty, else `info` (so that engine start-up progress is
//!   visible). A value is a level (`trace` … `error`, any case; also the
//!   pino names `fatal` → `error` and `silent` → `off`) or a full
//!   `tracing` filter directive such as `info,rivet_envoy_client=debug`.
//! - `RIVET_LOG_LEVEL` and `LOG_LEVEL` name levels: a word there that is no
//!   level (`wran`) would be a `tracing` *target* directive, which silences
//!   every log line; it is refused instead, with a warning on stderr naming
//!   it and the valid levels, and `info` is used.
//! - Format: `RUST_LOG_FORMAT=json` writes JSON lines; anything else writes
//!   compact text (colours only when stderr is a terminal).

use std::io::IsTerminal;
use std::sync::Once;

use tracing_subscriber::EnvFilter;

const LEVEL_VARS: [&str; 3] = ["RIVET_LOG_LEVEL", "LOG_LEVEL", "RUST_LOG"];
const DEFAULT_FILTER: &str = "info";

static INIT: Once = Once::new();

/// Installs the subscriber once; later calls do nothing. Never fails: a bad
/// filter falls back to `info` with a warning.
pub fn init() {
    INIT.call_once(|| {
        let (source, raw) = filter_setting(rivetkit_native_core::env::get);
        let checked = match source {
            Some(var) => check_levels(var, &raw),
            None => Ok(()),
        };
        let (filter, rejected) =
            match checked.and_then(|()| EnvFilter::try_new(normalize(&raw)).map_err(|e| e.to_string())) {
                Ok(filter) => (filter, None),
                Err(err) => (EnvFilter::new(normalize(DEFAULT_FILTER)), Some(err)),
            };
        let json = rivetkit_native_core::env::get(rivetkit_native_core::env::RUST_LOG_FORMAT)
            .is_some_and(|f| f.eq_ignore_ascii_case("json"));
        // Never `std::io::stderr` itself: see crate::bridge::log_writer.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(crate::bridge::log_writer::StderrLines::new(json))
            .log_internal_errors(false);
        // Another subscriber of this library's `tracing` copy can only be
        // ours: ignore "already set".
        let installed = if json {
            builder.json().flatten_event(true).with_current_span(false).try_init()
        } else {
            builder.compact().with_ansi(std::io::stderr().is_terminal()).try_init()
        }
        .is_ok();
        if let (Some(err), Some(source)) = (rejected, source) {
            if installed {
                tracing::warn!(variable = source, value = raw, %err, "invalid log filter; using `{DEFAULT_FILTER}`");
            } else {
                // Another subscriber owns `tracing`: a typo in the log
                // level is still never silent.
                eprintln!("rivetkit-native: {source}={raw:?} is invalid ({err}); using `{DEFAULT_FILTER}`");
            }
        }
    });
}

/// The level names a level variable accepts.
const LEVELS: &str = "trace, debug, info, warn, error, fatal, silent, off";

/// In `RIVET_LOG_LEVEL`/`LOG_LEVEL`, every bare word (a part without `=`,
/// `[`, `{` or `::`) must be a level; `RUST_LOG` keeps `tracing`'s meaning
/// (a bare word there is a target).
fn check_levels(source: &str, raw: &str) -> Result<(), String> {
    if source == "RUST_LOG" {
        return Ok(());
    }
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.contains(['=', '[', '{']) || part.contains("::") {
            continue;
        }
        let known = matches!(
            part.to_ascii_lowercase().as_str(),
            "trace" | "debug" | "info" | "warn" | "error" | "fatal" | "silent" | "off"
        );
        if !known {
            return Err(format!("unknown log level `{part}`; valid levels: {LEVELS} (or a filter such as `info,rivet_envoy_client=debug`)"));
        }
    }
    Ok(())
}

/// The filter text and the variable it came from (`None`: the default).
fn filter_setting(get: impl Fn(&str) -> Option<String>) -> (Option<&'static str>, String) {
    LEVEL_VARS
        .iter()
        .find_map(|name| get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).map(|v| (Some(*name), v)))
        .unwrap_or((None, DEFAULT_FILTER.to_string()))
}

/// Maps the level names the TypeScript runtime uses onto `tracing` levels.
/// A bare `info` keeps the envoy client and the SQLite page store client at
/// `warn`: at `info` they log every command and event exchanged with the
/// engine and every database opened, which drowns what a person wants to
/// see (engine start-up, serving, shutdown). A directive such as
/// `info,rivet_envoy_client=info` turns one back on.
fn normalize(raw: &str) -> String {
    match raw.to_ascii_lowercase().as_str() {
        "fatal" => "error".to_string(),
        "silent" => "off".to_string(),
        "info" => "info,rivet_envoy_client=warn,depot_client=warn".to_string(),
        level @ ("trace" | "debug" | "warn" | "error" | "off") => level.to_string(),
        _ => raw.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(vars: &[(&str, &str)]) -> (Option<&'static str>, String) {
        filter_setting(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn precedence_and_default() {
        assert_eq!(setting(&[]), (None, "info".into()));
        assert_eq!(setting(&[("RUST_LOG", "debug")]), (Some("RUST_LOG"), "debug".into()));
        assert_eq!(setting(&[("RUST_LOG", "debug"), ("LOG_LEVEL", "warn")]), (Some("LOG_LEVEL"), "warn".into()));
        assert_eq!(
            setting(&[("RUST_LOG", "debug"), ("LOG_LEVEL", "warn"), ("RIVET_LOG_LEVEL", "trace")]),
            (Some("RIVET_LOG_LEVEL"), "trace".into())
        );
        assert_eq!(setting(&[("RIVET_LOG_LEVEL", " "), ("LOG_LEVEL", "error")]).1, "error");
    }

    #[test]
    fn unknown_levels_are_refused_by_name() {
        let err = check_levels("RIVET_LOG_LEVEL", "wran").unwrap_err();
        assert!(err.contains("`wran`") && err.contains(LEVELS), "{err}");
        assert!(check_levels("LOG_LEVEL", "info,wran").is_err());
        for ok in ["info", "WARN", "fatal", "silent", "debug,rivet_envoy_client=info", "info,a::b"] {
            assert_eq!(check_levels("RIVET_LOG_LEVEL", ok), Ok(()), "{ok}");
        }
        // RUST_LOG keeps tracing's syntax: a bare word is a target.
        assert_eq!(check_levels("RUST_LOG", "my_crate"), Ok(()));
    }

    #[test]
    fn pino_levels_and_directives() {
        assert_eq!(normalize("WARN"), "warn");
        assert_eq!(normalize("info"), "info,rivet_envoy_client=warn,depot_client=warn");
        assert_eq!(normalize("fatal"), "error");
        assert_eq!(normalize("silent"), "off");
        assert_eq!(normalize("info,hyper=warn"), "info,hyper=warn");
        assert!(EnvFilter::try_new(normalize("info,hyper=warn")).is_ok());
    }
}
