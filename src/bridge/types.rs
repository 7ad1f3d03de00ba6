//! Plain data objects shared between JavaScript and Rust (`#[napi(object)]`).

use std::collections::HashMap;

use napi::bindgen_prelude::{Buffer, BufferSlice, FromNapiValue, ToNapiValue, TypeName, ValidateNapiValue};
use napi::{sys, ValueType};
use napi_derive::napi;

/// Bytes that JavaScript hands back (a `Buffer`: a callback's answer, a
/// field of one), copied out on the JS thread as they are read.
///
/// A napi-rs `Buffer` read from JavaScript keeps a reference to the JS
/// object, and dropping it anywhere but on the JS thread posts the release
/// back to that thread: one more wake-up of the JS thread per action, whose
/// answer is read on the JS thread and used in a runtime task. A copy of a
/// callback's few bytes costs far less.
pub struct JsBytes(pub Vec<u8>);

impl FromNapiValue for JsBytes {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let slice = unsafe { BufferSlice::from_napi_value(env, value) }?;
        Ok(JsBytes(slice.to_vec()))
    }
}

/// Up to this size, bytes handed to JavaScript are copied into a buffer V8
/// owns. A larger one wraps the Rust allocation instead (no copy), at the
/// price of a finalizer the garbage collector must run, which for the few
/// bytes of an action's arguments cost more than the copy.
const COPY_TO_JS_MAX: usize = 16 * 1024;

impl ToNapiValue for JsBytes {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> napi::Result<sys::napi_value> {
        if value.0.is_empty() || value.0.len() > COPY_TO_JS_MAX {
            return unsafe { Buffer::to_napi_value(env, Buffer::from(value.0)) };
        }
        let mut data = std::ptr::null_mut();
        let mut buffer = std::ptr::null_mut();
        napi::check_status!(
            unsafe {
                sys::napi_create_buffer_copy(env, value.0.len(), value.0.as_ptr().cast(), &mut data, &mut buffer)
            },
            "could not copy {} bytes into a Buffer",
            value.0.len()
        )?;
        Ok(buffer)
    }
}

impl TypeName for JsBytes {
    fn type_name() -> &'static str {
        "Buffer"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ValidateNapiValue for JsBytes {
    unsafe fn validate(env: sys::napi_env, value: sys::napi_value) -> napi::Result<sys::napi_value> {
        unsafe { BufferSlice::validate(env, value) }
    }
}

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
    #[napi(ts_type = "Buffer")]
    pub body: Option<JsBytes>,
    /// `true`: the body follows through `responseBodyStream`
    /// (docs/streams.md); `body` is then ignored.
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
    #[napi(ts_type = "Buffer")]
    pub bytes: JsBytes,
}

/// What `saveState` persists: the new state (if it changed) and
/// hibernatable-connection changes.
#[napi(object)]
pub struct StateDeltaPayload {
    #[napi(ts_type = "Buffer")]
    pub state: Option<JsBytes>,
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

/// Arguments read by hand from JavaScript values.
///
/// napi-rs converts typed parameters before our code runs: a wrong type
/// throws its own error (`code: "InvalidArg"`, no group), and numbers
/// convert silently (`NaN` as a `u32` is 0, `-1` is 4294967295). Methods
/// that take times, sizes or bytes therefore accept `Unknown` (with the
/// precise type kept in `index.d.ts` through `ts_args_type`) and read them
/// here: every failure is a `napi.invalid_argument` error naming the
/// argument, and the numbers go through
/// [`rivetkit_native_core::error::validate`].
pub(crate) mod args {
    use napi::bindgen_prelude::{Array, Buffer, FromNapiValue, JsValue, Unknown};
    use napi::ValueType;
    use rivetkit_native_core::error::validate::{self, invalid};
    use rivetkit_native_core::RivetError;

    pub type ArgResult<T> = Result<T, RivetError>;

    /// How a value is described in an error message.
    pub fn type_name(value: &Unknown<'_>) -> &'static str {
        match value.get_type() {
            Ok(ValueType::Undefined) => "undefined",
            Ok(ValueType::Null) => "null",
            Ok(ValueType::Boolean) => "a boolean",
            Ok(ValueType::Number) => "a number",
            Ok(ValueType::String) => "a string",
            Ok(ValueType::Symbol) => "a symbol",
            Ok(ValueType::BigInt) => "a bigint",
            Ok(ValueType::Function) => "a function",
            Ok(ValueType::Object) if value.is_array().unwrap_or(false) => "an array",
            Ok(ValueType::Object) => "an object",
            _ => "a value of unknown type",
        }
    }

    fn wrong_type(argument: &str, expected: &str, value: &Unknown<'_>) -> RivetError {
        invalid(argument, format!("expected {expected}, got {}", type_name(value)))
    }

    /// `undefined` or `null` (an omitted optional argument).
    pub fn is_nullish(value: &Unknown<'_>) -> bool {
        matches!(value.get_type(), Ok(ValueType::Undefined | ValueType::Null))
    }

    fn present<'a>(value: Option<Unknown<'a>>) -> Option<Unknown<'a>> {
        value.filter(|v| !is_nullish(v))
    }

    /// A JavaScript number (any number, `NaN` included: range checks follow).
    pub fn number(argument: &str, value: Unknown<'_>) -> ArgResult<f64> {
        if value.get_type().ok() != Some(ValueType::Number) {
            return Err(wrong_type(argument, "a number", &value));
        }
        unsafe { value.cast::<f64>() }.map_err(|e| invalid(argument, e.reason.clone()))
    }

    pub fn opt_number(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<f64>> {
        present(value).map(|v| number(argument, v)).transpose()
    }

    /// A point in time in ms since the epoch (see [`validate::timestamp_ms`]).
    pub fn timestamp_ms(argument: &str, value: Unknown<'_>) -> ArgResult<i64> {
        validate::timestamp_ms(argument, number(argument, value)?)
    }

    pub fn opt_timestamp_ms(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<i64>> {
        present(value).map(|v| timestamp_ms(argument, v)).transpose()
    }

    /// A duration in ms (see [`validate::duration_ms`]).
    pub fn duration_ms(argument: &str, value: Unknown<'_>) -> ArgResult<u64> {
        validate::duration_ms(argument, number(argument, value)?)
    }

    /// A `Buffer` (or any `Uint8Array`), copied.
    pub fn bytes(argument: &str, value: Unknown<'_>) -> ArgResult<Vec<u8>> {
        if !value.is_buffer().unwrap_or(false) {
            return Err(wrong_type(argument, "a Buffer", &value));
        }
        unsafe { value.cast::<Buffer>() }.map(|b| b.to_vec()).map_err(|e| invalid(argument, e.reason.clone()))
    }

    /// The elements of an array, each read by `item` (named `argument[i]`).
    pub fn list<T>(
        argument: &str,
        value: Unknown<'_>,
        mut item: impl FnMut(&str, Unknown<'_>) -> ArgResult<T>,
    ) -> ArgResult<Vec<T>> {
        if !value.is_array().unwrap_or(false) {
            return Err(wrong_type(argument, "an array", &value));
        }
        let array = unsafe { value.cast::<Array>() }.map_err(|e| invalid(argument, e.reason.clone()))?;
        (0..array.len())
            .map(|i| {
                let name = format!("{argument}[{i}]");
                let element = array
                    .get::<Unknown>(i)
                    .map_err(|e| invalid(&name, e.reason.clone()))?
                    .ok_or_else(|| invalid(&name, "missing element"))?;
                item(&name, element)
            })
            .collect()
    }

    /// An array of `Buffer`s.
    pub fn bytes_list(argument: &str, value: Unknown<'_>) -> ArgResult<Vec<Vec<u8>>> {
        list(argument, value, bytes)
    }

    /// A plain object converted by napi-rs into `T` (a `#[napi(object)]`):
    /// a non-object is refused first (napi-rs would read fields of a
    /// string or a number as `undefined`), and a field of the wrong type
    /// becomes `napi.invalid_argument` with napi-rs's explanation.
    pub fn object<T: FromNapiValue>(argument: &str, value: Unknown<'_>) -> ArgResult<T> {
        if value.get_type().ok() != Some(ValueType::Object) || value.is_array().unwrap_or(false) {
            return Err(wrong_type(argument, "an object", &value));
        }
        unsafe { value.cast::<T>() }.map_err(|e| invalid(argument, e.reason.clone()))
    }

    pub fn opt_object<T: FromNapiValue>(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<T>> {
        present(value).map(|v| object(argument, v)).transpose()
    }

    /// An optional duration field of an options object.
    pub fn field_duration_ms(argument: &str, value: Option<f64>) -> ArgResult<Option<u64>> {
        value.map(|v| validate::duration_ms(argument, v)).transpose()
    }

    /// An optional count or size field, at most `max`.
    pub fn field_size(argument: &str, value: Option<f64>, max: u64) -> ArgResult<Option<u64>> {
        value.map(|v| validate::size(argument, v, max)).transpose()
    }

    /// A value that must be a string (napi-rs would coerce nothing and
    /// throw its own `InvalidArg`).
    pub fn string(argument: &str, value: Unknown<'_>) -> ArgResult<String> {
        if value.get_type().ok() != Some(ValueType::String) {
            return Err(wrong_type(argument, "a string", &value));
        }
        unsafe { value.cast::<String>() }.map_err(|e| invalid(argument, e.reason.clone()))
    }

    pub fn opt_string(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<String>> {
        present(value).map(|v| string(argument, v)).transpose()
    }

    /// A boolean (no coercion).
    pub fn boolean(argument: &str, value: Unknown<'_>) -> ArgResult<bool> {
        if value.get_type().ok() != Some(ValueType::Boolean) {
            return Err(wrong_type(argument, "a boolean", &value));
        }
        unsafe { value.cast::<bool>() }.map_err(|e| invalid(argument, e.reason.clone()))
    }
}
