//! Client traffic from the engine's gateway to actors.

pub mod failure;
pub mod http;
pub mod websocket;
