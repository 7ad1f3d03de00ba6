// Reliability against the real engine: nothing acknowledged is lost and no
// save is poisoned, whatever user code keeps, however many connections end
// at once, however large a connection grows, and when a drain runs into
// its bound.

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { createActor, gatewayFetch, spawnHost, startEngine, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";
import { native, serveActors } from "./helpers/actors.mjs";
import { cborDecode, cborEncode, officialClient } from "./helpers/client.mjs";

const hostScript = fileURLToPath(new URL("./fixtures/reliability-host.mjs", import.meta.url));
let engine;

before(async () => {
	engine = await startEngine({ arch: "v3" });
});
after(async () => {
	await engine?.stop();
});

function startHost(pool, env = {}) {
	return spawnHost(hostScript, { ENDPOINT: engine.endpoint, POOL: pool, ...env });
}

/** Waits for the host to exit by itself (a hung host fails the test instead of the run). */
async function exitCode(host, what) {
	const code = await Promise.race([
		host.exited.then(([c]) => c),
		new Promise((resolve) => setTimeout(() => resolve("still running"), 60_000).unref()),
	]);
	if (code === "still running") host.child.kill("SIGKILL");
	assert.equal(code, 0, `${what}\n${host.output()}`);
}

async function call(actorId, path, method = "POST") {
	const res = await gatewayFetch(engine.endpoint, actorId, `/request${path}`, {
		method,
		signal: AbortSignal.timeout(20_000),
	});
	const body = await res.text();
	assert.equal(res.status, 200, `${path}: ${body}`);
	return JSON.parse(body);
}

/** Reads the count, retrying while the engine moves the actor to a new host or wakes it. */
async function read(actorId) {
	return await waitFor(
		async () => {
			const res = await gatewayFetch(engine.endpoint, actorId, "/request/read", {
				signal: AbortSignal.timeout(5_000),
			}).catch(() => null);
			return res?.status === 200 ? await res.json() : undefined;
		},
		{ timeoutMs: 90_000, intervalMs: 250, what: "the actor to answer" },
	);
}

/** Puts the actor to sleep and waits until a newer generation answers. */
async function napAndWake(actorId) {
	const before = (await read(actorId)).generation;
	await call(actorId, "/nap");
	return await waitFor(
		async () => {
			const now = await read(actorId);
			return now.generation > before ? now : undefined;
		},
		{ timeoutMs: 60_000, intervalMs: 250, what: "a new generation" },
	);
}

test("a context kept from a generation that slept cannot write; the successor's state survives a SIGKILL", async () => {
	const pool = `stale-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	const first = await startHost(pool);
	const actor = await createActor(engine.endpoint, { name: "counter", key: "stale", pool });
	assert.equal((await call(actor.actor_id, "/increment")).count, 1);
	await call(actor.actor_id, "/keep");
	await napAndWake(actor.actor_id);
	assert.equal((await call(actor.actor_id, "/increment")).count, 2);
	assert.equal((await call(actor.actor_id, "/increment")).count, 3);

	const stale = await call(actor.actor_id, "/stale-write");
	assert.deepEqual(
		{ ...stale, generationKept: undefined },
		{
			generationKept: undefined,
			saveState: "actor.stopping",
			requestSaveAndWait: "actor.stopping",
			kvPut: "actor.stopping",
			setAlarm: "actor.stopping",
		},
	);

	first.child.kill("SIGKILL");
	await first.exited;
	const second = await startHost(pool);
	assert.equal((await read(actor.actor_id)).count, 3, "the acknowledged 3, not the stale 999999");

	// Stale handles hold nothing that keeps the process alive.
	await call(actor.actor_id, "/keep");
	await napAndWake(actor.actor_id);
	await call(actor.actor_id, "/stale-write");
	second.child.kill("SIGINT");
	await exitCode(second, "the host exits after shutdown with a stale context around");
});

test("a drain that runs into its bound still saves every changed state", async () => {
	const pool = `drain-bound-${process.pid}`;
	await upsertRunnerConfig(engine.endpoint, pool);
	// onSleep never settles, so the engine's stops cannot finish within the bound.
	const first = await startHost(pool, { DRAIN_MS: "1000", HANG_ON_SLEEP: "1" });
	const actors = [];
	for (let i = 0; i < 3; i++)
		actors.push(await createActor(engine.endpoint, { name: "counter", key: `bound-${i}`, pool }));
	for (const [i, actor] of actors.entries()) {
		assert.equal((await call(actor.actor_id, "/increment")).count, 1);
		// Changed in memory only: no save asked.
		assert.equal((await call(actor.actor_id, `/set?v=${100 + i}`)).count, 100 + i);
	}
	first.child.kill("SIGINT");
	await exitCode(first, "the drain ends at its bound");
	assert.match(first.output(), /saving the actors still running/);

	const second = await startHost(pool);
	try {
		for (const [i, actor] of actors.entries()) assert.equal((await read(actor.actor_id)).count, 100 + i);
	} finally {
		second.child.kill("SIGINT");
		await exitCode(second, "second host exits");
	}
});

describe("connection records", () => {
	let host;
	const events = [];

	before(async () => {
		const counts = new Map();
		const room = new native.NapiActorFactory({
			createState: async () => cborEncode({ count: 0 }),
			onWake: async (_e, { ctx }) => counts.set(ctx.actorId(), cborDecode(ctx.state()).count),
			serializeState: async (_e, { ctx }) => ({ state: cborEncode({ count: counts.get(ctx.actorId()) ?? 0 }) }),
			actions: {
				// Answered once the save that covers it is acknowledged.
				bump: async (_e, { ctx }) => {
					counts.set(ctx.actorId(), (counts.get(ctx.actorId()) ?? 0) + 1);
					await ctx.requestSaveAndWait({ immediate: true });
					return cborEncode(counts.get(ctx.actorId()));
				},
				generation: async (_e, { ctx }) => cborEncode(ctx.generation()),
				nap: async (_e, { ctx }) => {
					ctx.sleep();
					return cborEncode(true);
				},
				shout: async (_e, { ctx, args }) => {
					const [name] = cborDecode(args);
					ctx.broadcast(name, cborEncode(["hello"]));
					return cborEncode(true);
				},
			},
		});
		// RivetKit 2.3's contract: `/connect` sockets hibernate by default
		// (docs/versions.md; under 3.0 they close on sleep).
		host = await serveActors(engine, { room }, { serverlessPackageVersion: "2.3.19" });
	});

	after(async () => {
		await host?.stop();
	});

	test("400 connections ending at once do not break the next save", async () => {
		const client = officialClient(engine, host.pool, "json");
		const handle = client.room.getOrCreate(["many"]);
		assert.equal(await handle.bump(), 1);
		const conns = [];
		for (let batch = 0; batch < 8; batch++) {
			const opened = Array.from({ length: 50 }, () => handle.connect());
			await Promise.all(opened.map((c) => c.generation()));
			conns.push(...opened);
		}
		assert.equal(conns.length, 400);
		await Promise.all(conns.map((c) => c.dispose()));
		// Saves after the mass disconnect succeed (and keep succeeding).
		assert.equal(await handle.bump(), 2);
		assert.equal(await handle.bump(), 3);
	});

	test("a connection whose subscriptions exceed one KV value persists across sleep and wake", async () => {
		const client = officialClient(engine, host.pool, "json");
		const handle = client.room.getOrCreate(["large-conn"]);
		const conn = handle.connect();
		try {
			const names = [0, 1, 2].map((i) => `${i}${"e".repeat(60_000)}`);
			for (const name of names) conn.on(name, (...args) => events.push({ name: name.slice(0, 1), args }));
			assert.equal(await conn.bump(), 1, "the save with a 180 KB connection record succeeds");
			assert.equal(await conn.bump(), 2);
			const before = await conn.generation();
			await conn.nap();
			// Woken by the socket's own next message, as a client of a
			// hibernating connection does. (An HTTP request that wakes the
			// actor while the engine is still putting the socket into
			// hibernation races the engine 2.3.19 gateway: the new generation
			// is then started without it, and the socket is dropped as stale.)
			await waitFor(async () => (await conn.generation()) > before, {
				timeoutMs: 60_000,
				intervalMs: 250,
				what: "a new generation",
			});
			// The socket is live again in the new generation (an action over it answers)...
			// ...which restored the connection, subscriptions included.
			await handle.shout(names[2]);
			await waitFor(() => events.some((e) => e.name === "2"), {
				timeoutMs: 20_000,
				what: "the event on a restored subscription",
			});
			assert.equal(await conn.bump(), 3);
		} finally {
			await conn.dispose();
		}
	});
});
