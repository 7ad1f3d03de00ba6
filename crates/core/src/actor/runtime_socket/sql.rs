//! Between the wire and the database: values both ways, and what a failed
//! statement answers (docs/runtime-socket.md, "Responses").

use depot_client::query::SqliteStatementError;

use super::wire::{QueryOk, ResponsePayload, SqlValue};
use crate::error::RivetError;
use crate::sqlite::limits::STATEMENT_QUEUE_CAPACITY;
use crate::sqlite::{ActorDatabase, BindParam, ColumnValue, ExecuteResult, SqliteTransaction};

/// A statement outside any lease, or inside one.
pub(super) enum Statement {
    Exec { script: String },
    Query { sql: String, params: Vec<SqlValue> },
}

impl Statement {
    /// Runs it on the database, outside any transaction.
    pub(super) async fn run(self, db: &ActorDatabase) -> ResponsePayload {
        let result = match self {
            Statement::Exec { script } => db.exec(script).await.map(|_| ResponsePayload::ExecOk),
            Statement::Query { sql, params } => db.execute(sql, Some(bind(params))).await.map(query_ok),
        };
        result.unwrap_or_else(|err| answer_error(&err))
    }

    /// Runs it inside `tx`.
    pub(super) async fn run_in(self, tx: &SqliteTransaction) -> Result<ResponsePayload, anyhow::Error> {
        match self {
            Statement::Exec { script } => tx.exec(script).await.map(|_| ResponsePayload::ExecOk),
            Statement::Query { sql, params } => tx.execute(sql, Some(bind(params))).await.map(query_ok),
        }
    }
}

fn bind(params: Vec<SqlValue>) -> Vec<BindParam> {
    params
        .into_iter()
        .map(|v| match v {
            SqlValue::Null => BindParam::Null,
            SqlValue::Integer(n) => BindParam::Integer(n),
            SqlValue::Real(f) => BindParam::Float(f),
            SqlValue::Text(s) => BindParam::Text(s),
            SqlValue::Blob(b) => BindParam::Blob(b),
        })
        .collect()
}

fn value(v: ColumnValue) -> SqlValue {
    match v {
        ColumnValue::Null => SqlValue::Null,
        ColumnValue::Integer(n) => SqlValue::Integer(n),
        ColumnValue::Float(f) => SqlValue::Real(f),
        ColumnValue::Text(s) => SqlValue::Text(s),
        ColumnValue::Blob(b) => SqlValue::Blob(b),
    }
}

fn query_ok(result: ExecuteResult) -> ResponsePayload {
    ResponsePayload::QueryOk(QueryOk {
        columns: result.columns,
        rows: result.rows.into_iter().map(|row| row.into_iter().map(value).collect()).collect(),
        changes: result.changes,
        last_insert_row_id: result.last_insert_row_id,
    })
}

/// `InvalidLeaseKey` with `message`.
pub(super) fn invalid_lease(message: impl Into<String>) -> ResponsePayload {
    ResponsePayload::InvalidLeaseKey { message: message.into() }
}

/// What a failure answers:
/// - SQLite's own error: `SqlError` with its result code and statement;
/// - too many statements waiting: `QueueFull`;
/// - the lease's transaction timed out: `LeaseExpired`;
/// - it already ended: `InvalidLeaseKey`;
/// - the database or the generation is closed: `EndpointClosed`;
/// - anything else: `SqlError` with code -1 and the error's message.
pub(super) fn answer_error(err: &anyhow::Error) -> ResponsePayload {
    if let Some(e) = err.downcast_ref::<SqliteStatementError>() {
        return ResponsePayload::SqlError {
            code: e.code,
            statement_index: e.statement_index,
            message: e.message.clone(),
        };
    }
    let e = RivetError::extract(err);
    match (e.group.as_str(), e.code.as_str()) {
        ("actor", "overloaded") => ResponsePayload::QueueFull {
            limit: "sqliteStatementQueue".into(),
            capacity: STATEMENT_QUEUE_CAPACITY as u32,
        },
        ("sqlite", "transaction_expired") => {
            let timeout_ms =
                e.metadata.as_ref().and_then(|m| m.get("timeout_ms")).and_then(|v| v.as_u64()).unwrap_or(0);
            ResponsePayload::LeaseExpired {
                timeout_ms,
                message: format!(
                    "The lease's transaction was rolled back after its timeout of {timeout_ms} ms; \
                     begin a new lease (with a larger timeoutMs if the work needs longer)."
                ),
            }
        }
        ("sqlite", "transaction_finished") => invalid_lease(e.message),
        ("sqlite", "closed" | "unavailable") | ("actor", "stopping") => ResponsePayload::EndpointClosed,
        _ => {
            let message = match e.metadata.as_ref().and_then(|m| m.get("error")).and_then(|v| v.as_str()) {
                Some(inner) if e.group == "core" => inner.to_string(),
                _ => e.message,
            };
            ResponsePayload::SqlError { code: -1, statement_index: 0, message }
        }
    }
}
