//! Real SQLite on the in-memory page store ([`super::memory`]), through the
//! page store client: values, transactions, the two fences, and the
//! resource bounds (lazy open, idle close, eviction).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::actor::link::MemoryLink;
use crate::error::{ActorSpecifier, RivetError};

fn specifier(actor_id: &str, generation: u64) -> ActorSpecifier {
    ActorSpecifier { actor_id: actor_id.into(), generation, key: None }
}

fn pool(max_open: usize, idle_close: Duration) -> Arc<SqlitePool> {
    SqlitePool::new(SqliteLimits { max_open, idle_close, ..SqliteLimits::default() })
}

struct Gen {
    db: ActorDatabase,
    fence: CancellationToken,
}

/// Actor ids unique in the process: a page store connection registers a
/// VFS named after its actor and generation, and the tests share SQLite.
fn unique(name: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!("{name}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn generation(link: &Arc<MemoryLink>, actor_id: &str, generation: u64, pool: &Arc<SqlitePool>) -> Gen {
    let fence = CancellationToken::new();
    let db = ActorDatabase::new(specifier(actor_id, generation), link.clone(), fence.clone(), pool.clone());
    Gen { db, fence }
}

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

async fn count(db: &ActorDatabase, table: &str) -> i64 {
    let result = db.execute(format!("SELECT COUNT(*) FROM {table}"), None).await.unwrap();
    match result.rows[0][0] {
        ColumnValue::Integer(n) => n,
        ref other => panic!("count was {other:?}"),
    }
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_opens_before_the_first_statement() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &a_id, 1, &pool);
    assert!(!g.db.is_open());
    assert_eq!(pool.open_count(), 0);
    assert!(g.db.take_last_kv_error().is_none() && g.db.metrics().is_none());
    g.db.close_for_generation_end().await;
    assert_eq!(g.db.open_count(), 0);
    assert_eq!(link.pages.commits.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_type_round_trips() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &a_id, 1, &pool);
    g.db.exec("CREATE TABLE v (i INTEGER, big INTEGER, r REAL, t TEXT, b BLOB, n)".into()).await.unwrap();
    let big = i64::MAX - 7;
    let params = vec![
        BindParam::Integer(-42),
        BindParam::Integer(big),
        BindParam::Float(1.5e-300),
        BindParam::Text("héllo \u{1F600}".into()),
        BindParam::Blob(vec![0, 255, 7]),
        BindParam::Null,
    ];
    let inserted = g.db.execute("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)".into(), Some(params)).await.unwrap();
    assert_eq!((inserted.changes, inserted.last_insert_row_id), (1, Some(1)));
    let row = g.db.execute("SELECT * FROM v".into(), None).await.unwrap();
    assert_eq!(row.columns, ["i", "big", "r", "t", "b", "n"]);
    assert_eq!(
        row.rows,
        vec![vec![
            ColumnValue::Integer(-42),
            ColumnValue::Integer(big),
            ColumnValue::Float(1.5e-300),
            ColumnValue::Text("héllo \u{1F600}".into()),
            ColumnValue::Blob(vec![0, 255, 7]),
            ColumnValue::Null,
        ]]
    );
    assert!(link.pages.commits.load(Ordering::SeqCst) >= 2, "each autocommit statement is committed to the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_errors_are_internal_with_the_message() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &a_id, 1, &pool);
    g.db.exec("CREATE TABLE u (id INTEGER PRIMARY KEY, name TEXT UNIQUE)".into()).await.unwrap();
    g.db.execute("INSERT INTO u (name) VALUES ('x')".into(), None).await.unwrap();
    let dup = g.db.execute("INSERT INTO u (name) VALUES ('x')".into(), None).await.unwrap_err();
    let e = RivetError::extract(&dup);
    assert_eq!(e.qualified_code(), "core.internal_error");
    assert!(e.metadata.unwrap()["error"].as_str().unwrap().contains("UNIQUE constraint failed: u.name"));
    let syntax = g.db.execute("SELEKT 1".into(), None).await.unwrap_err();
    let e = RivetError::extract(&syntax);
    assert_eq!(e.qualified_code(), "core.internal_error");
    let text = e.metadata.unwrap()["error"].as_str().unwrap().to_owned();
    assert!(text.contains("syntax error"), "{text}");
    // The actor and the statement are named in front of SQLite's message.
    assert!(text.contains(&format!("SQLite statement `SELEKT 1` of actor {a_id}")), "{text}");
    assert_eq!(count(&g.db, "u").await, 1, "the database is still usable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_roll_back_and_exclude_other_statements() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &a_id, 1, &pool);
    g.db.exec("CREATE TABLE t (x INTEGER)".into()).await.unwrap();

    let tx = g.db.begin_transaction(None).await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)".into(), None).await.unwrap();
    // A statement outside waits for the transaction to end.
    let outside = tokio::spawn({
        let db = g.db.clone();
        async move { db.execute("INSERT INTO t VALUES (100)".into(), None).await.map(|r| r.changes) }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!outside.is_finished());
    tx.rollback().await.unwrap();
    assert_eq!(outside.await.unwrap().unwrap(), 1);
    assert_eq!(count(&g.db, "t").await, 1, "only the statement outside the rolled back transaction");
    assert_eq!(code(&tx.execute("SELECT 1".into(), None).await.unwrap_err()), "sqlite.transaction_finished");
    tx.rollback().await.unwrap();

    let tx = g.db.begin_transaction(None).await.unwrap();
    tx.exec("INSERT INTO t VALUES (2); INSERT INTO t VALUES (3)".into()).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&g.db, "t").await, 3);
    assert_eq!(code(&tx.commit().await.unwrap_err()), "sqlite.transaction_finished");

    // A batch is all or nothing.
    let batch = vec![
        BatchStatement { sql: "INSERT INTO t VALUES (4)".into(), params: None },
        BatchStatement { sql: "INSERT INTO nope VALUES (5)".into(), params: None },
    ];
    g.db.execute_batch(batch).await.unwrap_err();
    assert_eq!(count(&g.db, "t").await, 3);
    let batch = vec![
        BatchStatement { sql: "INSERT INTO t VALUES (?)".into(), params: Some(vec![BindParam::Integer(4)]) },
        BatchStatement { sql: "SELECT COUNT(*) AS n FROM t".into(), params: None },
    ];
    let results = g.db.execute_batch(batch).await.unwrap();
    assert_eq!(results[1].rows, vec![vec![ColumnValue::Integer(4)]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_past_its_timeout_is_rolled_back() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &a_id, 1, &pool);
    g.db.exec("CREATE TABLE t (x INTEGER)".into()).await.unwrap();
    let tx = g.db.begin_transaction(Some(Duration::from_millis(50))).await.unwrap();
    tx.execute("INSERT INTO t VALUES (1)".into(), None).await.unwrap();
    // Statements outside run once it expired.
    assert_eq!(count(&g.db, "t").await, 0);
    assert_eq!(code(&tx.execute("SELECT 1".into(), None).await.unwrap_err()), "sqlite.transaction_expired");
    assert_eq!(code(&tx.commit().await.unwrap_err()), "sqlite.transaction_expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_the_generation_and_close_is_final() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let one = generation(&link, &a_id, 1, &pool);
    one.db.exec("CREATE TABLE t (x TEXT)".into()).await.unwrap();
    one.db.execute("INSERT INTO t VALUES ('kept')".into(), None).await.unwrap();
    let open_tx = one.db.begin_transaction(None).await.unwrap();
    open_tx.execute("INSERT INTO t VALUES ('lost')".into(), None).await.unwrap();
    one.db.close().await.unwrap();
    assert_eq!(pool.open_count(), 0);
    assert_eq!(code(&one.db.execute("SELECT 1".into(), None).await.unwrap_err()), "sqlite.closed");
    assert_eq!(code(&open_tx.commit().await.unwrap_err()), "sqlite.closed");

    let two = generation(&link, &a_id, 2, &pool);
    let rows = two.db.execute("SELECT x FROM t".into(), None).await.unwrap().rows;
    assert_eq!(rows, vec![vec![ColumnValue::Text("kept".into())]]);
}

/// Engine 3.0 answers a database without pages with the head its file
/// already has, which can be above 0; the database opens, writes and
/// reads there as on engine 2.3 (docs/sqlite.md, "The head of an empty
/// database"). Without the head carried by `FencedPages`, the first
/// statement fails with a head fence mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_database_whose_head_is_above_zero_opens_and_writes() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("empty-head");
    link.pages.start_empty_at(&a_id, 7);
    let pool = pool(8, Duration::from_secs(60));
    let one = generation(&link, &a_id, 0, &pool);
    one.db.exec("CREATE TABLE t (x TEXT)".into()).await.unwrap();
    one.db.execute("INSERT INTO t VALUES ('kept')".into(), None).await.unwrap();
    assert_eq!(count(&one.db, "t").await, 1);
    one.db.close().await.unwrap();
    assert!(link.pages.page_count(&a_id) > 0, "the pages reached the store");

    let two = generation(&link, &a_id, 1, &pool);
    let rows = two.db.execute("SELECT x FROM t".into(), None).await.unwrap().rows;
    assert_eq!(rows, vec![vec![ColumnValue::Text("kept".into())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_an_ended_or_superseded_generation_never_land() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_secs(60));
    let one = generation(&link, &a_id, 1, &pool);
    one.db.exec("CREATE TABLE t (x INTEGER)".into()).await.unwrap();
    one.db.execute("INSERT INTO t VALUES (1)".into(), None).await.unwrap();

    // The engine's fence: a newer generation started elsewhere.
    link.pages.advance_generation(&a_id, 2);
    let refused = link.pages.refused.load(Ordering::SeqCst);
    one.db.execute("INSERT INTO t VALUES (2)".into(), None).await.unwrap_err();
    assert!(link.pages.refused.load(Ordering::SeqCst) > refused, "the store refused the stale commit");

    // The host's fence: the generation ended; nothing is even sent.
    let three = generation(&link, &a_id, 3, &pool);
    three.db.execute("INSERT INTO t VALUES (3)".into(), None).await.unwrap();
    let commits = link.pages.commits.load(Ordering::SeqCst);
    let refused = link.pages.refused.load(Ordering::SeqCst);
    three.fence.cancel();
    let err = three.db.execute("INSERT INTO t VALUES (4)".into(), None).await.unwrap_err();
    assert_eq!(code(&err), "actor.stopping");
    assert_eq!(link.pages.commits.load(Ordering::SeqCst), commits);
    assert_eq!(link.pages.refused.load(Ordering::SeqCst), refused);
    three.db.close_for_generation_end().await;

    let four = generation(&link, &a_id, 4, &pool);
    let rows = four.db.execute("SELECT x FROM t ORDER BY x".into(), None).await.unwrap().rows;
    assert_eq!(rows, vec![vec![ColumnValue::Integer(1)], vec![ColumnValue::Integer(3)]]);
    drop(one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_database_closes_and_reopens_on_its_next_statement() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let pool = pool(8, Duration::from_millis(100));
    let g = generation(&link, &a_id, 1, &pool);
    g.db.exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (7)".into()).await.unwrap();
    assert_eq!(pool.open_count(), 1);
    wait_until("the idle close", || pool.open_count() == 0).await;
    assert!(!g.db.is_open());
    assert_eq!(count(&g.db, "t").await, 1);
    assert_eq!(g.db.open_count(), 2);

    // A transaction the user began by hand pins the connection.
    g.db.execute("BEGIN".into(), None).await.unwrap();
    g.db.execute("INSERT INTO t VALUES (8)".into(), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(g.db.is_open(), "not closed under an open transaction");
    g.db.execute("COMMIT".into(), None).await.unwrap();
    wait_until("the idle close after COMMIT", || !g.db.is_open()).await;
    assert_eq!(count(&g.db, "t").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_closes_the_least_recently_used_idle_database() {
    let link = Arc::new(MemoryLink::default());
    let a_id = unique("a");
    let b_id = unique("b");
    let c_id = unique("c");
    let pool = pool(2, Duration::from_secs(60));
    let a = generation(&link, &a_id, 1, &pool);
    let b = generation(&link, &b_id, 1, &pool);
    let c = generation(&link, &c_id, 1, &pool);
    for g in [&a, &b] {
        g.db.exec("CREATE TABLE t (x INTEGER)".into()).await.unwrap();
    }
    a.db.execute("INSERT INTO t VALUES (1)".into(), None).await.unwrap();
    // b is held by a transaction: not evictable, so c takes a's slot.
    let tx = b.db.begin_transaction(None).await.unwrap();
    c.db.exec("CREATE TABLE t (x INTEGER)".into()).await.unwrap();
    assert_eq!(pool.open_count(), 2);
    assert!(!a.db.is_open() && b.db.is_open() && c.db.is_open());
    tx.commit().await.unwrap();
    // a reopens, taking the slot of the least recently used (c: b was
    // used by its commit since).
    assert_eq!(count(&a.db, "t").await, 1);
    assert!(a.db.is_open() && b.db.is_open() && !c.db.is_open());
}

/// Resident memory of this process, bytes (Linux).
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Not a check: prints what an open database costs in this process. Run
/// with the settings the addon gives the page store client (see
/// `limits::set_client_cache_defaults`):
/// `RIVETKIT_SQLITE_OPT_VFS_PAGE_CACHE_MODE=off RIVETKIT_SQLITE_OPT_READ_AHEAD_MODE=off
/// cargo test -p rivetkit-native-core -- --ignored --nocapture memory_per_open_database`
/// (docs/sqlite.md has the figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn memory_per_open_database() {
    const N: usize = 200;
    let link = Arc::new(MemoryLink::default());
    let pool = pool(N + 1, Duration::from_secs(600));
    let warm = generation(&link, &unique("warm"), 1, &pool);
    warm.db.exec("CREATE TABLE t (x INTEGER PRIMARY KEY, v TEXT)".into()).await.unwrap();
    let before = rss_bytes();
    let mut dbs = Vec::new();
    for i in 0..N {
        let g = generation(&link, &unique(&format!("m{i}")), 1, &pool);
        g.db.exec("CREATE TABLE t (x INTEGER PRIMARY KEY, v TEXT)".into()).await.unwrap();
        g.db.execute("INSERT INTO t (v) VALUES ('hello')".into(), None).await.unwrap();
        g.db.execute("SELECT * FROM t".into(), None).await.unwrap();
        dbs.push(g);
    }
    let open = rss_bytes();
    println!("{N} open databases: +{} KiB of resident memory each", (open.saturating_sub(before)) / N / 1024);
    for g in &dbs {
        g.db.close_for_generation_end().await;
    }
    assert_eq!(pool.open_count(), 1);
}

/// `sqliteProfiling`'s selection (docs/versions.md): the statements named by
/// their exact text or their fingerprint get a label of their own, inside
/// a transaction too; the rest count toward the actor's aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_statements_are_profiled_under_their_own_label() {
    let link = Arc::new(MemoryLink::default());
    let pool = pool(8, Duration::from_secs(60));
    let g = generation(&link, &unique("profiled"), 1, &pool);
    let counted = "SELECT COUNT(*) FROM notes";
    let insert = "INSERT INTO notes (body) VALUES ('a')";
    g.db.set_profiling(Arc::new(SqliteProfiling {
        queries: [counted.to_owned()].into(),
        fingerprints: [profiling::fingerprint("INSERT INTO notes (body) VALUES ('other')")].into(),
        ..SqliteProfiling::default()
    }));
    g.db.execute("CREATE TABLE notes (body TEXT)".into(), None).await.unwrap();
    g.db.execute(insert.into(), None).await.unwrap();
    let tx = g.db.begin_transaction(None).await.unwrap();
    tx.execute(insert.into(), None).await.unwrap();
    tx.commit().await.unwrap();
    g.db.execute(counted.into(), None).await.unwrap();

    let profile = g.db.profile();
    assert_eq!(profile[&profiling::fingerprint(counted)].count, 1);
    assert_eq!(profile[&profiling::fingerprint(insert)].count, 2);
    assert!(profile[profiling::ACTOR_LABEL].count >= 1, "CREATE TABLE: {profile:?}");
    g.db.close_for_generation_end().await;
}
