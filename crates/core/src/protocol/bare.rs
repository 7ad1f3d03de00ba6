//! vbare framing of client-protocol messages (docs/wire-formats.md): a
//! 2-byte little-endian version, then the BARE body of that version.
//! Requests are read in any version the type defines; responses are always
//! written as the latest (v4).

use anyhow::Context;
use rivetkit_client_protocol as client_protocol;
use vbare::OwnedVersionedData;

use crate::error::ActorSpecifier;

/// The version every response is written in.
pub const RESPONSE_VERSION: u16 = client_protocol::PROTOCOL_VERSION;

/// `HttpActionRequest` (v1–v4) → its `args`, CBOR bytes passed through untouched.
pub fn decode_http_action_request(body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let request = client_protocol::versioned::HttpActionRequest::deserialize_with_embedded_version(body)
        .context("decode bare HTTP action request")?;
    Ok(request.args)
}

/// `HttpActionResponse{output}` (v4), `output` being the action's raw CBOR.
pub fn encode_http_action_response(output: Vec<u8>) -> anyhow::Result<Vec<u8>> {
    client_protocol::versioned::HttpActionResponse::wrap_latest(client_protocol::HttpActionResponse { output })
        .serialize_with_embedded_version(RESPONSE_VERSION)
}

/// `HttpResponseError` (v4). `metadata` is already CBOR.
pub fn encode_http_response_error(
    group: &str,
    code: &str,
    message: &str,
    metadata: Option<Vec<u8>>,
    actor: Option<&ActorSpecifier>,
) -> anyhow::Result<Vec<u8>> {
    client_protocol::versioned::HttpResponseError::wrap_latest(client_protocol::HttpResponseError {
        group: group.to_owned(),
        code: code.to_owned(),
        message: message.to_owned(),
        metadata,
        actor: actor.map(|a| client_protocol::ActorSpecifier {
            actor_id: a.actor_id.clone(),
            generation: serde_bare::Uint(a.generation),
            key: a.key.clone(),
        }),
    })
    .serialize_with_embedded_version(RESPONSE_VERSION)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use client_protocol::generated::{v1, v3};

    /// A request framed in `version`, as an older client would send it.
    pub(crate) fn framed(version: u16, body: &[u8]) -> Vec<u8> {
        let mut out = version.to_le_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn action_request_is_read_in_every_version() {
        let args = vec![0x81, 0x03]; // [3]
        for version in 1..=4u16 {
            let body = match version {
                1 => serde_bare::to_vec(&v1::HttpActionRequest { args: args.clone() }).unwrap(),
                3 => serde_bare::to_vec(&v3::HttpActionRequest { args: args.clone() }).unwrap(),
                _ => serde_bare::to_vec(&client_protocol::HttpActionRequest { args: args.clone() }).unwrap(),
            };
            assert_eq!(decode_http_action_request(&framed(version, &body)).unwrap(), args, "v{version}");
        }
    }

    #[test]
    fn action_request_rejects_bad_framing() {
        assert!(decode_http_action_request(&[]).is_err());
        assert!(decode_http_action_request(&[4]).is_err());
        assert!(decode_http_action_request(&framed(0, &[1, 0])).is_err());
        assert!(decode_http_action_request(&framed(5, &[1, 0])).is_err());
        // Claims 5 bytes of args, carries 1.
        assert!(decode_http_action_request(&framed(4, &[5, 0])).is_err());
    }

    #[test]
    fn responses_are_version_4() {
        let body = encode_http_action_response(vec![0x03]).unwrap();
        assert_eq!(body, vec![4, 0, 1, 0x03]);
        let decoded = client_protocol::versioned::HttpActionResponse::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!(decoded.output, vec![0x03]);
    }

    #[test]
    fn error_round_trips() {
        let actor = ActorSpecifier { actor_id: "a1".into(), generation: 300, key: Some("k".into()) };
        let body = encode_http_response_error("user", "boom", "msg", Some(vec![0xf6]), Some(&actor)).unwrap();
        assert_eq!(&body[..2], &[4, 0]);
        let e = client_protocol::versioned::HttpResponseError::deserialize_with_embedded_version(&body).unwrap();
        assert_eq!((e.group.as_str(), e.code.as_str(), e.message.as_str()), ("user", "boom", "msg"));
        assert_eq!(e.metadata, Some(vec![0xf6]));
        let a = e.actor.unwrap();
        assert_eq!((a.actor_id.as_str(), a.generation.0, a.key.as_deref()), ("a1", 300, Some("k")));
    }
}
