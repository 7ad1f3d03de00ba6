#!/usr/bin/env node
// `npm test`: every check, in order, stopping at the first that fails, with
// the time of each stage at the end (docs/testing.md has what each does).

import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { clippyDriver, clippyEnv } from "./clippy-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

// Clippy runs inside the debug build (./clippy-env.mjs).
const driver = clippyDriver();
const withClippy = clippyEnv(driver);

const stages = [
	["fmt", "cargo", ["fmt", "--all", "--", "--check"]],
	...(driver ? [] : [["clippy", npm, ["run", "lint"]]]),
	[driver ? "debug build with clippy (tests, testing addon)" : "debug build (tests, testing addon)", npm, ["run", "build:testing"], withClippy],
	["Rust tests", "cargo", ["test", "--workspace", "--features", "rivetkit-native/testing"], withClippy],
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
