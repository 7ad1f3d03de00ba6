//! The resource bounds of actor databases (docs/sqlite.md, "Resources").
//!
//! An open database costs a worker thread (the page store client runs
//! SQLite on one thread per connection) and two page caches (SQLite's own
//! and the client's). Three bounds keep a host with many SQL actors cheap:
//! how many databases may be open at once, how long an unused one stays
//! open, and how large each cache may grow. They are read once per process
//! from the environment.

use std::time::Duration;

/// Environment: databases open at once, process-wide (default 512).
pub const MAX_OPEN_ENV: &str = crate::env::RIVETKIT_NATIVE_SQLITE_MAX_OPEN;
/// Environment: ms after which an unused database is closed (default 30000).
pub const IDLE_CLOSE_ENV: &str = crate::env::RIVETKIT_NATIVE_SQLITE_IDLE_CLOSE_MS;
/// Environment: SQLite's page cache per database, KiB (default 4096).
pub const PAGER_CACHE_ENV: &str = crate::env::RIVETKIT_NATIVE_SQLITE_PAGER_CACHE_KIB;

/// The page store client's own settings (read once, from the environment,
/// by the client itself) that this addon gives a default when unset: its
/// page cache, kept beside SQLite's own ...
pub const VFS_CACHE_MODE_ENV: &str = crate::env::RIVETKIT_SQLITE_OPT_VFS_PAGE_CACHE_MODE;
/// ... and its read-ahead, which only fills that cache.
pub const VFS_READ_AHEAD_ENV: &str = crate::env::RIVETKIT_SQLITE_OPT_READ_AHEAD_MODE;

/// Statements that may wait for the database at once (beyond that:
/// `actor.overloaded`), as many as the worker's own queue holds.
pub const STATEMENT_QUEUE_CAPACITY: usize = 128;

const DEFAULT_MAX_OPEN: usize = 512;
const DEFAULT_IDLE_CLOSE: Duration = Duration::from_secs(30);
const DEFAULT_PAGER_CACHE_KIB: u32 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteLimits {
    /// Databases open at once; opening one more closes the least recently
    /// used idle one, or waits for one to close.
    pub max_open: usize,
    /// An open database unused for this long is closed (it reopens on its
    /// next statement).
    pub idle_close: Duration,
    /// SQLite's page cache per database (`PRAGMA cache_size`), KiB.
    pub pager_cache_kib: u32,
    /// How long opening waits for a free slot before it gives up with
    /// `actor.overloaded`.
    pub open_wait: Duration,
}

impl Default for SqliteLimits {
    fn default() -> Self {
        Self {
            max_open: DEFAULT_MAX_OPEN,
            idle_close: DEFAULT_IDLE_CLOSE,
            pager_cache_kib: DEFAULT_PAGER_CACHE_KIB,
            open_wait: Duration::from_secs(30),
        }
    }
}

impl SqliteLimits {
    /// The defaults, overridden by the environment variables above (a value
    /// that is not a positive integer is ignored).
    pub fn from_env() -> Self {
        Self::from_reader(crate::env::get)
    }

    fn from_reader(read: impl Fn(&str) -> Option<String>) -> Self {
        let positive = |name: &str| read(name).and_then(|v| v.trim().parse::<u64>().ok()).filter(|v| *v > 0);
        let mut limits = Self::default();
        if let Some(v) = positive(MAX_OPEN_ENV) {
            limits.max_open = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = positive(IDLE_CLOSE_ENV) {
            limits.idle_close = Duration::from_millis(v);
        }
        if let Some(v) = positive(PAGER_CACHE_ENV) {
            limits.pager_cache_kib = u32::try_from(v).unwrap_or(u32::MAX);
        }
        limits
    }
}

/// The page store client reads its settings from the environment, once, on
/// the first database it opens; there is no other way to set them. Its own
/// page cache costs about 90 KiB per open database before it holds a page
/// (two caches with their bookkeeping), and duplicates SQLite's page cache,
/// which keeps pages across transactions here (the connection holds an
/// exclusive lock): this turns it off, and the read-ahead that only fills
/// it, unless the user set them (docs/sqlite.md, "Resources"). Call it
/// before any database opens and before threads that read the environment
/// run (the addon does it when it loads).
pub fn set_client_cache_defaults() {
    for (name, value) in [(VFS_CACHE_MODE_ENV, "off"), (VFS_READ_AHEAD_ENV, "off")] {
        crate::env::set_default(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_defaults_and_bad_values_are_ignored() {
        let limits = SqliteLimits::from_reader(|name| match name {
            MAX_OPEN_ENV => Some("8".into()),
            IDLE_CLOSE_ENV => Some("nope".into()),
            PAGER_CACHE_ENV => Some("0".into()),
            _ => None,
        });
        assert_eq!(limits.max_open, 8);
        assert_eq!(limits.idle_close, DEFAULT_IDLE_CLOSE);
        assert_eq!(limits.pager_cache_kib, DEFAULT_PAGER_CACHE_KIB);
    }
}
