//! Connections: a client attached to an actor (over the actor-connect
//! WebSocket, or transiently for one HTTP request).
//!
//! A connection has immutable params, mutable state (opaque bytes, CBOR for
//! the TypeScript runtime), a set of subscribed event names and, when it is
//! a socket, a transport to send events and close it. The actor keeps the
//! live ones in [`Connections`]; any open connection keeps it awake.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::error::RivetError;

/// How a connection reaches its client. Implemented by the WebSocket
/// routing; transient HTTP connections have none.
pub trait ConnTransport: Send + Sync + 'static {
    /// Sends an `Event` frame. Fails (structured) if it cannot be encoded
    /// or is too large; the transport then closes the socket itself.
    fn send_event(&self, name: &str, args_cbor: &[u8]) -> anyhow::Result<()>;
    /// Closes the socket with `code` and `reason`.
    fn close(&self, code: u16, reason: &str);
    /// True once the socket is closed (a late connect then refuses itself).
    fn is_closed(&self) -> bool {
        false
    }
}

/// Where a hibernatable connection's socket lives at the gateway, and how
/// far its messages got: what the next generation needs to take it over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hibernation {
    pub gateway_id: [u8; 4],
    pub request_id: [u8; 4],
    /// Index of the last client message processed (and acknowledged).
    pub client_message_index: u16,
    pub path: String,
    pub headers: HashMap<String, String>,
}

#[derive(Clone)]
pub struct Conn(Arc<Inner>);

struct Inner {
    id: String,
    params: Vec<u8>,
    state: Mutex<Vec<u8>>,
    subscriptions: Mutex<HashSet<String>>,
    transport: Mutex<Option<Arc<dyn ConnTransport>>>,
    hibernation: Option<Mutex<Hibernation>>,
    /// Changed since its record was last written (hibernatable only).
    dirty: std::sync::atomic::AtomicBool,
    /// The ray ID of the request that opened it (`x-rivet-ray-id`): the
    /// invocations on it report it to JavaScript.
    ray_id: std::sync::OnceLock<String>,
    /// The caller's span (`traceparent`) in the request that opened it:
    /// the invocations on it are its children (docs/telemetry.md).
    trace_parent: std::sync::OnceLock<crate::telemetry::SpanContext>,
}

impl Conn {
    pub fn new(
        id: String,
        params: Vec<u8>,
        transport: Option<Arc<dyn ConnTransport>>,
        hibernation: Option<Hibernation>,
    ) -> Self {
        let hibernatable = hibernation.is_some();
        Self(Arc::new(Inner {
            id,
            params,
            state: Mutex::default(),
            subscriptions: Mutex::default(),
            transport: Mutex::new(transport),
            hibernation: hibernation.map(Mutex::new),
            dirty: std::sync::atomic::AtomicBool::new(hibernatable),
            ray_id: std::sync::OnceLock::new(),
            trace_parent: std::sync::OnceLock::new(),
        }))
    }

    /// A hibernatable connection read back from its record (no socket yet).
    pub fn restore(record: ConnRecord) -> Self {
        let conn = Self::new(record.id, record.params, None, Some(record.hibernation));
        conn.set_state(record.state);
        for event in record.subscriptions {
            conn.subscribe(&event);
        }
        conn.0.dirty.store(false, std::sync::atomic::Ordering::Release);
        conn
    }

    /// Gives a restored connection its new socket.
    pub fn attach_transport(&self, transport: Arc<dyn ConnTransport>) {
        *self.0.transport.lock().unwrap_or_else(|p| p.into_inner()) = Some(transport);
    }

    fn transport(&self) -> Option<Arc<dyn ConnTransport>> {
        self.0.transport.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn hibernation(&self) -> Option<Hibernation> {
        self.0.hibernation.as_ref().map(|h| h.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// The gateway's `(gateway_id, request_id)` of a hibernatable
    /// connection, without copying its path and headers (every acknowledged
    /// message needs them).
    pub fn hibernation_ids(&self) -> Option<([u8; 4], [u8; 4])> {
        self.0.hibernation.as_ref().map(|h| {
            let h = h.lock().unwrap_or_else(|p| p.into_inner());
            (h.gateway_id, h.request_id)
        })
    }

    /// Records that client message `index` was processed.
    pub fn set_client_message_index(&self, index: u16) {
        if let Some(h) = &self.0.hibernation {
            h.lock().unwrap_or_else(|p| p.into_inner()).client_message_index = index;
            self.mark_dirty();
        }
    }

    pub fn mark_dirty(&self) {
        if self.0.hibernation.is_some() {
            self.0.dirty.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// The record to write if the connection changed since the last write.
    pub fn take_dirty_record(&self) -> Option<ConnRecord> {
        if !self.0.dirty.swap(false, std::sync::atomic::Ordering::AcqRel) {
            return None;
        }
        self.record()
    }

    pub fn record(&self) -> Option<ConnRecord> {
        Some(ConnRecord {
            id: self.0.id.clone(),
            params: self.0.params.clone(),
            state: self.state(),
            subscriptions: self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect(),
            hibernation: self.hibernation()?,
        })
    }

    pub fn id(&self) -> &str {
        &self.0.id
    }
    /// Sets the ray ID of the request that opened it (once; later calls
    /// keep the first).
    pub fn set_ray_id(&self, ray_id: Option<String>) {
        if let Some(ray_id) = ray_id {
            let _ = self.0.ray_id.set(ray_id);
        }
    }
    pub fn ray_id(&self) -> Option<&str> {
        self.0.ray_id.get().map(String::as_str)
    }
    /// Notes the caller of the request that opened it, from that
    /// request's headers: its ray ID and its span.
    pub fn note_caller(&self, headers: &HashMap<String, String>) {
        self.set_ray_id(crate::actor::request::ray_id_of(headers));
        if let Some(parent) = crate::telemetry::SpanContext::from_headers(headers) {
            let _ = self.0.trace_parent.set(parent);
        }
    }
    pub fn trace_parent(&self) -> Option<&crate::telemetry::SpanContext> {
        self.0.trace_parent.get()
    }
    pub fn params(&self) -> &[u8] {
        &self.0.params
    }
    pub fn state(&self) -> Vec<u8> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub fn set_state(&self, state: Vec<u8>) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
        self.mark_dirty();
    }
    pub fn is_hibernatable(&self) -> bool {
        self.0.hibernation.is_some()
    }
    pub fn is_subscribed(&self, event: &str) -> bool {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).contains(event)
    }
    /// How many event names it subscribed to.
    pub fn subscription_count(&self) -> usize {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn subscribe(&self, event: &str) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).insert(event.to_string());
        self.mark_dirty();
    }
    pub fn unsubscribe(&self, event: &str) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).remove(event);
        self.mark_dirty();
    }
    pub fn clear_subscriptions(&self) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// `conn.send(name, args)`: an event to this connection whatever it
    /// subscribed to. A connection without a socket cannot receive events.
    pub fn send(&self, name: &str, args_cbor: &[u8]) -> anyhow::Result<()> {
        self.check_can_send()?;
        match self.transport() {
            Some(transport) => transport.send_event(name, args_cbor),
            None => Ok(()),
        }
    }

    /// `Err` (`connection.not_configured`) for a connection without a socket.
    pub fn check_can_send(&self) -> anyhow::Result<()> {
        match self.transport() {
            Some(_) => Ok(()),
            None => Err(RivetError::new(
                crate::error_codes::CONNECTION_NOT_CONFIGURED,
                "Connection transport is not configured.",
            )
            .with_metadata(serde_json::json!({ "component": "transport" }))
            .into_anyhow()),
        }
    }

    /// Closes the client's socket (code 1000 with `reason`), if it has one.
    pub fn close_transport(&self, code: u16, reason: &str) {
        if let Some(transport) = self.transport() {
            transport.close(code, reason);
        }
    }

    /// True once the connection's socket closed.
    pub fn is_closed(&self) -> bool {
        self.transport().is_some_and(|t| t.is_closed())
    }

    pub fn same(&self, other: &Conn) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("id", &self.0.id).finish_non_exhaustive()
    }
}

/// What is persisted of a hibernatable connection (JSON, see [`super::conn_store`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnRecord {
    pub id: String,
    pub params: Vec<u8>,
    pub state: Vec<u8>,
    pub subscriptions: Vec<String>,
    pub hibernation: Hibernation,
}

/// The write numbers of this generation's chunked records, by connection id.
pub type ChunkedWrites = HashMap<String, u32>;

/// The live connections of one generation.
#[derive(Default)]
pub struct Connections {
    map: Mutex<HashMap<String, Conn>>,
    count: tokio::sync::watch::Sender<usize>,
    /// Records of hibernatable connections that ended, to delete.
    forgotten: Mutex<Vec<String>>,
    /// Records stored in chunks, and their current write (see
    /// [`super::conn_store`]).
    chunked: Mutex<ChunkedWrites>,
    /// Moves on every insert and removal (the inspector's revision).
    revision: std::sync::atomic::AtomicU64,
}

impl Connections {
    pub fn forget_record(&self, id: &str) {
        self.forgotten.lock().unwrap_or_else(|p| p.into_inner()).push(id.to_string());
    }

    /// The current chunk write of `id`'s record, if it is stored in chunks.
    pub fn chunked_write(&self, id: &str) -> Option<u32> {
        self.chunked.lock().unwrap_or_else(|p| p.into_inner()).get(id).copied()
    }

    pub(crate) fn set_chunked_write(&self, id: &str, write: Option<u32>) {
        let mut chunked = self.chunked.lock().unwrap_or_else(|p| p.into_inner());
        match write {
            Some(w) => chunked.insert(id.to_string(), w),
            None => chunked.remove(id),
        };
    }

    /// What the next save must write and delete.
    pub fn take_record_changes(&self) -> (Vec<ConnRecord>, Vec<String>) {
        let dirty = self.list().iter().filter_map(Conn::take_dirty_record).collect();
        let forgotten = std::mem::take(&mut *self.forgotten.lock().unwrap_or_else(|p| p.into_inner()));
        (dirty, forgotten)
    }

    /// Puts changes back after a failed save, so the retry writes them.
    pub fn restore_record_changes(&self, dirty: &[ConnRecord], forgotten: Vec<String>) {
        for record in dirty {
            if let Some(conn) = self.get(&record.id) {
                conn.mark_dirty();
            }
        }
        self.forgotten.lock().unwrap_or_else(|p| p.into_inner()).extend(forgotten);
    }

    pub fn insert(&self, conn: Conn) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(conn.id().to_string(), conn);
        self.set_count(map.len());
        self.revision.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Removes `conn` if it is still the registered one; true if removed.
    pub fn remove(&self, conn: &Conn) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let same = map.get(conn.id()).is_some_and(|c| c.same(conn));
        if same {
            map.remove(conn.id());
            self.set_count(map.len());
            self.revision.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        same
    }

    /// Records the count; subscribers are woken only when the set becomes
    /// empty or stops being empty, the one change the actor task acts on
    /// (its sleep timer). An HTTP action's connection to an actor that has
    /// others would otherwise wake the task twice for nothing.
    fn set_count(&self, len: usize) {
        self.count.send_if_modified(|count| {
            let flips = (*count == 0) != (len == 0);
            *count = len;
            flips
        });
    }

    /// The hibernatable connection whose socket is `(gateway_id, request_id)`.
    pub fn find_hibernated(&self, gateway_id: [u8; 4], request_id: [u8; 4]) -> Option<Conn> {
        self.list().into_iter().find(|c| c.hibernation_ids() == Some((gateway_id, request_id)))
    }

    pub fn get(&self, id: &str) -> Option<Conn> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    pub fn list(&self) -> Vec<Conn> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        *self.count.borrow()
    }

    /// How many times the set changed (the inspector's connections revision).
    pub fn revision(&self) -> u64 {
        self.revision.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn subscribe_count(&self) -> tokio::sync::watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// `ctx.broadcast(name, args)`: the event goes to every connection
    /// subscribed to `name`. A failing connection is logged and skipped.
    pub fn broadcast(&self, name: &str, args_cbor: &[u8]) -> usize {
        let targets: Vec<Conn> = self.list().into_iter().filter(|c| c.is_subscribed(name)).collect();
        Self::send_to(&targets, name, args_cbor)
    }

    /// Sends event `name` to each of `targets`; returns how many took it.
    pub fn send_to(targets: &[Conn], name: &str, args_cbor: &[u8]) -> usize {
        let mut sent = 0;
        for conn in targets {
            match conn.send(name, args_cbor) {
                Ok(()) => sent += 1,
                Err(err) => {
                    tracing::warn!(conn = conn.id(), error = %format!("{err:#}"), "an event to a connection failed")
                }
            }
        }
        sent
    }
}

/// A new connection id: a random (v4) UUID.
pub fn new_id() -> String {
    let mut bytes: [u8; 16] = rand_bytes();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    // 8-4-4-4-12 hex digits, written into one string (an HTTP action makes
    // a connection, so this runs for every one).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = String::with_capacity(36);
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            id.push('-');
        }
        id.push(HEX[usize::from(b >> 4)] as char);
        id.push(HEX[usize::from(b & 0x0f)] as char);
    }
    id
}

fn rand_bytes() -> [u8; 16] {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    // Two independently seeded SipHash outputs: unpredictable enough for an
    // identifier (not a secret).
    let mut out = [0u8; 16];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        );
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_wakes_subscribers_only_when_emptiness_changes() {
        let conns = Connections::default();
        let mut rx = conns.subscribe_count();
        let a = Conn::new("a".into(), vec![], None, None);
        let b = Conn::new("b".into(), vec![], None, None);
        conns.insert(a.clone());
        assert!(rx.has_changed().unwrap(), "0 -> 1");
        rx.borrow_and_update();
        conns.insert(b.clone());
        conns.remove(&b);
        assert!(!rx.has_changed().unwrap(), "1 -> 2 -> 1");
        assert_eq!(conns.len(), 1);
        conns.remove(&a);
        assert!(rx.has_changed().unwrap(), "1 -> 0");
        assert!(conns.is_empty());
    }

    #[test]
    fn ids_are_v4_uuids() {
        let id = new_id();
        assert_eq!(id.len(), 36, "{id}");
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
        assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{id}");
        assert_eq!(&parts[2][..1], "4", "{id}");
        assert!("89ab".contains(&parts[3][..1]), "{id}");
        assert_ne!(new_id(), new_id());
    }

    struct Recorder(Mutex<Vec<String>>);
    impl ConnTransport for Recorder {
        fn send_event(&self, name: &str, _args: &[u8]) -> anyhow::Result<()> {
            self.0.lock().unwrap().push(name.to_string());
            Ok(())
        }
        fn close(&self, _code: u16, _reason: &str) {}
    }

    #[test]
    fn broadcast_reaches_subscribed_connections_only() {
        let conns = Connections::default();
        let a = Arc::new(Recorder(Mutex::default()));
        let b = Arc::new(Recorder(Mutex::default()));
        let ca = Conn::new("a".into(), vec![], Some(a.clone()), None);
        let cb = Conn::new("b".into(), vec![], Some(b.clone()), None);
        ca.subscribe("tick");
        conns.insert(ca.clone());
        conns.insert(cb.clone());
        assert_eq!(conns.broadcast("tick", &[]), 1);
        cb.subscribe("tick");
        ca.unsubscribe("tick");
        assert_eq!(conns.broadcast("tick", &[]), 1);
        assert_eq!(a.0.lock().unwrap().len(), 1);
        assert_eq!(b.0.lock().unwrap().len(), 1);
        assert!(conns.remove(&ca));
        assert!(!conns.remove(&ca));
        assert_eq!(conns.len(), 1);
    }

    #[test]
    fn a_connection_without_transport_cannot_receive_events() {
        let c = Conn::new("t".into(), vec![], None, None);
        let err = c.send("x", &[]).unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "connection.not_configured");
    }
}
