//! The inspector's native entry points (docs/inspector.md): the bearer-token
//! check and the summary counters on `ActorContext` (RivetKit's runtime
//! serves the inspector's HTTP routes itself and calls these), and the
//! conversions of inspector frames between protocol versions 1 to 6.

use napi::bindgen_prelude::{Buffer, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use rivetkit_native_core::inspector;

use super::handle::ActorContext;
use crate::bridge::error;

/// A request of `advertisedVersion` (1-6) as a current (version 6) request.
/// Throws `inspector.unsupported_version` or `inspector.invalid_message`.
#[napi]
pub fn decode_inspector_request(env: &Env, bytes: Buffer, advertised_version: u32) -> napi::Result<Buffer> {
    let version = u16::try_from(advertised_version).unwrap_or(u16::MAX);
    inspector::versions::upgrade_request(&bytes, version).map(Buffer::from).map_err(|err| error::to_js_error(env, err))
}

/// A current (version 6) message as a message of `targetVersion` (1-6).
/// Throws `inspector.unsupported_version` or `inspector.invalid_message`.
#[napi]
pub fn encode_inspector_response(env: &Env, bytes: Buffer, target_version: u32) -> napi::Result<Buffer> {
    let version = u16::try_from(target_version).unwrap_or(u16::MAX);
    inspector::versions::downgrade_message(&bytes, version)
        .map(Buffer::from)
        .map_err(|err| error::to_js_error(env, err))
}

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
    /// Same as the free function `decodeInspectorRequest`.
    #[napi]
    pub fn decode_inspector_request(&self, env: &Env, bytes: Buffer, advertised_version: u32) -> napi::Result<Buffer> {
        decode_inspector_request(env, bytes, advertised_version)
    }

    /// Same as the free function `encodeInspectorResponse`.
    #[napi]
    pub fn encode_inspector_response(&self, env: &Env, bytes: Buffer, target_version: u32) -> napi::Result<Buffer> {
        encode_inspector_response(env, bytes, target_version)
    }

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
