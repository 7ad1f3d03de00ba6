//! Test-only scratch directory, removed on drop (no `tempfile` dependency).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

pub struct TestDir {
    pub path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let unique = format!("rivetkit-native-{name}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(unique);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test dir");
        Self { path }
    }

    /// Creates an (empty) file at `rel`, with its parent directories.
    pub fn file(&self, rel: &str) -> PathBuf {
        let path = self.path.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create parent");
        std::fs::write(&path, b"").expect("write file");
        path
    }
}

impl TestDir {
    /// An executable stand-in for a `rivet-engine` binary of `arch` at
    /// `rel`: it answers `--runtime-info` as that architecture does.
    #[cfg(unix)]
    pub fn engine(&self, rel: &str, arch: crate::engine::EngineArch) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file(rel);
        let body = match arch {
            crate::engine::EngineArch::V3 => r#"echo '{"architecture":"v3","runtime":"engine","version":"3.0.0"}'"#,
            crate::engine::EngineArch::V2 => "echo \"error: unexpected argument '$1' found\" >&2; exit 2",
        };
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write fake engine");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod fake engine");
        path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
