//! `POST /queue/{name}` bodies in each encoding (docs/wire-formats.md):
//! the client's `{body, wait, timeout}` with the body as CBOR for the
//! actor, and the `{status, response}` answer.

use anyhow::Context;
use rivetkit_client_protocol as client_protocol;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use vbare::OwnedVersionedData;

use super::bare::RESPONSE_VERSION;
use super::cbor_json::{cbor_to_json_or_null, from_cbor, to_cbor};
use super::encoding::Encoding;

/// What the request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSendBody {
    /// The message body, CBOR.
    pub body: Vec<u8>,
    pub wait: bool,
    pub timeout_ms: Option<u64>,
}

/// `{"body": ..., "name"?: ..., "wait"?: bool, "timeout"?: ms}` (JSON and
/// CBOR); `name` is ignored (the path names the queue), a missing body is
/// `null`.
#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    body: Value,
    #[serde(default)]
    wait: Option<bool>,
    #[serde(default)]
    timeout: Option<u64>,
}

pub fn decode_request(encoding: Encoding, body: &[u8]) -> anyhow::Result<QueueSendBody> {
    let request: Request = match encoding {
        Encoding::Json => serde_json::from_slice(body).context("decode json HTTP queue request")?,
        Encoding::Cbor => from_cbor(body).context("decode cbor HTTP queue request")?,
        Encoding::Bare => {
            let request = client_protocol::versioned::HttpQueueSendRequest::deserialize_with_embedded_version(body)
                .context("decode bare HTTP queue request")?;
            return Ok(QueueSendBody {
                body: request.body,
                wait: request.wait.unwrap_or(false),
                timeout_ms: request.timeout,
            });
        }
    };
    Ok(QueueSendBody {
        body: to_cbor(&request.body)?,
        wait: request.wait.unwrap_or(false),
        timeout_ms: request.timeout,
    })
}

/// `{status, response?}`: JSON and CBOR carry the response as a value
/// (omitted when there is none), BARE as the consumer's CBOR bytes.
pub fn encode_response(encoding: Encoding, status: &str, response: Option<Vec<u8>>) -> anyhow::Result<Vec<u8>> {
    let object = || {
        let mut object = Map::new();
        object.insert("status".into(), json!(status));
        if let Some(response) = &response {
            object.insert("response".into(), cbor_to_json_or_null(response));
        }
        Value::Object(object)
    };
    match encoding {
        Encoding::Json => Ok(serde_json::to_vec(&object())?),
        Encoding::Cbor => to_cbor(&object()),
        Encoding::Bare => {
            client_protocol::versioned::HttpQueueSendResponse::wrap_latest(client_protocol::HttpQueueSendResponse {
                status: status.to_string(),
                response,
            })
            .serialize_with_embedded_version(RESPONSE_VERSION)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::bare::tests::framed;
    use crate::protocol::cbor_json::cbor_to_json;

    #[test]
    fn json_and_cbor_requests() {
        let r = decode_request(Encoding::Json, br#"{"body":{"n":1},"wait":true,"timeout":500,"name":"x"}"#).unwrap();
        assert_eq!(cbor_to_json(&r.body).unwrap(), json!({"n": 1}));
        assert_eq!((r.wait, r.timeout_ms), (true, Some(500)));
        let r = decode_request(Encoding::Json, b"{}").unwrap();
        assert_eq!(cbor_to_json(&r.body).unwrap(), Value::Null);
        assert_eq!((r.wait, r.timeout_ms), (false, None));
        let r = decode_request(Encoding::Cbor, &to_cbor(&json!({"body": [1, "a"], "wait": false})).unwrap()).unwrap();
        assert_eq!(cbor_to_json(&r.body).unwrap(), json!([1, "a"]));
        for bad in [&b""[..], b"nope", br#"{"timeout":-1}"#, br#"{"wait":"yes"}"#] {
            assert!(decode_request(Encoding::Json, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bare_request_passes_the_body_through() {
        let request = client_protocol::HttpQueueSendRequest {
            body: vec![0x42, 0x01, 0x02],
            name: Some("jobs".into()),
            wait: Some(true),
            timeout: Some(30),
        };
        let body = framed(4, &serde_bare::to_vec(&request).unwrap());
        let r = decode_request(Encoding::Bare, &body).unwrap();
        assert_eq!(r, QueueSendBody { body: vec![0x42, 0x01, 0x02], wait: true, timeout_ms: Some(30) });
        assert!(decode_request(Encoding::Bare, &framed(2, &[0])).is_err());
    }

    #[test]
    fn responses_in_each_encoding() {
        let body = encode_response(Encoding::Json, "completed", None).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"status": "completed"}));
        let answer = to_cbor(&json!({"ok": true})).unwrap();
        let body = encode_response(Encoding::Cbor, "completed", Some(answer.clone())).unwrap();
        assert_eq!(from_cbor::<Value>(&body).unwrap(), json!({"status": "completed", "response": {"ok": true}}));
        let body = encode_response(Encoding::Bare, "timedOut", Some(answer.clone())).unwrap();
        let decoded =
            client_protocol::versioned::HttpQueueSendResponse::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!((decoded.status.as_str(), decoded.response), ("timedOut", Some(answer)));
    }
}
