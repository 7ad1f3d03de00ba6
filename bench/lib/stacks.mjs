// The RivetKit versions the side-by-side parts of the bench (compare.mjs,
// matrix.mjs, sqlite.mjs) run, each against the reference napi of the same
// version and on the engine of that version:
//
//   "3"    rivetkit 3.0.0 (examples/rivetkit-app-3's install) on
//          @rivetkit/rivetkit-napi@3.0.0 (the root's `rivetkit-napi-3`)
//          vs on rivetkit-native, engine 3.0.0 (harness arch "v3")
//   "2.3"  rivetkit 2.3.19 (the root's) on @rivetkit/rivetkit-napi@2.3.19
//          vs on rivetkit-native, engine 2.3.19 (harness arch "v2")
//
// The app is bench/apps/rivetkit-app.mjs on both; bench/lib/rivetkit-alias.mjs
// puts each side's copy of it next to that version's rivetkit with the side's
// addon installed under the reference's name. BENCH_RIVETKIT=3,2.3 (the
// default) picks the versions and their order; "3" or "2.3" runs one.

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { createClient as createClient23 } from "rivetkit/client";

import { appDirs } from "../../__test__/helpers/app.mjs";
import { binaryInfo, enginePath } from "../../__test__/helpers/engine.mjs";

const require = createRequire(import.meta.url);
const rootModules = fileURLToPath(new URL("../../node_modules/", import.meta.url));
/** Matches the `.node` file of the reference napi (either version) / of rivetkit-native. */
const THEIRS_ADDON = /\/rivetkit-napi\.[^/]+\.node$/;
const OURS_ADDON = /\/rivetkit-native\.[^/]+\.node$/;

const versionAt = (dir) => {
	try {
		return JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
	} catch {
		return "?";
	}
};
/** The directory of the package.json above the file `name` resolves to. */
const packageDirOf = (name) => {
	let dir = dirname(require.resolve(name));
	while (versionAt(dir) === "?" && dirname(dir) !== dir) dir = dirname(dir);
	return dir;
};

/** Where each version's rivetkit and reference napi live. */
export const LAYOUTS = Object.freeze({
	3: {
		rivetkitDir: join(appDirs[3], "node_modules", "rivetkit"),
		// rivetkit 3.0.0's other dependencies (and its `ws` peer).
		depsDir: join(appDirs[3], "node_modules"),
		referenceNapiDir: join(rootModules, "rivetkit-napi-3"),
		engineArch: "v3",
	},
	2.3: {
		rivetkitDir: packageDirOf("rivetkit"),
		// The root's node_modules, found from bench/.alias by Node's own lookup.
		depsDir: null,
		referenceNapiDir: join(rootModules, "@rivetkit", "rivetkit-napi"),
		engineArch: "v2",
	},
});

/** The stack keys, in the order they run by default. */
export const STACK_KEYS = Object.freeze(["3", "2.3"]);

/**
 * The stack of `key`: `{key, rivetkit, napi, engineArch, engineVersion,
 * sides, title, createClient}`. `sides` are `{side, label, impl, addon}` (theirs first);
 * `createClient` is that rivetkit version's official client.
 */
export async function loadStack(key) {
	const layout = LAYOUTS[key];
	if (!layout) throw new Error(`unknown RivetKit version ${key}; known: ${STACK_KEYS.join(", ")}`);
	const rivetkit = versionAt(layout.rivetkitDir);
	const napi = versionAt(layout.referenceNapiDir);
	const engineVersion = binaryInfo(enginePath(layout.engineArch)).version;
	const createClient =
		key === "2.3"
			? createClient23
			: (await import(pathToFileURL(join(layout.rivetkitDir, "dist", "tsup", "client", "mod.js")).href)).createClient;
	return {
		key,
		rivetkit,
		napi,
		engineArch: layout.engineArch,
		engineVersion,
		createClient,
		sides: [
			{ side: "theirs", label: `rivetkit-napi ${napi}`, impl: "rivetkit-napi", addon: THEIRS_ADDON },
			{ side: "ours", label: "rivetkit-native", impl: "rivetkit-native", addon: OURS_ADDON },
		],
		title: `RivetKit ${rivetkit} on engine ${engineVersion}: @rivetkit/rivetkit-napi@${napi} vs rivetkit-native`,
	};
}

/** The stack keys of BENCH_RIVETKIT (default "3,2.3"). */
export function stackKeys(value = process.env.BENCH_RIVETKIT ?? STACK_KEYS.join(",")) {
	const keys = value
		.split(",")
		.map((k) => k.trim())
		.filter(Boolean)
		.map((k) => (k === "2" || k === "2.3.19" ? "2.3" : k === "3.0" || k === "3.0.0" ? "3" : k));
	for (const k of keys) if (!LAYOUTS[k]) throw new Error(`BENCH_RIVETKIT: unknown version ${k}; known: 3, 2.3`);
	return [...new Set(keys)];
}
