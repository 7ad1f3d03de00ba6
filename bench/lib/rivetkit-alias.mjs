// Runs the comparison's RivetKit app on an addon the way an application
// would install it: under the reference's package name, as an npm alias
// (`"@rivetkit/rivetkit-napi": "npm:rivetkit-native@…"`) does, with the
// rivetkit of a given version (bench/lib/stacks.mjs).
//
// bench/.alias/<version>-<napi>/ (ignored by git) holds
//   node_modules/rivetkit                 that version's rivetkit files (hard
//                                         links, or copies where links fail)
//   node_modules/@rivetkit/rivetkit-napi  a symlink to the addon: this
//                                         package (or the directory of
//                                         BENCH_ADDON) for "ours", the
//                                         reference napi of that version
//                                         for "reference"
//   node_modules/<every other package>    rivetkit 3.0's install only:
//                                         symlinks to the packages next to it
//                                         in examples/rivetkit-app-3
//   apps/<app>.mjs                        a copy of the app
// so that the app's `import "rivetkit"` finds that rivetkit, whose
// `import("@rivetkit/rivetkit-napi")` finds the addon; rivetkit's own
// dependencies resolve to those of its install (2.3.19: further up, in this
// package's node_modules, as for the reference; 3.0.0: the symlinks, which
// Node follows to their real place). Nothing is hooked. rivetkit 2.3.19 on
// its reference napi needs none of this: the app runs where it is, on the
// root's rivetkit and @rivetkit/rivetkit-napi.
//
// Each directory is rebuilt (beside it, then renamed into place) when what
// it points at changed (versions.txt), else reused; the app copy is written
// atomically, so bench scripts running at the same time do not trip on it.
//
// Why not the resolve hook of ./use-rivetkit-native.mjs: Node 20's
// `module.register()` hooks run on a loader thread, and every later import
// of the process goes through it. That cost the host 200-400 ms of start-up
// on 2 cores (all of rivetkit's modules load after it), which no real
// install pays and which the reference's host did not pay either.

import {
	copyFileSync,
	mkdirSync,
	readdirSync,
	readFileSync,
	realpathSync,
	renameSync,
	rmSync,
	symlinkSync,
	writeFileSync,
} from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { buildStamped, linkTree } from "../../examples/rivetkit-app-3/share.mjs";

import { LAYOUTS } from "./stacks.mjs";

const benchDir = fileURLToPath(new URL("..", import.meta.url));
const packageDir = fileURLToPath(new URL("../..", import.meta.url));
const aliasRoot = join(benchDir, ".alias");

/** A symlink at `at` to directory `target` (relative). */
const linkDir = (target, at) => symlinkSync(relative(dirname(at), target) || ".", at, "dir");

/**
 * Symlinks at `modules` to every package of `depsDir` (a node_modules)
 * except rivetkit and @rivetkit/rivetkit-napi, scoped ones one by one.
 */
function linkDependencies(depsDir, modules) {
	for (const entry of readdirSync(depsDir, { withFileTypes: true })) {
		if (entry.name.startsWith(".") || entry.name === "rivetkit") continue;
		const source = join(depsDir, entry.name);
		if (entry.name.startsWith("@")) {
			mkdirSync(join(modules, entry.name), { recursive: true });
			for (const scoped of readdirSync(source)) {
				if (entry.name === "@rivetkit" && scoped === "rivetkit-napi") continue;
				linkDir(join(source, scoped), join(modules, entry.name, scoped));
			}
		} else linkDir(source, join(modules, entry.name));
	}
}

const versionAt = (dir) => JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;

/** The addon directory of `napi` ("ours" or "reference") for `rivetkit`. */
function addonDir(rivetkit, napi) {
	if (napi === "reference") return LAYOUTS[rivetkit].referenceNapiDir;
	return process.env.BENCH_ADDON ? dirname(resolve(process.env.BENCH_ADDON)) : packageDir;
}

/** bench/.alias/<rivetkit>-<napi>/, (re)built if what it points at changed. */
function aliasDir(rivetkit, napi) {
	const layout = LAYOUTS[rivetkit];
	const dir = join(aliasRoot, `${rivetkit}-${napi}`);
	const addon = realpathSync(addonDir(rivetkit, napi));
	const stamp = `rivetkit ${versionAt(layout.rivetkitDir)} at ${realpathSync(layout.rivetkitDir)}\naddon ${addon}\n`;
	// Another bench process may be building it too.
	buildStamped(dir, stamp, (temp) => {
		// The single alias of earlier versions of this file, in bench/.alias
		// itself: Node's lookup would fall back on it from the directories here.
		for (const old of ["node_modules", "apps"]) rmSync(join(aliasRoot, old), { recursive: true, force: true });
		const modules = join(temp, "node_modules");
		linkTree(layout.rivetkitDir, join(modules, "rivetkit"));
		if (layout.depsDir) linkDependencies(layout.depsDir, modules);
		mkdirSync(join(modules, "@rivetkit"), { recursive: true });
		linkDir(addon, join(modules, "@rivetkit", "rivetkit-napi"));
		mkdirSync(join(temp, "apps"), { recursive: true });
		writeFileSync(join(temp, "package.json"), `${JSON.stringify({ type: "module", private: true }, null, 2)}\n`);
	});
	return dir;
}

/**
 * The path of the copy of `app` (a file of bench/apps/) that runs on
 * rivetkit `rivetkit` ("2.3" or "3") with `napi` ("ours" or "reference");
 * rivetkit 2.3.19 on the reference is `app` itself.
 */
export function aliasedApp(app, { rivetkit = "2.3", napi = "ours" } = {}) {
	if (!LAYOUTS[rivetkit]) throw new Error(`unknown RivetKit version ${rivetkit}`);
	if (rivetkit === "2.3" && napi === "reference") return app;
	const copy = join(aliasDir(rivetkit, napi), "apps", basename(app));
	const temp = `${copy}.${process.pid}.tmp`;
	copyFileSync(app, temp);
	renameSync(temp, copy);
	return copy;
}
