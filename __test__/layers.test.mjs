// The import rules of docs/architecture.md: no import loop between files,
// and imports between units run down the document's layer tables.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { expandUseTree, readLayerTables, readPicture, stripCode, upwardImports } from "../scripts/layers.mjs";

const root = join(import.meta.dirname, "..");
const tables = readLayerTables(readFileSync(join(root, "docs/architecture.md"), "utf8"));
const picture = readPicture();

describe("the reader", () => {
	it("expands use trees and leaves out comments and strings", () => {
		assert.deepEqual(expandUseTree("a::{b, c::{d as e, f}, g::*}"), [
			["a", "b"],
			["a", "c", "d"],
			["a", "c", "f"],
			["a", "g", "*"],
		]);
		const code = stripCode('let s = "crate::x"; // crate::y\nlet c = \'"\'; /* crate::z */ crate::w::f();');
		assert.match(code, /crate::w::f/);
		assert.doesNotMatch(code, /crate::(x|y|z)/);
	});

	it("sees the imports of both crates", () => {
		const edges = [...picture.edges.values()].reduce((n, t) => n + t.size, 0);
		assert.ok(picture.files.length > 100, `${picture.files.length} files`);
		assert.ok(edges > 300, `${edges} imports`);
	});
});

describe("docs/architecture.md", () => {
	it("has a layer table for each crate", () => {
		assert.ok(tables["crates/core/src"]?.size > 5);
		assert.ok(tables.src?.size > 3);
	});

	it("no file imports itself back through others", () => {
		const text = picture.loops.map((loop) => loop.join(" -> ")).join("\n");
		assert.equal(picture.loops.length, 0, `import loops:\n${text}`);
	});

	it("imports between units run down the layers, and every unit has a layer", () => {
		const { upward, unknown } = upwardImports(picture, tables);
		assert.deepEqual(unknown, [], "units missing from the tables");
		const text = upward.map((u) => `${u.from} -> ${u.to} (${u.names.join(", ")})`).join("\n");
		assert.equal(upward.length, 0, `imports that run up:\n${text}`);
	});
});
