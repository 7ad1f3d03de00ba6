// The addon contract of RivetKit 3.0 (docs/versions.md), through the direct
// API: CancellationListener, engineSpawn as a boolean, sqliteProfiling in
// both shapes, the runtime-state bag over a sleep, and actor-connect sockets
// that do not hibernate by default under 3.0. The engine is 2.3.19 (the
// 3.0 profile is picked by `serverlessPackageVersion`, not by the engine).

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import { setImmediate as tick } from "node:timers/promises";

import { native, serveActors } from "./helpers/actors.mjs";
import { cborEncode, officialClient } from "./helpers/client.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const require = createRequire(import.meta.url);
const testing = require("../target/testing/rivetkit-native.node");

describe("CancellationListener", () => {
	test("onCancelled returns a listener; release() before the cancel keeps the callback from running", async () => {
		const token = new native.CancellationToken();
		let calls = 0;
		const listener = token.onCancelled(() => calls++);
		assert.ok(listener instanceof native.CancellationListener);
		listener.release();
		listener.release();
		token.cancel();
		await tick();
		assert.equal(calls, 0);
	});

	test("a listener not released fires once; release() afterwards is a no-op", async () => {
		const token = new native.CancellationToken();
		let calls = 0;
		const listener = token.onCancelled(() => calls++);
		token.cancel();
		await tick();
		assert.equal(calls, 1);
		listener.release();
		token.cancel();
		await tick();
		assert.equal(calls, 1);
	});

	test("on a cancelled token: the callback runs and the listener is already spent", async () => {
		const token = new native.CancellationToken();
		token.cancel();
		let calls = 0;
		const listener = token.onCancelled(() => calls++);
		assert.ok(listener instanceof native.CancellationListener);
		listener.release();
		await tick();
		assert.equal(calls, 1, "release() after the registration of a fired listener changes nothing");
	});

	test("release() ends the task that waited for the token", async () => {
		const token = new testing.CancellationToken();
		const before = testing.__testWaitingCancellationListeners();
		const listeners = [0, 1, 2].map(() => token.onCancelled(() => {}));
		assert.equal(testing.__testWaitingCancellationListeners(), before + 3);
		listeners[0].release();
		await waitFor(() => testing.__testWaitingCancellationListeners() === before + 2, {
			what: "the released listener's task to end",
		});
		token.cancel();
		await waitFor(() => testing.__testWaitingCancellationListeners() === before, {
			what: "the other tasks to end with the cancel",
		});
	});

	test("a token cancelled from Rust: a released listener stays silent, an unreferenced one still fires", async () => {
		const fired = [];
		const result = await testing.__testCallCallback((_err, { token }) => {
			token.onCancelled(() => fired.push("kept no reference"));
			token.onCancelled(() => fired.push("released")).release();
			return "ok";
		}, "v");
		assert.equal(result.tokenCancelled, false);
		await waitFor(() => fired.length > 0, { what: "the listener to fire" });
		await tick();
		assert.deepEqual(fired, ["kept no reference"]);
	});
});

describe("serve config and actor config of RivetKit 3.0", () => {
	async function serveError(config) {
		const registry = new native.CoreRegistry();
		registry.register("a", new native.NapiActorFactory({}));
		try {
			await registry.serve({ exitCodeOnFailure: false, envoyConnectTimeoutMs: 300, ...config });
			return null;
		} catch (err) {
			return err;
		} finally {
			await registry.shutdown();
		}
	}

	test("engineSpawn takes a boolean; an unknown string is config.invalid", async () => {
		const refused = await serveError({ endpoint: "http://192.0.2.1:6420", engineSpawn: "sometimes" });
		assert.equal(refused?.code, "config.invalid");
		assert.match(String(refused.message), /engineSpawn/);
		// A boolean passes the config: the run fails later, connecting.
		const failed = await serveError({
			endpoint: "http://192.0.2.1:6420",
			engineSpawn: false,
			serverlessPackageVersion: "3.0.0",
		});
		assert.ok(failed, "nothing listens there");
		assert.notEqual(failed.code, "config.invalid", failed.message);
	});

	test("sqliteProfiling takes both shapes", () => {
		new native.NapiActorFactory({}, { sqliteProfiling: { enabled: true, maxTrackedStatementFingerprints: 8 } });
		new native.NapiActorFactory(
			{},
			{ sqliteProfiling: { queries: ["SELECT 1"], fingerprints: ["0123456789abcdef"], slowOperationThresholdMs: 5 } },
		);
	});
});

describe("a 3.0 generation over a sleep", () => {
	let engine;
	let host;
	const bags = [];

	before(async () => {
		engine = await startEngine({ arch: "v2" });
		const callbacks = {
			createState: async () => cborEncode({}),
			onSleep: async (_e, { ctx }) => {
				// What RivetKit 3.0's shutdown cleanup does.
				ctx.clearRuntimeState();
				ctx.runtimeState().cleared = true;
				bags.push(ctx);
			},
			actions: {
				hello: async (_e, { ctx, conn }) => {
					const bag = ctx.runtimeState();
					bag.visits = (bag.visits ?? 0) + 1;
					return cborEncode({ visits: bag.visits, cleared: bag.cleared ?? false, hibernatable: conn.isHibernatable() });
				},
				nap: async (_e, { ctx }) => {
					ctx.sleep();
					return cborEncode(true);
				},
			},
		};
		const room = new native.NapiActorFactory(callbacks);
		const lobby = new native.NapiActorFactory(callbacks, { canHibernateWebsocket: true });
		host = await serveActors(engine, { room, lobby }, { serverlessPackageVersion: "3.0.0" });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	test("the bag: one per generation, fresh after a clear, still readable on the stopped generation", async () => {
		const client = officialClient(engine, host.pool, "json");
		const actor = client.room.getOrCreate(["bag"]);
		assert.equal((await actor.hello()).visits, 1);
		assert.equal((await actor.hello()).visits, 2, "the same bag for the generation");
		await actor.nap();
		await waitFor(() => bags.length === 1, { timeoutMs: 30_000, what: "onSleep" });
		const stopped = bags[0];
		assert.equal(stopped.runtimeState().cleared, true, "the stopped generation's (fresh, marked) bag");
		assert.equal(stopped.runtimeState(), stopped.runtimeState());
		const next = await actor.hello();
		assert.deepEqual([next.visits, next.cleared], [1, false], "the next generation starts a bag of its own");
	});

	test("actor-connect sockets close on sleep unless canHibernateWebsocket", async () => {
		const client = officialClient(engine, host.pool, "json");
		for (const [name, expected] of [
			["room", false],
			["lobby", true],
		]) {
			const conn = client[name].getOrCreate(["conn"]).connect();
			try {
				assert.equal((await conn.hello()).hibernatable, expected, name);
			} finally {
				await conn.dispose();
			}
		}
	});
});
