//! The process-wide bound on open databases (docs/sqlite.md, "Resources").
//!
//! Every open database holds a [`Slot`]. When all are taken, opening one
//! more first closes the least recently used database that is idle (no
//! statement running, no transaction open, see
//! [`PoolMember::try_close_idle`]); if none is idle, it waits for a slot
//! to be released, at most [`SqliteLimits::open_wait`]. The pool knows a
//! database only as a [`PoolMember`], so it does not import the database.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::limits::SqliteLimits;
use crate::error::catalog;

/// An open database as the pool sees it (implemented by the database's
/// state, `super::connection::Shared`).
pub(crate) trait PoolMember: Send + Sync {
    /// Cheap check, without locks, that it may be idle.
    fn looks_idle(&self) -> bool;
    /// When it was last used (the least recently used is closed first).
    fn last_used(&self) -> Instant;
    /// Closes its connection if it is idle; true if it did. Never waits for
    /// a statement.
    fn try_close_idle<'a>(&'a self, why: &'a str) -> BoxFuture<'a, bool>;
}

pub struct SqlitePool {
    limits: SqliteLimits,
    state: Mutex<State>,
    released: Notify,
}

#[derive(Default)]
struct State {
    open: usize,
    /// Databases holding a slot (weak: a database that is dropped releases
    /// its slot with it). Pruned on every release.
    members: Vec<Weak<dyn PoolMember>>,
}

/// One open database's share of the bound; released when dropped.
pub(crate) struct Slot {
    pool: Arc<SqlitePool>,
    member: Weak<dyn PoolMember>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut state = self.pool.lock();
            state.open = state.open.saturating_sub(1);
            state.members.retain(|m| m.strong_count() > 0 && !std::ptr::addr_eq(m.as_ptr(), self.member.as_ptr()));
        }
        self.pool.released.notify_waiters();
    }
}

impl SqlitePool {
    pub fn new(limits: SqliteLimits) -> Arc<Self> {
        Arc::new(Self { limits, state: Mutex::default(), released: Notify::new() })
    }

    /// The pool every actor of this process shares (limits from the
    /// environment, see [`SqliteLimits::from_env`]).
    pub fn global() -> Arc<Self> {
        static GLOBAL: OnceLock<Arc<SqlitePool>> = OnceLock::new();
        GLOBAL.get_or_init(|| Self::new(SqliteLimits::from_env())).clone()
    }

    pub fn limits(&self) -> &SqliteLimits {
        &self.limits
    }

    /// Databases open now.
    pub fn open_count(&self) -> usize {
        self.lock().open
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for `db`, closing an idle database if all are taken.
    pub(crate) async fn acquire(self: &Arc<Self>, db: Arc<dyn PoolMember>) -> anyhow::Result<Slot> {
        let deadline = Instant::now() + self.limits.open_wait;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let victims = {
                let mut state = self.lock();
                if state.open < self.limits.max_open {
                    state.open += 1;
                    state.members.push(Arc::downgrade(&db));
                    return Ok(Slot { pool: self.clone(), member: Arc::downgrade(&db) });
                }
                let mut idle: Vec<Arc<dyn PoolMember>> = state
                    .members
                    .iter()
                    .filter_map(Weak::upgrade)
                    .filter(|m| !same(m, &db) && m.looks_idle())
                    .collect();
                idle.sort_by_key(|m| m.last_used());
                idle
            };
            let mut closed_one = false;
            for victim in victims {
                if victim.try_close_idle("evicted: too many open databases").await {
                    closed_one = true;
                    break;
                }
            }
            if closed_one {
                continue;
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                let max = self.limits.max_open;
                return Err(
                    catalog::actor_overloaded("sqlite_open_databases", "open the actor database", max).into_anyhow()
                );
            }
        }
    }
}

/// Whether `a` and `b` are the same database (by address, whatever the
/// vtables).
fn same(a: &Arc<dyn PoolMember>, b: &Arc<dyn PoolMember>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
