//! The registry's lifecycle as one state machine: its [`State`]s, the
//! [`Event`]s that move it, and [`step`], the transition table below. It
//! holds no data and takes no lock: `state.rs` applies it under its lock
//! and keeps what each state carries (the actor types, the serve handle,
//! the serverless runtime). The errors are the ones the JS caller gets
//! (README "Call order", docs/errors.md).
//!
//! A registry runs in one mode: `serve()` (envoy mode) or the first
//! serverless call (`handleServerlessRequest`, `serveListener`) takes the
//! registered actor types, and the other mode is refused from then on.
//!
//! | state \ event | Register | Serve | ServerlessCall | WaitReady | ServeStart | ServeReady | ServeFailed | ServeDone | Shutdown |
//! |---|---|---|---|---|---|---|---|---|---|
//! | Registering | Registering | EnvoyNotStarted | Serverless | E1 | = | = | = | = | ShutDown |
//! | EnvoyNotStarted | E2 | E3 | E4 | = | EnvoyStarting | = | EnvoyFailed | = | ShutDown |
//! | EnvoyStarting | E2 | E3 | E4 | = | = | EnvoyReady | EnvoyFailed | ShutDown | EnvoyShuttingDown |
//! | EnvoyReady | E2 | E3 | E4 | = | = | = | EnvoyFailed | ShutDown | EnvoyShuttingDown |
//! | EnvoyShuttingDown | E2 | E3 | E5 | = | = | = | EnvoyFailed | ShutDown | = |
//! | EnvoyFailed | E2 | E3 | E4 | = | = | = | = | = | = |
//! | Serverless | E2 | E3 | Serverless | E6 | = | = | = | = | ServerlessShutDown |
//! | ServerlessShutDown | E2 | E3 | E5 | E6 | = | = | = | = | = |
//! | ShutDown | E2 | E3 | E5 | = | ShutDown | = | ShutDown | = | = |
//!
//! `=`: the state stays (for the serve run's events: a pair its order never
//! sends, or one that no longer matters, like a ready after shutdown).
//!
//! | error | code | message |
//! |---|---|---|
//! | E1 | `napi.invalid_state` | waitReady() before serve(): call serve() first, then waitReady() |
//! | E2 | `napi.invalid_state` | register() after serve() or shutdown() |
//! | E3 | `napi.invalid_state` | serve() was already called, or the registry was shut down |
//! | E4 | `napi.invalid_state` | serverless requests need a registry that is not serving: serve() was already called |
//! | E5 | `registry.shut_down` | The registry is shut down. |
//! | E6 | `napi.invalid_state` | waitReady() in serverless mode: hosts become ready per start request |
//!
//! Notes:
//! - `WaitReady` that stays is a waiter on the envoy phase (`state.rs`):
//!   it settles on ready, on the failure, or with `registry.shut_down`.
//! - `ServeStart` and `ServeFailed` into `ShutDown`: `shutdown()` came
//!   before the serve run started; `serve()` resolves without serving.
//! - `ServerlessCall` after `shutdown()` is `registry.shut_down` in every
//!   state: the drain token is checked before the table (so an
//!   `EnvoyFailed` registry that was shut down answers E5, not E4).
//! - Serverless mode drains in `shutdown()`'s promise; its `health()` reads
//!   the runtime, so it needs no drain-done event.

use rivetkit_native_core::error::catalog;
use rivetkit_native_core::RivetError;

/// Where a registry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Taking actor types (`register`).
    Registering,
    /// `serve()` took the actor types; its run has not read its config.
    EnvoyNotStarted,
    /// The serve run is connecting (engine, runner config, envoy).
    EnvoyStarting,
    /// The engine accepted this host.
    EnvoyReady,
    /// `shutdown()` came while starting or ready: the drain runs.
    EnvoyShuttingDown,
    /// The serve run failed (setup, or later).
    EnvoyFailed,
    /// The first serverless call took the actor types.
    Serverless,
    /// `shutdown()` came in serverless mode.
    ServerlessShutDown,
    /// Done: drained, or shut down before any mode started.
    ShutDown,
}

/// What moves a registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `register()`.
    Register,
    /// `serve()`.
    Serve,
    /// A serverless call that needs the runtime (built on the first).
    ServerlessCall,
    /// `waitReady()`, before it waits.
    WaitReady,
    /// The serve run read a good config and starts connecting.
    ServeStart,
    /// The serve run is ready (the engine accepted this host).
    ServeReady,
    /// The serve run failed.
    ServeFailed,
    /// The serve run ended: the drain is done.
    ServeDone,
    /// `shutdown()`.
    Shutdown,
}

/// Applies `event` to `state`: the next state, or the caller's error.
pub(crate) fn step(state: State, event: Event) -> Result<State, RivetError> {
    use Event as E;
    use State as S;
    let next = match (state, event) {
        (S::Registering, E::Register) => S::Registering,
        (_, E::Register) => return Err(catalog::invalid_state("register() after serve() or shutdown()")),

        (S::Registering, E::Serve) => S::EnvoyNotStarted,
        (_, E::Serve) => {
            return Err(catalog::invalid_state("serve() was already called, or the registry was shut down"))
        }

        (S::Registering | S::Serverless, E::ServerlessCall) => S::Serverless,
        (S::EnvoyShuttingDown | S::ServerlessShutDown | S::ShutDown, E::ServerlessCall) => {
            return Err(catalog::registry_shut_down())
        }
        (_, E::ServerlessCall) => {
            return Err(catalog::invalid_state(
                "serverless requests need a registry that is not serving: serve() was already called",
            ))
        }

        (S::Registering, E::WaitReady) => {
            return Err(catalog::invalid_state("waitReady() before serve(): call serve() first, then waitReady()"))
        }
        (S::Serverless | S::ServerlessShutDown, E::WaitReady) => {
            return Err(catalog::invalid_state("waitReady() in serverless mode: hosts become ready per start request"))
        }

        (S::EnvoyNotStarted, E::ServeStart) => S::EnvoyStarting,
        (S::EnvoyStarting, E::ServeReady) => S::EnvoyReady,
        (S::EnvoyNotStarted | S::EnvoyStarting | S::EnvoyReady | S::EnvoyShuttingDown, E::ServeFailed) => {
            S::EnvoyFailed
        }
        (S::EnvoyStarting | S::EnvoyReady | S::EnvoyShuttingDown, E::ServeDone) => S::ShutDown,

        (S::Registering | S::EnvoyNotStarted, E::Shutdown) => S::ShutDown,
        (S::EnvoyStarting | S::EnvoyReady, E::Shutdown) => S::EnvoyShuttingDown,
        (S::Serverless, E::Shutdown) => S::ServerlessShutDown,

        (state, _) => state,
    };
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATES: [State; 9] = [
        State::Registering,
        State::EnvoyNotStarted,
        State::EnvoyStarting,
        State::EnvoyReady,
        State::EnvoyShuttingDown,
        State::EnvoyFailed,
        State::Serverless,
        State::ServerlessShutDown,
        State::ShutDown,
    ];

    const EVENTS: [Event; 9] = [
        Event::Register,
        Event::Serve,
        Event::ServerlessCall,
        Event::WaitReady,
        Event::ServeStart,
        Event::ServeReady,
        Event::ServeFailed,
        Event::ServeDone,
        Event::Shutdown,
    ];

    /// The module doc's table, parsed: the one the tests check against.
    fn documented() -> Vec<Vec<String>> {
        let source = include_str!("lifecycle.rs");
        source
            .lines()
            .filter_map(|line| line.strip_prefix("//! | "))
            .map(|row| row.trim_end_matches(" |").split(" | ").map(str::to_owned).collect::<Vec<_>>())
            .filter(|cells| cells.len() == 10 && !cells[0].contains('\\') && !cells[0].starts_with("--"))
            .collect()
    }

    fn error(name: &str) -> RivetError {
        let shut_down = catalog::registry_shut_down();
        let invalid = |m: &str| catalog::invalid_state(m);
        match name {
            "E1" => invalid("waitReady() before serve(): call serve() first, then waitReady()"),
            "E2" => invalid("register() after serve() or shutdown()"),
            "E3" => invalid("serve() was already called, or the registry was shut down"),
            "E4" => invalid("serverless requests need a registry that is not serving: serve() was already called"),
            "E5" => shut_down,
            "E6" => invalid("waitReady() in serverless mode: hosts become ready per start request"),
            other => panic!("unknown error {other}"),
        }
    }

    #[test]
    fn every_pair_matches_the_documented_table() {
        let table = documented();
        assert_eq!(table.len(), STATES.len(), "one row per state");
        for (row, state) in table.iter().zip(STATES) {
            assert_eq!(row[0], format!("{state:?}"), "rows in declaration order");
            for (cell, event) in row[1..].iter().zip(EVENTS) {
                let got = step(state, event);
                let want = match cell.as_str() {
                    "=" => Ok(state),
                    e if e.starts_with('E') && e.len() == 2 => Err(error(e)),
                    name => Ok(*STATES.iter().find(|s| format!("{s:?}") == name).expect("a state name")),
                };
                assert_eq!(got, want, "{state:?} × {event:?}");
            }
        }
    }

    #[test]
    fn the_errors_carry_the_documented_codes() {
        assert_eq!(error("E1").qualified_code(), "napi.invalid_state");
        assert_eq!(error("E5").qualified_code(), "registry.shut_down");
    }

    #[test]
    fn the_call_order_of_the_readme() {
        // shutdown() before serve() ends the registry.
        let s = step(State::Registering, Event::Shutdown).unwrap();
        assert_eq!(s, State::ShutDown);
        assert!(step(s, Event::Serve).is_err());
        assert!(step(s, Event::Register).is_err());
        assert_eq!(step(s, Event::WaitReady), Ok(State::ShutDown));
        // A full envoy run.
        let mut s = State::Registering;
        for (event, want) in [
            (Event::Serve, State::EnvoyNotStarted),
            (Event::ServeStart, State::EnvoyStarting),
            (Event::ServeReady, State::EnvoyReady),
            (Event::Shutdown, State::EnvoyShuttingDown),
            (Event::ServeDone, State::ShutDown),
        ] {
            s = step(s, event).unwrap();
            assert_eq!(s, want);
        }
    }
}
