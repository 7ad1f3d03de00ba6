//! What the listener is told: where to bind, the public directory, the
//! body limit.

use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct ListenerConfig {
    /// Address to bind; `0.0.0.0` when absent.
    pub host: Option<String>,
    pub port: u16,
    /// Static files, served below RivetKit's routes.
    pub public_dir: Option<PathBuf>,
    /// Largest request body read (413 above).
    pub max_body_bytes: usize,
}
