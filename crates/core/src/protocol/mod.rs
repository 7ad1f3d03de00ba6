//! Wire formats shared with clients.
