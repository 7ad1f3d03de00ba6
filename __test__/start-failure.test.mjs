// A start hook that throws: the client gets the hook's structured error
// (not the gateway's 503 `guard.actor_wake_retries_exceeded` after nine
// failed starts), the engine records the crash on the actor (2.3), a waking
// request costs one start instead of nine, and the actor recovers on its
// next wake once the hook stops failing.
//
// Counts are asserted, never timings; the start rate is printed as a
// diagnostic.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import {
	ARCHES,
	createActor,
	gatewayFetch,
	getActor,
	startEngine,
	TOKEN_PROTOCOL,
	waitFor,
} from "./helpers/engine.mjs";
import { json, native, serveActors } from "./helpers/actors.mjs";
import { actionFetch, bridgedError } from "./helpers/client.mjs";

/** What the engine's gateway does with a start that fails: 1 start + 8 wake retries. */
const GATEWAY_ATTEMPTS = 9;

// Engine 2.3 records a crash on the actor (`error.crashed`), engine 3.0
// does not; the rest is the same on both.
for (const arch of ARCHES) {
	describe(`a start hook that throws, engine ${arch}`, () => {
		let engine;
		let host;
		/** Start attempts (createState/onWake calls) per actor id. */
		const starts = new Map();
		const countStart = (ctx) => starts.set(ctx.actorId(), (starts.get(ctx.actorId()) ?? 0) + 1);
		const startsOf = (id) => starts.get(id) ?? 0;
		/** Actor keys whose hooks fail; removing a key "fixes" the actor. */
		const failing = new Set();

		before(async () => {
			engine = await startEngine({ arch });
			const hooks = (fail) => ({
				createState: async () => json({ n: 0 }),
				onWake: async (_err, { ctx }) => {
					countStart(ctx);
					if (failing.has(ctx.key()[0].stringValue)) fail(ctx);
				},
				onRequest: async () => ({ status: 200, body: Buffer.from("served") }),
				actions: { ping: async () => Buffer.from([0xf6]) },
			});
			const userFail = new native.NapiActorFactory(
				hooks(() => {
					throw bridgedError({
						group: "user",
						code: "not_today",
						message: "Come back tomorrow",
						metadata: { retryAfter: "1d" },
						public: true,
						statusCode: 400,
					});
				}),
			);
			const plainFail = new native.NapiActorFactory(
				hooks(() => {
					throw new Error("boom from onWake");
				}),
			);
			host = await serveActors(engine, { userFail, plainFail });
		});

		after(async () => {
			await host?.stop();
			await engine?.stop();
		});

		const create = async (name, key) => {
			failing.add(key);
			return (await createActor(engine.endpoint, { name, key, pool: host.pool })).actor_id;
		};

		test("a UserError reaches HTTP clients with its group, code, message and metadata", async (t) => {
			const id = await create("userFail", "user-error");
			const before = startsOf(id);
			// The status is the one an action that throws the same error gets
			// (the framework routes' status table); the body says what failed.
			const action = await actionFetch(engine, id, "ping", { encoding: "json" });
			assert.equal(action.status, 500, JSON.stringify(action.body));
			assert.equal(action.body.group, "user");
			assert.equal(action.body.code, "not_today");
			assert.equal(action.body.message, "Come back tomorrow");
			assert.deepEqual(action.body.metadata, { retryAfter: "1d" });

			const raw = await gatewayFetch(engine.endpoint, id, "/request/anything");
			const body = await raw.json();
			assert.equal(raw.status, 500, JSON.stringify(body));
			assert.equal(`${body.group}.${body.code}`, "user.not_today");
			assert.notEqual(raw.headers.get("x-rivet-error"), "guard.actor_wake_retries_exceeded");

			const used = startsOf(id) - before;
			t.diagnostic(`failed starts for two requests: ${used}`);
			assert.ok(used < GATEWAY_ATTEMPTS, `two requests cost ${used} failed starts`);
		});

		test("a plain Error is an internal error for clients, and the engine records the crash with its message", async (t) => {
			const id = await create("plainFail", "plain-error");
			const action = await actionFetch(engine, id, "ping", { encoding: "json" });
			assert.equal(action.status, 500, JSON.stringify(action.body));
			assert.equal(`${action.body.group}.${action.body.code}`, "core.internal_error");
			assert.ok(!JSON.stringify(action.body).includes("boom"), "the message of a non-public error is masked");
			// Engine 3.0 takes the crash (a sleep intent, then `Stopped` with
			// the message) but its actor API has no `error` field to show it
			// (docs/engine.md, "A start that fails").
			if (arch === "v3") return;

			const actor = await waitFor(
				async () => {
					const a = await getActor(engine.endpoint, id);
					return JSON.stringify(a?.error ?? null).includes("boom from onWake") ? a : null;
				},
				{ timeoutMs: 20_000, what: "the engine's actor record to carry the crash message" },
			);
			assert.ok(actor.error.crashed, JSON.stringify(actor.error));
			t.diagnostic(`engine actor record: error=${JSON.stringify(actor.error)} sleep_ts=${actor.sleep_ts}`);
		});

		test("WebSockets (actor-connect and raw) open and close with 1011 <group>.<code> of the start error", async (t) => {
			const id = await create("userFail", "websocket");
			const before = startsOf(id);
			for (const [path, protocols] of [
				["/connect", ["rivet", "rivet_encoding.json", TOKEN_PROTOCOL]],
				["/websocket/anything", ["rivet", TOKEN_PROTOCOL]],
			]) {
				const ws = new WebSocket(
					`ws://127.0.0.1:${engine.guardPort}/gateway/${encodeURIComponent(id)}${path}`,
					protocols,
				);
				ws.on("error", () => {});
				const closed = await new Promise((resolve) =>
					ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })),
				);
				assert.deepEqual(closed, { code: 1011, reason: "user.not_today" }, path);
			}
			const used = startsOf(id) - before;
			t.diagnostic(`failed starts for two sockets: ${used}`);
			assert.ok(used < GATEWAY_ATTEMPTS, `two sockets cost ${used} failed starts`);
		});

		test("repeated requests to a failing actor cost about one start each, then it recovers once fixed", async (t) => {
			const id = await create("userFail", "recover");
			// The failed first start (at creation) is reported as a crash and
			// the engine puts the actor to sleep: the next request wakes it.
			let wakeStarts = 0;
			if (arch === "v2") {
				await waitFor(
					async () => JSON.stringify((await getActor(engine.endpoint, id))?.error ?? null).includes("not_today"),
					{ timeoutMs: 20_000, what: "the crash of the first start to be recorded" },
				);
				const beforeWake = startsOf(id);
				const woken = await actionFetch(engine, id, "ping", { encoding: "json" });
				assert.equal(`${woken.body.group}.${woken.body.code}`, "user.not_today", JSON.stringify(woken.body));
				wakeStarts = startsOf(id) - beforeWake;
			} else {
				// Engine 3.0 shows no crash on the actor: requests go on until
				// one finds it asleep and wakes it (the first ones get the
				// error from the failed generation, which then reports it).
				let answer;
				await waitFor(
					async () => {
						const beforeWake = startsOf(id);
						answer = await actionFetch(engine, id, "ping", { encoding: "json" });
						wakeStarts = startsOf(id) - beforeWake;
						return wakeStarts > 0 || `${answer.body.group}.${answer.body.code}` !== "user.not_today";
					},
					{ timeoutMs: 20_000, what: "a request that wakes the crashed actor" },
				);
				assert.equal(`${answer.body.group}.${answer.body.code}`, "user.not_today", JSON.stringify(answer.body));
			}
			t.diagnostic(`a request to the crashed, sleeping actor: ${wakeStarts} failed start(s)`);
			assert.ok(
				wakeStarts >= 1 && wakeStarts < GATEWAY_ATTEMPTS,
				`one waking request cost ${wakeStarts} failed starts`,
			);

			const first = startsOf(id);
			const started = Date.now();
			const requests = 5;
			for (let i = 0; i < requests; i++) {
				const res = await actionFetch(engine, id, "ping", { encoding: "json" });
				assert.equal(`${res.body.group}.${res.body.code}`, "user.not_today", JSON.stringify(res.body));
			}
			const used = startsOf(id) - first;
			const seconds = (Date.now() - started) / 1000;
			t.diagnostic(
				`${requests} requests: ${used} failed starts in ${seconds.toFixed(1)} s (${(used / seconds).toFixed(2)}/s)`,
			);
			assert.ok(used <= requests + 1, `${requests} requests cost ${used} failed starts`);

			failing.delete("recover");
			await waitFor(async () => (await actionFetch(engine, id, "ping", { encoding: "json" })).status === 200, {
				timeoutMs: 30_000,
				what: "the actor to serve once onWake no longer throws",
			});
		});
	});
}
