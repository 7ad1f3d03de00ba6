// Puts napi-rs' prebuilt GCC toolchain for a Linux glibc target where
// `napi build --use-napi-cross` looks for it
// (~/.napi-rs/cross-toolchain/<version of @napi-rs/cross-toolchain>/<triple>).
//
// The CLI would fetch `@napi-rs/cross-toolchain-<host>-target-<arch>` at
// exactly the version of `@napi-rs/cross-toolchain`, but those packages are
// not released in step (x64-target-x86_64 exists as 1.0.0 only,
// x64-target-aarch64 as 1.0.3, neither as 1.0.5): this takes the newest
// published version of the target's package instead, the same way (npm
// pack, then its .tar.xz). Everything comes from npm.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";

const ARCH = { "x86_64-unknown-linux-gnu": "x86_64", "aarch64-unknown-linux-gnu": "aarch64" };

function npm(args, cwd) {
	const cli = process.env.npm_execpath;
	const [file, argv] = cli && /\.c?js$/.test(cli) ? [process.execPath, [cli, ...args]] : ["npm", args];
	return execFileSync(file, argv, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
}

export function ensureCrossToolchain(triple, { root }) {
	const fromCli = createRequire(createRequire(join(root, "package.json")).resolve("@napi-rs/cli/package.json"));
	const toolchainManifest = fromCli.resolve("@napi-rs/cross-toolchain/package.json");
	const { version } = JSON.parse(readFileSync(toolchainManifest, "utf8"));
	const dest = join(homedir(), ".napi-rs", "cross-toolchain", version, triple);
	if (existsSync(join(dest, "package.json"))) return dest;

	const pkg = `@napi-rs/cross-toolchain-${process.arch}-target-${ARCH[triple]}`;
	const latest = npm(["view", pkg, "version"], root);
	console.error(`fetching ${pkg}@${latest} (napi-rs' GCC toolchain with a glibc 2.17 sysroot) into ${dest}`);
	const tmp = mkdtempSync(join(tmpdir(), "napi-cross-"));
	try {
		npm(["pack", `${pkg}@${latest}`, "--pack-destination", tmp, "--loglevel=error"], tmp);
		const fromToolchain = createRequire(toolchainManifest);
		const { Archive } = fromToolchain("@napi-rs/tar");
		const { xz } = fromToolchain("@napi-rs/lzma");
		const tgz = readdirSync(tmp).find((f) => f.endsWith(".tgz"));
		new Archive(gunzipSync(readFileSync(join(tmp, tgz)))).unpack(join(tmp, "pkg"));
		const xzFile = join(tmp, "pkg", "package", `${triple}.tar.xz`);
		mkdirSync(dest, { recursive: true });
		new Archive(xz.decompressSync(readFileSync(xzFile))).unpack(dest);
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
	return dest;
}

export const CROSS_TARGETS = Object.keys(ARCH);
