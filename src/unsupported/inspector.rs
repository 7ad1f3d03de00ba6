//! Inspector entry points of `@rivetkit/rivetkit-napi` (the free
//! functions here; the `ActorContext` methods live in `actor_context.rs`).
//! The actor inspector is not built yet: they throw
//! `rivetkit-native.unsupported` (see [`super`]).

use napi::Env;
use napi_derive::napi;

use super::fail;

#[napi(object)]
pub struct JsInspectorSnapshot {
    pub state_revision: i64,
    pub connections_revision: i64,
    pub queue_revision: i64,
    pub active_connections: u32,
    pub queue_size: u32,
    pub connected_clients: u32,
}

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
