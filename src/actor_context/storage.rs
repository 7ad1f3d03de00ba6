//! The actor's stores, each handed out as its class: `kv()`, `sql()` and
//! `beginStateTransaction()` (SQL and state committed together), `queue()`
//! and `schedule()`.

use napi::bindgen_prelude::{PromiseRaw, Unknown};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::actor::state_transaction::StateTransaction;

use super::handle::ActorContext;
use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args::ArgResult;
use crate::classes::kv::Kv;
use crate::classes::queue::Queue;
use crate::classes::schedule::Schedule;
use crate::classes::sqlite::{read_or_reject, timeout, JsNativeDatabase};
use crate::classes::state_transaction::JsActorStateTransaction;

#[napi]
impl ActorContext {
    /// The actor's key-value store, kept apart from the runtime's own data.
    #[napi]
    pub fn kv(&self) -> Kv {
        Kv { ctx: self.inner.clone() }
    }

    /// The actor's SQLite database, stored on the engine. Opens on its
    /// first statement; an actor that never queries pays nothing.
    #[napi]
    pub fn sql(&self) -> JsNativeDatabase {
        JsNativeDatabase { db: self.inner.sqlite().clone() }
    }

    /// Scheduled actions (`after`, `at`, `cancel`, `get`, `list`) and cron
    /// jobs (`cronSet`, `cronEvery`, ...).
    #[napi]
    pub fn schedule(&self) -> Schedule {
        Schedule { ctx: self.inner.clone() }
    }

    /// The actor's message queue.
    #[napi]
    pub fn queue(&self) -> Queue {
        Queue::new(self.inner.clone(), self.ray.clone())
    }

    /// Begins a transaction whose statements commit together with the actor
    /// state. Waits for other transactions and saves; rolled back after
    /// `timeoutMs` (default 60 s) unless committed or rolled back before.
    #[napi(ts_args_type = "timeoutMs?: number | undefined | null", ts_return_type = "Promise<JsActorStateTransaction>")]
    pub fn begin_state_transaction<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, JsActorStateTransaction>> {
        let timeout = read_or_reject!(env, timeout(timeout_ms));
        let ctx = self.inner.clone();
        spawn_promise(
            env,
            async move { Ok(JsActorStateTransaction::from(StateTransaction::begin(&ctx, timeout).await?)) },
        )
    }
}
