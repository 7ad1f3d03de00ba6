#!/usr/bin/env node
// Makes the generated loader (`index.js`, written by `napi build --platform`
// on every build) throw ../load-error.js's error when no binary loads: it
// names the platform package, the detected platform, the reason and the
// command that fixes it, where the generated text blames an npm bug.
//
// ./build.mjs runs it after each build; run by hand it patches index.js in
// place (`node scripts/loader-patch.mjs [file]`). It is idempotent, and it
// fails when the generated text it hooks into is not found, so that a new
// @napi-rs/cli cannot drop the message without anyone noticing.

import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const MARKER = "// rivetkit-native: load-error.js";

/** The generated failure block (its start) and the chain helper it uses. */
const FAILURE_BLOCK = "\nif (!nativeBinding) {\n  if (loadErrors.length > 0) {\n";
const CHAIN_HELPER = "function createLoadErrorChain(errors) {";

const HOOK = `
${MARKER} (added by scripts/loader-patch.mjs after \`napi build\`):
// the package, platform, reason and fix, in place of the message below.
if (!nativeBinding) {
  throw require('./load-error.js').bindingLoadError(loadErrors, createLoadErrorChain(loadErrors))
}
`;

/** Returns the patched text of a generated loader; throws if it does not fit. */
export function patchLoaderText(text) {
	if (text.includes(MARKER)) return text;
	const count = text.split(FAILURE_BLOCK).length - 1;
	if (count !== 1 || !text.includes(CHAIN_HELPER)) {
		throw new Error(
			`loader-patch: the generated index.js no longer has ${count === 1 ? "createLoadErrorChain()" : `exactly one failure block (found ${count})`}; ` +
				"@napi-rs/cli changed its loader: update scripts/loader-patch.mjs so the load error still names the package and the fix",
		);
	}
	return text.replace(FAILURE_BLOCK, `${HOOK}${FAILURE_BLOCK}`);
}

/** Patches `file` in place; returns whether it changed. */
export function patchLoader(file) {
	const text = readFileSync(file, "utf8");
	const patched = patchLoaderText(text);
	if (patched === text) return false;
	writeFileSync(file, patched);
	return true;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
	const file = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), "..", "index.js"));
	console.error(patchLoader(file) ? `patched ${file}` : `${file} was already patched`);
}
