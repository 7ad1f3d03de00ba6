// Issue "Foundation", end to end against the real engine: raw requests
// through the gateway, sleep and wake, destroy, and callbacks that throw,
// hang or return the wrong type.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createActor, destroyActor, gatewayFetch, sleepActor, startEngine, waitFor } from "./helpers/engine.mjs";
import { json, native, parse, serveActors } from "./helpers/actors.mjs";

describe("an actor served through the real engine", () => {
	let engine;
	let host;
	const calls = [];
	const record = (name, ctx) => calls.push({ name, actorId: ctx.actorId(), generation: ctx.generation() });
	const callsOf = (actorId) => calls.filter((c) => c.actorId === actorId);

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const counter = new native.NapiActorFactory(
			{
				createState: async (_err, { ctx, input }) => {
					record("createState", ctx);
					return json({ count: input ? parse(input).start : 0 });
				},
				onCreate: async (_err, { ctx }) => record("onCreate", ctx),
				onWake: async (_err, { ctx }) => record("onWake", ctx),
				onSleep: async (_err, { ctx }) => record("onSleep", ctx),
				onDestroy: async (_err, { ctx }) => record("onDestroy", ctx),
				onRequest: async (_err, { ctx, request }) => {
					const path = request.uri.split("?")[0];
					switch (path) {
						case "/increment": {
							const state = parse(ctx.state());
							state.count += 1;
							await ctx.saveState({ state: json(state) });
							return { status: 200, headers: { "content-type": "application/json" }, body: json(state) };
						}
						case "/echo":
							return {
								status: 201,
								headers: { "x-echo-method": request.method },
								body: Buffer.concat([Buffer.from(`${request.uri}|`), request.body ?? Buffer.alloc(0)]),
							};
						case "/throw":
							throw new Error("kaboom");
						case "/user-error":
							throw new Error(
								`__RIVET_ERROR_JSON__:${JSON.stringify({ group: "user", code: "bad_thing", message: "a bad thing" })}`,
							);
						case "/wrong-type":
							return "not a response";
						case "/hang":
							return new Promise(() => {});
						default:
							return { status: 404 };
					}
				},
			},
			{ onRequestTimeoutMs: 1_000 },
		);
		host = await serveActors(engine, { counter });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const create = (key, input) => createActor(engine.endpoint, { name: "counter", key, pool: host.pool, input });

	test("onRequest answers a request sent through the gateway", async () => {
		const actor = await create("echo", JSON.stringify({ start: 0 }));
		const res = await gatewayFetch(engine.endpoint, actor.actor_id, "/request/echo?x=1", {
			method: "POST",
			body: "hello",
		});
		assert.equal(res.status, 201);
		assert.equal(res.headers.get("x-echo-method"), "POST");
		assert.equal(res.headers.get("x-rivet-actor"), actor.actor_id);
		assert.equal(res.headers.get("x-rivet-actor-generation"), String(engine.firstGeneration));
		assert.equal(await res.text(), "/echo?x=1|hello");
		assert.deepEqual(
			callsOf(actor.actor_id).map((c) => c.name),
			["createState", "onCreate", "onWake"],
		);
	});

	test("sleep runs onSleep; the next request wakes a new generation with onWake and the saved state", async () => {
		const actor = await create("sleepy", JSON.stringify({ start: 10 }));
		const id = actor.actor_id;
		let res = await gatewayFetch(engine.endpoint, id, "/request/increment", { method: "POST" });
		assert.deepEqual(await res.json(), { count: 11 });

		await sleepActor(engine.endpoint, id);
		await waitFor(() => callsOf(id).some((c) => c.name === "onSleep"), { what: "onSleep" });

		res = await gatewayFetch(engine.endpoint, id, "/request/increment", { method: "POST" });
		assert.equal(res.status, 200);
		assert.deepEqual(await res.json(), { count: 12 });
		const [g1, g2] = [engine.firstGeneration, engine.firstGeneration + 1];
		assert.equal(res.headers.get("x-rivet-actor-generation"), String(g2));
		const names = callsOf(id).map((c) => `${c.name}:${c.generation}`);
		assert.deepEqual(names, [`createState:${g1}`, `onCreate:${g1}`, `onWake:${g1}`, `onSleep:${g1}`, `onWake:${g2}`]);
	});

	test("destroy runs onDestroy", async () => {
		const actor = await create("doomed");
		const id = actor.actor_id;
		const res = await gatewayFetch(engine.endpoint, id, "/request/increment", { method: "POST" });
		assert.equal(res.status, 200);
		await destroyActor(engine.endpoint, id);
		await waitFor(() => callsOf(id).some((c) => c.name === "onDestroy"), { what: "onDestroy" });
		assert.ok(!callsOf(id).some((c) => c.name === "onSleep"));
	});

	test("a callback that throws gives a structured 500 and the actor keeps serving", async () => {
		const actor = await create("thrower");
		const id = actor.actor_id;
		let res = await gatewayFetch(engine.endpoint, id, "/request/throw");
		assert.equal(res.status, 500);
		const body = await res.json();
		assert.equal(body.group, "core");
		assert.equal(body.code, "internal_error");
		assert.equal(body.message, "An internal error occurred", "internal details are masked");
		assert.equal(body.actor.actorId, id);

		res = await gatewayFetch(engine.endpoint, id, "/request/user-error");
		assert.equal(res.status, 500);
		assert.deepEqual(
			{ ...(await res.json()), actor: undefined },
			{ group: "user", code: "bad_thing", message: "a bad thing", actor: undefined },
		);

		res = await gatewayFetch(engine.endpoint, id, "/request/increment", { method: "POST" });
		assert.equal(res.status, 200);
	});

	test("a callback that returns the wrong type gives a structured error", async () => {
		const actor = await create("wrong-type");
		const res = await gatewayFetch(engine.endpoint, actor.actor_id, "/request/wrong-type");
		assert.equal(res.status, 500);
		const body = await res.json();
		assert.equal(`${body.group}.${body.code}`, "napi.invalid_return");
		const ok = await gatewayFetch(engine.endpoint, actor.actor_id, "/request/increment", { method: "POST" });
		assert.equal(ok.status, 200);
	});

	test("a callback that never settles times out with actor.action_timed_out", async () => {
		const actor = await create("hanger");
		const res = await gatewayFetch(engine.endpoint, actor.actor_id, "/request/hang");
		assert.equal(res.status, 408);
		const body = await res.json();
		assert.equal(`${body.group}.${body.code}`, "actor.action_timed_out");
		const ok = await gatewayFetch(engine.endpoint, actor.actor_id, "/request/increment", { method: "POST" });
		assert.equal(ok.status, 200);
	});

	test("framework routes answer without user code", async () => {
		const actor = await create("framework");
		let res = await gatewayFetch(engine.endpoint, actor.actor_id, "/health");
		assert.equal(res.status, 200);
		assert.equal(await res.text(), "ok");
		res = await gatewayFetch(engine.endpoint, actor.actor_id, "/nope");
		assert.equal(res.status, 404);
		assert.deepEqual(await res.json(), {
			group: "actor",
			code: "not_found",
			message: "Actor route '/nope' was not found.",
			metadata: { resource: "route", id: "/nope" },
			actor: { actorId: actor.actor_id, generation: engine.firstGeneration, key: "framework" },
		});
	});
});
