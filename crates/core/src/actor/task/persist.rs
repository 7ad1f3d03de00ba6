//! Writing the actor record: ask the host for its latest state
//! (`serializeState`), then persist it. Used by throttled saves and by the
//! final save at shutdown.

use std::time::Duration;

use crate::actor::{conn_store, storage, ActorContext, DynHooks, SerializeReason};
use crate::error::{catalog, RivetError};

/// How long `serializeState` may take before the save goes ahead with the
/// state the context already has.
const SERIALIZE_TIMEOUT: Duration = Duration::from_secs(15);

pub(super) async fn save(ctx: &ActorContext, hooks: &DynHooks) -> anyhow::Result<()> {
    if ctx.is_lost() {
        // A lost generation never writes (its successor owns the data), and
        // nothing it changed is durable: gated answers must not leave.
        return Err(catalog::actor_stopping(Some("the generation was lost")).into_anyhow());
    }
    ctx.check_writable()?;
    refresh_state(ctx, hooks).await;
    storage::save_record(ctx).await?;
    save_conn_records(ctx).await
}

/// Asks the host for its latest state (`serializeState`) and keeps it in
/// the context; on a failure or timeout the last known state stays.
pub(crate) async fn refresh_state(ctx: &ActorContext, hooks: &DynHooks) {
    // Messages handled before the call are reflected in what it reads; the
    // napi layer reports the mark at the read itself, which is later.
    let before = ctx.queue().handled_mark();
    if let Some(fut) = hooks.serialize_state(ctx, SerializeReason::Save) {
        match tokio::time::timeout(SERIALIZE_TIMEOUT, fut).await {
            Ok(Ok(delta)) => {
                let mark = delta.queue_mark.unwrap_or(before);
                match delta.state {
                    Some(state) => ctx.set_state_at(state, mark),
                    None => ctx.persisted().raise_mark(mark),
                }
            }
            // RivetKit 3.0 saves the state itself at the end of `onSleep`,
            // then clears the generation's bag: a later `serializeState`
            // throws `actor.stopping`, and the last known state is the
            // one it saved (docs/versions.md). Nothing to warn about.
            Ok(Err(err)) if crate::error::RivetError::extract(&err).qualified_code() == "actor.stopping" => {
                tracing::debug!("serializeState after the generation's state was cleared; saving the last known state")
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %format!("{err:#}"), "serializeState failed; saving the last known state")
            }
            Err(_) => tracing::warn!("serializeState timed out; saving the last known state"),
        }
    } else {
        // No host state to read: the context's is current.
        ctx.persisted().raise_mark(before);
    }
}

/// Writes changed hibernatable-connection records and deletes those of
/// connections that ended. On a failure the changes are kept for the
/// retry, except a record too large to store: it is reported once and
/// written again only when the connection changes.
pub(super) async fn save_conn_records(ctx: &ActorContext) -> anyhow::Result<()> {
    let (dirty, forgotten) = ctx.conns().take_record_changes();
    if dirty.is_empty() && forgotten.is_empty() {
        return Ok(());
    }
    let result = conn_store::write(ctx, &dirty, &forgotten).await;
    if let Err(err) = &result {
        if RivetError::extract(err).qualified_code() != "connection.record_too_large" {
            ctx.conns().restore_record_changes(&dirty, forgotten);
        }
    }
    result
}
