#!/usr/bin/env node
// `npm run build` / `npm run build:debug`: `napi build --platform` plus the
// given arguments, then ./loader-patch.mjs on the generated index.js (the
// load error that names the platform package and the fix).
//
// A release build for Linux glibc on an x64 or arm64 Linux host links
// against glibc 2.17 with napi-rs' prebuilt GCC toolchain (`--use-napi-cross`,
// fetched once from the npm package `@napi-rs/cross-toolchain-*` into
// ~/.napi-rs by ./cross-toolchain.mjs), so the binary loads on any distribution with glibc 2.17 or
// newer rather than only on the build machine's. The host's own linker is
// used for debug builds (the ones `cargo test` shares its dependencies
// with) and when RIVETKIT_NATIVE_HOST_TOOLCHAIN=1. Then the release binary is
// copied into its platform package, npm/<platform>/, which is what
// `scripts/check-glibc.mjs` and `__test__/packaging.test.mjs` examine.

import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { ensureCrossToolchain } from "./cross-toolchain.mjs";
import { patchLoader } from "./loader-patch.mjs";
import { BINARY_NAME, hostPlatform, isMusl } from "./platform.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const release = args.includes("--release") || args.includes("-r");
const targetArg = args.findIndex((a) => a === "--target" || a === "-t");
const target = targetArg >= 0 ? args[targetArg + 1] : (args.find((a) => a.startsWith("--target="))?.slice(9) ?? null);

const linuxGnuHost = process.platform === "linux" && ["x64", "arm64"].includes(process.arch) && !isMusl();
const linuxGnuTarget = target === null || /^(x86_64|aarch64)-unknown-linux-gnu$/.test(target);
const napiCross =
	release &&
	linuxGnuHost &&
	linuxGnuTarget &&
	process.env.RIVETKIT_NATIVE_HOST_TOOLCHAIN !== "1" &&
	!args.some((a) => a === "--use-napi-cross" || a === "-x" || a === "--cross-compile" || a === "--use-cross");
if (napiCross) args.push("--use-napi-cross");
if (args.includes("--use-napi-cross")) {
	const hostTriple = `${process.arch === "x64" ? "x86_64" : "aarch64"}-unknown-linux-gnu`;
	ensureCrossToolchain(target ?? hostTriple, { root });
}

const require = createRequire(import.meta.url);
const cliPackage = require.resolve("@napi-rs/cli/package.json");
const cliBin = JSON.parse(readFileSync(cliPackage, "utf8")).bin;
const napi = join(dirname(cliPackage), typeof cliBin === "string" ? cliBin : cliBin.napi);

console.error(`> napi build --platform ${args.join(" ")}`);
const run = spawnSync(process.execPath, [napi, "build", "--platform", ...args], { cwd: root, stdio: "inherit" });
if (run.status !== 0) process.exit(run.status ?? 1);
// The generated index.js gets our load error (./loader-patch.mjs); this
// throws, failing the build, if the generated text changed shape.
if (existsSync(join(root, "index.js")) && patchLoader(join(root, "index.js")))
	console.error("patched index.js: load-error.js");

if (target === null) {
	// Which build the root binary is (`npm run bench` wants a release one).
	mkdirSync(join(root, "target"), { recursive: true });
	writeFileSync(
		join(root, "target", "addon-build.json"),
		`${JSON.stringify({ profile: release ? "release" : "debug", file: `${BINARY_NAME}.${hostPlatform()}.node` })}\n`,
	);
}
if (release && target === null) {
	const platform = hostPlatform();
	const file = `${BINARY_NAME}.${platform}.node`;
	const packageDir = join(root, "npm", platform);
	if (existsSync(join(root, file)) && existsSync(join(packageDir, "package.json"))) {
		copyFileSync(join(root, file), join(packageDir, file));
		console.error(`copied ${file} into npm/${platform}/`);
	}
}
