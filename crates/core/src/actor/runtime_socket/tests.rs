//! The runtime socket against real SQLite on the in-memory page store:
//! the codec both ways, the handshake, statements, leases, and clients
//! that break the protocol (the socket keeps serving the others).

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::frame::{parse_max_frame_bytes, read_frame, write_frame, Frame, DEFAULT_MAX_FRAME_BYTES};
use super::wire::client::{decode_server_frame, decode_server_hello};
use super::wire::*;
use super::*;
use crate::actor::context::ActorIdentity;
use crate::actor::link::MemoryLink;
use crate::actor::{ActorConfig, ActorContext, ActorKey};
use crate::error::{ActorSpecifier, RivetError};
use crate::sqlite::{SqliteLimits, SqlitePool};

fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("rs-{name}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn database(name: &str) -> ActorDatabase {
    let specifier = ActorSpecifier { actor_id: unique(name), generation: 1, key: None };
    let link = Arc::new(MemoryLink::default());
    ActorDatabase::new(specifier, link, CancellationToken::new(), SqlitePool::new(SqliteLimits::default()))
}

// --- codec ------------------------------------------------------------------

fn sample_values() -> Vec<SqlValue> {
    vec![
        SqlValue::Null,
        SqlValue::Integer(i64::MIN),
        SqlValue::Integer(300),
        SqlValue::Real(-1.5e-300),
        SqlValue::Text("héllo \u{1F600}".into()),
        SqlValue::Blob(vec![0, 255, 7]),
        SqlValue::Blob(vec![]),
    ]
}

#[test]
fn client_frames_round_trip() {
    let payloads = [
        RequestPayload::Exec { script: "CREATE TABLE t (x); INSERT INTO t VALUES (1)".into() },
        RequestPayload::Query { sql: "SELECT ?, ?".into(), params: sample_values() },
        RequestPayload::Query { sql: String::new(), params: vec![] },
        RequestPayload::Begin { lease_key: "k".into(), timeout_ms: Some(u64::MAX) },
        RequestPayload::Begin { lease_key: "k".into(), timeout_ms: None },
        RequestPayload::Commit { lease_key: "k".into() },
        RequestPayload::Rollback { lease_key: "ключ".into() },
    ];
    for (i, payload) in payloads.into_iter().enumerate() {
        for lease_key in [None, Some("lease".to_string())] {
            let request = Request { request_id: u32::MAX - i as u32, lease_key, payload: payload.clone() };
            let bytes = encode_client_frame(&request);
            assert_eq!(version_of(&bytes), Some(PROTOCOL_VERSION));
            assert_eq!(decode_client_frame(&bytes), Ok(request));
        }
    }
    assert_eq!(decode_client_hello(&encode_client_hello()), Ok(()));
}

#[test]
fn server_frames_round_trip() {
    let payloads = [
        ResponsePayload::ExecOk,
        ResponsePayload::QueryOk(QueryOk {
            columns: vec!["a".into(), "b".into()],
            rows: vec![sample_values(), vec![]],
            changes: -3,
            last_insert_row_id: Some(i64::MAX),
        }),
        ResponsePayload::QueryOk(QueryOk { columns: vec![], rows: vec![], changes: 0, last_insert_row_id: None }),
        ResponsePayload::BeginOk,
        ResponsePayload::CommitOk,
        ResponsePayload::RollbackOk,
        ResponsePayload::SqlError { code: 19, statement_index: 2, message: "constraint".into() },
        ResponsePayload::EndpointClosed,
        ResponsePayload::QueueFull { limit: "q".into(), capacity: 128 },
        ResponsePayload::InvalidLeaseKey { message: "unknown".into() },
        ResponsePayload::LeaseExpired { timeout_ms: 50, message: "expired".into() },
        ResponsePayload::ResponseTooLarge,
    ];
    for payload in payloads {
        let frame = ServerFrame::Response { request_id: 7, payload };
        assert_eq!(decode_server_frame(&encode_server_frame(&frame)), Ok(frame));
    }
    for reason in [GoAwayReason::FrameTooLarge, GoAwayReason::MalformedFrame] {
        let frame = ServerFrame::GoAway(reason);
        assert_eq!(decode_server_frame(&encode_server_frame(&frame)), Ok(frame));
    }
    for hello in [ServerHello::Ok { max_frame_bytes: 4096 }, ServerHello::RejectUnsupportedVersion] {
        assert_eq!(decode_server_hello(&encode_server_hello(hello)), Ok(hello));
    }
}

#[test]
fn the_known_bytes_of_a_request() {
    // version 1, Request, id 5, no lease, Query "x", one Integer 1.
    let request = Request {
        request_id: 5,
        lease_key: None,
        payload: RequestPayload::Query { sql: "x".into(), params: vec![SqlValue::Integer(1)] },
    };
    let expected = [1, 0, 0, 5, 0, 0, 0, 0, 1, 1, b'x', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(encode_client_frame(&request), expected);
}

#[test]
fn malformed_payloads_are_refused() {
    let good = encode_client_frame(&Request {
        request_id: 1,
        lease_key: Some("k".into()),
        payload: RequestPayload::Query { sql: "SELECT ?".into(), params: vec![SqlValue::Text("t".into())] },
    });
    // Every strict prefix is truncated.
    for n in 0..good.len() {
        assert!(decode_client_frame(&good[..n]).is_err(), "prefix of {n} bytes");
    }
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(decode_client_frame(&trailing), Err(Malformed("trailing bytes")));
    let mut version = good.clone();
    version[0] = 2;
    assert!(decode_client_frame(&version).is_err());
    // Unknown client frame, request and value tags.
    assert!(decode_client_frame(&[1, 0, 1]).is_err());
    assert!(decode_client_frame(&[1, 0, 0, 1, 0, 0, 0, 0, 9, 0]).is_err());
    assert!(decode_client_frame(&[1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 9]).is_err());
    // A bad optional tag, a length beyond the frame, invalid UTF-8, a
    // non-minimal and an overflowing uint.
    assert!(decode_client_frame(&[1, 0, 0, 1, 0, 0, 0, 2, 0, 0]).is_err());
    assert!(decode_client_frame(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03, b'a']).is_err());
    assert!(decode_client_frame(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0xff]).is_err());
    assert!(decode_client_frame(&[1, 0, 0x80, 0x00, 1, 0, 0, 0, 0, 0, 0]).is_err());
    let mut overflow = vec![1, 0, 0, 1, 0, 0, 0, 0, 0];
    overflow.extend([0xff; 9]);
    overflow.push(0x02);
    assert!(decode_client_frame(&overflow).is_err());
    assert!(decode_client_hello(&[1, 0, 0]).is_err());
    assert!(decode_client_hello(&[1]).is_err());
}

#[test]
fn the_frame_limit_from_the_environment() {
    assert_eq!(parse_max_frame_bytes(None), DEFAULT_MAX_FRAME_BYTES);
    assert_eq!(parse_max_frame_bytes(Some("4096")), 4096);
    assert_eq!(parse_max_frame_bytes(Some("1023")), DEFAULT_MAX_FRAME_BYTES);
    assert_eq!(parse_max_frame_bytes(Some("lots")), DEFAULT_MAX_FRAME_BYTES);
}

// --- a client ---------------------------------------------------------------

struct Client {
    stream: UnixStream,
}

impl Client {
    /// A connection served by `serve_connection` directly, hello done.
    async fn pair(db: &ActorDatabase, max_frame_bytes: u32) -> (Client, JoinHandle<()>) {
        let (server, stream) = UnixStream::pair().unwrap();
        let task =
            tokio::spawn(server::serve_connection(server, db.clone(), CancellationToken::new(), max_frame_bytes));
        let mut client = Client { stream };
        assert_eq!(client.hello().await, ServerHello::Ok { max_frame_bytes });
        (client, task)
    }

    async fn connect(path: &str) -> Client {
        let mut client = Client { stream: UnixStream::connect(path).await.unwrap() };
        assert!(matches!(client.hello().await, ServerHello::Ok { .. }));
        client
    }

    async fn hello(&mut self) -> ServerHello {
        write_frame(&mut self.stream, &encode_client_hello()).await.unwrap();
        match read_frame(&mut self.stream, u32::MAX).await.unwrap() {
            Some(Frame::Payload(p)) => decode_server_hello(&p).unwrap(),
            other => panic!("expected a hello, got {other:?}"),
        }
    }

    async fn send(&mut self, request_id: u32, lease_key: Option<&str>, payload: RequestPayload) {
        let request = Request { request_id, lease_key: lease_key.map(str::to_string), payload };
        write_frame(&mut self.stream, &encode_client_frame(&request)).await.unwrap();
    }

    /// The next frame; `None` once the server closed.
    async fn next(&mut self) -> Option<ServerFrame> {
        match read_frame(&mut self.stream, u32::MAX).await {
            Ok(Some(Frame::Payload(p))) => Some(decode_server_frame(&p).unwrap()),
            _ => None,
        }
    }

    async fn answer(&mut self, request_id: u32) -> ResponsePayload {
        match self.next().await {
            Some(ServerFrame::Response { request_id: id, payload }) if id == request_id => payload,
            other => panic!("expected the answer to {request_id}, got {other:?}"),
        }
    }

    async fn call(&mut self, request_id: u32, lease_key: Option<&str>, payload: RequestPayload) -> ResponsePayload {
        self.send(request_id, lease_key, payload).await;
        self.answer(request_id).await
    }

    async fn exec(&mut self, request_id: u32, script: &str) -> ResponsePayload {
        self.call(request_id, None, RequestPayload::Exec { script: script.into() }).await
    }

    async fn query(
        &mut self,
        request_id: u32,
        lease: Option<&str>,
        sql: &str,
        params: Vec<SqlValue>,
    ) -> ResponsePayload {
        self.call(request_id, lease, RequestPayload::Query { sql: sql.into(), params }).await
    }

    async fn count(&mut self, request_id: u32) -> i64 {
        match self.query(request_id, None, "SELECT COUNT(*) FROM t", vec![]).await {
            ResponsePayload::QueryOk(ok) => match ok.rows[0][0] {
                SqlValue::Integer(n) => n,
                ref other => panic!("count was {other:?}"),
            },
            other => panic!("count failed: {other:?}"),
        }
    }
}

fn begin(key: &str, timeout_ms: Option<u64>) -> RequestPayload {
    RequestPayload::Begin { lease_key: key.into(), timeout_ms }
}

// --- statements ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_values_and_sql_errors() {
    let db = database("statements");
    let (mut c, _task) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(c.exec(1, "CREATE TABLE v (id INTEGER PRIMARY KEY, i, r, t, b, n)").await, ResponsePayload::ExecOk);
    let mut params = vec![SqlValue::Integer(-42), SqlValue::Real(3.25), SqlValue::Text("é".into())];
    params.extend([SqlValue::Blob(vec![0, 255]), SqlValue::Null]);
    let ResponsePayload::QueryOk(inserted) =
        c.query(2, None, "INSERT INTO v (i, r, t, b, n) VALUES (?, ?, ?, ?, ?) RETURNING *", params.clone()).await
    else {
        panic!("insert failed")
    };
    assert_eq!(inserted.columns, ["id", "i", "r", "t", "b", "n"]);
    let mut row = vec![SqlValue::Integer(1)];
    row.extend(params);
    assert_eq!(inserted.rows, vec![row]);
    assert_eq!((inserted.changes, inserted.last_insert_row_id), (1, Some(1)));

    // The request id of an answered request may be used again at once.
    let ResponsePayload::QueryOk(empty) = c.query(2, None, "SELECT i FROM v WHERE 0", vec![]).await else {
        panic!("select failed")
    };
    assert_eq!((empty.columns, empty.rows.len()), (vec!["i".to_string()], 0));

    let ResponsePayload::SqlError { code, message, .. } = c.exec(3, "INSERT INTO v (id) VALUES (1)").await else {
        panic!("a duplicate key must fail")
    };
    assert_eq!(code & 0xff, 19, "SQLITE_CONSTRAINT: {message}");
    assert!(matches!(c.query(4, None, "SELEC 1", vec![]).await, ResponsePayload::SqlError { code: 1, .. }));
    assert!(matches!(c.query(5, None, "SELECT 1; SELECT 2", vec![]).await, ResponsePayload::SqlError { .. }));
    // The actor's own handle sees the socket's row.
    let rows = db.execute("SELECT t FROM v".into(), None).await.unwrap().rows;
    assert_eq!(rows, vec![vec![crate::sqlite::ColumnValue::Text("é".into())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_refuses_other_versions() {
    let db = database("hello");
    for version in [0u16, 2] {
        let (server, mut stream) = UnixStream::pair().unwrap();
        let task = tokio::spawn(server::serve_connection(server, db.clone(), CancellationToken::new(), 4096));
        write_frame(&mut stream, &version.to_le_bytes()).await.unwrap();
        let Some(Frame::Payload(p)) = read_frame(&mut stream, u32::MAX).await.unwrap() else { panic!("no hello") };
        assert_eq!(decode_server_hello(&p), Ok(ServerHello::RejectUnsupportedVersion));
        task.await.unwrap();
    }
}

// --- clients that break the protocol ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_frames_go_away_and_others_keep_working() {
    let db = database("goaway");
    let (mut good, _t) = Client::pair(&db, 1024).await;
    assert_eq!(good.exec(1, "CREATE TABLE t (x)").await, ResponsePayload::ExecOk);

    // Announces more than the limit: GoAway, then closed.
    let (mut big, task) = Client::pair(&db, 1024).await;
    big.stream.write_all(&2000u32.to_be_bytes()).await.unwrap();
    assert_eq!(big.next().await, Some(ServerFrame::GoAway(GoAwayReason::FrameTooLarge)));
    assert_eq!(big.next().await, None);
    task.await.unwrap();

    // Does not decode: GoAway, then closed.
    let (mut bad, task) = Client::pair(&db, 1024).await;
    write_frame(&mut bad.stream, &[1, 0, 0, 9]).await.unwrap();
    assert_eq!(bad.next().await, Some(ServerFrame::GoAway(GoAwayReason::MalformedFrame)));
    assert_eq!(bad.next().await, None);
    task.await.unwrap();

    // An answer above the limit: ResponseTooLarge, the connection stays.
    assert_eq!(good.query(2, None, "SELECT zeroblob(2000)", vec![]).await, ResponsePayload::ResponseTooLarge);
    assert_eq!(good.exec(3, "INSERT INTO t VALUES (1)").await, ResponsePayload::ExecOk);
    assert_eq!(good.count(4).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_already_in_flight_goes_away() {
    let db = database("dup");
    let (mut c, task) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(c.exec(1, "CREATE TABLE t (x)").await, ResponsePayload::ExecOk);
    assert_eq!(c.call(2, None, begin("k", None)).await, ResponsePayload::BeginOk);
    // Waits for the gate the lease holds: still in flight.
    c.send(3, None, RequestPayload::Query { sql: "SELECT 1".into(), params: vec![] }).await;
    c.send(3, None, RequestPayload::Query { sql: "SELECT 2".into(), params: vec![] }).await;
    assert_eq!(c.next().await, Some(ServerFrame::GoAway(GoAwayReason::MalformedFrame)));
    assert_eq!(c.next().await, None);
    task.await.unwrap();
    // The lease was rolled back: the database is free again.
    assert_eq!(db.execute("SELECT COUNT(*) FROM t".into(), None).await.unwrap().rows.len(), 1);
}

// --- leases -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_lease_commits_in_order_and_others_wait() {
    let db = database("lease");
    let (mut a, _ta) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    let (mut b, _tb) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(a.exec(1, "CREATE TABLE t (x)").await, ResponsePayload::ExecOk);

    // Begin, two inserts and the commit, without waiting in between.
    a.send(2, None, begin("k", None)).await;
    for (id, x) in [(3, 1), (4, 2)] {
        let payload =
            RequestPayload::Query { sql: "INSERT INTO t VALUES (?)".into(), params: vec![SqlValue::Integer(x)] };
        a.send(id, Some("k"), payload).await;
    }
    a.send(5, None, RequestPayload::Commit { lease_key: "k".into() }).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        match a.next().await {
            Some(ServerFrame::Response { request_id, payload }) => answers.push((request_id, payload)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(answers[0], (2, ResponsePayload::BeginOk));
    assert!(matches!(answers[1], (3, ResponsePayload::QueryOk(_))));
    assert!(matches!(answers[2], (4, ResponsePayload::QueryOk(_))));
    assert_eq!(answers[3], (5, ResponsePayload::CommitOk));
    assert_eq!(b.count(1).await, 2);

    // After the commit the key is refused, for statements and a new Begin.
    assert!(matches!(a.query(6, Some("k"), "SELECT 1", vec![]).await, ResponsePayload::InvalidLeaseKey { .. }));
    assert!(matches!(a.call(7, None, begin("k", None)).await, ResponsePayload::InvalidLeaseKey { .. }));
    // Keys are the connection's own: `b` does not know `k`.
    assert!(matches!(b.query(2, Some("k"), "SELECT 1", vec![]).await, ResponsePayload::InvalidLeaseKey { .. }));
    assert!(matches!(
        b.call(3, None, RequestPayload::Rollback { lease_key: "nope".into() }).await,
        ResponsePayload::InvalidLeaseKey { .. }
    ));
    // Begin names its key in the payload only, Commit too.
    assert!(matches!(b.call(4, Some("x"), begin("x", None)).await, ResponsePayload::InvalidLeaseKey { .. }));
    assert!(matches!(b.call(5, None, begin("", None)).await, ResponsePayload::InvalidLeaseKey { .. }));
    assert!(matches!(b.call(6, None, begin("z", Some(0))).await, ResponsePayload::SqlError { code: -1, .. }));

    // A rollback undoes; a lease's rows are not visible outside it before.
    assert_eq!(b.call(7, None, begin("r", None)).await, ResponsePayload::BeginOk);
    let insert = vec![SqlValue::Integer(3)];
    assert!(matches!(b.query(8, Some("r"), "INSERT INTO t VALUES (?)", insert).await, ResponsePayload::QueryOk(_)));
    assert_eq!(b.call(9, None, RequestPayload::Rollback { lease_key: "r".into() }).await, ResponsePayload::RollbackOk);
    assert_eq!(a.count(8).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_rolled_back_and_stays_expired() {
    let db = database("expiry");
    let (mut c, _t) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(c.exec(1, "CREATE TABLE t (x)").await, ResponsePayload::ExecOk);
    assert_eq!(c.call(2, None, begin("k", Some(50))).await, ResponsePayload::BeginOk);
    // Statements outside the lease wait for it: this one runs once it expired.
    assert_eq!(c.count(4).await, 0);
    for id in [5, 6] {
        let answer = c.query(id, Some("k"), "SELECT 1", vec![]).await;
        assert!(matches!(answer, ResponsePayload::LeaseExpired { timeout_ms: 50, .. }), "{answer:?}");
    }
    assert!(matches!(
        c.call(7, None, RequestPayload::Commit { lease_key: "k".into() }).await,
        ResponsePayload::LeaseExpired { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_rolls_its_lease_back() {
    let db = database("close");
    let (mut a, task) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(a.exec(1, "CREATE TABLE t (x)").await, ResponsePayload::ExecOk);
    assert_eq!(a.call(2, None, begin("k", None)).await, ResponsePayload::BeginOk);
    assert!(matches!(a.query(3, Some("k"), "INSERT INTO t VALUES (1)", vec![]).await, ResponsePayload::QueryOk(_)));
    drop(a);
    task.await.unwrap();
    let (mut b, _t) = Client::pair(&db, DEFAULT_MAX_FRAME_BYTES).await;
    assert_eq!(b.count(1).await, 0);
}

// --- the endpoint of a generation -----------------------------------------------

fn context(enabled: bool) -> (ActorContext, Arc<MemoryLink>) {
    let link = Arc::new(MemoryLink::default());
    let identity = ActorIdentity {
        actor_id: unique("ctx"),
        generation: 1,
        name: "socket".into(),
        key: ActorKey::default(),
        region: String::new(),
        input: None,
    };
    let config = ActorConfig { enable_actor_runtime_socket: enabled, ..ActorConfig::default() };
    (ActorContext::new(identity, CancellationToken::new(), link.clone(), &config, None).0, link)
}

fn code(err: &anyhow::Error) -> String {
    RivetError::extract(err).qualified_code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_is_opt_in_idempotent_private_and_ends_with_the_generation() {
    let (off, _) = context(false);
    assert_eq!(code(&off.provision_runtime_socket().unwrap_err()), "actor_runtime_socket.not_enabled");

    let (ctx, _link) = context(true);
    let path = ctx.provision_runtime_socket().unwrap();
    assert_eq!(ctx.provision_runtime_socket().unwrap(), path, "same path on a second call");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let file = std::path::Path::new(&path);
    assert_eq!(mode(file), 0o600);
    assert_eq!(mode(file.parent().unwrap()), 0o700);
    assert!(file.parent().unwrap().starts_with(std::env::temp_dir()));

    let mut c = Client::connect(&path).await;
    assert_eq!(c.exec(1, "CREATE TABLE t (x); INSERT INTO t VALUES (1)").await, ResponsePayload::ExecOk);
    assert_eq!(c.count(2).await, 1);
    assert_eq!(c.call(3, None, begin("k", None)).await, ResponsePayload::BeginOk);

    ctx.shutdown_runtime_socket().await;
    assert!(!file.exists(), "the socket file is removed");
    assert_eq!(c.next().await, None, "open connections end");
    assert!(UnixStream::connect(&path).await.is_err());
    assert_eq!(code(&ctx.provision_runtime_socket().unwrap_err()), "actor_runtime_socket.closed");
    // The lease was rolled back: the actor's own statements run.
    assert_eq!(ctx.sqlite().execute("SELECT COUNT(*) FROM t".into(), None).await.unwrap().rows.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_that_ends_without_a_shutdown_closes_its_socket() {
    let (ctx, _link) = context(true);
    let path = ctx.provision_runtime_socket().unwrap();
    let mut c = Client::connect(&path).await;
    ctx.end_writes_now();
    assert_eq!(c.next().await, None);
    for _ in 0..500 {
        if !std::path::Path::new(&path).exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!std::path::Path::new(&path).exists());
    assert_eq!(code(&ctx.provision_runtime_socket().unwrap_err()), "actor_runtime_socket.closed");
}
