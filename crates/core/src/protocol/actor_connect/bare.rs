//! BARE frames (docs/wire-formats.md): vbare, a u16 LE version
//! then the body. `ToClient` is always written as version 4; `ToServer` is
//! read in versions 1–4. Payloads are the CBOR bytes, untouched.

use rivetkit_client_protocol as client_protocol;
use serde_bare::Uint;
use vbare::OwnedVersionedData;

use super::messages::{invalid, ToClient, ToServer};
use crate::protocol::bare::RESPONSE_VERSION;

pub(super) fn encode_to_client(msg: &ToClient) -> anyhow::Result<Vec<u8>> {
    let body = match msg {
        ToClient::Init { actor_id, connection_id } => client_protocol::ToClientBody::Init(client_protocol::Init {
            actor_id: actor_id.clone(),
            connection_id: connection_id.clone(),
        }),
        ToClient::Error { group, code, message, metadata_cbor, action_id, actor } => {
            client_protocol::ToClientBody::Error(client_protocol::Error {
                group: group.clone(),
                code: code.clone(),
                message: message.clone(),
                metadata: metadata_cbor.clone(),
                action_id: action_id.map(Uint),
                actor: actor.as_ref().map(|a| client_protocol::ActorSpecifier {
                    actor_id: a.actor_id.clone(),
                    generation: Uint(a.generation),
                    key: a.key.clone(),
                }),
            })
        }
        ToClient::ActionResponse { id, output_cbor } => {
            client_protocol::ToClientBody::ActionResponse(client_protocol::ActionResponse {
                id: Uint(*id),
                output: output_cbor.clone(),
            })
        }
        ToClient::Event { name, args_cbor } => {
            client_protocol::ToClientBody::Event(client_protocol::Event { name: name.clone(), args: args_cbor.clone() })
        }
    };
    client_protocol::versioned::ToClient::wrap_latest(client_protocol::ToClient { body })
        .serialize_with_embedded_version(RESPONSE_VERSION)
}

pub(super) fn decode_to_server(data: &[u8]) -> anyhow::Result<ToServer> {
    let message = client_protocol::versioned::ToServer::deserialize_with_embedded_version(data)
        .map_err(|e| invalid("bare message", format!("{e:#}")))?;
    Ok(match message.body {
        client_protocol::ToServerBody::ActionRequest(request) => {
            ToServer::ActionRequest { id: request.id.0, name: request.name, args_cbor: request.args }
        }
        client_protocol::ToServerBody::SubscriptionRequest(request) => {
            ToServer::SubscriptionRequest { event_name: request.event_name, subscribe: request.subscribe }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{all_messages, assert_invalid, hex, without_actor};
    use super::super::*;
    use crate::error::ActorSpecifier;
    use client_protocol::generated::{v1, v2, v3};
    use rivetkit_client_protocol as client_protocol;
    use vbare::OwnedVersionedData;

    fn encode(msg: &ToClient) -> Vec<u8> {
        let frame = encode_to_client(Encoding::Bare, msg).unwrap();
        assert!(frame.binary);
        frame.data
    }

    #[test]
    fn golden_init() {
        let msg = ToClient::Init { actor_id: "ab".into(), connection_id: "c".into() };
        // v4 | tag 0 | "ab" | "c"
        assert_eq!(encode(&msg), hex("0400 00 02 6162 01 63"));
    }

    #[test]
    fn golden_error_full() {
        let msg = ToClient::Error {
            group: "g".into(),
            code: "c".into(),
            message: "m".into(),
            metadata_cbor: Some(hex("a1617801")),
            action_id: Some(300),
            actor: Some(ActorSpecifier { actor_id: "a".into(), generation: 3, key: Some("k".into()) }),
        };
        assert_eq!(encode(&msg), hex("0400 01 0167 0163 016d  01 04 a1617801  01 ac02  01 0161 03 01 016b"));
    }

    #[test]
    fn golden_error_minimal() {
        let msg = ToClient::Error {
            group: "g".into(),
            code: "c".into(),
            message: "".into(),
            metadata_cbor: None,
            action_id: None,
            actor: Some(ActorSpecifier { actor_id: "a".into(), generation: 0, key: None }),
        };
        assert_eq!(encode(&msg), hex("0400 01 0167 0163 00  00  00  01 0161 00 00"));
        let msg = without_actor(msg);
        assert_eq!(encode(&msg), hex("0400 01 0167 0163 00 00 00 00"));
    }

    #[test]
    fn golden_action_response_and_event() {
        let msg = ToClient::ActionResponse { id: 7, output_cbor: hex("83010203") };
        assert_eq!(encode(&msg), hex("0400 02 07 04 83010203"));
        let msg = ToClient::ActionResponse { id: u64::MAX, output_cbor: vec![] };
        assert_eq!(encode(&msg), hex("0400 02 ffffffffffffffffff01 00"));
        let msg = ToClient::Event { name: "e".into(), args_cbor: hex("80") };
        assert_eq!(encode(&msg), hex("0400 03 0165 01 80"));
    }

    /// What the official decoder reads back, via the crate's own v4 types.
    #[test]
    fn round_trip_through_schema_types() {
        for msg in all_messages() {
            let decoded =
                client_protocol::versioned::ToClient::deserialize_with_embedded_version(&encode(&msg)).unwrap();
            let back = match decoded.body {
                client_protocol::ToClientBody::Init(i) => {
                    ToClient::Init { actor_id: i.actor_id, connection_id: i.connection_id }
                }
                client_protocol::ToClientBody::Error(e) => ToClient::Error {
                    group: e.group,
                    code: e.code,
                    message: e.message,
                    metadata_cbor: e.metadata,
                    action_id: e.action_id.map(|u| u.0),
                    actor: e.actor.map(|a| ActorSpecifier {
                        actor_id: a.actor_id,
                        generation: a.generation.0,
                        key: a.key,
                    }),
                },
                client_protocol::ToClientBody::ActionResponse(r) => {
                    ToClient::ActionResponse { id: r.id.0, output_cbor: r.output }
                }
                client_protocol::ToClientBody::Event(e) => ToClient::Event { name: e.name, args_cbor: e.args },
            };
            assert_eq!(back, msg);
        }
    }

    // ---- inbound ----

    /// The TS client (rivetkit 2.3.19) sends v4:
    /// `{body: {tag: "ActionRequest", val: {id: 1n, name: "x", args: encodeCborCompat([1, 2])}}}`.
    #[test]
    fn decodes_ts_client_v4_action_request() {
        let bytes = hex("0400 00 01 0178 03 820102");
        assert_eq!(
            decode_to_server(Encoding::Bare, &bytes).unwrap(),
            ToServer::ActionRequest { id: 1, name: "x".into(), args_cbor: hex("820102") }
        );
    }

    /// Frames captured from the official client (rivetkit 2.3.19): args are
    /// `encodeCborCompat(args)`, passed through untouched.
    #[test]
    fn decodes_frames_captured_from_ts_client() {
        let bytes = hex("04000000036269672284826724426967496e74613562c3a9b900016161f6826a24556e646566696e656400");
        assert_eq!(
            decode_to_server(Encoding::Bare, &bytes).unwrap(),
            ToServer::ActionRequest {
                id: 0,
                name: "big".into(),
                args_cbor: hex("84826724426967496e74613562c3a9b900016161f6826a24556e646566696e656400"),
            }
        );
        let bytes = hex("04000002046e6f6e650d826a24556e646566696e656400");
        assert_eq!(
            decode_to_server(Encoding::Bare, &bytes).unwrap(),
            ToServer::ActionRequest { id: 2, name: "none".into(), args_cbor: hex("826a24556e646566696e656400") }
        );
        assert_eq!(
            decode_to_server(Encoding::Bare, &hex("040001047469636b00")).unwrap(),
            ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe: false }
        );
    }

    #[test]
    fn decodes_subscription_request() {
        let bytes = hex("0400 01 04 7469636b 01");
        assert_eq!(
            decode_to_server(Encoding::Bare, &bytes).unwrap(),
            ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe: true }
        );
        let bytes = hex("0100 01 04 7469636b 00");
        assert_eq!(
            decode_to_server(Encoding::Bare, &bytes).unwrap(),
            ToServer::SubscriptionRequest { event_name: "tick".into(), subscribe: false }
        );
    }

    #[test]
    fn accepts_versions_1_to_4() {
        // Same body in every version (ToServer never changed): id 300, "go", args [].
        let body = hex("00 ac02 02 676f 01 80");
        for version in 1..=4u8 {
            let mut bytes = vec![version, 0];
            bytes.extend_from_slice(&body);
            assert_eq!(
                decode_to_server(Encoding::Bare, &bytes).unwrap(),
                ToServer::ActionRequest { id: 300, name: "go".into(), args_cbor: hex("80") },
                "v{version}"
            );
        }
        // And built with the crate's older schema types.
        let v1 = serde_bare::to_vec(&v1::ToServer {
            body: v1::ToServerBody::ActionRequest(v1::ActionRequest {
                id: serde_bare::Uint(9),
                name: "a".into(),
                args: vec![0xf6],
            }),
        })
        .unwrap();
        assert_eq!(v1, hex("00 09 01 61 01 f6"));
        let mut framed = vec![1, 0];
        framed.extend_from_slice(&v1);
        assert_eq!(
            decode_to_server(Encoding::Bare, &framed).unwrap(),
            ToServer::ActionRequest { id: 9, name: "a".into(), args_cbor: vec![0xf6] }
        );
        for (version, body) in [
            (
                2u8,
                serde_bare::to_vec(&v2::ToServer {
                    body: v2::ToServerBody::SubscriptionRequest(v2::SubscriptionRequest {
                        event_name: "e".into(),
                        subscribe: true,
                    }),
                }),
            ),
            (
                3u8,
                serde_bare::to_vec(&v3::ToServer {
                    body: v3::ToServerBody::SubscriptionRequest(v3::SubscriptionRequest {
                        event_name: "e".into(),
                        subscribe: true,
                    }),
                }),
            ),
        ] {
            let mut framed = vec![version, 0];
            framed.extend_from_slice(&body.unwrap());
            assert_eq!(
                decode_to_server(Encoding::Bare, &framed).unwrap(),
                ToServer::SubscriptionRequest { event_name: "e".into(), subscribe: true },
                "v{version}"
            );
        }
    }

    #[test]
    fn malformed_is_invalid_request() {
        for bytes in [
            hex(""),
            hex("04"),
            hex("0400"),
            hex("0000 00 01 0178 00"),                   // version 0
            hex("0500 00 01 0178 00"),                   // version 5
            hex("0400 02 01 0178 00"),                   // no such variant
            hex("0400 00 01 0178 05 80"),                // args too short
            hex("0400 00 01 02 ff fe 00"),               // name not UTF-8
            hex("0400 00 ffffffffffffffffffff7f 00 00"), // id overflows
        ] {
            assert_invalid(Encoding::Bare, &bytes);
        }
    }
}
