//! Checks of the engine's `/start` request, in the order they run: the
//! `x-rivet-*` headers, the endpoint and namespace against the config, the
//! body size, then the start payload itself. Every check happens before
//! anything is started, so a bad request costs nothing and leaves the host
//! serving.

use rivet_envoy_client::protocol;
use serde_json::json;
use url::Url;
use vbare::OwnedVersionedData;

use super::http::ServerlessRequest;
use crate::error::RivetError;

/// Who the engine wants this host to be for this start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartHeaders {
    pub endpoint: String,
    pub token: Option<String>,
    pub pool_name: String,
    pub namespace: String,
}

/// The actor generation a start payload carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartTarget {
    pub actor_id: String,
    pub generation: u32,
}

fn invalid_request(reason: impl Into<String>) -> RivetError {
    let reason = reason.into();
    RivetError::new(crate::error_codes::REQUEST_INVALID, format!("Invalid request: {reason}"))
        .with_metadata(json!({ "reason": reason }))
}

/// Reads the headers (`x-rivet-pool-name`, or the older
/// `x-rivet-runner-name`). A missing one is `request.invalid`.
pub fn parse_headers(req: &ServerlessRequest) -> Result<StartHeaders, RivetError> {
    let required = |name: &str| {
        req.header(name).map(str::to_owned).ok_or_else(|| invalid_request(format!("{name} header is required")))
    };
    let endpoint = required("x-rivet-endpoint")?;
    let pool_name = req
        .header("x-rivet-pool-name")
        .or_else(|| req.header("x-rivet-runner-name"))
        .map(str::to_owned)
        .ok_or_else(|| invalid_request("x-rivet-pool-name header is required"))?;
    let namespace = required("x-rivet-namespace-name")?;
    Ok(StartHeaders { endpoint, token: req.header("x-rivet-token").map(str::to_owned), pool_name, namespace })
}

/// The endpoint and namespace must be the configured ones.
pub fn check_identity(headers: &StartHeaders, endpoint: &str, namespace: &str) -> Result<(), RivetError> {
    if !endpoints_match(&headers.endpoint, endpoint) {
        return Err(mismatch("endpoint", endpoint, &headers.endpoint));
    }
    if headers.namespace != namespace {
        return Err(mismatch("namespace", namespace, &headers.namespace));
    }
    Ok(())
}

/// `config.<what>_mismatch`: the start is for another endpoint, namespace
/// or pool than this host serves.
pub fn mismatch(what: &str, expected: &str, received: &str) -> RivetError {
    let code = match what {
        "endpoint" => crate::error_codes::CONFIG_ENDPOINT_MISMATCH,
        "namespace" => crate::error_codes::CONFIG_NAMESPACE_MISMATCH,
        _ => crate::error_codes::CONFIG_POOL_MISMATCH,
    };
    RivetError::new(
        code,
        format!("{what} mismatch: this host serves \"{expected}\", the start request is for \"{received}\""),
    )
    .with_metadata(json!({ "expected": expected, "received": received }))
}

/// `message.incoming_too_long` for a body over `limit` bytes.
pub fn check_size(len: usize, limit: usize) -> Result<(), RivetError> {
    if len > limit {
        return Err(RivetError::new(
            crate::error_codes::MESSAGE_INCOMING_TOO_LONG,
            format!("Incoming message too long. Received {len} bytes, limit is {limit} bytes."),
        )
        .with_metadata(json!({ "limit": limit, "received": len })));
    }
    Ok(())
}

/// Decodes the start payload: a little-endian `u16` protocol version, then
/// a `ToEnvoy` message holding exactly one `CommandStartActor`. Only the
/// current protocol version is accepted (the envoy client decodes it again
/// when it takes the actor, with the same rule).
pub fn decode_payload(payload: &[u8]) -> Result<StartTarget, RivetError> {
    let bad = |reason: String| invalid_request(format!("bad start payload: {reason}"));
    if payload.len() < 2 {
        return Err(bad(format!("{} bytes is too short for a versioned message", payload.len())));
    }
    let version = u16::from_le_bytes([payload[0], payload[1]]);
    if version != protocol::PROTOCOL_VERSION {
        return Err(bad(format!(
            "protocol version {version}, this host speaks version {}",
            protocol::PROTOCOL_VERSION
        )));
    }
    let message = protocol::versioned::ToEnvoy::deserialize(&payload[2..], version)
        .or_else(|_| protocol::versioned::ToEnvoy::deserialize(&payload[2..], version - 1))
        .map_err(|err| bad(format!("cannot decode the message ({err})")))?;
    let protocol::ToEnvoy::ToEnvoyCommands(commands) = message else {
        return Err(bad("expected a list of commands".to_owned()));
    };
    match commands.as_slice() {
        [command] if matches!(command.inner, protocol::Command::CommandStartActor(_)) => {
            Ok(StartTarget { actor_id: command.checkpoint.actor_id.clone(), generation: command.checkpoint.generation })
        }
        _ => Err(bad(format!("expected exactly one start command, got {} command(s)", commands.len()))),
    }
}

/// Whether two endpoint values name the same engine: loopback hosts are
/// one, regional `api-<region>.<x>.rivet.dev` hosts are `api.<x>.rivet.dev`,
/// a trailing `/` does not count, and a comma-separated value is a set of
/// candidates of which one must match.
pub fn endpoints_match(a: &str, b: &str) -> bool {
    let b = candidates(b);
    candidates(a).iter().any(|x| b.contains(x))
}

fn candidates(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| normalize_endpoint(c).unwrap_or_else(|| c.to_owned()))
        .collect()
}

fn normalize_endpoint(endpoint: &str) -> Option<String> {
    let url = Url::parse(endpoint).ok()?;
    let mut host = url.host_str()?.to_owned();
    if matches!(host.as_str(), "127.0.0.1" | "0.0.0.0" | "::1" | "[::1]") {
        host = "localhost".to_owned();
    }
    if let Some(rest) = host.strip_prefix("api-").filter(|_| host.ends_with(".rivet.dev")) {
        if let Some((_, domain)) = rest.split_once('.') {
            host = format!("api.{domain}");
        }
    }
    let path = if url.path() == "/" { "/" } else { url.path().trim_end_matches('/') };
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    Some(format!("{}://{host}{port}{path}", url.scheme()))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// A start payload as the engine sends it.
    pub(crate) fn payload(actor_id: &str, generation: u32) -> Vec<u8> {
        let message = protocol::ToEnvoy::ToEnvoyCommands(vec![protocol::CommandWrapper {
            checkpoint: protocol::ActorCheckpoint { actor_id: actor_id.to_owned(), generation, index: 0 },
            inner: protocol::Command::CommandStartActor(protocol::CommandStartActor {
                config: protocol::ActorConfig { name: "counter".into(), key: None, create_ts: 0, input: None },
                hibernating_requests: vec![],
                preloaded_kv: None,
            }),
        }]);
        let body = protocol::versioned::ToEnvoy::wrap_latest(message).serialize(protocol::PROTOCOL_VERSION).unwrap();
        let mut out = protocol::PROTOCOL_VERSION.to_le_bytes().to_vec();
        out.extend(body);
        out
    }

    pub(crate) fn request(headers: &[(&str, &str)]) -> ServerlessRequest {
        ServerlessRequest {
            method: "POST".into(),
            url: "http://host/api/rivet/start".into(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>(),
            body: Bytes::new(),
            cancel: CancellationToken::new(),
        }
    }

    #[test]
    fn headers_are_required() {
        let all = [
            ("x-rivet-endpoint", "http://127.0.0.1:6420"),
            ("x-rivet-pool-name", "pool"),
            ("x-rivet-namespace-name", "default"),
            ("x-rivet-token", "t"),
        ];
        let parsed = parse_headers(&request(&all)).unwrap();
        assert_eq!(parsed.pool_name, "pool");
        assert_eq!(parsed.token.as_deref(), Some("t"));
        for skip in 0..3 {
            let some: Vec<_> = all.iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, h)| *h).collect();
            let err = parse_headers(&request(&some)).unwrap_err();
            assert_eq!((err.group.as_str(), err.code.as_str()), ("request", "invalid"));
            assert!(err.message.contains(all[skip].0), "{}", err.message);
        }
        let legacy = parse_headers(&request(&[
            ("x-rivet-endpoint", "http://e"),
            ("x-rivet-runner-name", "old"),
            ("x-rivet-namespace-name", "ns"),
        ]))
        .unwrap();
        assert_eq!(legacy.pool_name, "old");
        assert_eq!(legacy.token, None);
    }

    #[test]
    fn endpoints_are_compared_normalised() {
        assert!(endpoints_match("http://127.0.0.1:6420/", "http://localhost:6420"));
        assert!(endpoints_match("https://api-us-west.rivet.dev", "https://api.rivet.dev/"));
        assert!(endpoints_match("http://a:1, http://127.0.0.1:2", "http://localhost:2"));
        assert!(!endpoints_match("http://127.0.0.1:6420", "http://127.0.0.1:6421"));
        assert!(!endpoints_match("http://a/x", "http://a/y"));
    }

    #[test]
    fn identity_and_size() {
        let headers = StartHeaders {
            endpoint: "http://127.0.0.1:1/".into(),
            token: None,
            pool_name: "p".into(),
            namespace: "ns".into(),
        };
        assert!(check_identity(&headers, "http://localhost:1", "ns").is_ok());
        assert_eq!(check_identity(&headers, "http://localhost:2", "ns").unwrap_err().code, "endpoint_mismatch");
        assert_eq!(check_identity(&headers, "http://localhost:1", "other").unwrap_err().code, "namespace_mismatch");
        assert!(check_size(10, 10).is_ok());
        let err = check_size(11, 10).unwrap_err();
        assert_eq!((err.group.as_str(), err.code.as_str()), ("message", "incoming_too_long"));
    }

    #[test]
    fn payloads() {
        assert_eq!(decode_payload(&payload("abc", 3)).unwrap(), StartTarget { actor_id: "abc".into(), generation: 3 });
        for bad in [vec![], vec![8], vec![1, 0, 1, 2, 3], vec![8, 0, 0xff, 0xff, 0xff]] {
            let err = decode_payload(&bad).unwrap_err();
            assert_eq!((err.group.as_str(), err.code.as_str()), ("request", "invalid"), "{bad:?}");
        }
    }
}
