//! The engine profile: what differs between the two Rivet Engine
//! architectures we start, reuse and talk to, kept in this one place
//! (docs/engine.md, "Two engine architectures").
//!
//! | item | v2 (engine 2.3.x) | v3 (engine 3.0.x) |
//! |---|---|---|
//! | how a binary says which it is | no `--runtime-info` flag (the argument parser refuses it) | `--runtime-info` prints `{"architecture":"v3",...}` |
//! | how a running engine says which it is | `/health` has no `architecture` | `/health` has `"architecture":"v3"` |
//! | command line | `rivet-engine start --config FILE` | `rivet-engine --config FILE` |
//! | data | `{root}/var/engine/db` (a file-system database) | `{root}/var/engine/depot/{log,objects}` (log shard and object store) |
//! | admin token of an engine we start | none on loopback | always (`RIVET__AUTH__ADMIN_TOKEN`, else the envoy's token, else `default`) |
//! | ready after `/health` | at once | once an actor listing answers (its storage is open) |
//! | the pool | `PUT /runner-configs/{pool}` per datacenter | `PUT /pools/{pool}` |
//! | who is connected | `GET /envoys?name={pool}` | `GET /pools/{pool}/nodes` |
//! | pool names | anything | a DNS label |
//! | the RivetKit it serves | 2.3 | 3.0 (and direct use) |
//! | the actor id the lease's probes name | `lease-probe` (refused at once, without a storage read) | the nil id (3.0 drops the connection on an id that does not parse) |

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::contract::RivetkitVersion;

/// One of the two engine architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineArch {
    /// Engine 2.3.x: PostgreSQL or a file-system database, runner configs.
    V2,
    /// Engine 3.0.x: a log directory and an object store, pools.
    V3,
}

/// How long `--runtime-info` may take (it answers in milliseconds).
const RUNTIME_INFO_TIMEOUT: Duration = Duration::from_secs(3);

impl EngineArch {
    /// The architecture each RivetKit's own `@rivetkit/engine-cli` has.
    pub fn required_by(contract: RivetkitVersion) -> Self {
        match contract {
            RivetkitVersion::V2_3 => Self::V2,
            RivetkitVersion::V3_0 => Self::V3,
        }
    }

    /// A running engine's architecture from the `architecture` field of its
    /// `/health` answer (absent on v2).
    pub fn from_health_field(architecture: Option<&str>) -> Self {
        match architecture {
            Some("v3") => Self::V3,
            _ => Self::V2,
        }
    }

    /// A binary's architecture, from `binary --runtime-info`: v3 prints its
    /// identity as JSON, v2 refuses the flag. `None` when the file cannot be
    /// run at all (then it is no engine we can start).
    pub fn of_binary(binary: &Path) -> Option<Self> {
        let mut child = spawn_runtime_info(binary)?;
        let started = std::time::Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() < RUNTIME_INFO_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        };
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            use std::io::Read;
            let _ = stdout.read_to_string(&mut out);
        }
        Some(Self::from_runtime_info(status.success(), &out))
    }

    /// The rule behind [`Self::of_binary`], on what the binary printed.
    pub fn from_runtime_info(succeeded: bool, stdout: &str) -> Self {
        if !succeeded {
            return Self::V2;
        }
        let info: Option<serde_json::Value> = serde_json::from_str(stdout.trim()).ok();
        Self::from_health_field(info.as_ref().and_then(|v| v.get("architecture")).and_then(|a| a.as_str()))
    }

    /// How the architecture is named to a person.
    pub fn label(self) -> &'static str {
        match self {
            Self::V2 => "engine 2.3 (architecture v2)",
            Self::V3 => "engine 3.0 (architecture v3)",
        }
    }

    /// The `@rivetkit/engine-cli` release that brings this architecture.
    pub fn npm_release(self) -> &'static str {
        match self {
            Self::V2 => "2.3.19",
            Self::V3 => "3.0.0",
        }
    }

    /// The RivetKit this engine serves, for error messages.
    pub fn serves(self) -> &'static str {
        match self {
            Self::V2 => "rivetkit 2.3",
            Self::V3 => "rivetkit 3.0",
        }
    }

    /// The arguments before `--config FILE`.
    pub fn subcommand(self) -> Option<&'static str> {
        match self {
            Self::V2 => Some("start"),
            Self::V3 => None,
        }
    }

    /// The actor id the envoy's lease probes name (docs/durability.md): one
    /// the engine answers with an error at once.
    pub fn lease_probe_actor_id(self) -> &'static str {
        match self {
            Self::V2 => rivet_envoy_client::lease::NO_ACTOR,
            Self::V3 => rivet_envoy_client::lease::NIL_ACTOR,
        }
    }

    /// Whether the engine only accepts pool names that are DNS labels.
    pub fn wants_dns_label_pools(self) -> bool {
        matches!(self, Self::V3)
    }
}

/// Starts `binary --runtime-info`. A file written a moment ago can still be
/// open for writing in a child that another thread forked meanwhile (until
/// that child's exec closes it), and exec then fails with ETXTBSY: that
/// passes within milliseconds, so it is tried again a few times.
fn spawn_runtime_info(binary: &Path) -> Option<std::process::Child> {
    let mut attempt = 0;
    loop {
        let spawned = Command::new(binary)
            .arg("--runtime-info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => return Some(child),
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy && attempt < 20 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return None,
        }
    }
}

/// Whether `name` is a DNS label (1-63 lowercase letters, digits and
/// hyphens, neither first nor last a hyphen), as engine 3.0 wants a pool name.
pub fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module doc's table names both architectures in every row.
    #[test]
    fn the_table_covers_both_architectures() {
        let doc = include_str!("profile.rs");
        let rows: Vec<&str> = doc
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .filter(|l| l.starts_with("//! |") && !l.contains("---"))
            .collect();
        assert_eq!(rows[0], "//! | item | v2 (engine 2.3.x) | v3 (engine 3.0.x) |");
        assert!(rows.len() >= 10, "{rows:?}");
        for row in &rows {
            assert_eq!(row.matches('|').count(), 4, "three cells: {row}");
        }
    }

    #[test]
    fn runtime_info_tells_the_architectures_apart() {
        let v3 = r#"{"architecture":"v3","runtime":"engine","version":"3.0.0"}"#;
        assert_eq!(EngineArch::from_runtime_info(true, v3), EngineArch::V3);
        assert_eq!(EngineArch::from_runtime_info(false, ""), EngineArch::V2);
        assert_eq!(EngineArch::from_runtime_info(true, "Rivet 2.3.19"), EngineArch::V2);
        assert_eq!(EngineArch::from_health_field(None), EngineArch::V2);
        assert_eq!(EngineArch::from_health_field(Some("v3")), EngineArch::V3);
    }

    #[cfg(unix)]
    #[test]
    fn of_binary_runs_the_flag() {
        use std::os::unix::fs::PermissionsExt;
        let dir = crate::engine::test_dir::TestDir::new("runtime-info");
        let write = |name: &str, body: &str| {
            let path = dir.path.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        };
        let v3 = write("v3", r#"echo '{"architecture":"v3","runtime":"engine","version":"3.0.0"}'"#);
        let v2 = write("v2", "echo \"error: unexpected argument '$1' found\" >&2; exit 2");
        assert_eq!(EngineArch::of_binary(&v3), Some(EngineArch::V3));
        assert_eq!(EngineArch::of_binary(&v2), Some(EngineArch::V2));
        assert_eq!(EngineArch::of_binary(&dir.path.join("missing")), None);
    }

    #[test]
    fn each_rivetkit_gets_its_own_engine() {
        assert_eq!(EngineArch::required_by(RivetkitVersion::V2_3), EngineArch::V2);
        assert_eq!(EngineArch::required_by(RivetkitVersion::V3_0), EngineArch::V3);
    }

    #[test]
    fn pool_names() {
        assert!(is_dns_label("rivetkit-rust"));
        assert!(is_dns_label("a"));
        assert!(!is_dns_label("My_Pool"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
