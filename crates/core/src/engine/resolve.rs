//! Finding the `rivet-engine` binary.
//!
//! Why npm and not a download: the engine ships on npm as
//! `@rivetkit/engine-cli` plus one platform package per OS/arch, and a
//! Node project that uses this addon already has (or can add) it in
//! `node_modules`. We never download anything ourselves.
//!
//! Order:
//! 1. `EngineOptions.engine_binary_path` (from JS, or `RIVET_ENGINE_BINARY_PATH`
//!    via `from_env`);
//! 2. env `RIVET_ENGINE_BINARY_PATH`, then `RIVET_ENGINE_BINARY` (the npm
//!    package's own override);
//! 3. `node_modules` in every ancestor of the current directory, then of the
//!    executable's directory: first `@rivetkit/engine-cli/rivet-engine` (a
//!    dev binary next to the meta package, which `getEnginePath()` prefers
//!    too), then `@rivetkit/engine-cli-<platform>/rivet-engine`.
//!
//! An explicit path (1, 2) that does not exist is an error even if a binary
//! could be found elsewhere: the user asked for that file.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

use super::options::EngineOptions;
use super::Env;
use crate::error::RivetError;

/// The binary's file name on this OS.
pub fn binary_name() -> &'static str {
    if cfg!(windows) {
        "rivet-engine.exe"
    } else {
        "rivet-engine"
    }
}

/// The npm platform package for this host, if the engine is published for it.
pub fn npm_platform_package() -> Option<&'static str> {
    Some(match (std::env::consts::OS, std::env::consts::ARCH) {
        // The musl build is static, so it is the one Linux package.
        ("linux", "x86_64") => "@rivetkit/engine-cli-linux-x64-musl",
        ("linux", "aarch64") => "@rivetkit/engine-cli-linux-arm64-musl",
        ("macos", "x86_64") => "@rivetkit/engine-cli-darwin-x64",
        ("macos", "aarch64") => "@rivetkit/engine-cli-darwin-arm64",
        ("windows", "x86_64") => "@rivetkit/engine-cli-win32-x64",
        _ => return None,
    })
}

/// The explicitly requested binary (steps 1-2), checked to exist.
pub fn explicit_binary(config: &EngineOptions, env: Env<'_>) -> Result<Option<PathBuf>> {
    let candidates = [
        ("EngineOptions.engine_binary_path", config.engine_binary_path.clone()),
        ("RIVET_ENGINE_BINARY_PATH", env("RIVET_ENGINE_BINARY_PATH").map(PathBuf::from)),
        ("RIVET_ENGINE_BINARY", env("RIVET_ENGINE_BINARY").map(PathBuf::from)),
    ];
    let Some((source, path)) = candidates
        .into_iter()
        .find_map(|(source, path)| path.filter(|p| !p.as_os_str().is_empty()).map(|p| (source, p)))
    else {
        return Ok(None);
    };
    if !path.is_file() {
        return Err(RivetError::new(
            "engine",
            "binary_not_found",
            format!("Engine binary was not found at '{}' (set by {source}).", path.display()),
        )
        .with_metadata(json!({ "path": path.display().to_string(), "source": source }))
        .into_anyhow());
    }
    Ok(Some(path))
}

/// Steps 1-3 against the process environment, without probing for a
/// running engine (useful for a CLI that wants the path itself).
pub fn resolve_engine_binary(config: &EngineOptions) -> Result<PathBuf> {
    match explicit_binary(config, &super::process_env)? {
        Some(path) => Ok(path),
        None => find_npm_binary(&search_roots()),
    }
}

/// Ancestors of the current directory, then of the executable's directory.
pub fn search_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let starts = [
        std::env::current_dir().ok(),
        std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)),
    ];
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            if !roots.iter().any(|r| r == dir) {
                roots.push(dir.to_path_buf());
            }
        }
    }
    roots
}

/// Step 3 over `roots`; missing everywhere is `engine.binary_not_found`.
pub fn find_npm_binary(roots: &[PathBuf]) -> Result<PathBuf> {
    let platform = npm_platform_package();
    for root in roots {
        let scope = root.join("node_modules").join("@rivetkit");
        let dev = scope.join("engine-cli").join(binary_name());
        if dev.is_file() {
            return Ok(dev);
        }
        if let Some(pkg) = platform.and_then(|p| p.strip_prefix("@rivetkit/")) {
            let candidate = scope.join(pkg).join(binary_name());
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    let Some(platform) = platform else {
        return Err(RivetError::new(
            "engine",
            "binary_unavailable",
            format!(
                "The Rivet Engine is not published for {}/{}. Build `rivet-engine` yourself and \
                 set RIVET_ENGINE_BINARY to its path, or point RIVET_ENDPOINT at a running engine.",
                std::env::consts::OS,
                std::env::consts::ARCH
            ),
        )
        .with_metadata(json!({ "os": std::env::consts::OS, "arch": std::env::consts::ARCH }))
        .into_anyhow());
    };
    Err(RivetError::new(
        "engine",
        "binary_not_found",
        format!(
            "Rivet Engine binary not found: no node_modules/{platform}/{} above the current \
             directory. Run `npm install @rivetkit/engine-cli` in your project, or set \
             RIVET_ENGINE_BINARY to the path of a rivet-engine binary.",
            binary_name()
        ),
    )
    .with_metadata(json!({
        "package": platform,
        "searched": roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>(),
    }))
    .into_anyhow())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_dir::TestDir;

    fn code(err: &anyhow::Error) -> String {
        RivetError::extract(err).qualified_code()
    }

    #[test]
    fn explicit_path_wins_and_must_exist() {
        let dir = TestDir::new("explicit");
        let bin = dir.file("bin/rivet-engine");
        let env_path = bin.display().to_string();
        let env = move |k: &str| (k == "RIVET_ENGINE_BINARY").then(|| env_path.clone());

        let config = EngineOptions { engine_binary_path: Some(bin.clone()), ..Default::default() };
        assert_eq!(explicit_binary(&config, &env).unwrap(), Some(bin.clone()));

        // The npm override alone is honoured.
        assert_eq!(explicit_binary(&EngineOptions::default(), &env).unwrap(), Some(bin));

        let missing = EngineOptions { engine_binary_path: Some(dir.path.join("nope")), ..Default::default() };
        let err = explicit_binary(&missing, &env).unwrap_err();
        assert_eq!(code(&err), "engine.binary_not_found");
        assert!(err.to_string().contains("EngineOptions.engine_binary_path"));
    }

    #[test]
    fn env_binary_path_precedes_npm_override() {
        let dir = TestDir::new("envorder");
        let a = dir.file("a/rivet-engine");
        let (a2, b) = (a.display().to_string(), dir.path.join("missing").display().to_string());
        let env = move |k: &str| match k {
            "RIVET_ENGINE_BINARY_PATH" => Some(a2.clone()),
            "RIVET_ENGINE_BINARY" => Some(b.clone()),
            _ => None,
        };
        assert_eq!(explicit_binary(&EngineOptions::default(), &env).unwrap(), Some(a));
    }

    #[test]
    fn finds_npm_package_in_an_ancestor() {
        let Some(platform) = npm_platform_package() else {
            return;
        };
        let dir = TestDir::new("npm");
        let bin = dir.file(&format!("node_modules/{platform}/{}", binary_name()));
        let nested = dir.path.join("packages/app/src");
        std::fs::create_dir_all(&nested).unwrap();
        let roots: Vec<PathBuf> = nested.ancestors().map(Path::to_path_buf).collect();
        assert_eq!(find_npm_binary(&roots).unwrap(), bin);

        // A dev binary next to the meta package is preferred, like getEnginePath().
        let dev = dir.file(&format!("node_modules/@rivetkit/engine-cli/{}", binary_name()));
        assert_eq!(find_npm_binary(&roots).unwrap(), dev);
    }

    #[test]
    fn missing_everywhere_tells_the_user_what_to_do() {
        let dir = TestDir::new("none");
        let err = find_npm_binary(std::slice::from_ref(&dir.path)).unwrap_err();
        if npm_platform_package().is_some() {
            assert_eq!(code(&err), "engine.binary_not_found");
            assert!(err.to_string().contains("npm install @rivetkit/engine-cli"));
            assert!(err.to_string().contains("RIVET_ENGINE_BINARY"));
        } else {
            assert_eq!(code(&err), "engine.binary_unavailable");
        }
    }
}
