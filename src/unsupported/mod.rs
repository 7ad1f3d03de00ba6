//! Parts of the `@rivetkit/rivetkit-napi@2.3.19` surface that
//! rivetkit-native does not implement yet.
//!
//! RivetKit's TypeScript runtime expects every class, method and function
//! of that package to exist. These modules declare them with the same
//! TypeScript signatures so that the runtime loads and everything that
//! does not touch them keeps working. A feature that is not built fails
//! only when it is actually used, with the structured error
//! `rivetkit-native.unsupported` (HTTP 400) whose message and
//! `metadata.feature` name the method (e.g. `JsNativeDatabase.exec`). Calls that are
//! harmless without the feature (hibernation bookkeeping) succeed as
//! no-ops instead; each says so.
//!
//! `ActorContext`'s own unsupported and no-op methods are here too, in an
//! `impl ActorContext` block of the module of their feature
//! ([`bookkeeping`] for those of no feature), so that `actor_context.rs`
//! holds only what works. These modules sit above the classes they extend
//! or return (`ActorContext`, `ConnHandle`), and no other module imports
//! them (their errors come from `crate::error`).

// `fail` (the thrown form) has no user at the moment; kept for the stubs
// that throw.
#[allow(unused_imports)]
pub(crate) use crate::error::{reject_unsupported as reject, unsupported as fail};

pub mod bookkeeping;
pub mod state_transaction;
pub mod workflow;
