//! The answer to a client's queue send: plain data the task's commands
//! carry, kept apart from the queue so that they need nothing else of it.

/// The answer to a client's `POST /queue/{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSendResult {
    pub status: QueueSendStatus,
    /// The consumer's answer (CBOR), when the client waited for one.
    pub response: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueSendStatus {
    Completed,
    TimedOut,
}

impl QueueSendStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueSendStatus::Completed => "completed",
            QueueSendStatus::TimedOut => "timedOut",
        }
    }

    /// The status a JavaScript `onQueueSend` returns.
    pub fn parse(status: &str) -> Option<Self> {
        match status {
            "completed" => Some(QueueSendStatus::Completed),
            "timedOut" => Some(QueueSendStatus::TimedOut),
            _ => None,
        }
    }
}
