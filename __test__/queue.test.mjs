// Queues end to end. First the RivetKit app on this addon under both
// versions (test/queues-cron-server.mjs of the example, actor `worker`;
// rivetkit 2.3.19 on engine 2.3, rivetkit 3.0.0 on engine 3.0) driven by
// that version's official client: the worker's `run` loop
// consumes `jobs` in order and answers each one; `tasks` waits in the
// queue; `locked` refuses publishers. Its limits: 4 messages, 512 bytes.
// Then the contract's `Queue` class directly, for what RivetKit does not
// call (`tryNext*`, `waitForNames`, `completePersisted`, `reset`, ...).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { actorJobs, native, serveActors } from "./helpers/actors.mjs";
import { engineArchOf, interrupt, isError, startAppWithClient, waitForOutput } from "./helpers/app.mjs";
import { cborDecode, cborEncode } from "./helpers/client.mjs";
import { getOrCreateActor, startEngine, waitFor } from "./helpers/engine.mjs";

const POOL = "queues";

for (const version of ["2", "3"])
	describe(`queues on a RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} app`, () => {
		let engine;
		let app;
		let client;

		before(async () => {
			engine = await startEngine({ arch: engineArchOf(version) });
			({ app, client } = await startAppWithClient("test/queues-cron-server.mjs", {
				rivetkit: version,
				engine,
				pool: POOL,
			}));
		});

		after(async () => {
			if (app && !app.exited) await interrupt(app);
			await engine?.stop();
		});

		test("send without waiting; the run loop consumes in order", async () => {
			const worker = client.worker.getOrCreate(["order"]);
			assert.equal(await worker.send("jobs", { n: 1 }), undefined);
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

		test("send and wait for the consumer's answer", async () => {
			const worker = client.worker.getOrCreate(["answer"]);
			const result = await worker.send("jobs", { n: 7 }, { wait: true, timeout: 30_000 });
			assert.deepEqual(result, { status: "completed", response: { did: { n: 7 } } });
			// Nobody consumes `tasks`: the wait times out, the message stays queued.
			const timedOut = await worker.send("tasks", "later", { wait: true, timeout: 200 });
			assert.deepEqual(timedOut, { status: "timedOut" });
			assert.deepEqual(await worker.takeTasks(), ["later"]);
		});

		test("a full queue and an oversized message are structured errors; undeclared names queue nothing", async () => {
			const worker = client.worker.getOrCreate(["limits"]);
			await worker.send("tasks", 0);
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

		test("the worker sleeps while its loop waits; messages sent meanwhile wake it and arrive in order", async () => {
			const worker = client.worker.getOrCreate(["sleeper"]);
			await worker.send("jobs", { n: 0 });
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

describe("the Queue class, directly", () => {
	let engine;
	let host;
	let actorId;
	const jobs = actorJobs();
	const inActor = (fn) => jobs.inActor(engine.endpoint, actorId, fn);
	const code = (expected) => (err) => {
		assert.equal(err.code, expected, err.message);
		return true;
	};

	before(async () => {
		engine = await startEngine();
		const factory = new native.NapiActorFactory(
			{
				createState: async () => cborEncode({}),
				onRequest: async (_err, { ctx, request }) => {
					const job = jobs.job(request.uri.split("?")[0]);
					if (!job) return { status: 404 };
					await job(ctx);
					return { status: 200 };
				},
			},
			{ maxQueueSize: 3, sleepTimeoutMs: 60_000 },
		);
		host = await serveActors(engine, { q: factory });
		actorId = (await getOrCreateActor(engine.endpoint, { name: "q", key: "direct", pool: host.pool })).actor.actor_id;
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	test("send, receive in order, bigint ids, the synchronous tryNext, inspect and reset", async () => {
		const out = await inActor(async (ctx) => {
			const queue = ctx.queue();
			const a = await queue.send("a", cborEncode(1));
			const b = await queue.send("b", cborEncode(2));
			await queue.send("a", cborEncode(3));
			await assert.rejects(queue.send("a", cborEncode(4)), code("queue.full"));
			const inspected = await queue.inspectMessages();
			const onlyB = queue.tryNext({ names: ["b"] });
			const rest = queue.tryNextBatch({ count: 5 });
			const none = queue.tryNext();
			await queue.send("c", cborEncode(5));
			await queue.reset();
			return {
				ids: [typeof a.id(), b.id() - a.id()],
				meta: [a.name(), cborDecode(a.body()), typeof a.createdAt(), a.isCompletable()],
				inspected: inspected.map((m) => [m.name, typeof m.id, typeof m.createdAtMs]),
				onlyB: cborDecode(onlyB.body()),
				rest: rest.map((m) => cborDecode(m.body())),
				none,
				afterReset: (await queue.inspectMessages()).length,
				maxSize: queue.maxSize(),
			};
		});
		assert.deepEqual(out, {
			ids: ["bigint", 1n],
			meta: ["a", 1, "number", false],
			inspected: [
				["a", "number", "number"],
				["b", "number", "number"],
				["a", "number", "number"],
			],
			onlyB: 2,
			rest: [1, 3],
			none: null,
			afterReset: 0,
			maxSize: 3,
		});
	});

	test("completable messages, completePersisted and an answered enqueueAndWait", async () => {
		const out = await inActor(async (ctx) => {
			const queue = ctx.queue();
			const answer = queue.enqueueAndWait("job", cborEncode("work"), { timeoutMs: 10_000 });
			const [message] = await queue.nextBatch({ names: ["job"], completable: true, timeoutMs: 5_000 });
			const again = await queue.next({ completable: true, timeoutMs: 0 });
			await message.complete(cborEncode("done"));
			await assert.rejects(message.complete(), code("queue.already_completed"));
			const plain = await queue.send("job", cborEncode(1));
			await assert.rejects(plain.complete(), code("queue.complete_not_configured"));
			const taken = await queue.waitForNames(["job"], { completable: true, timeoutMs: 1_000 });
			const wrongName = await queue.completePersisted(taken.id(), "other");
			const completed = await queue.completePersisted(taken.id(), "job", cborEncode(null));
			return {
				answer: cborDecode(await answer),
				again: again.id() === message.id() && again.isCompletable(),
				wrongName,
				completed,
				left: (await queue.inspectMessages()).length,
			};
		});
		assert.deepEqual(out, { answer: "done", again: true, wrongName: false, completed: true, left: 0 });
	});

	test("timeouts, signals and bad arguments", async () => {
		await inActor(async (ctx) => {
			const queue = ctx.queue();
			assert.deepEqual(await queue.nextBatch({ timeoutMs: 20 }), []);
			assert.equal(await queue.next({ timeoutMs: 0 }), null);
			await assert.rejects(queue.waitForNames(["x"], { timeoutMs: 20 }), code("queue.timed_out"));
			await assert.rejects(queue.waitForNamesAvailable(["x"], { timeoutMs: 20 }), code("queue.timed_out"));
			await assert.rejects(queue.enqueueAndWait("x", cborEncode(1), { timeoutMs: 20 }), code("queue.timed_out"));
			const available = queue.waitForNamesAvailable(["x", "y"]);
			assert.deepEqual(
				(await queue.inspectMessages()).map((m) => m.name),
				["x"],
			);
			await available;
			await queue.reset();

			const signal = new native.CancellationToken();
			const waiting = queue.next({ names: ["never"] }, signal);
			signal.cancel();
			await assert.rejects(waiting, code("actor.aborted"));

			await assert.rejects(queue.send(1, cborEncode(1)), code("napi.invalid_argument"));
			await assert.rejects(queue.send("x", "not a buffer"), code("napi.invalid_argument"));
			await assert.rejects(queue.nextBatch({ count: 1.5 }), code("napi.invalid_argument"));
			await assert.rejects(queue.next({ timeoutMs: -1 }), code("napi.invalid_argument"));
			await assert.rejects(queue.next(undefined, {}), code("napi.invalid_argument"));
			await assert.rejects(queue.completePersisted(-1n, "x"), code("napi.invalid_argument"));
			assert.throws(() => queue.tryNextBatch({ count: "2" }), code("napi.invalid_argument"));
		});
	});
});
