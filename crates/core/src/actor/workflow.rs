//! Workflow flushes (`saveStateAndWorkflowBatch`): the workflow engine's
//! rows go to the `_rivet_wf_kv` table of the actor's SQLite database,
//! the actor state to KV. The two stores share no transaction, so SQLite
//! is the commit point: each flush writes its rows together with a copy of
//! the serialized state and a revision in one SQLite transaction, then
//! writes the state and that revision to KV in one put. A start that finds
//! a newer revision in SQLite than in KV takes the state from SQLite. See
//! docs/workflows.md.

use crate::actor::keys::WORKFLOW_MARK_KEY;
use crate::actor::{storage, ActorContext, DynHooks};
use crate::sqlite::{BindParam, ColumnValue, SqliteTransaction};

/// RivetKit reads the rows under this prefix (storage area 6, version 1)
/// and hands flushes their keys without it.
pub const WORKFLOW_KEY_PREFIX: &[u8] = &[6, 1];

const CREATE_STATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS _rivet_wf_state \
    (id INTEGER PRIMARY KEY CHECK (id = 1), revision INTEGER NOT NULL, state BLOB NOT NULL)";
const UPSERT_ROW: &str = "INSERT INTO _rivet_wf_kv (key, value) VALUES (?, ?) \
    ON CONFLICT(key) DO UPDATE SET value = excluded.value";
const UPSERT_STATE: &str = "INSERT INTO _rivet_wf_state (id, revision, state) VALUES (1, ?, ?) \
    ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, state = excluded.state";

/// One row of a flush: the key as the workflow engine built it (stored
/// under [`WORKFLOW_KEY_PREFIX`]).
#[derive(Debug, Clone)]
pub struct WorkflowKvWrite {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

async fn read_mark(ctx: &ActorContext) -> anyhow::Result<Option<u64>> {
    let mut values = ctx.link().kv_get(ctx.actor_id(), vec![WORKFLOW_MARK_KEY.to_vec()]).await?;
    Ok(values.pop().flatten().and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map(u64::from_be_bytes))
}

pub(crate) fn mark_entry(revision: u64) -> (Vec<u8>, Vec<u8>) {
    (WORKFLOW_MARK_KEY.to_vec(), revision.to_be_bytes().to_vec())
}

/// The revision KV holds (`mark`, the generation's cached copy, is read or
/// created on first use). The mark exists in KV before the first SQLite
/// copy, so a start after a crash between the two knows to look at SQLite.
pub(crate) async fn known_revision(ctx: &ActorContext, mark: &mut Option<u64>) -> anyhow::Result<u64> {
    let known = match *mark {
        Some(m) => m,
        None => match read_mark(ctx).await? {
            Some(m) => m,
            None => {
                ctx.link().kv_put(ctx.actor_id(), vec![mark_entry(0)], ctx.write_fence().clone()).await?;
                0
            }
        },
    };
    *mark = Some(known);
    Ok(known)
}

/// Serializes the state, commits `writes` and a copy of the state in one
/// SQLite transaction, then saves the state to KV with the new revision.
/// Flushes of one generation run one at a time.
pub async fn save_state_and_batch(
    ctx: &ActorContext,
    hooks: Option<&DynHooks>,
    writes: Vec<WorkflowKvWrite>,
) -> anyhow::Result<()> {
    // The messages a workflow step took are in the rows it flushes: this
    // flush consumes them (the napi layer marks them on the JavaScript
    // thread already; docs/queues-cron.md).
    crate::actor::queue::mark_handled(ctx);
    let mut mark = ctx.persisted().workflow_mark().lock().await;
    ctx.check_writable()?;
    if let Some(hooks) = hooks {
        crate::actor::task::persist::refresh_state(ctx, hooks).await;
    }
    let state = ctx.state();
    let known = known_revision(ctx, &mut mark).await?;
    let revision = commit_to_sqlite(ctx, known, state, writes).await?;
    storage::save_record_with(ctx, vec![mark_entry(revision)]).await?;
    *mark = Some(revision);
    Ok(())
}

/// Step 3 of a flush: the rows and the state copy in one transaction.
/// Returns the new revision.
async fn commit_to_sqlite(
    ctx: &ActorContext,
    known: u64,
    state: Vec<u8>,
    writes: Vec<WorkflowKvWrite>,
) -> anyhow::Result<u64> {
    let db = ctx.sqlite();
    let tx = db.begin_transaction(None).await?;
    let committed = async {
        for write in writes {
            let key = [WORKFLOW_KEY_PREFIX, write.key.as_slice()].concat();
            let params = vec![BindParam::Blob(key), BindParam::Blob(write.value)];
            tx.execute(UPSERT_ROW.to_string(), Some(params)).await?;
        }
        write_state_copy(&tx, known, state).await
    }
    .await;
    match committed {
        Ok(revision) => {
            tx.commit().await?;
            Ok(revision)
        }
        Err(err) => {
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %format!("{rollback:#}"), "rollback after a failed workflow flush");
            }
            Err(err)
        }
    }
}

/// Inside `tx`: the state copy with the next revision (above both what
/// SQLite and KV hold). Returns that revision.
pub(crate) async fn write_state_copy(tx: &SqliteTransaction, known: u64, state: Vec<u8>) -> anyhow::Result<u64> {
    tx.execute(CREATE_STATE_TABLE.to_string(), None).await?;
    let row = tx.execute("SELECT revision FROM _rivet_wf_state WHERE id = 1".to_string(), None).await?;
    let previous = match row.rows.first().and_then(|r| r.first()) {
        Some(ColumnValue::Integer(n)) => *n as u64,
        _ => 0,
    };
    let revision = previous.max(known) + 1;
    let params = vec![BindParam::Integer(revision as i64), BindParam::Blob(state)];
    tx.execute(UPSERT_STATE.to_string(), Some(params)).await?;
    Ok(revision)
}

/// At start: if a flush committed in SQLite but its state never reached
/// KV, replace the loaded state with the SQLite copy and write it to KV.
pub async fn reconcile(
    ctx: &ActorContext,
    record: Option<storage::ActorRecord>,
) -> anyhow::Result<Option<storage::ActorRecord>> {
    let Some(mut record) = record else { return Ok(None) };
    let Some(known) = read_mark(ctx).await? else { return Ok(Some(record)) };
    let db = ctx.sqlite();
    let exists = db
        .execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_rivet_wf_state'".to_string(), None)
        .await?;
    if exists.rows.is_empty() {
        *ctx.persisted().workflow_mark().lock().await = Some(known);
        return Ok(Some(record));
    }
    let row = db.execute("SELECT revision, state FROM _rivet_wf_state WHERE id = 1".to_string(), None).await?;
    let newer = match row.rows.first().map(Vec::as_slice) {
        Some([ColumnValue::Integer(rev), ColumnValue::Blob(state)]) if *rev as u64 > known => {
            Some((*rev as u64, state.clone()))
        }
        _ => None,
    };
    match newer {
        Some((revision, state)) => {
            tracing::info!(revision, known, "restoring the state of a workflow flush that did not reach KV");
            ctx.set_state(state.clone());
            record.state = state;
            storage::save_record_with(ctx, vec![mark_entry(revision)]).await?;
            *ctx.persisted().workflow_mark().lock().await = Some(revision);
        }
        None => *ctx.persisted().workflow_mark().lock().await = Some(known),
    }
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &[u8], value: &[u8]) -> WorkflowKvWrite {
        WorkflowKvWrite { key: key.to_vec(), value: value.to_vec() }
    }

    async fn rows(ctx: &ActorContext) -> usize {
        let result = ctx.sqlite().execute("SELECT key FROM _rivet_wf_kv".to_string(), None).await.unwrap();
        for row in &result.rows {
            assert!(matches!(&row[0], ColumnValue::Blob(k) if k.starts_with(WORKFLOW_KEY_PREFIX)), "prefixed: {row:?}");
        }
        result.rows.len()
    }

    /// A generation that flushed, then one more flush that reached SQLite
    /// only (the host died before the KV put); the next generation sees it.
    #[tokio::test]
    async fn a_flush_that_missed_kv_is_restored_from_sqlite() {
        let first = ActorContext::for_test("wf-crash", 1);
        first.set_state(b"s0".to_vec());
        storage::save_record(&first).await.unwrap();

        first.set_state(b"s1".to_vec());
        save_state_and_batch(&first, None, vec![row(b"step-1", b"done")]).await.unwrap();
        assert_eq!(storage::load_record(&first).await.unwrap().unwrap().state, b"s1");
        assert_eq!(read_mark(&first).await.unwrap(), Some(1));

        // Step 3 of a flush, then the crash.
        let revision = commit_to_sqlite(&first, 1, b"s2".to_vec(), vec![row(b"step-2", b"done")]).await.unwrap();
        assert_eq!(revision, 2);
        first.close_sqlite().await;

        let second = ActorContext::for_test_sharing(&first, 2);
        let record = storage::load_record(&second).await.unwrap();
        assert_eq!(record.as_ref().unwrap().state, b"s1", "KV missed the flush");
        let record = reconcile(&second, record).await.unwrap().unwrap();
        assert_eq!(record.state, b"s2");
        assert_eq!(second.state(), b"s2");
        assert_eq!(storage::load_record(&second).await.unwrap().unwrap().state, b"s2", "written back to KV");
        assert_eq!(read_mark(&second).await.unwrap(), Some(2));
        assert_eq!(rows(&second).await, 2);
    }

    /// Ordinary saves after a flush write KV only; KV stays the newer one.
    #[tokio::test]
    async fn a_later_ordinary_save_wins_over_the_sqlite_copy() {
        let first = ActorContext::for_test("wf-later", 1);
        first.set_state(b"s0".to_vec());
        storage::save_record(&first).await.unwrap();
        first.set_state(b"s1".to_vec());
        save_state_and_batch(&first, None, vec![row(b"step-1", b"done")]).await.unwrap();
        first.set_state(b"s1+action".to_vec());
        storage::save_record(&first).await.unwrap();
        first.close_sqlite().await;

        let second = ActorContext::for_test_sharing(&first, 2);
        let record = storage::load_record(&second).await.unwrap();
        let record = reconcile(&second, record).await.unwrap().unwrap();
        assert_eq!(record.state, b"s1+action");
        assert_eq!(rows(&second).await, 1);
    }

    /// An actor that never flushed a workflow is not looked at.
    #[tokio::test]
    async fn no_mark_no_sqlite() {
        let ctx = ActorContext::for_test("wf-none", 1);
        ctx.set_state(b"s0".to_vec());
        storage::save_record(&ctx).await.unwrap();
        let record = storage::load_record(&ctx).await.unwrap();
        assert_eq!(reconcile(&ctx, record).await.unwrap().unwrap().state, b"s0");
        assert!(!ctx.sqlite().is_open());
    }
}
