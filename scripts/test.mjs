#!/usr/bin/env node
// `npm test`: every check, in order, stopping at the first that fails, with
// the time of each stage at the end (docs/testing.md has what each does).

import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

// Clippy runs inside the debug build rather than as its own `cargo clippy`:
// clippy-driver compiles the workspace's own crates (and lints them, every
// warning an error) while the dependencies are built once, for the tests
// and for the lints alike. `npm run lint` is the same check on its own.
function clippyDriver() {
	const res = spawnSync("rustup", ["which", "clippy-driver"], { encoding: "utf8" });
	if (res.status === 0 && res.stdout.trim()) return res.stdout.trim();
	const onPath = spawnSync("clippy-driver", ["--version"], { encoding: "utf8" });
	return onPath.status === 0 ? "clippy-driver" : null;
}
const driver = clippyDriver();
const clippyEnv = driver
	? { RUSTC_WORKSPACE_WRAPPER: driver, CLIPPY_ARGS: ["-D", "warnings"].join("__CLIPPY_HACKERY__") + "__CLIPPY_HACKERY__" }
	: {};

const stages = [
	["fmt", "cargo", ["fmt", "--all", "--", "--check"]],
	...(driver ? [] : [["clippy", npm, ["run", "lint"]]]),
	[driver ? "debug build with clippy (tests, testing addon)" : "debug build (tests, testing addon)", npm, ["run", "build:testing"], clippyEnv],
	["Rust tests", "cargo", ["test", "--workspace", "--features", "rivetkit-native/testing"], clippyEnv],
	["glibc check", process.execPath, [join(root, "scripts/check-glibc.mjs")]],
	["JS tests", npm, ["run", "test:js"]],
];

const times = [];
const report = () => {
	console.log("\nnpm test stages:");
	for (const [name, seconds, ok] of times) console.log(`  ${ok ? "ok  " : "FAIL"} ${name.padEnd(48)} ${seconds.toFixed(0).padStart(4)} s`);
};
for (const [name, cmd, args, env = {}] of stages) {
	const started = Date.now();
	console.log(`\n== ${name}: ${cmd} ${args.join(" ")}`);
	const res = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } });
	const ok = res.status === 0;
	times.push([name, (Date.now() - started) / 1000, ok]);
	if (!ok) {
		report();
		process.exit(res.status ?? 1);
	}
}
report();
