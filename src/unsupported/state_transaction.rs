//! `ActorContext.beginStateTransaction()` and `JsActorStateTransaction`:
//! not supported, by design rather than not yet.
//!
//! In the reference addon an actor's state lives in its SQLite database,
//! so a transaction can commit SQL statements and a state delta together.
//! Here the state lives in the actor's KV records and the database on the
//! engine's page store: two stores with no common commit, so a combined
//! commit could not be atomic. RivetKit reaches this only through
//! `db.transaction(fn, { experimental: { includeState: true } })`; the call
//! rejects with `rivetkit-native.unsupported` (docs/sqlite.md).

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::reject;
use crate::actor_context::ActorContext;

/// A state + SQLite transaction (never handed out).
#[napi]
pub struct JsActorStateTransaction {}

#[napi]
impl JsActorStateTransaction {
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite transactions that include the actor state (JsActorStateTransaction.execute)")
    }

    #[napi(ts_args_type = "payload: StateDeltaPayload", ts_return_type = "Promise<void>")]
    pub fn commit<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite transactions that include the actor state (JsActorStateTransaction.commit)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn rollback<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite transactions that include the actor state (JsActorStateTransaction.rollback)")
    }
}

#[napi]
impl ActorContext {
    /// Not supported: the actor state lives in KV and the database on the
    /// page store, so no commit can span both. Rejects with
    /// `rivetkit-native.unsupported` (docs/sqlite.md).
    #[napi(ts_args_type = "timeoutMs?: number | undefined | null", ts_return_type = "Promise<JsActorStateTransaction>")]
    pub fn begin_state_transaction<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "SQLite transactions that include the actor state (ActorContext.beginStateTransaction)")
    }
}
