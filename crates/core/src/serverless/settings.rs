//! What the serverless routes need beyond [`ServeConfig`]: the base path,
//! the start-request checks and the metadata's client fields. Kept apart
//! from `ServeConfig` because only the serverless mode reads them, and they
//! come from the host's JavaScript config rather than the environment.
//!
//! [`ServeConfig`]: crate::registry::ServeConfig

/// Where the routes live when nothing else is configured.
pub const DEFAULT_BASE_PATH: &str = "/api/rivet";
/// Largest `/start` body when nothing else is configured (1 MiB; RivetKit's
/// own default, which it always passes, is 16 MiB).
pub const DEFAULT_MAX_START_PAYLOAD_BYTES: usize = 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerlessSettings {
    /// Normalised: leading `/`, no trailing `/` (`/` itself stays).
    pub base_path: String,
    /// The app's package version, in `/health` and `/metadata`.
    pub package_version: String,
    pub client_endpoint: Option<String>,
    pub client_namespace: Option<String>,
    pub client_token: Option<String>,
    /// Refuse a start whose endpoint or namespace differ from the config's.
    pub validate_endpoint: bool,
    pub max_start_payload_bytes: usize,
}

impl Default for ServerlessSettings {
    fn default() -> Self {
        Self {
            base_path: DEFAULT_BASE_PATH.to_owned(),
            package_version: env!("CARGO_PKG_VERSION").to_owned(),
            client_endpoint: None,
            client_namespace: None,
            client_token: None,
            validate_endpoint: true,
            max_start_payload_bytes: DEFAULT_MAX_START_PAYLOAD_BYTES,
        }
    }
}

/// `api/rivet/` → `/api/rivet`; empty or absent → the default; `/` stays.
pub fn normalize_base_path(base_path: Option<&str>) -> String {
    let raw = base_path.filter(|p| !p.is_empty()).unwrap_or(DEFAULT_BASE_PATH);
    let prefixed = if raw.starts_with('/') { raw.to_owned() } else { format!("/{raw}") };
    let trimmed = prefixed.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// The path relative to the base path (`{base}` → `""`, `{base}/x` → `/x`);
/// a path outside it is returned unchanged, so `/health` at the root also
/// answers.
pub fn route_path(base_path: &str, path: &str) -> String {
    if path == base_path {
        return String::new();
    }
    if base_path == "/" {
        return path.to_owned();
    }
    match path.strip_prefix(base_path).and_then(|rest| rest.strip_prefix('/')) {
        Some(rest) => format!("/{rest}"),
        None => path.to_owned(),
    }
}

/// The routes RivetKit owns below the base path.
pub const FRAMEWORK_ROUTES: &[&str] = &["", "/", "/health", "/metadata", "/metrics", "/start"];

/// Whether `path` is one of RivetKit's routes under `base_path` (a listener
/// answers those itself and hands everything else to the application).
pub fn is_framework_path(base_path: &str, path: &str, routes: &[&str]) -> bool {
    let inside =
        path == base_path || base_path == "/" || path.strip_prefix(base_path).is_some_and(|rest| rest.starts_with('/'));
    inside && routes.contains(&route_path(base_path, path).as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths_are_normalised() {
        assert_eq!(normalize_base_path(None), "/api/rivet");
        assert_eq!(normalize_base_path(Some("")), "/api/rivet");
        assert_eq!(normalize_base_path(Some("rivet/")), "/rivet");
        assert_eq!(normalize_base_path(Some("/a/b//")), "/a/b");
        assert_eq!(normalize_base_path(Some("/")), "/");
    }

    #[test]
    fn paths_relative_to_the_base() {
        assert_eq!(route_path("/api/rivet", "/api/rivet"), "");
        assert_eq!(route_path("/api/rivet", "/api/rivet/"), "/");
        assert_eq!(route_path("/api/rivet", "/api/rivet/start"), "/start");
        assert_eq!(route_path("/api/rivet", "/api/rivetx/start"), "/api/rivetx/start");
        assert_eq!(route_path("/api/rivet", "/health"), "/health");
        assert_eq!(route_path("/", "/start"), "/start");
    }

    #[test]
    fn framework_paths() {
        let owns = |p: &str| is_framework_path("/api/rivet", p, FRAMEWORK_ROUTES);
        assert!(owns("/api/rivet"));
        assert!(owns("/api/rivet/start"));
        assert!(owns("/api/rivet/health"));
        assert!(!owns("/api/rivet/other"));
        assert!(!owns("/health"), "outside the base path belongs to the application");
        assert!(!owns("/api/rivetx/start"));
        assert!(is_framework_path("/", "/metadata", FRAMEWORK_ROUTES));
    }
}
