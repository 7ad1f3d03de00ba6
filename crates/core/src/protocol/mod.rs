//! Wire formats shared with clients.

pub mod error_body;
