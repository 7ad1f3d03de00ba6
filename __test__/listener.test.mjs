// The native listener, end to end with the example app (rivetkit 2.3.19):
//
// - `registry.start()` with RIVETKIT_RUNTIME_MODE=serverless binds the
//   listener on RIVET_PORT (RivetKit calls `listen()`, our
//   `serveListener`): the serverless routes, a public directory, and the
//   actors reached through the engine's start requests;
// - `registry.listen({ application })` beside a serving envoy (our
//   `serveApplicationListener`): RivetKit's routes and the application's
//   own routes on one port.
//
// Both end on SIGINT through RivetKit's own handler.

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { createClient } from "rivetkit/client";

import { freePort, interrupt, startApp, waitForOutput } from "./helpers/app.mjs";
import { startEngine, upsertServerlessRunnerConfig, waitFor } from "./helpers/engine.mjs";

/** RivetKit re-raises the signal after its drain (or exits 130 as PID 1). */
function assertInterrupted(exited, app) {
	assert.equal(exited.killed, false, `no exit within the bound after SIGINT\n${app.out.slice(-3000)}`);
	assert.ok(exited.signal === "SIGINT" || exited.code === 130, `ended by SIGINT, got ${JSON.stringify(exited)}`);
}

describe("registry.start() with RIVETKIT_RUNTIME_MODE=serverless: the native listener", () => {
	const POOL = "listener-app";
	let engine;
	let app;
	let client;
	let base;
	let publicDir;

	before(async () => {
		engine = await startEngine();
		const port = await freePort();
		base = `http://127.0.0.1:${port}`;
		publicDir = mkdtempSync(join(tmpdir(), "rivetkit-native-public-"));
		writeFileSync(join(publicDir, "hello.txt"), "hello from the public directory\n");
		app = startApp("src/server.mjs", {
			RIVETKIT_RUNTIME_MODE: "serverless",
			RIVET_PORT: String(port),
			RIVETKIT_PUBLIC_DIR: publicDir,
			RIVET_ENDPOINT: engine.endpoint,
			RIVET_POOL: POOL,
		});
		await waitFor(
			async () => {
				if (app.exited) throw new Error(`the app exited: ${JSON.stringify(app.exited)}\n${app.out}`);
				return (await fetch(`${base}/api/rivet/health`).catch(() => null))?.ok;
			},
			{ timeoutMs: 60_000, what: "the listener's /health" },
		);
		await upsertServerlessRunnerConfig(engine.endpoint, POOL, `${base}/api/rivet`);
		client = createClient({
			endpoint: engine.endpoint,
			namespace: engine.namespace,
			token: engine.token,
			poolName: POOL,
		});
	});

	after(async () => {
		if (app && !app.exited) app.child.kill("SIGKILL");
		await engine?.stop();
		if (publicDir) rmSync(publicDir, { recursive: true, force: true });
	});

	test("RivetKit's routes, a static file, and 404 for the rest", async () => {
		const health = await fetch(`${base}/api/rivet/health`);
		assert.equal(health.status, 200);
		assert.deepEqual(Object.keys(await health.json()).sort(), ["runtime", "status", "version"]);
		const metadata = await (await fetch(`${base}/api/rivet/metadata`)).json();
		assert.deepEqual(metadata.envoy.kind, { serverless: {} });
		assert.ok(metadata.actorNames.chatRoom);
		const root = await fetch(`${base}/api/rivet`);
		assert.match(await root.text(), /This is a RivetKit server/);
		const metrics = await fetch(`${base}/api/rivet/metrics`);
		assert.match(await metrics.text(), /^rivetkit_native_active_actors \d+$/m);

		const file = await fetch(`${base}/hello.txt`);
		assert.equal(file.status, 200);
		assert.equal(file.headers.get("content-type"), "text/plain; charset=utf-8");
		assert.equal(await file.text(), "hello from the public directory\n");
		assert.equal((await fetch(`${base}/../../etc/passwd`)).status, 404);
		const missing = await fetch(`${base}/nothing-here`);
		assert.equal(missing.status, 404);
		assert.equal(await missing.text(), "Not Found (RivetKit)");
	});

	test("actions, sleep and wake, and events through the engine's start requests", async () => {
		const counter = client.counter.getOrCreate(["listener"]);
		assert.equal(await counter.increment(7), 7);
		const from = app.out.length;
		await counter.goToSleep();
		const slept = await waitForOutput(app, /counter listener going to sleep/, { from });
		assert.equal(await counter.getCount(), 7);
		await waitForOutput(app, /counter listener awake \(count 7\)/, { from: slept });

		const conn = counter.connect();
		try {
			const counts = [];
			conn.on("newCount", (count) => counts.push(count));
			await conn.ready;
			await conn.getCount();
			assert.equal(await counter.increment(1), 8);
			await waitFor(() => counts.length >= 1, { what: "a newCount event" });
			assert.deepEqual(counts, [8]);
		} finally {
			await conn.dispose();
		}
	});

	test("a bad start request is a structured 400 over the listener", async () => {
		const res = await fetch(`${base}/api/rivet/start`, { method: "POST", body: "x" });
		assert.equal(res.status, 400);
		const body = await res.json();
		assert.equal(`${body.group}.${body.code}`, "request.invalid");
	});

	test("SIGINT: RivetKit drains and the process ends", async () => {
		const counter = client.counter.getOrCreate(["listener-persisted"]);
		assert.equal(await counter.increment(3), 3);
		const from = app.out.length;
		assertInterrupted(await interrupt(app), app);
		assert.match(app.out.slice(from), /counter listener-persisted going to sleep/);
	});
});

describe("registry.listen({ application }) beside a serving envoy", () => {
	const POOL = "application-listener";
	let engine;
	let app;
	let base;
	let client;

	before(async () => {
		engine = await startEngine();
		const port = await freePort();
		base = `http://127.0.0.1:${port}`;
		app = startApp("test/listen-server.mjs", {
			PORT: String(port),
			RIVET_ENDPOINT: engine.endpoint,
			RIVET_TOKEN: engine.token,
			RIVET_POOL: POOL,
		});
		await waitFor(
			async () => {
				if (app.exited) throw new Error(`the app exited: ${JSON.stringify(app.exited)}\n${app.out}`);
				return (await fetch(`${base}/api/rivet/health`).catch(() => null))?.ok;
			},
			{ timeoutMs: 60_000, what: "the application listener's /health" },
		);
		client = createClient({
			endpoint: engine.endpoint,
			namespace: engine.namespace,
			token: engine.token,
			poolName: POOL,
		});
	});

	after(async () => {
		if (app && !app.exited) app.child.kill("SIGKILL");
		await engine?.stop();
	});

	test("RivetKit's routes and the application's routes answer on one port", async () => {
		const health = await (await fetch(`${base}/api/rivet/health`)).json();
		assert.equal(health.status, "ok");
		const metadata = await (await fetch(`${base}/api/rivet/metadata`)).json();
		assert.deepEqual(metadata.envoy.kind, { normal: {} });

		const hello = await fetch(`${base}/hello?name=ada`);
		assert.equal(hello.status, 200);
		assert.deepEqual(await hello.json(), { hello: "ada", method: "GET", body: null });
		const posted = await fetch(`${base}/hello`, { method: "POST", body: "some text" });
		assert.deepEqual(await posted.json(), { hello: "world", method: "POST", body: "some text" });
		const missing = await fetch(`${base}/nope`);
		assert.equal(missing.status, 404);
		assert.equal(await missing.text(), "no such page\n");
		const failed = await fetch(`${base}/fail`);
		assert.equal(failed.status, 500);
	});

	test("the application's streamed response flushes each event as written", async () => {
		const res = await fetch(`${base}/events`);
		assert.equal(res.status, 200);
		assert.equal(res.headers.get("content-type"), "text/event-stream");
		const reader = res.body.getReader();
		const decoder = new TextDecoder();
		let text = "";
		// The application writes the second event only after /release.
		while (!text.includes("\n\n")) text += decoder.decode((await reader.read()).value, { stream: true });
		assert.equal(text, "data: first\n\n");
		assert.equal(await (await fetch(`${base}/release`, { method: "POST" })).text(), "released");
		for (;;) {
			const { done, value } = await reader.read();
			if (done) break;
			text += decoder.decode(value, { stream: true });
		}
		assert.equal(text, "data: first\n\ndata: second\n\n");
	});

	test("the actors serve as usual", async () => {
		const counter = client.counter.getOrCreate(["app-listener"]);
		assert.equal(await counter.increment(4), 4);
		assert.equal(await counter.getCount(), 4);
	});

	test("SIGINT: RivetKit drains and the process ends", async () => {
		assertInterrupted(await interrupt(app), app);
		assert.match(app.out, /counter app-listener going to sleep/);
	});
});
