// Contracts written once (docs/architecture.md, issue "one table per
// contract"): each table in the code is checked against the document that
// lists it, and no code reads around the table.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { stripCode, stripTestItems, TEST_FILE } from "../scripts/layers.mjs";

const root = join(import.meta.dirname, "..");
const read = (path) => readFileSync(join(root, path), "utf8");
const productRust = execFileSync("git", ["ls-files", "crates/core/src/*.rs", "src/*.rs"], {
	cwd: root,
	encoding: "utf8",
})
	.trim()
	.split("\n")
	.filter((path) => !TEST_FILE.test(path));

/** The rows of the markdown table under `heading`: arrays of cells. */
function tableUnder(markdown, heading) {
	const start = markdown.indexOf(heading);
	assert.ok(start >= 0, `no "${heading}"`);
	const rows = [];
	let seen = false;
	for (const line of markdown.slice(start).split("\n").slice(1)) {
		if (line.startsWith("|")) {
			seen = true;
			if (!/^\|[-| ]+\|$/.test(line)) rows.push(line.split("|").slice(1, -1));
		} else if (seen) break;
	}
	return rows.slice(1);
}

describe("environment variables", () => {
	const envRs = read("crates/core/src/env.rs");
	const declared = new Set([...envRs.matchAll(/^\s+([A-Z_][A-Z0-9_]*): "/gm)].map((m) => m[1]));

	it("env.rs declares them", () => {
		assert.ok(declared.has("RIVET_ENDPOINT") && declared.size > 20, [...declared].join(" "));
	});

	it("no product code reads the environment around env.rs", () => {
		const offenders = [];
		for (const path of productRust) {
			if (path === "crates/core/src/env.rs") continue;
			const code = stripTestItems(stripCode(read(path)));
			if (/std::env::(var|var_os|vars|set_var|remove_var)\b/.test(code)) offenders.push(path);
		}
		assert.deepEqual(offenders, []);
	});

	it("every variable name the code reads is declared", () => {
		const names = new Set();
		for (const path of productRust) {
			const text = stripTestItems(read(path));
			for (const m of text.matchAll(/"((?:RIVETKIT|RIVET|RUST|LOG|NODE)_[A-Z0-9_]*|HOME)"/g)) {
				if (!m[1].startsWith("RIVET__")) names.add(m[1]);
			}
			// An engine setting (RIVET__…) counts when read, not when set.
			for (const m of text.matchAll(/\b(?:env|var|get)\("(RIVET__[A-Z0-9_]+)"\)/g)) names.add(m[1]);
		}
		assert.deepEqual(
			[...names].filter((n) => !declared.has(n)),
			[],
		);
	});

	it("the README's configuration table lists exactly the declared ones", () => {
		const rows = tableUnder(read("README.md"), "### Configuration");
		const inReadme = new Set(
			rows.flatMap((cells) => [...cells[2].matchAll(/`([A-Z_][A-Z0-9_]*)(=[^`]*)?`/g)].map((m) => m[1])),
		);
		// The test-only inspector token is documented in docs/inspector.md.
		const expected = [...declared].filter((n) => !n.startsWith("_RIVET_TEST_")).sort();
		assert.deepEqual([...inReadme].sort(), expected);
	});
});

describe("error codes", () => {
	const table = new Set(
		[...read("crates/core/src/error_codes.rs").matchAll(/^\s+[A-Z0-9_]+ = "([a-z0-9_]+)", "([a-z0-9_]+)";/gm)].map(
			(m) => `${m[1]}.${m[2]}`,
		),
	);

	it("error_codes.rs declares them", () => {
		assert.ok(table.has("actor.not_found") && table.size > 50, [...table].join(" "));
	});

	it("docs/errors.md lists exactly the declared ones", () => {
		const md = read("docs/errors.md");
		const start = md.indexOf("## Codes we raise");
		const section = md.slice(start, md.indexOf("\n## ", start + 1));
		const documented = new Set();
		for (const line of section.split("\n")) {
			if (!line.startsWith("| `")) continue;
			for (const m of line.split("|")[1].matchAll(/`([a-z_]+)\.(\{[^}]+\}|[a-z0-9_]+)`/g)) {
				const codes = m[2].startsWith("{") ? m[2].slice(1, -1).split(",") : [m[2]];
				for (const code of codes) documented.add(`${m[1]}.${code.trim()}`);
			}
		}
		assert.deepEqual([...documented].sort(), [...table].sort());
	});

	it("product code builds errors only from the table, except the bridge from JavaScript", () => {
		const foreign = [];
		for (const path of productRust) {
			const code = stripTestItems(stripCode(read(path)));
			if (/RivetError::foreign\(/.test(code) && path !== "src/bridge/error.rs" && path !== "src/error.rs") {
				foreign.push(path);
			}
		}
		assert.deepEqual(foreign, []);
	});
});
