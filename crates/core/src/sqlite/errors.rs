//! The structured errors of actor databases, and how failures of the page
//! store client become them (docs/sqlite.md, "Errors").
//!
//! A statement that SQLite itself rejects (a constraint, a syntax error, a
//! type mismatch) is not ours to classify: it stays an unstructured error
//! whose text is SQLite's message, so it reaches JavaScript as
//! `core.internal_error` with that message in `metadata.error`, exactly as
//! the reference addon reports it; we put the actor and the statement in
//! front of it (`SQLite statement `...` of actor ...: no such table: t`).

use depot_client::query::SqliteStatementError;
use depot_client::worker::{
    SqliteWorkerCloseTimeoutError, SqliteWorkerClosingError, SqliteWorkerDeadError, SqliteWorkerFatalError,
    SqliteWorkerOverloadedError, SQLITE_WORKER_QUEUE_CAPACITY,
};
use serde_json::json;

use crate::error::{catalog, RivetError};

/// `sqlite.closed`: the database was closed (`close()`, or a fatal storage
/// error); `reason` says which.
pub fn closed(reason: &str) -> RivetError {
    RivetError::new(crate::error_codes::SQLITE_CLOSED, format!("The actor's SQLite database is closed: {reason}."))
        .with_metadata(json!({ "reason": reason }))
}

/// `sqlite.unavailable`: this host has no page store to open it on.
pub fn unavailable() -> RivetError {
    RivetError::new(
        crate::error_codes::SQLITE_UNAVAILABLE,
        "The actor's SQLite database is not available on this host.",
    )
}

/// `sqlite.open_failed`: the page store refused or failed the open.
pub fn open_failed(error: &anyhow::Error) -> RivetError {
    RivetError::new(crate::error_codes::SQLITE_OPEN_FAILED, "The actor's SQLite database could not be opened.")
        .with_metadata(json!({ "error": format!("{error:#}") }))
}

/// `sqlite.transaction_expired`: the transaction outlived its timeout and
/// was rolled back.
pub fn transaction_expired(timeout_ms: u64) -> RivetError {
    RivetError::new(
        crate::error_codes::SQLITE_TRANSACTION_EXPIRED,
        format!("The SQLite transaction was rolled back after its timeout of {timeout_ms} ms."),
    )
    .with_metadata(json!({ "timeout_ms": timeout_ms }))
}

/// `sqlite.transaction_finished`: a statement, commit or rollback on a
/// transaction that already ended (`state`: committed, rolled_back, closed).
pub fn transaction_finished(state: &str) -> RivetError {
    RivetError::new(
        crate::error_codes::SQLITE_TRANSACTION_FINISHED,
        format!("The SQLite transaction is already {state}."),
    )
    .with_metadata(json!({ "state": state }))
}

/// Too many statements waiting for this database (`actor.overloaded`).
pub fn overloaded(capacity: usize) -> RivetError {
    catalog::actor_overloaded("sqlite", "run a SQLite statement", capacity)
}

/// What a failure of the page store client becomes: [`Mapped::Fatal`]
/// means the database can no longer be used in this generation.
pub(crate) enum Mapped {
    /// Return as is (SQLite's own error, or one already structured).
    Plain(anyhow::Error),
    /// The worker died or the storage fenced this generation off.
    Fatal(anyhow::Error, String),
}

pub(crate) fn map(err: anyhow::Error) -> Mapped {
    if err.downcast_ref::<SqliteWorkerOverloadedError>().is_some() {
        return Mapped::Plain(overloaded(SQLITE_WORKER_QUEUE_CAPACITY).into_anyhow());
    }
    if let Some(fatal) = err.downcast_ref::<SqliteWorkerFatalError>() {
        let message = format!("SQLite storage failed: {}", fatal.message());
        let err = closed("its storage failed")
            .with_metadata(json!({ "reason": "its storage failed", "error": fatal.message() }))
            .into_anyhow();
        return Mapped::Fatal(err, message);
    }
    if err.downcast_ref::<SqliteWorkerDeadError>().is_some()
        || err.downcast_ref::<SqliteWorkerCloseTimeoutError>().is_some()
    {
        return Mapped::Fatal(closed("its worker stopped").into_anyhow(), format!("SQLite worker failed: {err:#}"));
    }
    if err.downcast_ref::<SqliteWorkerClosingError>().is_some() {
        return Mapped::Plain(closed("it is closing").into_anyhow());
    }
    Mapped::Plain(err)
}

/// The SQLite result code of a statement error, if it is one.
pub fn sqlite_code(err: &anyhow::Error) -> Option<i32> {
    err.downcast_ref::<SqliteStatementError>().map(|e| e.code)
}

/// At most [`EXCERPT_CHARS`] characters of `sql` on one line, for messages.
pub fn excerpt(sql: &str) -> String {
    let line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// How much of a statement an error message quotes.
pub const EXCERPT_CHARS: usize = 120;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_one_line_and_bounded() {
        assert_eq!(excerpt("SELECT *\n  FROM t\tWHERE x = 1"), "SELECT * FROM t WHERE x = 1");
        let long = "x".repeat(EXCERPT_CHARS + 10);
        assert_eq!(excerpt(&long), format!("{}...", "x".repeat(EXCERPT_CHARS)));
        assert_eq!(excerpt("é".repeat(EXCERPT_CHARS).as_str()), "é".repeat(EXCERPT_CHARS));
    }
}
