//! Property tests of every decoder of client bytes in `protocol` (the
//! router's own parsing has its `proptests` next to it, with these helpers).
//!
//! A panic on a frame, a body or a header would take down the envoy
//! callback serving it (or the whole addon) instead of answering the client
//! with a structured error. So, for each decoder: arbitrary input never
//! panics and every failure is the error the caller expects; and what a
//! client encodes decodes back to the same value. Noise alone rarely gets
//! past the first byte, so the decoders are also fed well-formed messages
//! of the right shape with hostile field values, and valid encodings with a
//! few random edits.
//!
//! Case counts are set per property so the whole run stays within seconds
//! in a debug build; `PROPTEST_CASES=<n>` runs every property `n` times.

use std::collections::HashMap;

use ciborium::value::{Integer, Value as Cbor};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::{select, Index};
use rivetkit_client_protocol as client_protocol;
use serde_json::{json, Value};
use vbare::OwnedVersionedData;

use super::action::{conn_params, decode_args, encode_output};
use super::actor_connect::{
    decode_to_server, encode_to_client, parse_conn_params, parse_encoding, parse_subprotocols, HandshakeError,
    ToClient, ToServer,
};
use super::bare::decode_http_action_request;
use super::cbor_json::{cbor_to_json, cbor_to_json_or_null, from_cbor, to_cbor};
use super::encoding::{Encoding, ENCODING_HEADER};
use crate::actor::storage::ActorRecord;
use crate::error::{ActorSpecifier, RivetError};

// ---------------------------------------------------------------------------
// Strategies and helpers (`pub(crate)` ones serve the routing tests too).

/// `cases` successful cases (`PROPTEST_CASES`, when set, overrides every
/// count, for a longer hunt); failures are not written to disk (a failing
/// case is kept as a unit test instead).
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Any text, short: any `char` (proptest favours the awkward ones), which
/// is much cheaper to generate than `any::<String>()`.
pub(crate) fn text() -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..10).prop_map(String::from_iter)
}

/// Text made of `tokens`, hex digits and any `char`: reaches the branches
/// of a parser of escapes and separators far more often than noise.
pub(crate) fn pieces(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        select(tokens).prop_map(str::to_owned),
        select("0123456789abcdefABCDEFgG".chars().collect::<Vec<_>>()).prop_map(String::from),
        any::<char>().prop_map(String::from),
    ];
    vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// Bytes of any value, short enough to stay cheap.
pub(crate) fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

/// A JSON number that survives every text and CBOR round trip exactly.
fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        // Binary fractions with few digits: exact in decimal and in every
        // float width.
        (-1_000_000i64..1_000_000, 0u32..8).prop_map(|(m, e)| Value::from(m as f64 / f64::from(1u32 << e))),
    ]
}

/// Any JSON value, nested a few levels.
fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map(text(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Any CBOR item, including what JSON cannot hold: byte strings,
/// non-string keys, tags (bignums among them), negative integers below
/// `i64::MIN`, NaN and infinities.
fn cbor_value() -> BoxedStrategy<Cbor> {
    let leaf = prop_oneof![
        Just(Cbor::Null),
        any::<bool>().prop_map(Cbor::Bool),
        any::<u64>().prop_map(|n| Cbor::Integer(n.into())),
        any::<i64>().prop_map(|n| Cbor::Integer(n.into())),
        any::<u64>().prop_map(|n| Cbor::Integer(Integer::try_from(-1 - i128::from(n)).unwrap())),
        any::<f64>().prop_map(Cbor::Float),
        bytes(20).prop_map(Cbor::Bytes),
        text().prop_map(Cbor::Text),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Cbor::Array),
            vec((inner.clone(), inner.clone()), 0..4).prop_map(Cbor::Map),
            (prop_oneof![Just(2u64), Just(3), any::<u64>()], inner).prop_map(|(tag, v)| Cbor::Tag(tag, Box::new(v))),
        ]
    })
    .boxed()
}

fn cbor_bytes(value: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).unwrap();
    out
}

/// One encoded CBOR item of any kind.
fn cbor_item() -> impl Strategy<Value = Vec<u8>> {
    cbor_value().prop_map(|v| cbor_bytes(&v))
}

fn json_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// A JSON document of any kind.
fn json_text() -> impl Strategy<Value = Vec<u8>> {
    json_value().prop_map(|v| json_bytes(&v))
}

/// `base` with up to four random edits: overwrite, insert or remove a byte,
/// or cut the rest off.
fn mutated(base: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (base, vec((any::<Index>(), any::<u8>(), 0u8..4), 0..4)).prop_map(|(mut b, edits)| {
        for (at, byte, op) in edits {
            match op {
                0 if !b.is_empty() => {
                    let i = at.index(b.len());
                    b[i] = byte;
                }
                1 => b.insert(at.index(b.len() + 1), byte),
                2 if !b.is_empty() => {
                    b.remove(at.index(b.len()));
                }
                3 => b.truncate(at.index(b.len() + 1)),
                _ => {}
            }
        }
        b
    })
}

fn any_encoding() -> impl Strategy<Value = Encoding> {
    prop_oneof![Just(Encoding::Json), Just(Encoding::Cbor), Just(Encoding::Bare)]
}

/// `encodeURIComponent`: everything but `A-Z a-z 0-9 - _ . ! ~ * ' ( )`
/// as `%XX` of its UTF-8 bytes.
fn uri_component(s: &str) -> String {
    percent_encoded(s, false)
}

/// [`uri_component`], with lower-case hex digits if `lower`.
pub(crate) fn percent_encoded(s: &str, lower: bool) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')' => {
                char::from(b).to_string()
            }
            b if lower => format!("%{b:02x}"),
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn rivet_error(err: &anyhow::Error) -> RivetError {
    err.downcast_ref::<RivetError>().cloned().unwrap_or_else(|| panic!("not a RivetError: {err:#}"))
}

// ---------------------------------------------------------------------------
// Actor-connect client → server frames

/// What the TS client sends, as a value to encode in each encoding.
#[derive(Debug, Clone, PartialEq)]
enum ClientMessage {
    Action { id: u64, name: String, args: Value },
    Subscription { event_name: String, subscribe: bool },
}

fn client_message() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        (any::<u64>(), text(), json_value()).prop_map(|(id, name, args)| ClientMessage::Action { id, name, args }),
        (text(), any::<bool>())
            .prop_map(|(event_name, subscribe)| ClientMessage::Subscription { event_name, subscribe }),
    ]
}

impl ClientMessage {
    /// The message as a value; `bigint_id` writes the id as the JSON
    /// client does, `["$BigInt", "<n>"]`, else it is a plain number.
    fn value(&self, bigint_id: bool) -> Value {
        let body = match self {
            Self::Action { id, name, args } => {
                let id = if bigint_id { json!(["$BigInt", id.to_string()]) } else { json!(id) };
                json!({"tag": "ActionRequest", "val": {"id": id, "name": name, "args": args}})
            }
            Self::Subscription { event_name, subscribe } => {
                json!({"tag": "SubscriptionRequest", "val": {"eventName": event_name, "subscribe": subscribe}})
            }
        };
        json!({ "body": body })
    }

    fn json(&self, bigint_id: bool) -> Vec<u8> {
        json_bytes(&self.value(bigint_id))
    }

    fn cbor(&self) -> Vec<u8> {
        to_cbor(&self.value(false)).unwrap()
    }

    /// The BARE frame in `version` (the body is the same in v1–v4); `args`
    /// are the client's CBOR bytes, whatever they are.
    fn bare(&self, version: u16, raw_args: &[u8]) -> Vec<u8> {
        let body = match self {
            Self::Action { id, name, .. } => {
                client_protocol::ToServerBody::ActionRequest(client_protocol::ActionRequest {
                    id: serde_bare::Uint(*id),
                    name: name.clone(),
                    args: raw_args.to_vec(),
                })
            }
            Self::Subscription { event_name, subscribe } => {
                client_protocol::ToServerBody::SubscriptionRequest(client_protocol::SubscriptionRequest {
                    event_name: event_name.clone(),
                    subscribe: *subscribe,
                })
            }
        };
        let mut out = version.to_le_bytes().to_vec();
        out.extend(serde_bare::to_vec(&client_protocol::ToServer { body }).unwrap());
        out
    }
}

/// A JSON frame of the right shape whose tag and fields may be anything.
fn json_frame_value() -> impl Strategy<Value = Value> {
    let tag = prop_oneof![
        Just(json!("ActionRequest")),
        Just(json!("SubscriptionRequest")),
        Just(json!("Init")),
        json_value(),
    ];
    let id = prop_oneof![
        json_number(),
        any::<f64>().prop_map(Value::from),
        (prop_oneof![Just("$BigInt".to_owned()), "\\$?[A-Za-z]{0,6}"], "-?[0-9]{0,22}|\\PC{0,4}")
            .prop_map(|(tag, n)| json!([tag, n])),
        vec(json_value(), 0..4)
            .prop_map(|items| Value::Array(std::iter::once(json!("$BigInt")).chain(items).collect())),
        json_value(),
    ];
    let name = |s: &str| Just(s.to_owned());
    let field = prop_oneof![
        (name("id"), id),
        (name("name"), json_value()),
        (name("args"), json_value()),
        (name("eventName"), json_value()),
        (name("subscribe"), json_value()),
        (text(), json_value()),
    ];
    let val =
        prop_oneof![vec(field, 0..6).prop_map(|fields| Value::Object(fields.into_iter().collect())), json_value()];
    (tag, val, json_value()).prop_map(|(tag, val, extra)| json!({"body": {"tag": tag, "val": val}, "extra": extra}))
}

/// A CBOR frame of the right shape whose tag and fields may be anything.
fn cbor_frame_value() -> impl Strategy<Value = Cbor> {
    let text = |s: &str| Cbor::Text(s.to_owned());
    let tag =
        prop_oneof![Just(text("ActionRequest")), Just(text("SubscriptionRequest")), Just(text("Init")), cbor_value()];
    let key = prop_oneof![
        Just(text("id")),
        Just(text("name")),
        Just(text("args")),
        Just(text("eventName")),
        Just(text("subscribe")),
        cbor_value(),
    ];
    let val = prop_oneof![vec((key, cbor_value()), 0..6).prop_map(Cbor::Map), cbor_value()];
    (tag, val).prop_map(move |(tag, val)| {
        Cbor::Map(vec![(text("body"), Cbor::Map(vec![(text("tag"), tag), (text("val"), val)]))])
    })
}

fn assert_invalid_frame(result: anyhow::Result<ToServer>) -> Result<(), TestCaseError> {
    if let Err(err) = result {
        let e = rivet_error(&err);
        prop_assert_eq!(e.qualified_code(), "protocol.invalid_actor_connect_request");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(3000))]

    /// Noise in any encoding: `Ok` or the one structured error.
    #[test]
    fn to_server_noise_never_panics(encoding in any_encoding(), data in bytes(64)) {
        assert_invalid_frame(decode_to_server(encoding, &data))?;
    }
}

fn json_frame() -> impl Strategy<Value = Vec<u8>> {
    mutated(json_frame_value().prop_map(|v| json_bytes(&v)))
}

fn cbor_frame() -> impl Strategy<Value = Vec<u8>> {
    mutated(cbor_frame_value().prop_map(|v| cbor_bytes(&v)))
}

/// Versions 0–5: the valid ones and their neighbours.
fn bare_frame() -> impl Strategy<Value = Vec<u8>> {
    mutated((client_message(), 0u16..6, bytes(16)).prop_map(|(m, version, args)| m.bare(version, &args)))
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn to_server_json_of_any_shape_never_panics(frame in json_frame()) {
        assert_invalid_frame(decode_to_server(Encoding::Json, &frame))?;
    }

    #[test]
    fn to_server_cbor_of_any_shape_never_panics(frame in cbor_frame()) {
        assert_invalid_frame(decode_to_server(Encoding::Cbor, &frame))?;
    }

    #[test]
    fn to_server_bare_edited_never_panics(frame in bare_frame()) {
        assert_invalid_frame(decode_to_server(Encoding::Bare, &frame))?;
    }

    /// What the client encodes is what we decode, in every encoding.
    #[test]
    fn to_server_round_trips(
        msg in client_message(),
        bigint_id in any::<bool>(),
        version in 1u16..=4,
        raw_args in bytes(32),
    ) {
        for (encoding, frame) in [(Encoding::Json, msg.json(bigint_id)), (Encoding::Cbor, msg.cbor())] {
            // JSON and CBOR args are re-encoded: compared as values.
            let decoded = decode_to_server(encoding, &frame).unwrap();
            let decoded = match decoded {
                ToServer::ActionRequest { id, name, args_cbor } => {
                    let args = cbor_to_json(&args_cbor).unwrap();
                    ClientMessage::Action { id, name, args }
                }
                ToServer::SubscriptionRequest { event_name, subscribe } => {
                    ClientMessage::Subscription { event_name, subscribe }
                }
            };
            prop_assert_eq!(&decoded, &msg, "{:?}", encoding);
        }
        // BARE args are the client's bytes, passed through untouched.
        let expected = match msg.clone() {
            ClientMessage::Action { id, name, .. } => ToServer::ActionRequest { id, name, args_cbor: raw_args.clone() },
            ClientMessage::Subscription { event_name, subscribe } => {
                ToServer::SubscriptionRequest { event_name, subscribe }
            }
        };
        prop_assert_eq!(decode_to_server(Encoding::Bare, &msg.bare(version, &raw_args)).unwrap(), expected);
    }
}

// ---------------------------------------------------------------------------
// Actor-connect server → client frames: what we write, a client reads back.

/// The actor's CBOR for a payload (or none at all).
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![1 => Just(Vec::new()), 4 => json_value().prop_map(|v| to_cbor(&v).unwrap())]
}

fn to_client() -> impl Strategy<Value = ToClient> {
    let actor = (text(), any::<u64>(), proptest::option::of(text()))
        .prop_map(|(actor_id, generation, key)| ActorSpecifier { actor_id, generation, key });
    prop_oneof![
        (text(), text()).prop_map(|(actor_id, connection_id)| ToClient::Init { actor_id, connection_id }),
        (
            (text(), text(), text()),
            proptest::option::of(payload()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(actor),
        )
            .prop_map(|((group, code, message), metadata_cbor, action_id, actor)| ToClient::Error {
                group,
                code,
                message,
                metadata_cbor,
                action_id,
                actor
            }),
        (any::<u64>(), payload()).prop_map(|(id, output_cbor)| ToClient::ActionResponse { id, output_cbor }),
        // Names long enough for every width of a CBOR text length.
        ("\\PC{0,4}|x{20,300}", payload()).prop_map(|(name, args_cbor)| ToClient::Event { name, args_cbor }),
    ]
}

/// A BARE `ToClient` (v4) back into our type.
fn from_bare_to_client(data: &[u8]) -> ToClient {
    let decoded = client_protocol::versioned::ToClient::deserialize_with_embedded_version(data).unwrap();
    match decoded.body {
        client_protocol::ToClientBody::Init(i) => {
            ToClient::Init { actor_id: i.actor_id, connection_id: i.connection_id }
        }
        client_protocol::ToClientBody::Error(e) => ToClient::Error {
            group: e.group,
            code: e.code,
            message: e.message,
            metadata_cbor: e.metadata,
            action_id: e.action_id.map(|u| u.0),
            actor: e.actor.map(|a| ActorSpecifier { actor_id: a.actor_id, generation: a.generation.0, key: a.key }),
        },
        client_protocol::ToClientBody::ActionResponse(r) => {
            ToClient::ActionResponse { id: r.id.0, output_cbor: r.output }
        }
        client_protocol::ToClientBody::Event(e) => ToClient::Event { name: e.name, args_cbor: e.args },
    }
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn to_client_frames_decode_back(msg in to_client()) {
        let bare = encode_to_client(Encoding::Bare, &msg).unwrap();
        prop_assert_eq!(from_bare_to_client(&bare.data), msg.clone());

        // CBOR: exactly one well-formed item, the JSON frame's value with
        // ids as integers rather than `["$BigInt", "<n>"]`.
        let cbor = encode_to_client(Encoding::Cbor, &msg).unwrap().data;
        let mut rest = cbor.as_slice();
        let _: Cbor = ciborium::from_reader(&mut rest).unwrap();
        prop_assert!(rest.is_empty());
        let from_cbor_frame: Value = from_cbor(&cbor).unwrap();
        let json = encode_to_client(Encoding::Json, &msg).unwrap().data;
        let mut from_json: Value = serde_json::from_slice(&json).unwrap();
        for key in ["id", "actionId"] {
            if let Some(Value::Array(a)) = from_json["body"]["val"].get(key).cloned() {
                prop_assert_eq!(&a[0], "$BigInt");
                from_json["body"]["val"][key] = json!(a[1].as_str().unwrap().parse::<u64>().unwrap());
            }
        }
        prop_assert_eq!(from_json, from_cbor_frame);
    }
}

// ---------------------------------------------------------------------------
// HTTP action bodies and the connection-params header

/// `args` normalised as the decoder does.
fn normalized_args(args: &Value) -> Value {
    match args {
        Value::Array(_) => args.clone(),
        Value::Null => json!([]),
        other => json!([other]),
    }
}

fn http_action_request(version: u16, args: &[u8]) -> Vec<u8> {
    let mut out = version.to_le_bytes().to_vec();
    out.extend(serde_bare::to_vec(&client_protocol::HttpActionRequest { args: args.to_vec() }).unwrap());
    out
}

/// `{"args": <any>, "x": <any>}`, edited.
fn action_json_body() -> impl Strategy<Value = Vec<u8>> {
    mutated((json_value(), json_value()).prop_map(|(args, x)| json_bytes(&json!({"args": args, "x": x}))))
}

/// `{"args": <any CBOR item>}`, edited.
fn action_cbor_body() -> impl Strategy<Value = Vec<u8>> {
    mutated(cbor_value().prop_map(|args| cbor_bytes(&Cbor::Map(vec![(Cbor::Text("args".into()), args)]))))
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn action_body_noise_never_panics(encoding in any_encoding(), body in bytes(64)) {
        let _ = decode_args(encoding, &body);
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn action_bodies_of_any_shape_never_panic(
        json_body in action_json_body(),
        cbor_body in action_cbor_body(),
        bare_body in mutated((0u16..6, bytes(16)).prop_map(|(version, args)| http_action_request(version, &args))),
    ) {
        let _ = decode_args(Encoding::Json, &json_body);
        let _ = decode_args(Encoding::Cbor, &cbor_body);
        let _ = decode_args(Encoding::Bare, &bare_body);
    }

    #[test]
    fn action_args_round_trip(args in json_value(), version in 1u16..=4, raw_args in bytes(32)) {
        let expected = normalized_args(&args);
        let body = serde_json::to_vec(&json!({ "args": args })).unwrap();
        prop_assert_eq!(cbor_to_json(&decode_args(Encoding::Json, &body).unwrap()).unwrap(), expected.clone());
        let body = to_cbor(&json!({ "args": args })).unwrap();
        prop_assert_eq!(cbor_to_json(&decode_args(Encoding::Cbor, &body).unwrap()).unwrap(), expected);
        let body = http_action_request(version, &raw_args);
        prop_assert_eq!(decode_args(Encoding::Bare, &body).unwrap(), raw_args.clone());
        prop_assert_eq!(decode_http_action_request(&body).unwrap(), raw_args);
    }

    /// Any output encodes; a JSON-representable one reads back as itself,
    /// anything else as `null` (BARE: the bytes as they are).
    #[test]
    fn action_output_round_trips(value in json_value(), raw in prop_oneof![bytes(24), cbor_item()]) {
        let output = to_cbor(&value).unwrap();
        let body = encode_output(Encoding::Json, output.clone()).unwrap();
        prop_assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({ "output": value }));
        let body = encode_output(Encoding::Cbor, output.clone()).unwrap();
        prop_assert_eq!(from_cbor::<Value>(&body).unwrap(), json!({ "output": value }));

        let as_json = cbor_to_json_or_null(&raw);
        let body = encode_output(Encoding::Json, raw.clone()).unwrap();
        // Compared as text: an arbitrary float need not survive a re-parse.
        prop_assert_eq!(body, serde_json::to_vec(&json!({ "output": as_json })).unwrap());
        let body = encode_output(Encoding::Cbor, raw.clone()).unwrap();
        prop_assert_eq!(from_cbor::<Value>(&body).unwrap(), json!({ "output": as_json }));
        let body = encode_output(Encoding::Bare, raw.clone()).unwrap();
        let decoded = client_protocol::versioned::HttpActionResponse::deserialize_with_embedded_version(&body);
        prop_assert_eq!(decoded.unwrap().output, raw);
    }

    #[test]
    fn conn_params_header_never_panics(raw in text(), edited in mutated(json_text())) {
        let _ = conn_params(Some(&raw));
        let _ = conn_params(Some(&String::from_utf8_lossy(&edited)));
    }

    #[test]
    fn conn_params_header_round_trips(value in json_value()) {
        let params = conn_params(Some(&serde_json::to_string(&value).unwrap())).unwrap();
        prop_assert_eq!(cbor_to_json(&params).unwrap(), value);
    }
}

// ---------------------------------------------------------------------------
// CBOR → JSON and the encoding header

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn cbor_to_json_never_panics(noise in bytes(48), item in mutated(cbor_item())) {
        let _ = cbor_to_json(&noise);
        let _ = cbor_to_json(&item);
        let _ = from_cbor::<Cbor>(&item);
    }

    #[test]
    fn cbor_json_round_trips(value in json_value()) {
        prop_assert_eq!(cbor_to_json(&to_cbor(&value).unwrap()).unwrap(), value);
    }

    /// Only an exact `cbor` or `bare` selects them, under any name casing.
    #[test]
    fn encoding_header_is_total(
        name in prop_oneof![
            Just(ENCODING_HEADER.to_owned()),
            "[xX]-[rR][iI][vV][eE][tT]-[eE][nN][cC][oO][dD][iI][nN][gG]",
            text(),
        ],
        value in prop_oneof![Just("cbor".to_owned()), Just("bare".to_owned()), Just("json".to_owned()), text()],
    ) {
        let expected = match value.as_str() {
            "cbor" => Encoding::Cbor,
            "bare" => Encoding::Bare,
            _ => Encoding::Json,
        };
        let headers = HashMap::from([(name.clone(), value)]);
        let got = Encoding::from_headers(&headers);
        if name.eq_ignore_ascii_case(ENCODING_HEADER) {
            prop_assert_eq!(got, expected);
        } else {
            prop_assert_eq!(got, Encoding::Json);
        }
    }
}

// ---------------------------------------------------------------------------
// Actor-connect handshake: Sec-WebSocket-Protocol

fn subprotocol_item() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("rivet".to_owned()),
        prop_oneof![select(vec!["json", "cbor", "bare"]).prop_map(str::to_owned), text()]
            .prop_map(|encoding| format!("rivet_encoding.{encoding}")),
        pieces(&["%", "+", ",", " ", "\"", "[", "{"]).prop_map(|params| format!("rivet_conn_params.{params}")),
        mutated(json_text()).prop_map(|b| format!("rivet_conn_params.{}", String::from_utf8_lossy(&b))),
        json_value().prop_map(|v| format!("rivet_conn_params.{}", uri_component(&v.to_string()))),
        text(),
    ]
}

fn encoding_name(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Json => "json",
        Encoding::Cbor => "cbor",
        Encoding::Bare => "bare",
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn subprotocols_never_panic(values in vec(vec(subprotocol_item(), 0..4).prop_map(|items| items.join(",")), 0..3)) {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        match parse_subprotocols(&values) {
            Ok(_) => {}
            Err(HandshakeError::UnsupportedEncoding { .. }) => prop_assert!(parse_encoding(&values).is_err()),
            Err(HandshakeError::InvalidConnParams { .. }) => prop_assert!(parse_conn_params(&values).is_err()),
        }
    }

    /// As the TS client offers them: `encodeURIComponent(JSON.stringify(params))`.
    #[test]
    fn subprotocols_round_trip(encoding in any_encoding(), params in json_value()) {
        let value = format!(
            "rivet, rivet_encoding.{}, rivet_conn_params.{}",
            encoding_name(encoding),
            uri_component(&serde_json::to_string(&params).unwrap()),
        );
        let (got_encoding, got_params) = parse_subprotocols(&[&value]).unwrap();
        prop_assert_eq!(got_encoding, encoding);
        prop_assert_eq!(cbor_to_json(&got_params).unwrap(), params);
    }

    /// Form decoding: any text survives `encodeURIComponent`, in either
    /// hex case, with spaces as `%20` or `+`.
    #[test]
    fn conn_params_form_decoding_round_trips(text in text(), lower in any::<bool>(), plus in any::<bool>()) {
        let mut encoded = percent_encoded(&serde_json::to_string(&text).unwrap(), lower);
        if plus {
            encoded = encoded.replace("%20", "+");
        }
        let params = parse_conn_params(&[&format!("rivet_conn_params.{encoded}")]).unwrap();
        prop_assert_eq!(cbor_to_json(&params).unwrap(), json!(text));
    }
}

// ---------------------------------------------------------------------------
// Persisted actor record (not client input, but cheap to cover)

fn actor_record() -> impl Strategy<Value = ActorRecord> {
    (any::<bool>(), proptest::option::of(any::<i64>()), bytes(64)).prop_map(|(initialized, alarm, state)| ActorRecord {
        initialized,
        alarm,
        state,
    })
}

fn actor_record_bytes() -> impl Strategy<Value = Vec<u8>> {
    actor_record().prop_map(|r| r.encode())
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn actor_record_decode_never_panics(noise in bytes(32), edited in mutated(actor_record_bytes())) {
        for bytes in [noise, edited] {
            if let Err(err) = ActorRecord::decode(&bytes) {
                prop_assert_eq!(rivet_error(&err).qualified_code(), "protocol.invalid_persisted_data");
            }
        }
    }

    #[test]
    fn actor_record_round_trips(record in actor_record()) {
        prop_assert_eq!(ActorRecord::decode(&record.encode()).unwrap(), record);
    }
}

// ---------------------------------------------------------------------------
// Hostile nesting: an error, never a stack overflow.

#[test]
fn deeply_nested_input_is_an_error() {
    const DEPTH: usize = 100_000;
    let json_args = format!(r#"{{"args":{}}}"#, "[".repeat(DEPTH));
    assert!(decode_args(Encoding::Json, json_args.as_bytes()).is_err());
    let frame =
        format!(r#"{{"body":{{"tag":"ActionRequest","val":{{"id":1,"name":"x","args":{}}}}}}}"#, "[".repeat(DEPTH));
    assert!(decode_to_server(Encoding::Json, frame.as_bytes()).is_err());
    assert!(conn_params(Some(&"[".repeat(DEPTH))).is_err());
    assert!(parse_conn_params(&[&format!("rivet_conn_params.{}", "%5B".repeat(DEPTH))]).is_err());

    // `[[[[...` as CBOR: 0x81 is a one-element array.
    let nested = vec![0x81; DEPTH];
    assert!(cbor_to_json(&nested).is_err());
    let mut body = vec![0xa1, 0x64, b'a', b'r', b'g', b's'];
    body.extend_from_slice(&nested);
    assert!(decode_args(Encoding::Cbor, &body).is_err());
    let mut frame = cbor_bytes(&Cbor::Map(vec![(
        Cbor::Text("body".into()),
        Cbor::Map(vec![
            (Cbor::Text("tag".into()), Cbor::Text("ActionRequest".into())),
            (
                Cbor::Text("val".into()),
                Cbor::Map(vec![
                    (Cbor::Text("id".into()), Cbor::Integer(1.into())),
                    (Cbor::Text("name".into()), Cbor::Text("x".into())),
                    (Cbor::Text("args".into()), Cbor::Null),
                ]),
            ),
        ]),
    )]));
    // Replace the trailing `null` args with the nesting.
    frame.pop();
    frame.extend_from_slice(&nested);
    assert!(decode_to_server(Encoding::Cbor, &frame).is_err());
}

/// Just under the decoders' nesting limits (serde_json 128, ciborium 256
/// levels) the value is decoded, re-encoded and dropped, each recursively:
/// that must fit a test thread's stack in a debug build, with `val` before
/// `tag` (which serde buffers first) as well as after.
#[test]
fn nesting_just_under_the_limits_is_decoded() {
    fn nested_json(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }
    fn nested_cbor(depth: usize) -> Cbor {
        (0..depth).fold(Cbor::Null, |inner, _| Cbor::Array(vec![inner]))
    }
    let text = |s: &str| Cbor::Text(s.to_owned());

    let args = nested_json(124);
    for frame in [
        format!(r#"{{"body":{{"tag":"ActionRequest","val":{{"id":1,"name":"x","args":{args}}}}}}}"#),
        format!(r#"{{"body":{{"val":{{"id":1,"name":"x","args":{args}}},"tag":"ActionRequest"}}}}"#),
    ] {
        decode_to_server(Encoding::Json, frame.as_bytes()).unwrap();
    }
    decode_args(Encoding::Json, format!(r#"{{"args":{args}}}"#).as_bytes()).unwrap();

    for (depth, ok) in [(250, true), (260, false)] {
        let val = Cbor::Map(vec![
            (text("id"), Cbor::Integer(1.into())),
            (text("name"), text("x")),
            (text("args"), nested_cbor(depth)),
        ]);
        let tag = (text("tag"), text("ActionRequest"));
        for body in [vec![tag.clone(), (text("val"), val.clone())], vec![(text("val"), val), tag]] {
            let frame = cbor_bytes(&Cbor::Map(vec![(text("body"), Cbor::Map(body))]));
            assert_eq!(decode_to_server(Encoding::Cbor, &frame).is_ok(), ok, "depth {depth}");
        }
        let body = cbor_bytes(&Cbor::Map(vec![(text("args"), nested_cbor(depth))]));
        assert_eq!(decode_args(Encoding::Cbor, &body).is_ok(), ok, "depth {depth}");
        assert_eq!(cbor_to_json(&cbor_bytes(&nested_cbor(depth))).is_ok(), ok, "depth {depth}");
    }
}
