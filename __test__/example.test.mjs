// `npm start` as a person runs it: the example starts a local engine itself
// (embedded default), prints a curl line that reaches the actor through the
// gateway, and exits with status 0 soon after Ctrl-C (its own handler calls
// shutdown()). A second run reuses the engine the first one left running.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

import { findFreePorts, waitFor } from "./helpers/engine.mjs";
import { stopEnginesUnder } from "./helpers/processes.mjs";

const EXIT_BOUND_MS = 5_000;
const example = fileURLToPath(new URL("../examples/counter/main.mjs", import.meta.url));
const storage = mkdtempSync(join(tmpdir(), "rivetkit-native-example-"));
let endpoint;

after(async () => {
	// The embedded engine is left running on purpose (the next start reuses
	// it); the test owns its storage dir, so it stops that engine itself.
	await stopEnginesUnder(storage);
	rmSync(storage, { recursive: true, force: true });
});

async function runExample(label, cwd = process.cwd()) {
	const child = spawn(process.execPath, [example], {
		cwd,
		env: { ...process.env, RIVET_ENDPOINT: endpoint, RIVETKIT_STORAGE_PATH: storage, RIVET_LOG_LEVEL: "info" },
		stdio: ["ignore", "pipe", "pipe"],
	});
	let out = "";
	child.stdout.on("data", (d) => (out += d));
	child.stderr.on("data", (d) => (out += d));
	const exited = once(child, "exit");
	try {
		const url = await waitFor(() => out.match(/curl -X POST '([^']+)'/)?.[1], {
			timeoutMs: 60_000,
			what: `${label}: the curl line`,
		});
		const first = await (await fetch(url, { method: "POST" })).json();
		const second = await (await fetch(url, { method: "POST" })).json();
		assert.equal(second.count, first.count + 1);

		child.kill("SIGINT");
		const timer = setTimeout(() => child.kill("SIGKILL"), EXIT_BOUND_MS);
		const [code, signal] = await exited;
		clearTimeout(timer);
		assert.equal(signal, null, `${label}: no exit within ${EXIT_BOUND_MS} ms after SIGINT\n${out}`);
		assert.equal(code, 0, out);
		return out;
	} finally {
		child.kill("SIGKILL");
	}
}

test("npm start: embedded engine, a working curl line, and a clean Ctrl-C", async () => {
	endpoint = `http://127.0.0.1:${(await findFreePorts()).guard}`;
	// Started from an unrelated directory: the engine binary is found from
	// the addon's own location, not the current directory.
	const first = await runExample("first run", tmpdir());
	assert.match(
		first,
		/Rivet Engine started|starting Rivet Engine/i,
		"the first run starts an engine with visible progress",
	);
	const pid = first.match(/Rivet Engine started.*pid=(\d+)/)?.[1];
	assert.ok(pid, first);
	const leftRunning = [...first.matchAll(/keeps running.*stop it with `kill (\d+)`/g)];
	assert.equal(leftRunning.length, 1, `said once that the engine keeps running:\n${first}`);
	assert.equal(leftRunning[0][1], pid);
	const second = await runExample("second run");
	assert.match(second, /already running/i, "the second run reuses the engine");
	assert.doesNotMatch(second, /keeps running/, "an engine we did not start is not ours to announce");
});
