//! The inspector's native entry points on `ActorContext`: the bearer-token
//! check and the summary counters (docs/inspector.md). RivetKit's runtime
//! serves the inspector's HTTP routes itself and calls these.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::inspector;

use crate::actor_context::ActorContext;
use crate::error;

#[napi(object)]
pub struct JsInspectorSnapshot {
    pub state_revision: i64,
    pub connections_revision: i64,
    pub queue_revision: i64,
    pub active_connections: u32,
    pub queue_size: u32,
    pub connected_clients: u32,
}

fn clamp_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[napi]
impl ActorContext {
    /// The actor's revisions and sizes for the inspector's summary.
    #[napi]
    pub fn inspector_snapshot(&self) -> JsInspectorSnapshot {
        let snap = inspector::snapshot(&self.inner);
        JsInspectorSnapshot {
            state_revision: clamp_i64(snap.state_revision),
            connections_revision: clamp_i64(snap.connections_revision),
            queue_revision: clamp_i64(snap.queue_revision),
            active_connections: clamp_u32(snap.active_connections),
            queue_size: clamp_u32(snap.queue_size),
            connected_clients: snap.connected_clients,
        }
    }

    /// Resolves if `bearerToken` is the actor's inspector token; rejects
    /// with `inspector.unauthorized` otherwise.
    #[napi(ts_args_type = "bearerToken?: string | undefined | null", ts_return_type = "Promise<void>")]
    pub fn verify_inspector_auth<'env>(
        &self,
        env: &'env Env,
        bearer_token: Option<String>,
    ) -> napi::Result<PromiseRaw<'env, ()>> {
        match inspector::verify(&self.inner, bearer_token.as_deref()) {
            Ok(()) => error::spawn_promise(env, async { Ok(()) }),
            Err(err) => error::reject(env, err),
        }
    }
}
