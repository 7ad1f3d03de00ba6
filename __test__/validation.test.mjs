// Argument validation of the native methods that take a time, a size or
// bytes: every bad value is a structured `napi.invalid_argument` error
// (`err.code`, `err.group`, `err.rivetCode`, `err.metadata.argument`, the
// `__RIVET_ERROR_JSON__:` message), thrown by synchronous methods and
// rejected by the ones that return a promise, and nothing is applied.
//
// Context methods run inside the actor's onRequest ("jobs", as in
// kv.test.mjs): the test registers a function, a raw request runs it with
// the live context, and its result or error comes back unchanged.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { createActor, startEngine, TOKEN_PROTOCOL, waitFor } from "./helpers/engine.mjs";
import { actorJobs, json, native, serveActors } from "./helpers/actors.mjs";
import { BRIDGE_PREFIX } from "./helpers/client.mjs";

const B = (s) => Buffer.from(s);
const MAX_TIME = 8.64e15;
const INVALID = "napi.invalid_argument";

/** Asserts that `err` is the structured argument error for `argument`. */
function assertInvalid(err, argument) {
	assert.equal(err.code, INVALID, err.message);
	assert.equal(err.group, "napi");
	assert.equal(err.rivetCode, "invalid_argument");
	assert.ok(err.message.startsWith(BRIDGE_PREFIX), err.message);
	const body = JSON.parse(err.message.slice(BRIDGE_PREFIX.length));
	assert.equal(body.code, "invalid_argument");
	if (argument !== undefined) {
		assert.equal(err.metadata?.argument, argument, err.message);
		assert.ok(body.message.startsWith(`Invalid native argument '${argument}': `), body.message);
	}
	return true;
}

const throwsInvalid = (fn, argument) => assert.throws(fn, (err) => assertInvalid(err, argument));
const rejectsInvalid = (promise, argument) => assert.rejects(promise, (err) => assertInvalid(err, argument));

describe("NapiActorFactory config numbers (no engine)", () => {
	const hooks = { onRequest: async () => ({ status: 200 }) };

	test("times must be finite, not negative and within 8.64e15 ms", () => {
		for (const value of [NaN, Infinity, -Infinity, -1, 1e300]) {
			throwsInvalid(() => new native.NapiActorFactory(hooks, { sleepTimeoutMs: value }), "config.sleepTimeoutMs");
			throwsInvalid(() => new native.NapiActorFactory(hooks, { actionTimeoutMs: value }), "config.actionTimeoutMs");
		}
		throwsInvalid(() => new native.NapiActorFactory(hooks, { stateSaveIntervalMs: NaN }), "config.stateSaveIntervalMs");
		throwsInvalid(
			() => new native.NapiActorFactory(hooks, { connectionLivenessTimeoutMs: -5 }),
			"config.connectionLivenessTimeoutMs",
		);
	});

	test("sizes must be whole numbers, not negative", () => {
		for (const value of [NaN, -1, 1.5, Infinity]) {
			throwsInvalid(() => new native.NapiActorFactory(hooks, { maxSchedules: value }), "config.maxSchedules");
			throwsInvalid(
				() => new native.NapiActorFactory(hooks, { maxIncomingMessageSize: value }),
				"config.maxIncomingMessageSize",
			);
		}
		throwsInvalid(() => new native.NapiActorFactory(hooks, { maxQueueSize: -1 }), "config.maxQueueSize");
	});

	test("wrong types are structured errors too, not napi's bare InvalidArg", () => {
		throwsInvalid(() => new native.NapiActorFactory(hooks, { sleepTimeoutMs: "30000" }), "config");
		throwsInvalid(() => new native.NapiActorFactory(hooks, 42), "config");
		throwsInvalid(() => new native.NapiActorFactory(42, {}), "callbacks");
	});

	test("valid numbers are accepted", () => {
		new native.NapiActorFactory(hooks, {
			sleepTimeoutMs: 0,
			actionTimeoutMs: 1.5,
			stateSaveIntervalMs: MAX_TIME,
			maxSchedules: 0,
			maxIncomingMessageSize: 2 ** 40,
		});
		new native.NapiActorFactory(hooks, undefined);
		new native.NapiActorFactory(hooks, null);
	});
});

describe("context, schedule, kv, conn, websocket and workflow batch arguments on the real engine", () => {
	let engine;
	let host;
	const jobs = actorJobs();
	/** What the raw WebSocket test observed inside onWebSocket. */
	let wsOutcome = null;

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const factory = new native.NapiActorFactory(
			{
				createState: async () => json({ n: 1 }),
				onRequest: async (_err, { ctx, request }) => {
					const path = request.uri.split("?")[0];
					const job = jobs.job(path);
					if (!job) return { status: 404 };
					await job(ctx);
					return { status: 200 };
				},
				onWebSocket: async (_err, { ws }) => {
					const outcome = {};
					const capture = async (name, fn) => {
						try {
							await fn();
							outcome[name] = "ok";
						} catch (err) {
							outcome[name] = err;
						}
					};
					await capture("sendString", () => ws.send("text", false));
					await capture("sendNoBinaryFlag", () => ws.send(B("x"), "yes"));
					await capture("closeNaN", () => ws.close(NaN));
					await capture("closeReserved", () => ws.close(1005));
					await capture("closeTooBig", () => ws.close(70000));
					await capture("closeLongReason", () => ws.close(1000, "x".repeat(124)));
					await capture("sendValid", () => ws.send(B("still open"), false));
					await capture("closeValid", () => ws.close(4000, "bye"));
					wsOutcome = outcome;
				},
			},
			{ onRequestTimeoutMs: 60_000 },
		);
		host = await serveActors(engine, { validate: factory });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const create = async (key) =>
		(await createActor(engine.endpoint, { name: "validate", key, pool: host.pool })).actor_id;

	/** Runs `fn(ctx)` inside the actor's onRequest; returns its value or throws its error. */
	const inActor = (actorId, fn) => jobs.inActor(engine.endpoint, actorId, fn);

	test("setAlarm: NaN, ±Infinity, out of the Date range and non-numbers throw; valid values work", async () => {
		const id = await create("alarm");
		await inActor(id, async (ctx) => {
			for (const value of [NaN, Infinity, -Infinity, 1e300, -1e300, MAX_TIME + 1]) {
				throwsInvalid(() => ctx.setAlarm(value), "timestampMs");
			}
			throwsInvalid(() => ctx.setAlarm("soon"), "timestampMs");
			throwsInvalid(() => ctx.setAlarm({}), "timestampMs");
			ctx.setAlarm(Date.now() + 3_600_000);
			ctx.setAlarm(undefined);
			ctx.setAlarm(null);
			ctx.setAlarm();
		});
	});

	test("setRunWakeAt validates its timestamp before anything else", async () => {
		const id = await create("run-wake");
		await inActor(id, async (ctx) => {
			await rejectsInvalid(ctx.setRunWakeAt(NaN), "timestampMs");
			await ctx.setRunWakeAt(null);
		});
	});

	test("schedule().after/at: bad times and non-Buffer args reject, and nothing is scheduled", async () => {
		const id = await create("schedule");
		await inActor(id, async (ctx) => {
			const s = ctx.schedule();
			for (const value of [NaN, Infinity, -Infinity, -1, 1e300, "10"]) {
				await rejectsInvalid(s.after(value, "tick", B("")), "durationMs");
			}
			for (const value of [NaN, Infinity, -Infinity, 1e300, -(MAX_TIME + 1), "now"]) {
				await rejectsInvalid(s.at(value, "tick", B("")), "timestampMs");
			}
			await rejectsInvalid(s.after(1000, "tick", "not a buffer"), "args");
			await rejectsInvalid(s.at(Date.now() + 1000, "tick", 42), "args");
			await rejectsInvalid(s.after(1000, 7, B("")), "actionName");
			assert.deepEqual(await s.list(), []);
			// A valid one still works.
			const eventId = await s.after(3_600_000, "tick", B(""));
			assert.equal((await s.list()).length, 1);
			assert.equal(await s.cancel(eventId), true);
		});
	});

	test("saveState takes a StateDeltaPayload object with a Buffer state", async () => {
		const id = await create("save");
		await inActor(id, async (ctx) => {
			await rejectsInvalid(ctx.saveState(42), "payload");
			await rejectsInvalid(ctx.saveState("state"), "payload");
			await rejectsInvalid(ctx.saveState(null), "payload");
			await rejectsInvalid(ctx.saveState([B("x")]), "payload");
			await rejectsInvalid(ctx.saveState({ state: "not a buffer" }), "payload");
			await rejectsInvalid(ctx.saveState({ state: 42 }), "payload");
			assert.deepEqual(JSON.parse(ctx.state().toString()), { n: 1 }, "nothing was applied");
			await ctx.saveState({});
			await ctx.saveState({ state: json({ n: 2 }) });
			assert.deepEqual(JSON.parse(ctx.state().toString()), { n: 2 });
		});
	});

	test("requestSave / requestSaveAndWait: maxWaitMs must be a finite, non-negative number", async () => {
		const id = await create("request-save");
		await inActor(id, async (ctx) => {
			for (const value of [NaN, Infinity, -1, 1e300]) {
				throwsInvalid(() => ctx.requestSave({ maxWaitMs: value }), "opts.maxWaitMs");
				await rejectsInvalid(ctx.requestSaveAndWait({ maxWaitMs: value }), "opts.maxWaitMs");
			}
			throwsInvalid(() => ctx.requestSave({ maxWaitMs: "10" }), "opts");
			throwsInvalid(() => ctx.requestSave({ immediate: "yes" }), "opts");
			throwsInvalid(() => ctx.requestSave(42), "opts");
			ctx.requestSave();
			ctx.requestSave({ immediate: true });
			await ctx.requestSaveAndWait({ maxWaitMs: 0 });
		});
	});

	test("kv: keys and values must be Buffers, limit a whole number in range", async () => {
		const id = await create("kv");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			await rejectsInvalid(kv.get("key"), "key");
			await rejectsInvalid(kv.get(undefined), "key");
			await rejectsInvalid(kv.put(B("k"), 42), "value");
			await rejectsInvalid(kv.put(42, B("v")), "key");
			await rejectsInvalid(kv.delete([1, 2]), "key");
			await rejectsInvalid(kv.deleteRange(B("a"), null), "end");
			await rejectsInvalid(kv.listPrefix("p"), "prefix");
			for (const limit of [NaN, -1, 1.5, Infinity, 2 ** 32, "3"]) {
				await rejectsInvalid(kv.listPrefix(B(""), { limit }), typeof limit === "string" ? "options" : "options.limit");
				await rejectsInvalid(
					kv.listRange(B(""), B("\xff"), { limit }),
					typeof limit === "string" ? "options" : "options.limit",
				);
			}
			await rejectsInvalid(kv.listRange(B("a"), "z"), "end");
			await rejectsInvalid(kv.batchGet("keys"), "keys");
			await rejectsInvalid(kv.batchGet([B("a"), "b"]), "keys[1]");
			await rejectsInvalid(kv.batchDelete([42]), "keys[0]");
			await rejectsInvalid(
				kv.batchPut([
					{ key: B("a"), value: B("1") },
					{ key: B("b"), value: "2" },
				]),
				"entries[1]",
			);
			await rejectsInvalid(kv.batchPut([42]), "entries[0]");
			assert.deepEqual(await kv.listPrefix(B("")), [], "nothing was written");
			// Valid calls still work, including limit 0 and Uint8Array keys.
			await kv.put(B("a"), B("1"));
			await kv.put(new Uint8Array([0x62]), B("2"));
			assert.equal((await kv.listPrefix(B(""), { limit: 1 })).length, 1);
			assert.equal((await kv.listPrefix(B(""), { limit: 0 })).length, 0);
			assert.equal((await kv.listPrefix(B(""), { limit: undefined })).length, 2);
		});
	});

	test("broadcast, keep-awake ids and connections: bad bytes and ids throw", async () => {
		const id = await create("conn");
		await inActor(id, async (ctx) => {
			throwsInvalid(() => ctx.broadcast("event", "not a buffer"), "args");
			throwsInvalid(() => ctx.broadcast(42, B("")), "name");
			for (const value of [NaN, -1, 1.5, 2 ** 32, "1"]) {
				throwsInvalid(() => ctx.endKeepAwake(value), "regionId");
				throwsInvalid(() => ctx.endWebsocketCallback(value), "regionId");
			}
			ctx.endKeepAwake(ctx.beginKeepAwake());
			await rejectsInvalid(ctx.connectConn("params"), "params");
			await rejectsInvalid(ctx.connectConn(B(""), 42), "request");
			const conn = await ctx.connectConn(B(""));
			try {
				throwsInvalid(() => conn.setState("state"), "state");
				throwsInvalid(() => conn.send("event", 42), "args");
				conn.setState(B("ok"));
				assert.deepEqual(conn.state(), B("ok"));
			} finally {
				await conn.disconnect();
			}
		});
	});

	test("WebSocket.send/close: bad data, flags, codes and reasons are refused and the socket stays usable", async () => {
		const id = await create("ws");
		const url = `ws://127.0.0.1:${engine.guardPort}/gateway/${encodeURIComponent(id)}/websocket/check`;
		const ws = new WebSocket(url, ["rivet", TOKEN_PROTOCOL]);
		ws.on("error", () => {});
		const messages = [];
		ws.on("message", (data) => messages.push(Buffer.from(data).toString()));
		const closed = new Promise((resolve) =>
			ws.on("close", (code, reason) => resolve({ code, reason: reason.toString() })),
		);
		await waitFor(() => wsOutcome !== null, { timeoutMs: 20_000, what: "onWebSocket ran its checks" });
		assertInvalid(wsOutcome.sendString, "data");
		assertInvalid(wsOutcome.sendNoBinaryFlag, "binary");
		assertInvalid(wsOutcome.closeNaN, "code");
		assertInvalid(wsOutcome.closeReserved, "code");
		assertInvalid(wsOutcome.closeTooBig, "code");
		assertInvalid(wsOutcome.closeLongReason, "reason");
		assert.equal(wsOutcome.sendValid, "ok");
		assert.equal(wsOutcome.closeValid, "ok");
		assert.deepEqual(await closed, { code: 4000, reason: "bye" }, "the first valid close is the one the client sees");
		assert.deepEqual(messages, ["still open"]);
	});

	// Its transaction opens the actor's SQLite database.
	test("saveStateAndWorkflowBatch and beginStateTransaction refuse malformed arguments", async () => {
		const id = await create("workflow-batch");
		await inActor(id, async (ctx) => {
			await rejectsInvalid(ctx.saveStateAndWorkflowBatch("rows"), "writes");
			await rejectsInvalid(ctx.saveStateAndWorkflowBatch([42]), "writes[0]");
			await rejectsInvalid(ctx.saveStateAndWorkflowBatch([{ key: "k", value: B("v") }]), "writes[0]");
			await rejectsInvalid(ctx.beginStateTransaction(-1), "timeoutMs");
			const tx = await ctx.beginStateTransaction(5_000);
			await rejectsInvalid(tx.execute(42), "sql");
			await rejectsInvalid(tx.commit("state"), "payload");
			await tx.rollback();
			await ctx.saveStateAndWorkflowBatch([{ key: B("k"), value: B("v") }]);
		});
	});
});
