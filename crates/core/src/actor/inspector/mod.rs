//! The inspector's per-actor part (docs/inspector.md): the counters and
//! token a generation holds, and the token's creation at start. The
//! inspector itself ([`crate::inspector`]) is a layer above and reads them
//! from here.

pub mod bookkeeping;
pub mod token;

pub use bookkeeping::ActorInspector;
pub use token::ensure_token;
