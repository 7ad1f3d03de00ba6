//! Where a managed engine keeps its database, config file and logs.
//!
//! The layout matches the reference engine-process crate on purpose: a host
//! started by rivetkit-native and one started by the reference RivetKit then
//! share one engine database (`{root}/var/engine/db` for engine 2.3,
//! `{root}/var/engine/depot` for engine 3.0, which reads nothing of 2.3's)
//! and log directory.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::lookup::Env;

/// `$RIVETKIT_STORAGE_PATH/.rivetkit`, else `$HOME/.rivetkit`, else
/// `<cwd>/.rivetkit`.
pub fn storage_root(env: Env<'_>) -> Result<PathBuf> {
    if let Some(path) = env("RIVETKIT_STORAGE_PATH").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path).join(".rivetkit"));
    }
    let base = match env("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home),
        None => std::env::current_dir().context("locate a directory for engine storage")?,
    };
    Ok(base.join(".rivetkit"))
}

/// The directories of one storage root.
#[derive(Debug, Clone)]
pub struct EngineDirs {
    /// `{root}/var/engine`: config files live here.
    pub engine: PathBuf,
    /// `{root}/var/engine/db`: engine 2.3's file-system database.
    pub db: PathBuf,
    /// `{root}/var/engine/depot/log`: engine 3.0's log shard directory.
    pub depot_log: PathBuf,
    /// `{root}/var/engine/depot/objects`: engine 3.0's object store.
    pub depot_objects: PathBuf,
    /// `{root}/var/logs/rivet-engine`: per-start stdout/stderr logs.
    pub logs: PathBuf,
}

impl EngineDirs {
    pub fn new(root: PathBuf) -> Self {
        let var = root.join("var");
        Self {
            engine: var.join("engine"),
            db: var.join("engine").join("db"),
            depot_log: var.join("engine").join("depot").join("log"),
            depot_objects: var.join("engine").join("depot").join("objects"),
            logs: var.join("logs").join("rivet-engine"),
        }
    }

    pub fn create_all(&self) -> Result<()> {
        for dir in [&self.engine, &self.db, &self.depot_log, &self.depot_objects, &self.logs] {
            std::fs::create_dir_all(dir).with_context(|| format!("create directory `{}`", dir.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_root_precedence() {
        let env = |k: &str| match k {
            "RIVETKIT_STORAGE_PATH" => Some("/data".to_owned()),
            "HOME" => Some("/home/u".to_owned()),
            _ => None,
        };
        assert_eq!(storage_root(&env).unwrap(), PathBuf::from("/data/.rivetkit"));
        let env = |k: &str| (k == "HOME").then(|| "/home/u".to_owned());
        assert_eq!(storage_root(&env).unwrap(), PathBuf::from("/home/u/.rivetkit"));
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(storage_root(&|_| None).unwrap(), cwd.join(".rivetkit"));
    }

    #[test]
    fn layout() {
        let dirs = EngineDirs::new(PathBuf::from("/r/.rivetkit"));
        assert_eq!(dirs.db, PathBuf::from("/r/.rivetkit/var/engine/db"));
        assert_eq!(dirs.logs, PathBuf::from("/r/.rivetkit/var/logs/rivet-engine"));
    }
}
