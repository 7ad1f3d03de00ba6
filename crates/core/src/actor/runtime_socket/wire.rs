//! The messages of the runtime socket, version 1, and their BARE encoding
//! (docs/runtime-socket.md, "Wire format").
//!
//! Written by hand rather than generated: the schema is small, and the
//! decoder must be strict (a tag it does not know, a length beyond the
//! frame, trailing bytes: all malformed) and must never allocate more than
//! the frame it was given, which bounds every list and string by the frame
//! size the connection already enforces.
//!
//! Every payload starts with the protocol version, a little-endian `u16`
//! (the "embedded version" convention of vbare), then the BARE body.

/// The only protocol version this host speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// A SQL value, as parameter or as a column of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestPayload {
    /// A script of any number of statements, no parameters, no rows.
    Exec {
        script: String,
    },
    /// One statement with positional parameters.
    Query {
        sql: String,
        params: Vec<SqlValue>,
    },
    /// Opens a transaction owned by `lease_key` (default timeout when `None`).
    Begin {
        lease_key: String,
        timeout_ms: Option<u64>,
    },
    Commit {
        lease_key: String,
    },
    Rollback {
        lease_key: String,
    },
}

/// The one client frame after the handshake.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub request_id: u32,
    /// For `Exec` and `Query`: run inside this connection's lease.
    pub lease_key: Option<String>,
    pub payload: RequestPayload,
}

/// The rows of a `Query`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryOk {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<SqlValue>>,
    pub changes: i64,
    pub last_insert_row_id: Option<i64>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponsePayload {
    ExecOk,
    QueryOk(QueryOk),
    BeginOk,
    CommitOk,
    RollbackOk,
    SqlError { code: i32, statement_index: u32, message: String },
    EndpointClosed,
    QueueFull { limit: String, capacity: u32 },
    InvalidLeaseKey { message: String },
    LeaseExpired { timeout_ms: u64, message: String },
    ResponseTooLarge,
}

/// Why the server closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoAwayReason {
    FrameTooLarge,
    MalformedFrame,
}

/// A frame the server sends after the handshake.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerFrame {
    Response { request_id: u32, payload: ResponsePayload },
    GoAway(GoAwayReason),
}

/// The server's answer to the client's hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerHello {
    Ok { max_frame_bytes: u32 },
    RejectUnsupportedVersion,
}

/// A payload that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed runtime socket frame: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

/// The version a payload announces, if it has one.
pub fn version_of(payload: &[u8]) -> Option<u16> {
    payload.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

// --- decoding ---------------------------------------------------------------

/// Decodes the client hello (version 1: an empty body).
pub fn decode_client_hello(payload: &[u8]) -> Result<(), Malformed> {
    let mut r = Reader::versioned(payload)?;
    r.finish()
}

/// Decodes a client frame (version 1: the only variant is a request).
pub fn decode_client_frame(payload: &[u8]) -> Result<Request, Malformed> {
    let mut r = Reader::versioned(payload)?;
    if r.uint()? != 0 {
        return Err(Malformed("unknown client frame"));
    }
    let request_id = r.u32()?;
    let lease_key = r.optional(Reader::string)?;
    let payload = match r.uint()? {
        0 => RequestPayload::Exec { script: r.string()? },
        1 => {
            let sql = r.string()?;
            let params = r.list(Reader::value)?;
            RequestPayload::Query { sql, params }
        }
        2 => {
            let lease_key = r.string()?;
            let timeout_ms = r.optional(Reader::u64)?;
            RequestPayload::Begin { lease_key, timeout_ms }
        }
        3 => RequestPayload::Commit { lease_key: r.string()? },
        4 => RequestPayload::Rollback { lease_key: r.string()? },
        _ => return Err(Malformed("unknown request")),
    };
    r.finish()?;
    Ok(Request { request_id, lease_key, payload })
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn versioned(payload: &'a [u8]) -> Result<Self, Malformed> {
        match version_of(payload) {
            Some(PROTOCOL_VERSION) => Ok(Self { bytes: &payload[2..] }),
            Some(_) => Err(Malformed("unsupported version")),
            None => Err(Malformed("no version")),
        }
    }

    fn finish(&mut self) -> Result<(), Malformed> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed("trailing bytes"))
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.bytes.len() {
            return Err(Malformed("truncated"));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// BARE `uint`: LEB128, at most 10 bytes, minimal, no overflow.
    fn uint(&mut self) -> Result<u64, Malformed> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = self.take(1)?[0];
            if i == 9 && byte > 1 {
                return Err(Malformed("uint overflows"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(Malformed("uint not minimal"));
                }
                return Ok(value);
            }
        }
        Err(Malformed("uint too long"))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(self.fixed()?))
    }

    fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(self.fixed()?))
    }

    /// A length, never more than the bytes left (each item takes at least one).
    fn length(&mut self) -> Result<usize, Malformed> {
        let n = self.uint()?;
        if n > self.bytes.len() as u64 {
            return Err(Malformed("length beyond the frame"));
        }
        Ok(n as usize)
    }

    fn data(&mut self) -> Result<Vec<u8>, Malformed> {
        let n = self.length()?;
        Ok(self.take(n)?.to_vec())
    }

    fn string(&mut self) -> Result<String, Malformed> {
        String::from_utf8(self.data()?).map_err(|_| Malformed("string is not UTF-8"))
    }

    fn optional<T>(&mut self, item: impl FnOnce(&mut Self) -> Result<T, Malformed>) -> Result<Option<T>, Malformed> {
        match self.take(1)?[0] {
            0 => Ok(None),
            1 => item(self).map(Some),
            _ => Err(Malformed("bad optional tag")),
        }
    }

    fn list<T>(&mut self, item: impl Fn(&mut Self) -> Result<T, Malformed>) -> Result<Vec<T>, Malformed> {
        let n = self.length()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(out)
    }

    fn value(&mut self) -> Result<SqlValue, Malformed> {
        Ok(match self.uint()? {
            0 => SqlValue::Null,
            1 => SqlValue::Integer(i64::from_le_bytes(self.fixed()?)),
            2 => SqlValue::Real(f64::from_le_bytes(self.fixed()?)),
            3 => SqlValue::Text(self.string()?),
            4 => SqlValue::Blob(self.data()?),
            _ => return Err(Malformed("unknown SQL value")),
        })
    }
}

// --- encoding ---------------------------------------------------------------

/// Encodes the server hello.
pub fn encode_server_hello(hello: ServerHello) -> Vec<u8> {
    let mut w = Writer::versioned();
    match hello {
        ServerHello::Ok { max_frame_bytes } => {
            w.uint(0);
            w.bytes(&max_frame_bytes.to_le_bytes());
        }
        ServerHello::RejectUnsupportedVersion => w.uint(1),
    }
    w.0
}

/// Encodes a server frame.
pub fn encode_server_frame(frame: &ServerFrame) -> Vec<u8> {
    let mut w = Writer::versioned();
    match frame {
        ServerFrame::Response { request_id, payload } => {
            w.uint(0);
            w.bytes(&request_id.to_le_bytes());
            w.response(payload);
        }
        ServerFrame::GoAway(reason) => {
            w.uint(1);
            w.uint(match reason {
                GoAwayReason::FrameTooLarge => 0,
                GoAwayReason::MalformedFrame => 1,
            });
        }
    }
    w.0
}

/// Encodes a client hello (for clients: the tests, the docs' examples).
pub fn encode_client_hello() -> Vec<u8> {
    Writer::versioned().0
}

/// Encodes a client frame (for clients: the tests).
pub fn encode_client_frame(request: &Request) -> Vec<u8> {
    let mut w = Writer::versioned();
    w.uint(0);
    w.bytes(&request.request_id.to_le_bytes());
    w.optional(request.lease_key.as_deref(), |w, key| w.string(key));
    match &request.payload {
        RequestPayload::Exec { script } => {
            w.uint(0);
            w.string(script);
        }
        RequestPayload::Query { sql, params } => {
            w.uint(1);
            w.string(sql);
            w.uint(params.len() as u64);
            params.iter().for_each(|v| w.value(v));
        }
        RequestPayload::Begin { lease_key, timeout_ms } => {
            w.uint(2);
            w.string(lease_key);
            w.optional(*timeout_ms, |w, ms| w.bytes(&ms.to_le_bytes()));
        }
        RequestPayload::Commit { lease_key } => {
            w.uint(3);
            w.string(lease_key);
        }
        RequestPayload::Rollback { lease_key } => {
            w.uint(4);
            w.string(lease_key);
        }
    }
    w.0
}

struct Writer(Vec<u8>);

impl Writer {
    fn versioned() -> Self {
        Self(PROTOCOL_VERSION.to_le_bytes().to_vec())
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn uint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.0.push((n as u8) | 0x80);
            n >>= 7;
        }
        self.0.push(n as u8);
    }

    fn data(&mut self, bytes: &[u8]) {
        self.uint(bytes.len() as u64);
        self.bytes(bytes);
    }

    fn string(&mut self, s: &str) {
        self.data(s.as_bytes());
    }

    fn optional<T>(&mut self, value: Option<T>, item: impl FnOnce(&mut Self, T)) {
        match value {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(1);
                item(self, v);
            }
        }
    }

    fn value(&mut self, value: &SqlValue) {
        match value {
            SqlValue::Null => self.uint(0),
            SqlValue::Integer(n) => {
                self.uint(1);
                self.bytes(&n.to_le_bytes());
            }
            SqlValue::Real(f) => {
                self.uint(2);
                self.bytes(&f.to_le_bytes());
            }
            SqlValue::Text(s) => {
                self.uint(3);
                self.string(s);
            }
            SqlValue::Blob(b) => {
                self.uint(4);
                self.data(b);
            }
        }
    }

    fn response(&mut self, payload: &ResponsePayload) {
        match payload {
            ResponsePayload::ExecOk => self.uint(0),
            ResponsePayload::QueryOk(ok) => {
                self.uint(1);
                self.uint(ok.columns.len() as u64);
                ok.columns.iter().for_each(|c| self.string(c));
                self.uint(ok.rows.len() as u64);
                for row in &ok.rows {
                    self.uint(row.len() as u64);
                    row.iter().for_each(|v| self.value(v));
                }
                self.bytes(&ok.changes.to_le_bytes());
                self.optional(ok.last_insert_row_id, |w, id| w.bytes(&id.to_le_bytes()));
            }
            ResponsePayload::BeginOk => self.uint(2),
            ResponsePayload::CommitOk => self.uint(3),
            ResponsePayload::RollbackOk => self.uint(4),
            ResponsePayload::SqlError { code, statement_index, message } => {
                self.uint(5);
                self.bytes(&code.to_le_bytes());
                self.bytes(&statement_index.to_le_bytes());
                self.string(message);
            }
            ResponsePayload::EndpointClosed => self.uint(6),
            ResponsePayload::QueueFull { limit, capacity } => {
                self.uint(7);
                self.string(limit);
                self.bytes(&capacity.to_le_bytes());
            }
            ResponsePayload::InvalidLeaseKey { message } => {
                self.uint(8);
                self.string(message);
            }
            ResponsePayload::LeaseExpired { timeout_ms, message } => {
                self.uint(9);
                self.bytes(&timeout_ms.to_le_bytes());
                self.string(message);
            }
            ResponsePayload::ResponseTooLarge => self.uint(10),
        }
    }
}

/// Decoding of server frames, for the tests (the role of a client).
#[cfg(test)]
pub mod client {
    use super::*;

    pub fn decode_server_hello(payload: &[u8]) -> Result<ServerHello, Malformed> {
        let mut r = Reader::versioned(payload)?;
        let hello = match r.uint()? {
            0 => ServerHello::Ok { max_frame_bytes: r.u32()? },
            1 => ServerHello::RejectUnsupportedVersion,
            _ => return Err(Malformed("unknown hello")),
        };
        r.finish()?;
        Ok(hello)
    }

    pub fn decode_server_frame(payload: &[u8]) -> Result<ServerFrame, Malformed> {
        let mut r = Reader::versioned(payload)?;
        let frame = match r.uint()? {
            0 => {
                let request_id = r.u32()?;
                ServerFrame::Response { request_id, payload: response(&mut r)? }
            }
            1 => ServerFrame::GoAway(match r.uint()? {
                0 => GoAwayReason::FrameTooLarge,
                1 => GoAwayReason::MalformedFrame,
                _ => return Err(Malformed("unknown reason")),
            }),
            _ => return Err(Malformed("unknown server frame")),
        };
        r.finish()?;
        Ok(frame)
    }

    fn response(r: &mut Reader<'_>) -> Result<ResponsePayload, Malformed> {
        Ok(match r.uint()? {
            0 => ResponsePayload::ExecOk,
            1 => {
                let columns = r.list(Reader::string)?;
                let rows = r.list(|r| r.list(Reader::value))?;
                let changes = i64::from_le_bytes(r.fixed()?);
                let last_insert_row_id = r.optional(|r| Ok(i64::from_le_bytes(r.fixed()?)))?;
                ResponsePayload::QueryOk(QueryOk { columns, rows, changes, last_insert_row_id })
            }
            2 => ResponsePayload::BeginOk,
            3 => ResponsePayload::CommitOk,
            4 => ResponsePayload::RollbackOk,
            5 => ResponsePayload::SqlError {
                code: i32::from_le_bytes(r.fixed()?),
                statement_index: r.u32()?,
                message: r.string()?,
            },
            6 => ResponsePayload::EndpointClosed,
            7 => ResponsePayload::QueueFull { limit: r.string()?, capacity: r.u32()? },
            8 => ResponsePayload::InvalidLeaseKey { message: r.string()? },
            9 => ResponsePayload::LeaseExpired { timeout_ms: r.u64()?, message: r.string()? },
            10 => ResponsePayload::ResponseTooLarge,
            _ => return Err(Malformed("unknown response")),
        })
    }
}
