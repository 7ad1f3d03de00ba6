// The drain bound holds when the engine is gone (docs/drain.md, "The
// bound"): a host whose engine was SIGKILLed, or is frozen (SIGSTOP), exits
// within `drainTimeoutMs` plus 1 s of its SIGINT, and names in its log
// every actor whose changes since its last save could not be written.
// That holds whichever comes first for a frozen engine, the drain bound or
// the host's lease (docs/durability.md, "The lease"): an actor lost before
// its final save began is named as well. (It once was not, and a CI run in
// which the lease ran out early in the drain named none.)
//
// Each case has an engine of its own, since it kills or freezes it.

import assert from "node:assert/strict";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { createActor, gatewayFetch, spawnHost, startEngine, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";

const hostScript = fileURLToPath(new URL("./fixtures/reliability-host.mjs", import.meta.url));
const DRAIN_MS = 3_000;
/** The contract: the whole drain, the process's exit included, within the bound plus this. */
const SLACK_MS = 1_000;

async function call(engine, actorId, path) {
	const res = await gatewayFetch(engine.endpoint, actorId, `/request${path}`, {
		method: "POST",
		signal: AbortSignal.timeout(20_000),
	});
	const body = await res.text();
	assert.equal(res.status, 200, `${path}: ${body}`);
	return JSON.parse(body);
}

const CASES = [
	{ fault: "SIGKILL", what: "killed" },
	{ fault: "SIGSTOP", what: "frozen" },
	// The lease runs out before the SIGINT: every actor is lost while running.
	{ fault: "SIGSTOP", what: "frozen past the host's lease", pastLease: true },
];

for (const { fault, what, pastLease } of CASES) {
	test(`SIGINT with the engine ${what}: the host exits within drainTimeoutMs + 1 s and names the unsaved actors`, async (t) => {
		const engine = await startEngine({ arch: "v3" });
		let host;
		try {
			const pool = `gone-${fault.toLowerCase()}${pastLease ? "-lease" : ""}-${process.pid}`;
			await upsertRunnerConfig(engine.endpoint, pool);
			host = await spawnHost(hostScript, {
				ENDPOINT: engine.endpoint,
				POOL: pool,
				DRAIN_MS: String(DRAIN_MS),
				RIVET_LOG_LEVEL: "info",
			});
			const ids = [];
			for (let i = 0; i < 3; i++) {
				const { actor_id: id } = await createActor(engine.endpoint, { name: "counter", key: `gone-${i}`, pool });
				assert.equal((await call(engine, id, "/increment")).count, 1);
				// Changed in memory only: the drain's final save is the one that would keep it.
				assert.equal((await call(engine, id, `/set?v=${50 + i}`)).count, 50 + i);
				ids.push(id);
			}

			process.kill(engine.pid, fault);
			if (pastLease) {
				await waitFor(() => /declaring envoy actors lost/.test(host.output()), {
					timeoutMs: 30_000,
					what: "the host's lease to run out",
				});
			}
			const sent = Date.now();
			host.child.kill("SIGINT");
			const exited = await Promise.race([
				host.exited.then(([code, signal]) => ({ code, signal })),
				new Promise((resolve) => setTimeout(() => resolve(null), DRAIN_MS + 30_000).unref()),
			]);
			const elapsed = Date.now() - sent;
			if (!exited) host.child.kill("SIGKILL");
			t.diagnostic(`exit ${elapsed} ms after SIGINT (bound ${DRAIN_MS} ms)`);
			assert.ok(exited, `the host did not exit within ${DRAIN_MS + 30_000} ms\n${host.output()}`);
			assert.equal(exited.code, 0, host.output());
			assert.ok(
				elapsed <= DRAIN_MS + SLACK_MS,
				`exit ${elapsed} ms after SIGINT, bound ${DRAIN_MS} ms + ${SLACK_MS} ms\n${host.output()}`,
			);
			// Every actor's changes are either saved (no line) or named as lost.
			const out = host.output();
			for (const id of ids) {
				assert.match(
					out,
					new RegExp(`actor_id="?${id}"?[^\\n]*is lost|is lost[^\\n]*actor_id="?${id}"?`),
					`actor ${id} is named as unsaved\n${out}`,
				);
			}
		} finally {
			if (fault === "SIGSTOP") process.kill(engine.pid, "SIGCONT");
			if (host && host.child.exitCode === null && host.child.signalCode === null) {
				host.child.kill("SIGKILL");
				await once(host.child, "exit");
			}
			await engine.stop();
		}
	});
}
