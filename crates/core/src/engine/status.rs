//! What [`super::ensure_engine`] reports: an engine reused or started (the
//! start itself, in `spawn`, may also find one that came up meanwhile).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::profile::EngineArch;

/// How [`super::ensure_engine`] satisfied the request.
#[derive(Debug)]
pub enum EngineStatus {
    /// An engine was already serving the endpoint: only reused, never stopped.
    Reused { arch: EngineArch },
    /// We started one: it belongs to this host and stops with it.
    Spawned(SpawnedEngine),
}

impl EngineStatus {
    /// The architecture of the engine now serving the endpoint.
    pub fn arch(&self) -> EngineArch {
        match self {
            Self::Reused { arch } => *arch,
            Self::Spawned(engine) => engine.arch,
        }
    }
}

/// An engine process this host started. Dropping it does not stop it:
/// the serve run calls [`SpawnedEngine::stop`] when the host shuts down
/// (docs/engine.md, "Who stops the engine").
#[derive(Debug)]
pub struct SpawnedEngine {
    pub pid: u32,
    pub log_dir: PathBuf,
    pub arch: EngineArch,
    /// Set by the reaper thread once the process exited and was reaped, so
    /// that its pid is never signalled after it may have been reused.
    pub(crate) exited: Arc<AtomicBool>,
}

/// How long [`SpawnedEngine::stop`] waits for the engine to exit after
/// SIGTERM (engine 3.0 stops its storage within about 6 s with the budgets
/// we give it; it ends itself by its forced-shutdown bound).
pub const STOP_WAIT: Duration = Duration::from_secs(15);

impl SpawnedEngine {
    /// Whether the process is still running.
    pub fn is_running(&self) -> bool {
        !self.exited.load(Ordering::Acquire)
    }

    /// Asks the engine to stop (SIGTERM) and waits for it to exit, at most
    /// [`STOP_WAIT`], saying every 2 s that it still waits. Returns whether
    /// it exited in time.
    pub async fn stop(&self) -> bool {
        if !self.is_running() {
            return true;
        }
        tracing::info!(pid = self.pid, "stopping the Rivet Engine this host started");
        terminate(self.pid);
        let started = tokio::time::Instant::now();
        let mut next_progress = Duration::from_secs(2);
        while self.is_running() {
            let waited = started.elapsed();
            if waited >= STOP_WAIT {
                tracing::warn!(
                    pid = self.pid,
                    "the Rivet Engine has not exited {} s after it was asked to stop; it ends by itself",
                    STOP_WAIT.as_secs()
                );
                return false;
            }
            if waited >= next_progress {
                tracing::info!(pid = self.pid, "waiting for the Rivet Engine to stop ({} s)...", waited.as_secs());
                next_progress += Duration::from_secs(2);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::info!(pid = self.pid, "the Rivet Engine stopped after {} ms", started.elapsed().as_millis());
        true
    }
}

#[cfg(unix)]
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) with a pid of a child we have not reaped yet (the
    // reaper sets `exited` only after reaping it), so it names our engine.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

#[cfg(not(unix))]
fn terminate(pid: u32) {
    // No graceful signal: the engine's own process tree is ended.
    let _ = std::process::Command::new("taskkill").args(["/PID", &pid.to_string(), "/T", "/F"]).status();
}
