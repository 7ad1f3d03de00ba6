//! W3C span contexts: the ids a span is known by across processes.

/// A W3C span context: 32 and 16 lowercase hex digits, and the flags
/// (bit 0: sampled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: String,
    pub span_id: String,
    pub flags: u8,
    pub tracestate: Option<String>,
}

impl SpanContext {
    /// Parses a version-00 `traceparent`; `None` if it is not one or its
    /// ids are all zeros.
    pub fn parse(traceparent: &str, tracestate: Option<String>) -> Option<Self> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
        if parts.next().is_some() || version != "00" || !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
            return None;
        }
        if !nonzero(trace_id) || !nonzero(span_id) {
            return None;
        }
        Some(Self {
            trace_id: trace_id.to_ascii_lowercase(),
            span_id: span_id.to_ascii_lowercase(),
            flags: u8::from_str_radix(flags, 16).ok()?,
            tracestate: tracestate.filter(|s| !s.is_empty()),
        })
    }

    /// The `traceparent` and `tracestate` of a request's headers (names in
    /// any case).
    pub fn from_headers(headers: &std::collections::HashMap<String, String>) -> Option<Self> {
        let find = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        Self::parse(&find("traceparent")?, find("tracestate"))
    }

    /// A child of `parent`, in its trace and with its sampling decision.
    pub fn child_of(parent: &SpanContext) -> Self {
        Self {
            trace_id: parent.trace_id.clone(),
            span_id: random_hex::<8>(),
            flags: parent.flags,
            tracestate: parent.tracestate.clone(),
        }
    }

    /// The first span of a new trace.
    pub fn root(sampled: bool) -> Self {
        Self { trace_id: random_hex::<16>(), span_id: random_hex::<8>(), flags: u8::from(sampled), tracestate: None }
    }

    pub fn is_sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The same span with its sampled flag set to `sampled`.
    pub(crate) fn with_sampled(mut self, sampled: bool) -> Self {
        self.flags = (self.flags & !1) | u8::from(sampled);
        self
    }

    /// The `traceparent` header value of this span.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.span_id, self.flags)
    }
}

/// `N` random bytes as lowercase hex, never all zeros (W3C forbids it).
pub(crate) fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    if getrandom::getrandom(&mut bytes).is_err() || bytes.iter().all(|b| *b == 0) {
        // No randomness: still a valid, distinct-enough id from the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(1)
            .max(1);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (nanos >> ((i % 16) * 8)) as u8;
        }
        bytes[N - 1] |= 1;
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_parsing() {
        let ok =
            SpanContext::parse("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", Some("a=b".into())).unwrap();
        assert_eq!(ok.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!((ok.span_id.as_str(), ok.flags, ok.tracestate.as_deref()), ("00f067aa0ba902b7", 1, Some("a=b")));
        assert_eq!(ok.traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(SpanContext::parse(bad, None), None, "{bad}");
        }
    }

    #[test]
    fn children_keep_the_trace_and_the_decision() {
        let parent = SpanContext::root(false);
        let child = SpanContext::child_of(&parent);
        assert_eq!((child.trace_id.as_str(), child.is_sampled()), (parent.trace_id.as_str(), false));
        assert_ne!(child.span_id, parent.span_id);
        assert!(SpanContext::root(true).with_sampled(false).flags == 0);
    }
}
