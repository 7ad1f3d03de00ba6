// `node --import ./bench/lib/use-rivetkit-native.mjs app.mjs`: runs an
// unmodified RivetKit app on rivetkit-native instead of
// @rivetkit/rivetkit-napi. It registers an ESM resolve hook that answers
// the specifier "@rivetkit/rivetkit-napi" with this package's index.js (or
// with BENCH_ADDON, the index.js of another build). rivetkit loads its
// addon with `import(["@rivetkit", "rivetkit-napi"].join("/"))`, a dynamic
// import, which goes through these hooks; nothing else changes.

import { register } from "node:module";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const target = process.env.BENCH_ADDON
	? pathToFileURL(resolve(process.env.BENCH_ADDON)).href
	: new URL("../../index.js", import.meta.url).href;

const hook = `
export async function resolve(specifier, context, next) {
	if (specifier === "@rivetkit/rivetkit-napi") return { url: ${JSON.stringify(target)}, format: "commonjs", shortCircuit: true };
	return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hook)}`);
