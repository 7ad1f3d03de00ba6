//! The contract profile: what differs between the RivetKit versions whose
//! runtime we stand in for, kept in this one place (docs/versions.md).
//!
//! RivetKit tells the addon its own version in `serve()`'s config
//! (`serverlessPackageVersion`, sent by 2.3.19 and 3.0.0 alike). Everything
//! that behaves differently per version asks the [`RivetkitVersion`] held by
//! the serve run, never the version string.
//!
//! Every item of the addon contract that changed between the two versions
//! has a row, also those we handle the same way for both (the table then
//! says so); the test below reads the table and checks each row against
//! the methods that decide it.
//!
//! | item | 2.3 | 3.0 (and direct use) |
//! |---|---|---|
//! | engine architecture by default | v2 (engine 2.3.x) | v3 (engine 3.0.x) |
//! | `/connect` hibernates without `canHibernateConnect` | yes | as `canHibernateWebsocket` (default no) |
//! | token without one configured | `dev` | `default` for a local engine, none otherwise |
//! | `engineSpawn` as RivetKit sends it | absent | a boolean (both accepted, and our strings) |
//! | `onCancelled` returns | a `CancellationListener` (ignored) | a `CancellationListener` |
//! | SQLite at the end of a generation | closed by the addon (JS calls `close()` first) | closed by the addon (JS only detaches) |
//! | runtime-state bag after `clearRuntimeState()` | a fresh bag | a fresh bag (JS marks it `cleared`) |
//! | traffic after `onSleep`/`onDestroy` resolved | refused | refused |
//! | `sqliteProfiling` | `{ enabled, max… }` | `{ queries, fingerprints, max… }` (both accepted; `RIVETKIT_SQLITE_PROFILING` overrides) |
//!
//! Rows whose two cells behave alike are there so that the difference in
//! RivetKit's own code is written down next to what we do about it
//! (docs/versions.md has a note on each).

/// The RivetKit generation whose addon contract a serve run follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RivetkitVersion {
    /// `rivetkit@2.3.x` on `@rivetkit/rivetkit-napi@2.3.x`.
    V2_3,
    /// `rivetkit@3.0.x` on `@rivetkit/rivetkit-napi@3.0.x`, and direct use
    /// of this addon without RivetKit.
    #[default]
    V3_0,
}

impl RivetkitVersion {
    /// The profile for the version RivetKit reports. A 2.x version is 2.3;
    /// anything else (3.x, a later or unparsable version, or none: direct
    /// use) is the newest contract we offer.
    pub fn from_package_version(version: Option<&str>) -> Self {
        let major = version.and_then(|v| v.trim().trim_start_matches('v').split('.').next()?.parse::<u64>().ok());
        match major {
            Some(2) => Self::V2_3,
            _ => Self::V3_0,
        }
    }

    /// Whether a generation's actor-connect socket (`/connect`: actions
    /// and events) may stay open at the gateway while the actor sleeps.
    /// An explicit `canHibernateConnect` (our own option) decides for
    /// both; without it, 2.3 hibernates them (its client keeps the
    /// connection across sleep), and 3.0 treats them as any WebSocket:
    /// `canHibernateWebsocket`, default false (the client's connection
    /// closes on sleep and it reconnects).
    pub fn connect_hibernates(self, can_hibernate_connect: Option<bool>, can_hibernate_websocket: bool) -> bool {
        can_hibernate_connect.unwrap_or(match self {
            Self::V2_3 => true,
            Self::V3_0 => can_hibernate_websocket,
        })
    }

    /// The engine token to use when none is configured: RivetKit 2.3
    /// defaults to `dev`; 3.0 to `default` for a local engine (one this
    /// host spawns or reuses) and to none for any other.
    pub fn default_token(self, local_engine: bool) -> Option<&'static str> {
        match (self, local_engine) {
            (Self::V2_3, _) => Some("dev"),
            (Self::V3_0, true) => Some("default"),
            (Self::V3_0, false) => None,
        }
    }

    /// How the version is named in logs and errors.
    pub fn label(self) -> &'static str {
        match self {
            Self::V2_3 => "rivetkit 2.3",
            Self::V3_0 => "rivetkit 3.0",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_string_picks_the_profile() {
        assert_eq!(RivetkitVersion::from_package_version(Some("2.3.19")), RivetkitVersion::V2_3);
        assert_eq!(RivetkitVersion::from_package_version(Some("2.3.24-rc.1")), RivetkitVersion::V2_3);
        assert_eq!(RivetkitVersion::from_package_version(Some("3.0.0")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(Some("0.1.0")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(Some("nonsense")), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::from_package_version(None), RivetkitVersion::V3_0);
    }

    /// The module doc's table, parsed: item -> (2.3 cell, 3.0 cell).
    fn documented() -> Vec<(String, String, String)> {
        include_str!("contract.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("//! | "))
            .map(|row| row.trim_end_matches(" |").split(" | ").map(str::to_owned).collect::<Vec<_>>())
            .filter(|cells| cells.len() == 3 && cells[0] != "item" && !cells[0].starts_with("--"))
            .map(|mut cells| {
                let v3 = cells.pop().unwrap_or_default();
                let v2 = cells.pop().unwrap_or_default();
                (cells.pop().unwrap_or_default(), v2, v3)
            })
            .collect()
    }

    /// What the code decides for `item`, in the table's words; `None` for
    /// the rows decided outside this module (the engine's architecture,
    /// the JS surface's shapes), which are checked where they are decided.
    fn decided(item: &str, v: RivetkitVersion) -> Option<String> {
        match item {
            "`/connect` hibernates without `canHibernateConnect`" => {
                let (off, on) = (v.connect_hibernates(None, false), v.connect_hibernates(None, true));
                // An explicit option wins under every version.
                assert!(!v.connect_hibernates(Some(false), true) && v.connect_hibernates(Some(true), false));
                Some(match (off, on) {
                    (true, true) => "yes".into(),
                    (false, true) => "as `canHibernateWebsocket` (default no)".into(),
                    other => format!("{other:?}"),
                })
            }
            "token without one configured" => Some(match (v.default_token(true), v.default_token(false)) {
                (Some(a), Some(b)) if a == b => format!("`{a}`"),
                (Some(local), None) => format!("`{local}` for a local engine, none otherwise"),
                other => format!("{other:?}"),
            }),
            _ => None,
        }
    }

    const ROWS: &[&str] = &[
        "engine architecture by default",
        "`/connect` hibernates without `canHibernateConnect`",
        "token without one configured",
        "`engineSpawn` as RivetKit sends it",
        "`onCancelled` returns",
        "SQLite at the end of a generation",
        "runtime-state bag after `clearRuntimeState()`",
        "traffic after `onSleep`/`onDestroy` resolved",
        "`sqliteProfiling`",
    ];

    #[test]
    fn every_row_matches_the_profile() {
        let table = documented();
        let items: Vec<&str> = table.iter().map(|(item, _, _)| item.as_str()).collect();
        assert_eq!(items, ROWS, "the table's rows, in order");
        for (item, v2, v3) in &table {
            for (version, cell) in [(RivetkitVersion::V2_3, v2), (RivetkitVersion::V3_0, v3)] {
                if let Some(decided) = decided(item, version) {
                    assert_eq!(&decided, cell, "{item} under {}", version.label());
                }
            }
        }
    }

    #[test]
    fn direct_use_gets_the_newest_profile() {
        assert_eq!(RivetkitVersion::default(), RivetkitVersion::V3_0);
        assert_eq!(RivetkitVersion::V3_0.default_token(true), Some("default"));
    }
}
