//! Starting the engine (`rivet-engine start --config FILE` for 2.3,
//! `rivet-engine --config FILE` for 3.0) and waiting until it is healthy
//! and, for 3.0, ready (its storage open).
//!
//! Lifetime rule (docs/engine.md, "Who stops the engine"): an engine this
//! host started belongs to it, and the serve run stops it when the host
//! shuts down ([`super::SpawnedEngine::stop`]). It still runs in its own
//! process group (the terminal's Ctrl-C goes to the host, which decides)
//! with stdout/stderr in files (no pipes that close with us), so a host that
//! crashes leaves it running and the next start reuses it with its state.
//! A spawn that never became healthy is killed at once: it has no state
//! worth keeping and would block a retry.
//!
//! Why `std::process` and not `tokio::process`: dropping a still-running
//! tokio `Child` hands it to tokio's orphan reaper, which installs a SIGCHLD
//! handler (and on non-Linux, spawning alone does). A library loaded into
//! Node must not install signal handlers, so we spawn with std, poll
//! `try_wait` while waiting for health, and reap from a plain thread.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde_json::json;

use super::errors::spawn_failed;
use super::health::{self, WaitOutcome, WaitReport};
use super::lookup::Env;
use super::options::EngineOptions;
use super::paths::{storage_root, EngineDirs};
use super::plan::{config_file, engine_env, plan, EnginePlan};
use super::profile::EngineArch;
use super::ready;
use super::status::{EngineStatus, SpawnedEngine};
use crate::error::RivetError;

const KILL_WAIT: Duration = Duration::from_secs(5);

/// Spawns the engine of architecture `arch` and waits for `/health` and,
/// for 3.0, readiness (together at most `engine_start_timeout`).
pub async fn spawn_engine(
    config: &EngineOptions,
    binary: &Path,
    arch: EngineArch,
    env: Env<'_>,
) -> Result<EngineStatus> {
    let plan = plan(config)?;
    let dirs = EngineDirs::new(storage_root(env)?);
    dirs.create_all().map_err(|e| spawn_failed(binary, &format!("{e:#}")))?;
    let config_path = dirs.engine.join(format!("config-{}.json", plan.guard_port));
    let contents = serde_json::to_vec_pretty(&config_file(&plan))?;
    std::fs::write(&config_path, contents)
        .map_err(|e| spawn_failed(binary, &format!("write engine config `{}`: {e}", config_path.display())))?;

    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let stdout_log = dirs.logs.join(format!("engine-{stamp}-stdout.log"));
    let stderr_log = dirs.logs.join(format!("engine-{stamp}-stderr.log"));
    let (stdout, stderr) = (open_log(binary, &stdout_log)?, open_log(binary, &stderr_log)?);

    let vars = engine_env(arch, &plan, &dirs, env);
    let admin_token = vars.iter().find(|(k, _)| k == "RIVET__AUTH__ADMIN_TOKEN").map(|(_, v)| v.clone());
    let mut command = Command::new(binary);
    command.args(arch.subcommand());
    command.arg("--config").arg(&config_path).envs(vars).stdin(Stdio::null()).stdout(stdout).stderr(stderr);
    detach(&mut command);

    tracing::info!(
        "starting Rivet Engine {} ({}) on {} (logs: {})",
        binary.display(),
        arch.label(),
        config.endpoint,
        stdout_log.with_file_name(format!("engine-{stamp}-{{stdout,stderr}}.log")).display()
    );
    let mut child = command.spawn().map_err(|e| spawn_failed(binary, &e.to_string()))?;
    let pid = child.id();

    let url = health::health_url(&config.endpoint)?;
    let report = health::wait_until_healthy(&url, config.engine_start_timeout, || exit_status(&mut child)).await;
    let logs = Logs { stdout: stdout_log, stderr: stderr_log };
    match &report.outcome {
        WaitOutcome::Ready(health) => {
            if let Some(status) = exit_status(&mut child) {
                // Lost a start race: another engine owns the port and answered.
                tracing::warn!(pid, %status, "our engine exited but another engine serves {}; reusing it", config.endpoint);
                return Ok(EngineStatus::Reused { arch: health.arch() });
            }
            if arch == EngineArch::V3 {
                let budget = config.engine_start_timeout.saturating_sub(report.elapsed);
                if let Err(reason) = ready::wait_until_ready(config, admin_token.as_deref(), budget).await {
                    let status = kill_half_started(&mut child).await;
                    let what = format!("{status}; its storage did not open: {reason}");
                    return Err(health_failed(config, &plan, &report, &what, &logs));
                }
            }
            tracing::info!(
                pid,
                version = health.version.as_deref().unwrap_or("?"),
                "engine ready after {} ms",
                report.elapsed.as_millis()
            );
            let exited = reap_in_background(child, pid);
            Ok(EngineStatus::Spawned(SpawnedEngine { pid, log_dir: dirs.logs, arch, exited }))
        }
        WaitOutcome::Exited(status) => {
            if let Some(health) = health::probe_engine(&config.endpoint).await.ok().flatten() {
                tracing::warn!(pid, %status, "our engine exited but another engine serves {}; reusing it", config.endpoint);
                return Ok(EngineStatus::Reused { arch: health.arch() });
            }
            Err(health_failed(config, &plan, &report, &format!("the engine exited ({status})"), &logs))
        }
        WaitOutcome::TimedOut => {
            let status = kill_half_started(&mut child).await;
            Err(health_failed(config, &plan, &report, &status, &logs))
        }
    }
}

#[cfg(unix)]
fn detach(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // Own process group: the terminal's Ctrl-C/SIGHUP must not reach it.
    command.process_group(0);
}

#[cfg(windows)]
fn detach(command: &mut Command) {
    use std::os::windows::process::CommandExt;
    const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;
    command.creation_flags(CREATE_NEW_PROCESS_GROUP);
}

#[cfg(not(any(unix, windows)))]
fn detach(_command: &mut Command) {}

fn exit_status(child: &mut Child) -> Option<String> {
    child.try_wait().ok().flatten().map(|s| s.to_string())
}

/// The only place an engine is killed: a spawn that never became healthy.
async fn kill_half_started(child: &mut Child) -> String {
    if let Some(status) = exit_status(child) {
        return format!("the engine exited ({status})");
    }
    let _ = child.kill();
    let start = Instant::now();
    while start.elapsed() < KILL_WAIT {
        if let Some(status) = exit_status(child) {
            return format!("the half-started engine was killed ({status})");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::warn!(pid = child.id(), "half-started engine did not exit within 5 s of SIGKILL");
    "the half-started engine was killed but had not exited after 5 s".to_owned()
}

/// Reaps the engine when it exits, so it never lingers as a zombie, and
/// says so; the flag it returns turns true once the process is reaped. A
/// plain thread: it holds nothing of Node's event loop.
fn reap_in_background(mut child: Child, pid: u32) -> Arc<AtomicBool> {
    let exited = Arc::new(AtomicBool::new(false));
    let flag = exited.clone();
    let spawned = std::thread::Builder::new().name("rivet-engine-reaper".to_owned()).spawn(move || {
        match child.wait() {
            Ok(status) => tracing::debug!(pid, %status, "the Rivet Engine process exited"),
            Err(error) => tracing::debug!(pid, %error, "cannot wait for the engine process"),
        }
        flag.store(true, Ordering::Release);
    });
    if let Err(error) = spawned {
        tracing::debug!(%error, "could not start the engine reaper thread");
    }
    exited
}

struct Logs {
    stdout: PathBuf,
    stderr: PathBuf,
}

fn health_failed(
    config: &EngineOptions,
    plan: &EnginePlan,
    report: &WaitReport,
    what: &str,
    logs: &Logs,
) -> anyhow::Error {
    let tail = log_tail(&logs.stderr).or_else(|| log_tail(&logs.stdout));
    let mut message = format!(
        "Rivet Engine did not become healthy at {} within {} ms after {} health checks \
         (last: {}); {what}. Engine logs: {} and {}.",
        config.endpoint,
        report.elapsed.as_millis(),
        report.attempts,
        report.last_reason,
        logs.stderr.display(),
        logs.stdout.display(),
    );
    // The engine keeps running when a port is taken, so say it plainly.
    if tail.as_deref().is_some_and(|t| t.contains("Address in use")) {
        message.push_str(&format!(
            " Another process is using one of the engine's ports ({}, {}, {}).",
            plan.guard_port, plan.api_peer_port, plan.metrics_port
        ));
    }
    if let Some(tail) = &tail {
        message.push_str("\nLast engine output:\n");
        message.push_str(tail);
    }
    RivetError::new(crate::error_codes::ENGINE_HEALTH_CHECK_FAILED, message)
        .with_metadata(json!({
            "attempts": report.attempts,
            "reason": report.last_reason,
            "endpoint": config.endpoint,
            "exit": what,
            "stderr_log": logs.stderr.display().to_string(),
            "stdout_log": logs.stdout.display().to_string(),
            "log_tail": tail,
        }))
        .into_anyhow()
}

/// The last 6 non-empty lines of a log (each clipped to 300 chars), cut
/// before a Rust backtrace: with `RUST_BACKTRACE=1` the useful error line
/// precedes dozens of frames, and the engine's "loaded config" line is huge.
fn log_tail(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(16 * 1024)..]).into_owned();
    let text = text.split("Stack backtrace:").next().unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.char_indices().nth(300) {
            Some((cut, _)) => format!("{}...", &l[..cut]),
            None => l.to_owned(),
        })
        .collect();
    let tail = lines[lines.len().saturating_sub(6)..].join("\n");
    (!tail.is_empty()).then_some(tail)
}

fn open_log(binary: &Path, path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| spawn_failed(binary, &format!("open log `{}`: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_skips_backtraces() {
        let dir = crate::engine::test_dir::TestDir::new("tail");
        let path = dir.path.join("e.log");
        std::fs::write(&path, "Error: failed to deserialize config\n\nCaused by:\n    invalid IP address syntax\n\nStack backtrace:\n   0: <unknown>\n").unwrap();
        let tail = log_tail(&path).unwrap();
        assert!(tail.ends_with("invalid IP address syntax"), "{tail}");
        assert_eq!(log_tail(&dir.path.join("missing")), None);
    }
}
