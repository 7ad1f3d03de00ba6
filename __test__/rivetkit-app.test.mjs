// The RivetKit example app as a user runs it, under both RivetKit versions:
// an unmodified app whose `@rivetkit/rivetkit-napi` is this addon (npm
// `overrides`), started with `node src/server.mjs` on an engine that the
// addon spawns on private ports with temporary storage (engine 2.3 for
// `rivetkit@2.3.19`, examples/rivetkit-app; engine 3.0 for
// `rivetkit@3.0.0`, examples/rivetkit-app-3), and driven with that
// RivetKit's official client. Ctrl-C is RivetKit's own handler: it drains
// and re-raises SIGINT, and the engine the addon started stops with it.
// The first app of each version also exports its spans over OTLP to a
// receiver in this process (docs/telemetry.md), and its `echo` actor's raw
// WebSockets hibernate (on engine 2.3 the socket outlives the actor's
// sleep; engine 3.0 closes it, docs/engine.md).
//
// Needs the examples' dependencies (the root `npm install` installs them).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";

// The client entry point never loads the napi addon: the 2.3 app's comes
// from the root's devDependency, the 3.0 app's from its own install.
import { createClient as createClient2 } from "rivetkit/client";

import { appDirFor } from "./helpers/app.mjs";
import { ADMIN_TOKEN, findFreePorts, gatewayFetch, waitFor } from "./helpers/engine.mjs";
import { stopEnginesUnder } from "./helpers/processes.mjs";
import { inbox } from "./helpers/ws-inbox.mjs";

/**
 * An OTLP/HTTP receiver (a plain HTTP server reading the JSON the exporter
 * posts) standing in for a collector: the first app of each version
 * exports its spans here.
 */
async function otlpCollector() {
	const received = [];
	const server = createServer((req, res) => {
		let body = "";
		req.on("data", (chunk) => {
			body += chunk;
		});
		req.on("end", () => {
			received.push({ path: req.url, body });
			res.writeHead(200, { "content-type": "application/json" }).end("{}");
		});
	});
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	return {
		env: {
			OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${server.address().port}`,
			OTEL_SERVICE_NAME: "rivetkit-app",
		},
		paths: () => received.map((r) => r.path),
		spans: () =>
			received.flatMap((r) =>
				JSON.parse(r.body).resourceSpans.flatMap((rs) =>
					rs.scopeSpans.flatMap((ss) => ss.spans.map((span) => ({ ...span, resource: rs.resource }))),
				),
			),
		close: () => new Promise((resolve) => server.close(resolve)),
	};
}

/** A span's (or a resource's) attribute `key`. */
const attr = (span, key) => {
	const value = span.attributes.find((a) => a.key === key)?.value;
	return value?.stringValue ?? value?.doubleValue ?? value?.intValue;
};

const EXIT_BOUND_MS = 5_000;
const START_TIMEOUT_MS = 90_000;
const FIXTURE_POOL = "rivetkit-app-fixture";

for (const version of ["2", "3"]) {
	const appDir = appDirFor({ rivetkit: version });
	const storage = mkdtempSync(join(tmpdir(), "rivetkit-native-app-"));
	const fixtureStorage = mkdtempSync(join(tmpdir(), "rivetkit-native-app-fixture-"));
	const { createClient: clientOf } =
		version === "3"
			? await import(pathToFileURL(join(appDir, "node_modules/rivetkit/dist/tsup/client/mod.js")).href)
			: { createClient: createClient2 };
	/** The official client of this version; engine 3.0 asks every client for the token. */
	const createClient = (options) => clientOf({ ...options, ...(version === "3" ? { token: ADMIN_TOKEN } : {}) });

	/**
	 * Runs `script` (relative to the example) against the test's engine.
	 * RivetKit 2.3 connects to RIVET_ENDPOINT but binds a local engine it starts
	 * to RIVET_RUN_ENGINE_PORT (default 6420), so both name the private port.
	 * RivetKit 3.0 starts an engine only when no endpoint is given: its
	 * endpoint is then the one of RIVET_RUN_ENGINE_PORT.
	 */
	function startApp(script, port, env = {}) {
		const child = spawn(process.execPath, [join(appDir, script)], {
			cwd: appDir,
			env: {
				...process.env,
				...(version === "3" ? {} : { RIVET_ENDPOINT: `http://127.0.0.1:${port}` }),
				RIVET_RUN_ENGINE_PORT: String(port),
				RIVETKIT_STORAGE_PATH: storage,
				RIVET_LOG_LEVEL: "info",
				...env,
			},
			stdio: ["ignore", "pipe", "pipe"],
		});
		const app = { child, out: "", exited: null, killedByTimer: false };
		child.stdout.on("data", (d) => (app.out += d));
		child.stderr.on("data", (d) => (app.out += d));
		app.exit = once(child, "exit").then(([code, signal]) => (app.exited = { code, signal }));
		return app;
	}

	/** Waits until the app's registry is serving; fails fast if it exited. */
	async function appReady(app, label) {
		await waitFor(() => app.exited || /registry serving/.test(app.out), {
			timeoutMs: START_TIMEOUT_MS,
			what: `${label} to serve`,
		});
		if (!/registry serving/.test(app.out)) {
			throw new Error(`${label} exited (${JSON.stringify(app.exited)}) before serving:\n${app.out}`);
		}
	}

	/** Resolves to the index just after the first match of `re` at or after `from`. */
	async function waitForLine(app, re, { from = 0, what = String(re) } = {}) {
		const find = () => {
			const m = re.exec(app.out.slice(from));
			return m ? from + m.index + m[0].length : 0;
		};
		await waitFor(() => find() || app.exited, { timeoutMs: 60_000, what: `log line ${what}` });
		const at = find();
		if (!at) throw new Error(`the app exited while waiting for ${what}:\n${app.out}`);
		return at;
	}

	/** Sends SIGINT and waits for the exit; SIGKILL after the bound. */
	async function interrupt(app) {
		app.child.kill("SIGINT");
		const timer = setTimeout(() => {
			app.killedByTimer = true;
			app.child.kill("SIGKILL");
		}, EXIT_BOUND_MS);
		await app.exit;
		clearTimeout(timer);
		return app.exited;
	}

	/** Asserts that the app ended by RivetKit's re-raised SIGINT, in time. */
	function assertInterrupted(app, exited) {
		assert.equal(app.killedByTimer, false, `no exit within ${EXIT_BOUND_MS} ms of SIGINT\n${app.out}`);
		assert.ok(
			exited.signal === "SIGINT" || exited.code === 130,
			`ended by the re-raised SIGINT, got ${JSON.stringify(exited)}\n${app.out}`,
		);
	}

	describe(`RivetKit ${version === "3" ? "3.0.0" : "2.3.19"} example app on rivetkit-native`, () => {
		let endpoint;
		let port;
		let app;
		let client;
		const apps = [];
		let enginePid;
		let collector;

		before(async () => {
			assert.ok(
				existsSync(join(appDir, "node_modules/rivetkit/package.json")),
				"the example's dependencies are installed (the root `npm install` does it)",
			);
			port = (await findFreePorts()).guard;
			endpoint = `http://127.0.0.1:${port}`;
			collector = await otlpCollector();
			app = startApp("src/server.mjs", port, collector.env);
			apps.push(app);
			enginePid = () => Number(apps[0].out.match(/engine ready after .*pid=(\d+)/)?.[1]);
			await appReady(app, "the app");
			client = createClient({ endpoint });
		});

		after(async () => {
			for (const a of apps) if (!a.exited) a.child.kill("SIGKILL");
			// Only reached with an engine still running when a test failed half-way:
			// the test owns it, so it stops it by the pid the addon logged.
			const pid = enginePid?.();
			if (pid) {
				const alive = () => {
					try {
						process.kill(pid, 0);
						return true;
					} catch {
						return false;
					}
				};
				try {
					process.kill(pid, "SIGTERM");
					await waitFor(() => !alive(), { timeoutMs: 10_000, what: "the engine to exit" });
				} catch {
					if (alive()) process.kill(pid, "SIGKILL");
				}
			}
			// Any other engine with its storage here (a pid the log did not show).
			await stopEnginesUnder(storage);
			await stopEnginesUnder(fixtureStorage);
			rmSync(storage, { recursive: true, force: true });
			rmSync(fixtureStorage, { recursive: true, force: true });
			await collector?.close();
		});

		test("actions through handles", async () => {
			const counter = client.counter.getOrCreate(["handles"]);
			assert.equal(await counter.increment(), 1);
			assert.equal(await counter.increment(5), 6);
			assert.equal(await counter.getCount(), 6);
			const other = client.counter.getOrCreate(["handles-other"]);
			assert.equal(await other.getCount(), 0, "keys are separate actors");

			const room = client.chatRoom.getOrCreate(["handles"]);
			const sent = await room.sendMessage("ada", "hello");
			assert.equal(sent.text, "hello");
			assert.deepEqual(
				(await room.getHistory()).map((m) => `${m.sender}: ${m.text}`),
				["ada: hello"],
			);
		});

		test("connections: actions over the socket and broadcast events", async () => {
			const counter = client.counter.getOrCreate(["events"]);
			const room = client.chatRoom.getOrCreate(["events"]);
			await counter.getCount();
			await room.getHistory();

			const conn = counter.connect();
			const alice = room.connect();
			const bob = room.connect();
			try {
				const counts = [];
				conn.on("newCount", (count) => counts.push(count));
				const seenByAlice = [];
				alice.on("newMessage", (message) => seenByAlice.push(message));
				const seenByBob = [];
				bob.on("newMessage", (message) => seenByBob.push(message));
				// Events reach connections that are open and subscribed when the
				// broadcast happens; a round trip on each connection after its
				// subscription makes sure of both.
				await Promise.all([conn.ready, alice.ready, bob.ready]);
				await Promise.all([alice.getHistory(), bob.getHistory()]);

				assert.equal(await conn.increment(2), 2);
				// An action through a plain handle reaches the connected client too.
				assert.equal(await counter.increment(3), 5);
				await waitFor(() => counts.length >= 2, { what: "two newCount events" });
				assert.deepEqual(counts, [2, 5]);

				await alice.sendMessage("alice", "hi bob");
				await waitFor(() => seenByBob.length >= 1 && seenByAlice.length >= 1, { what: "newMessage on both" });
				assert.equal(seenByBob[0].sender, "alice");
				assert.equal(seenByBob[0].text, "hi bob");
				assert.deepEqual(seenByAlice, seenByBob);
				assert.equal((await bob.getHistory()).length, 1);
			} finally {
				await Promise.all([conn.dispose(), alice.dispose(), bob.dispose()]);
			}
		});

		test("state survives sleep and wake", async () => {
			const counter = client.counter.getOrCreate(["sleepy"]);
			assert.equal(await counter.increment(7), 7);
			const from = app.out.length;
			await counter.goToSleep();
			const slept = await waitForLine(app, /counter sleepy going to sleep/, { from });
			assert.equal(await counter.getCount(), 7);
			await waitForLine(app, /counter sleepy awake \(count 7\)/, { from: slept, what: "the wake with count 7" });
		});

		test("c.kv: a reminder fired by hand is logged in KV", async () => {
			const reminders = client.reminders.getOrCreate(["kv"]);
			await reminders.fire("water the plants");
			await reminders.fire("call mum");
			assert.deepEqual(await reminders.getFired(), {
				count: 2,
				last: "call mum",
				log: ["water the plants", "call mum"],
			});
		});

		test("c.schedule: an alarm wakes a sleeping actor and fires", async () => {
			const reminders = client.reminders.getOrCreate(["alarm"]);
			assert.deepEqual(await reminders.getFired(), { count: 0, last: null, log: [] });
			const from = app.out.length;
			const id = await reminders.remindIn(4_000, "stretch");
			assert.equal(typeof id, "string");
			await reminders.goToSleep();
			// Nothing is sent to the actor from here on: the schedule wakes it.
			const slept = await waitForLine(app, /reminders alarm going to sleep/, { from });
			const woke = await waitForLine(app, /reminders alarm awake/, { from: slept, what: "the wake by the alarm" });
			await waitForLine(app, /reminders alarm: fired "stretch"/, { from: woke, what: "the fired reminder" });
			assert.deepEqual(await reminders.getFired(), { count: 1, last: "stretch", log: ["stretch"] });
		});

		test("raw onRequest: the client's fetch and a plain gateway request", async () => {
			const echo = client.echo.getOrCreate(["http"]);
			const res = await echo.fetch("/greet?name=ada", { method: "POST", body: "hello" });
			assert.equal(res.status, 200);
			assert.deepEqual(await res.json(), {
				actor: "http",
				method: "POST",
				path: "/greet",
				query: { name: "ada" },
				body: "hello",
			});

			const actorId = await echo.resolve();
			const plain = await gatewayFetch(endpoint, actorId, "/request/status");
			assert.equal(plain.status, 200);
			const body = await plain.json();
			assert.equal(body.method, "GET");
			assert.equal(body.path, "/status");
			assert.equal(body.body, null);
		});

		test("raw onWebSocket: greets and echoes", async () => {
			const echo = client.echo.getOrCreate(["socket"]);
			await echo.fetch("/");
			const ws = await echo.webSocket("/chat");
			const messages = inbox(ws);
			try {
				if (ws.readyState !== 1) await new Promise((resolve) => ws.addEventListener("open", resolve, { once: true }));
				assert.equal(await messages.next(), "hello from echo socket (wake 1)");
				ws.send("ping");
				ws.send("pong");
				assert.deepEqual([await messages.next(), await messages.next()], ["ping", "pong"]);
			} finally {
				ws.close();
			}
		});

		test("raw onWebSocket with hibernation: the socket outlives the actor's sleep on engine 2.3", async () => {
			const echo = client.echo.getOrCreate(["hibernate"]);
			let ws = await echo.webSocket("/chat");
			let messages = inbox(ws);
			try {
				if (ws.readyState !== 1) await new Promise((resolve) => ws.addEventListener("open", resolve, { once: true }));
				assert.equal(await messages.next(), "hello from echo hibernate (wake 1)");
				ws.send("one");
				assert.equal(await messages.next(), "one");

				const from = app.out.length;
				ws.send("sleep");
				assert.equal(await messages.next(), "sleeping");
				const slept = await waitForLine(app, /echo hibernate going to sleep/, { from });
				if (version === "2") {
					assert.equal(messages.closed, null, "the socket is open while the actor sleeps");
					// The next message wakes it; the new generation serves the same socket.
					ws.send("two");
				} else {
					// Engine 3.0 closes a hibernatable socket as the actor stops, as
					// under the official napi 3.0.0 (docs/engine.md): the client
					// connects again, which wakes the actor.
					assert.deepEqual(await messages.whenClosed(), { code: 1012, reason: "actor.stopped" });
					ws = await echo.webSocket("/chat");
					messages = inbox(ws);
					if (ws.readyState !== 1) await new Promise((resolve) => ws.addEventListener("open", resolve, { once: true }));
					ws.send("two");
				}
				assert.equal(await messages.next(), "hello from echo hibernate (wake 2)");
				assert.equal(await messages.next(), "two");
				await waitForLine(app, /echo hibernate awake \(wake 2\)/, { from: slept, what: "the second wake" });
				assert.equal(messages.closed, null);
			} finally {
				ws.close();
			}
		});

		test("telemetry: the app's actions are exported over OTLP as spans", async () => {
			const counter = client.counter.getOrCreate(["traced"]);
			await counter.increment(1);
			const actorId = await counter.resolve();
			const span = await waitFor(
				() => collector.spans().find((s) => s.name === "counter/increment" && attr(s, "rivet.actor.id") === actorId),
				{ timeoutMs: 30_000, what: "the span of counter/increment" },
			);
			assert.equal(attr(span.resource, "service.name"), "rivetkit-app");
			assert.equal(attr(span, "rivet.invocation.type"), "action");
			assert.equal(attr(span, "rivet.actor.name"), "counter");
			assert.equal(attr(span, "rivet.action.name"), "increment");
			assert.equal(span.kind, 2, "kind server");
			assert.equal(
				collector.paths().every((path) => path === "/v1/traces"),
				true,
			);
		});

		test("Ctrl-C: RivetKit drains, the process ends, and the state is there on the next start", async () => {
			const counter = client.counter.getOrCreate(["persisted"]);
			assert.equal(await counter.increment(42), 42);

			assertInterrupted(app, await interrupt(app));
			assert.match(app.out, /counter persisted going to sleep/, "the drain put the actor to sleep");

			assert.match(app.out, /the Rivet Engine stopped/, "the engine the app started stops with it");

			app = startApp("src/server.mjs", port);
			apps.push(app);
			await appReady(app, "the restarted app");
			assert.match(app.out, /starting Rivet Engine/i, "the restart starts the engine again, on the same storage");
			assert.equal(await counter.getCount(), 42);

			// Ctrl-C at once, while the engine is still waking the actors the
			// last run put to sleep. Engine 2.3.19 sends no stop to actors it is
			// still starting when the host says it is stopping; the drain asks
			// again for those, so every actor that woke is put to sleep (its state
			// saved) well within the bound.
			assertInterrupted(app, await interrupt(app));
			const names = (re) => [...app.out.matchAll(re)].map((m) => m[1]).sort();
			const woke = names(/^(\w+ \S+) awake/gm);
			assert.ok(woke.length > 0, app.out);
			assert.deepEqual(names(/^(\w+ \S+) going to sleep/gm), woke, "every actor that woke went to sleep");
		});

		test("a refused feature gives the client a structured error; the actor keeps serving", async () => {
			// test/unsupported-server.mjs: the same actors plus `jobs`, whose
			// `enqueue` uses the actor runtime socket without enabling it
			// (`actor_runtime_socket.not_enabled`). Its own pool:
			// after a pool's host restarted, engine 2.3.19 is slow to place new
			// actors in that pool.
			// The JavaScript stacks of failed calls are logged at debug level.
			// On an engine of its own (port and storage): the app before it stopped
			// the engine it started, and engine 2.3.19 restarted over that data is
			// slow to place actors while it reschedules the old ones.
			const fixturePort = (await findFreePorts()).guard;
			app = startApp("test/unsupported-server.mjs", fixturePort, {
				RIVET_POOL: FIXTURE_POOL,
				RIVET_LOG_LEVEL: "",
				RUST_LOG: "info,rivetkit_native_core::routing::failure=debug",
				RIVETKIT_STORAGE_PATH: fixtureStorage,
			});
			apps.push(app);
			await appReady(app, "the fixture app");
			const fixture = createClient({ endpoint: `http://127.0.0.1:${fixturePort}`, poolName: FIXTURE_POOL });
			const jobs = fixture.jobs.getOrCreate(["unsupported"]);
			assert.equal(await jobs.ping(), "pong (0 submitted)");

			const isRefused = (err) => {
				assert.equal(err.group, "actor_runtime_socket");
				assert.equal(err.code, "not_enabled");
				return true;
			};
			await assert.rejects(jobs.enqueue({ task: "resize" }), isRefused);
			assert.equal(await jobs.ping(), "pong (0 submitted)", "the actor keeps serving");
			// `c.cron.every` reaches a native method RivetKit calls without
			// decoding its error: the client still gets exactly our error, public.
			await assert.rejects(jobs.every(), (err) => {
				assert.equal(err.group, "schedule");
				assert.equal(err.code, "invalid_interval");
				assert.equal(err.message, "Schedule interval must be at least 5000 ms; received 1000 ms.");
				assert.deepEqual(err.metadata, { intervalMs: 1000, minimumMs: 5000 });
				return true;
			});

			// A plain Error thrown in an action or a queue check: masked for
			// the client, and logged the same way for every transport.
			const isInternal = (err) => {
				assert.equal(`${err.group}.${err.code}`, "rivetkit.internal_error", err.message);
				assert.doesNotMatch(err.message, /crashed/);
				return true;
			};
			await assert.rejects(jobs.crash(), isInternal);
			await assert.rejects(jobs.send("checked", { task: "resize" }, { wait: true, timeout: 5_000 }), isInternal);

			const conn = jobs.connect();
			try {
				await assert.rejects(conn.enqueue({ task: "resize" }), isRefused);
				assert.equal(await conn.ping(), "pong (0 submitted)", "the connection survives the error");
				await assert.rejects(conn.crash(), isInternal);
				assert.equal(await conn.ping(), "pong (0 submitted)", "the connection survives a crash");
			} finally {
				await conn.dispose();
			}

			// One warn line per failed call, naming the actor, the call, the
			// transport and the real message; its JavaScript stack at debug.
			const failed = (what, transport) =>
				app.out
					.split("\n")
					.filter(
						(l) => l.includes(` WARN `) && l.includes(`${what} failed`) && l.includes(`transport="${transport}"`),
					);
			for (const [what, transport, message] of [
				["action `crash`", "http", "the action crashed on purpose"],
				["action `crash`", "websocket", "the action crashed on purpose"],
				["queue send to `checked`", "http", "the publisher check crashed"],
			]) {
				const lines = failed(what, transport);
				assert.equal(lines.length, 1, `${what} over ${transport}:\n${app.out}`);
				assert.match(lines[0], new RegExp(message));
				assert.match(lines[0], /actor="jobs"/);
				assert.match(lines[0], /key="unsupported"/);
			}
			assert.match(
				app.out,
				/DEBUG .*JavaScript stack of the action `crash` failure:\nError: the action crashed on purpose\n\s+at crash \(file:.*unsupported-server\.mjs/,
			);
			// A refused feature is a public error: the client has all of it,
			// so the server logs it at debug, not warn.
			assert.equal(failed("action `enqueue`", "http").length, 0);

			assertInterrupted(app, await interrupt(app));
		});
	});
}
