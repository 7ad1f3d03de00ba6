//! `HttpRequestBodyStream` / `HttpResponseBodyStream`: the streamed bodies
//! of a raw request, given to `onRequest` as `request.bodyStream` (only
//! for a streamed upload over 64 KiB: the rest after `request.body`) and
//! `responseBodyStream` (always).
//! Answering `{status, headers, stream: true}` sends the head at once; the
//! body follows as JS writes it. The semantics (backpressure, ends, errors)
//! are the core's, documented in docs/streams.md; every promise rejects
//! with a structured error such as `http.stream_closed`.

use napi::bindgen_prelude::{Buffer, PromiseRaw, Uint8Array, Unknown};
use napi::{Env, JsValue};
use napi_derive::napi;
use rivetkit_native_core::actor::http_body::{RequestBodyReader, ResponseBodyWriter};
use rivetkit_native_core::error::RivetError;

use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args::{self, ArgResult};

/// A `Buffer` or any `Uint8Array` (RivetKit writes subarrays).
fn chunk_bytes(value: Unknown<'_>) -> ArgResult<Vec<u8>> {
    if value.is_buffer().unwrap_or(false) {
        return args::bytes("chunk", value);
    }
    if value.is_typedarray().unwrap_or(false) {
        if let Ok(array) = unsafe { value.cast::<Uint8Array>() } {
            return Ok(array.to_vec());
        }
    }
    args::bytes("chunk", value)
}

/// JavaScript-facing writer for a streaming actor HTTP response.
#[napi]
pub struct HttpResponseBodyStream {
    pub(crate) writer: ResponseBodyWriter,
}

#[napi]
impl HttpResponseBodyStream {
    /// Resolves once nobody reads the body any more (the client went away,
    /// or the body was delivered).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn cancelled<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let writer = self.writer.clone();
        spawn_promise(env, async move {
            writer.cancelled().await;
            Ok(())
        })
    }

    /// Queues `chunk`; resolves when there is room for it (backpressure).
    #[napi(ts_args_type = "chunk: Buffer", ts_return_type = "Promise<void>")]
    pub fn write<'env>(&self, env: &'env Env, chunk: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let chunk = match chunk_bytes(chunk) {
            Ok(chunk) => chunk,
            Err(err) => return reject(env, err),
        };
        let writer = self.writer.clone();
        spawn_promise(env, async move { writer.write(&chunk).await.map_err(RivetError::into_anyhow) })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn end<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let writer = self.writer.clone();
        spawn_promise(env, async move { writer.end().await.map_err(RivetError::into_anyhow) })
    }

    /// Ends the body with an error: the client sees the response aborted.
    #[napi(ts_args_type = "message: string", ts_return_type = "Promise<void>")]
    pub fn error<'env>(&self, env: &'env Env, message: Unknown<'env>) -> napi::Result<PromiseRaw<'env, ()>> {
        let message = match args::string("message", message) {
            Ok(message) => message,
            Err(err) => return reject(env, err),
        };
        let writer = self.writer.clone();
        spawn_promise(env, async move { writer.error(message).await.map_err(RivetError::into_anyhow) })
    }
}

/// JavaScript-facing reader for a streaming actor HTTP request.
#[napi]
pub struct HttpRequestBodyStream {
    pub(crate) reader: RequestBodyReader,
}

#[napi]
impl HttpRequestBodyStream {
    /// The next chunk of the upload, `null` at its end.
    #[napi(ts_return_type = "Promise<Buffer | null>")]
    pub fn read<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, Option<Buffer>>> {
        let reader = self.reader.clone();
        spawn_promise(
            env,
            async move { reader.read().await.map(|c| c.map(Buffer::from)).map_err(RivetError::into_anyhow) },
        )
    }

    /// Drops the rest of the upload; a pending `read` resolves `null`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn cancel<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let reader = self.reader.clone();
        spawn_promise(env, async move {
            reader.cancel().await;
            Ok(())
        })
    }
}

/// The `request` of `onRequest`: [`crate::bridge::types::JsHttpRequest`] plus, for
/// a body over 64 KiB, the stream of what follows the prefix in `body`.
#[napi(object, object_from_js = false)]
pub struct JsStreamedHttpRequest {
    pub method: String,
    pub uri: String,
    pub headers: Option<std::collections::HashMap<String, String>>,
    pub body: Option<Buffer>,
    pub body_stream: Option<HttpRequestBodyStream>,
}
