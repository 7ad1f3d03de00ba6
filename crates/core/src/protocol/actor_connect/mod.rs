//! The actor-connect WebSocket protocol's messages (see
//! docs/wire-formats.md): the subprotocols of the upgrade (message
//! encoding and connection params), the server → client messages (`Init`,
//! `Error`, `ActionResponse`, `Event`) and the client → server messages
//! (`ActionRequest`, `SubscriptionRequest`) in each encoding.
//!
//! JSON frames are text, CBOR and BARE frames binary. Payloads (`output`,
//! `args`, `metadata`) are carried as the actor's CBOR: embedded verbatim in
//! CBOR and BARE frames, converted to JSON in JSON frames.

mod bare;
mod cbor;
mod json;
mod messages;

use std::collections::HashMap;
use std::fmt;

use serde_json::json;

use super::cbor_json::to_cbor;
use super::encoding::{header, Encoding};
use super::error_body::client_view;
use crate::error::RivetError;
pub use messages::{invalid_request, ToClient, ToServer};

/// One encoded WebSocket message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub data: Vec<u8>,
    /// False for JSON (a text frame, `data` is UTF-8), true for CBOR and BARE.
    pub binary: bool,
}

impl Frame {
    /// The text of a text frame; `None` for a binary frame.
    pub fn as_text(&self) -> Option<&str> {
        if self.binary {
            return None;
        }
        std::str::from_utf8(&self.data).ok()
    }
}

/// Encodes a server → client message. Fails (JSON only) when a payload is
/// not representable as JSON (a byte string, a non-string map key) or is
/// not CBOR.
pub fn encode_to_client(encoding: Encoding, msg: &ToClient) -> anyhow::Result<Frame> {
    Ok(match encoding {
        Encoding::Json => Frame { data: json::encode_to_client(msg)?, binary: false },
        Encoding::Cbor => Frame { data: cbor::encode_to_client(msg), binary: true },
        Encoding::Bare => Frame { data: bare::encode_to_client(msg)?, binary: true },
    })
}

/// Decodes a client → server message (text and binary frames alike). Every
/// failure is `protocol.invalid_actor_connect_request`, which the caller
/// answers by closing with 1011 `actor.invalid_request`.
pub fn decode_to_server(encoding: Encoding, data: &[u8]) -> anyhow::Result<ToServer> {
    match encoding {
        Encoding::Json => json::decode_to_server(data),
        Encoding::Cbor => cbor::decode_to_server(data),
        Encoding::Bare => bare::decode_to_server(data),
    }
}

// ---------------------------------------------------------------------------
// Error messages

/// The `Error` message for `err`. `masked` for an action failure (a
/// non-public error keeps its group and code, loses message and metadata:
/// docs/errors.md); unmasked for a connection-setup failure. Metadata is carried
/// as the CBOR of its JSON; the actor specifier is kept either way.
pub fn error_message(err: &RivetError, action_id: Option<u64>, masked: bool) -> ToClient {
    let view = if masked { client_view(err) } else { err.clone() };
    // JSON → CBOR cannot fail for a `serde_json::Value`; were it to, the
    // frame goes out without metadata rather than not at all.
    let metadata_cbor = view.metadata.as_ref().and_then(|m| to_cbor(m).ok());
    ToClient::Error {
        group: view.group,
        code: view.code,
        message: view.message,
        metadata_cbor,
        action_id,
        actor: view.actor,
    }
}

/// Sent instead of an `ActionResponse` that exceeds the outgoing limit
/// ; not itself size-checked.
pub fn outgoing_too_long_message(action_id: u64) -> ToClient {
    ToClient::Error {
        group: "message".to_owned(),
        code: "outgoing_too_long".to_owned(),
        message: "Outgoing message too long".to_owned(),
        metadata_cbor: None,
        action_id: Some(action_id),
        actor: None,
    }
}

/// Sent when connection setup exceeds `on_connect_timeout` ,
/// before closing with 1011 `actor.callback_timed_out`.
pub fn setup_timed_out_message(timeout_ms: u128) -> ToClient {
    ToClient::Error {
        group: "actor".to_owned(),
        code: "callback_timed_out".to_owned(),
        message: format!("actor websocket connection setup timed out after {timeout_ms} ms"),
        metadata_cbor: None,
        action_id: None,
        actor: None,
    }
}

// ---------------------------------------------------------------------------
// Handshake: Sec-WebSocket-Protocol

/// Header carrying the subprotocols.
pub const PROTOCOL_HEADER: &str = "sec-websocket-protocol";
/// `rivet_encoding.<json|cbor|bare>`.
pub const ENCODING_PROTOCOL_PREFIX: &str = "rivet_encoding.";
/// `rivet_conn_params.<urlencoded JSON>`.
pub const CONN_PARAMS_PROTOCOL_PREFIX: &str = "rivet_conn_params.";
/// Close code for an unknown `rivet_encoding.*`.
pub const UNSUPPORTED_ENCODING_CLOSE_CODE: u16 = 1003;
/// Close reason for an unknown `rivet_encoding.*`.
pub const UNSUPPORTED_ENCODING_CLOSE_REASON: &str = "actor.unsupported_websocket_encoding";

/// Why the subprotocols of an actor-connect upgrade are unacceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    /// `rivet_encoding.<encoding>` with an unknown value: accept the socket,
    /// then close it with 1003 `actor.unsupported_websocket_encoding`
    /// ([`HandshakeError::close`]).
    UnsupportedEncoding { encoding: String },
    /// `rivet_conn_params.*` is not URL-encoded JSON: the WebSocket callback
    /// fails (the envoy closes with 1011 "Server Error").
    InvalidConnParams { reason: String },
}

impl HandshakeError {
    /// `(code, reason)` of the close frame to answer with, when the socket
    /// is to be accepted and closed; `None` when the callback should fail.
    pub fn close(&self) -> Option<(u16, &'static str)> {
        match self {
            Self::UnsupportedEncoding { .. } => {
                Some((UNSUPPORTED_ENCODING_CLOSE_CODE, UNSUPPORTED_ENCODING_CLOSE_REASON))
            }
            Self::InvalidConnParams { .. } => None,
        }
    }

    /// `protocol.unsupported_encoding` or
    /// `protocol.invalid_actor_connect_request`.
    pub fn to_rivet_error(&self) -> RivetError {
        match self {
            Self::UnsupportedEncoding { encoding } => RivetError::new(
                crate::error_codes::PROTOCOL_UNSUPPORTED_ENCODING,
                format!("Unsupported protocol encoding '{encoding}'."),
            )
            .with_metadata(json!({ "encoding": encoding })),
            Self::InvalidConnParams { reason } => invalid_request("connection parameters", reason.clone()),
        }
    }

    pub fn into_anyhow(self) -> anyhow::Error {
        self.to_rivet_error().into_anyhow()
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_rivet_error())
    }
}

impl std::error::Error for HandshakeError {}

/// The `Sec-WebSocket-Protocol` value of `headers` (name matched
/// case-insensitively), as the one-element slice the parsers take.
pub fn protocol_header_values(headers: &HashMap<String, String>) -> Vec<&str> {
    header(headers, PROTOCOL_HEADER).into_iter().collect()
}

/// Every subprotocol in the header value(s): each value split on `,`, items
/// trimmed, in order.
pub fn subprotocols<'a>(header_values: &'a [&'a str]) -> impl Iterator<Item = &'a str> + 'a {
    header_values.iter().flat_map(|value| value.split(',')).map(str::trim)
}

/// The first subprotocol with `prefix`, without it.
fn find_subprotocol<'a>(header_values: &'a [&'a str], prefix: &str) -> Option<&'a str> {
    subprotocols(header_values).find_map(|protocol| protocol.strip_prefix(prefix))
}

/// The message encoding: the first `rivet_encoding.*` (exact, lower-case
/// `json`, `cbor` or `bare`); JSON when there is none.
pub fn parse_encoding(header_values: &[&str]) -> Result<Encoding, HandshakeError> {
    match find_subprotocol(header_values, ENCODING_PROTOCOL_PREFIX).unwrap_or("json") {
        "json" => Ok(Encoding::Json),
        "cbor" => Ok(Encoding::Cbor),
        "bare" => Ok(Encoding::Bare),
        other => Err(HandshakeError::UnsupportedEncoding { encoding: other.to_owned() }),
    }
}

/// The connection params as CBOR: the first `rivet_conn_params.*`, URL-form
/// decoded (the whole item is the value: `+` is a space, `%XX` a byte),
/// parsed as JSON and re-encoded; CBOR `null` when there is none. Also used
/// by raw WebSockets .
pub fn parse_conn_params(header_values: &[&str]) -> Result<Vec<u8>, HandshakeError> {
    let invalid = |reason: String| HandshakeError::InvalidConnParams { reason };
    let value = match find_subprotocol(header_values, CONN_PARAMS_PROTOCOL_PREFIX) {
        Some(encoded) => {
            let decoded = form_decode(encoded);
            serde_json::from_str(&decoded).map_err(|e| invalid(format!("not JSON: {e}")))?
        }
        None => serde_json::Value::Null,
    };
    to_cbor(&value).map_err(|e| invalid(format!("{e:#}")))
}

/// Encoding and connection params of an actor-connect upgrade. The encoding
/// is checked first, so an unknown encoding wins over bad params.
pub fn parse_subprotocols(header_values: &[&str]) -> Result<(Encoding, Vec<u8>), HandshakeError> {
    let encoding = parse_encoding(header_values)?;
    let params = parse_conn_params(header_values)?;
    Ok((encoding, params))
}

/// `application/x-www-form-urlencoded` decoding of one value: `+` → space,
/// `%XX` → that byte (a malformed escape stays literal), then UTF-8 with
/// invalid sequences replaced.
fn form_decode(input: &str) -> String {
    // Only literal pluses are spaces (`%2B` is a plus), and no escape holds a
    // `+`, so replacing them first leaves every escape as it was.
    let spaced = input.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::ActorSpecifier;
    use crate::protocol::cbor_json::{cbor_to_json, from_cbor};
    use serde_json::Value;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The error inside a decode failure.
    pub(crate) fn decode_err(encoding: Encoding, data: &[u8]) -> RivetError {
        let err = decode_to_server(encoding, data).expect_err("decoding should fail");
        err.downcast_ref::<RivetError>().cloned().expect("a RivetError")
    }

    pub(crate) fn assert_invalid(encoding: Encoding, data: &[u8]) {
        let err = decode_err(encoding, data);
        assert_eq!(err.qualified_code(), "protocol.invalid_actor_connect_request", "{err}");
        assert!(err.message.starts_with("Invalid actor-connect request "), "{err}");
    }

    pub(crate) fn without_actor(msg: ToClient) -> ToClient {
        match msg {
            ToClient::Error { group, code, message, metadata_cbor, action_id, .. } => {
                ToClient::Error { group, code, message, metadata_cbor, action_id, actor: None }
            }
            other => other,
        }
    }

    pub(crate) fn spec_actor() -> ActorSpecifier {
        ActorSpecifier { actor_id: "a1".into(), generation: 3, key: Some("k/1".into()) }
    }

    pub(crate) fn all_messages() -> Vec<ToClient> {
        vec![
            ToClient::Init { actor_id: "actor-1".into(), connection_id: "conn-1".into() },
            ToClient::Error {
                group: "user".into(),
                code: "boom".into(),
                message: "it broke".into(),
                metadata_cbor: Some(hex("a1617801")), // {"x": 1}
                action_id: Some(7),
                actor: Some(spec_actor()),
            },
            ToClient::Error {
                group: "actor".into(),
                code: "stopping".into(),
                message: "An internal error occurred".into(),
                metadata_cbor: None,
                action_id: None,
                actor: Some(ActorSpecifier { key: None, ..spec_actor() }),
            },
            ToClient::Error {
                group: "g".into(),
                code: "c".into(),
                message: "m".into(),
                metadata_cbor: None,
                action_id: None,
                actor: None,
            },
            ToClient::ActionResponse { id: 1, output_cbor: hex("83010203") },
            ToClient::ActionResponse { id: u64::MAX, output_cbor: hex("f6") },
            ToClient::Event { name: "tick".into(), args_cbor: hex("82 6161 f5") },
        ]
    }

    #[test]
    fn frames_are_text_for_json_and_binary_otherwise() {
        for msg in all_messages() {
            let frame = encode_to_client(Encoding::Json, &msg).unwrap();
            assert!(!frame.binary);
            assert!(frame.as_text().is_some());
            for encoding in [Encoding::Cbor, Encoding::Bare] {
                let frame = encode_to_client(encoding, &msg).unwrap();
                assert!(frame.binary);
                assert_eq!(frame.as_text(), None);
            }
        }
    }

    /// Every message decodes to the same logical value in JSON and CBOR.
    #[test]
    fn json_and_cbor_frames_agree() {
        for msg in all_messages() {
            let json_frame = encode_to_client(Encoding::Json, &msg).unwrap();
            let from_json: Value = serde_json::from_slice(&json_frame.data).unwrap();
            let cbor_frame = encode_to_client(Encoding::Cbor, &msg).unwrap();
            let from_cbor_frame: Value = from_cbor(&cbor_frame.data).unwrap();
            // JSON carries ids as ["$BigInt", "n"], CBOR as integers.
            let normalise = |mut v: Value| {
                for key in ["id", "actionId"] {
                    if let Some(Value::Array(a)) = v["body"]["val"].get(key).cloned() {
                        v["body"]["val"][key] = json!(a[1].as_str().unwrap().parse::<u64>().unwrap());
                    }
                }
                v
            };
            assert_eq!(normalise(from_json), from_cbor_frame, "{msg:?}");
        }
    }

    #[test]
    fn masked_action_error() {
        let err = RivetError::new(crate::error_codes::ACTOR_STOPPING, "Actor is stopping: secret.")
            .with_metadata(json!({"x": 1}))
            .with_actor(spec_actor());
        assert_eq!(
            error_message(&err, Some(9), true),
            ToClient::Error {
                group: "actor".into(),
                code: "stopping".into(),
                message: "An internal error occurred".into(),
                metadata_cbor: None,
                action_id: Some(9),
                actor: Some(spec_actor()),
            }
        );
    }

    #[test]
    fn public_action_error_keeps_message_and_metadata() {
        let err = RivetError::foreign("user", "nope", "Nope.").with_metadata(json!({"why": "x"}));
        let ToClient::Error { message, metadata_cbor, action_id, actor, .. } = error_message(&err, Some(1), true)
        else {
            panic!("not an Error")
        };
        assert_eq!(message, "Nope.");
        assert_eq!(cbor_to_json(&metadata_cbor.unwrap()).unwrap(), json!({"why": "x"}));
        assert_eq!((action_id, actor), (Some(1), None));
    }

    #[test]
    fn setup_error_is_unmasked() {
        let err = RivetError::new(crate::error_codes::NAPI_INVALID_STATE, "secret detail")
            .with_metadata(json!({"a": [1, 2]}))
            .with_actor(spec_actor());
        let ToClient::Error { group, code, message, metadata_cbor, action_id, actor } =
            error_message(&err, None, false)
        else {
            panic!("not an Error")
        };
        assert_eq!((group.as_str(), code.as_str(), message.as_str()), ("napi", "invalid_state", "secret detail"));
        assert_eq!(metadata_cbor, Some(hex("a1 6161 82 01 02")));
        assert_eq!((action_id, actor), (None, Some(spec_actor())));
    }

    #[test]
    fn fixed_error_messages() {
        let ToClient::Error { group, code, message, action_id, .. } = outgoing_too_long_message(4) else { panic!() };
        assert_eq!(
            (group.as_str(), code.as_str(), message.as_str(), action_id),
            ("message", "outgoing_too_long", "Outgoing message too long", Some(4))
        );
        let ToClient::Error { code, message, action_id, .. } = setup_timed_out_message(5000) else { panic!() };
        assert_eq!(code, "callback_timed_out");
        assert_eq!(message, "actor websocket connection setup timed out after 5000 ms");
        assert_eq!(action_id, None);
    }

    // ---- handshake ----

    const NULL_CBOR: [u8; 1] = [0xf6];

    #[test]
    fn no_subprotocols_is_json_and_null_params() {
        assert_eq!(parse_subprotocols(&[]).unwrap(), (Encoding::Json, NULL_CBOR.to_vec()));
        assert_eq!(parse_subprotocols(&[""]).unwrap(), (Encoding::Json, NULL_CBOR.to_vec()));
        assert_eq!(parse_subprotocols(&["rivet"]).unwrap(), (Encoding::Json, NULL_CBOR.to_vec()));
    }

    #[test]
    fn each_encoding() {
        for (name, encoding) in [("json", Encoding::Json), ("cbor", Encoding::Cbor), ("bare", Encoding::Bare)] {
            let value = format!("rivet, rivet_encoding.{name}, rivet_target.actor, rivet_actor.abc");
            assert_eq!(parse_subprotocols(&[&value]).unwrap().0, encoding, "{name}");
        }
        // Split across several header values, whitespace trimmed.
        assert_eq!(parse_encoding(&["rivet", "  rivet_encoding.bare  ,x"]).unwrap(), Encoding::Bare);
        // The first one wins.
        assert_eq!(parse_encoding(&["rivet_encoding.cbor,rivet_encoding.bogus"]).unwrap(), Encoding::Cbor);
    }

    #[test]
    fn unknown_encoding_closes_1003() {
        for value in ["rivet_encoding.msgpack", "rivet_encoding.JSON", "rivet_encoding.", "rivet_encoding.cbor2"] {
            let err = parse_subprotocols(&[value]).unwrap_err();
            assert!(matches!(err, HandshakeError::UnsupportedEncoding { .. }), "{value}");
            assert_eq!(err.close(), Some((1003, "actor.unsupported_websocket_encoding")));
            assert_eq!(err.to_rivet_error().qualified_code(), "protocol.unsupported_encoding");
        }
        // The encoding is checked before the params.
        let err = parse_subprotocols(&["rivet_encoding.x, rivet_conn_params.%7B"]).unwrap_err();
        assert!(matches!(err, HandshakeError::UnsupportedEncoding { encoding } if encoding == "x"));
    }

    #[test]
    fn conn_params_are_url_decoded_json_as_cbor() {
        // encodeURIComponent(JSON.stringify({token: "a b+c", n: 1, list: [true, null]}))
        let value = "rivet, rivet_encoding.cbor, rivet_conn_params.%7B%22token%22%3A%22a%20b%2Bc%22%2C%22n%22%3A1%2C%22list%22%3A%5Btrue%2Cnull%5D%7D";
        let (encoding, params) = parse_subprotocols(&[value]).unwrap();
        assert_eq!(encoding, Encoding::Cbor);
        assert_eq!(cbor_to_json(&params).unwrap(), json!({"token": "a b+c", "n": 1, "list": [true, null]}));
    }

    #[test]
    fn conn_params_plus_is_a_space() {
        let params = parse_conn_params(&["rivet_conn_params.%22x+y%22"]).unwrap();
        assert_eq!(params, hex("63 78 20 79")); // "x y"
        let params = parse_conn_params(&["rivet_conn_params.{\"a+b\":\"c%2Bd\"}"]).unwrap();
        assert_eq!(cbor_to_json(&params).unwrap(), json!({"a b": "c+d"}));
    }

    #[test]
    fn conn_params_percent_escapes() {
        let params = parse_conn_params(&["rivet_conn_params.%5B%22%25zz%22%2C%22%C3%A9%22%2C1.5%5D"]).unwrap();
        assert_eq!(cbor_to_json(&params).unwrap(), json!(["%zz", "é", 1.5]));
        let params = parse_conn_params(&["rivet_conn_params.\"100%\""]).unwrap();
        assert_eq!(cbor_to_json(&params).unwrap(), json!("100%"));
        let params = parse_conn_params(&["rivet_conn_params.%22%4%22"]).unwrap();
        assert_eq!(cbor_to_json(&params).unwrap(), json!("%4"));
        // The first one wins.
        let params = parse_conn_params(&["rivet_conn_params.1, rivet_conn_params.2"]).unwrap();
        assert_eq!(params, vec![0x01]);
    }

    #[test]
    fn invalid_conn_params_fail_the_callback() {
        for value in [
            "rivet_conn_params.",
            "rivet_conn_params.%7B",
            "rivet_conn_params.{a:1}",
            "rivet_conn_params.%7B%7D%7D",
            "rivet_conn_params.[1,2]", // split on ','
        ] {
            let err = parse_subprotocols(&[value]).unwrap_err();
            assert!(matches!(err, HandshakeError::InvalidConnParams { .. }), "{value}");
            assert_eq!(err.close(), None);
            assert_eq!(err.to_rivet_error().qualified_code(), "protocol.invalid_actor_connect_request");
            let anyhow_err = err.clone().into_anyhow();
            assert_eq!(RivetError::extract(&anyhow_err).code, "invalid_actor_connect_request");
        }
    }

    #[test]
    fn header_lookup_is_case_insensitive() {
        let headers = HashMap::from([(
            "Sec-WebSocket-Protocol".to_string(),
            "rivet, rivet_encoding.bare, rivet_conn_params.%7B%7D".to_string(),
        )]);
        let values = protocol_header_values(&headers);
        assert_eq!(parse_subprotocols(&values).unwrap(), (Encoding::Bare, vec![0xa0]));
        assert!(protocol_header_values(&HashMap::new()).is_empty());
    }
}
