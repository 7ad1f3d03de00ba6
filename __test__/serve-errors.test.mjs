// serve() fails with a clear structured error, within a bounded time, when
// the engine cannot be reached or refuses the pool.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { findFreePorts, startEngine } from "./helpers/engine.mjs";
import { native, uniquePool } from "./helpers/actors.mjs";

let engine;
before(async () => {
	engine = await startEngine({ arch: "v3" });
});
after(async () => {
	await engine?.stop();
	// Every failed serve() sets process.exitCode to 1 (README, "Errors");
	// these failures are on purpose.
	process.exitCode = undefined;
});

function registry() {
	const r = new native.CoreRegistry();
	r.register("noop", new native.NapiActorFactory({}));
	return r;
}

test("serve() against an unreachable endpoint rejects with engine.unreachable", async () => {
	const { guard } = await findFreePorts();
	const r = registry();
	const serving = r.serve({
		endpoint: `http://127.0.0.1:${guard}`,
		poolName: uniquePool(),
		engineSpawn: "never",
		envoyConnectTimeoutMs: 2_000,
	});
	await assert.rejects(serving, (err) => {
		assert.equal(err.code, "engine.unreachable");
		assert.match(err.message, /^__RIVET_ERROR_JSON__:/);
		assert.match(err.message, /did not become ready after/);
		return true;
	});
	await assert.rejects(r.waitReady(), (err) => err.code === "engine.unreachable");
});

test("serve() with a token the engine refuses rejects with the engine's answer", async () => {
	const r = registry();
	const serving = r.serve({ endpoint: engine.endpoint, poolName: uniquePool(), token: "wrong", engineSpawn: "never" });
	await assert.rejects(serving, (err) => {
		assert.equal(err.code, "engine.runner_config_failed");
		// Engine 2.3 answers 403, engine 3.0 401 `auth.invalid_token`.
		assert.match(err.message, engine.arch === "v3" ? /401.*invalid_token/ : /403/);
		return true;
	});
});

test("serve() against a namespace the engine does not have rejects within the connect bound", async () => {
	const r = registry();
	const serving = r.serve({
		endpoint: engine.endpoint,
		namespace: "no-such-namespace",
		poolName: uniquePool(),
		engineSpawn: "never",
		envoyConnectTimeoutMs: 2_000,
	});
	await assert.rejects(serving, (err) => {
		assert.ok(["engine.runner_config_failed", "engine.unreachable"].includes(err.code), err.code);
		assert.match(err.message, /namespace|did not become ready/);
		return true;
	});
});

test("register() after serve() and a second serve() are refused with napi.invalid_state", async () => {
	const r = registry();
	const serving = r.serve({ endpoint: engine.endpoint, poolName: uniquePool(), engineSpawn: "never" });
	assert.throws(
		() => r.register("late", new native.NapiActorFactory({})),
		(err) => err.code === "napi.invalid_state",
	);
	assert.throws(
		() => r.serve({}),
		(err) => err.code === "napi.invalid_state",
	);
	await r.waitReady();
	await r.shutdown();
	await r.shutdown();
	await serving;
});

test("shutdown() before serve() settles serve() at once", async () => {
	const r = registry();
	await r.shutdown();
	await assert.rejects(
		async () => r.serve({ endpoint: engine.endpoint }),
		(err) => err.code === "napi.invalid_state",
	);
});

test("serve() refuses malformed numbers in its config, naming the field", async () => {
	for (const [field, value] of [
		["drainTimeoutMs", Number.NaN],
		["envoyConnectTimeoutMs", -1],
		["engineStartTimeoutMs", Number.POSITIVE_INFINITY],
		["version", 1.5],
		["enginePort", -80],
		["serverlessMaxStartPayloadBytes", 2 ** 40],
	]) {
		const r = registry();
		await assert.rejects(
			r.serve({ endpoint: engine.endpoint, poolName: uniquePool(), engineSpawn: "never", [field]: value }),
			(err) => {
				assert.equal(err.code, "napi.invalid_argument", `${field}: ${err.message}`);
				assert.equal(err.metadata?.argument, `config.${field}`);
				return true;
			},
		);
	}
});
