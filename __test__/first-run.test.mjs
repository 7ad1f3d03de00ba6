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
import { after, test } from "node:test";

import { findFreePorts } from "./helpers/engine.mjs";
import { native, uniquePool } from "./helpers/actors.mjs";
import { startApp } from "./helpers/app.mjs";

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

// Every failed serve() here sets process.exitCode to 1 (README, "Errors"):
// the failures are on purpose, so this file's exit code is put back.
after(() => {
	process.exitCode = undefined;
});

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
		const body = await rejectsFast(
			registry().serve({ endpoint: `http://127.0.0.1:${port}`, poolName: uniquePool() }),
			"engine.port_occupied",
		);
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
		const body = await rejectsFast(
			registry().serve({ endpoint: `http://127.0.0.1:${port}`, poolName: uniquePool() }),
			"engine.port_occupied",
		);
		assert.match(body.message, /accepted the connection but gave no HTTP answer/);
	} finally {
		server.close();
	}
});

test("an unresolvable endpoint fails at once, not after the connect bound, with the DNS failure in the message", async () => {
	const r = registry();
	// The default connect bound (30 s) is far beyond rejectsFast's.
	const serving = r.serve({ endpoint: "http://no-such-host.invalid:6420", poolName: uniquePool() });
	const body = await rejectsFast(serving, "engine.unreachable");
	assert.match(body.message, /DNS lookup of 'no-such-host\.invalid' failed/);
});

test("a failed serve() sets process.exitCode to 1, unless the host set one or turned it off", async () => {
	const failing = (extra = {}) =>
		registry()
			.serve({ endpoint: "http://no-such-host.invalid:6420", poolName: uniquePool(), ...extra })
			.catch((err) => err.code);
	try {
		process.exitCode = undefined;
		assert.equal(await failing(), "engine.unreachable");
		assert.equal(process.exitCode, 1);

		process.exitCode = undefined;
		assert.equal(await failing({ exitCodeOnFailure: false }), "engine.unreachable");
		assert.equal(process.exitCode, undefined);

		process.exitCode = 3;
		assert.equal(await failing(), "engine.unreachable");
		assert.equal(process.exitCode, 3);
	} finally {
		process.exitCode = undefined;
	}
});

test("a RivetKit app that cannot start says why once, at error level, and exits with code 1", async () => {
	// registry.start() only logs serve()'s rejection (at warn, as bridged
	// JSON) and would let the process exit 0.
	const app = startApp("src/server.mjs", {
		RIVET_ENDPOINT: "http://no-such-host.invalid:6420",
		RIVET_LOG_LEVEL: "info",
	});
	await app.exit;
	assert.equal(app.exited.code, 1, app.out);
	// Our lines (RivetKit's own are logfmt, `level=...`).
	const ours = app.out
		.split("\n")
		.filter((line) => /^\d{4}-\d\d-\d\dT/.test(line) && line.includes("no-such-host.invalid"));
	assert.equal(ours.length, 1, `one line of ours names the host:\n${app.out}`);
	assert.match(
		ours[0],
		/ERROR .*the registry could not start: The Rivet Engine at http:\/\/no-such-host\.invalid:6420\/? cannot be reached: the DNS lookup of 'no-such-host\.invalid' failed.*Check the endpoint/,
	);
	assert.doesNotMatch(ours[0], /__RIVET_ERROR_JSON__/);
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
	const run = spawnSync(
		process.execPath,
		["-e", `require(${JSON.stringify(addon)}); new (require(${JSON.stringify(addon)}).CoreRegistry)().health()`],
		{
			env: { ...process.env, RIVET_LOG_LEVEL: "wran", RUST_LOG_FORMAT: "" },
			encoding: "utf8",
			timeout: 20_000,
		},
	);
	assert.equal(run.status, 0, run.stderr);
	assert.match(run.stderr, /unknown log level `wran`/);
	assert.match(run.stderr, /trace, debug, info, warn, error/);
});

test("waitReady() before serve() rejects at once; shutdown() before serve() resolves and ends the registry", async () => {
	const r = registry();
	await rejectsFast(r.waitReady(), "napi.invalid_state");
	await r.shutdown();
	await rejectsFast(r.waitReady(), "registry.shut_down");
	assert.throws(
		() => r.serve({ poolName: uniquePool() }),
		(err) => err.code === "napi.invalid_state",
	);
	assert.throws(
		() => r.register("late", new native.NapiActorFactory({})),
		(err) => err.code === "napi.invalid_state",
	);
});

test("bad constructor and register() arguments are napi.invalid_argument", () => {
	const invalidArgument = (pattern) => (err) => {
		assert.equal(err.code, "napi.invalid_argument", err.message);
		assert.match(err.message, /^__RIVET_ERROR_JSON__:/);
		assert.match(err.message, pattern);
		return true;
	};
	assert.throws(() => new native.NapiActorFactory(null), invalidArgument(/'callbacks': expected an object, got null/));
	assert.throws(
		() => new native.NapiActorFactory({ onWake: 42 }),
		invalidArgument(/callbacks\.onWake` must be a function, got a number/),
	);
	assert.throws(
		() => new native.NapiActorFactory({ actions: 42 }),
		invalidArgument(/callbacks\.actions` must be an object of functions/),
	);
	const r = new native.CoreRegistry();
	assert.throws(() => r.register("x", {}), invalidArgument(/'factory': expected a NapiActorFactory, got an object/));
	assert.throws(() => r.register("x", null), invalidArgument(/'factory': expected a NapiActorFactory, got null/));
	assert.throws(
		() => r.register("", new native.NapiActorFactory({})),
		invalidArgument(/'name': an actor name must not be empty/),
	);
	assert.throws(
		() => r.register(42, new native.NapiActorFactory({})),
		invalidArgument(/'name': expected a string, got a number/),
	);
	// Still usable after the mistakes.
	r.register("ok", new native.NapiActorFactory({ onWake: null, onSleep: undefined }));
});
