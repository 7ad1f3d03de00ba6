//! The hooks of one actor type: the JavaScript callbacks given to
//! `NapiActorFactory`, as the core's `ActorHooks`.
//!
//! - `payloads`: the objects each hook is called with;
//! - `table`: the hook table, written once (names, payloads, returns,
//!   TypeScript signatures), and what is derived from it: `JsHooks` (the
//!   callbacks read from the object), `ActorCallbacks` (their TypeScript
//!   type), and the unit test that holds the README's hook list to it;
//! - `dispatch`: `impl ActorHooks for JsHooks`, each hook's call.

pub mod dispatch;
pub mod payloads;
pub mod table;
