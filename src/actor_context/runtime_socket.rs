//! `ctx.provisionActorRuntimeSocket()`: the actor runtime socket
//! (experimental), a thin napi layer over
//! [`rivetkit_native_core::actor::runtime_socket`], which documents it
//! (docs/runtime-socket.md).

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::handle::ActorContext;
use crate::bridge::error::spawn_promise;

/// Where the actor runtime socket listens: the path of a Unix domain
/// socket, valid for this actor generation only.
#[napi(object)]
pub struct JsActorRuntimeSocketEndpointInfo {
    pub path: String,
}

#[napi]
impl ActorContext {
    /// Starts the generation's runtime socket (once; later calls resolve to
    /// the same path). Rejects with `actor_runtime_socket.not_enabled`
    /// unless the actor type set `enableActorRuntimeSocket`,
    /// `actor_runtime_socket.closed` once the generation stopped, and
    /// `actor_runtime_socket.database_unavailable` on a host without a
    /// SQLite page store.
    #[napi(ts_return_type = "Promise<JsActorRuntimeSocketEndpointInfo>")]
    pub fn provision_actor_runtime_socket<'env>(
        &self,
        env: &'env Env,
    ) -> napi::Result<PromiseRaw<'env, JsActorRuntimeSocketEndpointInfo>> {
        let ctx = self.inner.clone();
        spawn_promise(env, async move {
            ctx.provision_runtime_socket().map(|path| JsActorRuntimeSocketEndpointInfo { path })
        })
    }
}
