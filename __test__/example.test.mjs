// `npm start` as a person runs it: the example starts a local engine 3.0
// itself (embedded default, direct use), prints a curl line that reaches the
// actor through the gateway, and exits with status 0 soon after Ctrl-C (its
// own handler calls shutdown()), stopping the engine it started. An engine
// that was already running is reused and left running.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

import { findFreePorts, waitFor } from "./helpers/engine.mjs";
import { isAlive } from "./helpers/processes.mjs";

const EXIT_BOUND_MS = 20_000;
const example = fileURLToPath(new URL("../examples/counter/main.mjs", import.meta.url));
const storage = mkdtempSync(join(tmpdir(), "rivetkit-native-example-"));
const pids = new Set();

after(() => {
	// Only reached when a test failed half-way: nothing of ours may outlive the file.
	for (const pid of pids) if (isAlive(pid)) process.kill(pid, "SIGKILL");
	rmSync(storage, { recursive: true, force: true });
});

/** Starts the example; resolves once it printed its curl line. */
async function startExample(label, endpoint, cwd = process.cwd()) {
	const child = spawn(process.execPath, [example], {
		cwd,
		env: { ...process.env, RIVET_ENDPOINT: endpoint, RIVETKIT_STORAGE_PATH: storage, RIVET_LOG_LEVEL: "info" },
		stdio: ["ignore", "pipe", "pipe"],
	});
	pids.add(child.pid);
	const run = { label, child, out: "", exited: once(child, "exit") };
	child.stdout.on("data", (d) => (run.out += d));
	child.stderr.on("data", (d) => (run.out += d));
	run.url = await waitFor(() => run.out.match(/curl -X POST '([^']+)'/)?.[1], {
		timeoutMs: 60_000,
		what: `${label}: the curl line`,
	});
	return run;
}

/** Two increments through the printed curl line. */
async function increments(run) {
	const first = await (await fetch(run.url, { method: "POST" })).json();
	const second = await (await fetch(run.url, { method: "POST" })).json();
	assert.equal(second.count, first.count + 1, `${run.label}: ${JSON.stringify([first, second])}`);
}

/** Ctrl-C, then the exit within the bound, with status 0. */
async function interrupt(run) {
	run.child.kill("SIGINT");
	const timer = setTimeout(() => run.child.kill("SIGKILL"), EXIT_BOUND_MS);
	const [code, signal] = await run.exited;
	clearTimeout(timer);
	assert.equal(signal, null, `${run.label}: no exit within ${EXIT_BOUND_MS} ms after SIGINT\n${run.out}`);
	assert.equal(code, 0, run.out);
}

const enginePid = (out) => Number(out.match(/Rivet Engine started.*pid=(\d+)/)?.[1]);

test("npm start: embedded engine 3.0, a working curl line, and a Ctrl-C that stops the engine it started", async () => {
	const endpoint = `http://127.0.0.1:${(await findFreePorts()).guard}`;
	// Started from an unrelated directory: the engine binary is found from
	// the addon's own location, not the current directory.
	const run = await startExample("first run", endpoint, tmpdir());
	assert.match(run.out, /starting Rivet Engine .*engine 3\.0/, "direct use starts engine 3.0, with visible progress");
	const pid = enginePid(run.out);
	assert.ok(pid && isAlive(pid), run.out);
	pids.add(pid);
	await increments(run);
	await interrupt(run);
	assert.match(run.out, /the Rivet Engine stopped/, run.out);
	await waitFor(() => !isAlive(pid), { timeoutMs: 5_000, what: "the engine to be gone" });
});

test("an engine already running is reused, and left running by the host that reused it", async () => {
	const endpoint = `http://127.0.0.1:${(await findFreePorts()).guard}`;
	const owner = await startExample("owner", endpoint);
	const pid = enginePid(owner.out);
	assert.ok(pid, owner.out);
	pids.add(pid);
	const guest = await startExample("guest", endpoint);
	assert.match(guest.out, /reusing the Rivet Engine .*already running/i, guest.out);
	assert.doesNotMatch(guest.out, /starting Rivet Engine/, guest.out);
	await increments(guest);
	await interrupt(guest);
	assert.doesNotMatch(guest.out, /stopping the Rivet Engine/, "an engine we did not start is not ours to stop");
	assert.ok(isAlive(pid), "the reused engine still runs");
	await increments(owner);
	await interrupt(owner);
	await waitFor(() => !isAlive(pid), { timeoutMs: 5_000, what: "the owner's engine to be gone" });
});
