#!/usr/bin/env node
// `npm test`: every check, in order, stopping at the first that fails, with
// the time of each stage at the end (docs/testing.md has what each does).

import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { clippyDriver, devBuildEnv } from "./clippy-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

// The lint stage is the development build again (./build-dev.mjs): after
// `npm install` it compiles nothing and replays cargo's cached diagnostics,
// clippy's among them when clippy-driver is installed; any warning in our
// crates fails it.
const driver = clippyDriver();

const stages = [
	["fmt", "cargo", ["fmt", "--all", "--", "--check"]],
	// The JavaScript's formatter and linter (biome.json; `npm run fmt:js` fixes).
	[
		"JS format and lint",
		process.execPath,
		[join(root, "node_modules/@biomejs/biome/bin/biome"), "check", "--error-on-warnings", "."],
	],
	...(driver ? [] : [["clippy", npm, ["run", "lint"]]]),
	[
		driver ? "development build, clippy" : "development build",
		process.execPath,
		[join(root, "scripts/build-dev.mjs"), "--lint"],
	],
	[
		"Rust tests",
		"cargo",
		["test", "--workspace", "--features", "rivetkit-native/testing"],
		devBuildEnv(process.env, driver),
	],
	["JS tests", npm, ["run", "test:js"]],
];

const times = [];
const report = () => {
	console.log("\nnpm test stages:");
	for (const [name, seconds, ok] of times)
		console.log(`  ${ok ? "ok  " : "FAIL"} ${name.padEnd(48)} ${seconds.toFixed(0).padStart(4)} s`);
};
for (const [name, cmd, args, env = process.env] of stages) {
	const started = Date.now();
	console.log(`\n== ${name}: ${cmd} ${args.join(" ")}`);
	const res = spawnSync(cmd, args, { cwd: root, stdio: "inherit", env });
	const ok = res.status === 0;
	times.push([name, (Date.now() - started) / 1000, ok]);
	if (!ok) {
		report();
		process.exit(res.status ?? 1);
	}
}
report();
