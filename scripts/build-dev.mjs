#!/usr/bin/env node
// `npm run build:dev` (and `npm install` in a clone of the repository): the
// development build, one compile of the dependency tree for everything a
// clone needs (docs/testing.md, "Stages"):
//
// 1. `cargo build --workspace --all-targets --features rivetkit-native/testing`:
//    every Rust test binary, and the testing addon
//    (target/testing/rivetkit-native.node, with `__testCallCallback`);
// 2. the same without the feature: only the addon crate compiles again,
//    into the addon the package loads (`rivetkit-native.<platform>.node` in
//    the root and in npm/<platform>/), symbols stripped.
//
// With clippy-driver installed our crates are linted as they compile
// (./clippy-env.mjs); `npm test`'s lint stage runs the same build again,
// which compiles nothing and replays cargo's cached diagnostics. Same
// arguments, same environment: anything else would compile our crates
// anew.
//
// The shipped binaries are release builds (`npm run build`: fat LTO,
// glibc 2.17; the release workflow). `npm run bench` builds one first.
//
//   node scripts/build-dev.mjs [--lint]   --lint: fail on any warning in our crates

import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { clippyDriver, devBuildEnv } from "./clippy-env.mjs";
import { BINARY_NAME, hostPlatform } from "./platform.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cargo = process.env.CARGO || "cargo";

/** The cargo arguments of the two builds (the lint stage repeats both). */
const DEV_BUILDS = [
	["build", "--workspace", "--all-targets", "--features", "rivetkit-native/testing"],
	["build", "--workspace", "--all-targets"],
];

const library = {
	linux: "librivetkit_native.so",
	darwin: "librivetkit_native.dylib",
	win32: "rivetkit_native.dll",
}[process.platform];

/** Runs one cargo build; with `json`, returns our crates' warnings and errors (rendered). */
function cargoBuild(args, { json }) {
	const env = devBuildEnv(); // lints warn here; the lint stage fails on any (below)
	const res = spawnSync(cargo, json ? [...args, "--message-format=json-diagnostic-rendered-ansi"] : args, {
		cwd: root,
		stdio: json ? ["ignore", "pipe", "inherit"] : "inherit",
		env,
		encoding: "utf8",
		maxBuffer: 256 * 1024 * 1024,
	});
	const diagnostics = [];
	for (const line of json ? res.stdout.split("\n") : []) {
		if (!line.startsWith("{")) continue;
		const msg = JSON.parse(line);
		const level = msg.message?.level;
		// Our crates are path packages; a dependency's warnings are not ours to fix.
		if (
			msg.reason === "compiler-message" &&
			(level === "warning" || level === "error") &&
			msg.package_id?.startsWith("path+")
		) {
			diagnostics.push(msg.message.rendered);
		}
	}
	return { ok: res.status === 0, diagnostics };
}

function copyAddon(to) {
	mkdirSync(dirname(to), { recursive: true });
	copyFileSync(join(root, "target", "debug", library), to);
}

/** The package's own copy: stripped (109 MB → 41 MB here), when `strip` is there. */
function installAddon() {
	const platform = hostPlatform();
	const file = `${BINARY_NAME}.${platform}.node`;
	const built = join(root, "target", "debug", library);
	const rootCopy = join(root, file);
	const stripped = process.platform === "linux" && spawnSync("strip", ["-o", rootCopy, built]).status === 0;
	if (!stripped) copyFileSync(built, rootCopy);
	const packageDir = join(root, "npm", platform);
	if (existsSync(join(packageDir, "package.json"))) copyFileSync(rootCopy, join(packageDir, file));
	writeFileSync(join(root, "target", "addon-build.json"), `${JSON.stringify({ profile: "debug", file })}\n`);
	return file;
}

function main() {
	if (!library) throw new Error(`no cdylib name known for ${process.platform}`);
	const lint = process.argv.includes("--lint");
	const started = Date.now();
	const diagnostics = [];
	const build = (args) => {
		const res = cargoBuild(args, { json: lint });
		diagnostics.push(...res.diagnostics);
		if (!res.ok) {
			for (const d of res.diagnostics) process.stderr.write(d);
			process.exit(1);
		}
	};
	build(DEV_BUILDS[0]);
	copyAddon(join(root, "target", "testing", "rivetkit-native.node"));
	console.error("built target/testing/rivetkit-native.node");
	build(DEV_BUILDS[1]);
	const file = installAddon();
	console.error(
		`built ${file} (debug; copied into npm/${hostPlatform()}/) in ${((Date.now() - started) / 1000).toFixed(0)} s`,
	);
	if (lint) {
		const unique = [...new Set(diagnostics)];
		for (const d of unique) process.stderr.write(d);
		if (!clippyDriver()) console.error("no clippy-driver: compiler warnings only (run `npm run lint` for clippy)");
		if (unique.length) {
			console.error(`${unique.length} warning(s) in our crates: every warning fails the lint stage`);
			process.exit(1);
		}
		console.error("no warnings in our crates");
	}
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
