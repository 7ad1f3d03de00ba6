// Raw WebSockets (`onWebSocket`, ../shared/spec/websocket-actor-connect.md
// §6) through the real engine's gateway, with a plain WebSocket client
// (`ws`): echo of text and binary frames, closes from either side with
// their code and reason, an invalid UTF-8 text frame, a failing
// `onWebSocket`, and events sent before the actor set its event callback.
// After every case the actor still serves a fresh socket. The cases run on
// engine 3.0 and on 2.3, which differ in what a client's close looks like
// to the actor.

import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { ARCHES, createActor, startEngine, TOKEN_PROTOCOL, upsertRunnerConfig, waitFor } from "./helpers/engine.mjs";
import { native, serveActors } from "./helpers/actors.mjs";
import { bridgedError, cborDecode } from "./helpers/client.mjs";

const TIMEOUT_MS = 15_000;

/**
 * Opens `ws://<guard>/gateway/<actorId><path>` offering `rivet` (plus
 * `protocols`). Messages are collected from the start; `closed` resolves to
 * `{code, reason}`.
 */
function openSocket(engine, actorId, path, { protocols = [] } = {}) {
	const url = `ws://127.0.0.1:${engine.guardPort}/gateway/${encodeURIComponent(actorId)}${path}`;
	const ws = new WebSocket(url, ["rivet", TOKEN_PROTOCOL, ...protocols]);
	const messages = [];
	let wake = () => {};
	ws.on("message", (data, isBinary) => {
		messages.push({ data: Buffer.from(data), binary: isBinary });
		wake();
	});
	let closeInfo = null;
	const closed = new Promise((resolve) => {
		ws.on("close", (code, reason) => {
			closeInfo = { code, reason: reason.toString() };
			wake();
			resolve(closeInfo);
		});
	});
	const opened = new Promise((resolve, reject) => {
		ws.once("open", resolve);
		ws.once("unexpected-response", (_req, res) => reject(new Error(`upgrade answered HTTP ${res.statusCode}`)));
		ws.once("error", reject);
	});
	opened.catch(() => {});
	ws.on("error", () => {});
	let cursor = 0;
	return {
		ws,
		messages,
		opened,
		closed,
		get closeInfo() {
			return closeInfo;
		},
		/** The next message not yet consumed. */
		async next(what = "a message") {
			const deadline = Date.now() + TIMEOUT_MS;
			for (;;) {
				if (cursor < messages.length) return messages[cursor++];
				if (closeInfo)
					throw new Error(`socket closed (${closeInfo.code} ${closeInfo.reason}) while waiting for ${what}`);
				const left = deadline - Date.now();
				if (left <= 0) throw new Error(`timed out waiting for ${what}`);
				await new Promise((resolve) => {
					const timer = setTimeout(resolve, left);
					wake = () => {
						clearTimeout(timer);
						resolve();
					};
				});
			}
		},
		close(code = 1000, reason = "test done") {
			if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(code, reason);
			return closed;
		},
	};
}

/** Waits for the close and asserts its code and reason. */
async function assertClosed(socket, code, reason, what) {
	let timer;
	const timeout = new Promise((_, reject) => {
		timer = setTimeout(() => reject(new Error(`${what}: no close within ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
	});
	const info = await Promise.race([socket.closed, timeout]).finally(() => clearTimeout(timer));
	assert.equal(info.code, code, `${what}: close code (reason "${info.reason}")`);
	if (reason !== undefined) assert.equal(info.reason, reason, `${what}: close reason`);
	return info;
}

/** How a client's close reaches the actor through engine 3.0's gateway. */
const GATEWAY_DISCONNECTED = { code: 1001, reason: "gateway disconnected", wasClean: false };

// Engine 2.3 passes a client's close (code, reason) on to the actor;
// engine 3.0 does not (below). Everything else is the same on both.
for (const arch of ARCHES) {
	describe(`raw WebSockets (onWebSocket), engine ${arch}`, () => {
		let engine;
		let host;
		let actorId;
		/** `{connId, uri, method, params, protocols}` per `onWebSocket` call. */
		const opened = [];
		/** Events seen by the actor's event callbacks, with their connection id. */
		const events = [];
		/** Connection ids in `onConnect` / `onDisconnect` order. */
		const connected = [];
		const disconnected = [];

		const eventsOf = (connId) => events.filter((e) => e.connId === connId);
		const openedOn = async (uri) =>
			waitFor(() => opened.find((o) => o.uri === uri), { what: `onWebSocket for ${uri}`, timeoutMs: TIMEOUT_MS });

		/** A fresh socket on `path` echoes text and binary frames. */
		async function assertEchoWorks(path = "/websocket/echo") {
			const socket = openSocket(engine, actorId, path);
			try {
				await socket.opened;
				socket.ws.send("still here");
				const text = await socket.next("the text echo");
				assert.deepEqual([text.binary, text.data.toString()], [false, "still here"]);
				socket.ws.send(Buffer.from([1, 2, 3]));
				const binary = await socket.next("the binary echo");
				assert.deepEqual([binary.binary, [...binary.data]], [true, [1, 2, 3]]);
			} finally {
				await socket.close();
			}
		}

		before(async () => {
			engine = await startEngine({ arch });
			const echo = new native.NapiActorFactory({
				onConnect: async (_e, { conn }) => {
					connected.push(conn.id());
				},
				onDisconnect: async (_e, { conn }) => {
					disconnected.push(conn.id());
				},
				onWebSocket: async (_e, { conn, ws, request }) => {
					const connId = conn.id();
					opened.push({
						connId,
						uri: request?.uri,
						method: request?.method,
						params: cborDecode(conn.params()),
						protocols: request?.headers?.["sec-websocket-protocol"],
					});
					if (request?.uri.startsWith("/websocket/throw")) {
						throw bridgedError({ group: "user", code: "ws_refused", message: "no sockets today" });
					}
					const onEvent = (event) => {
						events.push({ connId, ...event });
						if (event.kind !== "message") return;
						if (!event.binary && event.data === "throw") throw new Error("event callback failure");
						if (!event.binary && event.data.startsWith("close:")) {
							const [, code, reason] = event.data.split(":");
							void ws.close(Number(code), reason);
							return;
						}
						// Text arrives as a string, binary as a Buffer.
						ws.send(event.binary ? event.data : Buffer.from(event.data), event.binary);
					};
					if (request?.uri.startsWith("/websocket/late")) {
						// Frames sent meanwhile wait for the callback.
						setTimeout(() => ws.setEventCallback(onEvent), 300);
					} else {
						ws.setEventCallback(onEvent);
					}
				},
			});
			host = await serveActors(engine, { echo });
			actorId = (await createActor(engine.endpoint, { name: "echo", key: "raw", pool: host.pool })).actor_id;
		});

		after(async () => {
			await host?.stop();
			await engine?.stop();
		});

		test("text and binary frames are echoed; params and request reach onWebSocket", async () => {
			const params = { name: "ada", n: 1 };
			const socket = openSocket(engine, actorId, "/websocket/echo?x=1", {
				protocols: [`rivet_conn_params.${encodeURIComponent(JSON.stringify(params))}`],
			});
			try {
				await socket.opened;
				const open = await openedOn("/websocket/echo?x=1");
				assert.deepEqual(open.params, params);
				assert.equal(open.method, "GET");
				assert.match(open.protocols, /rivet_conn_params\./);
				assert.ok(connected.includes(open.connId), "onConnect ran for the socket's connection");

				socket.ws.send("héllo ✓");
				const text = await socket.next("the text echo");
				assert.equal(text.binary, false);
				assert.equal(text.data.toString("utf8"), "héllo ✓");

				const bytes = Buffer.from([0, 255, 1, 254, 0x80]);
				socket.ws.send(bytes);
				const binary = await socket.next("the binary echo");
				assert.equal(binary.binary, true);
				assert.deepEqual(binary.data, bytes);

				// No size limit on raw frames (the actor-connect limit is 64 KiB).
				const big = Buffer.alloc(300 * 1024, 7);
				socket.ws.send(big);
				const bigEcho = await socket.next("the big binary echo");
				assert.equal(bigEcho.data.length, big.length);
				assert.ok(bigEcho.data.equals(big));

				const messages = eventsOf(open.connId).filter((e) => e.kind === "message");
				assert.deepEqual(
					messages.map((e) => [typeof e.data, e.binary, typeof e.messageIndex]),
					[
						["string", false, "number"],
						["object", true, "number"],
						["object", true, "number"],
					],
				);
				assert.ok(Buffer.isBuffer(messages[1].data));
			} finally {
				await socket.close();
			}
		});

		test("a client close reaches the actor's close event, then onDisconnect", async () => {
			const socket = openSocket(engine, actorId, "/websocket/echo?case=client-close");
			await socket.opened;
			const open = await openedOn("/websocket/echo?case=client-close");
			socket.ws.send("ping");
			await socket.next("the echo");
			await socket.close(4000, "client bye");
			const close = await waitFor(() => eventsOf(open.connId).find((e) => e.kind === "close"), {
				what: "the actor's close event",
			});
			const clientClose = { code: 4000, reason: "client bye", wasClean: false };
			if (arch === "v3") {
				// Engine 3.0's gateway passes the client's close on or closes
				// 1001 "gateway disconnected", whichever it sees first: the
				// close frame or the client's connection ending (docs/engine.md,
				// "Closing a socket"; both seen in fresh-clone runs).
				assert.ok(
					isDeepStrictEqual(close, { connId: open.connId, kind: "close", ...clientClose }) ||
						isDeepStrictEqual(close, { connId: open.connId, kind: "close", ...GATEWAY_DISCONNECTED }),
					JSON.stringify(close),
				);
			} else {
				assert.deepEqual(close, { connId: open.connId, kind: "close", ...clientClose });
			}
			await waitFor(() => disconnected.includes(open.connId), { what: "onDisconnect" });
			assert.equal(eventsOf(open.connId).filter((e) => e.kind === "close").length, 1, "one close event");

			// A normal close is clean.
			const clean = openSocket(engine, actorId, "/websocket/echo?case=clean-close");
			await clean.opened;
			const cleanOpen = await openedOn("/websocket/echo?case=clean-close");
			await clean.close(1000, "done");
			const cleanClose = await waitFor(() => eventsOf(cleanOpen.connId).find((e) => e.kind === "close"), {
				what: "the clean close event",
			});
			if (arch === "v3") {
				// Either, as above.
				const passed = cleanClose.code === 1000 && cleanClose.reason === "done";
				if (!passed) assert.deepEqual(cleanClose, { connId: cleanOpen.connId, kind: "close", ...GATEWAY_DISCONNECTED });
			} else {
				assert.equal(cleanClose.code, 1000);
				assert.equal(cleanClose.wasClean, true);
			}
			await waitFor(() => disconnected.includes(cleanOpen.connId), { what: "onDisconnect (clean)" });

			await assertEchoWorks();
		});

		test("ws.close(code, reason) from the actor reaches the client", async () => {
			const socket = openSocket(engine, actorId, "/websocket/echo?case=server-close");
			await socket.opened;
			const open = await openedOn("/websocket/echo?case=server-close");
			socket.ws.send("close:4001:server says bye");
			await assertClosed(socket, 4001, "server says bye", "server-initiated close");
			const close = await waitFor(() => eventsOf(open.connId).find((e) => e.kind === "close"), {
				what: "the actor's own close event",
			});
			assert.deepEqual([close.code, close.reason, close.wasClean], [4001, "server says bye", false]);
			await waitFor(() => disconnected.includes(open.connId), { what: "onDisconnect after a server close" });
			await assertEchoWorks();
		});

		test("a text frame that is not UTF-8 is never delivered; the socket closes", async () => {
			const socket = openSocket(engine, actorId, "/websocket/echo?case=utf8");
			await socket.opened;
			const open = await openedOn("/websocket/echo?case=utf8");
			socket.ws.send(Buffer.from([0x68, 0x69, 0xc3, 0x28]), { binary: false });
			const info = await Promise.race([
				socket.closed,
				new Promise((_, reject) => setTimeout(() => reject(new Error("no close after invalid UTF-8")), TIMEOUT_MS)),
			]);
			if (info.code === 1007) {
				// The frame reached the actor's host, which closes 1007.
				assert.equal(info.reason, "message.invalid_utf8");
			} else {
				// Engine 2.3.19's gateway checks UTF-8 itself: it fails the
				// socket (1011 `core.internal_error#<ray>`) and tells the host
				// the socket closed. The host's own 1007 path is covered by the
				// core's unit tests (actor::websocket).
				assert.equal(info.code, 1011, `close reason "${info.reason}"`);
			}
			const close = await waitFor(() => eventsOf(open.connId).find((e) => e.kind === "close"), {
				what: "the actor's close event",
			});
			assert.equal(close.wasClean, false);
			await waitFor(() => disconnected.includes(open.connId), { what: "onDisconnect after the bad frame" });
			assert.equal(
				eventsOf(open.connId).filter((e) => e.kind === "message").length,
				0,
				"the bad frame is not delivered",
			);
			await assertEchoWorks();
		});

		test("onWebSocket that throws closes 1011 <group>.<code>", async () => {
			const socket = openSocket(engine, actorId, "/websocket/throw");
			await assertClosed(socket, 1011, "user.ws_refused", "failing onWebSocket");
			const open = await openedOn("/websocket/throw");
			await waitFor(() => disconnected.includes(open.connId), { what: "onDisconnect after a failed onWebSocket" });
			await assertEchoWorks();
		});

		test("a throw from the event callback is contained: the socket keeps working", async () => {
			const socket = openSocket(engine, actorId, "/websocket/echo?case=throw");
			try {
				await socket.opened;
				socket.ws.send("throw");
				socket.ws.send("after the throw");
				assert.equal((await socket.next("the echo after a throw")).data.toString(), "after the throw");
			} finally {
				await socket.close();
			}
			await assertEchoWorks();
		});

		test("frames sent before the event callback is set are delivered in order", async () => {
			const socket = openSocket(engine, actorId, "/websocket/late");
			try {
				await socket.opened;
				const sent = ["one", "two", "three", "four", "five"];
				for (const text of sent) socket.ws.send(text);
				const got = [];
				for (let i = 0; i < sent.length; i++) got.push((await socket.next(`echo ${i + 1}`)).data.toString());
				assert.deepEqual(got, sent);
				const open = await openedOn("/websocket/late");
				const indexes = eventsOf(open.connId).map((e) => e.messageIndex);
				assert.deepEqual(
					[...indexes].sort((a, b) => a - b),
					indexes,
					"message indexes are in order",
				);
			} finally {
				await socket.close();
			}
			await assertEchoWorks();
		});
	});
}

// A child process that serves an actor with a raw socket whose event
// callback is set, shuts down when told to over that socket, and must then
// exit by itself: the socket's callback never holds Node's event loop.
const EXIT_CHILD = `
import { createRequire } from "node:module";
const native = createRequire(process.env.ADDON)(process.env.ADDON);
const registry = new native.CoreRegistry();
let serving;
registry.register("echo", new native.NapiActorFactory({
	onWebSocket: async (_e, { ws }) => {
		ws.setEventCallback((event) => {
			if (event.kind !== "message") return;
			if (event.data === "shutdown") {
				void registry.shutdown().then(() => serving).then(() => console.log("shutdown-complete"));
				return;
			}
			ws.send(Buffer.from(event.data), false);
		});
	},
}));
serving = registry.serve({ endpoint: process.env.ENDPOINT, poolName: process.env.POOL, engineSpawn: "never" });
serving.catch((err) => console.error(err));
await registry.waitReady();
console.log("ready");
`;

describe("raw WebSockets and the event loop", () => {
	let engine;
	before(async () => {
		engine = await startEngine({ arch: "v3" });
	});
	after(async () => {
		await engine?.stop();
	});

	test("a host with a raw socket and its event callback exits by itself after shutdown", async () => {
		const pool = `raw-exit-${process.pid}`;
		await upsertRunnerConfig(engine.endpoint, pool);
		const child = spawn(process.execPath, ["--input-type=module", "-e", EXIT_CHILD], {
			env: {
				...process.env,
				ADDON: fileURLToPath(new URL("../index.js", import.meta.url)),
				ENDPOINT: engine.endpoint,
				POOL: pool,
				RIVET_LOG_LEVEL: "warn",
			},
			stdio: ["ignore", "pipe", "pipe"],
		});
		let stdout = "";
		let stderr = "";
		child.stdout.on("data", (d) => (stdout += d));
		child.stderr.on("data", (d) => (stderr += d));
		const exited = once(child, "exit");
		try {
			await waitFor(() => stdout.includes("ready"), { what: "the child serving", timeoutMs: 30_000 });
			const actor = await createActor(engine.endpoint, { name: "echo", key: "exit", pool });
			const socket = openSocket(engine, actor.actor_id, "/websocket/exit");
			await socket.opened;
			socket.ws.send("hi");
			assert.equal((await socket.next("the echo")).data.toString(), "hi");
			socket.ws.send("shutdown");
			await waitFor(() => stdout.includes("shutdown-complete"), { what: "the child's shutdown", timeoutMs: 30_000 });
			await socket.close();
		} catch (err) {
			child.kill("SIGKILL");
			throw new Error(`${err.message}\nchild stdout:\n${stdout}\nchild stderr:\n${stderr}`);
		}
		const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
		const [code, signal] = await exited;
		clearTimeout(timer);
		assert.equal(signal, null, `the child did not exit by itself within 5 s (killed)\n${stderr}`);
		assert.equal(code, 0, stderr);
	});
});
