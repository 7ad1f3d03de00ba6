// The environment that makes a cargo build also run clippy on the
// workspace's own crates (every warning an error): clippy-driver as the
// workspace's rustc wrapper. The debug build of `npm test` uses it, so
// the dependencies are compiled once for the tests and the lints alike;
// `npm run lint` is the same check on its own. Empty when no clippy-driver is found.

import { spawnSync } from "node:child_process";

export function clippyDriver() {
	const res = spawnSync("rustup", ["which", "clippy-driver"], { encoding: "utf8" });
	if (res.status === 0 && res.stdout.trim()) return res.stdout.trim();
	const onPath = spawnSync("clippy-driver", ["--version"], { encoding: "utf8" });
	return onPath.status === 0 ? "clippy-driver" : null;
}

export function clippyEnv(driver = clippyDriver()) {
	if (!driver) return {};
	return { RUSTC_WORKSPACE_WRAPPER: driver, CLIPPY_ARGS: `${["-D", "warnings"].join("__CLIPPY_HACKERY__")}__CLIPPY_HACKERY__` };
}
