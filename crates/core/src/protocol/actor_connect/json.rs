//! JSON frames (docs/wire-formats.md), sent as text.
//!
//! `id` and `actionId` are the client's JSON-compat bigint
//! `["$BigInt", "<decimal>"]` (its `jsonParseCompat` revives them);
//! `output`/`args`/`metadata` are the actor's CBOR converted to JSON. Keys
//! are inserted in sorted order so the output is the same whether or not
//! serde_json preserves insertion order.

use serde_json::{Map, Value};

use super::messages::{invalid, ToClient, ToServer};
use crate::protocol::cbor_json::{cbor_to_json, to_cbor};

const BIGINT_TAG: &str = "$BigInt";

fn bigint(value: u64) -> Value {
    Value::Array(vec![Value::String(BIGINT_TAG.to_owned()), Value::String(value.to_string())])
}

/// The actor's CBOR as JSON (empty → `null`); an error when it is not
/// representable (byte string, non-string key) or not CBOR.
fn payload(field: &str, cbor: &[u8]) -> anyhow::Result<Value> {
    use anyhow::Context;
    cbor_to_json(cbor).with_context(|| format!("actor-connect {field} is not representable as JSON"))
}

fn object<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Object(entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

pub(super) fn to_client_value(msg: &ToClient) -> anyhow::Result<Value> {
    let (tag, val) = match msg {
        ToClient::Init { actor_id, connection_id } => (
            "Init",
            object([
                ("actorId", Value::String(actor_id.clone())),
                ("connectionId", Value::String(connection_id.clone())),
            ]),
        ),
        ToClient::Error { group, code, message, metadata_cbor, action_id, actor } => {
            let mut val = Map::new();
            val.insert("actionId".to_owned(), action_id.map_or(Value::Null, bigint));
            if let Some(actor) = actor {
                // `key` is left out when absent: the client's schema has
                // `key: z.string().optional()`, which rejects `null`.
                let mut spec = Map::new();
                spec.insert("actorId".to_owned(), Value::String(actor.actor_id.clone()));
                spec.insert("generation".to_owned(), Value::from(actor.generation));
                if let Some(key) = &actor.key {
                    spec.insert("key".to_owned(), Value::String(key.clone()));
                }
                val.insert("actor".to_owned(), Value::Object(spec));
            }
            val.insert("code".to_owned(), Value::String(code.clone()));
            val.insert("group".to_owned(), Value::String(group.clone()));
            val.insert("message".to_owned(), Value::String(message.clone()));
            if let Some(metadata) = metadata_cbor {
                val.insert("metadata".to_owned(), payload("metadata", metadata)?);
            }
            ("Error", Value::Object(val))
        }
        ToClient::ActionResponse { id, output_cbor } => {
            ("ActionResponse", object([("id", bigint(*id)), ("output", payload("output", output_cbor)?)]))
        }
        ToClient::Event { name, args_cbor } => {
            ("Event", object([("args", payload("args", args_cbor)?), ("name", Value::String(name.clone()))]))
        }
    };
    Ok(object([("body", object([("tag", Value::String(tag.to_owned())), ("val", val)]))]))
}

pub(super) fn encode_to_client(msg: &ToClient) -> anyhow::Result<Vec<u8>> {
    Ok(serde_json::to_vec(&to_client_value(msg)?)?)
}

/// A number that is an unsigned integer, or `["$BigInt", "<decimal>"]`.
fn compat_u64(value: &Value) -> anyhow::Result<u64> {
    match value {
        Value::Number(n) => n.as_u64().ok_or_else(|| invalid("id", "not an unsigned integer")),
        Value::Array(items) if items.len() == 2 => {
            let tag = items[0].as_str().ok_or_else(|| invalid("id", "bigint tag is not a string"))?;
            if tag != BIGINT_TAG {
                return Err(invalid("id", format!("unsupported compat tag `{tag}`")));
            }
            let raw = items[1].as_str().ok_or_else(|| invalid("id", "bigint value is not a string"))?;
            raw.parse::<u64>().map_err(|e| invalid("id", format!("bigint `{raw}`: {e}")))
        }
        _ => Err(invalid("id", "invalid value")),
    }
}

fn string(val: &Map<String, Value>, field: &str) -> anyhow::Result<String> {
    val.get(field).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| invalid(field, "missing string"))
}

pub(super) fn decode_to_server(data: &[u8]) -> anyhow::Result<ToServer> {
    let envelope: Value = serde_json::from_slice(data).map_err(|e| invalid("json message", e.to_string()))?;
    let body = envelope.get("body").and_then(Value::as_object).ok_or_else(|| invalid("body", "missing object"))?;
    let tag = body.get("tag").and_then(Value::as_str).ok_or_else(|| invalid("tag", "missing string"))?;
    let val = body.get("val").and_then(Value::as_object).ok_or_else(|| invalid("val", "missing object"))?;
    match tag {
        "ActionRequest" => {
            let id = compat_u64(val.get("id").ok_or_else(|| invalid("id", "missing value"))?)?;
            let name = string(val, "name")?;
            let args = val.get("args").ok_or_else(|| invalid("args", "missing value"))?;
            let args_cbor = to_cbor(args).map_err(|e| invalid("args", format!("{e:#}")))?;
            Ok(ToServer::ActionRequest { id, name, args_cbor })
        }
        "SubscriptionRequest" => Ok(ToServer::SubscriptionRequest {
            event_name: string(val, "eventName")?,
            subscribe: val
                .get("subscribe")
                .and_then(Value::as_bool)
                .ok_or_else(|| invalid("subscribe", "missing boolean"))?,
        }),
        other => Err(invalid("tag", format!("unknown tag `{other}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_messages, assert_invalid, decode_err, hex, spec_actor, without_actor};
    use super::super::*;
    use crate::error::ActorSpecifier;
    use crate::protocol::cbor_json::cbor_to_json;
    use serde_json::{json, Value};

    fn encode(msg: &ToClient) -> String {
        let frame = encode_to_client(Encoding::Json, msg).unwrap();
        assert!(!frame.binary);
        frame.as_text().unwrap().to_owned()
    }

    #[test]
    fn golden_init() {
        let msg = ToClient::Init { actor_id: "a".into(), connection_id: "c".into() };
        assert_eq!(encode(&msg), r#"{"body":{"tag":"Init","val":{"actorId":"a","connectionId":"c"}}}"#);
    }

    #[test]
    fn golden_action_response() {
        let msg = ToClient::ActionResponse { id: 7, output_cbor: hex("a2 6161 01 6162 82 f5 f6") };
        assert_eq!(
            encode(&msg),
            r#"{"body":{"tag":"ActionResponse","val":{"id":["$BigInt","7"],"output":{"a":1,"b":[true,null]}}}}"#
        );
        let msg = ToClient::ActionResponse { id: u64::MAX, output_cbor: vec![] };
        assert_eq!(
            encode(&msg),
            r#"{"body":{"tag":"ActionResponse","val":{"id":["$BigInt","18446744073709551615"],"output":null}}}"#
        );
    }

    #[test]
    fn golden_event() {
        // The actor's compat-encoded values pass through as JSON.
        let msg = ToClient::Event { name: "tick".into(), args_cbor: hex("81 82 6724426967496e74 6135") };
        assert_eq!(encode(&msg), r#"{"body":{"tag":"Event","val":{"args":[["$BigInt","5"]],"name":"tick"}}}"#);
    }

    #[test]
    fn golden_errors() {
        let msg = ToClient::Error {
            group: "user".into(),
            code: "boom".into(),
            message: "it broke".into(),
            metadata_cbor: Some(hex("a1617801")),
            action_id: Some(7),
            actor: Some(spec_actor()),
        };
        assert_eq!(
            encode(&msg),
            r#"{"body":{"tag":"Error","val":{"actionId":["$BigInt","7"],"actor":{"actorId":"a1","generation":3,"key":"k/1"},"code":"boom","group":"user","message":"it broke","metadata":{"x":1}}}}"#
        );
        let msg = ToClient::Error {
            group: "g".into(),
            code: "c".into(),
            message: "m".into(),
            metadata_cbor: None,
            action_id: None,
            actor: Some(ActorSpecifier { key: None, ..spec_actor() }),
        };
        assert_eq!(
            encode(&msg),
            r#"{"body":{"tag":"Error","val":{"actionId":null,"actor":{"actorId":"a1","generation":3},"code":"c","group":"g","message":"m"}}}"#
        );
        let msg = without_actor(msg);
        assert_eq!(
            encode(&msg),
            r#"{"body":{"tag":"Error","val":{"actionId":null,"code":"c","group":"g","message":"m"}}}"#
        );
    }

    #[test]
    fn every_message_is_a_json_document() {
        for msg in all_messages() {
            let value: Value = serde_json::from_str(&encode(&msg)).unwrap();
            assert!(value["body"]["tag"].is_string());
            assert!(value["body"]["val"].is_object());
        }
    }

    #[test]
    fn unrepresentable_payloads_fail_to_encode() {
        for payload in ["420102", "a1 01 02", "81 4100", "ff", "1b00"] {
            let payload = hex(payload);
            assert!(encode_to_client(
                Encoding::Json,
                &ToClient::ActionResponse { id: 1, output_cbor: payload.clone() }
            )
            .is_err());
            assert!(encode_to_client(
                Encoding::Json,
                &ToClient::Event { name: "e".into(), args_cbor: payload.clone() }
            )
            .is_err());
            let err = ToClient::Error {
                group: "g".into(),
                code: "c".into(),
                message: "m".into(),
                metadata_cbor: Some(payload.clone()),
                action_id: None,
                actor: None,
            };
            assert!(encode_to_client(Encoding::Json, &err).is_err());
            // The binary encodings carry them verbatim.
            assert!(encode_to_client(Encoding::Cbor, &err).is_ok());
            assert!(encode_to_client(Encoding::Bare, &err).is_ok());
        }
    }

    // ---- inbound ----

    fn action(data: &str) -> ToServer {
        decode_to_server(Encoding::Json, data.as_bytes()).unwrap()
    }

    /// What the TS client sends: `jsonStringifyCompat` turns the bigint id
    /// into `["$BigInt", "1"]`.
    #[test]
    fn decodes_ts_client_action_request() {
        let msg = action(r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","1"],"name":"x","args":[1,2]}}}"#);
        assert_eq!(msg, ToServer::ActionRequest { id: 1, name: "x".into(), args_cbor: hex("820102") });
        let msg = action(r#"{"body":{"tag":"ActionRequest","val":{"id":18446744073709551615,"name":"","args":null}}}"#);
        assert_eq!(msg, ToServer::ActionRequest { id: u64::MAX, name: "".into(), args_cbor: hex("f6") });
        let msg = action(
            r#" {"body":{"val":{"args":{"a":[1.5,"s",["$BigInt","9"]]},"name":"n","id":0},"tag":"ActionRequest"},"x":1} "#,
        );
        let ToServer::ActionRequest { id, args_cbor, .. } = msg else { panic!() };
        assert_eq!(id, 0);
        assert_eq!(cbor_to_json(&args_cbor).unwrap(), json!({"a": [1.5, "s", ["$BigInt", "9"]]}));
    }

    /// Frames captured from the official client (rivetkit 2.3.19).
    #[test]
    fn decodes_frames_captured_from_ts_client() {
        // action("big", [5n, "é", {a: null}, undefined])
        let msg = action(
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","0"],"name":"big","args":[["$BigInt","5"],"é",{"a":null},null]}}}"#,
        );
        let ToServer::ActionRequest { args_cbor, .. } = msg else { panic!() };
        assert_eq!(cbor_to_json(&args_cbor).unwrap(), json!([["$BigInt", "5"], "é", {"a": null}, null]));
        // action("bytes", [Uint8Array [1, 2]])
        let msg = action(
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","1"],"name":"bytes","args":[["$Uint8Array","AQI="]]}}}"#,
        );
        let ToServer::ActionRequest { id, args_cbor, .. } = msg else { panic!() };
        assert_eq!((id, cbor_to_json(&args_cbor).unwrap()), (1, json!([["$Uint8Array", "AQI="]])));
        // action("none") with args undefined: JSON.stringify drops the key,
        // and `args` is required.
        assert_invalid(
            Encoding::Json,
            br#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","2"],"name":"none"}}}"#,
        );
    }

    #[test]
    fn decodes_subscription_request() {
        let msg = action(r#"{"body":{"tag":"SubscriptionRequest","val":{"eventName":"tick","subscribe":true}}}"#);
        assert_eq!(msg, ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe: true });
        let msg = action(r#"{"body":{"tag":"SubscriptionRequest","val":{"eventName":"","subscribe":false}}}"#);
        assert_eq!(msg, ToServer::SubscriptionRequest { event_name: "".into(), subscribe: false });
    }

    #[test]
    fn malformed_is_invalid_request() {
        let cases = [
            "",
            "not json",
            "[]",
            "{}",
            r#"{"body":null}"#,
            r#"{"body":{"val":{}}}"#,
            r#"{"body":{"tag":1,"val":{}}}"#,
            r#"{"body":{"tag":"ActionRequest"}}"#,
            r#"{"body":{"tag":"ActionRequest","val":[]}}"#,
            r#"{"body":{"tag":"Nope","val":{}}}"#,
            r#"{"body":{"tag":"Init","val":{"actorId":"a","connectionId":"c"}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":1,"args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":1,"name":"x"}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":-1,"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":1.0,"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":"1","name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$Big","1"],"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt",1],"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","-1"],"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","18446744073709551616"],"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":["$BigInt","1","2"],"name":"x","args":[]}}}"#,
            r#"{"body":{"tag":"ActionRequest","val":{"id":1,"name":5,"args":[]}}}"#,
            r#"{"body":{"tag":"SubscriptionRequest","val":{"eventName":"e"}}}"#,
            r#"{"body":{"tag":"SubscriptionRequest","val":{"eventName":"e","subscribe":"true"}}}"#,
            r#"{"body":{"tag":"SubscriptionRequest","val":{"subscribe":true}}}"#,
            r#"{"body":{"tag":"SubscriptionRequest","val":{"eventName":"e","subscribe":true}}} x"#,
        ];
        for data in cases {
            assert_invalid(Encoding::Json, data.as_bytes());
        }
        assert_invalid(Encoding::Json, &[0xff, 0xfe]);
        let err = decode_err(
            Encoding::Json,
            br#"{"body":{"tag":"ActionRequest","val":{"id":["$Foo","1"],"name":"x","args":[]}}}"#,
        );
        assert_eq!(err.metadata, Some(json!({"field": "id", "reason": "unsupported compat tag `$Foo`"})));
    }
}
