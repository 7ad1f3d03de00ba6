//! The actor's SQLite database (`c.db`), stored on the engine's page store
//! (docs/sqlite.md).
//!
//! SQLite runs in this process; its pages live on the engine. The page
//! store client (`rivet-depot-client`) provides the VFS over the envoy's
//! page messages and runs each connection on a worker thread of its own.
//! This module decides when a generation's database opens (on its first
//! statement), when it closes (idle, evicted, `close()`, end of the
//! generation) and what it may cost (the limits of [`limits`]); it keeps
//! transactions from interleaving, and fences the writes of a generation
//! that ended.
//!
//! - [`database`]: one generation's database, opened lazily;
//! - `connection`: the state behind it, its connection and its locks;
//! - [`link`]: what the database needs from the engine;
//! - [`transaction`]: transactions and their timeout;
//! - [`pool`]: the process-wide bound on open databases;
//! - [`limits`]: the bounds and their environment variables;
//! - [`transport`]: the host-side write fence in front of the page store;
//! - [`profiling`]: per-statement counters and labels (`sqliteProfiling`);
//! - [`errors`]: structured errors and how client failures map to them.

mod connection;
pub mod database;
pub mod errors;
pub mod limits;
pub mod link;
mod overload;
pub mod pool;
pub mod profiling;
pub mod transaction;
mod transport;

#[cfg(test)]
pub mod memory;
#[cfg(test)]
mod tests;

pub use database::{ActorDatabase, BatchStatement};
pub use depot_client::query::{BindParam, ColumnValue, ExecResult, ExecuteResult, QueryResult};
pub use depot_client::vfs::{SqliteTransport, SqliteTransportHandle, SqliteVfsMetricsSnapshot};
pub use limits::SqliteLimits;
pub use link::SqliteLink;
pub use pool::SqlitePool;
pub use profiling::{Profile, ProfileEntry, SqliteProfiling};
pub use transaction::{SqliteTransaction, DEFAULT_TRANSACTION_TIMEOUT};
