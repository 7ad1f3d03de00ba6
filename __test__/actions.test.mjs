// HTTP actions end to end: the official RivetKit client (rivetkit@2.3.19)
// and plain fetch, through a real engine's gateway, to actors hosted in this
// process by the addon (spec http-routing §3.2–§3.4).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

import { native, serveActors } from "./helpers/actors.mjs";
import {
	ENCODINGS,
	actionFetch,
	bareActionRequest,
	bridgedError,
	cborDecode,
	cborEncode,
	officialClient,
	vbare,
} from "./helpers/client.mjs";
import { gatewayHeaders, getOrCreateActor, startEngine } from "./helpers/engine.mjs";

const ACTION_TIMEOUT_MS = 1_000;

/** Resolvers of `hang` promises: kept so that the promises are never collected. */
const hanging = new Set();

/** Actions take and return CBOR, as RivetKit's runtime does. */
function counterFactory() {
	const state = (ctx) => cborDecode(ctx.state());
	return new native.NapiActorFactory(
		{
			createState: async () => cborEncode({ count: 0 }),
			actions: {
				increment: async (_err, { ctx, args }) => {
					const [by = 1] = cborDecode(args);
					const next = { count: state(ctx).count + by };
					await ctx.saveState({ state: cborEncode(next) });
					return cborEncode(next.count);
				},
				get: async (_err, { ctx }) => cborEncode(state(ctx).count),
				echo: async (_err, { args }) => cborEncode(cborDecode(args)),
				nothing: async () => cborEncode(undefined),
				empty: async () => Buffer.alloc(0),
				bytes: async () => cborEncode(new Uint8Array([1, 2, 3])),
				forbidden: async () => {
					throw bridgedError({
						group: "user",
						code: "forbidden_thing",
						message: "You may not do that",
						metadata: { why: "rules" },
					});
				},
				crash: async () => {
					throw new Error("secret database password is hunter2");
				},
				hang: () => new Promise((resolve) => hanging.add(resolve)),
				hangUnreferenced: () => new Promise(() => {}),
			},
		},
		{ actionTimeoutMs: ACTION_TIMEOUT_MS, sleepTimeoutMs: 60_000 },
	);
}

describe("HTTP actions", () => {
	let engine;
	let host;
	before(async () => {
		engine = await startEngine({ arch: "v3" });
		host = await serveActors(engine, { counter: counterFactory() });
	});
	after(async () => {
		for (const resolve of hanging) resolve(cborEncode(null));
		await host?.stop();
		await engine?.stop();
	});

	describe("with the official client", () => {
		for (const encoding of ENCODINGS) {
			test(`${encoding}: increments, persists and returns values`, async () => {
				const client = officialClient(engine, host.pool, encoding);
				const counter = client.counter.getOrCreate([`official-${encoding}`]);
				assert.equal(await counter.increment(3), 3);
				assert.equal(await counter.increment(4), 7);
				assert.equal(await counter.get(), 7);
				const value = { s: "été", n: -1.5, list: [1, null, true], nested: { a: "b" } };
				assert.deepEqual(await counter.echo(value, 2), [value, 2]);
				assert.equal(await counter.nothing(), encoding === "bare" ? undefined : null);
				// Another key is another actor; connection params travel as x-rivet-conn-params.
				const other = client.counter.getOrCreate([`official-${encoding}-b`], { params: { token: "t" } });
				assert.equal(await other.increment(1), 1);
			});

			test(`${encoding}: a user error keeps its group, code and message`, async () => {
				const client = officialClient(engine, host.pool, encoding);
				const counter = client.counter.getOrCreate([`errors-${encoding}`]);
				await assert.rejects(counter.forbidden(), (err) => {
					assert.equal(err.group, "user");
					assert.equal(err.code, "forbidden_thing");
					assert.equal(err.message, "You may not do that");
					assert.deepEqual(err.metadata, { why: "rules" });
					return true;
				});
				assert.equal(await counter.increment(1), 1);
			});

			test(`${encoding}: an internal error is masked`, async () => {
				const client = officialClient(engine, host.pool, encoding);
				const counter = client.counter.getOrCreate([`errors-${encoding}`]);
				await assert.rejects(counter.crash(), (err) => {
					assert.equal(err.message, "An internal error occurred");
					assert.doesNotMatch(JSON.stringify({ ...err, message: err.message }), /hunter2/);
					assert.equal(err.code, "internal_error");
					return true;
				});
				assert.equal(await counter.get(), 1);
			});
		}

		test("bare carries byte arrays that json turns into null", async () => {
			const bare = officialClient(engine, host.pool, "bare").counter.getOrCreate(["bytes"]);
			assert.deepEqual(Array.from(await bare.bytes()), [1, 2, 3]);
			const json = officialClient(engine, host.pool, "json").counter.getOrCreate(["bytes"]);
			assert.equal(await json.bytes(), null);
		});
	});

	describe("with plain fetch", () => {
		let actorId;
		let otherId;
		before(async () => {
			actorId = (await getOrCreateActor(engine.endpoint, { name: "counter", key: "fetch-a", pool: host.pool })).actor
				.actor_id;
			otherId = (await getOrCreateActor(engine.endpoint, { name: "counter", key: "fetch-b", pool: host.pool })).actor
				.actor_id;
		});

		/** After any failure both actors still serve actions. */
		async function stillWorks() {
			for (const id of [actorId, otherId]) {
				const res = await actionFetch(engine, id, "get", { encoding: "json" });
				assert.equal(res.status, 200, JSON.stringify(res.body));
				assert.equal(typeof res.body.output, "number");
			}
		}

		function assertError(res, status, group, code) {
			assert.equal(res.status, status, JSON.stringify(res.body));
			assert.equal(res.body.group, group);
			assert.equal(res.body.code, code);
			assert.equal(res.headers.get("x-rivet-actor"), res.body.actor?.actorId);
			assert.ok(res.headers.get("x-rivet-actor-generation"));
		}

		for (const encoding of ENCODINGS) {
			test(`${encoding}: success body and actor headers`, async () => {
				const res = await actionFetch(engine, actorId, "echo", { encoding, args: [1, "two"] });
				assert.equal(res.status, 200);
				assert.equal(
					res.headers.get("content-type"),
					encoding === "json" ? "application/json" : "application/octet-stream",
				);
				assert.deepEqual(res.body.output, [1, "two"]);
				if (encoding === "bare") assert.equal(res.body.version, 4);
				assert.equal(res.headers.get("x-rivet-actor"), actorId);
				assert.equal(res.headers.get("x-rivet-actor-key"), "fetch-a");
			});

			test(`${encoding}: unknown action is 404 actor.action_not_found`, async () => {
				const res = await actionFetch(engine, actorId, "nope", { encoding });
				assertError(res, 404, "actor", "action_not_found");
				assert.deepEqual(res.body.metadata, { name: "nope" });
				await stillWorks();
			});

			test(`${encoding}: GET is 405 actor.method_not_allowed`, async () => {
				const res = await actionFetch(engine, actorId, "get", { encoding, method: "GET" });
				assertError(res, 405, "actor", "method_not_allowed");
				assert.deepEqual(res.body.metadata, { method: "GET", path: "/action/get" });
				await stillWorks();
			});

			test(`${encoding}: oversized body is 400 message.incoming_too_long`, async () => {
				const res = await actionFetch(engine, actorId, "echo", { encoding, args: ["x".repeat(70_000)] });
				assertError(res, 400, "message", "incoming_too_long");
				await stillWorks();
			});

			test(`${encoding}: an action that never returns is 408 actor.action_timed_out`, async () => {
				const started = Date.now();
				const res = await actionFetch(engine, actorId, "hang", { encoding });
				assertError(res, 408, "actor", "action_timed_out");
				assert.equal(res.body.message, "Action timed out");
				assert.ok(Date.now() - started >= ACTION_TIMEOUT_MS * 0.9);
				await stillWorks();
			});
		}

		const malformed = {
			json: ['{"args": [1,', "not json", ""],
			cbor: [Buffer.from([0xff, 0xff]), Buffer.alloc(0), cborEncode({ args: [new Uint8Array([1])] })],
			bare: [Buffer.from([4]), vbare(Buffer.from([9, 1])), bareActionRequest([1], 9)],
		};
		for (const [encoding, bodies] of Object.entries(malformed)) {
			test(`${encoding}: malformed bodies are 400, masked`, async () => {
				for (const body of bodies) {
					const res = await actionFetch(engine, actorId, "echo", { encoding, body });
					assertError(res, 400, "core", "internal_error");
					assert.equal(res.body.message, "An internal error occurred");
					assert.equal(res.body.metadata, undefined);
				}
				await stillWorks();
			});
		}

		test("a never-settling promise that the GC collects still times out (408)", async () => {
			setFlagsFromString("--expose-gc");
			const gc = runInNewContext("gc");
			const pending = actionFetch(engine, actorId, "hangUnreferenced", { encoding: "json" });
			for (let i = 0; i < 5; i++) {
				await new Promise((r) => setTimeout(r, 100));
				gc();
			}
			const res = await pending;
			assertError(res, 408, "actor", "action_timed_out");
			await stillWorks();
		});

		test("args normalisation: missing or null → [], a value → [value]", async () => {
			const cases = [
				[JSON.stringify({}), []],
				[JSON.stringify({ args: null }), []],
				[JSON.stringify({ args: 5 }), [5]],
				[JSON.stringify({ args: { a: 1 } }), [{ a: 1 }]],
			];
			for (const [body, expected] of cases) {
				const res = await actionFetch(engine, actorId, "echo", { encoding: "json", body });
				assert.equal(res.status, 200);
				assert.deepEqual(res.body.output, expected, body);
			}
			const res = await actionFetch(engine, actorId, "echo", { encoding: "cbor", body: cborEncode({ args: "v" }) });
			assert.deepEqual(res.body.output, ["v"]);
		});

		test("empty output is null in json and cbor", async () => {
			for (const encoding of ["json", "cbor"]) {
				const res = await actionFetch(engine, actorId, "empty", { encoding });
				assert.equal(res.status, 200);
				assert.deepEqual(res.body, { output: null });
			}
		});

		test("an unknown x-rivet-encoding value means json", async () => {
			const res = await actionFetch(engine, actorId, "echo", { encoding: "CBOR", body: JSON.stringify({ args: [1] }) });
			assert.equal(res.status, 200);
			assert.deepEqual(res.body.output, [1]);
		});

		test("x-rivet-conn-params must be JSON", async () => {
			const bad = await actionFetch(engine, actorId, "get", { headers: { "x-rivet-conn-params": "{oops" } });
			assertError(bad, 400, "core", "internal_error");
			const good = await actionFetch(engine, actorId, "get", { headers: { "x-rivet-conn-params": '{"token":"t"}' } });
			assert.equal(good.status, 200);
			await stillWorks();
		});

		test("a bad escape in the action name is the envoy's 500", async () => {
			const res = await fetch(`${engine.endpoint}/gateway/${actorId}/action/%zz`, {
				method: "POST",
				headers: gatewayHeaders(),
				body: "{}",
			});
			assert.equal(res.status, 500);
			assert.equal(res.headers.get("x-rivet-error"), "envoy.fetch_failed");
			await res.arrayBuffer();
			await stillWorks();
		});

		test("a queue send to an actor without onQueueSend: the reference's masked error, in the request encoding", async () => {
			const res = await fetch(`${engine.endpoint}/gateway/${actorId}/queue/jobs`, {
				method: "POST",
				headers: gatewayHeaders({ "x-rivet-encoding": "cbor" }),
				body: cborEncode({ body: 1 }),
			});
			assert.equal(res.status, 500);
			const body = cborDecode(Buffer.from(await res.arrayBuffer()));
			assert.equal(`${body.group}.${body.code}`, "napi.invalid_state");
			assert.equal(body.message, "An internal error occurred");
			await stillWorks();
		});
	});
});
