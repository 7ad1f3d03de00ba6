//! The inspector protocol's frames, version 6 (docs/inspector.md): the
//! requests we read and the messages we send, in BARE, written by hand for
//! the few types we use. A negotiated socket sends bare frames; nothing
//! else is spoken yet.

/// The only version spoken (a client names it with `?protocol_version=6`).
pub const VERSION: u16 = 6;

/// A request from the inspector (`ToServerBody`); the ones we do not
/// answer keep their id so that the error can name them.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    State {
        id: u64,
    },
    Connections {
        id: u64,
    },
    Action {
        id: u64,
        name: String,
        args: Vec<u8>,
    },
    Rpcs {
        id: u64,
    },
    Queue {
        id: u64,
        limit: u64,
    },
    /// Any other request (its union tag).
    Other {
        tag: u64,
    },
}

/// A message to the inspector (`ToClientBody`).
#[derive(Debug, PartialEq, Eq)]
pub enum Message {
    Init { state: Option<Vec<u8>>, queue_size: u64 },
    State { rid: u64, state: Option<Vec<u8>> },
    Connections { rid: u64, connections: Vec<(String, Vec<u8>)> },
    Action { rid: u64, output: Vec<u8> },
    StateUpdated { state: Vec<u8> },
    QueueUpdated { queue_size: u64 },
    Rpcs { rid: u64, rpcs: Vec<String> },
    Queue { rid: u64, size: u64, max_size: u64 },
    Error { message: String },
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn uint(&mut self) -> anyhow::Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first().ok_or_else(|| anyhow::anyhow!("truncated uint"))?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        anyhow::bail!("uint too long")
    }

    fn data(&mut self) -> anyhow::Result<Vec<u8>> {
        let len = usize::try_from(self.uint()?)?;
        anyhow::ensure!(len <= self.0.len(), "truncated data");
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head.to_vec())
    }

    fn str(&mut self) -> anyhow::Result<String> {
        Ok(String::from_utf8(self.data()?)?)
    }
}

/// Reads one request frame.
pub fn decode_request(bytes: &[u8]) -> anyhow::Result<Request> {
    let mut r = Reader(bytes);
    let tag = r.uint()?;
    Ok(match tag {
        1 => Request::State { id: r.uint()? },
        2 => Request::Connections { id: r.uint()? },
        3 => Request::Action { id: r.uint()?, name: r.str()?, args: r.data()? },
        4 => Request::Rpcs { id: r.uint()? },
        6 => Request::Queue { id: r.uint()?, limit: r.uint()? },
        tag => Request::Other { tag },
    })
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn uint(&mut self, mut value: u64) -> &mut Self {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
        self
    }
    fn data(&mut self, bytes: &[u8]) -> &mut Self {
        self.uint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }
    fn bool(&mut self, value: bool) -> &mut Self {
        self.0.push(u8::from(value));
        self
    }
    fn opt_data(&mut self, value: Option<&[u8]>) -> &mut Self {
        match value {
            Some(bytes) => self.bool(true).data(bytes),
            None => self.bool(false),
        }
    }
}

/// Writes one message frame.
pub fn encode_message(message: &Message) -> Vec<u8> {
    let mut w = Writer::default();
    match message {
        Message::State { rid, state } => {
            w.uint(0).uint(*rid).opt_data(state.as_deref()).bool(true);
        }
        Message::Connections { rid, connections } => {
            w.uint(1).uint(*rid).uint(connections.len() as u64);
            for (id, details) in connections {
                w.data(id.as_bytes()).data(details);
            }
        }
        Message::Action { rid, output } => {
            w.uint(2).uint(*rid).data(output);
        }
        Message::QueueUpdated { queue_size } => {
            w.uint(4).uint(*queue_size);
        }
        Message::StateUpdated { state } => {
            w.uint(5).data(state);
        }
        Message::Rpcs { rid, rpcs } => {
            w.uint(8).uint(*rid).uint(rpcs.len() as u64);
            for rpc in rpcs {
                w.data(rpc.as_bytes());
            }
        }
        Message::Queue { rid, size, max_size } => {
            // QueueStatus: size, maxSize, messages (none listed), truncated.
            w.uint(10).uint(*rid).uint(*size).uint(*max_size).uint(0).bool(*size > 0);
        }
        Message::Error { message } => {
            w.uint(16).data(message.as_bytes());
        }
        Message::Init { state, queue_size } => {
            // connections, state, isStateEnabled, rpcs, isDatabaseEnabled,
            // queueSize, workflowHistory, isWorkflowEnabled, tabConfig, schedules.
            w.uint(17).uint(0).opt_data(state.as_deref()).bool(true).uint(0).bool(false);
            w.uint(*queue_size).opt_data(None).bool(false).uint(0).uint(0);
        }
    }
    w.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_decode() {
        assert_eq!(decode_request(&[1, 0xac, 0x02]).unwrap(), Request::State { id: 300 });
        assert_eq!(
            decode_request(&[3, 7, 3, b'i', b'n', b'c', 2, 0x81, 2]).unwrap(),
            Request::Action { id: 7, name: "inc".into(), args: vec![0x81, 2] }
        );
        assert_eq!(decode_request(&[9, 1]).unwrap(), Request::Other { tag: 9 });
        assert!(decode_request(&[3, 7, 9, b'x']).is_err());
        assert!(decode_request(&[]).is_err());
    }

    #[test]
    fn messages_encode() {
        assert_eq!(encode_message(&Message::State { rid: 1, state: Some(vec![0xa0]) }), [0, 1, 1, 1, 0xa0, 1]);
        assert_eq!(encode_message(&Message::StateUpdated { state: vec![0xa0] }), [5, 1, 0xa0]);
        assert_eq!(encode_message(&Message::Init { state: None, queue_size: 2 }), [17, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0]);
        assert_eq!(encode_message(&Message::Error { message: "x".into() }), [16, 1, b'x']);
    }
}
