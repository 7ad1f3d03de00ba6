//! `JsActorStateTransaction` (from `ActorContext.beginStateTransaction()`):
//! SQL statements and the actor state committed together (RivetKit's
//! `db.transaction(fn, { experimental: { includeState: true } })`). The
//! core's `actor::state_transaction` makes SQLite the commit point
//! (docs/sqlite.md).

use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::state_transaction::StateTransaction;

use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args::{self, ArgResult};
use crate::bridge::types::StateDeltaPayload;
use crate::classes::sqlite::{bind_params, execute_result, read_or_reject, NativeExecuteResult};

/// An open state transaction.
#[napi]
pub struct JsActorStateTransaction {
    tx: StateTransaction,
}

impl From<StateTransaction> for JsActorStateTransaction {
    fn from(tx: StateTransaction) -> Self {
        Self { tx }
    }
}

#[napi]
impl JsActorStateTransaction {
    /// Runs one statement inside the transaction.
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        sql: Unknown<'env>,
        params: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, NativeExecuteResult>> {
        let (sql, params) = read_or_reject!(env, Ok((args::string("sql", sql)?, bind_params("params", params)?)));
        let tx = self.tx.clone();
        spawn_promise(env, async move { Ok(execute_result(tx.execute(sql, params).await?)) })
    }

    /// Commits the statements and `payload.state` (the current state when
    /// absent) together; on a failure before the commit point everything
    /// is rolled back.
    #[napi(ts_args_type = "payload: StateDeltaPayload", ts_return_type = "Promise<void>")]
    pub fn commit<'env>(&self, env: &'env Env, payload: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let payload: StateDeltaPayload = read_or_reject!(env, args::object("payload", payload));
        let tx = self.tx.clone();
        spawn_promise(env, async move { tx.commit(payload.state.map(|s| s.0)).await })
    }

    /// Rolls back (a no-op once it rolled back or timed out).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn rollback<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let tx = self.tx.clone();
        spawn_promise(env, async move { tx.rollback().await })
    }
}
