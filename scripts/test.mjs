#!/usr/bin/env node
// `npm test`: every check, in order, stopping at the first that fails, with
// the time of each stage at the end (docs/testing.md has what each does).

import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

const stages = [
	["lint (fmt, clippy)", npm, ["run", "lint"]],
	["debug build (tests, testing addon)", npm, ["run", "build:testing"]],
	["Rust tests", "cargo", ["test", "--workspace", "--features", "rivetkit-native/testing"]],
	["glibc check", process.execPath, [join(root, "scripts/check-glibc.mjs")]],
	["JS tests", npm, ["run", "test:js"]],
];

const times = [];
const report = () => {
	console.log("\nnpm test stages:");
	for (const [name, seconds, ok] of times) console.log(`  ${ok ? "ok  " : "FAIL"} ${name.padEnd(36)} ${seconds.toFixed(0).padStart(4)} s`);
};
for (const [name, cmd, args] of stages) {
	const started = Date.now();
	console.log(`\n== ${name}: ${cmd} ${args.join(" ")}`);
	const res = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
	const ok = res.status === 0;
	times.push([name, (Date.now() - started) / 1000, ok]);
	if (!ok) {
		report();
		process.exit(res.status ?? 1);
	}
}
report();
