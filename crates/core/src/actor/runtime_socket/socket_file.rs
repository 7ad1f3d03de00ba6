//! The socket's file and its private directory: creating, binding and
//! removing them under one lock. Both the generation's socket (`mod.rs`)
//! and the server (when its listener ends) remove the file.

use std::fmt::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::net::UnixListener;

/// The process's socket directory, while it exists. Creating it, binding
/// in it, and removing a socket with the directory when it is left empty
/// happen under this lock, so a bind never finds its directory gone.
static SOCKET_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

fn socket_dir() -> std::sync::MutexGuard<'static, Option<PathBuf>> {
    SOCKET_DIR.lock().unwrap_or_else(|p| p.into_inner())
}

fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::getrandom(&mut buf).map_err(|e| anyhow::anyhow!("no random bytes for the socket's name: {e}"))?;
    let mut out = String::with_capacity(bytes * 2);
    for b in buf {
        let _ = write!(out, "{b:02x}");
    }
    Ok(out)
}

/// A new directory only we can enter, under the temporary directory. A
/// name that exists already (ours from before, or anyone's) is never
/// reused: another random name is drawn.
fn create_private_dir() -> anyhow::Result<PathBuf> {
    let parent = std::env::temp_dir();
    for _ in 0..8 {
        let dir = parent.join(format!("rivet-actor-runtime.{}", random_hex(6)?));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
                return Ok(dir);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!("creating {}", dir.display())));
            }
        }
    }
    anyhow::bail!("could not create a private directory for the actor runtime socket")
}

/// Binds a new socket (mode 0600) in the process's directory.
pub(super) fn bind() -> anyhow::Result<(UnixListener, PathBuf)> {
    let mut dir = socket_dir();
    let existing = dir.clone().filter(|d| d.is_dir());
    let current = match existing {
        Some(d) => d,
        None => {
            let d = create_private_dir()?;
            *dir = Some(d.clone());
            d
        }
    };
    let path = current.join(format!("{}.sock", random_hex(6)?));
    let listener = UnixListener::bind(&path).map_err(|e| {
        anyhow::Error::new(e).context(format!("binding the actor runtime socket at {}", path.display()))
    })?;
    if let Err(err) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(&path);
        return Err(anyhow::Error::new(err).context("restricting the actor runtime socket"));
    }
    Ok((listener, path))
}

/// Removes a socket file (if still there), and its directory once empty.
pub(super) fn remove_socket_file(path: &Path) {
    let mut dir = socket_dir();
    if let Err(err) = std::fs::remove_file(path) {
        if err.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), %err, "removing the actor runtime socket failed");
        }
    }
    if let Some(parent) = path.parent() {
        if dir.as_deref() == Some(parent) && std::fs::remove_dir(parent).is_ok() {
            *dir = None;
        }
    }
}
