//! The hook table: every hook of `NapiActorFactory`'s callbacks object,
//! written once in [`hook_table!`], with what is derived from it:
//!
//! - [`JsHooks`]: one typed [`JsCallback`] per hook, and
//!   [`JsHooks::from_object`], which reads them by name;
//! - [`ActorCallbacks`]: the callbacks object's TypeScript type (napi-rs
//!   writes it to `index.d.ts`; the constructor reads the hooks by name);
//! - in tests, the list checked against README.md's "Hooks" table, and each
//!   TypeScript signature against its Rust payload and return types.

use std::collections::HashMap;

use napi::bindgen_prelude::{FromNapiValue, JsObjectValue, Object, Unknown};
use napi::ValueType;
use napi_derive::napi;

use super::payloads::{
    ActionPayload, ConnPayload, ConnStatePayload, ConnectPayload, CreatePayload, CtxPayload, MigratePayload,
    QueueSendPayload, RequestPayload, SerializePayload, SubscribePayload, WebSocketPayload, WorkflowReplayPayload,
};
use crate::bridge::js_callback::{Ignored, JsCallback};
use crate::bridge::types::{args, Checked, JsBytes, JsHttpResponse, StateDeltaPayload};
use crate::classes::queue::JsQueueSendResult;

/// Declares the hooks: first `actions`, the one map of callbacks, with its
/// TypeScript type; then a row per hook: the field, its property name (and
/// an alias read first, `| field: "name"`), the payload type `=>` what the
/// callback must return (as `JsCallback` reads it), and the TypeScript
/// signature. Doc comments go to `index.d.ts`.
macro_rules! hook_table {
    (
        actions {
            $(#[doc = $actions_doc:tt])*
            ts_type = $actions_ts:tt
        }
        $(
            $(#[doc = $doc:tt])*
            $field:ident: $name:tt $(| $alias_field:ident: $alias:tt)?,
            $payload:ident => $ret:ty,
            $ts:tt;
        )*
    ) => {
        /// The callbacks read from the object given to `NapiActorFactory`.
        #[derive(Default)]
        pub struct JsHooks {
            $(pub(super) $field: Option<JsCallback<$payload, $ret>>,)*
            pub(super) actions: HashMap<String, JsCallback<ActionPayload, JsBytes>>,
        }

        impl JsHooks {
            /// Reads every known callback by name; a missing or non-function
            /// value means "not defined" (the reference adapter's rule).
            pub fn from_object(callbacks: &Object<'_>) -> napi::Result<Self> {
                Ok(Self {
                    $($field: hook(callbacks, &[$($alias,)? $name])?,)*
                    actions: read_actions(callbacks)?,
                })
            }
        }

        /// The callbacks object given to `NapiActorFactory`, for TypeScript only
        /// (the constructor reads the hooks by name). Every hook is optional and is
        /// called as `hook(null, payload)`; it may return its result or a promise.
        #[napi(object, object_to_js = false)]
        pub struct ActorCallbacks {
            $(
                $(#[doc = $doc])*
                #[napi(js_name = $name, ts_type = $ts)]
                pub $field: Option<()>,
                $(
                    #[napi(js_name = $alias, ts_type = $ts)]
                    pub $alias_field: Option<()>,
                )?
            )*
            $(#[doc = $actions_doc])*
            #[napi(ts_type = $actions_ts)]
            pub actions: Option<()>,
        }

        /// The table as data, for the tests.
        #[cfg(test)]
        const HOOKS: &[Hook] = &[
            $(Hook {
                names: &[$name $(, $alias)?],
                payload: stringify!($payload),
                returns: stringify!($ret),
                ts_type: $ts,
            },)*
        ];

        #[cfg(test)]
        const ACTIONS_TS_TYPE: &str = $actions_ts;
    };
}

// Doc strings are written `#[doc = "..."]`: napi-rs copies only plain
// string literals into `index.d.ts`, and a `///` comment reaches it from
// inside a macro as a raw string.
hook_table! {
    // `callbacks.actions`, the one map of callbacks (last in TypeScript).
    actions {
        #[doc = " Actions by name; each resolves to its CBOR-encoded output."]
        ts_type = "Record<string, (error: null, payload: ActionPayload) => Buffer | Promise<Buffer>>"
    }
    create_state: "createState",
        CreatePayload => JsBytes,
        "(error: null, payload: CreatePayload) => Buffer | Promise<Buffer>";
    on_create: "onCreate",
        CreatePayload => Ignored,
        "(error: null, payload: CreatePayload) => void | Promise<void>";
    on_migrate: "onMigrate",
        MigratePayload => Ignored,
        "(error: null, payload: MigratePayload) => void | Promise<void>";
    create_vars: "createVars",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    on_wake: "onWake",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    on_before_actor_start: "onBeforeActorStart",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    on_sleep: "onSleep",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    on_destroy: "onDestroy",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    #[doc = " The alarm set with `ctx.setAlarm` fired (rivetkit-native extension)."]
    on_alarm: "onAlarm",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    #[doc = " Long-running work started after the start hooks; it should return"]
    #[doc = " when `ctx.abortSignal()` aborts (the actor is stopping)."]
    run: "run",
        CtxPayload => Ignored,
        "(error: null, payload: CtxPayload) => void | Promise<void>";
    #[doc = " The host's latest state, asked for before every save."]
    serialize_state: "serializeState",
        SerializePayload => Checked<StateDeltaPayload>,
        "(error: null, payload: SerializePayload) => StateDeltaPayload | Promise<StateDeltaPayload>";
    on_request: "onRequest",
        RequestPayload => Checked<JsHttpResponse>,
        "(error: null, payload: RequestPayload) => JsHttpResponse | Promise<JsHttpResponse>";
    #[doc = " A client's queue send (`POST /queue/{name}`): check it, then"]
    #[doc = " `ctx.queue().send` or `enqueueAndWait`; resolve to the status."]
    on_queue_send: "onQueueSend",
        QueueSendPayload => Checked<JsQueueSendResult>,
        "(error: null, payload: QueueSendPayload) => JsQueueSendResult | Promise<JsQueueSendResult>";
    #[doc = " Reject to refuse a connection (its client gets the error)."]
    on_before_connect: "onBeforeConnect",
        ConnectPayload => Ignored,
        "(error: null, payload: ConnectPayload) => void | Promise<void>";
    #[doc = " The initial state of a new connection (CBOR)."]
    create_conn_state: "createConnState",
        ConnStatePayload => JsBytes,
        "(error: null, payload: ConnStatePayload) => Buffer | Promise<Buffer>";
    on_connect: "onConnect",
        ConnPayload => Ignored,
        "(error: null, payload: ConnPayload) => void | Promise<void>";
    #[doc = " After a connection ended (also `onDisconnectFinal`)."]
    // `onDisconnectFinal` is the name rivetkit's runtime registers; read first.
    on_disconnect: "onDisconnect" | on_disconnect_final: "onDisconnectFinal",
        ConnPayload => Ignored,
        "(error: null, payload: ConnPayload) => void | Promise<void>";
    #[doc = " Reject to refuse a subscription (the connection is closed)."]
    on_before_subscribe: "onBeforeSubscribe",
        SubscribePayload => Ignored,
        "(error: null, payload: SubscribePayload) => void | Promise<void>";
    #[doc = " A raw WebSocket opened (any path but `/connect`): set its event"]
    #[doc = " callback with `ws.setEventCallback`. A rejection closes the socket"]
    #[doc = " with 1011 `<group>.<code>`."]
    on_websocket: "onWebSocket",
        WebSocketPayload => Ignored,
        "(error: null, payload: WebSocketPayload) => void | Promise<void>";
    #[doc = " The workflow's history for the inspector (RivetKit sets it when"]
    #[doc = " `run` is a workflow); `undefined` when there is none yet."]
    get_workflow_history: "getWorkflowHistory",
        CtxPayload => Option<JsBytes>,
        "(error: null, payload: CtxPayload) => Buffer | undefined | Promise<Buffer | undefined>";
    #[doc = " Replays the workflow from `entryId` (the start when absent) and"]
    #[doc = " returns its history, as `getWorkflowHistory`."]
    replay_workflow: "replayWorkflow",
        WorkflowReplayPayload => Option<JsBytes>,
        "(error: null, payload: WorkflowReplayPayload) => Buffer | undefined | Promise<Buffer | undefined>";
}

fn invalid_argument(message: String) -> napi::Error {
    napi::Error::new(napi::Status::InvalidArg, message)
}

/// The callback `callbacks[name]`, named after its property in errors:
/// `undefined`/`null` is no hook, anything else must be a function (a
/// `onWake: 42` is a mistake to report, not a hook to drop silently). With
/// several names (an alias first), the first one set is the hook.
fn hook<A, R>(callbacks: &Object<'_>, names: &[&'static str]) -> napi::Result<Option<JsCallback<A, R>>>
where
    A: napi::bindgen_prelude::JsValuesTupleIntoVec + Send + 'static,
    R: FromNapiValue + Send + 'static,
{
    for &name in names {
        let value: Unknown<'_> = callbacks.get_named_property(name)?;
        let callback = match value.get_type()? {
            ValueType::Undefined | ValueType::Null | ValueType::Function => JsCallback::from_unknown(name, value)?,
            _ => {
                return Err(invalid_argument(format!(
                    "`callbacks.{name}` must be a function, got {}",
                    args::type_name(&value)
                )))
            }
        };
        if callback.is_some() {
            return Ok(callback);
        }
    }
    Ok(None)
}

/// `callbacks.actions`: `{[name]: fn}`; every entry must be a function.
fn read_actions(callbacks: &Object<'_>) -> napi::Result<HashMap<String, JsCallback<ActionPayload, JsBytes>>> {
    let value: Unknown<'_> = callbacks.get_named_property("actions")?;
    match value.get_type()? {
        ValueType::Undefined | ValueType::Null => return Ok(HashMap::new()),
        ValueType::Object => {}
        _ => {
            return Err(invalid_argument(format!(
                "`callbacks.actions` must be an object of functions, got {}",
                args::type_name(&value)
            )))
        }
    }
    let actions: Object<'_> = unsafe { value.cast()? };
    let mut out = HashMap::new();
    for name in Object::keys(&actions)? {
        match JsCallback::from_property("action", &actions, &name)? {
            Some(callback) => {
                out.insert(name, callback);
            }
            None => return Err(invalid_argument(format!("action `{name}` must be a function"))),
        }
    }
    Ok(out)
}

#[cfg(test)]
struct Hook {
    names: &'static [&'static str],
    payload: &'static str,
    returns: &'static str,
    ts_type: &'static str,
}

#[cfg(test)]
mod tests {
    use super::{ACTIONS_TS_TYPE, HOOKS};

    /// What JavaScript must return for a `JsCallback` return type.
    fn ts_return(rust: &str) -> String {
        let rust = rust.replace(' ', "");
        match rust.as_str() {
            "Ignored" => "void".into(),
            "JsBytes" => "Buffer".into(),
            "Option<JsBytes>" => "Buffer | undefined".into(),
            _ => match rust.strip_prefix("Checked<").and_then(|r| r.strip_suffix('>')) {
                Some(checked) => checked.into(),
                None => panic!("no TypeScript type known for `{rust}`"),
            },
        }
    }

    /// `(error: null, payload: P) => R | Promise<R>`.
    fn signature(payload: &str, returns: &str) -> String {
        format!("(error: null, payload: {payload}) => {returns} | Promise<{returns}>")
    }

    #[test]
    fn each_typescript_signature_matches_its_rust_types() {
        for hook in HOOKS {
            assert_eq!(hook.ts_type, signature(hook.payload, &ts_return(hook.returns)), "{}", hook.names[0]);
        }
        let action = signature("ActionPayload", "Buffer");
        assert_eq!(ACTIONS_TS_TYPE, format!("Record<string, {action}>"));
    }

    /// The rows of README.md's "Hooks" table: (names, payload, returns),
    /// backticks dropped.
    fn documented() -> Vec<(Vec<String>, String, String)> {
        let readme = include_str!("../../README.md");
        let section = readme.split("\n### Hooks\n").nth(1).expect("README.md has a `### Hooks` section");
        let cell = |s: &str| s.trim().replace('`', "");
        section
            .lines()
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .skip(2)
            .map(|line| {
                // A `|` inside a cell is written `\|`.
                let row = line.replace("\\|", "\u{0}");
                let cells: Vec<String> = row.trim_matches('|').split('|').map(|c| c.replace('\u{0}', "|")).collect();
                assert_eq!(cells.len(), 3, "README.md hook row `{line}`: hook | payload | returns");
                let names = cells[0].split(',').map(cell).collect();
                (names, cell(&cells[1]), cell(&cells[2]))
            })
            .collect()
    }

    #[test]
    fn the_readme_lists_every_hook_as_the_table_declares_it() {
        let mut declared: Vec<(Vec<String>, String, String)> = HOOKS
            .iter()
            .map(|h| {
                let names = h.names.iter().map(|n| n.to_string()).collect();
                (names, h.payload.to_string(), ts_return(h.returns))
            })
            .collect();
        declared.push((vec!["actions".into()], "ActionPayload".into(), "Buffer".into()));
        assert_eq!(documented(), declared, "README.md's `### Hooks` table and src/hooks/table.rs differ");
    }
}
