//! Files of the public directory (`publicDir`). A request path maps to a
//! file below the directory only: `..`, absolute parts and backslashes are
//! refused, a directory answers with its `index.html`, and anything not
//! found falls through to the application.

use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use percent_encoding::percent_decode_str;

/// Largest file served (larger ones fall through, like a missing file).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The file for `path` and its content type, if the directory has one.
pub(super) async fn lookup(dir: &Path, path: &str) -> Option<(Bytes, &'static str)> {
    let mut file = resolve(dir, path)?;
    let mut meta = tokio::fs::metadata(&file).await.ok()?;
    if meta.is_dir() {
        file.push("index.html");
        meta = tokio::fs::metadata(&file).await.ok()?;
    }
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let bytes = tokio::fs::read(&file).await.ok()?;
    Some((Bytes::from(bytes), content_type(&file)))
}

/// `dir` joined with the decoded, checked segments of `path`.
fn resolve(dir: &Path, path: &str) -> Option<PathBuf> {
    let decoded = percent_decode_str(path).decode_utf8().ok()?;
    let mut out = dir.to_path_buf();
    for segment in decoded.split('/') {
        if segment.is_empty() || segment == "." {
            continue;
        }
        if segment.contains('\\') || segment.contains('\0') {
            return None;
        }
        let mut components = Path::new(segment).components();
        match (components.next(), components.next()) {
            (Some(Component::Normal(part)), None) => out.push(part),
            _ => return None,
        }
    }
    Some(out)
}

fn content_type(file: &Path) -> &'static str {
    let ext = file.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("webp") => "image/webp",
        Some("ico") => "image/x-icon",
        Some("wasm") => "application/wasm",
        Some("woff2") => "font/woff2",
        Some("woff") => "font/woff",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_directory() {
        let dir = Path::new("/srv/public");
        assert_eq!(resolve(dir, "/a/b.txt"), Some(PathBuf::from("/srv/public/a/b.txt")));
        assert_eq!(resolve(dir, "/"), Some(PathBuf::from("/srv/public")));
        assert_eq!(resolve(dir, "/./x"), Some(PathBuf::from("/srv/public/x")));
        assert_eq!(resolve(dir, "/../etc/passwd"), None);
        assert_eq!(resolve(dir, "/a/%2e%2e/%2e%2e/etc"), None);
        assert_eq!(resolve(dir, "/a%5c..%5cb"), None);
        assert_eq!(resolve(dir, "/a%2F..%2Fb"), None, "an encoded slash cannot smuggle a ..");
    }

    #[tokio::test]
    async fn files_and_index() {
        let dir = std::env::temp_dir().join(format!("rivetkit-native-static-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("hello.txt"), "hi").unwrap();
        std::fs::write(dir.join("sub/index.html"), "<p>").unwrap();
        assert_eq!(lookup(&dir, "/hello.txt").await, Some((Bytes::from_static(b"hi"), "text/plain; charset=utf-8")));
        assert_eq!(lookup(&dir, "/sub").await.map(|(b, _)| b), Some(Bytes::from_static(b"<p>")));
        assert_eq!(lookup(&dir, "/missing").await, None);
        assert_eq!(lookup(&dir, "/").await, None, "no index.html at the top");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
