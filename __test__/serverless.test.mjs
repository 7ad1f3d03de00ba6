// Serverless mode, end to end: the example app's `registry.serve()` fetch
// handler mounted in Node's own http server (examples/rivetkit-app/src/
// serverless.mjs), a serverless runner config on a real engine pointing at
// it, and RivetKit's official client. Between the engine and the app sits a
// recording proxy, so the test sees the engine's `/start` requests and
// the events of each stream as they arrive.

import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { createClient } from "rivetkit/client";

import { native } from "./helpers/actors.mjs";
import { freePort, interrupt, recordingProxy, startApp, waitForOutput } from "./helpers/app.mjs";
import { findFreePorts, startEngine, upsertServerlessRunnerConfig, waitFor } from "./helpers/engine.mjs";

const POOL = "serverless-app";

const starts = (proxy) => proxy.requests.filter((r) => r.path.endsWith("/start") && r.status === 200);
const pings = (record) => record.chunks.join("").split("event: ping").length - 1;

describe("registry.serve() in Node's http server, with a serverless runner config", () => {
	let engine;
	let app;
	let proxy;
	let client;
	let appUrl;

	before(async () => {
		engine = await startEngine();
		const port = await freePort();
		appUrl = `http://127.0.0.1:${port}`;
		app = startApp("src/serverless.mjs", { PORT: String(port), RIVET_ENDPOINT: engine.endpoint, RIVET_POOL: POOL });
		await waitForOutput(app, /serverless handler listening/);
		proxy = await recordingProxy(appUrl);
		await upsertServerlessRunnerConfig(engine.endpoint, POOL, `${proxy.url}/api/rivet`);
		client = createClient({
			endpoint: engine.endpoint,
			namespace: engine.namespace,
			token: engine.token,
			poolName: POOL,
		});
	});

	after(async () => {
		if (app && !app.exited) app.child.kill("SIGKILL");
		await proxy?.close();
		await engine?.stop();
	});

	test("health and metadata answer through the fetch handler", async () => {
		const health = await fetch(`${appUrl}/api/rivet/health`);
		assert.equal(health.status, 200);
		assert.equal((await health.json()).status, "ok");
		const metadata = await (await fetch(`${appUrl}/api/rivet/metadata`)).json();
		assert.deepEqual(metadata.envoy.kind, { serverless: {} });
		assert.equal(metadata.runtime, "rivetkit");
		assert.equal(metadata.envoyProtocolVersion, 8);
		assert.ok(metadata.actorNames.counter, JSON.stringify(metadata));
		assert.ok(
			proxy.requests.some((r) => r.path.endsWith("/metadata")),
			"the engine read the metadata when the runner config was saved",
		);
	});

	test("actions reach an actor that the engine started through /start", async () => {
		const counter = client.counter.getOrCreate(["actions"]);
		assert.equal(await counter.increment(2), 2);
		assert.equal(await counter.increment(3), 5);
		assert.equal(await counter.getCount(), 5);
		const room = client.chatRoom.getOrCreate(["actions"]);
		await room.sendMessage("ada", "hello");
		assert.deepEqual(
			(await room.getHistory()).map((m) => m.text),
			["hello"],
		);
		assert.ok(starts(proxy).length >= 2, "one start request per actor");
		for (const start of starts(proxy)) {
			assert.equal(start.method, "POST");
			assert.equal(start.headers["x-rivet-pool-name"], POOL);
		}
	});

	test("the start's event stream flushes: pings arrive while the actor runs", async () => {
		const counter = client.counter.getOrCreate(["stream"]);
		await counter.getCount();
		// The actor is running, so its start request is still open; every
		// ping the proxy saw arrived through Node's http server one by one.
		const open = await waitFor(() => starts(proxy).find((s) => !s.ended && pings(s) >= 3), {
			timeoutMs: 20_000,
			what: "an open start stream with three pings",
		});
		assert.ok(open.chunks.length >= 3, `pings arrived in separate chunks: ${JSON.stringify(open.chunks)}`);
		assert.ok(open.chunks[0].startsWith("event: ping"), JSON.stringify(open.chunks[0]));
	});

	test("state survives sleep and wake; the stopped generation's stream says stopping", async (t) => {
		const counter = client.counter.getOrCreate(["sleepy"]);
		assert.equal(await counter.increment(7), 7);
		const before = starts(proxy).length;
		const from = app.out.length;
		await counter.goToSleep();
		const slept = await waitForOutput(app, /counter sleepy going to sleep/, { from });
		// Finished either way: ended by the host, or closed by the engine on reading `stopping`.
		await waitFor(
			() => starts(proxy).some((s) => (s.ended || s.closedByClient) && s.chunks.join("").includes("event: stopping")),
			{
				timeoutMs: 20_000,
				what: "a start stream that ended with a stopping event",
			},
		).catch((err) => {
			// Say what each stream and the host did.
			const streams = starts(proxy).map((s) => ({
				ended: s.ended,
				closedByClient: s.closedByClient,
				chunks: s.chunks.length,
				last: s.chunks.at(-1)?.slice(0, 40),
			}));
			throw new Error(
				`${err.message}\nstart streams: ${JSON.stringify(streams)}\nhost since the sleep:\n${app.out.slice(from).slice(-4000)}`,
			);
		});
		const finished = starts(proxy).find((s) => s.chunks.join("").includes("event: stopping"));
		t.diagnostic(
			`the stopped generation's stream: ${finished?.ended ? "ended by the host" : "closed by the engine first"}`,
		);
		assert.equal(await counter.getCount(), 7);
		await waitForOutput(app, /counter sleepy awake \(count 7\)/, { from: slept });
		assert.ok(starts(proxy).length > before, "the wake came through a new start request");
	});

	test("events over a connection", async () => {
		const counter = client.counter.getOrCreate(["events"]);
		await counter.getCount();
		const conn = counter.connect();
		try {
			const counts = [];
			conn.on("newCount", (count) => counts.push(count));
			await conn.ready;
			await conn.getCount();
			assert.equal(await conn.increment(2), 2);
			assert.equal(await counter.increment(3), 5);
			await waitFor(() => counts.length >= 2, { what: "two newCount events" });
			assert.deepEqual(counts, [2, 5]);
		} finally {
			await conn.dispose();
		}
	});

	// rivet-dev #4596: serverless WebSockets were cut every ~30 s, the
	// gateway's pings unanswered. A connection held 40 s must neither close
	// nor reconnect, and still carry actions and events.
	test("a connection held past 30 s stays open and keeps working", async (t) => {
		const counter = client.counter.getOrCreate(["held"]);
		await counter.getCount();
		const conn = counter.connect();
		try {
			const statuses = [];
			conn.onStatusChange((status) => statuses.push(status));
			const counts = [];
			conn.on("newCount", (count) => counts.push(count));
			await conn.ready;
			assert.equal(await conn.increment(1), 1);
			const connectedAt = statuses.length;
			await new Promise((resolve) => setTimeout(resolve, 40_000));
			assert.deepEqual(statuses.slice(connectedAt), [], "the connection changed state while held");
			assert.equal(conn.connStatus, "connected");
			assert.equal(await conn.increment(2), 3);
			await waitFor(() => counts.length >= 2, { what: "the second newCount event" });
			assert.deepEqual(counts, [1, 3]);
			t.diagnostic(`statuses over the whole test: ${JSON.stringify(statuses)}`);
		} finally {
			await conn.dispose();
		}
	});

	test("bad start requests get a structured 4xx and the host keeps serving", async () => {
		const counter = client.counter.getOrCreate(["after-bad-starts"]);
		assert.equal(await counter.increment(1), 1);
		const real = starts(proxy).at(-1);
		const headers = {
			"x-rivet-endpoint": real.headers["x-rivet-endpoint"],
			"x-rivet-pool-name": POOL,
			"x-rivet-namespace-name": real.headers["x-rivet-namespace-name"],
			"x-rivet-token": real.headers["x-rivet-token"] ?? "",
		};
		const start = async (h, body) => {
			const res = await fetch(`${appUrl}/api/rivet/start`, { method: "POST", headers: h, body });
			return { status: res.status, body: await res.json() };
		};

		let res = await start({}, real.body);
		assert.equal(res.status, 400);
		assert.equal(`${res.body.group}.${res.body.code}`, "request.invalid");
		assert.match(res.body.message, /x-rivet-endpoint/);

		res = await start(headers, Buffer.from("not a start payload"));
		assert.equal(res.status, 400);
		assert.equal(`${res.body.group}.${res.body.code}`, "request.invalid");
		assert.match(res.body.message, /start payload/);

		res = await start(headers, Buffer.alloc(16 * 1024 * 1024 + 1));
		assert.equal(res.status, 413);
		assert.equal(`${res.body.group}.${res.body.code}`, "message.incoming_too_long");

		// A real start payload, for a pool this host does not serve.
		res = await start({ ...headers, "x-rivet-pool-name": "another-pool" }, real.body);
		assert.equal(res.status, 400);
		assert.equal(`${res.body.group}.${res.body.code}`, "config.pool_mismatch");
		assert.deepEqual(res.body.metadata, { expected: POOL, received: "another-pool" });

		res = await start({ ...headers, "x-rivet-namespace-name": "elsewhere" }, real.body);
		assert.equal(res.status, 400);
		assert.equal(`${res.body.group}.${res.body.code}`, "config.namespace_mismatch");

		res = await start({ ...headers, "x-rivet-endpoint": "http://127.0.0.1:1" }, real.body);
		assert.equal(res.status, 400);
		assert.equal(`${res.body.group}.${res.body.code}`, "config.endpoint_mismatch");

		assert.equal(await counter.increment(1), 2, "the host keeps serving");
		assert.equal((await fetch(`${appUrl}/api/rivet/health`)).status, 200);
	});

	test("SIGINT drains the registry and the process exits by itself", async () => {
		const counter = client.counter.getOrCreate(["persisted"]);
		assert.equal(await counter.increment(42), 42);
		const from = app.out.length;
		const exited = await interrupt(app);
		assert.equal(exited.killed, false, `no exit within the bound after SIGINT\n${app.out.slice(from)}`);
		assert.equal(exited.code, 0, JSON.stringify(exited));
		assert.match(app.out.slice(from), /counter persisted going to sleep/, "the drain put the actor to sleep");
	});
});

describe("handleServerlessRequest: the napi contract", () => {
	const config = { endpoint: "http://127.0.0.1:1", engineSpawn: "never", serverlessPackageVersion: "1.2.3" };

	/** Calls it and collects the body events: `{head, events, body}`. */
	async function call(registry, req) {
		const events = [];
		let ended;
		const done = new Promise((resolve) => (ended = resolve));
		const head = await registry.handleServerlessRequest(
			{ method: "GET", headers: {}, body: Buffer.alloc(0), ...req },
			async (err, event) => {
				assert.equal(err, null);
				events.push(event);
				if (event.kind === "end") ended();
			},
			new native.CancellationToken(),
			config,
		);
		await done;
		const body = Buffer.concat(events.filter((e) => e.kind === "chunk").map((e) => e.chunk)).toString();
		return { head, events, body };
	}

	test("the head resolves, then chunks, then one end", async () => {
		const registry = new native.CoreRegistry();
		const { head, events, body } = await call(registry, { url: "http://h/api/rivet/health" });
		assert.equal(head.status, 200);
		assert.equal(head.headers["content-type"], "application/json");
		assert.deepEqual(JSON.parse(body), { status: "ok", runtime: "rivetkit", version: "1.2.3" });
		assert.deepEqual(events.at(-1), { kind: "end" });
		// Before any start, the registry's own health() reports no engine link.
		assert.equal((await registry.health()).status, 503);
		assert.deepEqual(JSON.parse(registry.metadata().body).envoy.kind, { serverless: {} });
		await assert.rejects(registry.waitReady(), (err) => err.code === "napi.invalid_state");
		assert.throws(
			() => registry.serve(config),
			(err) => err.code === "napi.invalid_state",
		);

		const bad = await call(registry, { method: "POST", url: "http://h/api/rivet/start" });
		assert.equal(bad.head.status, 400);
		assert.equal(JSON.parse(bad.body).code, "invalid");

		await registry.shutdown();
		await assert.rejects(
			call(registry, { url: "http://h/api/rivet/health" }),
			(err) => err.code === "registry.shut_down",
		);
	});

	test("bad arguments and the other mode are structured rejections", async () => {
		const registry = new native.CoreRegistry();
		const token = new native.CancellationToken();
		const req = { method: "GET", url: "http://h/", headers: {}, body: Buffer.alloc(0) };
		await assert.rejects(
			registry.handleServerlessRequest("nope", () => {}, token, config),
			(err) => err.code === "napi.invalid_argument",
		);
		await assert.rejects(
			registry.handleServerlessRequest(req, 42, token, config),
			(err) => err.code === "napi.invalid_argument",
		);
		await assert.rejects(
			registry.handleServerlessRequest(req, () => {}, {}, config),
			(err) => err.code === "napi.invalid_argument",
		);
		await assert.rejects(
			registry.serveListener({ port: 70000 }, config),
			(err) => err.code === "napi.invalid_argument" && /listener\.port/.test(err.message),
		);

		const serving = new native.CoreRegistry();
		const served = serving
			.serve({ ...config, envoyConnectTimeoutMs: 100, exitCodeOnFailure: false })
			.catch((err) => err);
		await assert.rejects(
			serving.handleServerlessRequest(req, () => {}, token, config),
			(err) => err.code === "napi.invalid_state",
		);
		await serving.shutdown();
		await served;
	});
});

describe("handleServerlessRequest: a failed engine start is not kept", () => {
	let storage;
	/** Pids of the engines started with our storage directory. */
	function enginePids() {
		const pids = [];
		for (const entry of readdirSync("/proc")) {
			if (!/^\d+$/.test(entry)) continue;
			try {
				const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
				if (cmdline.includes("rivet-engine") && cmdline.includes(storage)) pids.push(Number(entry));
			} catch {}
		}
		return pids;
	}

	before(() => {
		storage = mkdtempSync(join(tmpdir(), "rivetkit-native-serverless-engine-"));
		// Read by the engine spawn of this process (crates/core/src/engine/paths.rs).
		process.env.RIVETKIT_STORAGE_PATH = storage;
	});

	after(async () => {
		delete process.env.RIVETKIT_STORAGE_PATH;
		for (const pid of enginePids()) {
			try {
				process.kill(pid, "SIGTERM");
			} catch {}
		}
		await waitFor(() => enginePids().length === 0, { timeoutMs: 10_000, what: "the engine to exit" }).catch(() => {
			for (const pid of enginePids()) process.kill(pid, "SIGKILL");
		});
		rmSync(storage, { recursive: true, force: true });
	});

	test("a held port fails /start but not /health; once it is free, the next request starts the engine", async () => {
		const { guard } = await findFreePorts();
		const endpoint = `http://127.0.0.1:${guard}`;
		const config = { endpoint, engineSpawn: "auto", serverlessPackageVersion: "1.2.3" };
		// Something that is not an engine holds the engine's port.
		const squatter = createServer((_req, res) => res.writeHead(404).end("not an engine"));
		squatter.listen(guard, "127.0.0.1");
		await once(squatter, "listening");

		const registry = new native.CoreRegistry();
		registry.register("noop", new native.NapiActorFactory({}));
		const call = async (method, path) => {
			let ended;
			const done = new Promise((resolve) => (ended = resolve));
			const chunks = [];
			const head = await registry.handleServerlessRequest(
				{ method, url: `http://h/api/rivet${path}`, headers: {}, body: Buffer.alloc(0) },
				async (_err, event) => {
					if (event.kind === "chunk") chunks.push(event.chunk);
					if (event.kind === "end") ended();
				},
				new native.CancellationToken(),
				config,
			);
			await done;
			return { status: head.status, body: JSON.parse(Buffer.concat(chunks).toString() || "null") };
		};
		try {
			const held = await call("POST", "/start");
			assert.equal(held.status, 503, JSON.stringify(held.body));
			assert.equal(`${held.body.group}.${held.body.code}`, "engine.port_occupied", JSON.stringify(held.body));
			const health = await call("GET", "/health");
			assert.equal(health.status, 200);
			assert.equal(health.body.status, "ok");
		} finally {
			squatter.close();
			await once(squatter, "close");
		}

		// The port is free: the next request starts the engine; /start now
		// gets past it to the start request's own checks (no engine headers).
		const freed = await call("POST", "/start");
		assert.equal(freed.status, 400, JSON.stringify(freed.body));
		assert.notEqual(freed.body.code, "port_occupied");
		assert.equal(enginePids().length, 1, "one engine started with our storage");
		assert.equal((await call("GET", "/health")).status, 200);
		await registry.shutdown();
	});
});
