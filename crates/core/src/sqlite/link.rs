//! What a database needs from the engine, and nothing more: its page
//! store, and a way to report a storage failure that ends it. SQLite sits
//! below the actor layer, so it names this narrow trait instead of the
//! actor's whole engine link; the actor layer implements it
//! (`crate::actor::link`).

use super::SqliteTransportHandle;

pub trait SqliteLink: Send + Sync + 'static {
    /// The engine's SQLite page store for this actor's database (fenced by
    /// generation there); `None` where there is none (test doubles).
    fn sqlite_transport(&self) -> Option<SqliteTransportHandle>;
    /// Reports a crash: the engine records the error and puts the actor to
    /// sleep.
    fn report_crash(&self, actor_id: &str, generation: u32, message: String);
}
