#!/usr/bin/env node
// The import picture of our Rust code, file by file, and the two rules
// docs/architecture.md sets for it: no file imports itself back through
// other files (no import loop), and an import between top-level modules
// runs down the layer table of that document, never up.
//
// It reads the code as text: every `use` (braces expanded) and every path
// written in the code (`crate::a::b`, `super::c`, `rivetkit_native_core::d`),
// with comments, strings and `#[cfg(test)]` modules left out. A path counts
// as an import of the file that *defines* the name it ends in: `pub use`
// re-exports are followed to that file, and a `pub use` line is itself not
// an import (a folder's facade is not a dependency of its code) unless the
// file's own code uses the name.
//
// `node scripts/layers.mjs` prints the loops and the upward imports;
// __test__/layers.test.mjs asserts there are none.

import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/** The crates we check: their source root and the name other crates use. */
export const CRATES = [
	{ name: "core", dir: "crates/core/src", externName: "rivetkit_native_core" },
	{ name: "addon", dir: "src", externName: null },
];

/** Test-only files: not read as product code. */
export const TEST_FILE = /(^|\/)(tests|proptests|test_server|test_dir|testing)(\.rs|\/)/;

/** Code without comments, string and char literals (their bytes kept as spaces). */
export function stripCode(text) {
	let out = "";
	let i = 0;
	const n = text.length;
	while (i < n) {
		const c = text[i];
		const next = text[i + 1];
		if (c === "/" && next === "/") {
			while (i < n && text[i] !== "\n") i++;
		} else if (c === "/" && next === "*") {
			let depth = 1;
			i += 2;
			while (i < n && depth > 0) {
				if (text[i] === "/" && text[i + 1] === "*") {
					depth++;
					i += 2;
				} else if (text[i] === "*" && text[i + 1] === "/") {
					depth--;
					i += 2;
				} else {
					if (text[i] === "\n") out += "\n";
					i++;
				}
			}
		} else if (c === "r" && /^r#*"/.test(text.slice(i, i + 8)) && !/\w/.test(text[i - 1] ?? "")) {
			const hashes = /^r(#*)"/.exec(text.slice(i))[1];
			const end = `"${hashes}`;
			const stop = text.indexOf(end, i + 2 + hashes.length);
			const lit = text.slice(i, stop < 0 ? n : stop + end.length);
			out += lit.replace(/[^\n]/g, " ");
			i += lit.length;
		} else if (c === '"') {
			let j = i + 1;
			while (j < n && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
			out += text.slice(i, j + 1).replace(/[^\n]/g, " ");
			i = j + 1;
		} else if (c === "'" && /^'(\\.|[^\\'])'/.test(text.slice(i, i + 4))) {
			// A char literal ('"', '\'', 'x'); a lifetime ('a) has no closing quote.
			const len = text[i + 1] === "\\" ? 4 : 3;
			out += " ".repeat(len);
			i += len;
		} else {
			out += c;
			i++;
		}
	}
	return out;
}

/** `code` without the bodies of `#[cfg(test)]` items (a test module, a test-only fn). */
export function stripTestItems(code) {
	let out = code;
	for (;;) {
		const m = /#\[cfg\(test\)\]/.exec(out);
		if (!m) return out;
		let i = m.index + m[0].length;
		// The item ends at its first `;` before any `{`, or at the brace closing its body.
		while (i < out.length && out[i] !== "{" && out[i] !== ";") i++;
		if (out[i] === "{") {
			let depth = 0;
			for (; i < out.length; i++) {
				if (out[i] === "{") depth++;
				else if (out[i] === "}" && --depth === 0) break;
			}
		}
		out = out.slice(0, m.index) + out.slice(i + 1);
	}
}

/** Every `.rs` file of a crate with its module path (`["actor", "task"]`). */
function crateFiles(crate) {
	const base = join(root, crate.dir);
	const files = [];
	const walk = (dir) => {
		for (const entry of readdirSync(dir).sort()) {
			const path = join(dir, entry);
			if (statSync(path).isDirectory()) walk(path);
			else if (entry.endsWith(".rs")) {
				const rel = relative(base, path);
				if (TEST_FILE.test(rel)) continue;
				const parts = rel.replace(/\.rs$/, "").split("/");
				if (parts.at(-1) === "mod" || (parts.length === 1 && parts[0] === "lib")) parts.pop();
				files.push({ crate: crate.name, path: relative(root, path), module: parts });
			}
		}
	};
	walk(base);
	return files;
}

/** Expand a `use` tree (`a::{b, c::{d as e}, f::*}`) into paths of segments. */
export function expandUseTree(tree) {
	const out = [];
	const parse = (s, prefix) => {
		s = s.trim();
		if (!s) return;
		const brace = s.indexOf("{");
		if (brace < 0) {
			const path = s.split(/\s+as\s+/)[0].trim();
			out.push([...prefix, ...path.split("::").filter(Boolean)]);
			return;
		}
		const head = s
			.slice(0, brace)
			.replace(/::\s*$/, "")
			.split("::")
			.map((x) => x.trim())
			.filter(Boolean);
		const inner = s.slice(brace + 1, s.lastIndexOf("}"));
		let depth = 0;
		let start = 0;
		for (let i = 0; i <= inner.length; i++) {
			const ch = inner[i];
			if (ch === "{") depth++;
			else if (ch === "}") depth--;
			else if ((ch === "," && depth === 0) || i === inner.length) {
				parse(inner.slice(start, i), [...prefix, ...head]);
				start = i + 1;
			}
		}
	};
	parse(tree, []);
	return out;
}

/** Read one file: the names it defines, its re-exports, its child modules and its imports. */
function readFile(file) {
	const code = stripTestItems(stripCode(readFileSync(join(root, file.path), "utf8")));
	const defines = new Set();
	for (const m of code.matchAll(
		/\b(?:struct|enum|fn|trait|type|const|static|union|macro_rules!)\s+([A-Za-z_][A-Za-z0-9_]*)/g,
	)) {
		defines.add(m[1]);
	}
	const children = new Set();
	for (const m of code.matchAll(/\bmod\s+([a-z_][a-z0-9_]*)\s*;/g)) children.add(m[1]);
	const reexports = [];
	const uses = [];
	for (const m of code.matchAll(/(^|[;{}\s])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);/g)) {
		const paths = expandUseTree(m[3].replace(/\s+/g, " "));
		const aliases = [...m[3].matchAll(/([A-Za-z0-9_]+)\s+as\s+([A-Za-z0-9_]+)/g)];
		if (m[2]) {
			for (const p of paths) {
				const alias = aliases.find((a) => a[1] === p.at(-1));
				reexports.push({ name: alias ? alias[2] : p.at(-1), path: p });
			}
		} else uses.push(...paths);
	}
	// Paths written in the code itself.
	const body = code.replace(/(^|[;{}\s])(pub(?:\([^)]*\))?\s+)?use\s+[^;]+;/g, "$1");
	// Paths through a child module (`store::load(..)` beside `mod store;`).
	for (const child of children) {
		for (const m of body.matchAll(new RegExp(`(?<![\\w:])${child}((?:::[A-Za-z_][A-Za-z0-9_]*)+)`, "g"))) {
			uses.push([child, ...m[1].split("::").filter(Boolean)]);
		}
	}
	// A re-export the file's own code also uses is an import of it.
	for (const r of reexports) {
		// A use of the name itself: not a field or method (`.name`), not a
		// field declaration (`name: T`), not the `mod name;` it comes from.
		const use = new RegExp(`(?<![.\\w])(?<!\\bmod\\s+)${r.name}\\b(?!\\s*:(?!:))`);
		if (r.name !== "*" && use.test(body)) uses.push(r.path);
	}
	for (const m of body.matchAll(
		/\b((?:crate|super|self|rivetkit_native_core)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)/g,
	)) {
		uses.push(m[1].split("::"));
	}
	return { ...file, defines, children, reexports, uses };
}

/** The whole picture: files, their edges, the loops and the upward imports. */
export function readPicture() {
	const files = CRATES.flatMap((crate) => crateFiles(crate).map(readFile));
	const byModule = new Map(files.map((f) => [`${f.crate}:${f.module.join("::")}`, f]));
	const moduleOf = (crate, segs) => byModule.get(`${crate}:${segs.join("::")}`);

	/** The file defining `segs` (absolute module path then a name), or null if not ours. */
	const resolve = (crate, segs, seen = new Set()) => {
		// The deepest module file that is a prefix of the path.
		let k = segs.length;
		while (k >= 0 && !moduleOf(crate, segs.slice(0, k))) k--;
		if (k < 0) return null;
		const mod = moduleOf(crate, segs.slice(0, k));
		if (k === segs.length) return mod;
		const name = segs[k];
		if (mod.defines.has(name)) return mod;
		const key = `${mod.path}:${name}`;
		if (seen.has(key)) return mod;
		seen.add(key);
		for (const r of mod.reexports) {
			if (r.name === name || r.name === "*") {
				const abs = absolute(mod, r.name === "*" ? [...r.path.slice(0, -1), name] : r.path);
				if (!abs) continue;
				const target = resolve(abs.crate, [...abs.segs, ...segs.slice(k + 1)], seen);
				if (target && (r.name !== "*" || target !== mod)) return target;
			}
		}
		return mod;
	};

	/** A path as written in `file`, made absolute: `{crate, segs}`, or null if external. */
	const absolute = (file, path) => {
		const segs = [...path];
		let crate = file.crate;
		let base;
		if (segs[0] === "crate") {
			base = [];
			segs.shift();
		} else if (segs[0] === "rivetkit_native_core") {
			crate = "core";
			base = [];
			segs.shift();
		} else if (segs[0] === "self" || segs[0] === "super") {
			base = [...file.module];
			while (segs[0] === "self" || segs[0] === "super") {
				if (segs.shift() === "super") base.pop();
			}
		} else if (file.children.has(segs[0])) {
			base = [...file.module];
		} else return null;
		return { crate, segs: [...base, ...segs] };
	};

	const edges = new Map(files.map((f) => [f.path, new Map()]));
	for (const f of files) {
		for (const path of f.uses) {
			const abs = absolute(f, path);
			if (!abs) continue;
			const target = resolve(abs.crate, abs.segs);
			if (!target || target === f) continue;
			const names = edges.get(f.path).get(target.path) ?? new Set();
			names.add(path.at(-1));
			edges.get(f.path).set(target.path, names);
		}
	}
	return { files, edges, loops: findLoops(edges) };
}

/** Strongly connected components of more than one file (Tarjan). */
function findLoops(edges) {
	let index = 0;
	const idx = new Map();
	const low = new Map();
	const stack = [];
	const on = new Set();
	const out = [];
	const visit = (v) => {
		idx.set(v, index);
		low.set(v, index++);
		stack.push(v);
		on.add(v);
		for (const w of edges.get(v).keys()) {
			if (!idx.has(w)) {
				visit(w);
				low.set(v, Math.min(low.get(v), low.get(w)));
			} else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
		}
		if (low.get(v) === idx.get(v)) {
			const scc = [];
			let w;
			do {
				w = stack.pop();
				on.delete(w);
				scc.push(w);
			} while (w !== v);
			if (scc.length > 1) out.push(scc.sort());
		}
	};
	for (const v of edges.keys()) if (!idx.has(v)) visit(v);
	return out;
}

/**
 * The layer tables of docs/architecture.md: rows `| N | `a`, `b` | ... |`
 * under a heading naming the crate's folder. Returns `{crateDir: Map<unit, layer>}`.
 */
export function readLayerTables(markdown) {
	const tables = {};
	let current = null;
	for (const line of markdown.split("\n")) {
		const heading = /^#+ .*`(crates\/core\/src|src)\/?`/.exec(line);
		if (heading) {
			current = heading[1];
			tables[current] = new Map();
			continue;
		}
		if (/^#/.test(line)) current = null;
		const row = /^\|\s*(\d+)\s*\|([^|]+)\|/.exec(line);
		if (current && row) {
			for (const m of row[2].matchAll(/`([^`]+)`/g)) tables[current].set(m[1], Number(row[1]));
		}
	}
	return tables;
}

/** The unit of a file for the layer table: its top-level module (`actor`, `error`). */
export function unitOf(path, crateDir) {
	const rel = path.slice(crateDir.length + 1).replace(/\.rs$/, "");
	return rel.split("/")[0];
}

/** Imports between units that run up (or sideways) against the tables. */
export function upwardImports(picture, tables) {
	const out = [];
	const unknown = new Set();
	for (const [from, targets] of picture.edges) {
		for (const [to, names] of targets) {
			const crateFrom = CRATES.find((c) => from.startsWith(`${c.dir}/`));
			const crateTo = CRATES.find((c) => to.startsWith(`${c.dir}/`));
			if (crateFrom !== crateTo) continue; // the addon on the core: always down.
			const table = tables[crateFrom.dir];
			const a = unitOf(from, crateFrom.dir);
			const b = unitOf(to, crateFrom.dir);
			if (a === b || a === "lib" || b === "lib") continue;
			if (!table?.has(a)) unknown.add(`${crateFrom.dir}/${a}`);
			if (!table?.has(b)) unknown.add(`${crateFrom.dir}/${b}`);
			if (table?.has(a) && table.has(b) && table.get(b) >= table.get(a)) {
				out.push({ from, to, names: [...names].sort(), fromLayer: table.get(a), toLayer: table.get(b) });
			}
		}
	}
	return { upward: out, unknown: [...unknown].sort() };
}

if (import.meta.url === `file://${process.argv[1]}`) {
	const picture = readPicture();
	const docs = join(root, "docs/architecture.md");
	const tables = existsSync(docs) ? readLayerTables(readFileSync(docs, "utf8")) : {};
	const { upward, unknown } = upwardImports(picture, tables);
	const edgeCount = [...picture.edges.values()].reduce((n, t) => n + t.size, 0);
	console.log(`${picture.files.length} files, ${edgeCount} imports between files`);
	for (const loop of picture.loops) {
		console.log(`loop of ${loop.length} files:`);
		for (const a of loop) {
			for (const [b, names] of picture.edges.get(a)) {
				if (loop.includes(b)) console.log(`  ${a} -> ${b}: ${[...names].join(", ")}`);
			}
		}
	}
	for (const u of upward) {
		console.log(`runs up (layer ${u.fromLayer} -> ${u.toLayer}): ${u.from} -> ${u.to}: ${u.names.join(", ")}`);
	}
	for (const u of unknown) console.log(`not in the layer table: ${u}`);
	if (process.argv.includes("--units")) {
		const pairs = new Map();
		for (const [from, targets] of picture.edges) {
			for (const to of targets.keys()) {
				const c = CRATES.find((x) => from.startsWith(`${x.dir}/`));
				if (!to.startsWith(`${c.dir}/`)) continue;
				const a = unitOf(from, c.dir);
				const b = unitOf(to, c.dir);
				if (a !== b) pairs.set(`${c.dir}: ${a} -> ${b}`, (pairs.get(`${c.dir}: ${a} -> ${b}`) ?? 0) + 1);
			}
		}
		for (const [k, v] of [...pairs].sort()) console.log(`${k} (${v})`);
	}
	process.exitCode = picture.loops.length || upward.length || unknown.length ? 1 : 0;
}
