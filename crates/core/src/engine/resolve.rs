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
//! 3. `node_modules` in every ancestor of the directory of the addon itself
//!    (the `.node` file this code is linked into, found with `dladdr` /
//!    `GetModuleHandleExW`), as Node resolves a package from the addon's
//!    location, then of the current directory, then of the executable's
//!    directory. In each: first `@rivetkit/engine-cli/rivet-engine` (a dev
//!    binary next to the meta package, which `getEnginePath()` prefers too),
//!    then `@rivetkit/engine-cli-<platform>/rivet-engine`, then the platform
//!    package nested under the meta package (where npm puts it when the
//!    top level holds another version).
//!
//! Why the addon's location first: `cd /tmp && node /app/main.mjs` must find
//! the engine installed next to the app, like `require()` from the addon
//! would; the current directory is only a last resort.
//!
//! An explicit path (1, 2) that does not exist is an error even if a binary
//! could be found elsewhere: the user asked for that file.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

use super::lookup::{process_env, Env};
use super::options::EngineOptions;
use super::profile::EngineArch;
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
            crate::error_codes::ENGINE_BINARY_NOT_FOUND,
            format!("Engine binary was not found at '{}' (set by {source}).", path.display()),
        )
        .with_metadata(json!({ "path": path.display().to_string(), "source": source }))
        .into_anyhow());
    }
    Ok(Some(path))
}

/// Steps 1-3 against the process environment, without probing for a
/// running engine (useful for a CLI that wants the path itself). Step 3
/// looks for a binary of `config.arch`.
pub fn resolve_engine_binary(config: &EngineOptions) -> Result<PathBuf> {
    match explicit_binary(config, &process_env)? {
        Some(path) => Ok(path),
        None => find_npm_binary_of(&search_roots(), config.arch),
    }
}

/// Ancestors of the addon's directory, then of the current directory, then
/// of the executable's directory.
pub fn search_roots() -> Vec<PathBuf> {
    let starts = [
        module_path().and_then(|file| file.parent().map(Path::to_path_buf)),
        std::env::current_dir().ok(),
        std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)),
    ];
    roots_from(starts.into_iter().flatten())
}

/// Every ancestor of each start directory, in order, without repeats.
pub fn roots_from(starts: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for start in starts {
        for dir in start.ancestors() {
            if !roots.iter().any(|r| r == dir) {
                roots.push(dir.to_path_buf());
            }
        }
    }
    roots
}

/// The file this code was loaded from: the addon's `.node` file in Node (a
/// test executable under `cargo test`). `None` if the OS does not say.
pub fn module_path() -> Option<PathBuf> {
    let path = module_path_of(module_path as *const () as usize)?;
    // A relative name (dlopen of a relative path) is relative to the
    // directory the process started in; `canonicalize` resolves it and any
    // symlink (npm links `file:` dependencies), like Node's own resolution.
    std::fs::canonicalize(&path).ok().or(Some(path))
}

#[cfg(unix)]
fn module_path_of(address: usize) -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: `dladdr` only reads the loader's tables; `info` is plain old
    // data it fills in, and `dli_fname` (when set) points to a
    // NUL-terminated string owned by the loader that lives as long as the
    // module, which contains this very function.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(address as *const libc::c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname).to_bytes();
        (!name.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    }
}

#[cfg(windows)]
fn module_path_of(address: usize) -> Option<PathBuf> {
    use std::ffi::OsString;
    use std::os::windows::ffi::OsStringExt;
    const FROM_ADDRESS: u32 = 0x4;
    const UNCHANGED_REFCOUNT: u32 = 0x2;
    #[link(name = "kernel32")]
    extern "system" {
        fn GetModuleHandleExW(flags: u32, name: *const u16, module: *mut *mut core::ffi::c_void) -> i32;
        fn GetModuleFileNameW(module: *mut core::ffi::c_void, name: *mut u16, size: u32) -> u32;
    }
    // SAFETY: with FROM_ADDRESS the "name" is an address inside the module
    // (this function's); UNCHANGED_REFCOUNT takes no reference to release.
    // The buffer is ours and its length is passed.
    unsafe {
        let mut module = std::ptr::null_mut();
        if GetModuleHandleExW(FROM_ADDRESS | UNCHANGED_REFCOUNT, address as *const u16, &mut module) == 0 {
            return None;
        }
        let mut buffer = vec![0u16; 32 * 1024];
        let len = GetModuleFileNameW(module, buffer.as_mut_ptr(), buffer.len() as u32) as usize;
        (len > 0 && len < buffer.len()).then(|| PathBuf::from(OsString::from_wide(&buffer[..len])))
    }
}

#[cfg(not(any(unix, windows)))]
fn module_path_of(_address: usize) -> Option<PathBuf> {
    None
}

/// Step 3 over `roots`: every installed engine binary, in the order Node
/// would find them. In each root: the dev binary next to the meta package,
/// the platform package at the top, the platform package nested under the
/// meta package; then, for every package one level down that carries its
/// own engine (npm nests `rivetkit@2.3.19`'s `@rivetkit/engine-cli@2.3.19`
/// under it when the top level holds 3.0.0, and the other way round), the
/// same three under that package's `node_modules`.
pub fn npm_binaries(roots: &[PathBuf]) -> Vec<PathBuf> {
    let platform = npm_platform_package().and_then(|p| p.strip_prefix("@rivetkit/"));
    let in_modules = |modules: &Path| -> Vec<PathBuf> {
        let scope = modules.join("@rivetkit");
        let mut found = vec![scope.join("engine-cli").join(binary_name())];
        if let Some(pkg) = platform {
            found.push(scope.join(pkg).join(binary_name()));
            found.push(scope.join("engine-cli/node_modules/@rivetkit").join(pkg).join(binary_name()));
        }
        found
    };
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |path: PathBuf| {
        if path.is_file() && !out.contains(&path) {
            out.push(path);
        }
    };
    for root in roots {
        let modules = root.join("node_modules");
        if !modules.is_dir() {
            continue;
        }
        in_modules(&modules).into_iter().for_each(&mut push);
        for package in packages_in(&modules) {
            in_modules(&package.join("node_modules")).into_iter().for_each(&mut push);
        }
    }
    out
}

/// The package directories directly in a `node_modules` (scoped ones too),
/// sorted, without npm's own dot-folders.
fn packages_in(modules: &Path) -> Vec<PathBuf> {
    let entries = |dir: &Path| -> Vec<PathBuf> {
        let mut list: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|read| read.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        list.sort();
        list
    };
    let mut out = Vec::new();
    for entry in entries(modules) {
        let name = entry.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        if name.starts_with('@') {
            out.extend(entries(&entry));
        } else {
            out.push(entry);
        }
    }
    out
}

/// The first binary of [`npm_binaries`] whose architecture is `arch`
/// (asked with `--runtime-info`). None of that architecture is
/// `engine.wrong_architecture` when others are installed (naming them and
/// the release to install), `engine.binary_not_found` when none is.
pub fn find_npm_binary_of(roots: &[PathBuf], arch: EngineArch) -> Result<PathBuf> {
    let found = npm_binaries(roots);
    let mut others = Vec::new();
    for path in found {
        match EngineArch::of_binary(&path) {
            Some(have) if have == arch => return Ok(path),
            Some(have) => others.push((path, have)),
            None => tracing::debug!(binary = %path.display(), "an engine binary that does not run; skipped"),
        }
    }
    if others.is_empty() {
        return not_found(roots, arch);
    }
    let listed: Vec<String> = others.iter().map(|(p, a)| format!("{} ({})", p.display(), a.label())).collect();
    Err(RivetError::new(
        crate::error_codes::ENGINE_WRONG_ARCHITECTURE,
        format!(
            "This app needs {} but the engine binaries installed here are of another kind: {}. Run \
             `npm install @rivetkit/engine-cli@{}` in your project, or set RIVET_ENGINE_BINARY to a {} binary.",
            arch.label(),
            listed.join(", "),
            arch.npm_release(),
            arch.label()
        ),
    )
    .with_metadata(json!({ "wanted": arch.label(), "found": listed }))
    .into_anyhow())
}

/// Missing everywhere: `engine.binary_not_found` (or, on a platform the
/// engine is not published for, `engine.binary_unavailable`).
fn not_found(roots: &[PathBuf], arch: EngineArch) -> Result<PathBuf> {
    let Some(platform) = npm_platform_package() else {
        return Err(RivetError::new(
            crate::error_codes::ENGINE_BINARY_UNAVAILABLE,
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
        crate::error_codes::ENGINE_BINARY_NOT_FOUND,
        format!(
            "Rivet Engine binary not found: no node_modules/{platform}/{} above this addon's \
             directory or the current directory. Run `npm install @rivetkit/engine-cli@{}` in your project, or set \
             RIVET_ENGINE_BINARY to the path of a rivet-engine binary.",
            binary_name(),
            arch.npm_release()
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

    #[cfg(unix)]
    #[test]
    fn finds_npm_package_in_an_ancestor() {
        let Some(platform) = npm_platform_package() else {
            return;
        };
        let dir = TestDir::new("npm");
        let bin = dir.engine(&format!("node_modules/{platform}/{}", binary_name()), EngineArch::V3);
        let nested = dir.path.join("packages/app/src");
        std::fs::create_dir_all(&nested).unwrap();
        let roots: Vec<PathBuf> = nested.ancestors().map(Path::to_path_buf).collect();
        assert_eq!(find_npm_binary_of(&roots, EngineArch::V3).unwrap(), bin);

        // A dev binary next to the meta package is preferred, like getEnginePath().
        let dev = dir.engine(&format!("node_modules/@rivetkit/engine-cli/{}", binary_name()), EngineArch::V3);
        assert_eq!(find_npm_binary_of(&roots, EngineArch::V3).unwrap(), dev);
    }

    #[cfg(unix)]
    #[test]
    fn roots_walk_up_from_the_addon_before_the_current_directory() {
        let Some(platform) = npm_platform_package() else {
            return;
        };
        // An app installed elsewhere: the addon lives in its node_modules,
        // the process runs from an unrelated directory.
        let dir = TestDir::new("addon");
        let addon_dir = dir.path.join("app/node_modules/rivetkit-native-linux-x64-gnu");
        let cwd = dir.path.join("elsewhere/work");
        std::fs::create_dir_all(&addon_dir).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        let roots = roots_from([addon_dir.clone(), cwd.clone()]);
        assert_eq!(roots[0], addon_dir);
        let cwd_at = roots.iter().position(|r| r == &cwd).unwrap();
        assert!(roots.iter().position(|r| r == &dir.path.join("app")).unwrap() < cwd_at);
        assert_eq!(roots.iter().filter(|r| **r == dir.path).count(), 1, "no repeats");

        assert_eq!(
            code(&find_npm_binary_of(&roots_from([cwd.clone()]), EngineArch::V3).unwrap_err()),
            "engine.binary_not_found"
        );
        let bin = dir.engine(&format!("app/node_modules/{platform}/{}", binary_name()), EngineArch::V3);
        assert_eq!(find_npm_binary_of(&roots, EngineArch::V3).unwrap(), bin);
        // The cwd's own engine comes second.
        let other = dir.engine(&format!("elsewhere/node_modules/{platform}/{}", binary_name()), EngineArch::V3);
        assert_eq!(find_npm_binary_of(&roots, EngineArch::V3).unwrap(), bin);
        assert_eq!(find_npm_binary_of(&roots_from([cwd]), EngineArch::V3).unwrap(), other);
    }

    #[cfg(unix)]
    #[test]
    fn finds_the_platform_package_nested_under_the_meta_package() {
        let Some(platform) = npm_platform_package() else {
            return;
        };
        let dir = TestDir::new("nested");
        let bin = dir.engine(
            &format!("node_modules/@rivetkit/engine-cli/node_modules/{platform}/{}", binary_name()),
            EngineArch::V3,
        );
        assert_eq!(find_npm_binary_of(std::slice::from_ref(&dir.path), EngineArch::V3).unwrap(), bin);
    }

    #[cfg(unix)]
    #[test]
    fn each_app_finds_the_engine_of_its_architecture() {
        let Some(platform) = npm_platform_package() else {
            return;
        };
        // npm's layout with rivetkit-native (engine 3.0 at the top) beside a
        // rivetkit@2.3.19 app, whose own engine-cli 2.3.19 is nested under it.
        let dir = TestDir::new("by-arch");
        let v3 = dir.engine(&format!("node_modules/{platform}/{}", binary_name()), EngineArch::V3);
        let v2 =
            dir.engine(&format!("node_modules/rivetkit/node_modules/{platform}/{}", binary_name()), EngineArch::V2);
        let roots = std::slice::from_ref(&dir.path);
        assert_eq!(npm_binaries(roots), vec![v3.clone(), v2.clone()]);
        assert_eq!(find_npm_binary_of(roots, EngineArch::V3).unwrap(), v3);
        assert_eq!(find_npm_binary_of(roots, EngineArch::V2).unwrap(), v2);

        // Only the other kind installed: said, with the release to install.
        let only2 = TestDir::new("only-v2");
        only2.engine(&format!("node_modules/{platform}/{}", binary_name()), EngineArch::V2);
        let err = find_npm_binary_of(std::slice::from_ref(&only2.path), EngineArch::V3).unwrap_err();
        assert_eq!(code(&err), "engine.wrong_architecture");
        assert!(err.to_string().contains("npm install @rivetkit/engine-cli@3.0.0"), "{err}");
    }

    #[test]
    fn module_path_is_the_file_this_code_runs_from() {
        // Under `cargo test` that is the test executable itself.
        let path = module_path().expect("the loader knows this module");
        assert!(path.is_absolute() && path.is_file(), "{}", path.display());
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(path, exe);
        assert_eq!(search_roots()[0], path.parent().unwrap());
    }

    #[test]
    fn missing_everywhere_tells_the_user_what_to_do() {
        let dir = TestDir::new("none");
        let err = find_npm_binary_of(std::slice::from_ref(&dir.path), EngineArch::V3).unwrap_err();
        if npm_platform_package().is_some() {
            assert_eq!(code(&err), "engine.binary_not_found");
            assert!(err.to_string().contains("npm install @rivetkit/engine-cli"));
            assert!(err.to_string().contains("RIVET_ENGINE_BINARY"));
        } else {
            assert_eq!(code(&err), "engine.binary_unavailable");
        }
    }
}
