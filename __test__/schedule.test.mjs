// Scheduled actions (`ctx.schedule().after/at`) against the real engine:
// an event scheduled before sleeping wakes the actor and runs its action
// with `scheduledFire`; get/list/cancel; the maxSchedules limit, which
// cron jobs share; a cron job wakes the actor too; so does a run wake time
// (`setRunWakeAt`).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { decode, encode } from "cbor-x";

import { createActor, gatewayFetch, startEngine, waitFor } from "./helpers/engine.mjs";
import { native, serveActors } from "./helpers/actors.mjs";

const cbor = (value) => Buffer.from(encode(value));

describe("schedule", () => {
	let engine;
	let host;
	const fired = [];
	const wakes = [];

	const hooks = {
		createState: async () => cbor({}),
		onWake: async (_e, { ctx }) => wakes.push({ actorId: ctx.actorId(), generation: ctx.generation() }),
		actions: {
			remember: async (_e, { ctx, args, scheduledFire }) => {
				fired.push({ actorId: ctx.actorId(), generation: ctx.generation(), args: decode(args), scheduledFire });
				return cbor(null);
			},
		},
		onRequest: async (_e, { ctx, request }) => {
			const url = new URL(request.uri, "http://actor");
			const schedule = ctx.schedule();
			const reply = (value, status = 200) => ({
				status,
				headers: { "content-type": "application/json" },
				body: Buffer.from(JSON.stringify(value)),
			});
			try {
				switch (url.pathname) {
					case "/after": {
						const id = await schedule.after(
							Number(url.searchParams.get("ms")),
							"remember",
							cbor([url.searchParams.get("text")]),
						);
						if (url.searchParams.has("sleep")) ctx.sleep();
						return reply({ id });
					}
					case "/run-wake": {
						await ctx.setRunWakeAt(Date.now() + Number(url.searchParams.get("ms")));
						ctx.sleep();
						return reply({});
					}
					case "/at": {
						const id = await schedule.at(Date.now() + 60_000, "remember", cbor(["later"]));
						return reply({ id });
					}
					case "/list":
						return reply(
							(await schedule.list()).map((e) => ({
								id: e.id,
								action: e.action,
								args: decode(e.args),
								runAt: e.runAt,
							})),
						);
					case "/get": {
						const e = await schedule.get(url.searchParams.get("id"));
						return reply(e && { id: e.id, action: e.action });
					}
					case "/cancel":
						return reply({ cancelled: await schedule.cancel(url.searchParams.get("id")) });
					case "/cron": {
						await schedule.cronEvery("tick", Number(url.searchParams.get("interval")), "remember", cbor(["tick"]), 5);
						const job = await schedule.cronGet("tick");
						return reply({
							kind: job.kind,
							intervalMs: job.intervalMs,
							nextRunAt: job.nextRunAt,
							jobs: (await schedule.cronList()).length,
						});
					}
					case "/history":
						return reply((await schedule.cronHistory("tick")).map((h) => h.result));
				}
			} catch (err) {
				return reply({ error: String(err.message ?? err) }, 400);
			}
			return reply({}, 404);
		},
	};

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		host = await serveActors(engine, {
			sched: new native.NapiActorFactory(hooks, { sleepTimeoutMs: 1_000 }),
			tiny: new native.NapiActorFactory(hooks, { sleepTimeoutMs: 60_000, maxSchedules: 2 }),
		});
	});
	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const create = (name, key) => createActor(engine.endpoint, { name, key, pool: host.pool });
	const call = async (id, path) => {
		const res = await gatewayFetch(engine.endpoint, id, `/request${path}`);
		return { status: res.status, body: await res.json() };
	};

	test("an event scheduled before sleeping wakes the actor and runs its action", async () => {
		const { actor_id: id } = await create("sched", "wake");
		const { status, body } = await call(id, "/after?ms=2000&text=hello&sleep");
		assert.equal(status, 200);
		assert.match(body.id, /^[0-9a-f-]{36}$/);
		const fire = await waitFor(() => fired.find((f) => f.actorId === id), {
			timeoutMs: 30_000,
			what: "the scheduled action",
		});
		assert.deepEqual(fire.args, ["hello"]);
		const second = engine.firstGeneration + 1;
		assert.equal(fire.generation, second, "a new generation ran it: the engine woke the sleeping actor");
		assert.equal(fire.scheduledFire.kind, "at");
		assert.equal(fire.scheduledFire.id, body.id);
		assert.ok(fire.scheduledFire.firedAt >= fire.scheduledFire.scheduledAt);
		assert.ok(wakes.some((w) => w.actorId === id && w.generation === second));
		assert.deepEqual((await call(id, "/list")).body, [], "a fired event is gone");
	});

	test("setRunWakeAt with a time wakes the sleeping actor", async () => {
		const { actor_id: id } = await create("sched", "run-wake");
		assert.equal((await call(id, "/run-wake?ms=2000")).status, 200);
		await waitFor(() => wakes.some((w) => w.actorId === id && w.generation === engine.firstGeneration + 1), {
			timeoutMs: 30_000,
			what: "the engine waking the actor for its run wake time",
		});
	});

	test("get, list and cancel see pending events", async () => {
		const { actor_id: id } = await create("tiny", "pending");
		const { body: a } = await call(id, "/at");
		const { body: b } = await call(id, "/at");
		const list = (await call(id, "/list")).body;
		assert.deepEqual(list.map((e) => e.id).sort(), [a.id, b.id].sort());
		assert.deepEqual(list[0].args, ["later"]);
		assert.equal((await call(id, `/get?id=${a.id}`)).body.action, "remember");
		assert.equal((await call(id, "/get?id=nope")).body, null);
		assert.deepEqual((await call(id, `/cancel?id=${a.id}`)).body, { cancelled: true });
		assert.deepEqual((await call(id, `/cancel?id=${a.id}`)).body, { cancelled: false });
		assert.deepEqual(
			(await call(id, "/list")).body.map((e) => e.id),
			[b.id],
		);
	});

	test("maxSchedules is enforced with a structured error", async () => {
		const { actor_id: id } = await create("tiny", "full");
		await call(id, "/at");
		await call(id, "/at");
		const { status, body } = await call(id, "/at");
		assert.equal(status, 400);
		assert.match(body.error, /schedule\.max_schedules_exceeded|maxSchedules/);
		assert.equal((await call(id, "/list")).body.length, 2, "the actor keeps serving");
	});

	test("cron jobs count against maxSchedules with the events; bad intervals are refused", async () => {
		const { actor_id: id } = await create("tiny", "cron");
		await call(id, "/at");
		const { status, body } = await call(id, "/cron?interval=5000");
		assert.equal(status, 200, JSON.stringify(body));
		assert.deepEqual([body.kind, body.intervalMs, body.jobs], ["every", 5000, 1]);
		const full = await call(id, "/at");
		assert.equal(full.status, 400);
		assert.match(full.body.error, /schedule\.max_schedules_exceeded|maxSchedules/);
		// Replacing the job is not a new schedule.
		assert.equal((await call(id, "/cron?interval=6000")).status, 200);
		const bad = await call(id, "/cron?interval=1000");
		assert.equal(bad.status, 400);
		assert.match(bad.body.error, /invalid_interval/);
	});

	test("a cron job wakes the sleeping actor and runs its action with scheduledFire", async () => {
		const { actor_id: id } = await create("sched", "cron");
		const { body: job } = await call(id, "/cron?interval=5000");
		const fire = await waitFor(() => fired.find((f) => f.actorId === id && f.scheduledFire?.kind === "every"), {
			timeoutMs: 30_000,
			what: "the cron job's action",
		});
		assert.deepEqual(fire.args, ["tick"]);
		assert.deepEqual([fire.scheduledFire.id, fire.scheduledFire.name], ["tick", "tick"]);
		assert.equal(fire.scheduledFire.scheduledAt, job.nextRunAt);
		assert.ok(fire.generation > engine.firstGeneration, "the actor slept (1 s idle) and the engine alarm woke it");
		const history = await waitFor(
			async () => {
				const { body } = await call(id, "/history");
				return body.includes("ok") && body;
			},
			{ what: "the fire in the history" },
		);
		assert.equal(history.at(-1), "ok");
	});
});
