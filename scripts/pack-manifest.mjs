#!/usr/bin/env node
// Keeps the repository's own install script out of the published package.
//
// `prepare` (./dev-setup.mjs) is how `npm install` in a clone builds the
// addon; a consumer never runs it, but npm 11 still lists it as an install
// script ("npm warn install-scripts ... rivetkit-native (prepare: ...)")
// when our package.json carries it. So, as the `pinst` package does:
//
//   prepack      `strip`: package.json loses its install scripts (prepare,
//                preinstall, install, postinstall), kept in
//                .package.json.prepack; npm then packs it as it is on disk
//                (and runs no `prepare`: it reads the file again after prepack)
//   postpack     `restore`, except under `npm publish`: publish reads
//                package.json again after packing and sends that manifest to
//                the registry, so there it must still be stripped
//   postpublish  `restore`
//
// If npm stops in between (a failed publish), `node scripts/pack-manifest.mjs
// restore` puts package.json back. A git dependency is unaffected: npm runs
// its `prepare` without prepack.

import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Lifecycle scripts that npm runs, or lists, when a consumer installs us. */
export const INSTALL_SCRIPTS = ["preinstall", "install", "postinstall", "prepare"];

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** Strips the install scripts of `dir`/package.json; returns the names removed. */
export function strip(dir = root) {
	const file = join(dir, "package.json");
	const backup = join(dir, ".package.json.prepack");
	const text = readFileSync(file, "utf8");
	const manifest = JSON.parse(text);
	const removed = INSTALL_SCRIPTS.filter((name) => manifest.scripts?.[name] !== undefined);
	// Nothing to strip: already stripped by an earlier run that never
	// restored (its backup, if any, is the one to keep).
	if (removed.length === 0) return removed;
	for (const name of removed) delete manifest.scripts[name];
	writeFileSync(backup, text);
	writeFileSync(file, `${JSON.stringify(manifest, null, 2)}\n`);
	return removed;
}

/** Puts back the package.json that `strip` saved; returns whether there was one. */
export function restore(dir = root) {
	const backup = join(dir, ".package.json.prepack");
	if (!existsSync(backup)) return false;
	renameSync(backup, join(dir, "package.json"));
	return true;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
	const [command] = process.argv.slice(2);
	const event = process.env.npm_lifecycle_event;
	if (command === "strip") {
		const removed = strip();
		if (removed.length)
			console.error(`rivetkit-native: packing without ${removed.join(", ")} (package.json is put back after packing)`);
	} else if (command === "restore") {
		if (event === "postpack" && process.env.npm_command === "publish") process.exit(0); // postpublish restores
		restore();
	} else {
		console.error("usage: node scripts/pack-manifest.mjs strip|restore");
		process.exit(2);
	}
}
