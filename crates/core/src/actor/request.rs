//! What a client asks of an actor and what it answers: raw HTTP requests
//! and responses and queue sends. Plain data, shared by the hooks and the
//! task's commands without tying either to the other.

use std::collections::HashMap;

/// A raw HTTP request as the actor sees it (path relative to the actor).
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    pub method: String,
    pub uri: String,
    pub headers: HashMap<String, String>,
    /// The body received so far (all of it unless `body_stream` is set).
    pub body: Vec<u8>,
    /// The rest of a streamed upload (raw requests only; docs/streams.md).
    pub body_stream: Option<super::http_body::RequestBodyReader>,
    /// Where a streamed response body goes when the hook answers
    /// `stream: true` (raw requests only; docs/streams.md).
    pub response_body: Option<super::http_body::ResponseBodyWriter>,
}

impl HttpRequest {
    /// The caller's ray ID (`x-rivet-ray-id`), when it is one the clients
    /// would send: 1 to 30 characters of `[A-Za-z0-9_-]`. The header is
    /// untrusted; anything else counts as absent.
    pub fn ray_id(&self) -> Option<String> {
        ray_id_of(&self.headers)
    }
}

/// [`HttpRequest::ray_id`] of any header map (names in any case).
pub fn ray_id_of(headers: &HashMap<String, String>) -> Option<String> {
    use rivetkit_client_protocol::telemetry_headers::{bounded_ray_id, HEADER_RIVET_RAY_ID};
    let value = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(HEADER_RIVET_RAY_ID))
        .map(|(_, value)| value.as_str())?;
    bounded_ray_id(value).map(str::to_owned)
}

/// What a client's `POST /queue/{name}` asks for.
#[derive(Debug, Clone, Default)]
pub struct QueueSendRequest {
    /// The queue name, percent-decoded from the path.
    pub name: String,
    /// The message body, CBOR.
    pub body: Vec<u8>,
    /// Whether the client waits for the consumer's answer.
    pub wait: bool,
    /// How long it waits, in ms.
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// The body follows through the request's `response_body` writer.
    pub stream: bool,
}

#[cfg(test)]
mod ray_id_tests {
    use super::*;

    #[test]
    fn only_a_bounded_ray_id_counts() {
        let of = |name: &str, value: &str| ray_id_of(&HashMap::from([(name.to_owned(), value.to_owned())]));
        assert_eq!(of("x-rivet-ray-id", "ray-abc_1").as_deref(), Some("ray-abc_1"));
        assert_eq!(of("X-Rivet-Ray-Id", "abc").as_deref(), Some("abc"));
        assert_eq!(of("x-rivet-ray-id", &"r".repeat(30)).map(|r| r.len()), Some(30));
        for bad in ["", "not a ray!", "ray\n", &"r".repeat(31)] {
            assert_eq!(of("x-rivet-ray-id", bad), None, "{bad:?}");
        }
        assert_eq!(of("x-other", "abc"), None);
    }
}
