//! `JsNativeDatabase`, `JsSqliteTransaction`, `JsActorStateTransaction`
//! (`ctx.sql()`, `ctx.beginStateTransaction()`): declared for
//! compatibility; the actor SQLite database is not built yet, so every
//! statement rejects with `rivetkit-native.unsupported` (see [`super`]).
//! `takeLastKvError()`/`metrics()` answer `null` and `close()` resolves,
//! since there is nothing open.

use napi::bindgen_prelude::{Buffer, Null, PromiseRaw};
use napi::Env;
use napi_derive::napi;

use super::reject;
use crate::actor_context::ActorContext;
use crate::error::spawn_promise;

#[napi(object)]
pub struct JsBindParam {
    pub kind: String,
    pub int_value: Option<i64>,
    pub float_value: Option<f64>,
    pub text_value: Option<String>,
    pub blob_value: Option<Buffer>,
}

#[napi(object)]
pub struct ExecuteResult {
    pub changes: i64,
}

#[napi(object)]
pub struct QueryResult {
    pub columns: Vec<String>,
    #[napi(ts_type = "Array<Array<unknown>>")]
    pub rows: Vec<Vec<serde_json::Value>>,
}

#[napi(object)]
pub struct NativeExecuteResult {
    pub columns: Vec<String>,
    #[napi(ts_type = "Array<Array<unknown>>")]
    pub rows: Vec<Vec<serde_json::Value>>,
    pub changes: i64,
    pub last_insert_row_id: Option<i64>,
}

#[napi(object)]
pub struct JsSqliteBatchStatement {
    pub sql: String,
    pub params: Option<Vec<JsBindParam>>,
}

#[napi(object)]
pub struct JsSqliteVfsMetrics {
    pub request_build_ns: i64,
    pub serialize_ns: i64,
    pub transport_ns: i64,
    pub state_update_ns: i64,
    pub total_ns: i64,
    pub commit_count: i64,
    pub page_cache_entries: i64,
    pub page_cache_weighted_size: i64,
    pub page_cache_capacity_pages: i64,
    pub write_buffer_dirty_pages: i64,
    pub db_size_pages: i64,
}

/// The actor's SQLite database (not supported yet).
#[napi]
pub struct JsNativeDatabase {}

#[napi]
impl JsNativeDatabase {
    /// Always `null`: no KV-backed VFS runs.
    #[napi(ts_return_type = "string | null")]
    pub fn take_last_kv_error(&self) -> Null {
        Null
    }

    /// Always `null`: no VFS metrics.
    #[napi(ts_return_type = "JsSqliteVfsMetrics | null")]
    pub fn metrics(&self) -> Null {
        Null
    }

    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<ExecuteResult>"
    )]
    pub fn run<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.run)")
    }

    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<QueryResult>"
    )]
    pub fn query<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.query)")
    }

    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.execute)")
    }

    #[napi(
        ts_args_type = "statements: Array<JsSqliteBatchStatement>",
        ts_return_type = "Promise<Array<NativeExecuteResult>>"
    )]
    pub fn execute_batch<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.executeBatch)")
    }

    #[napi(ts_args_type = "sql: string", ts_return_type = "Promise<QueryResult>")]
    pub fn exec<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.exec)")
    }

    /// Resolves: nothing is open.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        spawn_promise(env, async { Ok(()) })
    }

    #[napi(
        ts_args_type = "timeoutMs?: number | undefined | null, name?: string | undefined | null",
        ts_return_type = "Promise<JsSqliteTransaction>"
    )]
    pub fn begin_transaction<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsNativeDatabase.beginTransaction)")
    }
}

/// A SQLite transaction (never handed out yet).
#[napi]
pub struct JsSqliteTransaction {}

#[napi]
impl JsSqliteTransaction {
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsSqliteTransaction.execute)")
    }

    #[napi(ts_args_type = "sql: string", ts_return_type = "Promise<QueryResult>")]
    pub fn exec<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsSqliteTransaction.exec)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn commit<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsSqliteTransaction.commit)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn rollback<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsSqliteTransaction.rollback)")
    }
}

/// A state + SQLite transaction (never handed out yet).
#[napi]
pub struct JsActorStateTransaction {}

#[napi]
impl JsActorStateTransaction {
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsActorStateTransaction.execute)")
    }

    #[napi(ts_args_type = "payload: StateDeltaPayload", ts_return_type = "Promise<void>")]
    pub fn commit<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsActorStateTransaction.commit)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn rollback<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (JsActorStateTransaction.rollback)")
    }
}

/// `ctx.sql()` and `ctx.beginStateTransaction()`.
#[napi]
impl ActorContext {
    /// The actor's SQLite database. Not supported yet: the handle exists,
    /// its statements reject with `rivetkit-native.unsupported`.
    #[napi]
    pub fn sql(&self) -> JsNativeDatabase {
        JsNativeDatabase {}
    }

    /// Not supported yet (needs SQLite): rejects with `rivetkit-native.unsupported`.
    #[napi(ts_args_type = "timeoutMs?: number | undefined | null", ts_return_type = "Promise<JsActorStateTransaction>")]
    pub fn begin_state_transaction<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite (ActorContext.beginStateTransaction)")
    }
}
