// index.d.ts is the typed contract for direct users: no `any`, no bare
// `object`, no untyped callbacks.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

const dts = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");

test("index.d.ts has no loosely typed spots", () => {
	const loose = dts
		.split("\n")
		.map((line, i) => ({ line, n: i + 1 }))
		.filter(({ line }) => !line.trim().startsWith("*") && !line.trim().startsWith("/"))
		.filter(({ line }) => /\bany\b|:\s*object\b|\(\.\.\.args: any\[\]\)/.test(line));
	assert.deepEqual(loose, [], loose.map(({ line, n }) => `${n}: ${line}`).join("\n"));
});

test("the foundation surface is declared", () => {
	for (const name of ["CoreRegistry", "NapiActorFactory", "ActorContext", "CancellationToken"]) {
		assert.match(dts, new RegExp(`export declare class ${name}\\b`));
	}
	for (const method of ["register", "serve", "waitReady", "shutdown", "actorStopThresholdMs"]) {
		assert.match(dts, new RegExp(`\\b${method}\\(`), method);
	}
});
