//! Plain data objects shared between JavaScript and Rust (`#[napi(object)]`).

use std::collections::HashMap;

use napi::bindgen_prelude::Buffer;
use napi_derive::napi;

/// One segment of an actor key.
#[napi(object)]
pub struct JsActorKeySegment {
    /// `"string"` or `"number"`.
    #[napi(ts_type = "'string' | 'number'")]
    pub kind: String,
    pub string_value: Option<String>,
    pub number_value: Option<f64>,
}

/// A raw HTTP request as the actor sees it (path relative to the actor).
#[napi(object)]
pub struct JsHttpRequest {
    pub method: String,
    pub uri: String,
    pub headers: Option<HashMap<String, String>>,
    pub body: Option<Buffer>,
}

/// What `onRequest` resolves to. `status` defaults to 200.
#[napi(object)]
pub struct JsHttpResponse {
    pub status: Option<u32>,
    pub headers: Option<HashMap<String, String>>,
    pub body: Option<Buffer>,
    /// Streamed bodies are not supported yet; `true` is refused.
    pub stream: Option<bool>,
}

/// A registry route answer (`health`, `metadata`, `metrics`).
#[napi(object)]
pub struct JsRegistryRouteResponse {
    pub status: u32,
    pub headers: HashMap<String, String>,
    pub body: Buffer,
}

/// One hibernatable connection's persisted bytes.
#[napi(object)]
pub struct StateDeltaConnHibernationEntry {
    pub conn_id: String,
    pub bytes: Buffer,
}

/// What `saveState` persists: the new state (if it changed) and
/// hibernatable-connection changes.
#[napi(object)]
pub struct StateDeltaPayload {
    pub state: Option<Buffer>,
    pub conn_hibernation: Option<Vec<StateDeltaConnHibernationEntry>>,
    pub conn_hibernation_removed: Option<Vec<String>>,
}

/// A `#[napi(object)]` value that must really be an object. napi-rs reads
/// object fields from any value (a string has no `status`, so it would
/// become an empty response); a callback that returns the wrong type must
/// instead fail with `napi.invalid_return`.
pub struct Checked<T>(pub T);

impl<T: napi::bindgen_prelude::FromNapiValue> napi::bindgen_prelude::FromNapiValue for Checked<T> {
    unsafe fn from_napi_value(env: napi::sys::napi_env, value: napi::sys::napi_value) -> napi::Result<Self> {
        let mut kind = 0;
        let status = unsafe { napi::sys::napi_typeof(env, value, &mut kind) };
        if status != napi::sys::Status::napi_ok {
            return Err(napi::Error::new(napi::Status::InvalidArg, "could not read the value's type".to_string()));
        }
        if kind != napi::sys::ValueType::napi_object {
            let found = match kind {
                napi::sys::ValueType::napi_undefined => "undefined",
                napi::sys::ValueType::napi_null => "null",
                napi::sys::ValueType::napi_boolean => "a boolean",
                napi::sys::ValueType::napi_number => "a number",
                napi::sys::ValueType::napi_string => "a string",
                napi::sys::ValueType::napi_function => "a function",
                _ => "a non-object value",
            };
            return Err(napi::Error::new(napi::Status::ObjectExpected, format!("expected an object, got {found}")));
        }
        unsafe { T::from_napi_value(env, value) }.map(Checked)
    }
}
