//! What [`super::ensure_engine`] reports: an engine reused or started (the
//! start itself, in `spawn`, may also find one that came up meanwhile).

use std::path::PathBuf;

/// How [`super::ensure_engine`] satisfied the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineStatus {
    /// An engine was already serving the endpoint.
    Reused,
    /// We started one; it keeps running after this process exits.
    Spawned { pid: u32, log_dir: PathBuf },
}
