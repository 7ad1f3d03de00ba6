// Smoke tests of the package: the engine harness against the real engine,
// the addon's generic napi pieces (CancellationToken, JsCallback, errors
// with a real `code`) and a clean process exit.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import {
	createActor,
	destroyActor,
	getActor,
	getOrCreateActor,
	startEngine,
	upsertRunnerConfig,
	waitFor,
} from "./helpers/engine.mjs";

const require = createRequire(import.meta.url);
const native = require("../index.js");
// The callback machinery alone (`JsCallback`, a panic in a task) is driven by
// `__testCallCallback`, which only the debug build with the `testing` feature
// has (`npm run build:testing`; `npm test` builds it): no public API reaches a
// closed callback or a panic, and the others would need an engine and an actor.
const testing = require("../target/testing/rivetkit-native.node");

const PREFIX = "__RIVET_ERROR_JSON__:";

/** Decodes the bridged JSON the way rivetkit's TypeScript runtime does. */
function bridged(err) {
	assert.ok(err instanceof Error, `expected an Error, got ${err}`);
	const at = err.message.indexOf(PREFIX);
	assert.notEqual(at, -1, `no ${PREFIX} in ${err.message}`);
	return JSON.parse(err.message.slice(at + PREFIX.length));
}

function bridgedErrorMessage(fields) {
	return PREFIX + JSON.stringify(fields);
}

describe("engine harness", () => {
	let engine;
	before(async () => {
		engine = await startEngine({ arch: "v3" });
	});
	after(async () => {
		await engine?.stop();
	});

	test("the engine answers /health", async () => {
		const res = await fetch(`${engine.endpoint}/health`);
		assert.equal(res.status, 200);
		const body = await res.json();
		assert.equal(body.status, "ok");
		assert.equal(body.runtime, "engine");
	});

	test("runner config upsert and actor API", async () => {
		const pool = `smoke-${process.pid}`;
		await upsertRunnerConfig(engine.endpoint, pool);
		const actor = await createActor(engine.endpoint, { name: "smoke", key: "a", pool, input: "hi" });
		assert.equal(typeof actor.actor_id, "string");
		// Engine 2.3 echoes the crash policy; engine 3.0 ignores it and names the pool.
		if (engine.arch === "v3") assert.equal(actor.pool, pool);
		else assert.equal(actor.crash_policy, "sleep");
		const again = await getOrCreateActor(engine.endpoint, { name: "smoke", key: "a", pool });
		assert.equal(again.created, false);
		assert.equal(again.actor.actor_id, actor.actor_id);
		assert.equal((await getActor(engine.endpoint, actor.actor_id)).actor_id, actor.actor_id);
		await destroyActor(engine.endpoint, actor.actor_id);
		// Engine 2.3 keeps the actor with its destroy_ts; engine 3.0 may drop it from the listing.
		await waitFor(
			async () => {
				const found = await getActor(engine.endpoint, actor.actor_id);
				return found === null || found.destroy_ts;
			},
			{ what: "destroy_ts" },
		);
	});

	test("stop() removes the temporary directory", async () => {
		const other = await startEngine({ arch: "v3" });
		assert.ok(existsSync(other.dir));
		await other.stop();
		assert.ok(!existsSync(other.dir));
	});
});

describe("addon", () => {
	test("loads and exposes the generic classes", () => {
		assert.equal(typeof native.CancellationToken, "function");
		assert.equal(native.__testCallCallback, undefined, "test exports are not shipped");
		assert.equal(typeof testing.__testCallCallback, "function");
	});
});

describe("CancellationToken", () => {
	test("cancel() sets aborted() and runs listeners once, after the call", async () => {
		const token = new native.CancellationToken();
		assert.equal(token.aborted(), false);
		let calls = 0;
		const fired = new Promise((resolve) =>
			token.onCancelled(() => {
				calls += 1;
				resolve();
			}),
		);
		token.cancel();
		assert.equal(token.aborted(), true);
		assert.equal(calls, 0, "listeners never run inside cancel()");
		await fired;
		token.cancel();
		await new Promise((r) => setTimeout(r, 10));
		assert.equal(calls, 1);
	});

	test("a listener added after cancellation runs too", async () => {
		const token = new native.CancellationToken();
		token.cancel();
		await new Promise((resolve) => token.onCancelled(resolve));
	});

	test("a listener runs when Rust cancels the token", async () => {
		let fired = false;
		await testing.__testCallCallback((_err, payload) => {
			payload.token.onCancelled(() => {
				fired = true;
			});
			return "ok";
		}, "v");
		await waitFor(() => fired, { what: "onCancelled from Rust" });
	});
});

describe("JsCallback", () => {
	test("calls with (null, payload) and resolves an async function's value", async () => {
		let args;
		const result = await testing.__testCallCallback(async (...a) => {
			args = a;
			return `${a[1].value}!`;
		}, "hello");
		assert.deepEqual(result, { value: "hello!", tokenCancelled: false });
		assert.equal(args.length, 2);
		assert.equal(args[0], null);
		assert.equal(args[1].value, "hello");
	});

	test("accepts a plain (synchronous) return value", async () => {
		const result = await testing.__testCallCallback((_err, p) => p.value.toUpperCase(), "sync");
		assert.equal(result.value, "SYNC");
	});

	test("carries a class instance in the payload", async () => {
		const result = await testing.__testCallCallback((_err, payload) => {
			assert.ok(payload.token instanceof testing.CancellationToken);
			assert.equal(payload.token.aborted(), false);
			payload.token.cancel();
			return "cancelled";
		}, "c");
		assert.deepEqual(result, { value: "cancelled", tokenCancelled: true });
	});

	test("a wrong return type rejects with napi.invalid_return", async () => {
		for (const callback of [() => 42, async () => ({ not: "a string" }), () => undefined]) {
			const err = await testing.__testCallCallback(callback, "x").then(
				() => assert.fail("expected a rejection"),
				(e) => e,
			);
			assert.equal(err.code, "napi.invalid_return");
			assert.equal(err.group, "napi");
			assert.equal(err.rivetCode, "invalid_return");
			const json = bridged(err);
			assert.equal(json.group, "napi");
			assert.equal(json.code, "invalid_return");
			assert.match(
				json.message,
				/^JavaScript callback `testCallback` returned an invalid value: expected String, got /,
			);
			assert.equal(json.public, false);
			assert.equal(json.statusCode, 500);
		}
	});

	test("a thrown plain error is propagated as an internal error", async () => {
		for (const callback of [
			() => {
				throw new Error("boom");
			},
			async () => {
				throw new TypeError("boom");
			},
			() => Promise.reject("boom as a string"),
		]) {
			const err = await testing.__testCallCallback(callback, "x").then(
				() => assert.fail("expected a rejection"),
				(e) => e,
			);
			assert.equal(err.code, "core.internal_error");
			assert.equal(err.group, "core");
			const json = bridged(err);
			assert.equal(json.code, "internal_error");
			assert.match(err.metadata.error, /JavaScript callback `testCallback` failed: boom/);
		}
	});

	test("a bridged rejection keeps group, code, metadata and actor", async () => {
		const err = await testing
			.__testCallCallback(async () => {
				throw new Error(
					bridgedErrorMessage({
						group: "actor",
						code: "not_found",
						message: "Actor thing 'x' was not found.",
						metadata: { resource: "thing", id: "x" },
						public: false,
						statusCode: 500,
						actor: { actorId: "abc", generation: 3, key: "k" },
					}),
				);
			}, "x")
			.then(
				() => assert.fail("expected a rejection"),
				(e) => e,
			);
		assert.equal(err.code, "actor.not_found");
		assert.ok(Object.hasOwn(err, "code"));
		assert.equal(err.group, "actor");
		assert.equal(err.rivetCode, "not_found");
		assert.deepEqual(err.metadata, { resource: "thing", id: "x" });
		const json = bridged(err);
		assert.equal(json.message, "Actor thing 'x' was not found.");
		assert.equal(json.public, true, "promoted by the core's public table");
		assert.equal(json.statusCode, 404);
		assert.deepEqual(json.actor, { actorId: "abc", generation: 3, key: "k" });
	});

	test("a custom public error from JavaScript keeps its status", async () => {
		const err = await testing
			.__testCallCallback(() => {
				throw new Error(
					`wrapped: ${bridgedErrorMessage({ group: "user", code: "teapot", message: "short and stout", public: true, statusCode: 418 })}`,
				);
			}, "x")
			.then(
				() => assert.fail("expected a rejection"),
				(e) => e,
			);
		assert.equal(err.code, "user.teapot");
		const json = bridged(err);
		assert.equal(json.message, "short and stout");
		assert.equal(json.public, true);
		assert.equal(json.statusCode, 418);
		assert.equal(err.metadata, undefined);
	});

	test("a closed callback rejects with actor.js_callback_unavailable", async () => {
		let called = false;
		const err = await testing
			.__testCallCallback(
				() => {
					called = true;
					return "never";
				},
				"x",
				{ abortFirst: true },
			)
			.then(
				() => assert.fail("expected a rejection"),
				(e) => e,
			);
		assert.equal(err.code, "actor.js_callback_unavailable");
		assert.match(bridged(err).message, /^JavaScript callback `testCallback` could not be invoked: /);
		assert.equal(called, false);
	});
});

describe("process exit", () => {
	const childScript = fileURLToPath(new URL("./helpers/child.mjs", import.meta.url));

	function runChild(args, { timeoutMs = 5_000 } = {}) {
		return new Promise((resolve, reject) => {
			const child = spawn(process.execPath, [childScript, ...args], {
				stdio: ["ignore", "pipe", "pipe"],
			});
			let stdout = "";
			let stderr = "";
			child.stdout.on("data", (d) => (stdout += d));
			child.stderr.on("data", (d) => (stderr += d));
			const timer = setTimeout(() => {
				child.kill("SIGKILL");
				reject(
					new Error(
						`child ${args.join(" ")} did not exit within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`,
					),
				);
			}, timeoutMs);
			child.on("exit", (code, signal) => {
				clearTimeout(timer);
				resolve({ code, signal, stdout, stderr });
			});
		});
	}

	test("a child with an unfired onCancelled listener exits by itself", async () => {
		const { code, signal, stdout, stderr } = await runChild(["token-listener"]);
		assert.equal(signal, null, stderr);
		assert.equal(code, 0, stderr);
		assert.match(stdout, /ready/);
		assert.doesNotMatch(stdout, /unexpected/);
	});

	test("a panic in a task is logged as a bug, rejects, and the process lives on", async () => {
		const { code, stdout, stderr } = await runChild(["panic", "callback"]);
		assert.equal(code, 0, stderr);
		assert.match(stdout, /ready/);
		assert.match(stderr, /this is a bug in rivetkit-native/);
	});

	test("a child that used callbacks and listeners exits by itself", async () => {
		const { code, stdout, stderr } = await runChild(["callback", "token-fired", "token-listener"]);
		assert.equal(code, 0, stderr);
		assert.match(stdout, /ready/);
	});
});
