//! `HttpResponseBodyStream` / `HttpRequestBodyStream`: declared for
//! compatibility; streamed HTTP bodies are not built yet (an `onRequest`
//! answer with `stream: true` is refused), so every method rejects with
//! `rivetkit-native.unsupported` (see [`super`]).

use napi::bindgen_prelude::PromiseRaw;
use napi::Env;
use napi_derive::napi;

use super::reject;

/// JavaScript-facing writer for a streaming actor HTTP response (not
/// supported yet).
#[napi]
pub struct HttpResponseBodyStream {}

#[napi]
impl HttpResponseBodyStream {
    #[napi(ts_return_type = "Promise<void>")]
    pub fn cancelled<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpResponseBodyStream.cancelled)")
    }

    #[napi(ts_args_type = "chunk: Buffer", ts_return_type = "Promise<void>")]
    pub fn write<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpResponseBodyStream.write)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn end<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpResponseBodyStream.end)")
    }

    #[napi(ts_args_type = "message: string", ts_return_type = "Promise<void>")]
    pub fn error<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpResponseBodyStream.error)")
    }
}

/// JavaScript-facing reader for a streaming actor HTTP request (not
/// supported yet).
#[napi]
pub struct HttpRequestBodyStream {}

#[napi]
impl HttpRequestBodyStream {
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn read<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpRequestBodyStream.read)")
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn cancel<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        reject(env, "Streaming HTTP bodies (HttpRequestBodyStream.cancel)")
    }
}
