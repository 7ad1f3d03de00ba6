#!/usr/bin/env node
// The repository's own setup, run by `npm install` in a clone of it (as the
// `prepare` script): the development build (./build-dev.mjs: the addon,
// the Rust tests and the testing addon from one compile of the dependency
// tree) and the example app's dependencies (examples/rivetkit-app, which
// uses this checkout). `npm run build` makes the release binary.
//
// npm never runs `prepare` when the package is installed from the registry:
// a RivetKit app that depends on rivetkit-native gets the prebuilt binary
// from its platform package and runs no script of ours. The packed and
// published package.json has no `prepare` at all (`prepack` strips it,
// ./pack-manifest.mjs), so `npm pack` and `npm publish` do not run it and
// npm lists no install script of ours to consumers; it returns if that step
// is skipped (a release is packed from binaries built by the release
// workflow, and the example is no part of the package). npm runs it for git
// dependencies (which then build from source, so they need a Rust
// toolchain). RIVETKIT_NATIVE_BUILD=release
// makes the release build instead of the development one (for a git
// dependency that runs in production; the tests then have no testing addon).
//
// The engine-cluster tests (__test__/cluster.test.mjs) need PostgreSQL and
// NATS: on Debian they are installed here from its packages when missing
// (as root, or through `sudo -n`); elsewhere the setup says what to install.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const command = process.env.npm_command;

if (command === "pack" || command === "publish") {
	console.error(`rivetkit-native: prepare does nothing for npm ${command}`);
	process.exit(0);
}

function run(file, args, what) {
	const started = Date.now();
	const res = spawnSync(file, args, { cwd: root, stdio: "inherit", shell: process.platform === "win32" });
	if (res.status !== 0) {
		console.error(`rivetkit-native: ${what} failed`);
		process.exit(res.status ?? 1);
	}
	console.error(`rivetkit-native: ${what} took ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** Debian's packages for the engine cluster: `postgresql`, `nats-server`. */
function clusterPackages() {
	if (process.platform !== "linux") return;
	const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
	const pgInstalled = existsSync("/usr/lib/postgresql") || has("initdb");
	const missing = [...(pgInstalled ? [] : ["postgresql"]), ...(has("nats-server") ? [] : ["nats-server"])];
	if (missing.length === 0) return;
	const root = process.getuid?.() === 0;
	const sudo = !root && has("sudo") && spawnSync("sudo", ["-n", "true"], { stdio: "ignore" }).status === 0;
	if (!has("apt-get") || (!root && !sudo)) {
		console.error(
			`rivetkit-native: the engine-cluster tests need ${missing.join(" and ")}; install them (on Debian: apt-get install ${missing.join(" ")})`,
		);
		return;
	}
	const apt = (args) =>
		root
			? spawnSync("apt-get", args, { stdio: "inherit" })
			: spawnSync("sudo", ["-n", "apt-get", ...args], { stdio: "inherit" });
	const started = Date.now();
	console.error(
		`rivetkit-native: installing ${missing.join(" and ")} from Debian's packages for the engine-cluster tests`,
	);
	process.env.DEBIAN_FRONTEND = "noninteractive";
	let res = apt(["install", "-y", "-q", "--no-install-recommends", ...missing]);
	if (res.status !== 0) {
		// A machine whose package lists are stale or empty.
		apt(["update", "-q"]);
		res = apt(["install", "-y", "-q", "--no-install-recommends", ...missing]);
	}
	if (res.status !== 0) {
		console.error(`rivetkit-native: installing ${missing.join(" and ")} failed (apt-get exit ${res.status})`);
		process.exit(1);
	}
	console.error(
		`rivetkit-native: ${missing.join(" and ")} installed in ${((Date.now() - started) / 1000).toFixed(0)} s`,
	);
}

clusterPackages();

if (process.env.RIVETKIT_NATIVE_BUILD === "release")
	run(process.execPath, [join(root, "scripts/build.mjs"), "--release"], "the release build");
else run(process.execPath, [join(root, "scripts/build-dev.mjs")], "the development build");

const example = join(root, "examples/rivetkit-app");
if (existsSync(join(example, "package.json"))) {
	const npm = process.env.npm_execpath;
	const npmArgs = ["install", "--prefix", example, "--no-audit", "--no-fund", "--ignore-scripts"];
	if (npm?.endsWith(".js")) run(process.execPath, [npm, ...npmArgs], "the example app's npm install");
	else run("npm", npmArgs, "the example app's npm install");
}
