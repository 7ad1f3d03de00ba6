// The environment that makes a cargo build also run clippy on the
// workspace's own crates: clippy-driver as the workspace's rustc wrapper.
// The development build (./build-dev.mjs) and `cargo test` in `npm test`
// use `devBuildEnv()`, lints at their default level, so the dependencies
// are compiled once for the tests and the lints alike and the lint stage
// replays the cached diagnostics (`npm run lint` is a one-off check,
// `cargo clippy -D warnings`). Without clippy-driver: a plain build.

import { spawnSync } from "node:child_process";

export function clippyDriver() {
	const res = spawnSync("rustup", ["which", "clippy-driver"], { encoding: "utf8" });
	if (res.status === 0 && res.stdout.trim()) return res.stdout.trim();
	const onPath = spawnSync("clippy-driver", ["--version"], { encoding: "utf8" });
	return onPath.status === 0 ? "clippy-driver" : null;
}

/**
 * The whole environment of every development cargo build: clippy-driver as
 * the workspace's wrapper, no CLIPPY_ARGS (clippy-driver tracks it, so a
 * different value would compile our crates again).
 */
export function devBuildEnv(base = process.env, driver = clippyDriver()) {
	const env = { ...base };
	delete env.CLIPPY_ARGS;
	if (driver) env.RUSTC_WORKSPACE_WRAPPER = driver;
	return env;
}
