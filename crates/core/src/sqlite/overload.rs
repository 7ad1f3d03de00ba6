//! Page messages that engine 3.0 refused for overload, sent again
//! (docs/sqlite.md, "Storage that is behind").
//!
//! When its storage is behind, engine 3.0 answers a page message with
//! `depot.overloaded` and `retry_after_ms=N` in the message. Such a refusal
//! ran nothing, so the same message may be sent again after N ms. The page
//! store client we pin does not know this answer: a refused commit failed
//! its statement (a disk I/O error in SQLite). [`resend`] sends the message
//! again after the engine's delay, each wait capped at [`MAX_WAIT`], until
//! [`BUDGET`] is spent; then the last answer goes back to the client as it
//! came. Engine 2.3 never gives this answer.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use rivet_envoy_client::protocol;
use tokio::time::Instant;

/// The longest one wait, whatever the engine asked for.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(2);
/// The longest a message is held back by overload answers in all.
pub(crate) const BUDGET: Duration = Duration::from_secs(15);
/// The wait when an overload answer names none (what engine 3.0 assumes too).
const DEFAULT_WAIT_MS: u64 = 100;

/// An answer to a page message that may be an error.
pub(crate) trait PageAnswer {
    fn error(&self) -> Option<&protocol::SqliteErrorResponse>;
}

macro_rules! page_answer {
    ($($response:ident),* $(,)?) => {$(
        impl PageAnswer for protocol::$response {
            fn error(&self) -> Option<&protocol::SqliteErrorResponse> {
                match self {
                    protocol::$response::SqliteErrorResponse(error) => Some(error),
                    _ => None,
                }
            }
        }
    )*};
}

page_answer!(
    SqliteGetPagesResponse,
    SqliteCommitResponse,
    SqliteCommitStageBeginResponse,
    SqliteCommitStageSegmentResponse,
    SqliteCommitFinalizeResponse,
);

/// The delay an overload answer asks for, or `None` for any other answer.
pub(crate) fn retry_after(error: &protocol::SqliteErrorResponse) -> Option<Duration> {
    if error.group != "depot" || error.code != "overloaded" {
        return None;
    }
    let hint = error.message.split_once("retry_after_ms=").and_then(|(_, rest)| {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        rest[..digits].parse::<u64>().ok()
    });
    Some(Duration::from_millis(hint.unwrap_or(DEFAULT_WAIT_MS)))
}

/// Sends with `send` until the answer is not an overload refusal or the
/// budget is spent. `may_send` is asked before each resend (a generation
/// that can no longer write stops there, with the last answer).
pub(crate) async fn resend<R, F, Fut>(what: &'static str, mut send: F, may_send: impl Fn() -> bool) -> Result<R>
where
    R: PageAnswer,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R>>,
{
    let deadline = Instant::now() + BUDGET;
    let mut refusals = 0u32;
    loop {
        let answer = send().await?;
        let Some(wait) = answer.error().and_then(retry_after) else {
            if refusals > 0 {
                tracing::debug!(what, refusals, "page message accepted after overload answers");
            }
            return Ok(answer);
        };
        refusals += 1;
        let wait = wait.min(MAX_WAIT);
        if Instant::now() + wait > deadline || !may_send() {
            tracing::warn!(what, refusals, "page message still refused for overload; giving up");
            return Ok(answer);
        }
        tracing::debug!(
            what,
            refusals,
            wait_ms = wait.as_millis() as u64,
            "page message refused for overload; sending it again"
        );
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(group: &str, code: &str, message: &str) -> protocol::SqliteErrorResponse {
        protocol::SqliteErrorResponse { group: group.into(), code: code.into(), message: message.into() }
    }

    #[test]
    fn the_delay_comes_from_the_message() {
        let refused = "volume write refused before dispatch (reason=write_refused, retry_after_ms=500)";
        assert_eq!(retry_after(&error("depot", "overloaded", refused)), Some(Duration::from_millis(500)));
        assert_eq!(retry_after(&error("depot", "overloaded", "busy")), Some(Duration::from_millis(100)));
        assert_eq!(retry_after(&error("depot", "head_fence_mismatch", "retry_after_ms=5")), None);
        assert_eq!(retry_after(&error("actor", "overloaded", "retry_after_ms=5")), None);
    }
}
