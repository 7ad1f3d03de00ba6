//! The queue's limits and its structured errors (docs/errors.md). Every
//! `queue.*` error here is public (status 400), as in the reference.

use serde_json::json;

use crate::actor::kv_limits::MAX_VALUE_SIZE;
use crate::error::RivetError;

/// The reference's default `maxQueueSize`.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 1000;
/// The reference's default `maxQueueMessageSize`.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 65_536;
/// How many generations may take a message and end without consuming it
/// before it is moved to the dead letters (docs/queues-cron.md).
pub const DEFAULT_MAX_DELIVERIES: u32 = 5;

/// The limits of one actor's queue, fixed for a generation's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Messages the queue holds at most (`maxQueueSize`, at least 1).
    pub max_size: usize,
    /// Bytes one message takes at most: its body, its name and 9 bytes of
    /// header (`maxQueueMessageSize`). A body is one KV value, so a larger
    /// setting is lowered to the engine's value limit.
    pub max_message_size: usize,
    /// Generations that may end while holding a message before it becomes
    /// a dead letter (`maxQueueDeliveries`, at least 1).
    pub max_deliveries: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_QUEUE_SIZE, DEFAULT_MAX_MESSAGE_SIZE)
    }
}

impl Limits {
    pub fn new(max_size: usize, max_message_size: usize) -> Self {
        Self {
            max_size: max_size.max(1),
            max_message_size: max_message_size.min(MAX_VALUE_SIZE),
            max_deliveries: DEFAULT_MAX_DELIVERIES,
        }
    }

    pub fn with_max_deliveries(self, max_deliveries: u32) -> Self {
        Self { max_deliveries: max_deliveries.max(1), ..self }
    }
}

pub fn full(limit: usize) -> RivetError {
    RivetError::new(crate::error_codes::QUEUE_FULL, format!("Queue is full. Limit is {limit} messages."))
        .with_metadata(json!({ "limit": limit }))
}

pub fn message_too_large(size: usize, limit: usize) -> RivetError {
    RivetError::new(
        crate::error_codes::QUEUE_MESSAGE_TOO_LARGE,
        format!("Queue message too large ({size} bytes). Limit is {limit} bytes."),
    )
    .with_metadata(json!({ "size": size, "limit": limit }))
}

pub fn timed_out(timeout_ms: u64) -> RivetError {
    RivetError::new(crate::error_codes::QUEUE_TIMED_OUT, format!("Queue wait timed out after {timeout_ms} ms."))
        .with_metadata(json!({ "timeoutMs": timeout_ms }))
}

pub fn already_completed() -> RivetError {
    RivetError::new(crate::error_codes::QUEUE_ALREADY_COMPLETED, "Queue message was already completed.")
}

pub fn complete_not_configured(name: &str) -> RivetError {
    RivetError::new(
        crate::error_codes::QUEUE_COMPLETE_NOT_CONFIGURED,
        format!("Queue '{name}' does not support completion responses."),
    )
    .with_metadata(json!({ "name": name }))
}

/// The waiter of an `enqueueAndWait` lost its message (the queue was reset).
pub fn completion_waiter_dropped() -> RivetError {
    RivetError::new(
        crate::error_codes::QUEUE_COMPLETION_WAITER_DROPPED,
        "Queue completion waiter dropped before response",
    )
}
