// The sources of this app are those of ../rivetkit-app (its `src/` and
// `test/`), copied here: `shareSources()` brings the copies up to date.
// Copies, not links: Node resolves a module's `import "rivetkit"` from the
// module's real location, so a linked file would load ../rivetkit-app's
// rivetkit 2.3.19. The copies are ignored by git; the setup
// (scripts/dev-setup.mjs) and every start of this app by the tests
// (__test__/helpers/app.mjs) call `shareSources()`.
//
// `referenceDir()` builds `.reference/` here: the same app on the official
// `@rivetkit/rivetkit-napi@3.0.0` (the root's devDependency
// `rivetkit-napi-3`) instead of rivetkit-native, for comparisons. It holds
// a hard-linked copy of this app's rivetkit (whose
// `import("@rivetkit/rivetkit-napi")` then finds the symlink next to it),
// the symlink, and the shared sources; rivetkit's other dependencies
// resolve one level up, in this app's node_modules.
//
//   node examples/rivetkit-app-3/share.mjs              sync src/ and test/
//   node examples/rivetkit-app-3/share.mjs --reference  and build .reference/

import {
	copyFileSync,
	existsSync,
	linkSync,
	mkdirSync,
	readdirSync,
	readFileSync,
	renameSync,
	rmSync,
	symlinkSync,
	writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

export const appDir = dirname(fileURLToPath(import.meta.url));
export const sourceAppDir = join(appDir, "..", "rivetkit-app");
/** The directories shared with ../rivetkit-app. */
export const SHARED = ["src", "test"];

/** Makes `to` a copy of `from` (only files whose content differs are written, each atomically). */
function syncTree(from, to, written) {
	mkdirSync(to, { recursive: true });
	const names = new Set();
	for (const entry of readdirSync(from, { withFileTypes: true })) {
		names.add(entry.name);
		const source = join(from, entry.name);
		const target = join(to, entry.name);
		if (entry.isDirectory()) {
			syncTree(source, target, written);
			continue;
		}
		if (!entry.isFile()) continue;
		const content = readFileSync(source);
		if (existsSync(target) && readFileSync(target).equals(content)) continue;
		// Apps of other test files may be loading this file right now: never
		// let them see half of it.
		const temp = `${target}.${process.pid}.tmp`;
		writeFileSync(temp, content);
		renameSync(temp, target);
		written.push(relative(appDir, target));
	}
	for (const entry of readdirSync(to, { withFileTypes: true })) {
		if (names.has(entry.name) || entry.name.endsWith(".tmp")) continue;
		rmSync(join(to, entry.name), { recursive: true, force: true });
		written.push(`-${relative(appDir, join(to, entry.name))}`);
	}
}

/** Brings `src/` and `test/` (or those under `dir`) up to date; returns the paths it changed. */
export function shareSources(dir = appDir) {
	const written = [];
	for (const name of SHARED) syncTree(join(sourceAppDir, name), join(dir, name), written);
	return written;
}

/** Copies directory `from` to `to`, hard-linking files where possible. */
export function linkTree(from, to) {
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

/**
 * Makes `dir` with `fill(temp)` unless its `versions.txt` already says
 * `stamp`: built beside it and renamed into place, so that several
 * processes building it at once each end up with a whole one.
 */
export function buildStamped(dir, stamp, fill) {
	const stampFile = join(dir, "versions.txt");
	if (existsSync(stampFile) && readFileSync(stampFile, "utf8") === stamp) return;
	const temp = `${dir}.${process.pid}.tmp`;
	rmSync(temp, { recursive: true, force: true });
	fill(temp);
	writeFileSync(join(temp, "versions.txt"), stamp);
	rmSync(dir, { recursive: true, force: true });
	try {
		renameSync(temp, dir);
	} catch (err) {
		// Another process built it meanwhile.
		rmSync(temp, { recursive: true, force: true });
		if (!existsSync(stampFile)) throw err;
	}
}

/**
 * `.reference/`: this app on the official napi 3.0.0 (see above), built
 * once and reused while this app's rivetkit and the reference napi are the
 * same versions; its shared sources are synced on every call.
 */
export function referenceDir() {
	const dir = join(appDir, ".reference");
	const rivetkit = join(appDir, "node_modules", "rivetkit");
	const napi = join(appDir, "..", "..", "node_modules", "rivetkit-napi-3");
	for (const [path, what] of [
		[rivetkit, "this app's rivetkit (npm install in examples/rivetkit-app-3)"],
		[napi, "the root's devDependency rivetkit-napi-3 (npm install in the repository)"],
	]) {
		if (!existsSync(join(path, "package.json"))) throw new Error(`${path} is missing: ${what}`);
	}
	const version = (path) => JSON.parse(readFileSync(join(path, "package.json"), "utf8")).version;
	const stamp = `rivetkit ${version(rivetkit)}, @rivetkit/rivetkit-napi ${version(napi)}\n`;
	// Another test file may be building it too.
	buildStamped(dir, stamp, (temp) => {
		linkTree(rivetkit, join(temp, "node_modules", "rivetkit"));
		const scope = join(temp, "node_modules", "@rivetkit");
		mkdirSync(scope, { recursive: true });
		symlinkSync(relative(scope, napi), join(scope, "rivetkit-napi"), "dir");
		writeFileSync(join(temp, "package.json"), `${JSON.stringify({ type: "module", private: true }, null, 2)}\n`);
	});
	shareSources(dir);
	return dir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
	const written = shareSources();
	console.log(written.length ? `shared sources updated: ${written.join(", ")}` : "shared sources up to date");
	if (process.argv.includes("--reference")) console.log(`reference app: ${referenceDir()}`);
}
