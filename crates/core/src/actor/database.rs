//! The database part of the context: the generation's SQLite database,
//! created on its first use (it opens on its first statement; see
//! [`crate::sqlite`]), and the runtime socket that serves it
//! (docs/runtime-socket.md), provisioned on demand.

use std::sync::{Arc, OnceLock};

use super::runtime_socket::RuntimeSocket;
use crate::sqlite::{ActorDatabase, SqliteProfiling};

pub struct Database {
    /// A lazily built value, not a field set from outside: the context
    /// builds it from its own identity, link and write fence.
    sqlite: OnceLock<ActorDatabase>,
    runtime_socket: RuntimeSocket,
    /// The actor type's `sqliteProfiling`, given to the database it builds.
    profiling: Arc<SqliteProfiling>,
}

impl Database {
    pub fn new(runtime_socket_enabled: bool, profiling: Arc<SqliteProfiling>) -> Self {
        Self { sqlite: OnceLock::new(), runtime_socket: RuntimeSocket::new(runtime_socket_enabled), profiling }
    }

    /// The database, built by `create` on the first call.
    pub(crate) fn sqlite_or(&self, create: impl FnOnce() -> ActorDatabase) -> &ActorDatabase {
        self.sqlite.get_or_init(|| {
            let db = create();
            db.set_profiling(self.profiling.clone());
            db
        })
    }

    /// The database if it was built and is not shut yet.
    pub(crate) fn open_sqlite(&self) -> Option<ActorDatabase> {
        self.sqlite.get().filter(|db| !db.is_shut()).cloned()
    }

    pub(crate) fn runtime_socket(&self) -> &RuntimeSocket {
        &self.runtime_socket
    }
}
