// Queues end to end: a RivetKit 2.3.19 app on this addon
// (examples/rivetkit-app/test/queues-cron-server.mjs, actor `worker`)
// driven by the official client on a real engine. The worker's `run` loop
// consumes `jobs` in order and answers each one; `tasks` waits in the
// queue; `locked` refuses publishers. Its limits: 4 messages, 512 bytes.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { createClient } from "rivetkit/client";

import { interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "queues";
const RESOLVE_TIMEOUT = "route_resolve_query_timeout";

/** The first call to a new actor; engine 2.3.19 now and then never places it (retried once). */
async function firstCall(t, what, call) {
	try {
		return await call();
	} catch (err) {
		if (err?.code !== RESOLVE_TIMEOUT) throw err;
		t.diagnostic(`${what}: the engine did not place the new actor (${RESOLVE_TIMEOUT}); retrying once`);
		return await call();
	}
}

const isError = (group, code) => (err) => {
	assert.equal(`${err.group}.${err.code}`, `${group}.${code}`, `${err.group}.${err.code}: ${err.message}`);
	return true;
};

describe("queues on a RivetKit app", () => {
	let engine;
	let app;
	let client;

	before(async () => {
		engine = await startEngine();
		app = startApp("test/queues-cron-server.mjs", {
			RIVET_ENDPOINT: engine.endpoint,
			RIVET_TOKEN: engine.token,
			RIVET_POOL: POOL,
		});
		await waitForOutput(app, /registry serving/);
		client = createClient({ endpoint: engine.endpoint, namespace: engine.namespace, token: engine.token, poolName: POOL });
	});

	after(async () => {
		if (app && !app.exited) await interrupt(app);
		await engine?.stop();
	});

	test("send without waiting; the run loop consumes in order", async (t) => {
		const worker = client.worker.getOrCreate(["order"]);
		assert.equal(await firstCall(t, "worker", () => worker.send("jobs", { n: 1 })), undefined);
		for (let n = 2; n <= 6; n++) await worker.send("jobs", { n });
		const done = await waitFor(
			async () => {
				const done = await worker.done();
				return done.length === 6 && done;
			},
			{ what: "six jobs done" },
		);
		assert.deepEqual(
			done.map((d) => d.n),
			[1, 2, 3, 4, 5, 6],
		);
	});

	test("send and wait for the consumer's answer", async (t) => {
		const worker = client.worker.getOrCreate(["answer"]);
		const result = await firstCall(t, "worker", () => worker.send("jobs", { n: 7 }, { wait: true, timeout: 30_000 }));
		assert.deepEqual(result, { status: "completed", response: { did: { n: 7 } } });
		// Nobody consumes `tasks`: the wait times out, the message stays queued.
		const timedOut = await worker.send("tasks", "later", { wait: true, timeout: 200 });
		assert.deepEqual(timedOut, { status: "timedOut" });
		assert.deepEqual(await worker.takeTasks(), ["later"]);
	});

	test("a full queue and an oversized message are structured errors; undeclared names queue nothing", async (t) => {
		const worker = client.worker.getOrCreate(["limits"]);
		await firstCall(t, "worker", () => worker.send("tasks", 0));
		for (let i = 1; i < 4; i++) await worker.send("tasks", i);
		await assert.rejects(worker.send("tasks", 4), (err) => {
			isError("queue", "full")(err);
			assert.match(err.message, /Limit is 4 messages/);
			return true;
		});
		// `c.queue.send` inside the actor hits the same limit.
		await assert.rejects(worker.sendSelf("x"), isError("queue", "full"));
		assert.deepEqual(await worker.takeTasks(), [0, 1, 2, 3]);

		await assert.rejects(worker.send("tasks", "x".repeat(600)), (err) => {
			isError("queue", "message_too_large")(err);
			assert.match(err.message, /Limit is 512 bytes/);
			return true;
		});
		await assert.rejects(worker.send("locked", 1), isError("auth", "forbidden"));
		// The reference's rule: a name the actor does not declare reports
		// completion and queues nothing.
		assert.deepEqual(await worker.send("undeclared", 1, { wait: true, timeout: 1_000 }), { status: "completed" });
		assert.deepEqual(await worker.takeTasks(), []);
		await worker.sendSelf("mine");
		assert.deepEqual(await worker.takeTasks(), ["mine"]);
	});

	test("the worker sleeps while its loop waits; messages sent meanwhile wake it and arrive in order", async (t) => {
		const worker = client.worker.getOrCreate(["sleeper"]);
		await firstCall(t, "worker", () => worker.send("jobs", { n: 0 }));
		const from = app.out.length;
		// Nothing else to do: its `run` loop waits on the queue, which does
		// not keep it awake (sleepTimeout 1.5 s).
		await waitForOutput(app, /worker sleeper going to sleep/, { from });
		const wakes = await worker.wakes();
		const woke = app.out.length;
		assert.ok(wakes >= 2, `woken again by the call (wakes: ${wakes})`);

		// Asleep again, then messages: the first wakes it, all are consumed in order.
		await waitForOutput(app, /worker sleeper going to sleep/, { from: woke });
		for (let n = 1; n <= 3; n++) await worker.send("jobs", { n });
		await worker.send("tasks", "kept");
		const done = await waitFor(
			async () => {
				const done = await worker.done();
				return done.length === 4 && done;
			},
			{ what: "the jobs sent while asleep" },
		);
		assert.deepEqual(
			done.map((d) => d.n),
			[0, 1, 2, 3],
		);
		// `tasks` waits across a sleep.
		const asleep = app.out.length;
		await worker.goToSleep();
		await waitForOutput(app, /worker sleeper going to sleep/, { from: asleep });
		assert.deepEqual(await worker.takeTasks(), ["kept"]);
	});
});
