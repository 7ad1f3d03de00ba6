//! Which handler a gateway path goes to (docs/wire-formats.md), and
//! the percent-decoding of action and queue names.

use crate::error::RivetError;

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Raw request to `onRequest`, with the rewritten URI (docs/wire-formats.md).
    Raw(String),
    /// `POST /action/<name>`, name percent-decoded.
    Action(String),
    /// `POST /queue/<name>`, name percent-decoded.
    Queue(String),
    Root,
    Health,
    Metadata,
    /// Anything else: a structured 404 naming the path (query excluded).
    NotFound(String),
}

impl Route {
    /// Classifies `path` (actor-relative, query included). An action or
    /// queue segment with a bad escape or non-UTF-8 bytes is an error: the
    /// envoy then answers 500 `envoy.fetch_failed`.
    pub(super) fn classify(path: &str) -> anyhow::Result<Route> {
        if path == "/request" || path.starts_with("/request/") || path.starts_with("/request?") {
            let rest = &path["/request".len()..];
            let uri = match rest {
                "" | "/" => "/".to_string(),
                // The reference passes `?q` through literally; a leading `/`
                // makes it a valid origin-form URI for every HTTP library.
                r if r.starts_with('?') => format!("/{r}"),
                r => r.to_string(),
            };
            return Ok(Route::Raw(uri));
        }
        // The inspector's routes are served by RivetKit's runtime inside
        // `onRequest` (it sets `handleInspectorHttpInRuntime`), path as is
        // (docs/inspector.md).
        if path.starts_with("/inspector/") {
            return Ok(Route::Raw(path.to_string()));
        }
        let bare = path_without_query(path);
        if let Some(segment) = single_segment(bare, "/action/") {
            return Ok(Route::Action(percent_decode(segment)?));
        }
        if let Some(segment) = single_segment(bare, "/queue/") {
            return Ok(Route::Queue(percent_decode(segment)?));
        }
        Ok(match bare {
            "" | "/" => Route::Root,
            "/health" => Route::Health,
            "/metadata" => Route::Metadata,
            _ => Route::NotFound(bare.to_string()),
        })
    }
}

pub(super) fn path_without_query(path: &str) -> &str {
    path.split('?').next().unwrap_or("")
}

/// The rest of `path` after `prefix` if it is exactly one non-empty segment.
fn single_segment<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let segment = path.strip_prefix(prefix)?;
    (!segment.is_empty() && !segment.contains('/')).then_some(segment)
}

/// `%XX` escapes only (`+` stays a plus); every `%` must start an escape and
/// the result must be UTF-8.
fn percent_decode(segment: &str) -> anyhow::Result<String> {
    check_escapes(segment)?;
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| invalid_segment("not valid UTF-8"))
}

/// The crate leaves a malformed escape as it is; a path segment with one is
/// refused instead.
fn check_escapes(segment: &str) -> anyhow::Result<()> {
    let bytes = segment.as_bytes();
    for (i, _) in bytes.iter().enumerate().filter(|(_, &b)| b == b'%') {
        let escape = bytes.get(i + 1..i + 3).ok_or_else(|| invalid_segment("incomplete percent escape"))?;
        if !escape.iter().all(u8::is_ascii_hexdigit) {
            return Err(invalid_segment("invalid percent escape"));
        }
    }
    Ok(())
}

fn invalid_segment(reason: &str) -> anyhow::Error {
    RivetError::new(
        crate::error_codes::PROTOCOL_INVALID_HTTP_REQUEST,
        format!("Invalid HTTP request path segment: {reason}"),
    )
    .into_anyhow()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(path: &str) -> Route {
        Route::classify(path).unwrap()
    }

    #[test]
    fn raw_and_framework_routes() {
        assert_eq!(route("/request"), Route::Raw("/".into()));
        assert_eq!(route("/request/"), Route::Raw("/".into()));
        assert_eq!(route("/request/users/1?x=2"), Route::Raw("/users/1?x=2".into()));
        assert_eq!(route("/request?foo=bar"), Route::Raw("/?foo=bar".into()));
        assert_eq!(route("/requestfoo"), Route::NotFound("/requestfoo".into()));
        assert_eq!(route("/inspector/state?x=1"), Route::Raw("/inspector/state?x=1".into()));
        assert_eq!(route("/inspector"), Route::NotFound("/inspector".into()));
        assert_eq!(route("/"), Route::Root);
        assert_eq!(route(""), Route::Root);
        assert_eq!(route("/?x"), Route::Root);
        assert_eq!(route("/health"), Route::Health);
        assert_eq!(route("/metadata?x"), Route::Metadata);
        assert_eq!(route("/metrics"), Route::NotFound("/metrics".into()));
    }

    #[test]
    fn action_and_queue_need_exactly_one_segment() {
        assert_eq!(route("/action/increment"), Route::Action("increment".into()));
        assert_eq!(route("/action/increment?x=1"), Route::Action("increment".into()));
        assert_eq!(route("/queue/jobs"), Route::Queue("jobs".into()));
        assert_eq!(route("/action/"), Route::NotFound("/action/".into()));
        assert_eq!(route("/action"), Route::NotFound("/action".into()));
        assert_eq!(route("/action/a/b"), Route::NotFound("/action/a/b".into()));
        assert_eq!(route("/action/a/"), Route::NotFound("/action/a/".into()));
        assert_eq!(route("/queue/"), Route::NotFound("/queue/".into()));
    }

    #[test]
    fn names_are_percent_decoded_only() {
        assert_eq!(route("/action/a%20b"), Route::Action("a b".into()));
        assert_eq!(route("/action/a+b"), Route::Action("a+b".into()));
        assert_eq!(route("/action/a%2Fb"), Route::Action("a/b".into()));
        assert_eq!(route("/action/%C3%A9t%c3%a9"), Route::Action("été".into()));
        assert_eq!(route("/queue/q%41"), Route::Queue("qA".into()));
    }

    #[test]
    fn bad_escapes_are_errors() {
        for path in ["/action/%", "/action/a%4", "/action/%zz", "/action/%4g", "/action/%FF", "/queue/%C3"] {
            let err = Route::classify(path).unwrap_err();
            assert_eq!(RivetError::extract(&err).qualified_code(), "protocol.invalid_http_request", "{path}");
        }
    }
}
