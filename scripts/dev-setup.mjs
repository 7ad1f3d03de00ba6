#!/usr/bin/env node
// The repository's own setup, run by `npm install` in a clone of it (as the
// `prepare` script): the development build (./build-dev.mjs: the addon,
// the Rust tests and the testing addon from one compile of the dependency
// tree) and the example app's dependencies (examples/rivetkit-app on
// rivetkit 2.3.19 and examples/rivetkit-app-3 on rivetkit 3.0.0, both on
// this checkout). `npm run build` makes the release binary.
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
// dependency that runs in production; the tests then have no testing addon);
// RIVETKIT_NATIVE_BUILD=none builds nothing (the examples' installs only).
//
// The engine-cluster tests (__test__/cluster.test.mjs) need PostgreSQL and
// NATS: on Debian they are installed here from its packages when missing
// (as root, or through `sudo -n`); elsewhere the setup says what to install.
// The engine 3.0 cluster test (__test__/cluster-3.test.mjs) needs an
// S3-compatible object store: `moto_server`, from PyPI's `moto[server]`
// (pinned, MOTO_VERSION), installed with pip when it is not on PATH.

import { spawn, spawnSync } from "node:child_process";
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

/** The `moto[server]` version the setup installs (the one measured in docs/deploy.md). */
const MOTO_VERSION = "5.2.1";

/**
 * `moto_server` for the engine 3.0 cluster: nothing to do when it is on
 * PATH (one `command -v`); else `pip install moto[server]==MOTO_VERSION`
 * (`--user` unless root or in a virtualenv), with Python's pip.
 */
function objectStore() {
	const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
	if (has("moto_server")) {
		console.error("rivetkit-native: moto_server (the engine 3.0 cluster's object store) is installed");
		return;
	}
	const python = ["python3", "python"].find(
		(py) => has(py) && spawnSync(py, ["-m", "pip", "--version"], { stdio: "ignore" }).status === 0,
	);
	const spec = `moto[server]==${MOTO_VERSION}`;
	if (!python) {
		console.error(
			`rivetkit-native: the engine 3.0 cluster test needs moto_server and there is no Python with pip here; install it with: pip install '${spec}'`,
		);
		return;
	}
	const user = process.getuid?.() !== 0 && !process.env.VIRTUAL_ENV ? ["--user"] : [];
	const started = Date.now();
	console.error(`rivetkit-native: installing ${spec} with ${python} -m pip for the engine 3.0 cluster test`);
	const res = spawnSync(python, ["-m", "pip", "install", "--quiet", ...user, spec], { stdio: "inherit" });
	if (res.status !== 0) {
		// A system Python that refuses pip (PEP 668, Debian's own python3):
		// the rest of the setup goes on, and the test says what is missing.
		console.error(
			`rivetkit-native: installing ${spec} failed (pip exit ${res.status}); the engine 3.0 cluster test needs moto_server on PATH: install it in a virtualenv or with pipx (pipx install '${spec}')`,
		);
		return;
	}
	if (!has("moto_server")) {
		console.error(
			`rivetkit-native: ${spec} installed in ${((Date.now() - started) / 1000).toFixed(0)} s, but moto_server is not on PATH: add pip's script directory (for --user, ~/.local/bin) to PATH`,
		);
		return;
	}
	console.error(`rivetkit-native: ${spec} installed in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

clusterPackages();
objectStore();

if (process.env.RIVETKIT_NATIVE_BUILD === "none")
	console.error("rivetkit-native: no build (RIVETKIT_NATIVE_BUILD=none)");
else if (process.env.RIVETKIT_NATIVE_BUILD === "release")
	run(process.execPath, [join(root, "scripts/build.mjs"), "--release"], "the release build");
else run(process.execPath, [join(root, "scripts/build-dev.mjs")], "the development build");

// The example app's two installs, side by side (each mostly waits on
// npm's cache): examples/rivetkit-app (rivetkit 2.3.19) and
// examples/rivetkit-app-3 (rivetkit 3.0.0), whose src/ and test/ are
// copies of the first's (examples/rivetkit-app-3/share.mjs).
const examples = ["examples/rivetkit-app", "examples/rivetkit-app-3"].filter((dir) =>
	existsSync(join(root, dir, "package.json")),
);
if (existsSync(join(root, "examples/rivetkit-app-3/share.mjs"))) {
	const { shareSources } = await import("../examples/rivetkit-app-3/share.mjs");
	shareSources();
}
const npm = process.env.npm_execpath;
const installs = examples.map((dir) => {
	const npmArgs = ["install", "--prefix", join(root, dir), "--no-audit", "--no-fund", "--ignore-scripts"];
	const [file, args] = npm?.endsWith(".js") ? [process.execPath, [npm, ...npmArgs]] : ["npm", npmArgs];
	const started = Date.now();
	return new Promise((resolve) => {
		const child = spawn(file, args, {
			cwd: root,
			stdio: ["ignore", "pipe", "pipe"],
			shell: process.platform === "win32",
		});
		let out = "";
		child.stdout.on("data", (d) => (out += d));
		child.stderr.on("data", (d) => (out += d));
		child.on("close", (code) => {
			const seconds = ((Date.now() - started) / 1000).toFixed(0);
			if (code === 0) console.error(`rivetkit-native: ${dir}'s npm install took ${seconds} s`);
			else console.error(`${out}\nrivetkit-native: ${dir}'s npm install failed (exit ${code})`);
			resolve(code === 0);
		});
	});
});
if (!(await Promise.all(installs)).every(Boolean)) process.exit(1);
