// Test fixture (not part of the example): actors with streamed raw HTTP
// bodies and a hibernatable raw WebSocket, for __test__/streams.test.mjs
// and __test__/raw-websocket-hibernation.test.mjs. Lives inside the
// example so that "rivetkit" resolves from the example's own node_modules.
//
//   node test/streams-server.mjs

import { createHash } from "node:crypto";

import { actor, setup } from "rivetkit";

const name = (c) => c.key.join("/");
const encoder = new TextEncoder();

// What `/sse` waits for before its second event, per actor key: `/release`
// resolves it. The handler cannot finish before the test has read the
// first event, so that event must have been delivered on its own.
const releases = new Map();
const release = (key) => {
	if (!releases.has(key)) {
		let resolve;
		const promise = new Promise((r) => (resolve = r));
		releases.set(key, { promise, resolve });
	}
	return releases.get(key);
};

const streamer = actor({
	options: { sleepTimeout: 60_000 },
	onRequest: async (c, request) => {
		const path = new URL(request.url).pathname;
		const key = name(c);
		if (path.endsWith("/sse")) {
			const gate = release(key);
			const body = new ReadableStream({
				async start(controller) {
					controller.enqueue(encoder.encode("event: greeting\ndata: first\n\n"));
					await gate.promise;
					controller.enqueue(encoder.encode("event: greeting\ndata: second\n\n"));
					controller.close();
					releases.delete(key);
				},
			});
			return new Response(body, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache" } });
		}
		if (path.endsWith("/release")) {
			release(key).resolve();
			return new Response("released");
		}
		if (path.endsWith("/endless")) {
			// Writes until the client goes away; its cancel is logged.
			let timer;
			let sent = 0;
			const body = new ReadableStream({
				pull(controller) {
					return new Promise((resolve) => {
						timer = setTimeout(() => {
							sent += 1;
							controller.enqueue(encoder.encode(`data: ${sent}\n\n`));
							resolve();
						}, 20);
					});
				},
				cancel() {
					clearTimeout(timer);
					console.log(`streamer ${key} endless cancelled after ${sent}`);
				},
			});
			return new Response(body, { headers: { "content-type": "text/event-stream" } });
		}
		if (path.endsWith("/upload")) {
			// Counts the upload as it arrives, sampling this process's RSS.
			// With --expose-gc, garbage is collected every 8 MiB so that RSS
			// shows what is held rather than chunks awaiting collection.
			const rssBefore = process.memoryUsage().rss;
			let rssPeak = rssBefore;
			let bytes = 0;
			let chunks = 0;
			const reader = request.body.getReader();
			for (;;) {
				const { done, value } = await reader.read();
				if (done) break;
				bytes += value.byteLength;
				chunks += 1;
				if (chunks % 16 === 0) rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
				if (chunks % 128 === 0) globalThis.gc?.();
			}
			rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
			return Response.json({ bytes, chunks, rssBefore, rssPeak });
		}
		if (path.endsWith("/digest")) {
			// The body's length and SHA-256, read through the Web stream.
			const body = Buffer.from(await request.arrayBuffer());
			return Response.json({ bytes: body.length, sha256: createHash("sha256").update(body).digest("hex") });
		}
		if (path.endsWith("/download")) {
			// `n` chunks of 64 KiB, each written as the reader asks for it.
			const n = Number(new URL(request.url).searchParams.get("n") ?? "16");
			let i = 0;
			const body = new ReadableStream({
				pull(controller) {
					if (i === n) return controller.close();
					controller.enqueue(new Uint8Array(64 * 1024).fill(i % 256));
					i += 1;
				},
			});
			return new Response(body, { headers: { "content-type": "application/octet-stream" } });
		}
		if (path.endsWith("/fail")) {
			// Breaks after `/release`, so the client has read the status and
			// the first bytes: an error before them would end the connection
			// before the response head, a different case.
			const gate = release(key);
			const body = new ReadableStream({
				async start(controller) {
					controller.enqueue(encoder.encode("partial"));
					await gate.promise;
					releases.delete(key);
					controller.error(new Error("stream broke"));
				},
			});
			return new Response(body);
		}
		return new Response("not found", { status: 404 });
	},
	actions: {
		ping: () => "pong",
	},
});

// Raw WebSockets: `socket` survives sleep (`canHibernateWebSocket`),
// `plainSocket` does not. Each text message `n` is answered `echo <n>
// wakes=<wakes> messages=<count>`; `sleep` puts the actor to sleep while
// the socket is open.
const socketActor = (label, canHibernateWebSocket) =>
	actor({
		state: { wakes: 0, messages: 0 },
		options: { canHibernateWebSocket, sleepTimeout: 1_000 },
		onWake: (c) => {
			c.state.wakes += 1;
			console.log(`${label} ${name(c)} awake ${c.state.wakes}`);
		},
		onSleep: (c) => {
			console.log(`${label} ${name(c)} going to sleep`);
		},
		onWebSocket: (c, websocket) => {
			console.log(`${label} ${name(c)} websocket open`);
			websocket.addEventListener("message", (event) => {
				c.state.messages += 1;
				if (event.data === "sleep") {
					websocket.send("sleeping");
					c.sleep();
					return;
				}
				websocket.send(`echo ${event.data} wakes=${c.state.wakes} messages=${c.state.messages}`);
			});
			websocket.addEventListener("close", (event) => {
				console.log(`${label} ${name(c)} websocket closed ${event.code}`);
			});
		},
		actions: {
			wakes: (c) => c.state.wakes,
		},
	});

const socket = socketActor("socket", true);
const plainSocket = socketActor("plain", false);

export const registry = setup({ use: { streamer, socket, plainSocket } });
registry.start();
