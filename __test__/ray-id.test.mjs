// Ray IDs on invocations (reference 2.3.24): the caller's `x-rivet-ray-id`
// reaches the invocation's context, so RivetKit's `c.log` carries it and
// the actor's own outbound calls pass it on. The header is untrusted: only
// 1 to 30 characters of [A-Za-z0-9_-] count (a Rust unit test checks the
// bound exactly: crates/core/src/actor/hooks.rs).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createActor, gatewayFetch, startEngine } from "./helpers/engine.mjs";
import { json, native, serveActors } from "./helpers/actors.mjs";
import { actionFetch, cborEncode } from "./helpers/client.mjs";

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("ray IDs", () => {
	let engine;
	let host;
	let id;
	let relayId;

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const traced = new native.NapiActorFactory({
			createState: async () => json({}),
			onRequest: async (_err, { ctx }) => ({
				status: 200,
				body: Buffer.from(JSON.stringify(ctx.invocationTraceContext()?.rayId ?? null)),
			}),
			actions: {
				ray: async (_err, { ctx }) => {
					const app = ctx.withApplicationSpan(TRACEPARENT, null).invocationTraceContext();
					return cborEncode({
						rayId: ctx.invocationTraceContext()?.rayId ?? null,
						underSpan: { rayId: app?.rayId ?? null, traceId: app?.span?.traceId ?? null },
					});
				},
			},
		});
		// The run handler's invocation has no ray ID of its own: it takes
		// that of each queue message it receives (reference 2.3.24).
		const received = [];
		const relay = new native.NapiActorFactory({
			createState: async () => json({}),
			run: async (_err, { ctx }) => {
				const queue = ctx.queue();
				const before = ctx.invocationTraceContext()?.rayId ?? null;
				for (;;) {
					const message = await queue.next({ names: ["jobs"], timeoutMs: 60_000 }).catch(() => null);
					if (!message) return;
					received.push({ before, messageRay: message.rayId(), runRay: ctx.invocationTraceContext()?.rayId ?? null });
				}
			},
			actions: {
				send: async (_err, { ctx }) => {
					await ctx.queue().send("jobs", cborEncode(1));
					return cborEncode(received.length);
				},
				received: async () => cborEncode(received),
			},
		});
		host = await serveActors(engine, { traced, relay });
		relayId = (await createActor(engine.endpoint, { name: "relay", key: "relay", pool: host.pool })).actor_id;
		({ actor_id: id } = await createActor(engine.endpoint, { name: "traced", key: "traced", pool: host.pool }));
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const actionRay = async (headers) => {
		const res = await actionFetch(engine, id, "ray", { encoding: "json", headers });
		assert.equal(res.status, 200, JSON.stringify(res.body));
		return res.body.output;
	};

	test("an HTTP action sees its caller's ray ID, also under an application span", async () => {
		assert.deepEqual(await actionRay({ "x-rivet-ray-id": "ray-abc_1" }), {
			rayId: "ray-abc_1",
			underSpan: { rayId: "ray-abc_1", traceId: "4bf92f3577b34da6a3ce929d0e0e4736" },
		});
	});

	test("without a valid header the invocation has the gateway's own ray ID, never the caller's bad value", async (t) => {
		// Engine 2.3.19's gateway gives every request a ray ID when the
		// caller sent none it accepts.
		for (const headers of [{}, { "x-rivet-ray-id": "not a ray!" }, { "x-rivet-ray-id": "r".repeat(31) }]) {
			const { rayId } = await actionRay(headers);
			t.diagnostic(`${JSON.stringify(headers)} -> ${JSON.stringify(rayId)}`);
			if (rayId === null) continue;
			assert.match(rayId, /^[A-Za-z0-9_-]{1,30}$/, JSON.stringify(headers));
			assert.notEqual(rayId, headers["x-rivet-ray-id"]);
		}
	});

	test("onRequest sees its caller's ray ID", async () => {
		const res = await gatewayFetch(engine.endpoint, id, "/request/anything", {
			headers: { "x-rivet-ray-id": "r".repeat(30) },
		});
		assert.equal(res.status, 200);
		assert.equal(await res.json(), "r".repeat(30));
	});

	test("a queue message keeps its sender's ray ID, and the run handler that receives it takes it", async () => {
		const send = await actionFetch(engine, relayId, "send", {
			encoding: "json",
			headers: { "x-rivet-ray-id": "ray-q1" },
		});
		assert.equal(send.status, 200, JSON.stringify(send.body));
		let got = [];
		for (let i = 0; i < 100 && got.length === 0; i++) {
			const res = await actionFetch(engine, relayId, "received", { encoding: "json" });
			got = res.body.output;
			if (got.length === 0) await new Promise((r) => setTimeout(r, 50));
		}
		assert.deepEqual(got, [{ before: null, messageRay: "ray-q1", runRay: "ray-q1" }]);
	});
});
