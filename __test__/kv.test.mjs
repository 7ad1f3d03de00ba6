// `ActorContext.kv()` end to end against the real engine.
//
// The actor runs "jobs": a test registers a function, then sends a raw
// request (`/request/job/<id>`) through the gateway; the actor's onRequest
// runs the function with its live context. Results and errors (with their
// `code`) come back to the test unchanged, since both live in this process.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";

import { createActor, gatewayFetch, sleepActor, startEngine, waitFor } from "./helpers/engine.mjs";
import { actorJobs, json, native, parse, serveActors } from "./helpers/actors.mjs";

const B = (s) => Buffer.from(s);
const EMPTY = Buffer.alloc(0);
const keysOf = (entries) => entries.map((e) => e.key.toString("latin1"));
const MAX_KEY = 2043;
const MAX_VALUE = 128 * 1024;

describe("ctx.kv() on the real engine", () => {
	let engine;
	let host;
	const jobs = actorJobs();
	const events = [];
	const eventsOf = (id) => events.filter((e) => e.actorId === id).map((e) => e.name);
	/** Kv handles kept past their generation, by actor id. */
	const kept = new Map();

	before(async () => {
		engine = await startEngine({ arch: "v3" });
		const factory = new native.NapiActorFactory(
			{
				createState: async () => json({ n: 1 }),
				onCreate: async (_err, { ctx }) => {
					// Before the generation started: writes are accepted.
					await ctx.kv().put(B("created"), B("in onCreate"));
				},
				onWake: async (_err, { ctx }) => {
					events.push({ actorId: ctx.actorId(), name: `wake:${ctx.generation()}` });
				},
				onSleep: async (_err, { ctx }) => {
					await ctx.kv().put(B("slept"), B(String(ctx.generation())));
					kept.set(ctx.actorId(), ctx.kv());
					events.push({ actorId: ctx.actorId(), name: `sleep:${ctx.generation()}` });
				},
				onRequest: async (_err, { ctx, request }) => {
					const path = request.uri.split("?")[0];
					const job = jobs.job(path);
					if (job) {
						await job(ctx);
						return { status: 200, headers: { "x-generation": String(ctx.generation()) } };
					}
					if (path === "/too-large") {
						// Not caught: the client gets the structured error.
						await ctx.kv().put(B("big"), Buffer.alloc(MAX_VALUE + 1));
						return { status: 200 };
					}
					return { status: 404 };
				},
			},
			{ onRequestTimeoutMs: 120_000 },
		);
		host = await serveActors(engine, { kv: factory });
	});

	after(async () => {
		await host?.stop();
		await engine?.stop();
	});

	const create = async (key) => (await createActor(engine.endpoint, { name: "kv", key, pool: host.pool })).actor_id;

	/** Runs `fn(ctx)` inside the actor's onRequest; returns its value or throws its error. */
	const inActor = (actorId, fn) => jobs.inActor(engine.endpoint, actorId, fn);

	const rejectsWith = (promise, code) =>
		assert.rejects(promise, (err) => {
			assert.equal(err.code, code, err.message);
			return true;
		});

	test("get, put and delete; empty values and binary keys", async () => {
		const id = await create("basic");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			assert.equal(await kv.get(B("missing")), null);
			assert.equal(await kv.put(B("k"), B("v")), undefined);
			assert.deepEqual(await kv.get(B("k")), B("v"));
			await kv.put(B("k"), B("w"));
			assert.deepEqual(await kv.get(B("k")), B("w"));
			assert.equal(await kv.delete(B("k")), undefined);
			assert.equal(await kv.get(B("k")), null);
			await kv.delete(B("never there"));

			await kv.put(B("empty"), EMPTY);
			const empty = await kv.get(B("empty"));
			assert.ok(Buffer.isBuffer(empty));
			assert.equal(empty.length, 0);

			const binary = Buffer.from([0, 1, 0xff, 0, 4]);
			await kv.put(binary, Buffer.from([0, 0, 0]));
			assert.deepEqual(await kv.get(binary), Buffer.from([0, 0, 0]));
			await kv.put(EMPTY, B("the empty key"));
			assert.deepEqual(await kv.get(EMPTY), B("the empty key"));
		});
	});

	test("the runtime's records are invisible and untouchable", async () => {
		const id = await create("isolation");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			await ctx.saveState({ state: json({ n: 42 }) });
			await kv.batchPut([
				{ key: B("a"), value: B("1") },
				{ key: B("b"), value: B("2") },
			]);
			// `created` was written by onCreate; nothing else is there.
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY)), ["a", "b", "created"]);
			assert.deepEqual(keysOf(await kv.listRange(EMPTY, EMPTY)), ["a", "b", "created"]);
			assert.deepEqual(keysOf(await kv.listRange(Buffer.from([0]), Buffer.from([0xff]))), ["a", "b", "created"]);
			// The runtime's record key, seen from user space, is just a user key.
			assert.equal(await kv.get(Buffer.from([1])), null);

			await kv.deleteRange(EMPTY, EMPTY);
			await kv.deleteRange(Buffer.from([0]), Buffer.from([0xff, 0xff]));
			assert.deepEqual(await kv.listPrefix(EMPTY), []);
		});
		// The state record survived: a new generation loads it.
		await sleepActor(engine.endpoint, id);
		await waitFor(() => eventsOf(id).includes(`sleep:${engine.firstGeneration}`), { what: "onSleep" });
		const state = await inActor(id, async (ctx) => parse(ctx.state()));
		assert.deepEqual(state, { n: 42 });
	});

	test("ranges are half-open; reverse and limit", async () => {
		const id = await create("ranges");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			await kv.delete(B("created"));
			await kv.batchPut(["a", "b", "c", "d", "e"].map((k) => ({ key: B(k), value: B(`v-${k}`) })));
			const range = await kv.listRange(B("b"), B("d"));
			assert.deepEqual(keysOf(range), ["b", "c"]);
			assert.deepEqual(range[0].value, B("v-b"));
			assert.ok(Buffer.isBuffer(range[0].key) && Buffer.isBuffer(range[0].value));
			assert.deepEqual(keysOf(await kv.listRange(B("b"), B("b"))), []);
			assert.deepEqual(keysOf(await kv.listRange(B("d"), B("b"))), []);
			assert.deepEqual(keysOf(await kv.listRange(B("d"), EMPTY)), ["d", "e"]);
			assert.deepEqual(keysOf(await kv.listRange(B("a"), B("z"), { reverse: true })), ["e", "d", "c", "b", "a"]);
			assert.deepEqual(keysOf(await kv.listRange(B("a"), B("e"), { reverse: true, limit: 2 })), ["d", "c"]);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY, { limit: 2 })), ["a", "b"]);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY, { reverse: true, limit: 2 })), ["e", "d"]);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY, { limit: 0 })), []);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY, {})), ["a", "b", "c", "d", "e"]);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY, null)), ["a", "b", "c", "d", "e"]);

			await kv.deleteRange(B("b"), B("d"));
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY)), ["a", "d", "e"]);
			await kv.deleteRange(B("e"), B("a"));
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY)), ["a", "d", "e"]);
			await kv.deleteRange(B("d"), EMPTY);
			assert.deepEqual(keysOf(await kv.listPrefix(EMPTY)), ["a"]);
		});
	});

	test("listPrefix returns keys without any internal prefix, including 0xff continuations", async () => {
		const id = await create("prefix");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			await kv.delete(B("created"));
			const keys = [
				B("o"),
				B("p"),
				Buffer.from([0x70, 0]),
				B("pa"),
				Buffer.from([0x70, 0xff]),
				Buffer.from([0x70, 0xff, 0xff]),
				B("q"),
			];
			await kv.batchPut(keys.map((key, i) => ({ key, value: B(String(i)) })));
			const listed = await kv.listPrefix(B("p"));
			assert.deepEqual(
				listed.map((e) => [...e.key]),
				[[0x70], [0x70, 0], [0x70, 0x61], [0x70, 0xff], [0x70, 0xff, 0xff]],
			);
			assert.deepEqual(
				listed.map((e) => e.value.toString()),
				["1", "2", "3", "4", "5"],
			);
			assert.deepEqual(keysOf(await kv.listPrefix(B("pa"))), ["pa"]);
			assert.deepEqual(
				(await kv.listPrefix(B("p"), { reverse: true, limit: 1 })).map((e) => [...e.key]),
				[[0x70, 0xff, 0xff]],
			);
		});
	});

	test("batch operations: order, missing keys, duplicates and batches beyond the engine's per-request limits", async () => {
		const id = await create("batch");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			const names = Array.from({ length: 300 }, (_, i) => `b${String(i).padStart(3, "0")}`);
			assert.equal(await kv.batchPut(names.map((n) => ({ key: B(n), value: B(n.toUpperCase()) }))), undefined);

			const wanted = [B("b299"), B("nope"), B("b000"), B("b000"), ...names.slice(100, 250).map(B)];
			const values = await kv.batchGet(wanted);
			assert.equal(values.length, wanted.length);
			assert.deepEqual(values[0], B("B299"));
			assert.equal(values[1], null);
			assert.deepEqual(values[2], B("B000"));
			assert.deepEqual(values[3], B("B000"));
			assert.deepEqual(values[4], B("B100"));
			assert.deepEqual(await kv.batchGet([]), []);

			// Several 128 KiB values: more than one engine put.
			const large = Array.from({ length: 10 }, (_, i) => ({ key: B(`large${i}`), value: Buffer.alloc(MAX_VALUE, i) }));
			await kv.batchPut(large);
			assert.deepEqual(await kv.get(B("large9")), Buffer.alloc(MAX_VALUE, 9));

			// Last write wins.
			await kv.batchPut([
				{ key: B("dup"), value: Buffer.alloc(30_000, 1) },
				{ key: B("dup"), value: B("second") },
			]);
			assert.deepEqual(await kv.get(B("dup")), B("second"));

			assert.equal(await kv.batchDelete([...names.map(B), B("b000"), B("nope")]), undefined);
			assert.deepEqual(await kv.listPrefix(B("b")), []);
			assert.equal((await kv.listPrefix(B("large"))).length, 10);
			await kv.batchDelete([]);
		});
	});

	test("long listings are complete: they are fetched page by page", async () => {
		const id = await create("long");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			const names = Array.from({ length: 700 }, (_, i) => `s${String(i).padStart(4, "0")}`);
			await kv.batchPut(names.map((n) => ({ key: B(n), value: B(n) })));
			assert.deepEqual(keysOf(await kv.listPrefix(B("s"))), names);
			assert.deepEqual(
				keysOf(await kv.listRange(B("s0100"), B("s0600"), { reverse: true })),
				names.slice(100, 600).reverse(),
			);
			assert.deepEqual(keysOf(await kv.listPrefix(B("s"), { limit: 500 })), names.slice(0, 500));
			assert.deepEqual(keysOf(await kv.listPrefix(B("s"), { reverse: true, limit: 300 })), names.slice(400).reverse());

			// Keys of the longest size across a page boundary.
			const longest = Array.from({ length: 130 }, (_, i) =>
				Buffer.concat([Buffer.alloc(MAX_KEY - 1, 0x77), Buffer.from([i + 1])]),
			);
			await kv.batchPut(longest.map((key) => ({ key, value: B("x") })));
			assert.deepEqual(
				(await kv.listPrefix(Buffer.from([0x77]))).map((e) => e.key),
				longest,
			);
			assert.deepEqual(
				(await kv.listRange(Buffer.from([0x77]), EMPTY, { reverse: true })).map((e) => e.key),
				longest.reverse(),
			);

			// About 9 MiB of values, over several engine answers.
			const big = Array.from({ length: 300 }, (_, i) => ({
				key: B(`v${String(i).padStart(3, "0")}`),
				value: Buffer.alloc(32 * 1024, i % 256),
			}));
			await kv.batchPut(big);
			const listed = await kv.listPrefix(B("v"));
			assert.equal(listed.length, 300);
			assert.deepEqual(listed[299].value, Buffer.alloc(32 * 1024, 299 % 256));
			const values = await kv.batchGet(big.map((e) => e.key));
			assert.ok(values.every((v, i) => v.equals(big[i].value)));
		});
		// The actor (and its connection) is still fine.
		assert.deepEqual(await inActor(id, async (ctx) => ctx.kv().get(B("s0000"))), B("s0000"));
	});

	test("data survives sleep and wake; writes in onCreate and onSleep persist", async () => {
		const id = await create("durable");
		await inActor(id, async (ctx) => {
			await ctx.kv().put(B("kept"), B("across generations"));
		});
		await sleepActor(engine.endpoint, id);
		await waitFor(() => eventsOf(id).includes(`sleep:${engine.firstGeneration}`), { what: "onSleep" });
		const seen = await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			return {
				generation: ctx.generation(),
				kept: (await kv.get(B("kept")))?.toString(),
				created: (await kv.get(B("created")))?.toString(),
				slept: (await kv.get(B("slept")))?.toString(),
			};
		});
		const first = engine.firstGeneration;
		assert.deepEqual(seen, {
			generation: first + 1,
			kept: "across generations",
			created: "in onCreate",
			slept: String(first),
		});
	});

	test("a Kv kept past its generation refuses writes", async () => {
		const id = await create("stale");
		await inActor(id, async (ctx) => ctx.kv().put(B("x"), B("1")));
		await sleepActor(engine.endpoint, id);
		await waitFor(() => eventsOf(id).includes(`sleep:${engine.firstGeneration}`) && kept.has(id), { what: "onSleep" });
		const stale = kept.get(id);
		// The second generation starts only once the first is finished.
		assert.equal(await inActor(id, async (ctx) => ctx.generation()), engine.firstGeneration + 1);
		await rejectsWith(stale.put(B("x"), B("2")), "actor.stopping");
		await rejectsWith(stale.batchPut([{ key: B("x"), value: B("2") }]), "actor.stopping");
		await rejectsWith(stale.delete(B("x")), "actor.stopping");
		await rejectsWith(stale.batchDelete([B("x")]), "actor.stopping");
		await rejectsWith(stale.deleteRange(EMPTY, EMPTY), "actor.stopping");
		assert.deepEqual(await stale.get(B("x")), B("1"));
		assert.deepEqual(await inActor(id, async (ctx) => ctx.kv().get(B("x"))), B("1"));
	});

	test("size limits reach JavaScript as structured kv errors", async () => {
		const id = await create("limits");
		await inActor(id, async (ctx) => {
			const kv = ctx.kv();
			await kv.put(Buffer.alloc(MAX_KEY, 1), B("x"));
			await kv.put(B("v"), Buffer.alloc(MAX_VALUE, 1));
			assert.deepEqual(await kv.get(Buffer.alloc(MAX_KEY, 1)), B("x"));

			const err = await kv.put(Buffer.alloc(MAX_KEY + 1, 1), B("x")).catch((e) => e);
			assert.ok(err instanceof Error);
			assert.equal(err.code, "kv.key_too_large");
			assert.equal(err.group, "kv");
			assert.equal(err.rivetCode, "key_too_large");
			assert.deepEqual(err.metadata, { size: MAX_KEY + 1, limit: MAX_KEY });
			assert.ok(err.message.startsWith("__RIVET_ERROR_JSON__:"));

			const tooBig = await kv.put(B("v2"), Buffer.alloc(MAX_VALUE + 1)).catch((e) => e);
			assert.equal(tooBig.code, "kv.value_too_large");
			assert.deepEqual(tooBig.metadata, { size: MAX_VALUE + 1, limit: MAX_VALUE });

			await rejectsWith(kv.batchPut([{ key: Buffer.alloc(MAX_KEY + 1), value: B("x") }]), "kv.key_too_large");

			// Only writes check key sizes: a key too long to be stored is
			// missing, and bounds of any length work.
			const long = Buffer.alloc(MAX_KEY + 1, 1);
			assert.equal(await kv.get(long), null);
			assert.deepEqual(await kv.batchGet([B("v"), long]), [Buffer.alloc(MAX_VALUE, 1), null]);
			await kv.delete(long);
			await kv.batchDelete([long]);
			assert.deepEqual(await kv.listPrefix(long), []);
			assert.deepEqual(keysOf(await kv.listRange(EMPTY, long)), [Buffer.alloc(MAX_KEY, 1).toString("latin1")]);
			assert.deepEqual(keysOf(await kv.listRange(long, EMPTY)), ["created", "v"]);
			await kv.deleteRange(long, EMPTY);
			assert.deepEqual((await kv.listPrefix(EMPTY)).length, 1);

			// One bad entry: nothing of the batch is written.
			const entries = Array.from({ length: 200 }, (_, i) => ({
				key: B(`g${i}`),
				value: i === 150 ? Buffer.alloc(MAX_VALUE + 1) : B("x"),
			}));
			await rejectsWith(kv.batchPut(entries), "kv.value_too_large");
			assert.deepEqual(await kv.listPrefix(B("g")), []);
		});

		// Uncaught in onRequest, the client sees the public error.
		const res = await gatewayFetch(engine.endpoint, id, "/request/too-large", { method: "POST" });
		assert.equal(res.status, 500);
		const body = await res.json();
		assert.equal(body.group, "kv");
		assert.equal(body.code, "value_too_large");
		assert.match(body.message, /131073 bytes/);
	});

	test("index.d.ts declares the reference Kv surface", () => {
		const dts = readFileSync(new URL("../index.d.ts", import.meta.url), "utf8");
		const block = (start) => {
			const from = dts.indexOf(start);
			assert.ok(from >= 0, start);
			return dts
				.slice(from, dts.indexOf("\n}", from))
				.split("\n")
				.map((l) => l.trim())
				.filter((l) => l && !l.startsWith("/*") && !l.startsWith("*"));
		};
		assert.deepEqual(block("export declare class Kv {"), [
			"export declare class Kv {",
			"get(key: Buffer): Promise<Buffer | null>",
			"put(key: Buffer, value: Buffer): Promise<void>",
			"delete(key: Buffer): Promise<void>",
			"deleteRange(start: Buffer, end: Buffer): Promise<void>",
			"listPrefix(prefix: Buffer, options?: JsKvListOptions | undefined | null): Promise<Array<JsKvEntry>>",
			"listRange(start: Buffer, end: Buffer, options?: JsKvListOptions | undefined | null): Promise<Array<JsKvEntry>>",
			"batchGet(keys: Array<Buffer>): Promise<Array<Buffer | undefined | null>>",
			"batchPut(entries: Array<JsKvEntry>): Promise<void>",
			"batchDelete(keys: Array<Buffer>): Promise<void>",
		]);
		assert.deepEqual(block("export interface JsKvListOptions {"), [
			"export interface JsKvListOptions {",
			"reverse?: boolean",
			"limit?: number",
		]);
		assert.deepEqual(block("export interface JsKvEntry {"), [
			"export interface JsKvEntry {",
			"key: Buffer",
			"value: Buffer",
		]);
		assert.match(dts, /\bkv\(\): Kv\b/);
	});
});
