// The actor lifecycle against the real engine: idle sleep, what keeps an
// actor awake, noSleep, and an alarm that wakes a sleeping actor.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createActor, gatewayFetch, startEngine, waitFor } from "./helpers/engine.mjs";
import { json, native, parse, serveActors } from "./helpers/actors.mjs";

const SLEEP_MS = 1_000;

describe("lifecycle", () => {
	let engine;
	let host;
	const events = [];
	const seen = (actorId, name) => events.some((e) => e.actorId === actorId && e.name === name);
	const count = (actorId, name) => events.filter((e) => e.actorId === actorId && e.name === name).length;
	const releases = new Map();

	const hooks = {
		createState: async () => json({ alarms: 0 }),
		onWake: async (_e, { ctx }) => events.push({ actorId: ctx.actorId(), name: `wake:${ctx.generation()}` }),
		onSleep: async (_e, { ctx }) => events.push({ actorId: ctx.actorId(), name: "sleep" }),
		onAlarm: async (_e, { ctx }) => {
			const state = parse(ctx.state());
			state.alarms += 1;
			await ctx.saveState({ state: json(state) });
			events.push({ actorId: ctx.actorId(), name: "alarm" });
		},
		onRequest: async (_e, { ctx, request }) => {
			const path = request.uri.split("?")[0];
			if (path === "/hold") {
				// In flight until released by the test.
				await new Promise((resolve) => releases.set(ctx.actorId(), resolve));
			} else if (path === "/keep-awake") {
				const region = ctx.beginKeepAwake();
				releases.set(ctx.actorId(), () => ctx.endKeepAwake(region));
			} else if (path === "/alarm") {
				ctx.setAlarm(Date.now() + 1_500);
				ctx.sleep();
			}
			return { status: 200, body: ctx.state() };
		},
	};

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		host = await serveActors(engine, {
			sleepy: new native.NapiActorFactory(hooks, { sleepTimeoutMs: SLEEP_MS, onRequestTimeoutMs: 60_000 }),
			awake: new native.NapiActorFactory(hooks, { sleepTimeoutMs: SLEEP_MS, noSleep: true }),
		});
	});
	after(async () => {
		for (const release of releases.values()) release();
		await host?.stop();
		await engine?.stop();
	});

	const create = (name, key) => createActor(engine.endpoint, { name, key, pool: host.pool });
	const request = (id, path) => gatewayFetch(engine.endpoint, id, `/request${path}`);
	const pause = (ms) => new Promise((r) => setTimeout(r, ms));

	test("an idle actor sleeps after its sleep timeout", async () => {
		const { actor_id: id } = await create("sleepy", "idle");
		assert.equal((await request(id, "/")).status, 200);
		await waitFor(() => seen(id, "sleep"), { timeoutMs: 15_000, what: "idle sleep" });
	});

	test("an actor with a request in flight does not sleep", async () => {
		const { actor_id: id } = await create("sleepy", "busy");
		const held = request(id, "/hold");
		await waitFor(() => releases.has(id), { what: "request in flight" });
		await pause(SLEEP_MS * 3);
		assert.ok(!seen(id, "sleep"), "slept with a request in flight");
		releases.get(id)();
		assert.equal((await held).status, 200);
		await waitFor(() => seen(id, "sleep"), { timeoutMs: 15_000, what: "sleep once idle" });
	});

	test("a keep-awake region keeps the actor awake until it ends", async () => {
		const { actor_id: id } = await create("sleepy", "region");
		assert.equal((await request(id, "/keep-awake")).status, 200);
		await pause(SLEEP_MS * 3);
		assert.ok(!seen(id, "sleep"), "slept inside a keep-awake region");
		releases.get(id)();
		await waitFor(() => seen(id, "sleep"), { timeoutMs: 15_000, what: "sleep after the region" });
	});

	test("a noSleep actor does not sleep when idle", async () => {
		const { actor_id: id } = await create("awake", "forever");
		assert.equal((await request(id, "/")).status, 200);
		await pause(SLEEP_MS * 4);
		assert.ok(!seen(id, "sleep"));
	});

	test("an alarm set before sleeping wakes the actor and fires", async () => {
		const { actor_id: id } = await create("sleepy", "alarm");
		assert.equal((await request(id, "/alarm")).status, 200);
		await waitFor(() => seen(id, "sleep"), { timeoutMs: 15_000, what: "sleep before the alarm" });
		await waitFor(() => seen(id, "alarm"), { timeoutMs: 20_000, what: "the alarm to wake the actor" });
		assert.ok(seen(id, `wake:${engine.firstGeneration + 1}`), "the alarm started a new generation");
		assert.equal(count(id, "alarm"), 1);
	});
});
