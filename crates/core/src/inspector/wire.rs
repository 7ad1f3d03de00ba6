//! The inspector protocol's frames (docs/inspector.md): the requests we
//! read and the messages we send, in BARE of version 6, written by hand for
//! the few types we use; and the conversions between version 6 and
//! version 5 (`decodeInspectorRequest`, `encodeInspectorResponse`).

use crate::error::RivetError;

/// The current version.
pub const VERSION: u16 = 6;
/// The oldest version we convert to and from.
pub const OLDEST: u16 = 5;
/// Request kinds of version 5 (version 6 appends three).
const V5_REQUESTS: u64 = 11;
const V6_REQUESTS: u64 = 14;
const V6_MESSAGES: u64 = 20;

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

    fn bool(&mut self) -> anyhow::Result<bool> {
        let (&byte, rest) = self.0.split_first().ok_or_else(|| anyhow::anyhow!("truncated bool"))?;
        self.0 = rest;
        match byte {
            0 | 1 => Ok(byte == 1),
            b => anyhow::bail!("invalid bool {b}"),
        }
    }

    fn opt_data(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        if self.bool()? {
            self.data().map(Some)
        } else {
            Ok(None)
        }
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

fn unsupported_version(version: u16) -> anyhow::Error {
    RivetError::new(
        "inspector",
        "unsupported_version",
        format!("inspector protocol version {version} is not supported; supported: {OLDEST} and {VERSION}"),
    )
    .into_anyhow()
}

fn invalid(what: &str, err: impl std::fmt::Display) -> anyhow::Error {
    RivetError::new("inspector", "invalid_message", format!("undecodable inspector {what}: {err}")).into_anyhow()
}

/// A request of `version` as a version 6 request (`decodeInspectorRequest`).
pub fn upgrade_request(bytes: &[u8], version: u16) -> anyhow::Result<Vec<u8>> {
    let kinds = match version {
        5 => V5_REQUESTS,
        6 => V6_REQUESTS,
        v => return Err(unsupported_version(v)),
    };
    let tag = Reader(bytes).uint().map_err(|e| invalid("request", e))?;
    if tag >= kinds {
        return Err(invalid("request", format!("unknown request kind {tag} in version {version}")));
    }
    // Version 6 only appended request kinds: the bytes stay as they are.
    Ok(bytes.to_vec())
}

/// A version 6 message as a message of `version` (`encodeInspectorResponse`).
/// Version 5 has no schedules: their messages become an `Error`
/// `inspector.schedules_dropped`, and `Init` loses its schedule list.
pub fn downgrade_message(bytes: &[u8], version: u16) -> anyhow::Result<Vec<u8>> {
    let mut r = Reader(bytes);
    let tag = r.uint().map_err(|e| invalid("message", e))?;
    if tag >= V6_MESSAGES {
        return Err(invalid("message", format!("unknown message kind {tag}")));
    }
    match version {
        6 => return Ok(bytes.to_vec()),
        5 => {}
        v => return Err(unsupported_version(v)),
    }
    let body = r.0;
    let v5_tag = match tag {
        0..=6 => tag,
        7 | 13..=15 => return Ok(schedules_dropped_v5()),
        8..=12 => tag - 1,
        16 => 12,
        17 => return init_v5(body),
        _ => tag - 4, // 18, 19: the database responses
    };
    let mut w = Writer::default();
    w.uint(v5_tag);
    w.0.extend_from_slice(body);
    Ok(w.0)
}

fn schedules_dropped_v5() -> Vec<u8> {
    let mut w = Writer::default();
    w.uint(12).data(b"inspector.schedules_dropped");
    w.0
}

/// Version 5's `Init`: version 6's without its last field, the schedules.
fn init_v5(body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut r = Reader(body);
    let start = r.0.len();
    let mut skip = || -> anyhow::Result<()> {
        for _ in 0..r.uint()? {
            r.data()?; // connection id
            r.data()?; // details
        }
        r.opt_data()?; // state
        r.bool()?; // isStateEnabled
        for _ in 0..r.uint()? {
            r.data()?; // rpc name
        }
        r.bool()?; // isDatabaseEnabled
        r.uint()?; // queueSize
        r.opt_data()?; // workflowHistory
        r.bool()?; // isWorkflowEnabled
        for _ in 0..r.uint()? {
            r.data()?; // tab id
            r.opt_data()?; // label
            r.opt_data()?; // icon
            r.bool()?; // hidden
        }
        Ok(())
    };
    skip().map_err(|e| invalid("Init", e))?;
    let kept = start - r.0.len();
    let mut w = Writer::default();
    w.uint(13);
    w.0.extend_from_slice(&body[..kept]);
    Ok(w.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_5_requests_are_version_6_requests() {
        let state = [1, 5];
        assert_eq!(upgrade_request(&state, 5).unwrap(), state);
        assert_eq!(upgrade_request(&state, 6).unwrap(), state);
        let schedules = [11, 5];
        assert!(upgrade_request(&schedules, 6).is_ok());
        assert!(upgrade_request(&schedules, 5).is_err(), "no schedules in version 5");
        let err = upgrade_request(&state, 4).unwrap_err();
        assert_eq!(RivetError::extract(&err).code, "unsupported_version");
    }

    #[test]
    fn version_6_messages_downgrade_to_version_5() {
        let init = encode_message(&Message::Init { state: Some(vec![0xa0]), queue_size: 3 });
        let v5 = downgrade_message(&init, 5).unwrap();
        assert_eq!(v5[0], 13);
        assert_eq!(&v5[1..], &init[1..init.len() - 1], "everything but the schedule list");
        let error = encode_message(&Message::Error { message: "x".into() });
        assert_eq!(downgrade_message(&error, 5).unwrap(), [12, 1, b'x']);
        let rpcs = encode_message(&Message::Rpcs { rid: 1, rpcs: vec![] });
        assert_eq!(downgrade_message(&rpcs, 5).unwrap(), [7, 1, 0]);
        let state = encode_message(&Message::StateUpdated { state: vec![1] });
        assert_eq!(downgrade_message(&state, 5).unwrap(), state);
        assert_eq!(downgrade_message(&[7, 0], 5).unwrap(), schedules_dropped_v5());
        assert_eq!(downgrade_message(&init, 6).unwrap(), init);
        assert!(downgrade_message(&[20], 6).is_err());
        assert!(downgrade_message(&init[..4], 5).is_err());
    }

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
