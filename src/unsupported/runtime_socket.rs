//! The actor runtime socket (`ctx.provisionActorRuntimeSocket`): not built
//! yet, it rejects with `rivetkit-native.unsupported` (see [`super`]). The
//! inspector itself is in `crate::inspector`.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::reject;
use crate::actor_context::ActorContext;

/// Where the actor runtime socket listens (`provisionActorRuntimeSocket`,
/// not supported yet; declared here with the other runtime-side endpoints).
#[napi(object)]
pub struct JsActorRuntimeSocketEndpointInfo {
    pub path: String,
}

/// `ActorContext`'s runtime socket call.
#[napi]
impl ActorContext {
    /// Not supported yet: rejects with `rivetkit-native.unsupported`.
    #[napi(ts_return_type = "Promise<JsActorRuntimeSocketEndpointInfo>")]
    pub fn provision_actor_runtime_socket<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "The actor runtime socket (provisionActorRuntimeSocket)")
    }
}
