//! The inspector protocol's older versions (docs/inspector.md): a request
//! of version 1-5 read as a version 6 request, a version 6 message written
//! as a message of version 1-5, and the legacy framing that prefixes every
//! frame with its version.
//!
//! Versions only appended or inserted union members and appended fields to
//! `Init`, so request bodies and most message bodies are the same bytes in
//! every version; only the union tags move. What an older version cannot
//! carry becomes an `Error` naming what was dropped, as the reference does.

use super::wire::{self, Message, Reader, Writer, REQUEST_KINDS, VERSION};
use crate::error::RivetError;

/// The oldest version spoken.
pub const OLDEST: u16 = 1;
/// The version of the legacy framing (a connection that names none).
pub const LEGACY: u16 = 5;

fn unsupported_version(version: u16) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::INSPECTOR_UNSUPPORTED_VERSION,
        format!("inspector protocol version {version} is not supported; supported: {OLDEST} to {VERSION}"),
    )
    .into_anyhow()
}

fn invalid(what: &str, err: impl std::fmt::Display) -> anyhow::Error {
    RivetError::new(crate::error_codes::INSPECTOR_INVALID_MESSAGE, format!("undecodable inspector {what}: {err}"))
        .into_anyhow()
}

fn check_version(version: u16) -> anyhow::Result<()> {
    if (OLDEST..=VERSION).contains(&version) {
        Ok(())
    } else {
        Err(unsupported_version(version))
    }
}

/// The version 6 tag of request kind `tag` of `version`.
fn request_tag(tag: u64, version: u16) -> anyhow::Result<u64> {
    let upgraded = match version {
        // PatchState, State, Connections, Action, Events, ClearEvents, Rpcs.
        1 => match tag {
            0..=3 => Some(tag),
            4 | 5 => anyhow::bail!("version 1 event requests have no later equivalent"),
            6 => Some(4),
            _ => None,
        },
        2 => (tag < 8).then_some(tag),
        // Version 4 inserted WorkflowReplay before the database requests.
        3 => match tag {
            0..=7 => Some(tag),
            8 | 9 => Some(tag + 1),
            _ => None,
        },
        4 | 5 => (tag < 11).then_some(tag),
        _ => (tag < REQUEST_KINDS).then_some(tag),
    };
    upgraded.ok_or_else(|| anyhow::anyhow!("unknown request kind {tag} in version {version}"))
}

/// A request of `version` as a version 6 request frame
/// (`decodeInspectorRequest`).
pub fn upgrade_request(bytes: &[u8], version: u16) -> anyhow::Result<Vec<u8>> {
    check_version(version)?;
    let mut r = Reader(bytes);
    let tag = r.uint().map_err(|e| invalid("request", e))?;
    let tag = request_tag(tag, version).map_err(|e| invalid("request", e))?;
    let mut w = Writer::default();
    w.uint(tag);
    w.0.extend_from_slice(r.0);
    wire::decode_request(&w.0).map_err(|e| invalid("request", e))?;
    Ok(w.0)
}

/// A request frame of `version`, read.
pub fn decode_request_in(bytes: &[u8], version: u16) -> anyhow::Result<wire::Request> {
    let upgraded = upgrade_request(bytes, version)?;
    wire::decode_request(&upgraded).map_err(|e| invalid("request", e))
}

fn dropped(what: &str) -> Message {
    Message::Error { message: format!("inspector.{what}_dropped") }
}

/// `message` as `version` can carry it: what it has no member for becomes
/// an `Error` `inspector.<feature>_dropped`.
fn carried(message: Message, version: u16) -> Message {
    use Message as M;
    match message {
        M::SchedulesUpdated { .. } | M::Schedules { .. } | M::ScheduleHistory { .. } | M::ScheduleDelete { .. }
            if version < 6 =>
        {
            dropped("schedules")
        }
        M::WorkflowReplay { .. } if version < 4 => dropped("workflow_history"),
        M::DatabaseSchema { .. } | M::DatabaseTableRows { .. } if version < 3 => dropped("database"),
        M::QueueUpdated { .. } | M::Queue { .. } if version < 2 => dropped("queue"),
        M::WorkflowHistoryUpdated { .. } | M::WorkflowHistory { .. } if version < 2 => dropped("workflow_history"),
        M::TraceQuery { .. } if version < 2 => dropped("trace"),
        message => message,
    }
}

/// The union tag of `message` in `version` (`None`: no such member there;
/// [`carried`] has already replaced those).
fn message_tag(message: &Message, version: u16) -> Option<u64> {
    let v6 = wire::tag(message);
    match version {
        6 => Some(v6),
        // StateResponse, ConnectionsResponse, EventsResponse, ActionResponse,
        // RpcsListResponse, ConnectionsUpdated, EventsUpdated, StateUpdated,
        // Error, Init.
        1 => match v6 {
            0 | 1 => Some(v6),
            2 => Some(3),
            8 => Some(4),
            3 => Some(5),
            5 => Some(7),
            16 => Some(8),
            17 => Some(9),
            _ => None,
        },
        _ => {
            // Versions 2-5: 0-6 as in 6, then RpcsList, TraceQuery, Queue,
            // WorkflowHistory, WorkflowReplay (4+), Error, Init, database (3+).
            let replay = u64::from(version >= 4);
            match v6 {
                0..=6 => Some(v6),
                8..=11 => Some(v6 - 1),
                12 if version >= 4 => Some(11),
                16 => Some(11 + replay),
                17 => Some(12 + replay),
                18 | 19 if version >= 3 => Some(v6 - 5 + replay),
                _ => None,
            }
        }
    }
}

/// Writes `message` as a frame of `version`.
pub fn encode_message_in(message: Message, version: u16) -> anyhow::Result<Vec<u8>> {
    check_version(version)?;
    let message = carried(message, version);
    let tag = message_tag(&message, version)
        .ok_or_else(|| invalid("message", format!("no member for {message:?} in version {version}")))?;
    let mut w = Writer::default();
    w.uint(tag);
    match &message {
        Message::Init(init) => wire::write_init(&mut w, init, version),
        other => wire::write_body(&mut w, other),
    }
    Ok(w.0)
}

/// A version 6 message frame as a frame of `version`
/// (`encodeInspectorResponse`).
pub fn downgrade_message(bytes: &[u8], version: u16) -> anyhow::Result<Vec<u8>> {
    check_version(version)?;
    let message = wire::decode_message(bytes).map_err(|e| invalid("message", e))?;
    encode_message_in(message, version)
}

/// How a connection frames its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `?protocol_version=N`: bare frames of version N.
    Negotiated(u16),
    /// No version named: every frame starts with its version (two bytes,
    /// little-endian); we answer in version 5.
    Legacy,
}

impl Framing {
    /// Reads the version from the connection's query: absent is the
    /// legacy framing; anything but 1-6 is refused.
    pub fn from_query(value: Option<&str>) -> Option<Self> {
        match value {
            None => Some(Framing::Legacy),
            Some(value) => {
                value.parse::<u16>().ok().filter(|v| (OLDEST..=VERSION).contains(v)).map(Framing::Negotiated)
            }
        }
    }

    /// The version answers are written in.
    pub fn version(self) -> u16 {
        match self {
            Framing::Negotiated(version) => version,
            Framing::Legacy => LEGACY,
        }
    }

    /// Reads one frame from the client.
    pub fn decode(self, frame: &[u8]) -> anyhow::Result<wire::Request> {
        match self {
            Framing::Negotiated(version) => decode_request_in(frame, version),
            Framing::Legacy => {
                let [low, high, rest @ ..] = frame else {
                    return Err(invalid("request", "no version prefix"));
                };
                decode_request_in(rest, u16::from_le_bytes([*low, *high]))
            }
        }
    }

    /// Writes one frame to the client.
    pub fn encode(self, message: Message) -> anyhow::Result<Vec<u8>> {
        let bytes = encode_message_in(message, self.version())?;
        Ok(match self {
            Framing::Negotiated(_) => bytes,
            Framing::Legacy => [&LEGACY.to_le_bytes()[..], &bytes[..]].concat(),
        })
    }
}

#[cfg(test)]
#[path = "versions_tests.rs"]
mod tests;
