// Runs the comparison's RivetKit app on rivetkit-native the way an
// application would install it: under the reference's package name, as an
// npm alias (`"@rivetkit/rivetkit-napi": "npm:rivetkit-native@…"`) does.
//
// bench/.alias/ (ignored by git) holds
//   node_modules/rivetkit                 the same rivetkit files (hard links,
//                                         or copies where links fail)
//   node_modules/@rivetkit/rivetkit-napi  a symlink to this package (or to
//                                         the directory of BENCH_ADDON)
//   apps/<app>.mjs                        a copy of the app
// so that the app's `import "rivetkit"` finds that rivetkit, whose
// `import("@rivetkit/rivetkit-napi")` finds rivetkit-native; rivetkit's own
// dependencies resolve further up, in this package's node_modules, as for
// the reference. Nothing is hooked.
//
// Why not the resolve hook of ./use-rivetkit-native.mjs: Node 20's
// `module.register()` hooks run on a loader thread, and every later import
// of the process goes through it. That cost the host 200-400 ms of start-up
// on 2 cores (all of rivetkit's modules load after it), which no real
// install pays and which the reference's host did not pay either.

import { copyFileSync, existsSync, linkSync, mkdirSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const benchDir = fileURLToPath(new URL("..", import.meta.url));
const packageDir = fileURLToPath(new URL("../..", import.meta.url));
const aliasDir = join(benchDir, ".alias");

/** Copies directory `from` to `to`, hard-linking files where possible. */
function linkTree(from, to) {
	mkdirSync(to, { recursive: true });
	for (const entry of readdirSync(from, { withFileTypes: true })) {
		const source = join(from, entry.name);
		const target = join(to, entry.name);
		if (entry.isDirectory()) linkTree(source, target);
		else if (entry.isFile()) {
			try {
				linkSync(source, target);
			} catch {
				copyFileSync(source, target);
			}
		}
	}
}

/** The directory of the package.json above `file`. */
function packageRoot(file) {
	let dir = dirname(file);
	while (!existsSync(join(dir, "package.json"))) {
		if (dirname(dir) === dir) throw new Error(`no package.json above ${file}`);
		dir = dirname(dir);
	}
	return dir;
}

let built = null;

/**
 * Builds bench/.alias (once per process) and returns the path of the copy
 * of `app` (a file of bench/apps/) that runs on rivetkit-native.
 */
export function aliasedApp(app) {
	if (!built) {
		rmSync(aliasDir, { recursive: true, force: true });
		const rivetkitDir = packageRoot(createRequire(join(packageDir, "package.json")).resolve("rivetkit"));
		linkTree(rivetkitDir, join(aliasDir, "node_modules", "rivetkit"));
		const addonDir = process.env.BENCH_ADDON ? dirname(resolve(process.env.BENCH_ADDON)) : packageDir;
		const scope = join(aliasDir, "node_modules", "@rivetkit");
		mkdirSync(scope, { recursive: true });
		symlinkSync(relative(scope, addonDir) || ".", join(scope, "rivetkit-napi"), "dir");
		mkdirSync(join(aliasDir, "apps"), { recursive: true });
		built = new Map();
	}
	if (!built.has(app)) {
		const copy = join(aliasDir, "apps", basename(app));
		copyFileSync(app, copy);
		built.set(app, copy);
	}
	return built.get(app);
}
