// First-run mistakes get a structured answer at once: a port held by
// something that is not an engine, an endpoint that cannot be reached,
// enginePort disagreeing with the endpoint, a mistyped log level, calls in
// the wrong order, and bad arguments to the constructors.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createServer as createHttpServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { findFreePorts } from "./helpers/engine.mjs";
import { native, uniquePool } from "./helpers/actors.mjs";

const FAST_MS = 5_000;
const addon = fileURLToPath(new URL("../index.js", import.meta.url));

function registry() {
	const r = new native.CoreRegistry();
	r.register("noop", new native.NapiActorFactory({}));
	return r;
}

async function listen(server) {
	server.listen(0, "127.0.0.1");
	await once(server, "listening");
	return server.address().port;
}

/** Rejects with `code` within FAST_MS; returns the error. */
async function rejectsFast(promise, code) {
	const started = Date.now();
	let caught;
	await assert.rejects(promise, (err) => {
		caught = err;
		assert.equal(err.code, code, err.message);
		assert.match(err.message, /^__RIVET_ERROR_JSON__:/);
		return true;
	});
	assert.ok(Date.now() - started < FAST_MS, `took ${Date.now() - started} ms`);
	return JSON.parse(caught.message.slice("__RIVET_ERROR_JSON__:".length));
}

test("a plain HTTP server on the port: serve() says what answered, without spawning", async () => {
	const server = createHttpServer((_req, res) => res.writeHead(404).end("Not Found"));
	const port = await listen(server);
	try {
		const body = await rejectsFast(registry().serve({ endpoint: `http://127.0.0.1:${port}`, poolName: uniquePool() }), "engine.port_occupied");
		assert.match(body.message, /not a Rivet Engine/);
		assert.match(body.message, /HTTP 404: Not Found/);
	} finally {
		server.close();
	}
});

test("a TCP listener that closes connections: serve() fails at once", async () => {
	const server = createTcpServer((socket) => socket.destroy());
	const port = await listen(server);
	try {
		const body = await rejectsFast(registry().serve({ endpoint: `http://127.0.0.1:${port}`, poolName: uniquePool() }), "engine.port_occupied");
		assert.match(body.message, /accepted the connection but gave no HTTP answer/);
	} finally {
		server.close();
	}
});

test("an unresolvable endpoint: the DNS failure is in the error message", async () => {
	const r = registry();
	const serving = r.serve({ endpoint: "http://no-such-host.invalid:6420", poolName: uniquePool(), envoyConnectTimeoutMs: 1_000 });
	const body = await rejectsFast(serving, "engine.unreachable");
	assert.match(body.message, /DNS lookup of 'no-such-host\.invalid' failed/);
});

test("a refusing endpoint: the refusal is in the error message", async () => {
	const { guard } = await findFreePorts();
	const serving = registry().serve({
		endpoint: `http://127.0.0.1:${guard}`,
		poolName: uniquePool(),
		engineSpawn: "never",
		envoyConnectTimeoutMs: 1_000,
	});
	const body = await rejectsFast(serving, "engine.unreachable");
	assert.match(body.message, /refused/i);
});

test("enginePort disagreeing with the endpoint's port is config.invalid naming both", async () => {
	const { guard } = await findFreePorts();
	const other = (await findFreePorts()).guard;
	const body = await rejectsFast(
		registry().serve({ endpoint: `http://127.0.0.1:${guard}`, enginePort: other, poolName: uniquePool() }),
		"config.invalid",
	);
	assert.match(body.message, new RegExp(`enginePort \\(${other}\\)`));
	assert.match(body.message, new RegExp(`\\(${guard}\\)`));
});

test("an unknown log level is named on stderr with the valid ones", () => {
	const run = spawnSync(process.execPath, ["-e", `require(${JSON.stringify(addon)}); new (require(${JSON.stringify(addon)}).CoreRegistry)().health()`], {
		env: { ...process.env, RIVET_LOG_LEVEL: "wran", RUST_LOG_FORMAT: "" },
		encoding: "utf8",
		timeout: 20_000,
	});
	assert.equal(run.status, 0, run.stderr);
	assert.match(run.stderr, /unknown log level `wran`/);
	assert.match(run.stderr, /trace, debug, info, warn, error/);
});

test("waitReady() before serve() rejects at once; shutdown() before serve() resolves and ends the registry", async () => {
	const r = registry();
	await rejectsFast(r.waitReady(), "napi.invalid_state");
	await r.shutdown();
	await rejectsFast(r.waitReady(), "registry.shut_down");
	assert.throws(() => r.serve({ poolName: uniquePool() }), (err) => err.code === "napi.invalid_state");
	assert.throws(() => r.register("late", new native.NapiActorFactory({})), (err) => err.code === "napi.invalid_state");
});

test("bad constructor and register() arguments are napi.invalid_argument", () => {
	const invalidArgument = (pattern) => (err) => {
		assert.equal(err.code, "napi.invalid_argument", err.message);
		assert.match(err.message, /^__RIVET_ERROR_JSON__:/);
		assert.match(err.message, pattern);
		return true;
	};
	assert.throws(() => new native.NapiActorFactory(null), invalidArgument(/'callbacks': expected an object, got null/));
	assert.throws(() => new native.NapiActorFactory({ onWake: 42 }), invalidArgument(/callbacks\.onWake` must be a function, got a number/));
	assert.throws(() => new native.NapiActorFactory({ actions: 42 }), invalidArgument(/callbacks\.actions` must be an object of functions/));
	const r = new native.CoreRegistry();
	assert.throws(() => r.register("x", {}), invalidArgument(/'factory': expected a NapiActorFactory, got an object/));
	assert.throws(() => r.register("x", null), invalidArgument(/'factory': expected a NapiActorFactory, got null/));
	assert.throws(() => r.register("", new native.NapiActorFactory({})), invalidArgument(/'name': an actor name must not be empty/));
	assert.throws(() => r.register(42, new native.NapiActorFactory({})), invalidArgument(/'name': expected a string, got a number/));
	// Still usable after the mistakes.
	r.register("ok", new native.NapiActorFactory({ onWake: null, onSleep: undefined }));
});
