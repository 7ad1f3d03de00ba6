//! CBOR frames (docs/wire-formats.md).
//!
//! Outbound messages are written by hand so that the client's decoder
//! (cbor-x, whose 64-bit integers decode as `bigint`) sees what it expects:
//! definite lengths, keys in a fixed order, `id`, `actionId` and
//! `actor.generation` always as 64-bit unsigned integers (`0x1b` + 8 bytes
//! big-endian), and `output`/`args`/`metadata` embedded verbatim as the
//! actor's CBOR item. Inbound messages are the JSON shape in CBOR.

use std::io::Cursor;

use serde::Deserialize;
use serde_json::Value;

use super::messages::{invalid, ToClient, ToServer};
use crate::protocol::cbor_json::to_cbor;

const MAJOR_TEXT: u8 = 3;
const MAJOR_MAP: u8 = 5;
const NULL: u8 = 0xf6;

fn write_head(out: &mut Vec<u8>, major: u8, len: u64) {
    let major = major << 5;
    if len < 24 {
        out.push(major | len as u8);
    } else if let Ok(len) = u8::try_from(len) {
        out.push(major | 24);
        out.push(len);
    } else if let Ok(len) = u16::try_from(len) {
        out.push(major | 25);
        out.extend_from_slice(&len.to_be_bytes());
    } else if let Ok(len) = u32::try_from(len) {
        out.push(major | 26);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(major | 27);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

fn write_map(out: &mut Vec<u8>, entries: usize) {
    write_head(out, MAJOR_MAP, entries as u64);
}

fn write_text(out: &mut Vec<u8>, text: &str) {
    write_head(out, MAJOR_TEXT, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// An unsigned integer always in its 8-byte form.
fn write_u64_long(out: &mut Vec<u8>, value: u64) {
    out.push(0x1b);
    out.extend_from_slice(&value.to_be_bytes());
}

/// An actor payload, verbatim; empty bytes (no value at all) as `null`, so
/// the frame stays well-formed.
fn write_payload(out: &mut Vec<u8>, cbor: &[u8]) {
    if cbor.is_empty() {
        out.push(NULL);
    } else {
        out.extend_from_slice(cbor);
    }
}

/// `{"body": {"tag": <tag>, "val": ` — the caller writes the value.
fn write_envelope(out: &mut Vec<u8>, tag: &str) {
    write_map(out, 1);
    write_text(out, "body");
    write_map(out, 2);
    write_text(out, "tag");
    write_text(out, tag);
    write_text(out, "val");
}

pub(super) fn encode_to_client(msg: &ToClient) -> Vec<u8> {
    let mut out = Vec::new();
    match msg {
        ToClient::Init { actor_id, connection_id } => {
            write_envelope(&mut out, "Init");
            write_map(&mut out, 2);
            write_text(&mut out, "actorId");
            write_text(&mut out, actor_id);
            write_text(&mut out, "connectionId");
            write_text(&mut out, connection_id);
        }
        ToClient::Error { group, code, message, metadata_cbor, action_id, actor } => {
            write_envelope(&mut out, "Error");
            write_map(&mut out, 4 + usize::from(metadata_cbor.is_some()) + usize::from(actor.is_some()));
            write_text(&mut out, "group");
            write_text(&mut out, group);
            write_text(&mut out, "code");
            write_text(&mut out, code);
            write_text(&mut out, "message");
            write_text(&mut out, message);
            if let Some(metadata) = metadata_cbor {
                write_text(&mut out, "metadata");
                write_payload(&mut out, metadata);
            }
            if let Some(actor) = actor {
                write_text(&mut out, "actor");
                write_map(&mut out, 2 + usize::from(actor.key.is_some()));
                write_text(&mut out, "actorId");
                write_text(&mut out, &actor.actor_id);
                write_text(&mut out, "generation");
                write_u64_long(&mut out, actor.generation);
                if let Some(key) = &actor.key {
                    write_text(&mut out, "key");
                    write_text(&mut out, key);
                }
            }
            write_text(&mut out, "actionId");
            match action_id {
                Some(id) => write_u64_long(&mut out, *id),
                None => out.push(NULL),
            }
        }
        ToClient::ActionResponse { id, output_cbor } => {
            write_envelope(&mut out, "ActionResponse");
            write_map(&mut out, 2);
            write_text(&mut out, "id");
            write_u64_long(&mut out, *id);
            write_text(&mut out, "output");
            write_payload(&mut out, output_cbor);
        }
        ToClient::Event { name, args_cbor } => {
            write_envelope(&mut out, "Event");
            write_map(&mut out, 2);
            write_text(&mut out, "name");
            write_text(&mut out, name);
            write_text(&mut out, "args");
            write_payload(&mut out, args_cbor);
        }
    }
    out
}

#[derive(Deserialize)]
struct Envelope {
    body: Body,
}

#[derive(Deserialize)]
#[serde(tag = "tag", content = "val")]
enum Body {
    ActionRequest(ActionRequest),
    SubscriptionRequest(SubscriptionRequest),
}

#[derive(Deserialize)]
struct ActionRequest {
    /// A CBOR unsigned integer (any width).
    id: u64,
    name: String,
    /// Required; anything JSON can represent.
    args: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionRequest {
    event_name: String,
    subscribe: bool,
}

pub(super) fn decode_to_server(data: &[u8]) -> anyhow::Result<ToServer> {
    let envelope: Envelope =
        ciborium::from_reader(Cursor::new(data)).map_err(|e| invalid("cbor message", e.to_string()))?;
    Ok(match envelope.body {
        Body::ActionRequest(request) => ToServer::ActionRequest {
            id: request.id,
            name: request.name,
            args_cbor: to_cbor(&request.args).map_err(|e| invalid("args", format!("{e:#}")))?,
        },
        Body::SubscriptionRequest(request) => {
            ToServer::SubscriptionRequest { event_name: request.event_name, subscribe: request.subscribe }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_messages, assert_invalid, hex, spec_actor, without_actor};
    use super::super::*;
    use crate::error::ActorSpecifier;
    use crate::protocol::cbor_json::from_cbor;
    use ciborium::value::{Integer, Value as Cbor};
    use serde_json::{json, Value};

    fn encode(msg: &ToClient) -> Vec<u8> {
        let frame = encode_to_client(Encoding::Cbor, msg).unwrap();
        assert!(frame.binary);
        frame.data
    }

    fn cbor(value: &Cbor) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(value, &mut out).unwrap();
        out
    }

    fn text(s: &str) -> Cbor {
        Cbor::Text(s.into())
    }

    fn map(entries: Vec<(&str, Cbor)>) -> Cbor {
        Cbor::Map(entries.into_iter().map(|(k, v)| (text(k), v)).collect())
    }

    fn envelope(tag: &str, val: Cbor) -> Cbor {
        map(vec![("body", map(vec![("tag", text(tag)), ("val", val)]))])
    }

    // a1 64 "body" a2 63 "tag" <tag> 63 "val"
    const ENVELOPE: &str = "a1 64626f6479 a2 63746167";
    const VAL: &str = "6376616c";

    #[test]
    fn golden_init() {
        let msg = ToClient::Init { actor_id: "ab".into(), connection_id: "c".into() };
        let expected =
            format!("{ENVELOPE} 64496e6974 {VAL} a2 676163746f724964 626162 6c636f6e6e656374696f6e4964 6163");
        assert_eq!(encode(&msg), hex(&expected));
    }

    #[test]
    fn golden_action_response_forces_64_bit_id() {
        let msg = ToClient::ActionResponse { id: 7, output_cbor: hex("83010203") };
        let expected = format!(
            "{ENVELOPE} 6e416374696f6e526573706f6e7365 {VAL} a2 626964 1b0000000000000007 666f7574707574 83010203"
        );
        assert_eq!(encode(&msg), hex(&expected));
    }

    #[test]
    fn golden_event() {
        let msg = ToClient::Event { name: "e".into(), args_cbor: hex("8201f4") };
        let expected = format!("{ENVELOPE} 654576656e74 {VAL} a2 646e616d65 6165 6461726773 8201f4");
        assert_eq!(encode(&msg), hex(&expected));
    }

    #[test]
    fn golden_error_key_order() {
        let msg = ToClient::Error {
            group: "g".into(),
            code: "c".into(),
            message: "m".into(),
            metadata_cbor: Some(hex("a1617801")),
            action_id: Some(2),
            actor: Some(ActorSpecifier { actor_id: "a".into(), generation: 3, key: Some("k".into()) }),
        };
        let expected = format!(
            "{ENVELOPE} 654572726f72 {VAL} a6 \
             6567726f7570 6167  64636f6465 6163  676d657373616765 616d \
             686d65746164617461 a1617801 \
             656163746f72 a3 676163746f724964 6161 6a67656e65726174696f6e 1b0000000000000003 636b6579 616b \
             68616374696f6e4964 1b0000000000000002"
        );
        assert_eq!(encode(&msg), hex(&expected));
    }

    #[test]
    fn golden_error_minimal() {
        let msg = ToClient::Error {
            group: "g".into(),
            code: "c".into(),
            message: "m".into(),
            metadata_cbor: None,
            action_id: None,
            actor: Some(ActorSpecifier { actor_id: "a".into(), generation: 0, key: None }),
        };
        let expected = format!(
            "{ENVELOPE} 654572726f72 {VAL} a5 \
             6567726f7570 6167  64636f6465 6163  676d657373616765 616d \
             656163746f72 a2 676163746f724964 6161 6a67656e65726174696f6e 1b0000000000000000 \
             68616374696f6e4964 f6"
        );
        assert_eq!(encode(&msg), hex(&expected));
        let msg = without_actor(msg);
        let expected = format!(
            "{ENVELOPE} 654572726f72 {VAL} a4 \
             6567726f7570 6167  64636f6465 6163  676d657373616765 616d 68616374696f6e4964 f6"
        );
        assert_eq!(encode(&msg), hex(&expected));
    }

    #[test]
    fn payloads_are_embedded_byte_exact() {
        // Non-canonical encodings and non-JSON values survive untouched: a
        // 2-byte-length "a" text, a byte string, a tagged date, a half float.
        for payload in ["7801 61", "420102", "c11a5f5e1000", "f93c00", "a1 01 02", "9f 01 ff"] {
            let payload = hex(payload);
            let frame = encode(&ToClient::ActionResponse { id: 1, output_cbor: payload.clone() });
            assert!(frame.ends_with(&payload));
            let frame = encode(&ToClient::Event { name: "n".into(), args_cbor: payload.clone() });
            assert!(frame.ends_with(&payload));
        }
        // Empty payloads are written as null.
        let frame = encode(&ToClient::Event { name: "n".into(), args_cbor: vec![] });
        assert_eq!(from_cbor::<Value>(&frame).unwrap()["body"]["val"]["args"], Value::Null);
    }

    #[test]
    fn long_strings_use_wider_lengths() {
        for len in [23usize, 24, 255, 256, 65_535, 65_536] {
            let name = "x".repeat(len);
            let frame = encode(&ToClient::Event { name: name.clone(), args_cbor: hex("f6") });
            let value: Value = from_cbor(&frame).unwrap();
            assert_eq!(value["body"]["val"]["name"], json!(name), "{len}");
        }
    }

    #[test]
    fn round_trips_through_a_generic_decoder() {
        for msg in all_messages() {
            let bytes = encode(&msg);
            let mut rest = bytes.as_slice();
            let value: Cbor = ciborium::from_reader(&mut rest).unwrap();
            // Exactly one item, a 1-entry map, with no trailing bytes.
            assert!(rest.is_empty(), "{msg:?}");
            let Cbor::Map(entries) = value else { panic!("not a map") };
            assert_eq!(entries.len(), 1);
        }
        let msg = ToClient::Error {
            group: "user".into(),
            code: "x".into(),
            message: "y".into(),
            metadata_cbor: Some(hex("a1617801")),
            action_id: Some(u64::MAX),
            actor: Some(spec_actor()),
        };
        let value: Value = from_cbor(&encode(&msg)).unwrap();
        assert_eq!(
            value,
            json!({"body": {"tag": "Error", "val": {
                "group": "user", "code": "x", "message": "y", "metadata": {"x": 1},
                "actor": {"actorId": "a1", "generation": 3, "key": "k/1"},
                "actionId": u64::MAX,
            }}})
        );
    }

    // ---- inbound ----

    /// Built like the TS client (cbor-x `encode` of the validated message):
    /// `{body: {tag: "ActionRequest", val: {id: 1n, name: "x", args: [1, 2]}}}`;
    /// cbor-x writes a bigint as a 64-bit unsigned integer.
    #[test]
    fn decodes_ts_client_action_request() {
        let id_forms = [
            hex("1b0000000000000001"), // cbor-x's bigint
            hex("01"),                 // any other width is accepted too
            hex("1801"),
            hex("c24101"), // tag-2 bignum
        ];
        for id in id_forms {
            let mut bytes = hex(ENVELOPE);
            bytes.extend(hex("6d416374696f6e52657175657374")); // "ActionRequest"
            bytes.extend(hex(VAL));
            bytes.extend(hex("a3 626964"));
            bytes.extend(id);
            bytes.extend(hex("646e616d65 6178 6461726773 820102"));
            assert_eq!(
                decode_to_server(Encoding::Cbor, &bytes).unwrap(),
                ToServer::ActionRequest { id: 1, name: "x".into(), args_cbor: hex("820102") }
            );
        }
        let bytes = cbor(&envelope(
            "ActionRequest",
            map(vec![
                ("id", Cbor::Integer(Integer::from(u64::MAX))),
                ("name", text("x")),
                ("args", Cbor::Array(vec![Cbor::Integer(1.into()), Cbor::Integer(2.into())])),
            ]),
        ));
        assert_eq!(
            decode_to_server(Encoding::Cbor, &bytes).unwrap(),
            ToServer::ActionRequest { id: u64::MAX, name: "x".into(), args_cbor: hex("820102") }
        );
    }

    /// Frames captured from the official client (rivetkit 2.3.19, cbor-x):
    /// maps with 2-byte length heads, bigint ids as 64-bit integers.
    #[test]
    fn decodes_frames_captured_from_ts_client() {
        let prefix = "b9000164626f6479b90002637461676d416374696f6e526571756573746376616cb90003";
        // action("x", [1, 2])
        let bytes = hex(&format!("{prefix} 6269641b0000000000000000 646e616d656178 6461726773820102"));
        assert_eq!(
            decode_to_server(Encoding::Cbor, &bytes).unwrap(),
            ToServer::ActionRequest { id: 0, name: "x".into(), args_cbor: hex("820102") }
        );
        // action("big", [5n, "é", {a: null}, undefined]): no compat transform
        // on this path, so 5n is a plain integer and undefined is null.
        let bytes = hex(&format!(
            "{prefix} 6269641b0000000000000000 646e616d6563626967 6461726773841b000000000000000562c3a9b900016161f6f7"
        ));
        let ToServer::ActionRequest { name, args_cbor, .. } = decode_to_server(Encoding::Cbor, &bytes).unwrap() else {
            panic!()
        };
        assert_eq!(name, "big");
        assert_eq!(args_cbor, hex("840562c3a9a16161f6f6"));
        // action("none") with args undefined → null.
        let bytes = hex(&format!("{prefix} 6269641b0000000000000002 646e616d65646e6f6e65 6461726773f7"));
        assert_eq!(
            decode_to_server(Encoding::Cbor, &bytes).unwrap(),
            ToServer::ActionRequest { id: 2, name: "none".into(), args_cbor: hex("f6") }
        );
        // action("bytes", [Uint8Array [1, 2]]): cbor-x writes tag 64 + a byte
        // string, which JSON cannot hold.
        let bytes = hex(&format!("{prefix} 6269641b0000000000000001 646e616d65656279746573 646172677381d840420102"));
        assert_invalid(Encoding::Cbor, &bytes);
        // conn.on("tick") then unsubscribe.
        for (tail, subscribe) in [("f5", true), ("f4", false)] {
            let bytes = hex(&format!(
                "b9000164626f6479b900026374616773537562736372697074696f6e526571756573746376616c\
                 b90002696576656e744e616d65647469636b69737562736372696265{tail}"
            ));
            assert_eq!(
                decode_to_server(Encoding::Cbor, &bytes).unwrap(),
                ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe }
            );
        }
    }

    #[test]
    fn args_are_re_encoded_from_their_json_value() {
        // args as a 2-byte-length text, re-encoded canonically; undefined → null.
        let bytes = cbor(&envelope(
            "ActionRequest",
            map(vec![
                ("id", Cbor::Integer(3.into())),
                ("name", text("n")),
                ("args", Cbor::Array(vec![text("a"), Cbor::Null, Cbor::Bool(true), Cbor::Float(1.5)])),
            ]),
        ));
        let ToServer::ActionRequest { args_cbor, .. } = decode_to_server(Encoding::Cbor, &bytes).unwrap() else {
            panic!()
        };
        assert_eq!(from_cbor::<Value>(&args_cbor).unwrap(), json!(["a", null, true, 1.5]));
    }

    #[test]
    fn decodes_subscription_request_and_ignores_extra_keys() {
        let bytes = cbor(&map(vec![
            (
                "body",
                map(vec![
                    (
                        "val",
                        map(vec![("subscribe", Cbor::Bool(false)), ("eventName", text("tick")), ("x", Cbor::Null)]),
                    ),
                    ("tag", text("SubscriptionRequest")),
                ]),
            ),
            ("extra", Cbor::Integer(1.into())),
        ]));
        assert_eq!(
            decode_to_server(Encoding::Cbor, &bytes).unwrap(),
            ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe: false }
        );
    }

    #[test]
    fn malformed_is_invalid_request() {
        let action = |id: Cbor, args: Option<Cbor>| {
            let mut val = vec![("id", id), ("name", text("x"))];
            if let Some(args) = args {
                val.push(("args", args));
            }
            cbor(&envelope("ActionRequest", map(val)))
        };
        let cases = vec![
            vec![],
            hex("ff"),
            hex("a0"),                                                               // no body
            cbor(&map(vec![("body", text("x"))])),                                   // body not a map
            cbor(&envelope("Nope", map(vec![]))),                                    // unknown tag
            cbor(&envelope("Init", map(vec![]))),                                    // a to-client tag
            action(Cbor::Integer(1.into()), None),                                   // args missing
            action(Cbor::Integer((-1).into()), Some(Cbor::Null)),                    // negative id
            action(Cbor::Float(1.0), Some(Cbor::Null)),                              // float id
            action(text("1"), Some(Cbor::Null)),                                     // text id
            action(Cbor::Array(vec![text("$BigInt"), text("1")]), Some(Cbor::Null)), // JSON compat id
            action(Cbor::Integer(1.into()), Some(Cbor::Bytes(vec![1, 2]))),          // byte string args
            action(
                Cbor::Integer(1.into()),
                Some(Cbor::Array(vec![Cbor::Map(vec![(Cbor::Integer(1.into()), Cbor::Null)])])),
            ), // non-string key
            cbor(&envelope("SubscriptionRequest", map(vec![("eventName", text("e"))]))),
            cbor(&envelope(
                "SubscriptionRequest",
                map(vec![("eventName", text("e")), ("subscribe", Cbor::Integer(1.into()))]),
            )),
            hex("a1 64626f6479 a2 63746167 6d416374696f6e52657175657374 6376616c a3 626964 01"), // truncated
        ];
        for bytes in cases {
            assert_invalid(Encoding::Cbor, &bytes);
        }
    }
}
