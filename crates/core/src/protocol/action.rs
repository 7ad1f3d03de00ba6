//! HTTP action bodies in each encoding (docs/wire-formats.md): the
//! request's arguments as CBOR for the actor, and the actor's CBOR output
//! as the response body. Connection params from `x-rivet-conn-params`.

use anyhow::Context;
use serde::Deserialize;
use serde_json::{json, Value};

use super::bare;
use super::cbor_json::{cbor_to_json_or_null, from_cbor, to_cbor};
use super::encoding::Encoding;

/// Request header carrying the connection params as a JSON document.
pub const CONN_PARAMS_HEADER: &str = "x-rivet-conn-params";

/// `{"args": ...}` in JSON or CBOR; extra keys are ignored and a missing
/// `args` means no arguments.
#[derive(Deserialize)]
#[serde(default)]
struct ActionRequest {
    args: Value,
}

impl Default for ActionRequest {
    fn default() -> Self {
        Self { args: Value::Array(Vec::new()) }
    }
}

/// Array as is, `null` → `[]`, any other value → `[value]`.
fn normalize_args(args: Value) -> Vec<Value> {
    match args {
        Value::Array(args) => args,
        Value::Null => Vec::new(),
        value => vec![value],
    }
}

/// The request body → the action's arguments, a CBOR-encoded array (BARE:
/// the client's bytes, untouched).
pub fn decode_args(encoding: Encoding, body: &[u8]) -> anyhow::Result<Vec<u8>> {
    match encoding {
        Encoding::Json => {
            let request: ActionRequest = serde_json::from_slice(body).context("decode json HTTP action request")?;
            to_cbor(&normalize_args(request.args))
        }
        Encoding::Cbor => {
            let request: ActionRequest = from_cbor(body).context("decode cbor HTTP action request")?;
            to_cbor(&normalize_args(request.args))
        }
        Encoding::Bare => bare::decode_http_action_request(body),
    }
}

/// The action's CBOR output → the response body. JSON and CBOR carry
/// `{"output": <value>}` (empty or non-JSON-representable output is
/// `null`); BARE carries the bytes as they are.
pub fn encode_output(encoding: Encoding, output: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    match encoding {
        Encoding::Json => Ok(serde_json::to_vec(&json!({ "output": cbor_to_json_or_null(&output) }))?),
        Encoding::Cbor => to_cbor(&json!({ "output": cbor_to_json_or_null(&output) })),
        Encoding::Bare => bare::encode_http_action_response(output),
    }
}

/// Connection params as CBOR: the header's JSON document re-encoded, CBOR
/// `null` when absent, an error when it is not JSON.
pub fn conn_params(header: Option<&str>) -> anyhow::Result<Vec<u8>> {
    let value = match header {
        Some(raw) => serde_json::from_str(raw).context("parse x-rivet-conn-params header")?,
        None => Value::Null,
    };
    to_cbor(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::bare::tests::framed;
    use crate::protocol::cbor_json::cbor_to_json;

    fn args_json(encoding: Encoding, body: &[u8]) -> Value {
        cbor_to_json(&decode_args(encoding, body).unwrap()).unwrap()
    }

    #[test]
    fn json_args_are_normalised() {
        let cases = [
            (r#"{"args":[1,"a"]}"#, json!([1, "a"])),
            (r#"{"args":null}"#, json!([])),
            (r#"{}"#, json!([])),
            (r#"{"args":5}"#, json!([5])),
            (r#"{"args":{"x":1}}"#, json!([{"x": 1}])),
            (r#"{"args":[],"extra":true}"#, json!([])),
            // JSON-compat values of the TS runtime are ordinary arrays.
            (r#"{"args":[["$BigInt","123"]]}"#, json!([["$BigInt", "123"]])),
        ];
        for (body, expected) in cases {
            assert_eq!(args_json(Encoding::Json, body.as_bytes()), expected, "{body}");
        }
    }

    #[test]
    fn malformed_json_is_an_error() {
        for body in ["", "{", "nope", "null", r#"{"args":[1]} x"#] {
            assert!(decode_args(Encoding::Json, body.as_bytes()).is_err(), "{body:?}");
        }
    }

    #[test]
    fn cbor_args_are_normalised() {
        let body = to_cbor(&json!({"args": [1, 2]})).unwrap();
        assert_eq!(args_json(Encoding::Cbor, &body), json!([1, 2]));
        let body = to_cbor(&json!({"args": "x"})).unwrap();
        assert_eq!(args_json(Encoding::Cbor, &body), json!(["x"]));
        let body = to_cbor(&json!({"args": null})).unwrap();
        assert_eq!(args_json(Encoding::Cbor, &body), json!([]));
        let body = to_cbor(&json!({})).unwrap();
        assert_eq!(args_json(Encoding::Cbor, &body), json!([]));
    }

    #[test]
    fn malformed_or_unrepresentable_cbor_is_an_error() {
        assert!(decode_args(Encoding::Cbor, &[]).is_err());
        assert!(decode_args(Encoding::Cbor, &[0xff, 0xff]).is_err());
        // {"args": [h'00']}: byte strings cannot become JSON on the request side.
        let body = [0xa1, 0x64, b'a', b'r', b'g', b's', 0x81, 0x41, 0x00];
        assert!(decode_args(Encoding::Cbor, &body).is_err());
    }

    #[test]
    fn bare_args_pass_through() {
        let args = vec![0x81, 0x42, 0x01, 0x02]; // [h'0102'], not JSON-representable
        let mut body = vec![args.len() as u8];
        body.extend_from_slice(&args);
        assert_eq!(decode_args(Encoding::Bare, &framed(4, &body)).unwrap(), args);
        assert_eq!(decode_args(Encoding::Bare, &framed(2, &body)).unwrap(), args);
        assert!(decode_args(Encoding::Bare, b"{\"args\":[]}").is_err());
    }

    #[test]
    fn output_in_each_encoding() {
        let output = to_cbor(&json!({"count": 3})).unwrap();
        let body = encode_output(Encoding::Json, output.clone()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"output": {"count": 3}}));
        let body = encode_output(Encoding::Cbor, output.clone()).unwrap();
        assert_eq!(from_cbor::<Value>(&body).unwrap(), json!({"output": {"count": 3}}));
        let body = encode_output(Encoding::Bare, output.clone()).unwrap();
        let mut expected = vec![4, 0, output.len() as u8];
        expected.extend_from_slice(&output);
        assert_eq!(body, expected);
    }

    #[test]
    fn empty_or_unrepresentable_output_is_null() {
        for output in [vec![], vec![0x42, 0x01, 0x02], vec![0xa1, 0x01, 0x61, 0x61]] {
            let body = encode_output(Encoding::Json, output.clone()).unwrap();
            assert_eq!(body, br#"{"output":null}"#.to_vec());
            let body = encode_output(Encoding::Cbor, output.clone()).unwrap();
            assert_eq!(from_cbor::<Value>(&body).unwrap(), json!({"output": null}));
            // BARE is byte-faithful.
            let body = encode_output(Encoding::Bare, output.clone()).unwrap();
            assert_eq!(&body[3..], &output[..]);
        }
    }

    #[test]
    fn conn_params_are_json() {
        assert_eq!(conn_params(None).unwrap(), vec![0xf6]);
        assert_eq!(cbor_to_json(&conn_params(Some(r#"{"token":"t"}"#)).unwrap()).unwrap(), json!({"token": "t"}));
        assert!(conn_params(Some("{not json")).is_err());
        assert!(conn_params(Some("%7B%7D")).is_err());
    }
}
