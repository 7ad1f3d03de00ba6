//! What the gateway told us about one socket: built by the router
//! (`mod.rs`), consumed by the actor-connect and raw handlers.

use std::collections::HashMap;

/// What the gateway told us about one socket.
pub(crate) struct SocketInfo {
    pub gateway_id: [u8; 4],
    pub request_id: [u8; 4],
    pub path: String,
    pub headers: HashMap<String, String>,
    /// The gateway keeps it open while the actor sleeps.
    pub is_hibernatable: bool,
    /// A socket of a previous generation, reopened for this one.
    pub is_restoring: bool,
}
