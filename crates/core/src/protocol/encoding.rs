//! The client's wire encoding of an HTTP framework request (see
//! docs/wire-formats.md): chosen by the `x-rivet-encoding` header.

use std::collections::HashMap;

/// Request header that selects the encoding.
pub const ENCODING_HEADER: &str = "x-rivet-encoding";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Cbor,
    /// vbare: a 2-byte little-endian protocol version, then a BARE body.
    Bare,
}

impl Encoding {
    /// Exactly `cbor` or `bare` (case-sensitive) select those; anything
    /// else, or no header, is JSON. Unknown values are not an error.
    pub fn from_header_value(value: Option<&str>) -> Self {
        match value {
            Some("cbor") => Self::Cbor,
            Some("bare") => Self::Bare,
            _ => Self::Json,
        }
    }

    /// The encoding of a request with these headers (names matched
    /// case-insensitively).
    pub fn from_headers(headers: &HashMap<String, String>) -> Self {
        Self::from_header_value(header(headers, ENCODING_HEADER))
    }

    /// `content-type` of a response body in this encoding.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json",
            Self::Cbor | Self::Bare => "application/octet-stream",
        }
    }
}

/// The value of header `name`, whatever the case of its stored name.
pub fn header<'a>(headers: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .or_else(|| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_values_select_binary_encodings() {
        assert_eq!(Encoding::from_header_value(Some("cbor")), Encoding::Cbor);
        assert_eq!(Encoding::from_header_value(Some("bare")), Encoding::Bare);
        assert_eq!(Encoding::from_header_value(Some("json")), Encoding::Json);
        assert_eq!(Encoding::from_header_value(None), Encoding::Json);
        for other in ["CBOR", "Bare", " cbor", "cbor ", "msgpack", ""] {
            assert_eq!(Encoding::from_header_value(Some(other)), Encoding::Json, "{other:?}");
        }
    }

    #[test]
    fn header_names_are_case_insensitive() {
        let headers = HashMap::from([("X-Rivet-Encoding".to_string(), "bare".to_string())]);
        assert_eq!(Encoding::from_headers(&headers), Encoding::Bare);
        assert_eq!(Encoding::from_headers(&HashMap::new()), Encoding::Json);
    }

    #[test]
    fn content_types() {
        assert_eq!(Encoding::Json.content_type(), "application/json");
        assert_eq!(Encoding::Cbor.content_type(), "application/octet-stream");
        assert_eq!(Encoding::Bare.content_type(), "application/octet-stream");
    }
}
