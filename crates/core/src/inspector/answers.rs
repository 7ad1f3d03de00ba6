//! What the inspector WebSocket answers, read from the actor
//! (docs/inspector.md): connection details, the queue's messages, the
//! schedules, the workflow history (asked of the host) and the database's
//! schema and rows (read-only statements on the actor's own database).
//! Shapes follow the reference's encodings (CBOR where the protocol carries
//! opaque `data`).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::wire::{Connection, Init, QueueMessageSummary, QueueStatus, Schedule, ScheduleError, ScheduleFire};
use crate::actor::{cron, schedule, ActorConfig, ActorContext, ActorTaskHandle, HttpRequest};
use crate::error::RivetError;
use crate::sqlite::{BindParam, ColumnValue, ExecuteResult};

/// Most queue messages a `QueueRequest` lists.
pub const MAX_QUEUE_LIMIT: u64 = 200;
/// Most rows a `DatabaseTableRowsRequest` returns.
pub const MAX_ROWS: u64 = 500;
/// Bounds of a `ScheduleHistoryRequest`'s limit.
const HISTORY_LIMIT: (u64, u64) = (1, 1_000);

fn cbor(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing a JSON value to a Vec cannot fail.
    let _ = ciborium::into_writer(value, &mut out);
    out
}

/// CBOR bytes as JSON, `null` when empty or undecodable.
fn json_of(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    ciborium::from_reader::<Value, _>(bytes).unwrap_or(Value::Null)
}

fn uint(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// The connections with their details: a CBOR map of the connection's
/// params and state (decoded, `null` if not CBOR), its subscription count
/// and whether it is hibernatable.
pub fn connections(ctx: &ActorContext) -> Vec<Connection> {
    ctx.conns()
        .list()
        .iter()
        .map(|conn| Connection {
            id: conn.id().to_string(),
            details: cbor(&json!({
                "type": Value::Null,
                "params": json_of(conn.params()),
                "stateEnabled": true,
                "state": json_of(&conn.state()),
                "subscriptions": conn.subscription_count(),
                "isHibernatable": conn.is_hibernatable(),
            })),
        })
        .collect()
}

/// The saved state, `None` when the actor keeps none or has none yet
/// (an empty payload is not CBOR).
pub fn state(ctx: &ActorContext, config: &ActorConfig) -> Option<Vec<u8>> {
    Some(ctx.state()).filter(|s| config.has_state && !s.is_empty())
}

/// The queue: its size and its first `limit` messages (at most 200).
pub fn queue_status(ctx: &ActorContext, limit: u64) -> QueueStatus {
    let limit = usize::try_from(limit.min(MAX_QUEUE_LIMIT)).unwrap_or(0);
    let headers = ctx.queue().headers();
    QueueStatus {
        size: headers.len() as u64,
        max_size: ctx.queue().limits().max_size as u64,
        truncated: headers.len() > limit,
        messages: headers
            .into_iter()
            .take(limit)
            .map(|h| QueueMessageSummary { id: h.id, name: h.name, created_at_ms: uint(h.created_at) })
            .collect(),
    }
}

/// The pending events (kind `at`) and the cron jobs, soonest first.
pub fn schedules(ctx: &ActorContext) -> Vec<Schedule> {
    let events = ctx.schedule().list().into_iter().map(|event| Schedule {
        id: event.id,
        name: None,
        kind: "at".into(),
        action: event.action,
        args: event.args,
        next_run_at: uint(event.run_at),
        last_run_at: None,
        expression: None,
        timezone: None,
        interval_ms: None,
        max_history: None,
    });
    let jobs = ctx.schedule().cron().list().into_iter().map(|job| {
        let (expression, timezone, interval_ms) = match &job.cadence {
            cron::Cadence::Cron { expression, timezone } => (Some(expression.clone()), Some(timezone.clone()), None),
            cron::Cadence::Every { interval_ms } => (None, None, Some(uint(*interval_ms))),
        };
        Schedule {
            id: job.name.clone(),
            kind: job.cadence.kind().into(),
            name: Some(job.name),
            action: job.action,
            args: job.args,
            next_run_at: uint(job.next_run_at),
            last_run_at: job.last_run_at.map(uint),
            expression,
            timezone,
            interval_ms,
            max_history: Some(u64::from(job.max_history)),
        }
    });
    let mut all: Vec<Schedule> = events.chain(jobs).collect();
    all.sort_by(|a, b| a.next_run_at.cmp(&b.next_run_at).then_with(|| a.id.cmp(&b.id)));
    all
}

/// A cron job's last fires, newest first (`limit` clamped to 1..=1000).
pub async fn schedule_history(ctx: &ActorContext, name: &str, limit: u64) -> anyhow::Result<Vec<ScheduleFire>> {
    let limit = limit.clamp(HISTORY_LIMIT.0, HISTORY_LIMIT.1) as u32;
    Ok(cron::history(ctx, name, limit)
        .await?
        .into_iter()
        .map(|fire| ScheduleFire {
            action: fire.action,
            scheduled_at: uint(fire.scheduled_at),
            fired_at: uint(fire.fired_at),
            finished_at: fire.finished_at.map(uint),
            result: fire.result.as_str().into(),
            error: fire.error.map(|e| ScheduleError {
                group: e.group,
                code: e.code,
                message: e.message,
                metadata: e.metadata.as_ref().map(cbor),
            }),
        })
        .collect())
}

/// Cancels an event (`at`) or deletes a cron job (`cron`, `every`).
pub async fn schedule_delete(ctx: &ActorContext, id: &str, kind: &str) -> anyhow::Result<bool> {
    match kind {
        "at" => schedule::cancel(ctx, id).await,
        "cron" | "every" => cron::delete(ctx, id).await,
        kind => Err(RivetError::new(
            crate::error_codes::INSPECTOR_INVALID_REQUEST,
            format!("invalid schedule kind {kind:?}; expected \"at\", \"cron\" or \"every\""),
        )
        .into_anyhow()),
    }
}

fn workflow_timed_out(timeout: Duration) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::INSPECTOR_WORKFLOW_TIMED_OUT,
        format!("the workflow history was not returned within {} ms", timeout.as_millis()),
    )
    .into_anyhow()
}

/// The workflow's history as the host encodes it, and whether the actor
/// has a workflow at all (the host defines `getWorkflowHistory` only then).
pub async fn workflow_history(ctx: &ActorContext, timeout: Duration) -> anyhow::Result<(bool, Option<Vec<u8>>)> {
    let Some(call) = ctx.hooks().and_then(|hooks| hooks.workflow_history(ctx)) else {
        return Ok((false, None));
    };
    let history = tokio::time::timeout(timeout, call).await.map_err(|_| workflow_timed_out(timeout))??;
    Ok((true, history))
}

/// Replays the workflow from `entry_id` and returns its history, as
/// [`workflow_history`]; every inspector socket of the actor then gets the
/// new history (`WorkflowHistoryUpdated`), as from the reference.
pub async fn workflow_replay(
    ctx: &ActorContext,
    entry_id: Option<String>,
    timeout: Duration,
) -> anyhow::Result<(bool, Option<Vec<u8>>)> {
    let Some(call) = ctx.hooks().and_then(|hooks| hooks.replay_workflow(ctx, entry_id)) else {
        return Ok((false, None));
    };
    let history = tokio::time::timeout(timeout, call).await.map_err(|_| workflow_timed_out(timeout))??;
    ctx.inspector().workflow_changed();
    Ok((true, history))
}

/// Replaces the actor's state. The state lives in the host's runtime, so
/// the new one goes the way the dashboard's HTTP patch goes: RivetKit's
/// `PATCH /inspector/state` (served in `onRequest`) with the state as JSON
/// and the inspector's token; it sets the state and saves it at once.
pub async fn patch_state(handle: &ActorTaskHandle, state: &[u8]) -> anyhow::Result<()> {
    let invalid = |reason: String| RivetError::new(crate::error_codes::INSPECTOR_INVALID_REQUEST, reason).into_anyhow();
    let value: Value =
        ciborium::from_reader(state).map_err(|err| invalid(format!("the new state is not CBOR as JSON: {err}")))?;
    let token = super::expected_token(handle.context())
        .ok_or_else(|| invalid("the actor has no inspector token yet".into()))?;
    let request = HttpRequest {
        method: "PATCH".into(),
        uri: "/inspector/state".into(),
        headers: HashMap::from([
            ("authorization".to_string(), format!("Bearer {token}")),
            ("content-type".to_string(), "application/json".to_string()),
        ]),
        body: serde_json::to_vec(&json!({ "state": value }))?,
        ..HttpRequest::default()
    };
    let response = handle.http(request).await?;
    if !(200..300).contains(&response.status) {
        return Err(RivetError::new(
            crate::error_codes::INSPECTOR_PATCH_FAILED,
            format!(
                "the runtime refused the new state ({}): {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ),
        )
        .into_anyhow());
    }
    Ok(())
}

/// `Init`: everything the inspector shows on open.
pub async fn init(ctx: &ActorContext, config: &ActorConfig) -> Init {
    let (is_workflow_enabled, workflow_history) =
        workflow_history(ctx, config.action_timeout).await.unwrap_or_else(|err| {
            tracing::warn!(error = %format!("{err:#}"), "no workflow history for the inspector");
            (true, None)
        });
    Init {
        connections: connections(ctx),
        state: state(ctx, config),
        is_state_enabled: config.has_state,
        rpcs: config.actions.clone(),
        is_database_enabled: config.has_database,
        queue_size: ctx.queue().len() as u64,
        workflow_history,
        is_workflow_enabled,
        tab_config: config
            .inspector_tabs
            .iter()
            .map(|tab| super::wire::TabConfigEntry {
                id: tab.id.clone(),
                label: tab.label.clone(),
                icon: tab.icon.clone(),
                hidden: tab.hidden,
            })
            .collect(),
        schedules: schedules(ctx),
    }
}

// --- the database ------------------------------------------------------------

/// `"name"`, with inner quotes doubled: a table name as an SQL identifier.
pub fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn column_json(value: &ColumnValue) -> Value {
    match value {
        ColumnValue::Null => Value::Null,
        ColumnValue::Integer(n) => Value::from(*n),
        ColumnValue::Float(f) => Value::from(*f),
        ColumnValue::Text(s) => Value::String(s.clone()),
        ColumnValue::Blob(bytes) => Value::Array(bytes.iter().map(|b| Value::from(*b)).collect()),
    }
}

/// Rows as JSON objects keyed by column name.
pub fn rows_json(result: &ExecuteResult) -> Value {
    Value::Array(
        result
            .rows
            .iter()
            .map(|row| {
                let object: Map<String, Value> = result
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(i, column)| (column.clone(), row.get(i).map_or(Value::Null, column_json)))
                    .collect();
                Value::Object(object)
            })
            .collect(),
    )
}

async fn query(ctx: &ActorContext, sql: String, params: Option<Vec<BindParam>>) -> anyhow::Result<Value> {
    Ok(rows_json(&ctx.sqlite().execute(sql, params).await?))
}

/// The tables and views with their columns, foreign keys and row counts
/// (CBOR), the reference's selection: the workflow table `_rivet_wf_kv`
/// is listed, as the reference lists its `_rivet_*` tables. An actor
/// without a database (`hasDatabase` false) has none, and its database is
/// not opened.
pub async fn database_schema(ctx: &ActorContext, config: &ActorConfig) -> anyhow::Result<Vec<u8>> {
    if !config.has_database {
        return Ok(cbor(&json!({ "tables": [] })));
    }
    let listed = query(
        ctx,
        "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') \
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '__drizzle_%' ORDER BY name"
            .into(),
        None,
    )
    .await?;
    let mut tables = Vec::new();
    for entry in listed.as_array().into_iter().flatten() {
        let Some(name) = entry.get("name").and_then(Value::as_str) else { continue };
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("table");
        let quoted = quote_identifier(name);
        let columns = query(ctx, format!("PRAGMA table_info({quoted})"), None).await?;
        let foreign_keys = query(ctx, format!("PRAGMA foreign_key_list({quoted})"), None).await?;
        let counted = query(ctx, format!("SELECT COUNT(*) AS count FROM {quoted}"), None).await?;
        let records = counted
            .as_array()
            .and_then(|rows| rows.first())
            .and_then(|row| row.get("count"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        tables.push(json!({
            "table": { "schema": "main", "name": name, "type": kind },
            "columns": columns,
            "foreignKeys": foreign_keys,
            "records": records,
        }));
    }
    Ok(cbor(&json!({ "tables": tables })))
}

/// Up to 500 rows of `table` from `offset`, as CBOR objects by column.
/// Without a database there are no rows (and nothing is opened).
pub async fn database_rows(
    ctx: &ActorContext,
    config: &ActorConfig,
    table: &str,
    limit: u64,
    offset: u64,
) -> anyhow::Result<Vec<u8>> {
    if !config.has_database {
        return Ok(cbor(&json!([])));
    }
    let limit = limit.min(MAX_ROWS) as i64;
    let offset = offset.min(u64::from(u32::MAX)) as i64;
    let rows = query(
        ctx,
        format!("SELECT * FROM {} LIMIT ? OFFSET ?", quote_identifier(table)),
        Some(vec![BindParam::Integer(limit), BindParam::Integer(offset)]),
    )
    .await?;
    Ok(cbor(&rows))
}

#[cfg(test)]
#[path = "answers_tests.rs"]
mod tests;
