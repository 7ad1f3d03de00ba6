// Many machines: two hosts of the example app (registry.start()) in one
// normal pool on a real engine. The engine spreads new actors across both;
// when one host stops (Ctrl-C: RivetKit drains, every actor sleeps with its
// state saved), the other serves its actors, state intact.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createClient } from "rivetkit/client";

import { interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "scale-out";
const MAX_ACTORS = 24;

describe("two hosts in one pool", () => {
	let engine;
	let client;
	const hosts = [];

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		for (const name of ["a", "b"]) {
			const app = startApp("src/server.mjs", {
				RIVET_ENDPOINT: engine.endpoint,
				RIVET_TOKEN: engine.token,
				RIVET_POOL: POOL,
			});
			app.name = name;
			hosts.push(app);
			await waitForOutput(app, /registry serving/);
		}
		client = createClient({
			endpoint: engine.endpoint,
			namespace: engine.namespace,
			token: engine.token,
			poolName: POOL,
		});
	});

	after(async () => {
		for (const app of hosts) if (!app.exited) app.child.kill("SIGKILL");
		await engine?.stop();
	});

	/** The host whose output says `counter <key> awake` (after `from[i]`). */
	const hostOf = (key, from = [0, 0]) =>
		hosts.find((app, i) => app.out.slice(from[i]).includes(`counter ${key} awake`));

	test("actors spread across both hosts; a stopped host's actors move to the other with their state", async (t) => {
		// New actors until both hosts run some.
		const placed = new Map();
		for (let i = 0; i < MAX_ACTORS; i++) {
			const key = `spread-${i}`;
			const counter = client.counter.getOrCreate([key]);
			assert.equal(await counter.increment(i + 1), i + 1);
			const host = await waitFor(() => hostOf(key), { what: `the host of ${key}` });
			placed.set(key, host);
			const names = new Set(placed.values());
			if (names.size === 2 && i >= 3) break;
		}
		const on = (app) => [...placed].filter(([, host]) => host === app).map(([key]) => key);
		const [a, b] = hosts;
		t.diagnostic(`host a runs ${on(a).length} actors, host b runs ${on(b).length}`);
		assert.ok(on(a).length > 0 && on(b).length > 0, `the engine placed actors on both hosts: ${on(a)} | ${on(b)}`);

		// Stop host a: RivetKit drains it (its actors go to sleep, state saved).
		const exited = await interrupt(a);
		assert.equal(exited.killed, false, `host a did not exit after SIGINT\n${a.out.slice(-2000)}`);
		for (const key of on(a)) assert.match(a.out, new RegExp(`counter ${key} going to sleep`));

		// Every actor of host a answers again, from host b, with its state.
		const from = [a.out.length, b.out.length];
		for (const key of on(a)) {
			const expected = Number(key.split("-")[1]) + 1;
			assert.equal(await client.counter.getOrCreate([key]).getCount(), expected, `${key} kept its state`);
			assert.equal(hostOf(key, from), b, `${key} now runs on host b`);
		}
		// Host b's own actors were never disturbed.
		for (const key of on(b)) {
			const expected = Number(key.split("-")[1]) + 1;
			assert.equal(await client.counter.getOrCreate([key]).increment(0), expected);
		}
	});
});
