//! The inspector WebSocket's message conversions of `@rivetkit/rivetkit-napi`
//! (`decodeInspectorRequest`, `encodeInspectorResponse`), free functions and
//! `ActorContext` methods, and the actor runtime socket
//! (`ctx.provisionActorRuntimeSocket`). Neither is built yet: they throw or
//! reject with `rivetkit-native.unsupported` (see [`super`]). The token
//! check and the snapshot are in `crate::inspector`.

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::{fail, reject};
use crate::actor_context::ActorContext;

#[napi(ts_args_type = "bytes: Buffer, advertisedVersion: number", ts_return_type = "Buffer")]
pub fn decode_inspector_request(env: &Env) -> napi::Result<()> {
    Err(fail(env, "The inspector (decodeInspectorRequest)"))
}

#[napi(ts_args_type = "bytes: Buffer, targetVersion: number", ts_return_type = "Buffer")]
pub fn encode_inspector_response(env: &Env) -> napi::Result<()> {
    Err(fail(env, "The inspector (encodeInspectorResponse)"))
}

/// Where the actor runtime socket listens (`provisionActorRuntimeSocket`,
/// not supported yet; declared here with the other runtime-side endpoints).
#[napi(object)]
pub struct JsActorRuntimeSocketEndpointInfo {
    pub path: String,
}

/// `ActorContext`'s inspector and runtime socket calls.
#[napi]
impl ActorContext {
    /// Not supported yet: rejects with `rivetkit-native.unsupported`.
    #[napi(ts_return_type = "Promise<JsActorRuntimeSocketEndpointInfo>")]
    pub fn provision_actor_runtime_socket<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "The actor runtime socket (provisionActorRuntimeSocket)")
    }

    /// Not supported yet: throws `rivetkit-native.unsupported`.
    #[napi(ts_args_type = "bytes: Buffer, advertisedVersion: number", ts_return_type = "Buffer")]
    pub fn decode_inspector_request(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "The inspector (ActorContext.decodeInspectorRequest)"))
    }

    /// Not supported yet: throws `rivetkit-native.unsupported`.
    #[napi(ts_args_type = "bytes: Buffer, targetVersion: number", ts_return_type = "Buffer")]
    pub fn encode_inspector_response(&self, env: &Env) -> napi::Result<()> {
        Err(fail(env, "The inspector (ActorContext.encodeInspectorResponse)"))
    }
}
