//! Errors across the JavaScript boundary.
//!
//! The core reports failures as [`RivetError`]s inside `anyhow::Error`
//! chains. This module is the only place that knows how they look in
//! JavaScript, in both directions:
//!
//! - **Rust → JS.** A rejected promise or thrown error is a real `Error`
//!   whose `code` is `"<group>.<code>"` (e.g. `"actor.not_found"`), with the
//!   extra properties `group`, `rivetCode` (the bare code) and, if any,
//!   `metadata`. Its `message` is [`BRIDGE_PREFIX`] followed by the JSON
//!   `{group, code, message, metadata, public, statusCode, actor}`: that
//!   prefix is the compatibility contract with the TypeScript runtime of
//!   `rivetkit@2.3.19`, which decodes it back into its own `RivetError`.
//! - **JS → Rust.** A rejection or throw from a JavaScript callback becomes
//!   the structured error it carries (the same prefix, anywhere in the
//!   message), or, without it, a plain error that the core classifies as
//!   `core.internal_error` (masked for clients, logged here).
//!
//! napi-rs creates an error's JS object from its `status` string, and an
//! `async fn` can only reject with `napi::Error<Status>`. Properties beyond
//! `code` therefore need the JS thread: [`to_js_error`] builds the object
//! there (for synchronous methods, which have an `&Env`), and
//! [`spawn_promise`] runs a future on the runtime and converts its error on
//! the JS thread when the promise settles (for asynchronous methods).
//! [`to_napi`] is the thread-free fallback: same message, but `code` is
//! napi's generic status.

use std::future::Future;

use napi::bindgen_prelude::{JsObjectValue, JsValue, Object, PromiseRaw, ToNapiValue, Unknown};
use napi::{Env, JsError, Status};
use rivetkit_native_core::error::public_status;
use rivetkit_native_core::error::JsOrigin;
use rivetkit_native_core::{ActorSpecifier, RivetError};
use serde_json::{json, Value};

/// Marks an error message that carries a structured error as JSON.
/// Shared with the TypeScript runtime of `rivetkit@2.3.19`: do not change.
pub const BRIDGE_PREFIX: &str = "__RIVET_ERROR_JSON__:";

/// Result type of napi-facing helpers.
///
/// Note: in a `#[napi]` signature write `napi::Result<T>` (or `Result<T>`):
/// napi-derive recognises a fallible function by the literal name `Result`,
/// so an alias there would turn an error into a resolved value.
pub type NapiResult<T> = napi::Result<T>;

/// Everything JavaScript learns about an error.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgedError {
    pub error: RivetError,
    pub public: bool,
    pub status_code: u16,
}

impl BridgedError {
    /// Classifies an error chain: its first [`RivetError`] (or
    /// `core.internal_error`), with `public`/`statusCode` from the core's
    /// public table, unless JavaScript already marked it public with a
    /// non-500 status.
    pub fn from_anyhow(err: &anyhow::Error) -> Self {
        let error = RivetError::extract(err);
        // The core decides masking by `(group, code)` only; an error that came
        // from JavaScript goes back with the flags it had there.
        let from_js = err.downcast_ref::<JsOrigin>();
        let (public, status_code) = match (from_js, public_status(&error.group, &error.code)) {
            (Some(v), _) if v.public && v.status_code != 500 => (true, v.status_code),
            (_, Some(status)) => (true, status),
            (Some(v), None) => (v.public, v.status_code),
            (None, None) => (false, 500),
        };
        Self { error, public, status_code }
    }

    /// `group.code`, the value of the JS error's `code` property.
    pub fn qualified_code(&self) -> String {
        self.error.qualified_code()
    }

    /// The JSON document after [`BRIDGE_PREFIX`].
    pub fn to_json(&self) -> Value {
        let e = &self.error;
        json!({
            "group": e.group,
            "code": e.code,
            "message": e.message,
            "metadata": e.metadata,
            "public": self.public,
            "statusCode": self.status_code,
            "actor": e.actor,
        })
    }

    /// The JS error's `message`: prefix + JSON.
    pub fn to_message(&self) -> String {
        format!("{BRIDGE_PREFIX}{}", self.to_json())
    }
}

/// Thread-free conversion for a `napi::Error`: the message is the bridged
/// JSON, the `code` napi's generic status. Prefer [`to_js_error`] or
/// [`spawn_promise`] where JavaScript sees the error, so that `err.code`
/// is the structured code.
pub fn to_napi(err: anyhow::Error) -> napi::Error {
    let bridged = BridgedError::from_anyhow(&err);
    log_if_internal(&bridged, &err);
    napi::Error::new(Status::GenericFailure, bridged.to_message())
}

/// Builds the JavaScript error object for `err` on the JS thread and wraps
/// it in a `napi::Error` that napi-rs throws or rejects with as is.
///
/// Use it in synchronous `#[napi]` methods:
/// `some_call().map_err(|e| error::to_js_error(env, e))`.
pub fn to_js_error(env: &Env, err: anyhow::Error) -> napi::Error {
    let bridged = BridgedError::from_anyhow(&err);
    log_if_internal(&bridged, &err);
    match build_js_error(env, &bridged) {
        Ok(error) => error,
        // The environment is tearing down or out of memory: keep the
        // message, which is the compatibility contract anyway.
        Err(_) => napi::Error::new(Status::GenericFailure, bridged.to_message()),
    }
}

fn build_js_error(env: &Env, bridged: &BridgedError) -> napi::Result<napi::Error> {
    // `napi_create_error` takes the `code` from the status string, so an
    // `Error<String>` gives the object its real `code` property.
    let plain = napi::Error::new(bridged.qualified_code(), bridged.to_message());
    let value: Unknown<'_> = JsError::from(plain).into_unknown(*env);
    let mut object: Object<'_> = unsafe { value.cast()? };
    object.set_named_property("group", bridged.error.group.as_str())?;
    object.set_named_property("rivetCode", bridged.error.code.as_str())?;
    if let Some(metadata) = &bridged.error.metadata {
        object.set_named_property("metadata", metadata)?;
    }
    // Keeps a reference to the object: napi-rs hands it back verbatim when
    // it throws or rejects with this error on the same thread.
    Ok(napi::Error::from_unknown_without_coercion(object.to_unknown()))
}

/// Runs `fut` on the addon's runtime and returns a promise that resolves
/// with its value or rejects with [`to_js_error`] of its error.
///
/// The asynchronous counterpart of [`to_js_error`], for methods that
/// return a promise:
///
/// ```ignore
/// #[napi(ts_return_type = "Promise<void>")]
/// pub fn shutdown<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
///     let inner = self.inner.clone();
///     error::spawn_promise(env, async move { inner.shutdown().await })
/// }
/// ```
pub fn spawn_promise<'env, T, F>(env: &'env Env, fut: F) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    env.spawn_future_with_callback(async move { Ok(fut.await) }, |env, result| {
        result.map_err(|err| to_js_error(env, err))
    })
}

/// A promise already rejected with `err` (argument errors of methods that
/// return a promise reject rather than throw).
pub fn reject<'env, T>(env: &'env Env, err: RivetError) -> napi::Result<PromiseRaw<'env, T>>
where
    T: ToNapiValue + Send + 'static,
{
    spawn_promise(env, async move { Err(err.into_anyhow()) })
}

/// The thrown form of an argument error (synchronous methods).
pub fn throw(env: &Env, err: RivetError) -> napi::Error {
    to_js_error(env, err.into_anyhow())
}

fn log_if_internal(bridged: &BridgedError, err: &anyhow::Error) {
    if bridged.error.group == "core" && bridged.error.code == "internal_error" {
        tracing::warn!(error = %format!("{err:#}"), "internal error returned to JavaScript");
    }
}

/// A JavaScript callback could not be called at all (its environment is
/// closing, or the call was dropped before JavaScript answered).
pub fn js_callback_unavailable(callback: &str, reason: &str) -> anyhow::Error {
    RivetError::new(
        rivetkit_native_core::error_codes::ACTOR_JS_CALLBACK_UNAVAILABLE,
        format!("JavaScript callback `{callback}` could not be invoked: {reason}"),
    )
    .with_metadata(json!({ "callback": callback, "reason": reason }))
    .into_anyhow()
}

/// A JavaScript callback answered with a value of the wrong type.
pub fn invalid_return(callback: &str, detail: &str) -> anyhow::Error {
    RivetError::new(
        rivetkit_native_core::error_codes::NAPI_INVALID_RETURN,
        format!("JavaScript callback `{callback}` returned an invalid value: {detail}"),
    )
    .with_metadata(json!({ "callback": callback, "detail": detail }))
    .into_anyhow()
}

/// Converts a failed call of the JavaScript callback `callback` (a throw, a
/// rejection, or a closed function) into the error the core sees.
pub fn from_js_error(callback: &str, err: napi::Error) -> anyhow::Error {
    from_js_error_with_stack(callback, err, None)
}

/// [`from_js_error`] with the JavaScript stack of the error, when the
/// caller could read it on the JS thread (see crate::bridge::js_callback).
pub fn from_js_error_with_stack(callback: &str, err: napi::Error, stack: Option<String>) -> anyhow::Error {
    if err.status == Status::Closing {
        return js_callback_unavailable(callback, "the JavaScript environment is closing");
    }
    from_js_reason_with_stack(callback, &err.reason, stack)
}

/// [`from_js_error`] for an error message: the structured error after
/// [`BRIDGE_PREFIX`] anywhere in it, else a plain error carrying the
/// message (`core.internal_error` to the core: masked, and logged here).
pub fn from_js_reason(callback: &str, reason: &str) -> anyhow::Error {
    from_js_reason_with_stack(callback, reason, None)
}

fn from_js_reason_with_stack(callback: &str, reason: &str, stack: Option<String>) -> anyhow::Error {
    match parse_bridged(reason) {
        Some(bridged) => {
            let origin = JsOrigin { public: bridged.public, status_code: bridged.status_code, stack };
            bridged.error.into_anyhow().context(origin)
        }
        None => {
            tracing::warn!(callback, error = reason, "JavaScript callback failed with an unstructured error");
            if let Some(stack) = &stack {
                tracing::debug!(callback, stack = %stack, "JavaScript stack of that error");
            }
            anyhow::anyhow!("JavaScript callback `{callback}` failed: {reason}")
        }
    }
}

/// Parses the structured error after [`BRIDGE_PREFIX`], if the message has
/// one with a valid JSON object (text after the JSON is ignored).
///
/// An error of ours that RivetKit's TypeScript runtime re-wraps without
/// decoding it (it does so for a native method it calls directly, such as
/// `schedule().cronEvery` behind `c.cron.every`) arrives as a payload whose
/// `code` is our qualified `err.code` (`schedule.invalid_interval`), whose
/// `message` is our own bridged message and which is not public. The
/// innermost payload is the real error, so it wins; a `code` that repeats
/// its group (`group.code`) is reduced to the bare code.
pub fn parse_bridged(reason: &str) -> Option<BridgedError> {
    let outer = parse_one_bridged(reason)?;
    match parse_bridged(&outer.error.message) {
        Some(mut inner) => {
            if inner.error.actor.is_none() {
                inner.error.actor = outer.error.actor;
            }
            Some(inner)
        }
        None => Some(outer),
    }
}

fn parse_one_bridged(reason: &str) -> Option<BridgedError> {
    let start = reason.find(BRIDGE_PREFIX)? + BRIDGE_PREFIX.len();
    let value = serde_json::Deserializer::from_str(&reason[start..]).into_iter::<Value>().next()?.ok()?;
    let object = value.as_object()?;
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
    let group = text("group")?;
    let mut code = text("code")?;
    if let Some(bare) = code.strip_prefix(&format!("{group}.")).filter(|bare| !bare.is_empty()) {
        code = bare.to_owned();
    }
    let message = text("message").unwrap_or_else(|| format!("{group}.{code}"));
    let mut error = RivetError::foreign(group, code, message);
    error.metadata = object.get("metadata").filter(|m| !m.is_null()).cloned();
    error.actor = object.get("actor").and_then(parse_actor);
    let public = object.get("public").and_then(Value::as_bool).unwrap_or(false);
    let status_code =
        object.get("statusCode").and_then(Value::as_u64).and_then(|s| u16::try_from(s).ok()).unwrap_or(500);
    Some(BridgedError { error, public, status_code })
}

fn parse_actor(value: &Value) -> Option<ActorSpecifier> {
    Some(ActorSpecifier {
        actor_id: value.get("actorId")?.as_str()?.to_owned(),
        generation: value.get("generation")?.as_u64()?,
        key: value.get("key").and_then(Value::as_str).map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_error_becomes_prefixed_json_with_public_status() {
        let err = rivetkit_native_core::error::catalog::actor_not_found("actor", "abc").into_anyhow();
        let bridged = BridgedError::from_anyhow(&err);
        assert_eq!(bridged.qualified_code(), "actor.not_found");
        assert!(bridged.public);
        assert_eq!(bridged.status_code, 404);
        let message = bridged.to_message();
        assert!(message.starts_with(BRIDGE_PREFIX));
        let json: Value = serde_json::from_str(&message[BRIDGE_PREFIX.len()..]).unwrap();
        assert_eq!(json["group"], "actor");
        assert_eq!(json["code"], "not_found");
        assert_eq!(json["metadata"]["id"], "abc");
        assert_eq!(json["statusCode"], 404);
    }

    #[test]
    fn unstructured_error_is_internal_and_not_public() {
        let bridged = BridgedError::from_anyhow(&anyhow::anyhow!("boom"));
        assert_eq!(bridged.qualified_code(), "core.internal_error");
        assert!(!bridged.public);
        assert_eq!(bridged.status_code, 500);
    }

    #[test]
    fn prefix_is_found_anywhere_and_trailing_text_ignored() {
        let reason = format!(
            "Error: {BRIDGE_PREFIX}{} and more",
            json!({"group": "user", "code": "bad", "message": "no", "metadata": {"a": 1},
                   "public": true, "statusCode": 400,
                   "actor": {"actorId": "x", "generation": 2, "key": "k"}})
        );
        let bridged = parse_bridged(&reason).unwrap();
        assert_eq!(bridged.error.qualified_code(), "user.bad");
        assert_eq!(bridged.error.message, "no");
        assert_eq!(bridged.error.metadata, Some(json!({"a": 1})));
        assert_eq!(bridged.error.actor.as_ref().unwrap().generation, 2);
        assert_eq!((bridged.public, bridged.status_code), (true, 400));
    }

    #[test]
    fn rewrapped_error_of_ours_is_decoded_to_the_original() {
        // What RivetKit 2.3.19 sends back for `c.cron.every`: our error's
        // `group`, its qualified `code`, and our bridged message as message.
        let ours = BridgedError::from_anyhow(
            &RivetError::new(
                rivetkit_native_core::error_codes::SCHEDULE_INVALID_INTERVAL,
                "Schedule interval must be at least 5000 ms.",
            )
            .with_metadata(json!({"intervalMs": 1000}))
            .into_anyhow(),
        );
        let rewrapped = format!(
            "Error: {BRIDGE_PREFIX}{}",
            json!({"group": "schedule", "code": "schedule.invalid_interval",
                   "message": ours.to_message(), "public": false, "statusCode": 500,
                   "actor": {"actorId": "a", "generation": 1}})
        );
        let bridged = parse_bridged(&rewrapped).unwrap();
        assert_eq!(bridged.error.qualified_code(), "schedule.invalid_interval");
        assert_eq!(bridged.error.message, "Schedule interval must be at least 5000 ms.");
        assert_eq!(bridged.error.metadata, Some(json!({"intervalMs": 1000})));
        assert_eq!((bridged.public, bridged.status_code), (true, 400));
        assert_eq!(bridged.error.actor.unwrap().actor_id, "a");

        // A qualified code alone is reduced to the bare one.
        let reason = format!("{BRIDGE_PREFIX}{}", json!({"group": "kv", "code": "kv.key_too_large", "message": "m"}));
        assert_eq!(parse_bridged(&reason).unwrap().error.qualified_code(), "kv.key_too_large");
    }

    #[test]
    fn js_error_round_trips_through_anyhow() {
        let reason = format!(
            "{BRIDGE_PREFIX}{}",
            json!({"group": "custom", "code": "thing", "message": "m", "public": true, "statusCode": 418})
        );
        let err = from_js_reason("onRequest", &reason);
        let back = BridgedError::from_anyhow(&err.context("while handling a request"));
        assert_eq!(back.qualified_code(), "custom.thing");
        assert_eq!((back.public, back.status_code), (true, 418));
    }

    #[test]
    fn malformed_or_missing_json_is_a_plain_error() {
        for reason in ["plain failure", "__RIVET_ERROR_JSON__:{not json", "__RIVET_ERROR_JSON__:[1]"] {
            assert!(parse_bridged(reason).is_none(), "{reason}");
            let err = from_js_reason("onWake", reason);
            assert_eq!(RivetError::extract(&err).qualified_code(), "core.internal_error");
            assert!(format!("{err}").contains("onWake"));
        }
    }

    #[test]
    fn closing_status_means_callback_unavailable() {
        let err = from_js_error("run", napi::Error::new(Status::Closing, "closing"));
        let e = RivetError::extract(&err);
        assert_eq!(e.qualified_code(), "actor.js_callback_unavailable");
        assert!(e.message.starts_with("JavaScript callback `run` could not be invoked: "));
    }
}
