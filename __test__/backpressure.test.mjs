// Requests that reach an actor while its generation starts slowly, on the
// real engine, with the envoy's per-actor inbox cap set to 1
// (RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR; docs/admission.md, "Check 0").
// The gateway holds them until the generation reports itself running and
// then sends them in a burst, so how many the inbox refuses depends on
// timing: the test asserts what each answer may be, not how many of each
// (the count is printed). The cap itself is tested exactly in the envoy
// client's unit tests (vendor/rivet-envoy-client/src/events.rs).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createActor, gatewayFetch, startEngine, waitFor } from "./helpers/engine.mjs";
import { json, native, serveActors } from "./helpers/actors.mjs";
import { actionFetch } from "./helpers/client.mjs";

describe("a generation that starts slowly", () => {
	let engine;
	let host;
	let release;
	let wakes = 0;
	const previousCap = process.env.RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR;

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		process.env.RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR = "1";
		const slow = new native.NapiActorFactory({
			createState: async () => json({ n: 0 }),
			onWake: async () => {
				wakes += 1;
				await new Promise((resolve) => {
					release = resolve;
				});
			},
			onRequest: async () => ({ status: 200, body: Buffer.from("served") }),
		});
		host = await serveActors(engine, { slow });
	});

	after(async () => {
		release?.();
		if (previousCap === undefined) delete process.env.RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR;
		else process.env.RIVETKIT_MAX_QUEUED_REQUESTS_PER_ACTOR = previousCap;
		await host?.stop();
		await engine?.stop();
	});

	test("a burst past the inbox cap is served or refused with envoy.actor_overloaded, never lost", async (t) => {
		const { actor_id: id } = await createActor(engine.endpoint, { name: "slow", key: "slow", pool: host.pool });
		await waitFor(() => wakes === 1 && release, { timeoutMs: 20_000, what: "the start hook to run" });
		const requests = Array.from({ length: 8 }, (_, i) =>
			gatewayFetch(engine.endpoint, id, `/request/${i}`).then(async (res) => ({
				status: res.status,
				error: res.headers.get("x-rivet-error"),
				body: await res.text(),
			})),
		);
		// Let the gateway take every request before the start finishes.
		await new Promise((resolve) => setTimeout(resolve, 1000));
		release();
		const answers = await Promise.all(requests);
		let served = 0;
		let refused = 0;
		for (const answer of answers) {
			if (answer.status === 200) {
				assert.equal(answer.body, "served");
				served += 1;
				continue;
			}
			assert.equal(answer.status, 503, JSON.stringify(answer));
			assert.equal(answer.error, "envoy.actor_overloaded", JSON.stringify(answer));
			const body = JSON.parse(answer.body);
			assert.deepEqual([body.group, body.code], ["envoy", "actor_overloaded"]);
			assert.equal(typeof body.message, "string");
			assert.equal(body.actor.actorId, id);
			refused += 1;
		}
		t.diagnostic(`8 requests during a slow start, inbox cap 1: ${served} served, ${refused} refused`);
		assert.ok(served >= 1, "no request was served");

		// The actor keeps serving.
		const later = await gatewayFetch(engine.endpoint, id, "/request/after");
		assert.equal(later.status, 200);
		assert.equal(await later.text(), "served");
	});
});

describe("maxActions", () => {
	let engine;
	let host;
	let running = 0;
	let most = 0;
	const releases = [];

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const capped = new native.NapiActorFactory(
			{
				createState: async () => json({}),
				actions: {
					hold: async () => {
						running += 1;
						most = Math.max(most, running);
						await new Promise((resolve) => releases.push(resolve));
						running -= 1;
						return Buffer.from([0xf6]);
					},
				},
			},
			{ maxActions: 2 },
		);
		host = await serveActors(engine, { capped });
	});

	after(async () => {
		for (const release of releases) release();
		await host?.stop();
		await engine?.stop();
	});

	test("at most maxActions handlers run at once; the others wait their turn and all answer", async (t) => {
		const { actor_id: id } = await createActor(engine.endpoint, { name: "capped", key: "capped", pool: host.pool });
		const calls = Array.from({ length: 5 }, () => actionFetch(engine, id, "hold", { encoding: "json" }));
		await waitFor(() => running === 2, { timeoutMs: 20_000, what: "two handlers to run" });
		// A third handler would start within this pause if the cap did not hold.
		await new Promise((resolve) => setTimeout(resolve, 500));
		assert.equal(running, 2);
		let released = 0;
		while (released < 5) {
			await waitFor(() => releases.length > released, { timeoutMs: 20_000, what: `handler ${released + 1} to start` });
			releases[released++]();
		}
		const answers = await Promise.all(calls);
		for (const answer of answers) assert.equal(answer.status, 200, JSON.stringify(answer.body));
		t.diagnostic(`5 concurrent actions, maxActions 2: at most ${most} ran at once`);
		assert.equal(most, 2);
	});

	test("a config that is not a positive number is refused", () => {
		for (const maxActions of [0, -1, Number.NaN, 1.5]) {
			assert.throws(
				() => new native.NapiActorFactory({}, { maxActions }),
				(err) => /maxActions/.test(err.message),
				String(maxActions),
			);
		}
	});
});
