//! Wire formats shared with clients: the encoding a request selects, CBOR ⇄
//! JSON conversion, vbare framing of client-protocol messages, HTTP action
//! bodies and error bodies.

pub mod action;
pub mod actor_connect;
pub mod bare;
pub mod cbor_json;
pub mod encoding;
pub mod error_body;
#[cfg(test)]
pub(crate) mod proptests;
pub mod queue;

pub use encoding::Encoding;
