//! What the queue keeps in memory of one message: a leaf that the queue,
//! its operations and its store share.

/// What the queue keeps in memory of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub id: u64,
    pub name: String,
    /// ms since the epoch.
    pub created_at: i64,
    /// The ray ID of the invocation that sent it (docs/storage.md).
    pub ray_id: Option<String>,
}
