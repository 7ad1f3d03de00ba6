//! The actor-connect socket as a connection transport: encodes events in
//! the connection's encoding, enforces the outgoing size limit, closes once.

use std::sync::atomic::{AtomicBool, Ordering};

use rivet_envoy_client::config::WebSocketSender;

use crate::actor::ConnTransport;
use crate::error::RivetError;
use crate::protocol::actor_connect::{encode_to_client, ToClient};
use crate::protocol::encoding::Encoding;

pub(super) struct SocketTransport {
    sender: WebSocketSender,
    encoding: Encoding,
    max_outgoing: usize,
    closed: AtomicBool,
}

impl SocketTransport {
    pub(super) fn new(sender: WebSocketSender, encoding: Encoding, max_outgoing: usize) -> Self {
        Self { sender, encoding, max_outgoing, closed: AtomicBool::new(false) }
    }

    /// Encodes and sends `msg`; `Err` if it cannot be encoded or is over
    /// the outgoing limit (the caller decides what that means).
    pub(super) fn send(&self, msg: &ToClient) -> anyhow::Result<()> {
        let frame = encode_to_client(self.encoding, msg)?;
        if frame.data.len() > self.max_outgoing {
            return Err(RivetError::new(crate::error_codes::MESSAGE_OUTGOING_TOO_LONG, "Outgoing message too long")
                .into_anyhow());
        }
        if !self.closed.load(Ordering::Acquire) {
            self.sender.send(frame.data, frame.binary);
        }
        Ok(())
    }

    /// Sends without the size check (errors about size must get out).
    pub(super) fn send_unchecked(&self, msg: &ToClient) {
        match encode_to_client(self.encoding, msg) {
            Ok(frame) if !self.closed.load(Ordering::Acquire) => self.sender.send(frame.data, frame.binary),
            Ok(_) => {}
            Err(err) => tracing::warn!(error = %format!("{err:#}"), "could not encode a frame"),
        }
    }

    pub(super) fn encoding(&self) -> Encoding {
        self.encoding
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

impl ConnTransport for SocketTransport {
    fn send_event(&self, name: &str, args_cbor: &[u8]) -> anyhow::Result<()> {
        let msg = ToClient::Event { name: name.to_string(), args_cbor: args_cbor.to_vec() };
        match self.send(&msg) {
            Ok(()) => Ok(()),
            Err(err) => {
                let e = RivetError::extract(&err);
                if e.qualified_code() == "message.outgoing_too_long" {
                    // An oversize event closes the socket (docs/wire-formats.md).
                    self.close(1011, "message.outgoing_too_long");
                }
                Err(err)
            }
        }
    }

    fn close(&self, code: u16, reason: &str) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.sender.close(Some(code), Some(reason.to_string()));
        }
    }

    fn is_closed(&self) -> bool {
        SocketTransport::is_closed(self)
    }
}
