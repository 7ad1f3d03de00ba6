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

#[derive(Clone)]
pub struct Conn(Arc<Inner>);

struct Inner {
    id: String,
    params: Vec<u8>,
    state: Mutex<Vec<u8>>,
    subscriptions: Mutex<HashSet<String>>,
    transport: Option<Arc<dyn ConnTransport>>,
    hibernatable: bool,
}

impl Conn {
    pub fn new(id: String, params: Vec<u8>, transport: Option<Arc<dyn ConnTransport>>, hibernatable: bool) -> Self {
        Self(Arc::new(Inner {
            id,
            params,
            state: Mutex::default(),
            subscriptions: Mutex::default(),
            transport,
            hibernatable,
        }))
    }

    pub fn id(&self) -> &str {
        &self.0.id
    }
    pub fn params(&self) -> &[u8] {
        &self.0.params
    }
    pub fn state(&self) -> Vec<u8> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub fn set_state(&self, state: Vec<u8>) {
        *self.0.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
    pub fn is_hibernatable(&self) -> bool {
        self.0.hibernatable
    }
    pub fn is_subscribed(&self, event: &str) -> bool {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).contains(event)
    }
    pub fn subscribe(&self, event: &str) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).insert(event.to_string());
    }
    pub fn unsubscribe(&self, event: &str) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).remove(event);
    }
    pub fn clear_subscriptions(&self) {
        self.0.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// `conn.send(name, args)`: an event to this connection whatever it
    /// subscribed to. A connection without a socket cannot receive events.
    pub fn send(&self, name: &str, args_cbor: &[u8]) -> anyhow::Result<()> {
        match &self.0.transport {
            Some(transport) => transport.send_event(name, args_cbor),
            None => Err(RivetError::new("connection", "not_configured", "Connection transport is not configured.")
                .with_metadata(serde_json::json!({ "component": "transport" }))
                .into_anyhow()),
        }
    }

    /// Closes the client's socket (code 1000 with `reason`), if it has one.
    pub fn close_transport(&self, code: u16, reason: &str) {
        if let Some(transport) = &self.0.transport {
            transport.close(code, reason);
        }
    }

    /// True once the connection's socket closed.
    pub fn is_closed(&self) -> bool {
        self.0.transport.as_ref().is_some_and(|t| t.is_closed())
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

/// The live connections of one generation.
#[derive(Default)]
pub struct Connections {
    map: Mutex<HashMap<String, Conn>>,
    count: tokio::sync::watch::Sender<usize>,
}

impl Connections {
    pub fn insert(&self, conn: Conn) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(conn.id().to_string(), conn);
        self.count.send_replace(map.len());
    }

    /// Removes `conn` if it is still the registered one; true if removed.
    pub fn remove(&self, conn: &Conn) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let same = map.get(conn.id()).is_some_and(|c| c.same(conn));
        if same {
            map.remove(conn.id());
            self.count.send_replace(map.len());
        }
        same
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

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn subscribe_count(&self) -> tokio::sync::watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// `ctx.broadcast(name, args)`: the event goes to every connection
    /// subscribed to `name`. A failing connection is logged and skipped.
    pub fn broadcast(&self, name: &str, args_cbor: &[u8]) -> usize {
        let mut sent = 0;
        for conn in self.list().into_iter().filter(|c| c.is_subscribed(name)) {
            match conn.send(name, args_cbor) {
                Ok(()) => sent += 1,
                Err(err) => tracing::warn!(conn = conn.id(), error = %format!("{err:#}"), "broadcast to a connection failed"),
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
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
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
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let ca = Conn::new("a".into(), vec![], Some(a.clone()), false);
        let cb = Conn::new("b".into(), vec![], Some(b.clone()), false);
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
        let c = Conn::new("t".into(), vec![], None, false);
        let err = c.send("x", &[]).unwrap_err();
        assert_eq!(RivetError::extract(&err).qualified_code(), "connection.not_configured");
    }
}
