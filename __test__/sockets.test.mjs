// The addon sets socket options only on the sockets it opened itself: the
// envoy client turns Nagle off on its own connection to the engine. A socket
// the application opened, even one to the engine's own address, keeps the
// options the application gave it while the addon serves actors and handles
// actions. (An earlier version set TCP_NODELAY and TCP_QUICKACK on every TCP
// socket of the process it found in /proc/self/fd.)
//
// Node cannot read a socket option, so the probe `testingSocketNoDelay(fd)`
// comes from the build with the `testing` feature (`npm run build:testing`),
// which also serves the actors here: one addon in the process.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import net from "node:net";
import { after, before, test } from "node:test";

import { cborDecode, cborEncode, officialClient } from "./helpers/client.mjs";
import { startEngine } from "./helpers/engine.mjs";

const require = createRequire(import.meta.url);
const testing = require("../target/testing/rivetkit-native.node");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A TCP connection to `endpoint` (host and port of a URL), with `noDelay` as given. */
async function openSocket(endpoint, noDelay) {
	const { hostname, port } = new URL(endpoint);
	const socket = net.connect({ host: hostname, port: Number(port), noDelay });
	await new Promise((resolve, reject) => {
		socket.once("connect", resolve);
		socket.once("error", reject);
	});
	return socket;
}

/** The socket's file descriptor, from Node's TCP handle. */
function fdOf(socket) {
	const fd = socket._handle?.fd;
	assert.ok(Number.isInteger(fd) && fd >= 0, `the socket has no file descriptor (${fd}): was it closed?`);
	return fd;
}

/** Whether `text` holds a whole HTTP/1.1 response (Content-Length or chunked). */
function completeResponse(text) {
	const headerEnd = text.indexOf("\r\n\r\n");
	if (headerEnd < 0) return false;
	const headers = text.slice(0, headerEnd).toLowerCase();
	const body = text.slice(headerEnd + 4);
	const length = /\r\ncontent-length:\s*(\d+)/.exec(headers);
	if (length) return Buffer.byteLength(body) >= Number(length[1]);
	if (/\r\ntransfer-encoding:\s*chunked/.test(headers)) return body.endsWith("0\r\n\r\n");
	return true;
}

/** One keep-alive `GET /health` on the raw socket; resolves with the whole answer. */
function healthRoundTrip(socket, host) {
	return new Promise((resolve, reject) => {
		let text = "";
		const done = (settle, value) => {
			socket.off("data", onData);
			socket.off("error", onError);
			socket.off("close", onClose);
			settle(value);
		};
		const onData = (chunk) => {
			text += chunk.toString();
			if (completeResponse(text)) done(resolve, text);
		};
		const onError = (err) => done(reject, err);
		const onClose = () => done(reject, new Error("the engine closed the application's socket"));
		socket.on("data", onData);
		socket.on("error", onError);
		socket.on("close", onClose);
		socket.write(`GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: keep-alive\r\n\r\n`);
	});
}

function counterFactory() {
	return new testing.NapiActorFactory(
		{
			createState: async () => cborEncode({ count: 0 }),
			actions: {
				increment: async (_err, { ctx, args }) => {
					const [by = 1] = cborDecode(args);
					const next = { count: cborDecode(ctx.state()).count + by };
					await ctx.saveState({ state: cborEncode(next) });
					return cborEncode(next.count);
				},
			},
		},
		{ sleepTimeoutMs: 60_000 },
	);
}

let engine;
let registry;
let serving;
const sockets = [];

before(async () => {
	engine = await startEngine({ arch: "v3" });
});

after(async () => {
	for (const socket of sockets) socket.destroy();
	if (registry) {
		await registry.shutdown();
		await serving;
	}
	await engine?.stop();
});

test("the probe reads TCP_NODELAY", async () => {
	const on = await openSocket(engine.endpoint, true);
	const off = await openSocket(engine.endpoint, false);
	sockets.push(on, off);
	assert.equal(testing.testingSocketNoDelay(fdOf(on)), true);
	assert.equal(testing.testingSocketNoDelay(fdOf(off)), false);
	assert.throws(() => testing.testingSocketNoDelay(-1));
});

test("a socket the application opened to the engine keeps Nagle on while actors serve", async () => {
	const host = new URL(engine.endpoint).host;
	// Opened before the addon serves, and used while it does.
	const appSocket = await openSocket(engine.endpoint, false);
	sockets.push(appSocket);
	const fd = fdOf(appSocket);
	assert.match(await healthRoundTrip(appSocket, host), /^HTTP\/1\.1 200/);
	assert.equal(testing.testingSocketNoDelay(fd), false);

	registry = new testing.CoreRegistry();
	registry.register("counter", counterFactory());
	const pool = `sockets-${process.pid}`;
	serving = registry.serve({ endpoint: engine.endpoint, poolName: pool, engineSpawn: "never" });
	serving.catch(() => {});
	await registry.waitReady();

	const client = officialClient(engine, pool, "bare");
	try {
		const handle = client.counter.getOrCreate(["sockets"]);
		const conn = handle.connect();
		try {
			let expected = 0;
			for (let round = 0; round < 20; round++) {
				assert.equal(await handle.increment(1), ++expected);
				assert.equal(await conn.increment(1), ++expected);
				// The application's own socket carries traffic meanwhile.
				assert.match(await healthRoundTrip(appSocket, host), /^HTTP\/1\.1 200/);
				await sleep(10);
			}
		} finally {
			await conn.dispose();
		}
	} finally {
		await client.dispose();
	}

	assert.equal(fdOf(appSocket), fd, "the application's socket is the one it opened");
	assert.equal(testing.testingSocketNoDelay(fd), false, "TCP_NODELAY was set on a socket the addon did not open");
});
